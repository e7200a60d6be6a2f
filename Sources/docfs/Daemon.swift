import CLinux
import DocfsCore
import DocfsFUSE
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The process that serves one store at one mount point: holds the store's lock, runs the
/// FUSE session on this thread and libfuse's workers, and unmounts cleanly on SIGTERM, SIGINT
/// or SIGHUP (a signal thread waits for them; they are blocked everywhere else).
final class Daemon {
    private let mount: FUSEMount
    private let lock: StoreLock
    private let control: ControlServer
    private let logger: Logger
    private let mountPoint: String

    init(storePath: String, mountPoint: String, options: FUSEMount.Options, logLevel: Logger.Level) throws(DocfsError) {
        umask(0)  // the kernel already applied the caller's umask
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
        self.mountPoint = mountPoint
        let store = try LocalStore(path: storePath)
        lock = try StoreLock(store: store, mountPoint: mountPoint)
        store.versions.removeLeftovers()
        // The watches are in place before the daemon answers its first request, so every
        // change docfs makes is seen (an unseen own change would leave a record that hides
        // someone else's later one).
        let watcher = Self.makeWatcher(store: store, logger: logger)
        let timeout = options.cacheTimeout ?? (watcher == nil ? Self.unwatchedCacheTimeout : Self.watchedCacheTimeout)
        let index = try Self.openIndex(store: store, logger: logger)
        let filesystem = try Filesystem(store: store, cachePolicy: .init(entryTimeout: timeout, attributeTimeout: timeout,
                                                                         negativeTimeout: timeout,
                                                                         writebackCache: options.writebackCache),
                                        index: index,
                                        thumbnailWorker: options.thumbnails ? [BackgroundLauncher.executablePath(), "thumbnail-worker"] : nil)
        let indexLogger = logger
        let thumbnailLogger = logger
        filesystem.onThumbnailProblem { problem in thumbnailLogger.notice("\(problem)") }
        filesystem.onIndexFailure { error in
            indexLogger.error("the index could not be updated (queries may miss this change until the next mount, or `docfs index rebuild`): \(error)")
        }
        SignalThread.blockTerminationSignals()
        let mount = try FUSEMount(filesystem: filesystem, mountPoint: mountPoint, options: options, logger: logger)
        self.mount = mount
        let log = logger
        control = try ControlServer(store: store.layout, handle: { request, caller in
            Self.handle(request, caller: caller, filesystem: filesystem, mount: mount, logger: log)
        }, stream: { request, connection in
            if request.kind == .watch {
                WatchStream.serve(request.path, on: connection, presenters: filesystem.presenters)
            } else {
                IndexWalkStream.serve(request.kind == .checkIndex ? .check : .rebuild, on: connection, filesystem: filesystem, logger: log)
            }
        })
        control.start()
        if let watcher { Self.watch(watcher, filesystem: filesystem, mount: mount, logger: logger) }
        MountRegistry.register(mountPoint: mountPoint, store: store.layout.root)
        if let connection = mount.connectionNumber { DeadMountReaper.start(mountPoint: mountPoint, connection: connection) }
        logger.notice("serving \(store.layout.root) at \(mountPoint) (pid \(getpid()))")
    }

    func serve() {
        let mount = self.mount
        let logger = self.logger
        SignalThread.start { signal in
            logger.notice("signal \(signal): unmounting")
            mount.requestExit()
        }
        mount.run()
        MountRegistry.unregister(mountPoint: mountPoint)
        withExtendedLifetime(lock) {}
    }

    /// The store's index, agreeing with the store before the first request is served: made
    /// anew when missing, from an older docfs or damaged; otherwise reconciled (records of
    /// what changed while no daemon served the store, or since a crash, are written again).
    private static func openIndex(store: LocalStore, logger: Logger) throws(DocfsError) -> IndexDatabase {
        let (index, condition) = try IndexDatabase.open(path: store.layout.indexFile)
        let mode: IndexRebuild.Mode = condition == .ready ? .reconcile : .rebuild
        if case .replaced(let reason, let aside) = condition {
            logger.warning("the index was set aside (\(reason)) as \(aside): rebuilding it")
        }
        var started = timespec()
        clock_gettime(CLOCK_MONOTONIC, &started)
        let summary = try IndexRebuild.run(store: store, index: index, mode: mode)
        var ended = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ended)
        let seconds = Double(ended.tv_sec - started.tv_sec) + Double(ended.tv_nsec - started.tv_nsec) / 1e9
        logger.notice("index \(mode == .rebuild ? "rebuilt" : "reconciled"): \(summary.items) items, \(summary.written) records written, \(summary.removed) removed, \(summary.identified) given an id, in \(String(format: "%.2f", seconds)) s")
        return index
    }

    /// How long the kernel caches names and attributes while the store watcher runs: it tells
    /// the kernel to forget what changes behind docfs as it sees it (within its 50 ms batches),
    /// so the timeout only bounds what inotify cannot see (writes through a shared mapping).
    static let watchedCacheTimeout: Double = 10
    /// Without the watcher, changes made in the store behind docfs show after this long.
    static let unwatchedCacheTimeout: Double = 1

    /// Watches for uncoordinated writers (C5) in the store's containers; nil (with a warning)
    /// when inotify cannot.
    private static func makeWatcher(store: LocalStore, logger: Logger) -> StoreWatcher? {
        do {
            return try StoreWatcher(root: store.layout.containersDirectory)
        } catch {
            logger.warning("changes made in the store behind docfs will be seen only after the cache timeout (\(unwatchedCacheTimeout) s): \(error)")
            return nil
        }
    }

    /// Runs the store watcher on a thread of its own: what it sees, the filesystem sorts out
    /// and the kernel is told to forget.
    private static func watch(_ watcher: StoreWatcher, filesystem: Filesystem, mount: FUSEMount, logger: Logger) {
        DetachedThread.start {
            watcher.run { changes in
                let effects = filesystem.noticeStoreChanges(changes)
                mount.invalidate(effects.invalidations)
                for notice in effects.notices { logger.notice("\(notice)") }
            }
        }
    }

    /// Answers a CLI command's request, made through the control socket.
    private static func handle(_ request: ControlRequest, caller: Caller, filesystem: Filesystem, mount: FUSEMount,
                               logger: Logger) -> ControlReply {
        if request.kind.isContainerChange {
            do {
                let message = try ContainerCommand.apply(request, filesystem: filesystem) { mount.invalidate($0) }
                logger.notice("\(message) for pid \(caller.pid)")
                return ControlReply(ok: true, message: message)
            } catch {
                return ControlReply(ok: false, message: error.description)
            }
        }
        guard let number = request.item, let item = ItemID(text: String(number)) else {
            return ControlReply(ok: false, message: "\(request.item.map(String.init) ?? "none") is not an item id")
        }
        if request.kind == .claims {
            let coordinator = filesystem.coordinator
            let counts = coordinator.statistics
            return ControlReply(ok: true, message: "claims", claims: ClaimReport(
                itemClaimed: coordinator.isClaimed(item), claimedItems: coordinator.busyItems,
                granted: counts.granted, waited: counts.waited))
        }
        do {
            let message = try DocumentChange.apply(request, item: item, filesystem: filesystem, caller: caller) { mount.invalidate($0) }
            logger.notice("\(message) (item \(item)) for pid \(caller.pid)")
            return ControlReply(ok: true, message: message)
        } catch {
            return ControlReply(ok: false, message: error.description)
        }
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

private let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
