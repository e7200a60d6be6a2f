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
/// writes (the daemon while it serves the store, else the CLI's rebuild), so sequence and entry
/// numbers are counted here and never read back per write. WAL with synchronous=NORMAL: a commit is a write
/// to the WAL, not an fsync; a crash may lose the last commits, and the daemon's reconciling
/// walk at its start puts them back.
public final class IndexDatabase: Sendable {
    private let pool: DatabasePool
    public let path: String
    /// The last sequence and entry numbers handed out (nil until the first write reads them).
    private let counters = Mutex<Counters?>(nil)

    private struct Counters {
        var sequence: Int64
        var entry: Int64
    }

    /// Opens (creating when `readOnly` is false) the index at `path`, migrating it to the
    /// current schema.
    public init(path: String, readOnly: Bool = false) throws(DocfsError) {
        self.path = path
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            db.add(function: IndexFunctions.match)
            if !readOnly { try db.execute(sql: "PRAGMA synchronous = NORMAL") }
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
    public static func open(path: String) throws(DocfsError) -> (IndexDatabase, Condition) {
        let existed = FileManager.default.fileExists(atPath: path)
        var problem: String? = nil
        if existed {
            switch inspect(path) {
            case .success(let migrated):
                let index = try IndexDatabase(path: path)
                if migrated { return (index, .migrated) }
                return (index, try index.isBuilt() ? .ready : .unbuilt)
            case .failure(let reason):
                problem = reason.description
            }
        }
        guard let problem else { return (try IndexDatabase(path: path), .unbuilt) }
        let aside = path + ".damaged-\(Int(Date().timeIntervalSince1970))"
        for suffix in ["", "-wal", "-shm"] {
            _ = try? FileManager.default.moveItem(atPath: path + suffix, toPath: aside + suffix)
        }
        return (try IndexDatabase(path: path), .replaced(reason: problem, setAside: aside))
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
        try read { db in try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'built'") == 1 }
    }

    // MARK: - Writing

    /// Writes `changes` in one transaction under one new change sequence; `built` records
    /// that the index now holds the whole store (the end of a rebuild).
    public func apply(_ changes: [IndexChange], built: Bool = false) throws(DocfsError) {
        guard !changes.isEmpty || built else { return }
        try write { db in
            var counters = try self.counters.withLock { $0 } ?? Self.lastCounters(db)
            counters.sequence += 1
            for change in changes { try Self.apply(change, sequence: counters.sequence, entries: &counters.entry, db) }
            if built { try db.execute(sql: "UPDATE meta SET value = 1 WHERE key = 'built'") }
            if counters.sequence % Self.removalsPruningPeriod == 0 { try Self.pruneRemovals(db) }
            self.counters.withLock { [counters] in $0 = counters }
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

    /// The numbers last used, read once (entries are not indexed: this scans the tables).
    private static func lastCounters(_ db: Database) throws -> Counters {
        let entry = try Int64.fetchOne(db, sql: """
            SELECT max(coalesce((SELECT max(entry) FROM items), 0), coalesce((SELECT max(entry) FROM removals), 0))
            """) ?? 0
        return Counters(sequence: try lastSequence(db), entry: entry)
    }

    private static func lastSequence(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: """
            SELECT max(coalesce((SELECT max(sequence) FROM items), 0), coalesce((SELECT max(sequence) FROM removals), 0))
            """) ?? 0
    }

    // MARK: - Reading

    /// The record at `location`, if the index has one.
    public func record(at location: IndexLocation) throws(DocfsError) -> IndexRecord? {
        try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM items WHERE container = ? AND scope = ? AND path = ?",
                             arguments: [location.container, location.scope, location.path]).map(Self.record)
        }
    }

    /// The records held by `entries` (those still there).
    public func records(entries: [Int64]) throws(DocfsError) -> [IndexRecord] {
        guard !entries.isEmpty else { return [] }
        return try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM items WHERE entry IN (SELECT value FROM json_each(?)) ORDER BY container, scope, path",
                             arguments: [Self.encodeNumbers(entries)]).map(Self.record)
        }
    }

    /// The records of item `id` (one per name).
    public func records(id: Int64) throws(DocfsError) -> [IndexRecord] {
        try read { db in try Row.fetchAll(db, sql: "SELECT * FROM items WHERE id = ? ORDER BY path", arguments: [id]).map(Self.record) }
    }

    /// The records `query` selects, in its order.
    public func records(matching query: IndexQuery) throws(DocfsError) -> [IndexRecord] {
        let (condition, arguments) = query.whereClause()
        var sql = "SELECT * FROM items WHERE \(condition) ORDER BY \(query.orderClause())"
        if let limit = query.limit { sql += " LIMIT \(max(limit, 0))" }
        return try read { db in try Row.fetchAll(db, sql: sql, arguments: arguments).map(Self.record) }
    }

    /// Every record, by container, scope and path.
    public func allRecords() throws(DocfsError) -> [IndexRecord] {
        try read { db in try Row.fetchAll(db, sql: "SELECT * FROM items ORDER BY container, scope, path").map(Self.record) }
    }

    /// How many records the index holds.
    public func count() throws(DocfsError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items") ?? 0 }
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
        try read { db in
            let newest = try Self.lastSequence(db)
            guard newest > after else { return Changes(written: [], removed: [], sequence: after, complete: true) }
            let written = try Row.fetchAll(db, sql: "SELECT * FROM items WHERE sequence > ? ORDER BY sequence, entry",
                                           arguments: [after]).map(Self.record)
            let removed = try Int64.fetchAll(db, sql: "SELECT entry FROM removals WHERE sequence > ? ORDER BY sequence, entry",
                                             arguments: [after])
            let oldestKept = try Int64.fetchOne(db, sql: "SELECT min(sequence) FROM removals") ?? 0
            let pruned = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM removals") ?? 0 >= Self.removalsKept
            return Changes(written: written, removed: removed, sequence: newest, complete: !(pruned && oldestKept > after + 1))
        }
    }

    /// The newest change sequence.
    public func latestSequence() throws(DocfsError) -> Int64 {
        try read { db in try Self.lastSequence(db) }
    }

    /// Every entry's place and fingerprint, for a reconciling walk.
    public func fingerprints() throws(DocfsError) -> IndexFingerprints {
        try read { db in
            var rows: [(location: IndexLocation, print: UInt64, entry: Int64, id: Int64)] = []
            let cursor = try Row.fetchCursor(db, sql: "SELECT * FROM items")
            while let row = try cursor.next() {
                let record = Self.record(row)
                rows.append((record.location, IndexFingerprints.print(of: record), record.entry, record.id))
            }
            return IndexFingerprints(rows)
        }
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

    private func read<T>(_ body: (Database) throws -> T) throws(DocfsError) -> T {
        do {
            return try pool.read(body)
        } catch {
            throw DocfsError(.internalFailure, "reading the index at \(path) failed", cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }
}
