import DocfsCore
import Foundation
import GRDB

/// One stored entry of a container's key-value store.
public struct KeyValueEntry: Sendable, Equatable {
    public var key: String
    public var value: KeyValue
    /// When it was set here (seconds since 1970).
    public var changed: Double

    public init(key: String, value: KeyValue, changed: Double) {
        self.key = key
        self.value = value
        self.changed = changed
    }
}

/// The key-value stores of a store's containers (DESIGN §9.3) on disk: one SQLite file
/// (`STORE/kv/keyvalues.sqlite`), apart from the index, which can be thrown away and rebuilt
/// while these values cannot. It lives in this module because the index is the one module
/// that uses GRDB. Each write is one transaction that checks the container's limits against
/// what it holds (a write past one changes nothing) and is on disk when it returns
/// (synchronous=FULL: a process or machine that dies after a set keeps it). Several processes
/// may use the file at once (the daemon, `docfs kv` on an unserved store).
/// Each entry also records whether it waits to go up to a remote (`pending`), for the sync
/// engine.
public final class KeyValueDatabase: Sendable {
    private let queue: DatabaseQueue
    public let path: String

    public init(path: String) throws(DocfsError) {
        self.path = path
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        do {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            queue = try DatabaseQueue(path: path, configuration: configuration)
            var migrator = DatabaseMigrator()
            migrator.registerMigration("1: entries") { db in
                try db.execute(sql: """
                    CREATE TABLE entries (
                        container TEXT NOT NULL,
                        key TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        value BLOB NOT NULL,
                        changed REAL NOT NULL,
                        pending INTEGER NOT NULL DEFAULT 1,
                        PRIMARY KEY (container, key)
                    ) WITHOUT ROWID;
                    CREATE TABLE usage (
                        container TEXT PRIMARY KEY NOT NULL,
                        keys INTEGER NOT NULL,
                        bytes INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    """)
            }
            try migrator.migrate(queue)
        } catch {
            throw DocfsError(.storeUnavailable, "cannot open the key-value stores at \(path): check that the store is there and writable",
                             cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }

    /// The entry of `key` in `container`'s store; nil when there is none.
    public func entry(_ key: String, in container: ContainerID) throws(DocfsError) -> KeyValueEntry? {
        try run("read \(key) of \(container)") { db in
            guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT key, kind, value, changed FROM entries WHERE container = ? AND key = ?"),
                                             arguments: [container.rawValue, key]) else { return nil }
            return try Self.entry(row)
        }
    }

    /// Every entry of `container`'s store, by key.
    public func entries(in container: ContainerID) throws(DocfsError) -> [KeyValueEntry] {
        try run("list the keys of \(container)") { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT key, kind, value, changed FROM entries WHERE container = ? ORDER BY key"),
                             arguments: [container.rawValue]).map(Self.entry)
        }
    }

    /// Keys and bytes (keys and values) `container`'s store holds.
    public func usage(of container: ContainerID) throws(DocfsError) -> (keys: Int, bytes: Int) {
        try run("count the keys of \(container)") { db in try Self.usage(db, container.rawValue) }
    }

    /// Sets `key` to `value` in `container`'s store, unless that passes a limit: then throws
    /// the `KeyValueQuotaViolation` (wrapped in a `DocfsError` of kind `.refused`) and changes
    /// nothing.
    public func set(_ key: String, to value: KeyValue, in container: ContainerID, at time: Double = Date().timeIntervalSince1970) throws(DocfsError) {
        _ = try KeyValueLimits.check(key: Array(key.utf8))
        let bytes = value.bytes
        try run("set \(key) of \(container)") { db in
            let (keys, used) = try Self.usage(db, container.rawValue)
            let old = try Int.fetchOne(try db.cachedStatement(sql: "SELECT length(CAST(key AS BLOB)) + length(value) FROM entries WHERE container = ? AND key = ?"),
                                       arguments: [container.rawValue, key])
            let after = (keys: keys + (old == nil ? 1 : 0), bytes: used - (old ?? 0) + key.utf8.count + bytes.count)
            if after.keys > KeyValueLimits.keys || after.bytes > KeyValueLimits.totalBytes {
                throw KeyValueQuotaViolation(container: container.rawValue, key: key, keys: after.keys, bytes: after.bytes)
            }
            try db.cachedStatement(sql: """
                INSERT INTO entries (container, key, kind, value, changed, pending) VALUES (?, ?, ?, ?, ?, 1)
                ON CONFLICT (container, key) DO UPDATE SET kind = excluded.kind, value = excluded.value,
                    changed = excluded.changed, pending = 1
                """).execute(arguments: [container.rawValue, key, value.kind, Data(bytes), time])
            try Self.record(db, container.rawValue, after)
        }
    }

    /// Removes `key` from `container`'s store; answers whether it was there.
    @discardableResult
    public func remove(_ key: String, in container: ContainerID) throws(DocfsError) -> Bool {
        try run("remove \(key) of \(container)") { db in
            guard let size = try Int.fetchOne(try db.cachedStatement(sql: "SELECT length(CAST(key AS BLOB)) + length(value) FROM entries WHERE container = ? AND key = ?"),
                                              arguments: [container.rawValue, key]) else { return false }
            try db.cachedStatement(sql: "DELETE FROM entries WHERE container = ? AND key = ?").execute(arguments: [container.rawValue, key])
            let (keys, bytes) = try Self.usage(db, container.rawValue)
            try Self.record(db, container.rawValue, (keys - 1, bytes - size))
            return true
        }
    }

    /// What a container holds, kept in a row of its own in each write's transaction, so a
    /// write's check costs the same however many keys there are.
    private static func usage(_ db: Database, _ container: String) throws -> (keys: Int, bytes: Int) {
        let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT keys, bytes FROM usage WHERE container = ?"), arguments: [container])
        return (row?[0] ?? 0, row?[1] ?? 0)
    }

    private static func record(_ db: Database, _ container: String, _ usage: (keys: Int, bytes: Int)) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO usage (container, keys, bytes) VALUES (?, ?, ?)").execute(arguments: [container, usage.keys, usage.bytes])
    }

    private static func entry(_ row: Row) throws -> KeyValueEntry {
        let data: Data = row["value"]
        return KeyValueEntry(key: row["key"], value: try KeyValue(kind: row["kind"], bytes: Array(data)), changed: row["changed"])
    }

    /// `body` in a write transaction; GRDB's and SQLite's failures in words, a quota
    /// violation as itself.
    private func run<T>(_ what: String, _ body: (Database) throws -> T) throws(DocfsError) -> T {
        do {
            return try queue.write(body)
        } catch let violation as KeyValueQuotaViolation {
            throw DocfsError(.refused, violation.description, cause: violation)
        } catch let error as DocfsError {
            throw error
        } catch {
            throw DocfsError(.storeUnavailable, "cannot \(what) in \(path)", cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }
}
