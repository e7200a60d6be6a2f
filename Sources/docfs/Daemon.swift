import CLinux
import DocfsCore
import DocfsFUSE
import DocfsFilesystem
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
        let filesystem = try Filesystem(store: store, cachePolicy: .init(writebackCache: options.writebackCache))
        SignalThread.blockTerminationSignals()
        let mount = try FUSEMount(filesystem: filesystem, mountPoint: mountPoint, options: options, logger: logger)
        self.mount = mount
        let log = logger
        control = try ControlServer(store: store.layout) { request, caller in
            Self.handle(request, caller: caller, filesystem: filesystem, mount: mount, logger: log)
        }
        control.start()
        MountRegistry.register(mountPoint: mountPoint, store: store.layout.root)
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

    /// Answers a CLI command's request, made through the control socket.
    private static func handle(_ request: ControlRequest, caller: Caller, filesystem: Filesystem, mount: FUSEMount,
                               logger: Logger) -> ControlReply {
        switch request.kind {
        case .restore:
            guard let item = ItemID(text: String(request.item)) else {
                return ControlReply(ok: false, message: "\(request.item) is not an item id")
            }
            do {
                let invalidations = try filesystem.restore(path: request.path, item: item, version: request.version, caller: caller)
                mount.invalidate(invalidations)
                logger.notice("restored version \(request.version) of \(request.path) (item \(item)) for pid \(caller.pid)")
                return ControlReply(ok: true, message: "restored version \(request.version) of \(request.path)")
            } catch {
                return ControlReply(ok: false, message: error.description)
            }
        }
    }

    /// One descriptor per file the kernel knows: allow as many as the hard limit does.
    private static func raiseDescriptorLimit() {
        var limit = rlimit()
        if getrlimit(RLIMIT_NOFILE_VALUE, &limit) == 0, limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            setrlimit(RLIMIT_NOFILE_VALUE, &limit)
        }
    }
}

private let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
