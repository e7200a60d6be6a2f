import DocfsCore
import Foundation
import GRDB
import Synchronization

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
/// into SQLite in batches. Every read lays the journal's uncommitted frames over its snapshot
/// (`IndexOverlay`), so readers see a stitched change as soon as `stitch` returns. WAL with
/// synchronous=NORMAL and an unsynced journal: a process crash loses nothing (the next writer
/// replays the journal), a machine crash may lose the last changes, which the daemon's
/// reconciling walk at its start puts back.
public final class IndexDatabase: Sendable {
    private let pool: DatabasePool
    public let path: String
    /// Where the journal is (beside the database).
    public let journalPath: String
    /// The writer's journal, numbers and uncommitted frames; nil in a read-only index.
    /// Lock order: `commits` before `writer`; `writer` is held for one append, never across a
    /// SQLite transaction, so a stitching caller never waits for SQLite.
    private let writer: Mutex<Writer?>
    /// Held by whoever commits to SQLite (the background commit, a direct `apply`): frames are
    /// committed in order, once.
    private let commits = Mutex(())
    private let committing = Mutex<CommitLoop?>(nil)

    private struct Writer {
        var journal: IndexJournal.Writer
        /// The last sequence and entry numbers handed out.
        var sequence: Int64
        var entry: Int64
        /// Frames appended to the journal and not yet committed, oldest first.
        var pending: [IndexOverlay.Frame] = []

        /// The numbers for a new frame of `changes`.
        mutating func number(_ changes: [IndexChange]) -> IndexOverlay.Frame {
            sequence += 1
            let frame = IndexOverlay.Frame(sequence: sequence, entryBase: entry, changes: changes)
            for change in changes { if case .put = change { entry += 1 } }
            return frame
        }
    }

    /// Opens (creating when `readOnly` is false) the index at `path`, migrating it to the
    /// current schema. A writer takes the journal's lock (waiting up to `patience` seconds for
    /// another writer to let go of it) and first commits what a killed predecessor left in the
    /// journal.
    public init(path: String, readOnly: Bool = false, waitingForWriter patience: Double = 10) throws(DocfsError) {
        self.path = path
        journalPath = IndexJournal.path(forDatabase: path)
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
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
            try journal.restart()
            writer = Mutex(Writer(journal: journal, sequence: sequence, entry: entry))
        } catch {
            journal.close()
            throw DocfsError(.storeUnavailable, "cannot bring the index at \(path) up to date with its journal: run `docfs index rebuild`",
                             cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }

    /// The background commit holds the index: `stopCommitting` before letting go of it.
    deinit {
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
                try commit(decoded, db)
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
                return .success(!applied.contains(IndexSchema.newest))
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
        try read { db, _ in try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'built'") == 1 }
    }

    // MARK: - Writing

    /// Records `changes` (one operation's) before returning: one append to the journal, where
    /// every reader sees it; the background commit writes it to SQLite.
    public func stitch(_ changes: [IndexChange]) throws(DocfsError) {
        guard !changes.isEmpty else { return }
        let (first, failure) = try writer.withLock { writer throws(DocfsError) -> (Bool, DocfsError?) in
            guard writer != nil else { throw Self.readOnlyFailure(path) }
            let frame = writer!.number(changes)
            writer!.pending.append(frame)
            do throws(DocfsError) {
                try writer!.journal.append(IndexJournal.frame(sequence: frame.sequence, entryBase: frame.entryBase, changes: changes))
                return (writer!.pending.count == 1, nil)
            } catch {
                // Still committed with the others; readers see it once it is.
                return (writer!.pending.count == 1, error)
            }
        }
        if first { committing.withLock { $0?.wake() } }
        if let failure { throw failure }
    }

    /// Writes `changes` in one transaction under one new change sequence, after whatever
    /// stitched changes wait to be committed; `built` records that the index now holds the
    /// whole store (the end of a rebuild).
    public func apply(_ changes: [IndexChange], built: Bool = false) throws(DocfsError) {
        guard !changes.isEmpty || built else { return }
        try commits.withLock { _ throws(DocfsError) in
            let (waiting, frame) = try writer.withLock { writer throws(DocfsError) in
                guard writer != nil else { throw Self.readOnlyFailure(path) }
                return (writer!.pending, writer!.number(changes))
            }
            try write { db in
                try Self.commit(waiting + [frame], db)
                if built { try db.execute(sql: "UPDATE meta SET value = 1 WHERE key = 'built'") }
            }
            committed(waiting.count)
        }
    }

    /// Commits the stitched changes waiting in the journal now.
    public func flush() throws(DocfsError) {
        try commits.withLock { _ throws(DocfsError) in
            let waiting = writer.withLock { $0?.pending ?? [] }
            guard !waiting.isEmpty else { return }
            try write { db in try Self.commit(waiting, db) }
            committed(waiting.count)
        }
    }

    /// The first `count` waiting frames are in the database: they stop waiting, and a journal
    /// grown past `journalRestartSize` with nothing left waiting starts again empty.
    private func committed(_ count: Int) {
        writer.withLock { writer in
            guard writer != nil else { return }
            writer!.pending.removeFirst(min(count, writer!.pending.count))
            if writer!.pending.isEmpty && writer!.journal.size > Self.journalRestartSize {
                try? writer!.journal.restart()  // else it grows until the next try
            }
        }
    }

    static let journalRestartSize = 1 << 20

    private static func readOnlyFailure(_ path: String) -> DocfsError {
        DocfsError(.internalFailure, "the index at \(path) was opened read-only")
    }

    /// Applies `frames` in order, each under its own sequence and entry numbers, and notes
    /// the last as applied (the journal's frames up to it are in the database).
    private static func commit(_ frames: [IndexOverlay.Frame], _ db: Database) throws {
        guard let last = frames.last else { return }
        for frame in frames {
            var entries = frame.entryBase
            for change in frame.changes { try apply(change, sequence: frame.sequence, entries: &entries, db) }
            if frame.sequence % removalsPruningPeriod == 0 { try pruneRemovals(db) }
        }
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta(key, value) VALUES ('applied', ?)").execute(arguments: [last.sequence])
    }

    private static func appliedSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'applied'") ?? 0
    }

    // MARK: - Committing

    /// Commits stitched changes in the background: `interval` after the first of a batch is
    /// stitched, so a burst of operations shares one transaction. Failures go to `onFailure`
    /// (the changes stay in the journal and are tried again).
    public func startCommitting(every interval: Duration = .milliseconds(20),
                                onFailure: @escaping @Sendable (DocfsError) -> Void = { _ in }) {
        let loop = CommitLoop()
        guard committing.withLock({ current -> Bool in
            guard current == nil else { return false }
            current = loop
            return true
        }) else { return }
        let nanoseconds = interval.components.seconds * 1_000_000_000 + interval.components.attoseconds / 1_000_000_000
        Thread.detachNewThread { [self] in
            while loop.waitForWork() {
                usleep(useconds_t(max(nanoseconds / 1000, 0)))
                do throws(DocfsError) { try flush() } catch { onFailure(error) }
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

    /// The background commit's wake-ups.
    private final class CommitLoop: Sendable {
        private let work = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        private let running = Mutex(true)

        func wake() { work.signal() }

        /// Waits for stitched changes; false once stopped.
        func waitForWork() -> Bool {
            work.wait()
            return running.withLock { $0 }
        }

        func stop() {
            running.withLock { $0 = false }
            work.signal()
            finished.wait()
        }
    }

    private static func apply(_ change: IndexChange, sequence: Int64, entries: inout Int64, _ db: Database) throws {
        switch change {
        case .put(let record):
            // A new place takes the next entry number (an update keeps its own): numbers are
            // never reused, so a put never brings back a removed entry.
            entries += 1
            try db.cachedStatement(sql: upsertSQL).execute(arguments: arguments(record, entry: entries, sequence: sequence))
        case .touch(let location, let modified, let statusChanged):
            try db.cachedStatement(sql: """
                UPDATE items SET modified = ?, statusChanged = ?, sequence = ? WHERE container = ? AND scope = ? AND path = ?
                """).execute(arguments: [modified, statusChanged, sequence, location.container, location.scope, location.path])
        case .remove(let location):
            // Two statements: with an OR, SQLite would scan the table instead of the index.
            var removed = try Int64.fetchAll(db.cachedStatement(sql: """
                DELETE FROM items WHERE container = ? AND scope = ? AND path = ? RETURNING entry
                """), arguments: [location.container, location.scope, location.path])
            removed += try Int64.fetchAll(db.cachedStatement(sql: """
                DELETE FROM items WHERE container = ? AND scope = ? AND path > ? AND path < ? RETURNING entry
                """), arguments: [location.container, location.scope, location.path + "/", location.path + "0"])
            try noteRemoved(removed, sequence: sequence, db)
        case .removeEntries(let gone):
            guard !gone.isEmpty else { return }
            let removed = try Int64.fetchAll(db, sql: "DELETE FROM items WHERE entry IN (SELECT value FROM json_each(?)) RETURNING entry",
                                             arguments: [encodeNumbers(gone)])
            try noteRemoved(removed, sequence: sequence, db)
        case .move(let from, let to):
            try move(from, to, sequence: sequence, db)
        case .exchange(let a, let b):
            // Through a place no path can be (paths start with "/").
            let aside = IndexLocation(container: a.container, scope: a.scope, path: "\u{1}exchange")
            try move(a, aside, sequence: sequence, db)
            try move(b, a, sequence: sequence, db)
            try move(aside, b, sequence: sequence, db)
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

    private static func noteRemoved(_ entries: [Int64], sequence: Int64, _ db: Database) throws {
        let statement = try db.cachedStatement(sql: "INSERT OR REPLACE INTO removals(sequence, entry) VALUES (?, ?)")
        for entry in entries { try statement.execute(arguments: [sequence, entry]) }
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

    private static func lastSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: """
            SELECT max(coalesce((SELECT max(sequence) FROM items), 0), coalesce((SELECT max(sequence) FROM removals), 0),
                       coalesce((SELECT value FROM meta WHERE key = 'applied'), 0))
            """) ?? 0
    }

    // MARK: - Reading

    /// The record at `location`, if the index has one.
    public func record(at location: IndexLocation) throws(DocfsError) -> IndexRecord? {
        try read { db, overlay in
            if let row = overlay.rows[location] { return row.record }
            if overlay.replaced.contains(location) { return nil }
            return try Row.fetchOne(db, sql: "SELECT * FROM items WHERE container = ? AND scope = ? AND path = ?",
                                    arguments: [location.container, location.scope, location.path]).map(Self.record)
        }
    }

    /// The records held by `entries` (those still there).
    public func records(entries: [Int64]) throws(DocfsError) -> [IndexRecord] {
        guard !entries.isEmpty else { return [] }
        let wanted = Set(entries)
        return try read { db, overlay in
            try Self.merged(db, overlay, where: "entry IN (SELECT value FROM json_each(?))", [Self.encodeNumbers(entries)]) {
                wanted.contains($0.entry)
            }
        }
    }

    /// The records of item `id` (one per name).
    public func records(id: Int64) throws(DocfsError) -> [IndexRecord] {
        try read { db, overlay in try Self.merged(db, overlay, where: "id = ?", [id]) { $0.id == id } }
    }

    /// The item ids that records of more than one backing file carry, outside the external
    /// scope (where references carry their originals' ids): copies that took their original's
    /// id along.
    public func sharedIDs() throws(DocfsError) -> [Int64] {
        try read { db, overlay in
            var holders: [Int64: Set<UInt64>] = [:]
            let stored = try Row.fetchAll(db, sql: """
                SELECT id, backingInode FROM items WHERE id IN (
                    SELECT id FROM items WHERE scope != 'external' GROUP BY id HAVING COUNT(DISTINCT backingInode) > 1
                ) AND scope != 'external'
                """)
            for row in stored { holders[row["id"], default: []].insert(UInt64(bitPattern: row["backingInode"])) }
            guard !overlay.isEmpty else { return holders.keys.sorted() }
            // Laid over: the waiting changes may have made more ids shared, or fewer.
            let records = try Self.merged(db, overlay, where: "scope != 'external'", []) { $0.scope != "external" }
            holders = [:]
            for record in records { holders[record.id, default: []].insert(record.backingInode) }
            return holders.filter { $0.value.count > 1 }.keys.sorted()
        }
    }

    /// The records `query` selects, in its order.
    public func records(matching query: IndexQuery) throws(DocfsError) -> [IndexRecord] {
        try read { db, overlay in try Self.records(matching: query, db, overlay) }
    }

    /// The records `query` selects and the sequence of the last change they reflect, read
    /// together (a watcher's starting point).
    public func recordsAndSequence(matching query: IndexQuery) throws(DocfsError) -> (records: [IndexRecord], sequence: Int64) {
        try read { db, overlay in
            (try Self.records(matching: query, db, overlay), max(try Self.lastSequence(db), overlay.newestSequence))
        }
    }

    private static func records(matching query: IndexQuery, _ db: Database, _ overlay: IndexOverlay) throws -> [IndexRecord] {
        let (condition, arguments) = query.whereClause()
        var sql = "SELECT * FROM items WHERE \(condition) ORDER BY \(query.orderClause())"
        if let limit = query.limit { sql += " LIMIT \(max(limit, 0) + overlay.replaced.count)" }
        let stored = try Row.fetchAll(db, sql: sql, arguments: arguments).map(record)
        guard !overlay.isEmpty else { return stored }
        var records = stored.filter { !overlay.replaced.contains($0.location) }
        records += overlay.rows.values.map(\.record).filter(query.matches)
        records.sort(by: query.areInOrder)
        if let limit = query.limit { records = Array(records.prefix(max(limit, 0))) }
        return records
    }

    /// Every record, by container, scope and path.
    public func allRecords() throws(DocfsError) -> [IndexRecord] {
        try read { db, overlay in try Self.merged(db, overlay, where: "1", []) { _ in true } }
    }

    /// How many records the index holds.
    public func count() throws(DocfsError) -> Int {
        try read { db, overlay in
            (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items") ?? 0) - overlay.replaced.count + overlay.rows.count
        }
    }

    /// What changed after sequence `after`, for a watcher: records written since, entries
    /// removed since, and the newest sequence. `complete` is false when removals that old were
    /// pruned (read the whole result set again).
    public struct Changes: Sendable {
        public var written: [IndexRecord]
        public var removed: [Int64]
        public var sequence: Int64
        public var complete: Bool
    }

    public func changes(after: Int64) throws(DocfsError) -> Changes {
        try read { db, overlay in
            let newest = max(try Self.lastSequence(db), overlay.newestSequence)
            guard newest > after else { return Changes(written: [], removed: [], sequence: after, complete: true) }
            var written = try Row.fetchAll(db, sql: "SELECT * FROM items WHERE sequence > ? ORDER BY sequence, entry", arguments: [after])
                .map { (record: Self.record($0), sequence: $0["sequence"] as Int64) }
            var removed = try Row.fetchAll(db, sql: "SELECT sequence, entry FROM removals WHERE sequence > ? ORDER BY sequence, entry",
                                           arguments: [after]).map { (sequence: $0[0] as Int64, entry: $0[1] as Int64) }
            if !overlay.isEmpty {
                written = written.filter { !overlay.replaced.contains($0.record.location) }
                    + overlay.rows.values.filter { $0.sequence > after }.map { ($0.record, $0.sequence) }
                written.sort { ($0.sequence, $0.record.entry) < ($1.sequence, $1.record.entry) }
                removed += overlay.removals.filter { $0.sequence > after }
                removed.sort { ($0.sequence, $0.entry) < ($1.sequence, $1.entry) }
            }
            let oldestKept = try Int64.fetchOne(db, sql: "SELECT min(sequence) FROM removals") ?? 0
            let pruned = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM removals") ?? 0 >= Self.removalsKept
            return Changes(written: written.map(\.record), removed: removed.map(\.entry), sequence: newest,
                           complete: !(pruned && oldestKept > after + 1))
        }
    }

    /// The newest change sequence.
    public func latestSequence() throws(DocfsError) -> Int64 {
        try read { db, overlay in max(try Self.lastSequence(db), overlay.newestSequence) }
    }

    /// Every entry's place and fingerprint, for a reconciling walk.
    public func fingerprints() throws(DocfsError) -> IndexFingerprints {
        try read { db, overlay in
            var rows: [(location: IndexLocation, print: UInt64, entry: Int64, id: Int64)] = []
            func add(_ record: IndexRecord) {
                rows.append((record.location, IndexFingerprints.print(of: record), record.entry, record.id))
            }
            let cursor = try Row.fetchCursor(db, sql: "SELECT * FROM items")
            while let row = try cursor.next() {
                let record = Self.record(row)
                if !overlay.replaced.contains(record.location) { add(record) }
            }
            for row in overlay.rows.values { add(row.record) }
            return IndexFingerprints(rows)
        }
    }

    /// The rows `condition` selects, with the journal's uncommitted frames laid over them
    /// (`keep` is the condition in Swift, for the overlay's rows), by container, scope and path.
    private static func merged(_ db: Database, _ overlay: IndexOverlay, where condition: String, _ arguments: StatementArguments,
                               keep: (IndexRecord) -> Bool) throws -> [IndexRecord] {
        let stored = try Row.fetchAll(db, sql: "SELECT * FROM items WHERE \(condition) ORDER BY container, scope, path",
                                      arguments: arguments).map(record)
        guard !overlay.isEmpty else { return stored }
        var records = stored.filter { !overlay.replaced.contains($0.location) }
        records += overlay.rows.values.map(\.record).filter(keep)
        records.sort { IndexQuery.precedes($0.location, $1.location) }
        return records
    }

    /// The journal's frames after sequence `applied` with their changes decoded, up to the
    /// first that does not decode (a frame a writer was cut off in).
    private static func decoded(_ journal: [IndexJournal.Frame], after applied: Int64) -> [IndexOverlay.Frame] {
        var frames: [IndexOverlay.Frame] = []
        for frame in journal where frame.sequence > applied {
            guard let changes = try? frame.changes() else { break }
            frames.append(IndexOverlay.Frame(sequence: frame.sequence, entryBase: frame.entryBase, changes: changes))
        }
        return frames
    }

    /// The waiting frames the snapshot `db` does not hold, over the rows they reach.
    private static func overlay(_ db: Database, _ waiting: [IndexOverlay.Frame]) throws -> IndexOverlay {
        let applied = try appliedSequence(db)
        guard let newest = waiting.last?.sequence, newest > applied else { return .empty }
        let frames = waiting.filter { $0.sequence > applied }
        let reach = IndexOverlay.reach(of: frames)
        var base: [IndexLocation: IndexOverlay.Row] = [:]
        func load(_ rows: [Row]) {
            for row in rows {
                let stored = record(row)
                base[stored.location] = IndexOverlay.Row(record: stored, sequence: row["sequence"])
            }
        }
        let exact = try db.cachedStatement(sql: "SELECT * FROM items WHERE container = ? AND scope = ? AND path = ?")
        let under = try db.cachedStatement(sql: "SELECT * FROM items WHERE container = ? AND scope = ? AND path > ? AND path < ?")
        for place in reach.places.union(reach.folders) {
            load(try Row.fetchAll(exact, arguments: [place.container, place.scope, place.path]))
        }
        for folder in reach.folders {
            load(try Row.fetchAll(under, arguments: [folder.container, folder.scope, folder.path + "/", folder.path + "0"]))
        }
        if !reach.entries.isEmpty {
            load(try Row.fetchAll(db, sql: "SELECT * FROM items WHERE entry IN (SELECT value FROM json_each(?))",
                                  arguments: [encodeNumbers(Array(reach.entries))]))
        }
        return IndexOverlay(base: Array(base.values), frames: frames)
    }

    // MARK: - Rows

    private static let columns = ["entry", "id", "name", "path", "container", "containerName", "scope", "kind", "size", "created",
                                  "modified", "contentType", "uti", "version", "tags", "comment", "hasThumbnail",
                                  "isExternal", "originalPath", "localPath", "conflict", "downloadState", "uploadState",
                                  "sequence", "backingInode", "statusChanged"]

    /// Inserts a record, or updates the entry at its place (keeping the entry number).
    private static let upsertSQL = """
        INSERT INTO items(\(columns.joined(separator: ", "))) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))
        ON CONFLICT(container, scope, path) DO UPDATE SET \(columns.filter { !["entry", "container", "scope", "path"].contains($0) }.map { "\($0) = excluded.\($0)" }.joined(separator: ", "))
        """

    private static func arguments(_ r: IndexRecord, entry: Int64, sequence: Int64) -> StatementArguments {
        [entry, r.id, r.name, r.path, r.container, r.containerName, r.scope, r.kind, r.size, r.created, r.modified,
         r.contentType, r.uti, r.version, encodeTags(r.tags), r.comment, r.hasThumbnail, r.isExternal,
         r.originalPath, r.localPath, r.conflict, r.downloadState, r.uploadState, sequence,
         Int64(bitPattern: r.backingInode), r.statusChanged]
    }

    static func record(_ row: Row) -> IndexRecord {
        var record = IndexRecord(
            id: row["id"], name: row["name"], path: row["path"], container: row["container"],
            containerName: row["containerName"], scope: row["scope"], kind: row["kind"], size: row["size"],
            created: row["created"], modified: row["modified"], contentType: row["contentType"],
            uti: row["uti"], version: row["version"], tags: decodeTags(row["tags"]), comment: row["comment"],
            hasThumbnail: row["hasThumbnail"], isExternal: row["isExternal"], originalPath: row["originalPath"],
            localPath: row["localPath"], conflict: row["conflict"], downloadState: row["downloadState"],
            uploadState: row["uploadState"])
        record.entry = row["entry"]
        record.backingInode = UInt64(bitPattern: row["backingInode"])
        record.statusChanged = row["statusChanged"]
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
        guard let data = text.data(using: .utf8), let tags = try? JSONSerialization.jsonObject(with: data) as? [String] else { return [] }
        return tags
    }

    // MARK: - Access

    /// Runs `body` in one transaction. BEGIN and COMMIT are prepared once per connection (GRDB's
    /// own transaction wrapper compiles them each time, a measurable part of a small write).
    private func write<T>(_ body: (Database) throws -> T) throws(DocfsError) -> T {
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

    /// Runs `body` on a snapshot of the database and the journal's frames it lacks. The
    /// journal is read first: a frame committed and cleared from the journal meanwhile is in
    /// the snapshot taken after.
    /// Runs `body` on a snapshot of the database with the stitched changes it does not hold yet
    /// laid over it: the writer's own waiting frames (taken before the snapshot, so a frame
    /// committed meanwhile is in the snapshot and skipped), or, in another process, the frames
    /// its journal holds.
    private func read<T>(_ body: (Database, IndexOverlay) throws -> T) throws(DocfsError) -> T {
        let waiting: [IndexOverlay.Frame]? = writer.withLock { $0?.pending }
        let journal = waiting == nil ? IndexJournal.read(journalPath) : []
        do {
            return try pool.read { db in
                let frames = try waiting ?? Self.decoded(journal, after: Self.appliedSequence(db))
                return try body(db, try Self.overlay(db, frames))
            }
        } catch {
            throw DocfsError(.internalFailure, "reading the index at \(path) failed", cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }
}
