import CIndexSQLite
import DocfsCore
import Foundation
import GRDB
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The store's metadata index (DESIGN §5): one SQLite database in WAL mode under
/// `STORE/index/`, written by the daemon (stitching) and read by `docfs query` in other
/// processes without ever waiting for the daemon. It is derived state: `IndexRebuild` makes it
/// again from the store, and `open` makes it anew when it is corrupt or from a schema this
/// docfs does not know.
///
/// Writes are transactions of `IndexChange`s, each under the next change sequence number;
/// `changes(after:)` answers what changed since a sequence, for `--watch`. Only one process
/// writes (the daemon while it serves the store, else the CLI's rebuild; the journal's lock
/// refuses a second), so sequence and entry numbers are counted here and never read back per
/// write.
///
/// Stitched changes (`stitch`) reach the database through the journal (`IndexJournal`): the
/// caller waits for one append to it, and a background commit (`startCommitting`) moves them
/// into SQLite in batches, as fast as they come (it never waits while changes wait). Every
/// read lays the changes its snapshot lacks over it (`IndexOverlay`), so readers see a stitched
/// change as soon as `stitch` returns: the daemon keeps one overlay, applied a frame at a time
/// and pruned as frames are committed, and reads it under its lock after its snapshot (a read
/// costs the same however many changes wait); another process reads the journal from the end
/// of the last committed frame (`meta`'s `journalOffset`), not from its start. WAL with
/// synchronous=NORMAL and an unsynced journal: a process crash loses nothing (the next writer
/// replays the journal), a machine crash may lose the last changes, which the daemon's
/// reconciling walk at its start puts back.
public final class IndexDatabase: Sendable {
    let pool: DatabasePool
    public let path: String
    /// Where the journal is (beside the database).
    public let journalPath: String
    /// The writer's journal, numbers, uncommitted frames and their overlay; nil in a read-only
    /// index. Lock order: `commits` before `writer`. `writer` is held for one append and the
    /// overlay's update (point reads of the rows the frame reaches, on a connection of its
    /// own), and by a read for its merge with the overlay; never across a SQLite write
    /// transaction, so a stitching caller never waits for SQLite, except for `apply`'s (a
    /// rebuild's batch, which no stitch may read half done).
    private let writer: Mutex<Writer?>
    /// Held by whoever commits to SQLite (the background commit, a direct `apply`): frames are
    /// committed in order, once.
    private let commits = Mutex(())
    private let committing = Mutex<CommitLoop?>(nil)
    /// Rows queries read from SQLite, for tests that bound what a limit reads.
    let queryRowsRead = StepCounter()
    /// The `syncLinks` table in memory, read at its first use (nil before): a sync asks it
    /// several times for every item it applies, and holds few rows (one per symbolic link).
    /// Held across its own writes to the table (lock order: `syncLinks` before SQLite's writer;
    /// a lookup may so wait for a long commit), so it never answers from before a write its
    /// table has. Only the process holding the store's `daemon.lock` (the daemon, or a command
    /// serving the store itself) writes the table: another's cache could not see its writes.
    let syncLinks = Mutex<SyncLinkMap?>(nil)

    private struct Writer {
        var journal: IndexJournal.Writer
        /// The last sequence and entry numbers handed out.
        var sequence: Int64
        var entry: Int64
        /// Frames appended to the journal and not yet committed, oldest first.
        var pending: [Waiting] = []
        /// The pending frames laid over the database.
        var overlay = IndexOverlay(remembersCommittedEntries: true)
        /// Where the overlay reads the rows a frame reaches (used only under the lock).
        let base: DatabaseQueue
        /// The journal's size past which it starts again with just the waiting frames.
        let restartSize: Int

        /// The numbers for a new frame of `changes`.
        mutating func number(_ changes: [IndexChange]) -> IndexOverlay.Frame {
            sequence += 1
            let frame = IndexOverlay.Frame(sequence: sequence, entryBase: entry, changes: changes)
            for change in changes { if case .put = change { entry += 1 } }
            return frame
        }

        /// Appends `frame` to the journal and the overlay. A failed append is committed with
        /// the others all the same (readers in other processes see it once it is).
        mutating func add(_ frame: IndexOverlay.Frame) -> DocfsError? {
            let bytes = IndexJournal.frame(sequence: frame.sequence, entryBase: frame.entryBase, changes: frame.changes)
            var failure: DocfsError? = nil
            do throws(DocfsError) { try journal.append(bytes) } catch { failure = error }
            pending.append(Waiting(frame: frame, bytes: bytes, end: journal.size))
            do {
                let base = self.base
                // Outside a transaction: each statement sees the latest commit, whose frames the
                // overlay still holds until `committed` (under this lock) drops them.
                try base.inDatabase { db in try overlay.apply(frame, base: SnapshotBase(db: db)) }
            } catch {
                failure = failure ?? DocfsError(.internalFailure, "reading the index for a stitched change failed",
                                                cause: DocfsError(.internalFailure, String(describing: error)))
            }
            return failure
        }

        /// The first `count` waiting frames, up to `sequence`, are in the database: they stop
        /// waiting, the overlay drops what only they reached, and a journal grown past
        /// `restartSize` starts again with just the frames still waiting.
        mutating func committed(_ count: Int, through sequence: Int64) {
            pending.removeFirst(min(count, pending.count))
            overlay.prune(through: sequence)
            let waitingBytes = pending.reduce(0) { $0 + $1.bytes.count }
            guard journal.size > restartSize, waitingBytes < journal.size / 2 else { return }
            guard (try? journal.restart(carrying: pending.map(\.bytes))) != nil else { return }  // else it grows until the next try
            var end = IndexJournal.header.count
            for i in pending.indices {
                end += pending[i].bytes.count
                pending[i].end = end
            }
        }
    }

    /// A frame waiting to be committed: decoded, as the journal holds it, and where it ends there.
    private struct Waiting {
        var frame: IndexOverlay.Frame
        var bytes: [UInt8]
        var end: Int
    }

    /// Plans of `db`'s statements never depend on the values bound to them: for the connections
    /// stitches read and commits write through, whose few statements run for every change.
    /// Without this, SQLite compiles a statement again whenever a value is bound to
    /// `scope = ?`: the planner weighs that value against the partial index of references
    /// (`WHERE scope = 'external'`), and GRDB's authorizer runs on every compile. That was a
    /// tenth of the daemon's time in an `rm -rf` (each removal reads the rows under the place it
    /// empties). Not for the connections queries run on: there the value bound to `GLOB ?`
    /// lets a name's prefix be read from its index.
    static func planWithoutBoundValues(_ db: Database) throws {
        let code = docfs_sqlite_plan_without_bound_values(UnsafeMutableRawPointer(db.sqliteConnection))
        guard code == 0 else { throw DatabaseError(resultCode: ResultCode(rawValue: code), message: "enabling the planner's stability guarantee failed") }
    }

    /// How many times SQLite compiled the statement reading the rows under a place again while
    /// it read under each of `places`, on the connection stitches read through (a check for
    /// tests: it must be none, see `planWithoutBoundValues`).
    func recompilationsReadingUnder(_ places: [IndexLocation]) throws -> Int {
        try writer.withLock { writer in
            try writer!.base.inDatabase { db in
                let statement = try db.cachedStatement(sql: "SELECT entry FROM items WHERE container = ? AND scope = ? AND path > ? AND path < ?")
                for place in places { _ = try Int64.fetchAll(statement, arguments: [place.container, place.scope, place.path + "/", place.path + "0"]) }
                return Int(docfs_sqlite_statement_recompilations(UnsafeMutableRawPointer(statement.sqliteStatement)))
            }
        }
    }

    /// Opens (creating when `readOnly` is false) the index at `path`, migrating it to the
    /// current schema. A writer takes the journal's lock (waiting up to `patience` seconds for
    /// another writer to let go of it) and first commits what a killed predecessor left in the
    /// journal.
    /// `journalRestartSize`: the journal's size past which it starts again (tests make it small).
    public init(path: String, readOnly: Bool = false, waitingForWriter patience: Double = 10,
                journalRestartSize: Int = 1 << 20) throws(DocfsError) {
        self.path = path
        journalPath = IndexJournal.path(forDatabase: path)
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            // The writer's connection (the commit's statements run for every change); the
            // pool's readers, which run queries, are read-only.
            if !db.configuration.readonly { try Self.planWithoutBoundValues(db) }
            db.add(function: IndexFunctions.match)
            if !readOnly { try db.execute(sql: "PRAGMA synchronous = NORMAL") }
            // A query's scan reads the file through a mapping, not a read per page (not the
            // daemon's: what it maps would count as its own memory).
            if readOnly { try db.execute(sql: "PRAGMA mmap_size = 4294967296") }
        }
        do {
            if !readOnly {
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
            }
            pool = try DatabasePool(path: path, configuration: configuration)
            if !readOnly { try IndexSchema.migrator().migrate(pool) }
        } catch {
            throw DocfsError(.storeUnavailable, "cannot open the index at \(path): run `docfs index rebuild`",
                             cause: DocfsError(.internalFailure, String(describing: error)))
        }
        guard !readOnly else {
            writer = Mutex(nil)
            return
        }
        var journal = try IndexJournal.Writer.open(journalPath, waitingUpTo: patience)
        do {
            let (sequence, entry) = try Self.replay(IndexJournal.read(journalPath), into: pool)
            try journal.restart(carrying: [])
            // Readers in other processes read from the recorded place only in the recorded
            // journal, known by its inode: the new journal's, or a journal made later could
            // reuse the recorded one's freed inode and be read from the middle (a query then
            // missed every waiting change until the next commit).
            try pool.write { db in
                let note = try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)")
                try note.execute(arguments: ["journalInode", Int64(bitPattern: journal.inode)])
                try note.execute(arguments: ["journalOffset", IndexJournal.header.count])
            }
            var base = Configuration()
            base.readonly = true
            base.busyMode = .timeout(10)
            base.prepareDatabase { db in try Self.planWithoutBoundValues(db) }
            writer = Mutex(Writer(journal: journal, sequence: sequence, entry: entry,
                                  base: try DatabaseQueue(path: path, configuration: base), restartSize: journalRestartSize))
        } catch {
            journal.close()
            throw DocfsError(.storeUnavailable, "cannot bring the index at \(path) up to date with its journal: run `docfs index rebuild`",
                             cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }

    /// The background commit holds the index only while it commits, so the index goes when its
    /// last user lets go of it (what waits in the journal is replayed at the next open), and its
    /// commit thread ends with it.
    deinit {
        committing.withLock { $0 }?.abandon()
        writer.withLock { $0?.journal.close() }
    }

    /// Commits the journal's frames the database does not hold; answers the last sequence and
    /// entry numbers used.
    private static func replay(_ frames: [IndexJournal.Frame], into pool: DatabasePool) throws -> (Int64, Int64) {
        try pool.writeWithoutTransaction { db in
            try db.inTransaction(.immediate) {
                let applied = try appliedSequence(db)
                var decoded: [IndexOverlay.Frame] = []
                for frame in frames where frame.sequence > applied {
                    guard let changes = try? frame.changes() else { break }
                    decoded.append(IndexOverlay.Frame(sequence: frame.sequence, entryBase: frame.entryBase, changes: changes))
                }
                try commit(decoded, journal: nil, db)
                return .commit
            }
            let entry = try Int64.fetchOne(db, sql: """
                SELECT max(coalesce((SELECT max(entry) FROM items), 0), coalesce((SELECT max(entry) FROM removals), 0))
                """) ?? 0
            return (try lastSequence(db), entry)
        }
    }

    /// How an index was found by `open`.
    public enum Condition: Sendable, Equatable {
        /// Usable as it is.
        case ready
        /// Empty or partly made: it needs a rebuild.
        case unbuilt
        /// From an older docfs: migrated, and it needs a rebuild.
        case migrated
        /// Unreadable, or from a schema this docfs does not know: set aside (at `setAside`)
        /// and made anew; it needs a rebuild.
        case replaced(reason: String, setAside: String)
    }

    /// Opens the index at `path` for writing, making it anew when it cannot be used as it is
    /// (the damaged file is kept beside it, for a bug report). The caller rebuilds unless the
    /// condition is `.ready`.
    public static func open(path: String, waitingForWriter patience: Double = 10) throws(DocfsError) -> (IndexDatabase, Condition) {
        let existed = FileManager.default.fileExists(atPath: path)
        var problem: String? = nil
        if existed {
            switch inspect(path) {
            case .success(let migrated):
                let index = try IndexDatabase(path: path, waitingForWriter: patience)
                if migrated { return (index, .migrated) }
                return (index, try index.isBuilt() ? .ready : .unbuilt)
            case .failure(let reason):
                problem = reason.description
            }
        }
        guard let problem else { return (try IndexDatabase(path: path, waitingForWriter: patience), .unbuilt) }
        let aside = path + ".damaged-\(Int(Date().timeIntervalSince1970))"
        for suffix in ["", "-wal", "-shm"] {
            _ = try? FileManager.default.moveItem(atPath: path + suffix, toPath: aside + suffix)
        }
        // Its journal's frames were numbered for the damaged database.
        _ = try? FileManager.default.moveItem(atPath: IndexJournal.path(forDatabase: path),
                                              toPath: IndexJournal.path(forDatabase: aside))
        return (try IndexDatabase(path: path, waitingForWriter: patience), .replaced(reason: problem, setAside: aside))
    }

    /// Whether the file at `path` is a usable index: answers whether it needs migrating, or why
    /// it cannot be used.
    private static func inspect(_ path: String) -> Result<Bool, InspectionFailure> {
        do {
            let queue = try DatabaseQueue(path: path)
            defer { try? queue.close() }
            return try queue.read { db -> Result<Bool, InspectionFailure> in
                let check = try String.fetchOne(db, sql: "PRAGMA quick_check") ?? ""
                guard check == "ok" else { return .failure(InspectionFailure("it is damaged (\(check))")) }
                let migrator = IndexSchema.migrator()
                let applied = try migrator.appliedIdentifiers(db)
                let known = Set(migrator.migrations)
                if let unknown = applied.first(where: { !known.contains($0) }) {
                    return .failure(InspectionFailure("it was made by a newer docfs (schema step \(unknown))"))
                }
                return .success(!applied.contains(IndexSchema.newestRebuilding))
            }
        } catch {
            return .failure(InspectionFailure("it cannot be read (\(error))"))
        }
    }

    struct InspectionFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// Whether a whole rebuild has filled the index.
    public func isBuilt() throws(DocfsError) -> Bool {
        try read({ db in try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'built'") == 1 }, merge: { built, _ in built })
    }

    // MARK: - Writing

    /// Records `changes` (one operation's) before returning: one append to the journal, where
    /// every reader sees it; the background commit writes it to SQLite.
    public func stitch(_ changes: [IndexChange]) throws(DocfsError) {
        guard !changes.isEmpty else { return }
        let failure = try writer.withLock { writer throws(DocfsError) -> DocfsError? in
            guard writer != nil else { throw Self.readOnlyFailure(path) }
            return writer!.add(writer!.number(changes))
        }
        committing.withLock { $0?.wake() }
        if let failure { throw failure }
    }

    /// Writes `changes` in one transaction under one new change sequence, after whatever
    /// stitched changes wait to be committed; `built` records that the index now holds the
    /// whole store (the end of a rebuild).
    public func apply(_ changes: [IndexChange], built: Bool = false) throws(DocfsError) {
        guard !changes.isEmpty || built else { return }
        try commits.withLock { _ throws(DocfsError) in
            try writer.withLock { writer throws(DocfsError) in
                guard writer != nil else { throw Self.readOnlyFailure(path) }
                let waiting = writer!.pending.map(\.frame) + [writer!.number(changes)]
                let mark = (inode: writer!.journal.inode, end: writer!.journal.size)
                try write { db in
                    try Self.commit(waiting, journal: mark, db)
                    if built { try db.execute(sql: "UPDATE meta SET value = 1 WHERE key = 'built'") }
                }
                writer!.committed(writer!.pending.count, through: waiting.last!.sequence)
                writer!.overlay.forgetCommittedEntries()  // `changes` never passed through it
            }
        }
    }

    /// Commits the stitched changes waiting in the journal now.
    public func flush() throws(DocfsError) {
        try commits.withLock { _ throws(DocfsError) in
            guard let (waiting, mark) = writer.withLock({ writer -> ([IndexOverlay.Frame], (inode: UInt64, end: Int))? in
                guard let last = writer?.pending.last else { return nil }
                return (writer!.pending.map(\.frame), (writer!.journal.inode, last.end))
            }) else { return }
            try write { db in try Self.commit(waiting, journal: mark, db) }
            writer.withLock { $0?.committed(waiting.count, through: waiting.last!.sequence) }
        }
    }

    /// How many stitched frames wait to be committed.
    var waitingFrames: Int { writer.withLock { $0?.pending.count ?? 0 } }

    /// The places the overlay visited so far (tests bound the cost of reads and stitches by it).
    var overlaySteps: Int { writer.withLock { $0?.overlay.steps ?? 0 } }

    /// The rows queries read from SQLite so far (tests bound what a limit reads by it).
    var queryRowsReadCount: Int { queryRowsRead.value }

    private static func readOnlyFailure(_ path: String) -> DocfsError {
        DocfsError(.internalFailure, "the index at \(path) was opened read-only")
    }

    /// Applies `frames` in order, each under its own sequence and entry numbers, and notes
    /// the last as applied (the journal's frames up to it are in the database).
    /// `journal` is where the last frame ends in the journal, so readers in other processes
    /// read only what follows it.
    private static func commit(_ frames: [IndexOverlay.Frame], journal: (inode: UInt64, end: Int)?, _ db: Database) throws {
        guard let last = frames.last else { return }
        for step in IndexCommitPlan(frames).steps { try apply(step.change, sequence: step.sequence, entry: step.entry, db) }
        if frames.contains(where: { $0.sequence % removalsPruningPeriod == 0 }) { try pruneRemovals(db) }
        let note = try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)")
        try note.execute(arguments: ["applied", last.sequence])
        try note.execute(arguments: ["journalInode", Int64(bitPattern: journal?.inode ?? 0)])
        try note.execute(arguments: ["journalOffset", journal?.end ?? 0])
    }

    static func appliedSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE key = 'applied'")) ?? 0
    }

    // MARK: - Committing

    /// Commits stitched changes in the background: `interval` after the first of a batch is
    /// stitched, so a burst of operations shares one transaction (the same rows, index pages
    /// and WAL pages are written once per batch: a quarter second's batches took the stress
    /// run a tenth less time than 20 ms ones). Readers do not wait for it (they lay the waiting
    /// changes over their snapshot), so the interval costs no freshness. Failures go to `onFailure`
    /// (the changes stay in the journal and are tried again).
    public func startCommitting(every interval: Duration = .milliseconds(250),
                                onFailure: @escaping @Sendable (DocfsError) -> Void = { _ in }) {
        let loop = CommitLoop()
        guard committing.withLock({ current -> Bool in
            guard current == nil else { return false }
            current = loop
            return true
        }) else { return }
        let nanoseconds = interval.components.seconds * 1_000_000_000 + interval.components.attoseconds / 1_000_000_000
        Thread.detachNewThread { [weak self] in
            while loop.waitForWork() {
                usleep(useconds_t(max(nanoseconds / 1000, 0)))
                guard let self else { break }
                do throws(DocfsError) { try self.flush() } catch { onFailure(error) }
            }
            loop.finished.signal()
        }
    }

    /// Stops the background commit and commits what is left.
    public func stopCommitting() {
        if let loop = committing.withLock({ current -> CommitLoop? in
            defer { current = nil }
            return current
        }) {
            loop.stop()
        }
        try? flush()
    }

    /// The background commit's wake-ups: the first stitch after the commit started its wait
    /// wakes it (once, however many follow), so every change is committed by a flush that
    /// begins after it was stitched.
    private final class CommitLoop: Sendable {
        private let work = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        private let state = Mutex((running: true, woken: false))

        func wake() {
            let first = state.withLock { state -> Bool in
                defer { state.woken = true }
                return !state.woken
            }
            if first { work.signal() }
        }

        /// Waits for stitched changes; false once stopped.
        func waitForWork() -> Bool {
            work.wait()
            return state.withLock { state in
                state.woken = false
                return state.running
            }
        }

        func stop() {
            abandon()
            finished.wait()
        }

        /// Stops without waiting for the thread (the index is going away, perhaps on it).
        func abandon() {
            state.withLock { $0.running = false }
            work.signal()
        }
    }

    /// Applies `change` under `sequence`; a put that makes a new row gives it number `entry`.
    private static func apply(_ change: IndexChange, sequence: Int64, entry: Int64, _ db: Database) throws {
        switch change {
        case .put(let record):
            // A new place takes the next entry number (an update keeps its own): numbers are
            // never reused, so a put never brings back a removed entry. Most puts make a row again in place (a close, a setattr): an update of the columns
            // that change leaves the name, id and created indexes alone (SQLite rewrites every
            // index a SET names), which the upsert would rewrite.
            let values = Self.values(record, entry: entry, sequence: sequence)
            let place: [(any DatabaseValueConvertible)?] = [record.container, record.scope, record.path, record.id, record.name, record.created]
            try db.cachedStatement(sql: refreshSQL).execute(arguments: StatementArguments(refreshedColumns.map { values[$0] } + place))
            if db.changesCount == 0 {
                try db.cachedStatement(sql: upsertSQL).execute(arguments: StatementArguments(values))
            }
        case .touch(let location, let modified, let statusChanged):
            try db.cachedStatement(sql: """
                UPDATE items SET modified = max(modified, ?), statusChanged = max(statusChanged, ?), sequence = ?
                WHERE container = ? AND scope = ? AND path = ?
                """).execute(arguments: [modified, statusChanged, sequence, location.container, location.scope, location.path])
        case .remove(let location, let machine):
            // Two statements: with an OR, SQLite would scan the table instead of the index.
            var removed = try Int64.fetchAll(db.cachedStatement(sql: """
                DELETE FROM items WHERE container = ? AND scope = ? AND path = ? RETURNING entry
                """), arguments: [location.container, location.scope, location.path])
            removed += try Int64.fetchAll(db.cachedStatement(sql: """
                DELETE FROM items WHERE container = ? AND scope = ? AND path > ? AND path < ? RETURNING entry
                """), arguments: [location.container, location.scope, location.path + "/", location.path + "0"])
            try noteRemoved(removed, sequence: sequence, machine: machine, db)
        case .removeEntries(let gone):
            guard !gone.isEmpty else { return }
            let removed = try Int64.fetchAll(db, sql: "DELETE FROM items WHERE entry IN (SELECT value FROM json_each(?)) RETURNING entry",
                                             arguments: [encodeNumbers(gone)])
            try noteRemoved(removed, sequence: sequence, machine: "", db)
        case .move(let from, let to):
            try move(from, to, sequence: sequence, db)
        case .exchange(let a, let b):
            // Through a place no path can be (paths start with "/").
            let aside = IndexLocation(container: a.container, scope: a.scope, path: "\u{1}exchange")
            try move(a, aside, sequence: sequence, db)
            try move(b, a, sequence: sequence, db)
            try move(aside, b, sequence: sequence, db)
        case .outbox(let item):
            try db.cachedStatement(sql: "INSERT INTO outbox (item, sequence) VALUES (?, ?)").execute(arguments: [item, sequence])
        }
    }

    private static func move(_ from: IndexLocation, _ to: IndexLocation, sequence: Int64, _ db: Database) throws {
        try db.cachedStatement(sql: """
            UPDATE items SET container = ?, scope = ?, path = ?, name = ?, sequence = ?
            WHERE container = ? AND scope = ? AND path = ?
            """).execute(arguments: [to.container, to.scope, to.path, to.name, sequence, from.container, from.scope, from.path])
        try db.cachedStatement(sql: """
            UPDATE items SET container = ?, scope = ?, path = ? || substr(path, ?), sequence = ?
            WHERE container = ? AND scope = ? AND path > ? AND path < ?
            """).execute(arguments: [to.container, to.scope, to.path, from.path.unicodeScalars.count + 1, sequence,
                                     from.container, from.scope, from.path + "/", from.path + "0"])
    }

    private static func noteRemoved(_ entries: [Int64], sequence: Int64, machine: String, _ db: Database) throws {
        let statement = try db.cachedStatement(sql: "INSERT OR REPLACE INTO removals(sequence, entry, machine) VALUES (?, ?, ?)")
        for entry in entries { try statement.execute(arguments: [sequence, entry, machine]) }
    }

    /// Removals are kept for watchers in other processes; past this many, the oldest go (a
    /// watcher that fell that far behind reads its whole result set again).
    static let removalsKept = 100_000
    static let removalsPruningPeriod: Int64 = 10_000

    private static func pruneRemovals(_ db: Database) throws {
        try db.execute(sql: """
            DELETE FROM removals WHERE sequence < (SELECT sequence FROM removals ORDER BY sequence DESC LIMIT 1 OFFSET ?)
            """, arguments: [removalsKept])
    }

    static func lastSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: """
            SELECT max(coalesce((SELECT max(sequence) FROM items), 0), coalesce((SELECT max(sequence) FROM removals), 0),
                       coalesce((SELECT value FROM meta WHERE key = 'applied'), 0))
            """) ?? 0
    }

    // MARK: - Rows

    /// The columns of a record, in the order `selection` reads them and `values` gives them.
    static let columns = ["entry", "id", "name", "path", "container", "containerName", "scope", "kind", "size", "created",
                                  "modified", "contentType", "uti", "version", "tags", "comment", "hasThumbnail",
                                  "isExternal", "originalPath", "localPath", "conflict", "downloadState", "uploadState",
                                  "sequence", "backingInode", "statusChanged", "remoteMachine"]

    /// Inserts a record, or updates the entry at its place (keeping the entry number).
    private static let upsertSQL = """
        INSERT INTO items(\(columns.joined(separator: ", "))) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))
        ON CONFLICT(container, scope, path) DO UPDATE SET \(columns.filter { !["entry", "container", "scope", "path"].contains($0) }.map { "\($0) = excluded.\($0)" }.joined(separator: ", "))
        """

    /// The columns a put of a row at its own place, with its own id, name and created date, may change.
    private static let refreshedColumns = columns.indices.filter { !["entry", "container", "scope", "path", "name", "id", "created"].contains(columns[$0]) }

    private static let refreshSQL = """
        UPDATE items SET \(refreshedColumns.map { "\(columns[$0]) = ?" }.joined(separator: ", "))
        WHERE container = ? AND scope = ? AND path = ? AND id = ? AND name = ? AND created = ?
        """

    /// A record's values, in the order of `columns`.
    private static func values(_ r: IndexRecord, entry: Int64, sequence: Int64) -> [(any DatabaseValueConvertible)?] {
        [entry, r.id, r.name, r.path, r.container, r.containerName, r.scope, r.kind, r.size, r.created, r.modified,
         r.contentType, r.uti, r.version, encodeTags(r.tags), r.comment, r.hasThumbnail, r.isExternal,
         r.originalPath, r.localPath, r.conflict, r.downloadState, r.uploadState, sequence,
         Int64(bitPattern: r.backingInode), r.statusChanged, r.remoteMachine]
    }

    /// The columns a read of records selects (not `*`: a row's values are read by position,
    /// GRDB's lookup by name lowercases the name on every access).
    static let selection = columns.joined(separator: ", ")
    static let sequenceColumn = columns.firstIndex(of: "sequence")!

    /// The record a row read with `selection` holds.
    static func record(_ row: Row) -> IndexRecord {
        var record = IndexRecord(
            id: row[1], name: row[2], path: row[3], container: row[4], containerName: row[5], scope: row[6],
            kind: row[7], size: row[8], created: row[9], modified: row[10], contentType: row[11], uti: row[12],
            version: row[13], tags: decodeTags(row[14]), comment: row[15], hasThumbnail: row[16], isExternal: row[17],
            originalPath: row[18], localPath: row[19], conflict: row[20], downloadState: row[21], uploadState: row[22])
        record.entry = row[0]
        record.backingInode = UInt64(bitPattern: row[24])
        record.statusChanged = row[25]
        record.remoteMachine = row[26]
        return record
    }

    static func encodeTags(_ tags: [String]) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: tags), let text = String(data: data, encoding: .utf8) else { return "[]" }
        return text
    }

    static func encodeNumbers(_ numbers: [Int64]) -> String {
        "[" + numbers.map(String.init).joined(separator: ",") + "]"
    }

    static func decodeTags(_ text: String) -> [String] {
        if text == "[]" { return [] }  // most records: no JSON parse per row
        guard let data = text.data(using: .utf8), let tags = try? JSONSerialization.jsonObject(with: data) as? [String] else { return [] }
        return tags
    }

    // MARK: - Access

    /// Runs `body` in one transaction. BEGIN and COMMIT are prepared once per connection (GRDB's
    /// own transaction wrapper compiles them each time, a measurable part of a small write).
    func write<T>(_ body: (Database) throws -> T) throws(DocfsError) -> T {
        do {
            return try pool.writeWithoutTransaction { db in
                try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute()
                do {
                    let result = try body(db)
                    try db.cachedStatement(sql: "COMMIT").execute()
                    return result
                } catch {
                    if db.isInsideTransaction { try? db.cachedStatement(sql: "ROLLBACK").execute() }
                    throw error
                }
            }
        } catch {
            throw DocfsError(.internalFailure, "writing the index at \(path) failed", cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }


    /// Runs a read in two steps: `stored` on a snapshot of the database, then `merge` of its
    /// answer with the changes the snapshot lacks. In the daemon, the merge runs under the
    /// writer's lock on its overlay, and the read starts again (at most twice, then holding the
    /// lock throughout) when a commit dropped from the overlay what the snapshot predates, or
    /// `merge` asks for it (nil). In another process, the overlay is made from the journal's
    /// frames after the snapshot's.
    func read<Stored: Sendable, T: Sendable>(_ stored: (Database) throws -> Stored,
                                             merge: @Sendable (Stored, IndexOverlay) throws -> T?) throws(DocfsError) -> T {
        do {
            guard writer.withLock({ $0 != nil }) else {
                let journal = Glibc.open(journalPath, O_RDONLY | O_CLOEXEC)
                defer { if journal >= 0 { Glibc.close(journal) } }
                return try pool.read { db in
                    let overlay = try Self.overlay(journal: journal, db)
                    guard let result = try merge(try stored(db), overlay) else { throw Self.unmergeable }
                    return result
                }
            }
            for _ in 0..<3 {
                let (answer, applied) = try pool.read { db in (try stored(db), try Self.appliedSequence(db)) }
                let merged = try writer.withLock { writer -> T? in
                    guard writer!.overlay.prunedThrough <= applied else { return nil }
                    return try merge(answer, writer!.overlay)
                }
                if let merged { return merged }
            }
            return try writer.withLock { writer -> T in
                try pool.read { db in
                    guard let result = try merge(try stored(db), writer!.overlay) else { throw Self.unmergeable }
                    return result
                }
            }
        } catch let error as DocfsError {
            throw error
        } catch {
            throw DocfsError(.internalFailure, "reading the index at \(path) failed", cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }

    /// A read of a few rows by an index (a place, an item's names, some entries): in the daemon
    /// it runs under the writer's lock on the connection stitches read through, outside a
    /// transaction, and the overlay answers for every place a waiting or just-committed frame
    /// reached (a commit's frames leave the overlay only under that lock), so no snapshot needs
    /// to be matched with it and no transaction begun: a few index lookups, as cheap as a
    /// stitch's own. In another process, `read`.
    func pointRead<Stored: Sendable, T: Sendable>(_ stored: (Database) throws -> Stored,
                                                  merge: @Sendable (Stored, IndexOverlay) throws -> T) throws(DocfsError) -> T {
        do {
            if let result = try writer.withLock({ writer -> T? in
                guard writer != nil else { return nil }
                let rows = try writer!.base.inDatabase { db in try stored(db) }
                return try merge(rows, writer!.overlay)
            }) {
                return result
            }
        } catch let error as DocfsError {
            throw error
        } catch {
            throw DocfsError(.internalFailure, "reading the index at \(path) failed", cause: DocfsError(.internalFailure, String(describing: error)))
        }
        return try read({ db in try stored(db) }, merge: { stored, overlay in try merge(stored, overlay) })
    }

    /// Runs `body` on a snapshot of the database and the changes it lacks, holding the writer's
    /// lock throughout in the daemon (stitches wait): for rare reads that need both at once.
    func lockedRead<T: Sendable>(_ body: @Sendable (Database, IndexOverlay) throws -> T) throws -> T {
        if let result = try writer.withLock({ writer -> T? in
            guard writer != nil else { return nil }
            return try pool.read { db in try body(db, writer!.overlay) }
        }) {
            return result
        }
        let journal = Glibc.open(journalPath, O_RDONLY | O_CLOEXEC)
        defer { if journal >= 0 { Glibc.close(journal) } }
        return try pool.read { db in try body(db, try Self.overlay(journal: journal, db)) }
    }

    private static let unmergeable = DocfsError(.internalFailure, "the index changed under a read holding its writer's lock")

    /// The journal's frames the snapshot `db` lacks, read from where the last committed frame
    /// ends, laid over the rows they reach.
    private static func overlay(journal fd: Int32, _ db: Database) throws -> IndexOverlay {
        var overlay = IndexOverlay()
        guard fd >= 0 else { return overlay }
        let applied = try appliedSequence(db)
        let inode = try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'journalInode'") ?? 0
        let offset = try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'journalOffset'") ?? 0
        let base = SnapshotBase(db: db)
        for frame in IndexJournal.read(fd, from: offset, ifInode: UInt64(bitPattern: inode)) where frame.sequence > applied {
            guard let changes = try? frame.changes() else { break }
            try overlay.apply(IndexOverlay.Frame(sequence: frame.sequence, entryBase: frame.entryBase, changes: changes), base: base)
        }
        return overlay
    }
}

/// The rows a stitched change reaches, read from a snapshot of the database.
struct SnapshotBase: IndexOverlay.Base {
    let db: Database

    func row(at location: IndexLocation) throws -> IndexOverlay.Row? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT \(IndexDatabase.selection) FROM items WHERE container = ? AND scope = ? AND path = ?"),
                         arguments: [location.container, location.scope, location.path]).map(Self.row)
    }

    func entry(at location: IndexLocation) throws -> Int64? {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT entry FROM items WHERE container = ? AND scope = ? AND path = ?"),
                           arguments: [location.container, location.scope, location.path])
    }

    func rows(under location: IndexLocation) throws -> [IndexOverlay.Row] {
        try Row.fetchAll(db.cachedStatement(sql: "SELECT \(IndexDatabase.selection) FROM items WHERE container = ? AND scope = ? AND path > ? AND path < ?"),
                         arguments: [location.container, location.scope, location.path + "/", location.path + "0"]).map(Self.row)
    }

    func rows(entries: [Int64]) throws -> [IndexOverlay.Row] {
        try Row.fetchAll(db.cachedStatement(sql: "SELECT \(IndexDatabase.selection) FROM items WHERE entry IN (SELECT value FROM json_each(?))"),
                         arguments: [IndexDatabase.encodeNumbers(entries)]).map(Self.row)
    }

    private static func row(_ row: Row) -> IndexOverlay.Row {
        IndexOverlay.Row(record: IndexDatabase.record(row), sequence: row[IndexDatabase.sequenceColumn])
    }
}
