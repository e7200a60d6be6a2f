import CFuse
import CFusePassthrough
import CLinux
import DocfsCore
import DocfsFilesystem
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A mounted libfuse session serving a `Filesystem`: created and mounted by `init`, served by
/// `run` (blocking, on the caller's thread plus libfuse's worker threads), ended by an unmount
/// from outside or by `requestExit` (signals).
public final class FUSEMount: Sendable {
    /// Options docfs understands itself; the rest go to libfuse as `-o` options.
    public struct Options: Sendable {
        public var fuseOptions: [String]
        /// The kernel's writeback cache (`-o writeback`). Off by default: without it a write()
        /// has reached the store when it returns, so even a crash of the daemon loses nothing
        /// written, and changes made in the store behind docfs are seen sooner.
        public var writebackCache: Bool
        /// Let the kernel read and write open files' backing files itself (FUSE passthrough,
        /// Linux 6.9+, needs CAP_SYS_ADMIN; `-o nopassthrough` turns it off). Used when the
        /// kernel grants it; otherwise docfs serves reads and writes.
        public var passthrough: Bool
        /// How long the kernel may cache names and attributes, in seconds (`-o timeout=N`); nil
        /// leaves it to the daemon (long while the store watcher makes the kernel forget changes
        /// made behind docfs as it sees them, short without it).
        public var cacheTimeout: Double?
        /// How many threads serve requests. More than the machine has cores only make requests
        /// wait for a core and contend for the same locks (the stress row of `scripts/bench` on
        /// two cores: 15.1 s with 16, 14.6 s with 4, 14.3 s with 3); at least four, so a few
        /// requests waiting on the disk (fsync) leave others served.
        public var maxThreads: UInt32
        /// Make thumbnails of images and PDFs (`-o nothumbnails` turns it off).
        public var thumbnails = true

        public init(fuseOptions: [String] = [], writebackCache: Bool = false, passthrough: Bool = true,
                    cacheTimeout: Double? = nil, maxThreads: UInt32 = Options.defaultThreads) {
            self.fuseOptions = fuseOptions
            self.writebackCache = writebackCache
            self.passthrough = passthrough
            self.cacheTimeout = cacheTimeout
            self.maxThreads = maxThreads
        }

        /// Twice the cores the daemon may use, within 4...16.
        public static var defaultThreads: UInt32 {
            UInt32(min(16, max(4, 2 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))))
        }

        /// The `-o` options that mount the same way again (`parse` of them gives these).
        public var arguments: [String] {
            fuseOptions + (writebackCache ? ["writeback"] : []) + (passthrough ? [] : ["nopassthrough"])
                + (thumbnails ? [] : ["nothumbnails"]) + (cacheTimeout.map { ["timeout=\($0)"] } ?? [])
        }

        /// Whether the kernel must check permissions (`default_permissions`): whenever
        /// processes other than root's own can reach the mount. A root daemon's mount without
        /// allow_other/allow_root is reachable by root alone, for whom the checks pass anyway
        /// but for execute bits, which the kernel checks regardless and `access(2)` answers;
        /// leaving them off saves a GETATTR of the folder after every create and unlink.
        public var kernelChecksPermissions: Bool {
            getuid() != 0 || fuseOptions.contains { ["allow_other", "allow_root", "default_permissions"].contains($0) }
        }

        /// Splits user `-o` options into docfs's own and libfuse's.
        public static func parse(_ options: [String]) -> Options {
            var result = Options()
            for option in options.flatMap({ $0.split(separator: ",").map(String.init) }) where !option.isEmpty {
                switch option {
                case "writeback", "writeback_cache": result.writebackCache = true
                case "nowriteback", "no_writeback_cache": result.writebackCache = false
                case "passthrough": result.passthrough = true
                case "nopassthrough", "no_passthrough": result.passthrough = false
                case "thumbnails": result.thumbnails = true
                case "nothumbnails", "no_thumbnails": result.thumbnails = false
                case let timeout where timeout.hasPrefix("timeout="):
                    // Out of range or not a number: left to libfuse, which refuses it by name.
                    if let seconds = Double(timeout.dropFirst("timeout=".count)), seconds >= 0, seconds <= 86400 {
                        result.cacheTimeout = seconds
                    } else {
                        result.fuseOptions.append(option)
                    }
                default: result.fuseOptions.append(option)
                }
            }
            return result
        }
    }

    private struct Session: @unchecked Sendable {
        // The session pointer is used by libfuse's own threads; docfs only calls the
        // thread-safe fuse_session_exit on it from elsewhere, under `state`'s lock.
        let pointer: OpaquePointer
    }

    private enum Phase { case mounted, running, exiting, finished }

    public let mountPoint: String
    private let session: Session
    /// What libfuse's callbacks reach through their userdata pointer (unretained: the mount
    /// holds it for as long as any thread, in libfuse or not, may use it).
    private let bridge: BridgeContext
    private let logger: Logger
    private let maxThreads: UInt32
    /// Lock order: leaf lock, never held across a call into libfuse's loop.
    private let phase = Mutex(Phase.mounted)

    public init(filesystem: Filesystem, mountPoint: String, options: Options, logger: Logger) throws(DocfsError) {
        self.mountPoint = mountPoint
        self.logger = logger
        self.maxThreads = options.maxThreads
        let bridge = BridgeContext(filesystem: filesystem, logger: logger, writebackCache: options.writebackCache,
                                   passthrough: options.passthrough)
        let context = Unmanaged.passUnretained(bridge)
        var standard = ["fsname=docfs", "subtype=docfs"]
        if options.kernelChecksPermissions && !options.fuseOptions.contains("default_permissions") {
            standard.append("default_permissions")
        }
        if getuid() == 0 || access("/bin/fusermount3", X_OK) == 0 || access("/usr/bin/fusermount3", X_OK) == 0 {
            standard.append("auto_unmount")
        }
        let arguments = ["docfs", "-o", (standard + options.fuseOptions).joined(separator: ",")]
        var cStrings = arguments.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var args = docfs_fuse_args(Int32(cStrings.count), &cStrings)
        var ops = Operations.table()
        guard let pointer = docfs_session_new(&args, &ops, context.toOpaque()) else {
            fuse_opt_free_args(&args)
            throw DocfsError(.invalidArgument,
                             "libfuse refused the mount options \(options.fuseOptions.joined(separator: ",")): see `man mount.fuse3` for valid -o options")
        }
        fuse_opt_free_args(&args)
        guard fuse_session_mount(pointer, mountPoint) == 0 else {
            fuse_session_destroy(pointer)
            throw DocfsError(.badMountPoint,
                             "cannot mount on \(mountPoint): check that it is an empty directory you own and that fuse3 is installed")
        }
        bridge.kernel.attach(pointer)
        let kernel = bridge.kernel
        filesystem.onInvalidations { invalidations in
            kernel.forgetContent(of: invalidations.inodes)
        kernel.forgetAttributes(of: invalidations.attributes)
            kernel.forgetEntries(invalidations.entries)
        }
        // docfs's io amends the INIT reply (passthrough, killpriv_v2: see docfs_passthrough.h).
        let installed = docfs_install_io(pointer)
        if installed != 0 {
            logger.notice("cannot route FUSE traffic through docfs's io (\(installed)); serving reads and writes through docfs")
        } else if options.passthrough && !options.writebackCache {
            bridge.passthrough.attach(session: pointer)
        }
        self.session = Session(pointer: pointer)
        self.bridge = bridge
        self.connectionNumber = Self.connectionNumber(of: mountPoint)
    }

    /// Makes the kernel forget what a change docfs made itself outside any request left stale.
    public func invalidate(_ invalidations: KernelInvalidations) {
        let kernel = bridge.kernel
        kernel.forgetContent(of: invalidations.inodes)
        kernel.forgetAttributes(of: invalidations.attributes)
        kernel.forgetEntries(invalidations.entries)
    }

    /// Serves requests until the mount goes away, then cleans the session up (exactly once).
    public func run() {
        let start = phase.withLock { phase -> Bool in
            guard phase == .mounted else { return false }
            phase = .running
            return true
        }
        guard start else { return }
        let forgetting = startForgetting()
        // Every worker stays once started: with fewer kept idle, a burst of requests from a few
        // processes made libfuse start and end a thread for many requests (tens of µs each).
        let result = docfs_session_loop_mt(session.pointer, maxThreads, maxThreads)
        phase.withLock { $0 = .finished }
        forgetting.stop()
        // No thread may reach the session once it is unmounted and freed (the store watcher
        // and delayed invalidations run outside libfuse's loop).
        bridge.kernel.detach()
        bridge.passthrough.detach()
        if result != 0 { logger.notice("FUSE loop ended with \(result)") }
        fuse_session_unmount(session.pointer)
        fuse_session_destroy(session.pointer)
        logger.info("unmounted \(mountPoint)")
    }

    /// Starts the thread that asks the kernel to forget the names of nodes past the view's
    /// limit (see `NodeTable`): the kernel then forgets the nodes it does not use, and the
    /// daemon's descriptors stay bounded whatever the kernel would cache. A thread of its own,
    /// as the kernel takes a folder's lock for each name (a request in that folder holds it).
    private func startForgetting() -> ForgettingThread {
        let filesystem = bridge.filesystem
        let kernel = bridge.kernel
        let thread = ForgettingThread(wake: { filesystem.wakeForgetting() })
        DetachedThread.start {
            while !thread.stopping.load(ordering: .acquiring) {
                let names = filesystem.namesToForget(waitingUpTo: 5)
                if !thread.stopping.load(ordering: .acquiring) { kernel.forgetEntries(names) }
            }
            thread.done.signal()
        }
        return thread
    }

    /// Ends the session. The first call detaches the mount (as `umount -l`): new opens fail at
    /// once, files still open keep working, and the loop ends when the last one is closed. A
    /// second call forces the end: the kernel's connection is aborted, open files get ENOTCONN.
    public func requestExit() {
        let step = phase.withLock { phase -> Phase? in
            switch phase {
            case .mounted, .running:
                phase = .exiting
                return .exiting
            case .exiting:
                fuse_session_exit(session.pointer)
                return .finished
            case .finished:
                return nil
            }
        }
        switch step {
        case .exiting?:
            Self.detach(mountPoint)
        case .finished?:
            logger.notice("second signal: aborting the FUSE connection; open files get ENOTCONN")
            if let connection = connectionNumber { Self.abortConnection(connection) }
        default:
            break
        }
    }

    /// The kernel's number for this mount's FUSE connection (its device minor), read from
    /// mountinfo without touching the mount itself.
    public let connectionNumber: Int?

    public static func connectionNumber(of mountPoint: String) -> Int? {
        guard let file = fopen("/proc/self/mountinfo", "r") else { return nil }
        defer { fclose(file) }
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        var found: Int? = nil
        while getline(&line, &capacity, file) > 0 {
            let fields = String(cString: line!).split(separator: " ")
            // Compared as bytes, unescaped: a mount point with a space is `\040` there.
            guard fields.count > 4, MountInfoField.unescape(Array(fields[4].utf8)) == Array(mountPoint.utf8),
                  let dash = fields.firstIndex(of: "-"),
                  dash + 1 < fields.count, fields[dash + 1] == "fuse.docfs" else { continue }
            found = fields[2].split(separator: ":").last.flatMap { Int($0) }
        }
        return found
    }

    /// Aborts a FUSE connection through fusectl (mounting it first if need be, as root).
    private static func abortConnection(_ number: Int) {
        let control = "/sys/fs/fuse/connections"
        if access("\(control)/\(number)/abort", W_OK) != 0 {
            _ = mount("fusectl", control, "fusectl", 0, nil)
        }
        let fd = open("\(control)/\(number)/abort", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = write(fd, "1", 1)
        close(fd)
    }

    /// Lazily unmounts `mountPoint` (umount2 as root, fusermount3 -uz otherwise).
    @discardableResult
    public static func detach(_ mountPoint: String) -> Bool {
        if getuid() == 0, umount2(mountPoint, DOCFS_MNT_DETACH) == 0 { return true }
        return ProcessRunner.run("fusermount3", ["-u", "-z", mountPoint]) == 0
    }
}

/// The thread `FUSEMount.startForgetting` runs, stopped before the session is destroyed.
private final class ForgettingThread: Sendable {
    let stopping = Atomic<Bool>(false)
    let done = ThreadSemaphore()
    let wake: @Sendable () -> Void

    init(wake: @escaping @Sendable () -> Void) { self.wake = wake }

    func stop() {
        stopping.store(true, ordering: .releasing)
        wake()
        done.wait()
    }
}
