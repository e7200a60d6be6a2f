import CFuse
import DocfsCore
import DocfsFilesystem
#if canImport(Glibc)
import Glibc
#endif

/// Reads of promised files (issue 23) wait for their bytes without holding a FUSE thread: the
/// request is answered from the download's side once they are on disk (a mount with many
/// readers waiting keeps its threads for everything else). They end early when the kernel
/// interrupts them (Ctrl-C in the reader): the reader gets EINTR, the download goes on for the
/// others. The kernel's INTERRUPT finds the waiting read by its request, in `contentWaits`,
/// which holds it from before the interrupt callback is set until it is answered.
extension BridgeContext {
    /// Answers the read `req` of `size` bytes at `offset` through `handle` once its bytes are
    /// there (now, or later from another thread).
    func readWhenPresent(_ req: fuse_req_t, handle: UInt64, size: Int, offset: off_t) {
        let request = UInt(bitPattern: req)
        let read = PendingRead(offset: Int64(offset), length: Int64(size)) { [self] error in
            contentWaits.withLock { _ = $0.removeValue(forKey: request) }
            let req = OpaquePointer(bitPattern: request)
            if let error { return fail(req, error, "read") }
            var data = docfs_fd_bufvec(filesystem.backingDescriptor(of: handle), size, offset)
            fuse_reply_data(req, &data, FUSE_BUF_SPLICE_MOVE)
        }
        contentWaits.withLock { $0[request] = read }
        // Called at once when the read is interrupted already; the request lives on while it
        // runs (libfuse holds it), and is answered from it.
        fuse_req_interrupt_func(req, { req, _ in
            BridgeContext.of(req).contentWaits.withLock { $0[UInt(bitPattern: req)] }?.interrupt()
        }, nil)
        filesystem.beginRead(read, through: handle)
    }
}
