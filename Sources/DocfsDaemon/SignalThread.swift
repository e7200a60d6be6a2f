import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Termination signals handled on a thread of their own with sigwait, so the handler may do
/// real work (unmounting) safely.
enum SignalThread {
    static let signals: [Int32] = [SIGTERM, SIGINT, SIGHUP]

    /// Blocks the signals in this thread and every thread it starts later.
    static func blockTerminationSignals() {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Starts the thread; `handler` runs for each signal received.
    static func start(_ handler: @escaping @Sendable (Int32) -> Void) {
        DetachedThread.start {
            var set = sigset_t()
            sigemptyset(&set)
            for signal in SignalThread.signals { sigaddset(&set, signal) }
            while true {
                var received: Int32 = 0
                if sigwait(&set, &received) == 0 { handler(received) }
            }
        }
    }
}
