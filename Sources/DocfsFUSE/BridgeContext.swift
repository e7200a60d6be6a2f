import CFuse
import DocfsCore
import DocfsFilesystem
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What every FUSE callback reaches through `fuse_req_userdata`: the filesystem, the logger and
/// the mount's options. Callbacks are C function pointers that capture nothing, so this object
/// is passed to libfuse as an unretained pointer and outlives the session.
final class BridgeContext: Sendable {
    let filesystem: Filesystem
    let logger: Logger
    let writebackCache: Bool
    /// Backing files of open files, when the kernel serves their I/O itself (passthrough).
    let passthrough: PassthroughRegistry
    /// Cache invalidations sent to the kernel.
    let kernel = KernelNotifier()
    /// The largest request payload whose reply still fits a splice pipe (pipe-max-size less a
    /// header page), rounded down to a power of two so large writes split evenly.
    let spliceableWriteSize: Int
    /// Reads waiting for promised content, by request (see `readWhenPresent`). A leaf lock.
    let contentWaits = Mutex<[UInt: PendingRead]>([:])

    init(filesystem: Filesystem, logger: Logger, writebackCache: Bool, passthrough: Bool) {
        self.filesystem = filesystem
        self.logger = logger
        self.writebackCache = writebackCache
        // The kernel refuses passthrough together with the writeback cache.
        self.passthrough = PassthroughRegistry(enabled: passthrough && !writebackCache, logger: logger)
        let room = BridgeContext.pipeMaxSize() - 4096
        var size = 1 << 16
        while size * 2 <= room { size *= 2 }
        self.spliceableWriteSize = size
    }

    private static func pipeMaxSize() -> Int {
        guard let file = fopen("/proc/sys/fs/pipe-max-size", "r") else { return 1 << 20 }
        defer { fclose(file) }
        var value = 0
        var line = [CChar](repeating: 0, count: 32)
        if fgets(&line, 32, file) != nil {
            value = Int(String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8($0) }, as: UTF8.self)) ?? 0
        }
        return value >= 65536 ? value : 1 << 20
    }

    static func of(_ req: fuse_req_t?) -> BridgeContext {
        Unmanaged<BridgeContext>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    static func of(userdata: UnsafeMutableRawPointer?) -> BridgeContext {
        Unmanaged<BridgeContext>.fromOpaque(userdata!).takeUnretainedValue()
    }
}
