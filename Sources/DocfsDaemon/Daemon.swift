import CLinux
import DocfsCore
import DocfsFUSE
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import DocfsRemotePostgres
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The process that serves one store (DESIGN §4 C7): holds the store's lock and serves every
/// mount of it — the user view and app views — each a FUSE session with its own loop threads,
/// over one `ServedStore` (one coordinator, one index). It starts with one mount; `docfs mount`
/// of the same store adds more through the control socket. It unmounts everything cleanly on
/// SIGTERM, SIGINT or SIGHUP (a signal thread waits for them; they are blocked everywhere
/// else), and exits when its last mount is gone.
///
/// Lock order: `mounts` is a leaf lock, held to change or copy the list only — never across a
/// mount's session, a reply to the kernel or an invalidation.
public final class Daemon: Sendable {
    private let shared: ServedStore
    /// The user view, mounted or not: control requests name documents by its paths.
    private let primary: Filesystem
    private let lock: StoreLock
    private let logger: Logger
    private let options: FUSEMount.Options
    private let timeout: Double
    private let mounts = Mutex<[ServedMount]>([])
    /// The store's watcher, nil when inotify could not watch the store at all.
    private let watcher: StoreWatcher?
    /// The store's index (also the stitcher's), for bookmarks resolved for other users.
    private let index: IndexDatabase?
    /// Signalled each time a mount's session ends.
    private let ended = ThreadSemaphore()
    /// The sync of a linked store (issue 22); nil while it is not linked. Leaf lock, held to
    /// swap or copy it only.
    private let syncService = Mutex<SyncService?>(nil)

    /// One mount the daemon serves.
    private struct ServedMount: Sendable {
        let mountPoint: String
        let filesystem: Filesystem
        let mount: FUSEMount
    }

    /// Takes the store (its lock), mounts the first view and starts answering on the control
    /// socket; `serve` then runs the mounts' sessions.
    public convenience init(_ configuration: DaemonConfiguration) throws(DocfsError) {
        try self.init(storePath: configuration.storePath, mountPoint: configuration.mountPoint, app: configuration.app,
                      options: configuration.options, logLevel: configuration.logLevel)
    }

    private init(storePath: String, mountPoint: String, app: ContainerID?, options: FUSEMount.Options, logLevel: Logger.Level) throws(DocfsError) {
        umask(0)  // the kernel already applied the caller's umask
        // Before any thread is made (logging, the index, thumbnail workers): a thread made with
        // the signals unblocked could take a SIGTERM, whose default action ends the daemon
        // without unmounting (as `kill` from a shell or systemd's stop did).
        SignalThread.blockTerminationSignals()
        signal(SIGPIPE, SIG_IGN)  // a launcher or log reader that went away must not kill the daemon
        Self.raiseDescriptorLimit()
        Self.presizeDescriptorTable()
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = logLevel
            return handler
        }
        var logger = Logger(label: "docfs")
        logger.logLevel = logLevel
        self.logger = logger
        self.options = options
        let store = try LocalStore(path: storePath)
        let logPolicy = try LogPolicy.load(from: store.layout.settingsFile)
        lock = try StoreLock(store: store, mountPoint: mountPoint)
        store.versions.removeLeftovers()
        // The watches are in place before the daemon answers its first request, so every
        // change docfs makes is seen (an unseen own change would leave a record that hides
        // someone else's later one).
        let rechecks = StoreRechecks()
        watcher = Self.makeWatcher(store: store, rechecks: rechecks, logger: logger)
        timeout = options.cacheTimeout ?? (watcher == nil ? Self.unwatchedCacheTimeout : Self.watchedCacheTimeout)
        let index = try Self.openIndex(store: store, logger: logger)
        self.index = index
        shared = try ServedStore(store: store, index: index,
                                 thumbnailWorker: options.thumbnails ? [Self.executablePath(), "thumbnail-worker"] : nil,
                                 storeRechecks: rechecks)
        primary = try Filesystem(serving: shared, view: .user, cachePolicy: Self.cachePolicy(timeout, options))
        let indexLogger = logger
        let thumbnailLogger = logger
        shared.onThumbnailProblem { problem in thumbnailLogger.notice("\(problem)") }
        let problemLogger = logger
        shared.onProblem { problem in problemLogger.warning("\(problem)") }
        shared.onIndexFailure { error in
            indexLogger.error("the index could not be updated (queries may miss this change until the next mount, or `docfs index rebuild`): \(error)")
        }
        try addMount(at: mountPoint, app: app)
        if let link = try RemoteLink.load(store.layout) {
            let service = try SyncService(shared: shared, link: link, contentView: primary, logger: logger)
            service.start()
            syncService.withLock { $0 = service }
            logger.notice("syncing with \(link.uri) as \(link.machine)")
        }
        let log = logger
        let primary = self.primary
        let servedIndex = index
        let control = try ControlServer(store: store.layout, handle: { [unowned self] request, caller in
            handle(request, caller: caller)
        }, stream: { request, connection in
            if request.kind == .query {
                QueryStream.serve(request.query, on: connection, index: servedIndex, logger: log)
            } else if request.kind == .watch {
                WatchStream.serve(request.path, app: request.view.flatMap { try? ContainerID($0) }, on: connection,
                                  presenters: primary.presenters, userView: primary.shared.userView,
                                  references: { item, app in primary.referencePlaces(to: item, in: app) })
            } else {
                IndexWalkStream.serve(request.kind == .checkIndex ? .check : .rebuild, on: connection, filesystem: primary, logger: log)
            }
        })
        control.start()
        if let watcher { watch(watcher) }
        let rotationLogger = logger
        DaemonLogRotation.start(path: store.layout.daemonLog, limit: logPolicy.maximumSize) { rotationLogger.notice("\($0)") }
        // Who made the current versions goes to the store every few seconds (VersionMakers).
        let makers = shared
        DetachedThread.start {
            let tick = ThreadSemaphore()
            while true {
                tick.wait(seconds: Self.makersInterval)
                makers.saveMakers()
            }
        }
        logger.notice("serving \(store.layout.root) at \(mountPoint)\(app.map { " (the app view of \($0))" } ?? "") (pid \(getpid()))")
    }

    private static func cachePolicy(_ timeout: Double, _ options: FUSEMount.Options) -> Filesystem.CachePolicy {
        .init(entryTimeout: timeout, attributeTimeout: timeout, negativeTimeout: timeout, writebackCache: options.writebackCache)
    }

    /// Mounts a view of the store at `mountPoint`: the user view, or `app`'s view. Its session
    /// runs once `serve` has started (at once for mounts added later).
    private func addMount(at mountPoint: String, app: ContainerID?, options extra: FUSEMount.Options? = nil) throws(DocfsError) {
        let view: Filesystem.View = app.map { .app($0) } ?? .user
        let options = extra ?? self.options
        let reusesPrimary = view == .user && !mounts.withLock { $0.contains { $0.filesystem === primary } }
        let filesystem = reusesPrimary ? primary : try Filesystem(serving: shared, view: view, cachePolicy: Self.cachePolicy(timeout, options))
        let mount: FUSEMount
        do throws(DocfsError) {
            mount = try FUSEMount(filesystem: filesystem, mountPoint: mountPoint, options: options, logger: logger)
        } catch {
            if !reusesPrimary { filesystem.forgetAll() }
            throw error
        }
        let served = ServedMount(mountPoint: mountPoint, filesystem: filesystem, mount: mount)
        let started = mounts.withLock { mounts -> Bool in
            mounts.append(served)
            return mounts.count > 1
        }
        MountRegistry.register(mountPoint: mountPoint, store: shared.store.layout.root, app: app?.rawValue, options: options.arguments)
        if let connection = mount.connectionNumber { DeadMountReaper.start(mountPoint: mountPoint, connection: connection) }
        if started { run(served) }
    }

    /// Runs a mount's session on threads of its own until it is unmounted.
    private func run(_ served: ServedMount) {
        DetachedThread.start { [self] in
            served.mount.run()
            MountRegistry.unregister(mountPoint: served.mountPoint)
            mounts.withLock { $0.removeAll { $0.mountPoint == served.mountPoint && $0.mount === served.mount } }
            ended.signal()
        }
    }

    /// Serves until every mount is gone.
    public func serve() {
        let logger = self.logger
        SignalThread.start { [self] signal in
            logger.notice("signal \(signal): unmounting")
            for served in mounts.withLock({ $0 }) { served.mount.requestExit() }
        }
        for served in mounts.withLock({ $0 }) { run(served) }
        while true {
            ended.wait()
            if mounts.withLock({ $0.isEmpty }) { break }
        }
        syncService.withLock { $0 }?.stop()
        // The user view may never have been mounted (only app views were): its end is the
        // store's.
        primary.forgetAll()
        withExtendedLifetime(lock) {}
    }

    /// The store's index, agreeing with the store before the first request is served: made
    /// anew when missing, from an older docfs or damaged; otherwise reconciled (records of
    /// what changed while no daemon served the store, or since a crash, are written again).
    static func openIndex(store: LocalStore, logger: Logger) throws(DocfsError) -> IndexDatabase {
        let (index, condition) = try IndexDatabase.open(path: store.layout.indexFile)
        let mode: IndexRebuild.Mode = condition == .ready ? .reconcile : .rebuild
        if case .replaced(let reason, let aside) = condition {
            logger.warning("the index was set aside (\(reason)) as \(aside): rebuilding it")
        }
        var started = timespec()
        clock_gettime(CLOCK_MONOTONIC, &started)
        let summary = try IndexRebuild.run(store: store, index: index, mode: mode, separatingCopies: true)
        var ended = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ended)
        let seconds = Double(ended.tv_sec - started.tv_sec) + Double(ended.tv_nsec - started.tv_nsec) / 1e9
        logger.notice("index \(mode == .rebuild ? "rebuilt" : "reconciled"): \(summary.items) items, \(summary.written) records written, \(summary.removed) removed, \(summary.identified) given an id\(summary.separatedReport), in \(String(format: "%.2f", seconds)) s")
        return index
    }

    /// How long the kernel caches names and attributes while the store watcher runs: it tells
    /// the kernel to forget what changes behind docfs as it sees it (within its 50 ms batches),
    /// so the timeout only bounds what inotify cannot see (writes through a shared mapping).
    static let watchedCacheTimeout: Double = 10
    /// Without the watcher, changes made in the store behind docfs show after this long.
    static let unwatchedCacheTimeout: Double = 1
    /// Seconds between saves of who made the current versions.
    static let makersInterval: Double = 5

    /// Watches for uncoordinated writers (C5) in the store's containers; nil (with a warning)
    /// when inotify cannot.
    /// `DOCFS_MAX_STORE_WATCHES` bounds its inotify watches below the kernel's limit, to try
    /// what happens past it without changing the limit for every process of the user.
    private static func makeWatcher(store: LocalStore, rechecks: StoreRechecks, logger: Logger) -> StoreWatcher? {
        let maximum = getenv("DOCFS_MAX_STORE_WATCHES").flatMap { Int(String(cString: $0)) } ?? Int.max
        let warnings = logger
        do {
            return try StoreWatcher(root: store.layout.containersDirectory, rechecks: rechecks, maximumWatches: maximum,
                                    onUnwatched: { problem in warnings.warning("\(problem)") })
        } catch {
            logger.warning("changes made in the store behind docfs will be seen only after the cache timeout (\(unwatchedCacheTimeout) s): \(error)")
            return nil
        }
    }

    /// Runs the store watcher on a thread of its own: what it sees, the user view sorts out
    /// (index, versions, presenters) and every mount's kernel is told to forget. With several
    /// mounts, each forgets whatever changed that it knows, even a change docfs made through
    /// another mount (to that one's kernel it came from outside).
    private func watch(_ watcher: StoreWatcher) {
        DetachedThread.start { [self] in
            watcher.run { changes in
                let effects = primary.noticeStoreChanges(changes)
                for notice in effects.notices { logger.notice("\(notice)") }
                let served = mounts.withLock { $0 }
                for mount in served {
                    var invalidations = mount.filesystem === primary ? effects.invalidations : KernelInvalidations()
                    if served.count > 1 { invalidations.add(mount.filesystem.invalidations(seeing: changes)) }
                    mount.mount.invalidate(invalidations)
                }
            }
        }
    }

    /// The mount serving `filesystem`'s view, if it is mounted.
    private func mount(of filesystem: Filesystem) -> FUSEMount? {
        mounts.withLock { $0.first { $0.filesystem === filesystem }?.mount }
    }

    /// Answers a CLI command's request, made through the control socket.
    private func handle(_ request: ControlRequest, caller: Caller) -> ControlReply {
        let invalidate = { [self] (invalidations: KernelInvalidations) -> Void in mount(of: primary)?.invalidate(invalidations) }
        do throws(DocfsError) {
            let message: String
            if request.kind == .mount {
                message = try mountRequested(request, caller: caller)
            } else if request.kind == .pick {
                message = try PickRequests.apply(request, filesystem: primary, caller: caller, invalidate: invalidate)
            } else if request.kind.isContainerChange {
                if request.kind == .deleteContainer, let id = request.container?.id,
                   let shown = mounts.withLock({ $0.first { $0.filesystem.appContainer?.rawValue == id } }) {
                    throw DocfsError(.invalidArgument, "container \(id) is mounted as an app view at \(shown.mountPoint): unmount it first")
                }
                message = try ContainerRequests.apply(request, filesystem: primary, invalidate: invalidate)
            } else {
                if request.kind == .bookmark {
                    let token = try BookmarkRequests.create(request, store: shared.store, caller: caller)
                    return ControlReply(ok: true, message: "bookmark", token: token)
                }
                if let reply = try remoteRequested(request) { return reply }
                if request.kind == .resolveBookmark {
                    let report = try BookmarkRequests.resolve(request, store: shared.store, index: index,
                                                              mountPoint: mount(of: primary)?.mountPoint)
                    return ControlReply(ok: true, message: "resolved", resolution: report)
                }
                guard let number = request.item, let item = ItemID(text: String(number)) else {
                    throw DocfsError(.invalidArgument, "\(request.item.map(String.init) ?? "none") is not an item id")
                }
                if request.kind == .author {
                    return ControlReply(ok: true, message: "author", author: request.version.flatMap { shared.author(of: item, version: $0) })
                }
                if request.kind == .claims {
                    let coordinator = shared.coordinator
                    let counts = coordinator.statistics
                    return ControlReply(ok: true, message: "claims", claims: ClaimReport(
                        itemClaimed: coordinator.isClaimed(item), claimedItems: coordinator.busyItems,
                        granted: counts.granted, waited: counts.waited,
                        unwatchedFolders: watcher?.unwatchedCount.load(ordering: .relaxed) ?? 0, watched: watcher != nil))
                }
                if request.kind.isPromiseChange {
                    return try PromiseRequests.apply(request, item: item, filesystem: primary)
                }
                message = try DocumentChange.apply(request, item: item, filesystem: primary, caller: caller, invalidate: invalidate)
                    + " (item \(item))"
            }
            logger.notice("\(message) for pid \(caller.pid)")
            return ControlReply(ok: true, message: message)
        } catch {
            return ControlReply(ok: false, message: error.message.isEmpty ? error.description : error.message)
        }
    }

    /// `docfs remote link|status|unlink` of the served store; nil for other requests.
    private func remoteRequested(_ request: ControlRequest) throws(DocfsError) -> ControlReply? {
        switch request.kind {
        case .remoteLink:
            guard let asked = request.remote else { throw DocfsError(.invalidArgument, "link to which remote?") }
            let link: RemoteLink, remote: PostgresRemote
            do throws(DocfsError) {
                (link, remote) = try RemoteLinking.link(shared, uri: asked.uri, machine: asked.machine, home: asked.home, merging: false)
            } catch where error.cause is RemoteLinking.MergeNeedsUnmountedStore {
                // The CLI unmounts the store, links it (merging) and mounts it again.
                var reply = ControlReply(ok: false, message: error.message)
                reply.mergeNeedsUnmountedStore = true
                return reply
            }
            let service = try SyncService(shared: shared, link: link, remote: remote, contentView: primary, logger: logger)
            service.start()
            syncService.withLock { $0 = service }
            logger.notice("linked to \(link.uri) as \(link.machine): syncing")
            return ControlReply(ok: true, message: "linked to \(link.uri) as \(link.machine)", remote: service.status)
        case .keyValuesChanged:
            syncService.withLock { $0 }?.wake()
            return ControlReply(ok: true, message: "noted")
        case .remoteStatus:
            guard let service = syncService.withLock({ $0 }) else { throw DocfsError(.invalidArgument, "the store is not linked to a remote") }
            return ControlReply(ok: true, message: "status", remote: service.status)
        case .remoteCheck:
            guard let service = syncService.withLock({ $0 }) else { throw DocfsError(.invalidArgument, "the store is not linked to a remote") }
            var reply = ControlReply(ok: true, message: "checked")
            reply.differences = try RemoteLinking.check(service.sync, remote: service.remote)
            reply.keptHereOnly = try RemoteLinking.keptHereOnly(service.sync)
            return reply
        case .remoteUnlink:
            let service = syncService.withLock { service in defer { service = nil }; return service }
            service?.stop()
            try RemoteLinking.unlink(shared)
            logger.notice("unlinked from \(service?.link.uri ?? "its remote")")
            return ControlReply(ok: true, message: "unlinked from \(service?.link.uri ?? "its remote")")
        default:
            return nil
        }
    }

    /// `docfs mount` of a store this daemon serves: one more mount, of the view it asks for.
    private func mountRequested(_ request: ControlRequest, caller: Caller) throws(DocfsError) -> String {
        guard caller.uid == getuid() || caller.uid == 0 else {
            throw DocfsError(.invalidArgument, "the daemon serving this store runs as uid \(getuid()): only that user (or root) may mount it again")
        }
        guard let wanted = request.mount else { throw DocfsError(.invalidArgument, "which mount point?") }
        let app = try wanted.app.map { id throws(DocfsError) in try ContainerID(id) }
        var options = FUSEMount.Options.parse(wanted.options)
        let allowNonEmpty = options.fuseOptions.contains("nonempty")
        options.fuseOptions.removeAll { $0 == "nonempty" }
        try Preflight.checkMountPoint(wanted.mountPoint, allowNonEmpty: allowNonEmpty)
        try addMount(at: wanted.mountPoint, app: app, options: options)
        return "mounted \(app.map { "the app view of \($0)" } ?? "the user view") at \(wanted.mountPoint)"
    }

    /// fs.nr_open: the most descriptors a process may have (a /proc file reports no size, so
    /// it is read as it comes).
    private static func systemDescriptorMaximum() -> rlim_t? {
        let fd = open("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return rlim_t(String(decoding: buffer[0..<n], as: UTF8.self).filter(\.isNumber))
    }

    /// One descriptor per file the kernel knows: allow as many as the system does (fs.nr_open,
    /// when the daemon may raise its hard limit), else as many as the hard limit does.
    private static func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &limit) == 0 else { return }
        if let most = systemDescriptorMaximum(), most > limit.rlim_max {
            var raised = rlimit(rlim_cur: most, rlim_max: most)
            if setrlimit(RLIMIT_NOFILE_VALUE, &raised) == 0 { return }
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            setrlimit(RLIMIT_NOFILE_VALUE, &limit)
        }
    }

    /// Descriptors the table is sized for at start (512 KiB of kernel memory).
    static let presizedDescriptors: Int32 = 65536

    /// Grows the process's descriptor table once, before the workers start. The kernel grows
    /// it by doubling whenever a new descriptor does not fit, and while threads share it each
    /// growth waits for an RCU grace period: 10–30 ms stalls of whichever request opened the
    /// descriptor, eight of them before the kernel has looked up 10,000 files.
    private static func presizeDescriptorTable() {
        var limit = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &limit) == 0 else { return }
        let highest = Int32(min(rlim_t(presizedDescriptors), limit.rlim_cur)) - 1
        guard highest > 1024, dup2(STDERR_FILENO, highest) == highest else { return }
        close(highest)
    }
}

extension Daemon {
    /// The docfs program this process runs: the daemon starts its helpers from it (`docfs
    /// thumbnail-worker`, `docfs reap-mount`), and `docfs mount` starts the daemon from it.
    public static func executablePath() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return n > 0 ? String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }
}

/// What a daemon serves and how (`docfs mount` fills it in from its command line): the store,
/// the first mount — the user view, or `app`'s view — its mount options, and how much to log.
public struct DaemonConfiguration: Sendable {
    public var storePath: String
    public var mountPoint: String
    /// The container whose app view the first mount shows; nil for the user view.
    public var app: ContainerID?
    public var options: FUSEMount.Options
    public var logLevel: Logger.Level

    public init(storePath: String, mountPoint: String, app: ContainerID?, options: FUSEMount.Options, logLevel: Logger.Level) {
        self.storePath = storePath
        self.mountPoint = mountPoint
        self.app = app
        self.options = options
        self.logLevel = logLevel
    }
}

private let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
