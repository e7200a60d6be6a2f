#if canImport(Glibc)
import Glibc
#endif

/// Runs a closure on a detached thread of its own (the signal waiter, the control socket, the
/// thumbnailer): plain pthreads, since these threads block in system calls for long.
public enum DetachedThread {
    public static func start(_ body: @escaping @Sendable () -> Void) {
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


/// A counting semaphore for threads that sleep until work arrives (`sem_t`, which must stay at
/// one address: hence a class owning it).
public final class ThreadSemaphore: @unchecked Sendable {
    // sem_t is made for sharing between threads; it is only touched through sem_* calls.
    private let semaphore: UnsafeMutablePointer<sem_t>

    public init(value: UInt32 = 0) {
        semaphore = .allocate(capacity: 1)
        sem_init(semaphore, 0, value)
    }

    public func signal() { sem_post(semaphore) }

    /// Sleeps until signalled.
    public func wait() {
        while sem_wait(semaphore) != 0 && errno == EINTR {}
    }

    /// Sleeps until signalled or `seconds` have passed; answers whether it was signalled.
    @discardableResult
    public func wait(seconds: Double) -> Bool {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let nanoseconds = Int(deadline.tv_nsec) + Int(max(0, seconds) * 1e9)
        deadline.tv_sec += nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        while true {
            if sem_timedwait(semaphore, &deadline) == 0 { return true }
            if errno != EINTR { return false }
        }
    }

    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }
}
