import CFuse
import DocfsCore
import DocfsFilesystem
#if canImport(Glibc)
import Glibc
#endif

/// Reads that wait for a promised file's content (issue 23) end early when the kernel
/// interrupts them (Ctrl-C in the reader): the reader gets EINTR, the download goes on for the
/// others. The kernel's INTERRUPT finds the waiting read by its request, in `contentWaits`
/// (a callback may come late, after the reply, and then finds nothing or a later request's
/// waiter, which looks at its own request and waits on).
extension BridgeContext {
    /// Runs `body` with a wait the request's interruption ends.
    func waitingForContent(_ req: fuse_req_t, _ body: (ContentWait) throws(DocfsError) -> Void) throws(DocfsError) {
        let waiter = ThreadSemaphore()
        let key = UInt(bitPattern: req)
        contentWaits.withLock { $0[key] = waiter }
        defer { contentWaits.withLock { _ = $0.removeValue(forKey: key) } }
        fuse_req_interrupt_func(req, { req, _ in
            let ctx = BridgeContext.of(req)
            ctx.contentWaits.withLock { $0[UInt(bitPattern: req)] }?.signal()
        }, nil)
        let request = UInt(bitPattern: req)
        try body(ContentWait(waiter: waiter) { fuse_req_interrupted(OpaquePointer(bitPattern: request)) != 0 })
    }
}
