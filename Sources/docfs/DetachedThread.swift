#if canImport(Glibc)
import Glibc
#endif

/// Runs a closure on a detached thread of its own (the signal waiter, the control socket):
/// plain pthreads, since these threads block in system calls for the daemon's whole life.
enum DetachedThread {
    static func start(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        var thread = pthread_t()
        pthread_create(&thread, nil, { argument in
            Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue().body()
            return nil
        }, box)
        pthread_detach(thread)
    }

    private final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
}
