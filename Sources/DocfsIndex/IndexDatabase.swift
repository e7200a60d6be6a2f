import DocfsCore
import Foundation
import GRDB

/// The store's metadata index (DESIGN §5): one SQLite database in WAL mode under
/// `STORE/index/`, written by the daemon (stitching) and read by `docfs query` in other
/// processes without ever waiting for the daemon. It is derived state: `IndexRebuild` makes it
/// again from the store.
public final class IndexDatabase: Sendable {
    private let pool: DatabasePool
    public let path: String

    /// Opens (creating when `readOnly` is false) the index at `path`, migrating it to the
    /// current schema.
    public init(path: String, readOnly: Bool = false) throws(DocfsError) {
        self.path = path
        var configuration = Configuration()
        configuration.readonly = readOnly
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            db.add(function: IndexFunctions.match)
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

    /// Writes `records` (new or changed) in one transaction.
    public func upsert(_ records: [IndexRecord]) throws(DocfsError) {
        guard !records.isEmpty else { return }
        try write { db in
            let sequence = try Self.nextSequence(db)
            for record in records {
                try db.execute(sql: Self.upsertSQL, arguments: Self.arguments(record, sequence: sequence))
                try db.execute(sql: "DELETE FROM removals WHERE id = ?", arguments: [record.id])
            }
        }
    }

    /// Removes the records of `ids` (items deleted) in one transaction.
    public func remove(_ ids: [Int64]) throws(DocfsError) {
        guard !ids.isEmpty else { return }
        try write { db in
            let sequence = try Self.nextSequence(db)
            for id in ids {
                try db.execute(sql: "DELETE FROM items WHERE id = ?", arguments: [id])
                if db.changesCount > 0 {
                    try db.execute(sql: "INSERT OR REPLACE INTO removals(id, sequence) VALUES (?, ?)", arguments: [id, sequence])
                }
            }
        }
    }

    /// Makes `records` the index's whole content (a rebuild), in one transaction: readers see
    /// the old index or the new one. Answers how many records were removed.
    public func replaceAll(_ records: [IndexRecord]) throws(DocfsError) -> Int {
        try write { db in
            let sequence = try Self.nextSequence(db)
            let kept = Set(records.map(\.id))
            let existing = try Int64.fetchAll(db, sql: "SELECT id FROM items")
            let gone = existing.filter { !kept.contains($0) }
            for id in gone {
                try db.execute(sql: "DELETE FROM items WHERE id = ?", arguments: [id])
                try db.execute(sql: "INSERT OR REPLACE INTO removals(id, sequence) VALUES (?, ?)", arguments: [id, sequence])
            }
            let statement = try db.cachedStatement(sql: Self.upsertSQL)
            for record in records {
                try statement.execute(arguments: Self.arguments(record, sequence: sequence))
            }
            try db.execute(sql: "DELETE FROM removals WHERE id IN (SELECT id FROM items)")
            return gone.count
        }
    }

    public func record(id: Int64) throws(DocfsError) -> IndexRecord? {
        try read { db in try Row.fetchOne(db, sql: "SELECT * FROM items WHERE id = ?", arguments: [id]).map(Self.record) }
    }

    /// The records `query` selects, in its order.
    public func records(matching query: IndexQuery) throws(DocfsError) -> [IndexRecord] {
        let (condition, arguments) = query.whereClause()
        var sql = "SELECT * FROM items WHERE \(condition) ORDER BY \(query.orderClause())"
        if let limit = query.limit { sql += " LIMIT \(max(limit, 0))" }
        return try read { db in try Row.fetchAll(db, sql: sql, arguments: arguments).map(Self.record) }
    }

    /// How many records the index holds.
    public func count() throws(DocfsError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items") ?? 0 }
    }

    // MARK: - Rows

    private static let columns = ["id", "name", "path", "container", "containerName", "scope", "kind", "size", "created",
                                  "modified", "contentType", "uti", "version", "tags", "comment", "hasThumbnail",
                                  "isExternal", "originalPath", "localPath", "conflict", "downloadState", "uploadState",
                                  "sequence"]

    private static let upsertSQL = "INSERT OR REPLACE INTO items(\(columns.joined(separator: ", "))) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))"

    private static func arguments(_ r: IndexRecord, sequence: Int64) -> StatementArguments {
        [r.id, r.name, r.path, r.container, r.containerName, r.scope, r.kind, r.size, r.created, r.modified,
         r.contentType, r.uti, r.version, encodeTags(r.tags), r.comment, r.hasThumbnail, r.isExternal,
         r.originalPath, r.localPath, r.conflict, r.downloadState, r.uploadState, sequence]
    }

    static func record(_ row: Row) -> IndexRecord {
        IndexRecord(id: row["id"], name: row["name"], path: row["path"], container: row["container"],
                    containerName: row["containerName"], scope: row["scope"], kind: row["kind"], size: row["size"],
                    created: row["created"], modified: row["modified"], contentType: row["contentType"],
                    uti: row["uti"], version: row["version"], tags: decodeTags(row["tags"]), comment: row["comment"],
                    hasThumbnail: row["hasThumbnail"], isExternal: row["isExternal"], originalPath: row["originalPath"],
                    localPath: row["localPath"], conflict: row["conflict"], downloadState: row["downloadState"],
                    uploadState: row["uploadState"])
    }

    static func encodeTags(_ tags: [String]) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: tags), let text = String(data: data, encoding: .utf8) else { return "[]" }
        return text
    }

    static func decodeTags(_ text: String) -> [String] {
        guard let data = text.data(using: .utf8), let tags = try? JSONSerialization.jsonObject(with: data) as? [String] else { return [] }
        return tags
    }

    private static func nextSequence(_ db: Database) throws -> Int64 {
        try db.execute(sql: "UPDATE meta SET value = value + 1 WHERE key = 'sequence'")
        return try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'sequence'") ?? 0
    }

    // MARK: - Access

    private func write<T>(_ body: (Database) throws -> T) throws(DocfsError) -> T {
        do {
            return try pool.write(body)
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
