import Foundation
import Synchronization

/// The one place where the PostgreSQL client's async world meets the daemon's threads
/// (issue 22 §0). The `Remote` interface blocks its caller (a sync engine thread, never a FUSE
/// worker); the client is async and runs on SwiftNIO's event loops. A call here starts a task
/// whose every step runs on this bridge's own thread (a task executor), and the caller waits
/// for its result. Nothing runs on Swift's shared cooperative pool, so a caller that is itself
/// on that pool (a test, say) cannot starve the work it waits for, and no lock of the caller's
/// is needed by anything here.
///
/// Lock order: `queue` is a leaf lock, never held while a job runs.
final class BlockingBridge: TaskExecutor, @unchecked Sendable {
    private struct Queue {
        var jobs: [UnownedJob] = []
        var stopping = false
    }

    private let queue = Mutex(Queue())
    private let ready = DispatchSemaphore(value: 0)

    init(name: String) {
        let thread = Thread { [self] in self.runJobs() }
        thread.name = name
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.withLock { $0.jobs.append(job) }
        ready.signal()
    }

    /// Ends the thread once the jobs queued so far have run (the thread holds the bridge until then).
    func stop() {
        queue.withLock { $0.stopping = true }
        ready.signal()
    }

    private func runJobs() {
        while true {
            ready.wait()
            let next: UnownedJob?? = queue.withLock { queue in
                if !queue.jobs.isEmpty { return .some(queue.jobs.removeFirst()) }
                return queue.stopping ? .none : .some(nil)
            }
            guard let job = next else { return }
            job?.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// Runs `operation` on the bridge's thread and waits for it: its result, or what it threw.
    /// Past `limit` (when given) it stops waiting, calls `gaveUp` (which should make the
    /// operation fail, say by closing its connection) and throws `TimedOut`: an operation
    /// awaiting an answer that never comes (a server gone under a request) cannot hold its
    /// caller forever, whether or not it ever ends.
    func run<Value: Sendable>(within limit: Duration? = nil, gaveUp: @escaping @Sendable () -> Void = {},
                              _ operation: @escaping @Sendable () async throws -> Value) throws -> Value {
        let outcome = Outcome<Value>()
        Task(executorPreference: self) {
            do { outcome.finish(.success(try await operation())) } catch { outcome.finish(.failure(error)) }
        }
        guard let limit else { return try outcome.wait() }
        let (seconds, attoseconds) = limit.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        guard let value = try outcome.wait(until: .now() + .nanoseconds(nanoseconds)) else {
            gaveUp()
            throw TimedOut()
        }
        return value
    }

    /// An operation did not end within its limit.
    struct TimedOut: Error {}

    /// Starts `operation` on the bridge's thread without waiting (a listener that lives as long
    /// as the remote does).
    @discardableResult
    func start(_ operation: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        Task(executorPreference: self) { await operation() }
    }
}

/// A result one thread hands to another that waits for it.
private final class Outcome<Value: Sendable>: Sendable {
    private let result = Mutex<Result<Value, any Error>?>(nil)
    private let finished = DispatchSemaphore(value: 0)

    func finish(_ outcome: Result<Value, any Error>) {
        result.withLock { $0 = outcome }
        finished.signal()
    }

    func wait() throws -> Value {
        finished.wait()
        return try result.withLock { $0! }.get()
    }

    /// The result, or nil when there is none by `deadline`.
    func wait(until deadline: DispatchTime) throws -> Value? {
        guard finished.wait(timeout: deadline) == .success else { return nil }
        return try result.withLock { $0! }.get()
    }
}
