import DocfsCore
import DocfsProvider
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Keeps a linked store's content under its cache limit while it is served (issue 23 §1): a
/// thread of its own trims soon after a download finishes (at most once a second), within
/// `changePause` seconds of a local change (a new or grown file counts), and every `period`
/// seconds besides (a save that has gone up becomes evictable, a file closed may go). Each trim
/// reads the records of the content here, so local changes, which come in floods, wake it
/// seldom. Runs only for a store that downloads on demand and has a limit.
public final class CacheTrimmer: Sendable {
    private let filesystem: Filesystem
    public let limit: Int64
    private let period: Double
    private let changePause: Double
    private let running = Atomic<Bool>(false)
    private let localChanges = Atomic<Int>(0)
    /// The last trim's outcome (`docfs remote status`), and why the last one failed.
    private let last = Mutex<(trim: Filesystem.CacheTrim?, failure: String?)>((nil, nil))
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

    public var lastTrim: Filesystem.CacheTrim? { last.withLock { $0.trim } }

    /// Where a trim's failure goes (the daemon's log).
    public func onProblem(_ sink: @escaping @Sendable (String) -> Void) { problems.set(sink) }

    public func start() {
        guard !running.exchange(true, ordering: .relaxed) else { return }
        DetachedThread.start { [self] in
            var seen = -1
            var seenChanges = 0
            var lastRun = -period
            while running.load(ordering: .relaxed) {
                let finished = filesystem.shared.promises.downloadsFinished.load(ordering: .relaxed)
                let changes = localChanges.load(ordering: .relaxed)
                let now = PromisedDownloads.now()
                if finished != seen || now - lastRun >= period || (changes != seenChanges && now - lastRun >= changePause) {
                    seen = finished
                    seenChanges = changes
                    lastRun = now
                    trimNow()
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
            last.withLock { $0 = (trim, nil) }
            return trim
        } catch {
            last.withLock { $0.failure = error.message }
            problems("keeping the content under the cache limit failed: \(error.message)")
            return nil
        }
    }
}
