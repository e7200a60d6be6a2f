import CLinux
import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import DocfsRemotePostgres
import DocfsSync
import DocfsSyncStore
import Foundation
import Logging

/// A linked store's sync, running (issue 22 §1, §5): the store as the engine's local side, the
/// PostgreSQL remote its link names, and the loop that runs the engine on a thread of its own,
/// woken by each local change that fills the outbox and by the remote's notifications. The
/// daemon runs one for a linked store from its start (offline too: the remote connects when
/// it can); `docfs remote link` of a served store starts one, `unlink` stops it.
final class SyncService: Sendable {
    let link: RemoteLink
    let sync: StoreSync
    let remote: PostgresRemote
    let loop: SyncLoop
    /// Keeps the content here under the cache limit (a store that downloads on demand).
    let trimmer: CacheTrimmer?

    /// `contentView`: the view the cache limit evicts through.
    init(shared: ServedStore, link: RemoteLink, remote: PostgresRemote? = nil, contentView: Filesystem, logger: Logger) throws(DocfsError) {
        self.link = link
        let location: PostgresLocation
        do { location = try PostgresLocation(link.uri) } catch {
            throw DocfsError(.storeUnavailable, "the remote link in \(shared.store.layout.remoteFile) names a URI docfs cannot read (\(error)): link the store again")
        }
        if let remote {
            self.remote = remote
        } else {
            do {
                self.remote = try PostgresRemote(location, machine: link.machine, connectingNow: false, logger: logger)
            } catch {
                throw DocfsError(.storeUnavailable, error.message)
            }
        }
        sync = try StoreSync(serving: shared, author: RemoteAuthor(machine: link.machine, user: link.maker))
        let log = logger
        let engine = SyncEngine(store: sync, remote: self.remote,
                                keyValues: StoreKeyValues(database: try KeyValueDatabase(path: shared.store.layout.keyValuesFile)))
        engine.onProblem { log.warning("\($0)") }
        if ProcessInfo.processInfo.environment["DOCFS_SYNC_TRACE"] == "1" {
            engine.onTrace { log.notice("sync: \($0)") }
        }
        // Rounds read, hash and send what the user's own writes made: on a busy machine those
        // writes come first (nice 10: about a tenth of a core's share against them, never
        // starved), so the local write path does not slow for the sync (issue 22 §7).
        loop = SyncLoop(engine: engine, threadSetup: { _ = docfs_lower_thread_priority(10) }) { log.notice("\($0)") }
        trimmer = CacheTrimmer(filesystem: contentView)
        trimmer?.onProblem { log.warning("\($0)") }
    }

    func start() {
        sync.fillOutbox(true)
        sync.fetchPromisedContent(from: remote)
        let loop = loop
        let trimmer = trimmer
        sync.onOutboxFilled {
            loop.wake()
            trimmer?.noteLocalChange()
        }
        // An app's write through its key files (`.docfs/kv/`) goes up at once.
        sync.shared.keyValuesWritten.set { loop.wake() }
        loop.start()
        trimmer?.start()
    }

    /// A round soon: a change the store's watcher does not see waits (a key-value write).
    func wake() { loop.wake() }

    func stop() {
        trimmer?.stop()
        loop.stop()
        sync.fetchPromisedContent(from: nil)
        sync.onOutboxFilled {}
        sync.shared.keyValuesWritten.set {}
        remote.close()
    }

    /// What `docfs remote status` shows.
    var status: RemoteStatusReport {
        let status = loop.status
        let parked = sync.parkedSummary()
        var report = RemoteStatusReport(uri: link.uri, machine: link.machine, space: link.space, linked: link.linked,
                                  waiting: (try? sync.waiting()) ?? 0, incoming: loop.engine.incoming.load(ordering: .relaxed),
                                  lastContact: status.lastContact,
                                  lastError: status.lastError, nextTry: status.nextTry, rounds: status.rounds, served: true)
        report.parked = parked.count
        report.parkedProblem = parked.problem
        report.downloadedBytes = sync.promisedBytesFetched
        report.checked = status.audit?.checked
        report.checkDuration = status.audit?.duration
        report.checkDifferences = status.audit?.differences
        report.keptHereOnly = status.audit?.keptHereOnly
        report.keptHereOnlyCount = status.audit?.keptHereOnlyCount
        report.inStep = status.checkedInStep && report.waiting == 0 && report.incoming == 0 && parked.count == 0 && status.lastError == nil
        if let trimmer {
            report.cacheLimit = trimmer.limit
            report.cacheUsed = trimmer.lastTrim?.used
        }
        return report
    }
}

/// What `docfs remote status` reports of a store's link.
public struct RemoteStatusReport: Codable, Sendable {
    public var uri: String
    public var machine: String
    public var space: UInt64
    public var linked: Double
    /// Changes waiting to go up.
    public var waiting: Int
    /// Changes of other machines waiting to come down (as of the daemon's last round; nil
    /// when no daemon serves the store).
    public var incoming: Int?
    /// When the daemon last reached the remote (seconds since the epoch); nil: not yet.
    public var lastContact: Double?
    /// Why the last round failed, in words.
    public var lastError: String?
    /// When the next try is, after a failure.
    public var nextTry: Double?
    public var rounds: Int
    /// Whether a daemon serves (and so syncs) the store now.
    public var served: Bool
    /// Changes of other machines that could not be applied here (tried again now and then),
    /// and why the oldest could not.
    public var parked: Int = 0
    public var parkedProblem: String?
    /// When the daemon last checked the store against the remote (`SyncEngine.audit`), and how
    /// many differences that check found; whether the store is in step: that check found none,
    /// nothing moved since, nothing waits and the last round did not fail.
    public var checked: Double?
    /// How long that check took (seconds).
    public var checkDuration: Double?
    public var checkDifferences: Int?
    public var inStep: Bool?
    /// What the store holds that does not travel, as the daemon's last check found it (the
    /// first few), and how many in all (`KeptHereOnly`).
    public var keptHereOnly: [KeptHereOnly]?
    public var keptHereOnlyCount: Int?
    /// Bytes of promised files fetched since the daemon started (issue 23).
    public var downloadedBytes: Int64 = 0
    /// The cache limit, and the content here when it was last measured (issue 23).
    public var cacheLimit: Int64?
    public var cacheUsed: Int64?

    public init(uri: String, machine: String, space: UInt64, linked: Double, waiting: Int, incoming: Int?, lastContact: Double?,
                lastError: String?, nextTry: Double?, rounds: Int, served: Bool) {
        self.uri = uri
        self.machine = machine
        self.space = space
        self.linked = linked
        self.waiting = waiting
        self.incoming = incoming
        self.lastContact = lastContact
        self.lastError = lastError
        self.nextTry = nextTry
        self.rounds = rounds
        self.served = served
    }
}

