import CFuse
import DocfsCore
import DocfsFilesystem
import Logging

/// What every FUSE callback reaches through `fuse_req_userdata`: the filesystem, the logger and
/// the mount's options. Callbacks are C function pointers that capture nothing, so this object
/// is passed to libfuse as an unretained pointer and outlives the session.
final class BridgeContext: Sendable {
    let filesystem: Filesystem
    let logger: Logger
    let writebackCache: Bool

    init(filesystem: Filesystem, logger: Logger, writebackCache: Bool) {
        self.filesystem = filesystem
        self.logger = logger
        self.writebackCache = writebackCache
    }

    static func of(_ req: fuse_req_t?) -> BridgeContext {
        Unmanaged<BridgeContext>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    static func of(userdata: UnsafeMutableRawPointer?) -> BridgeContext {
        Unmanaged<BridgeContext>.fromOpaque(userdata!).takeUnretainedValue()
    }
}
