import DocfsCore
import DocfsProvider
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Keeps a linked store's content under its cache limit while it is served (issue 23 §1): a
/// thread of its own trims soon after downloads may have passed the limit (what the last trim
/// measured plus what finished downloading since; looked at once a second), within
/// `changePause` seconds of a local change (a new or grown file counts), and every `period`
/// seconds besides (a save that has gone up becomes evictable, a file closed may go). Each trim
/// reads the records of the content here, so downloads under the limit and local changes,
/// which come in floods, wake it seldom. Runs only for a store that downloads on demand and
/// has a limit.
public final class CacheTrimmer: Sendable {
    private let filesystem: Filesystem
    public let limit: Int64
    private let period: Double
    private let changePause: Double
    private let running = Atomic<Bool>(false)
    private let localChanges = Atomic<Int>(0)
    /// The last trim's outcome (`docfs remote status`).
    private let last = Mutex<Filesystem.CacheTrim?>(nil)
    private let problems = Callback<String>()

    /// The trimmer of `filesystem`'s store; nil when it has no limit (it downloads everything,
    /// or its `cacheLimit` is `none`).
    public init?(filesystem: Filesystem, period: Double = 60, changePause: Double = 10) {
        let policy = filesystem.shared.downloadPolicy
        guard policy.downloads == .onDemand,
              let limit = policy.cacheLimit.bytes(forStoreAt: filesystem.shared.store.layout.root) else { return nil }
        self.filesystem = filesystem
        self.limit = limit
        self.period = period
        self.changePause = changePause
    }

    /// Something changed here (the outbox filled): a trim comes within `changePause`.
    public func noteLocalChange() { localChanges.add(1, ordering: .relaxed) }

    public var lastTrim: Filesystem.CacheTrim? { last.withLock { $0 } }

    /// Where a trim's failure goes (the daemon's log).
    public func onProblem(_ sink: @escaping @Sendable (String) -> Void) { problems.set(sink) }

    public func start() {
        guard !running.exchange(true, ordering: .relaxed) else { return }
        DetachedThread.start { [self] in
            let promises = filesystem.shared.promises
            var measured: (used: Int64, fulfilled: Int64)?
            var seenChanges = 0
            var lastRun = -period
            while running.load(ordering: .relaxed) {
                let arrived = promises.bytesFulfilled.load(ordering: .relaxed)
                let changes = localChanges.load(ordering: .relaxed)
                let now = PromisedDownloads.now()
                // Over only through what came since (a trim that kept what may not go, over the
                // limit, is not tried again each second for nothing).
                let mayBeOver = measured.map { arrived > $0.fulfilled && $0.used + arrived - $0.fulfilled > limit } ?? true
                if mayBeOver || now - lastRun >= period || (changes != seenChanges && now - lastRun >= changePause) {
                    seenChanges = changes
                    lastRun = now
                    // What comes down while the trim measures counts again after it: never less. A
                    // trim that failed is tried again with the period (or a limit's worth of
                    // downloads), not each second.
                    measured = (trimNow()?.used ?? 0, arrived)
                }
                usleep(1_000_000)
            }
        }
    }

    public func stop() { running.store(false, ordering: .relaxed) }

    /// Trims now; answers what it did.
    @discardableResult
    public func trimNow() -> Filesystem.CacheTrim? {
        do throws(DocfsError) {
            let trim = try filesystem.trimContent(toFit: limit)
            last.withLock { $0 = trim }
            return trim
        } catch {
            problems("keeping the content under the cache limit failed: \(error.message)")
            return nil
        }
    }
}
