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
/// Each entry also records whether it waits to go up to a remote (`pending`: 1; 2 for a value
/// carried over from a remote the store was linked to before, `forgetRemote`), for the sync
/// engine.
public final class KeyValueDatabase: Sendable {
    private let queue: DatabaseQueue
    public let path: String

    public init(path: String) throws(DocfsError) {
        self.path = path
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        // Write-ahead logging: a set's commit is one append and one fsync (a rollback journal
        // took four: a quarter of the sets per second), and readers never wait for a writer.
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
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
            migrator.registerMigration("2: sync") { db in
                // A removal waiting to go up stays as a row (`removed`); `sequence`: the remote's
                // sequence of the value held; `revision`: which local write the row holds, so a
                // write made while an earlier one went up stays pending.
                try db.execute(sql: """
                    ALTER TABLE entries ADD COLUMN removed INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE entries ADD COLUMN sequence INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE entries ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
                    """)
            }
            migrator.registerMigration("3: notices") { db in
                // What `docfs kv watch` tells: which keys of a container changed, and why.
                try db.execute(sql: """
                    CREATE TABLE notices (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        container TEXT NOT NULL,
                        reason TEXT NOT NULL,
                        keys TEXT NOT NULL,
                        time REAL NOT NULL
                    )
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
        try read("read \(key) of \(container)") { db in
            guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT key, kind, value, changed FROM entries WHERE container = ? AND key = ? AND removed = 0"),
                                             arguments: [container.rawValue, key]) else { return nil }
            return try Self.entry(row)
        }
    }

    /// Every entry of `container`'s store, by key.
    public func entries(in container: ContainerID) throws(DocfsError) -> [KeyValueEntry] {
        try read("list the keys of \(container)") { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT key, kind, value, changed FROM entries WHERE container = ? AND removed = 0 ORDER BY key"),
                             arguments: [container.rawValue]).map(Self.entry)
        }
    }

    /// Keys and bytes (keys and values) `container`'s store holds.
    public func usage(of container: ContainerID) throws(DocfsError) -> (keys: Int, bytes: Int) {
        try read("count the keys of \(container)") { db in try Self.usage(db, container.rawValue) }
    }

    /// Sets `key` to `value` in `container`'s store, unless that passes a limit: then throws
    /// the `KeyValueQuotaViolation` (wrapped in a `DocfsError` of kind `.refused`) and changes
    /// nothing.
    public func set(_ key: String, to value: KeyValue, in container: ContainerID, at time: Double = Date().timeIntervalSince1970) throws(DocfsError) {
        _ = try KeyValueLimits.check(key: Array(key.utf8))
        try notingQuotaViolation(of: key, in: container) { () throws(DocfsError) in
            try run("set \(key) of \(container)") { db in
                let (keys, used) = try Self.usage(db, container.rawValue)
                let old = try Self.countedSize(db, container.rawValue, key)
                let after = try Self.withinLimits((keys + (old == nil ? 1 : 0), used - (old ?? 0) + key.utf8.count + value.bytes.count),
                                                  container.rawValue, key)
                try Self.put(db, container.rawValue, key, value, at: time)
                try Self.record(db, container.rawValue, after)
            }
        }
    }

    /// `body`; a quota violation it ends with is noted first, so watchers hear of the refusal
    /// (the model's quota-violation notice).
    private func notingQuotaViolation<T>(of key: String, in container: ContainerID, _ body: () throws(DocfsError) -> T) throws(DocfsError) -> T {
        do {
            return try body()
        } catch where error.cause is KeyValueQuotaViolation {
            try? note(.quotaViolation, keys: [key], in: container.rawValue)
            throw error
        }
    }

    /// `usage` (keys, bytes) when it is within a container's limits; else the quota violation
    /// of the write of `key` that would reach it.
    private static func withinLimits(_ usage: (keys: Int, bytes: Int), _ container: String, _ key: String) throws -> (keys: Int, bytes: Int) {
        guard usage.keys <= KeyValueLimits.keys && usage.bytes <= KeyValueLimits.totalBytes else {
            throw KeyValueQuotaViolation(container: container, key: key, keys: usage.keys, bytes: usage.bytes)
        }
        return usage
    }

    /// The value `key` holds; nil when it is not set.
    private static func storedValue(_ db: Database, _ container: String, _ key: String) throws -> KeyValue? {
        guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT kind, value FROM entries WHERE container = ? AND key = ? AND removed = 0"),
                                         arguments: [container, key]) else { return nil }
        let data: Data = row["value"]
        return try KeyValue(kind: row["kind"], bytes: Array(data))
    }

    /// Writes `value` of `key` as a local write waiting to go up (no limit checked).
    private static func put(_ db: Database, _ container: String, _ key: String, _ value: KeyValue, at time: Double) throws {
        try db.cachedStatement(sql: """
            INSERT INTO entries (container, key, kind, value, changed, pending, removed, revision) VALUES (?, ?, ?, ?, ?, 1, 0, ?)
            ON CONFLICT (container, key) DO UPDATE SET kind = excluded.kind, value = excluded.value,
                changed = excluded.changed, pending = 1, removed = 0, revision = excluded.revision
            """).execute(arguments: [container, key, value.kind, Data(value.bytes), time, try nextRevision(db)])
    }

    /// Marks `key` removed, as a local write waiting to go up (its usage not changed here).
    private static func markRemoved(_ db: Database, _ container: String, _ key: String) throws {
        try db.cachedStatement(sql: "UPDATE entries SET removed = 1, pending = 1, value = X'', changed = ?, revision = ? WHERE container = ? AND key = ?")
            .execute(arguments: [Date().timeIntervalSince1970, try nextRevision(db), container, key])
    }

    /// Moves `key`'s value to `newKey` (replacing what that held; `value` instead of the old
    /// one when given), in one transaction held to the limits: a rename of an app's key file.
    /// Answers false, changing nothing, when `key` is not set.
    public func move(_ key: String, to newKey: String, value: KeyValue? = nil, in container: ContainerID) throws(DocfsError) -> Bool {
        _ = try KeyValueLimits.check(key: Array(newKey.utf8))
        return try notingQuotaViolation(of: newKey, in: container) { () throws(DocfsError) -> Bool in
            try run("move \(key) of \(container) to \(newKey)") { db -> Bool in
                guard let old = try Self.storedValue(db, container.rawValue, key) else { return false }
                let moved = value ?? old
                var (keys, bytes) = try Self.usage(db, container.rawValue)
                if key != newKey {
                    (keys, bytes) = (keys - 1, bytes - key.utf8.count - old.bytes.count)
                    try Self.markRemoved(db, container.rawValue, key)
                }
                if let replaced = try Self.countedSize(db, container.rawValue, newKey) { (keys, bytes) = (keys - 1, bytes - replaced) }
                let after = try Self.withinLimits((keys + 1, bytes + newKey.utf8.count + moved.bytes.count), container.rawValue, newKey)
                try Self.put(db, container.rawValue, newKey, moved, at: Date().timeIntervalSince1970)
                try Self.record(db, container.rawValue, after)
                return true
            }
        }
    }

    /// Swaps the values of `key` and `other` in one transaction (what they hold together stays
    /// the same); false, changing nothing, unless both are set.
    public func exchange(_ key: String, _ other: String, in container: ContainerID) throws(DocfsError) -> Bool {
        try run("exchange \(key) and \(other) of \(container)") { db -> Bool in
            guard let first = try Self.storedValue(db, container.rawValue, key),
                  let second = try Self.storedValue(db, container.rawValue, other) else { return false }
            let now = Date().timeIntervalSince1970
            try Self.put(db, container.rawValue, key, second, at: now)
            try Self.put(db, container.rawValue, other, first, at: now)
            return true
        }
    }

    /// Removes `key` from `container`'s store; answers whether it was there.
    @discardableResult
    public func remove(_ key: String, in container: ContainerID) throws(DocfsError) -> Bool {
        try run("remove \(key) of \(container)") { db in
            guard let size = try Self.countedSize(db, container.rawValue, key) else { return false }
            // Kept as a removal waiting to go up (no value, nothing counted).
            try Self.markRemoved(db, container.rawValue, key)
            let (keys, bytes) = try Self.usage(db, container.rawValue)
            try Self.record(db, container.rawValue, (keys - 1, bytes - size))
            return true
        }
    }

    // MARK: Sync (issue 24): what goes up, what came down, where the remote's changes were read to

    /// Up to `limit` local writes waiting to go up, oldest first.
    public func pending(limit: Int) throws(DocfsError) -> [PendingKeyValue] {
        try run("list the key-value changes waiting to go up") { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT container, key, kind, value, removed, revision FROM entries WHERE pending = 1 ORDER BY revision LIMIT ?"),
                             arguments: [limit]).map { row in
                let removed: Bool = row["removed"]
                let data: Data = row["value"]
                return PendingKeyValue(container: row["container"], key: row["key"],
                               value: removed ? nil : try KeyValue(kind: row["kind"], bytes: Array(data)), revision: row["revision"])
            }
        }
    }

    /// `write` went up and took `sequence`: no longer pending, unless the key was written again
    /// since (then only the sequence is noted: the newer write goes up next). Each call is a
    /// transaction of its own.
    public func sent(_ write: PendingKeyValue, sequence: UInt64) throws(DocfsError) {
        try run("note that \(write.key) of \(write.container) went up") { db in
            // A removal's row stays (no value) with its sequence until the anchor passes it, so
            // an older set read later does not bring the key back.
            let arguments: StatementArguments = [Int64(bitPattern: sequence), write.container, write.key, write.revision]
            try db.cachedStatement(sql: "UPDATE entries SET pending = (revision <> ?4), sequence = max(sequence, ?1) WHERE container = ?2 AND key = ?3")
                .execute(arguments: arguments)
        }
    }

    /// Another machine's write of `key` in `container` (nil: a removal), `sequence` in the
    /// remote's order. Taken unless a local write waits to go up (it goes up after, so it
    /// comes later in the server's order and wins) or the value here is from a later change.
    /// Not held to the limits: what the remote holds is the store's. Answers whether the
    /// value here changed.
    public func takeRemote(_ key: String, in container: String, value: KeyValue?, sequence: UInt64) throws(DocfsError) -> Bool {
        try run("take the remote's \(key) of \(container)") { db in
            let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT kind, value, pending, removed, sequence FROM entries WHERE container = ? AND key = ?"),
                                       arguments: [container, key])
            if let row {
                // A value carried over from a remote linked before (pending 2) is replaced.
                let pending: Int = row["pending"], held: Int64 = row["sequence"]
                if pending == 1 || UInt64(bitPattern: held) >= sequence { return false }
            }
            let (keys, bytes) = try Self.usage(db, container)
            let removedHere: Bool = row?["removed"] ?? true
            let oldData: Data? = row?["value"]
            let oldSize = removedHere ? 0 : key.utf8.count + (oldData?.count ?? 0)
            guard let value else {
                try db.cachedStatement(sql: "DELETE FROM entries WHERE container = ? AND key = ?").execute(arguments: [container, key])
                if !removedHere { try Self.record(db, container, (keys - 1, bytes - oldSize)) }
                return !removedHere
            }
            let same = !removedHere && row?["kind"] == value.kind && oldData.map(Array.init) == value.bytes
            try db.cachedStatement(sql: """
                INSERT INTO entries (container, key, kind, value, changed, pending, removed, sequence, revision) VALUES (?, ?, ?, ?, ?, 0, 0, ?, 0)
                ON CONFLICT (container, key) DO UPDATE SET kind = excluded.kind, value = excluded.value, changed = excluded.changed,
                    pending = 0, removed = 0, sequence = excluded.sequence
                """).execute(arguments: [container, key, value.kind, Data(value.bytes), Date().timeIntervalSince1970, Int64(bitPattern: sequence)])
            try Self.record(db, container, (keys + (removedHere ? 1 : 0), bytes - oldSize + key.utf8.count + value.bytes.count))
            return !same
        }
    }

    /// How far the remote's key-value changes were read (0: from the start).
    public func remoteAnchor() throws(DocfsError) -> UInt64 {
        try read("read the key-value stores' anchor") { db in
            UInt64(bitPattern: try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'remoteAnchor'") ?? 0)
        }
    }

    public func setRemoteAnchor(_ sequence: UInt64) throws(DocfsError) {
        try run("save the key-value stores' anchor") { db in
            try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('remoteAnchor', ?)", arguments: [Int64(bitPattern: sequence)])
            // Removals gone up whose sequence the anchor passed: every older change was read.
            try db.execute(sql: "DELETE FROM entries WHERE removed = 1 AND pending = 0 AND sequence <= ?", arguments: [Int64(bitPattern: sequence)])
        }
    }

    /// Why the values that come down now change while the store joins a remote (reads its
    /// log for the first time since it was linked): `initialSync` on its first link,
    /// `accountChange` on a link after another; nil once it has joined. Kept until
    /// `finishJoining`, so a first read that fails halfway goes on under the same reason.
    public func joining() throws(DocfsError) -> Reason? {
        try run("read whether the key-value stores join a remote") { db in
            switch try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'joining'") {
            case 0: return nil
            case 2: return .accountChange
            case 1: return .initialSync
            default:
                // Never linked (or from before this record): joining unless values were read.
                guard (try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'remoteAnchor'") ?? 0) == 0 else { return nil }
                try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('joining', 1)")
                return .initialSync
            }
        }
    }

    /// The store has read the whole log of the remote it joins: values carried over from a
    /// remote it was linked to before that the new one did not replace go up now, as local
    /// writes. Answers how many.
    @discardableResult
    public func finishJoining() throws(DocfsError) -> Int {
        try run("finish joining a remote with the key-value stores") { db in
            let carried = try Row.fetchAll(db, sql: "SELECT container, key FROM entries WHERE pending = 2")
            for row in carried {
                try db.cachedStatement(sql: "UPDATE entries SET pending = 1, revision = ? WHERE container = ? AND key = ?")
                    .execute(arguments: [try Self.nextRevision(db), row["container"], row["key"]])
            }
            try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('joining', 0)")
            return carried.count
        }
    }

    /// The store was unlinked: what its remote said of each value (sequences, the anchor,
    /// removals that went up) means nothing to the next. Values in step with it are carried
    /// over (pending 2): when the store joins a remote again, that remote's value of a key
    /// replaces the one here (an account change, as the model's store takes the new account's
    /// values) and the others go up; writes that waited to go up still wait (and win).
    public func forgetRemote() throws(DocfsError) {
        try run("forget the remote of the key-value stores") { db in
            let joined = try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'joining'") != nil
                || (try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'remoteAnchor'") ?? 0) > 0
            try db.execute(sql: """
                DELETE FROM entries WHERE removed = 1 AND pending <> 1;
                UPDATE entries SET pending = 2 WHERE pending = 0;
                UPDATE entries SET sequence = 0;
                DELETE FROM meta WHERE key = 'remoteAnchor';
                """)
            if joined {
                try db.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('joining', 2)")
            } else {
                try db.execute(sql: "DELETE FROM meta WHERE key = 'joining'")
            }
        }
    }

    private static func nextRevision(_ db: Database) throws -> Int64 {
        let next = (try Int64.fetchOne(try db.cachedStatement(sql: "SELECT value FROM meta WHERE key = 'revision'")) ?? 0) + 1
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('revision', ?)").execute(arguments: [next])
        return next
    }

    // MARK: Notices (`docfs kv watch`)

    public typealias Reason = KeyValueChangeReason

    /// A change watchers are told of.
    public struct Notice: Sendable, Equatable {
        public var id: Int64
        public var container: String
        public var reason: Reason
        public var keys: [String]
        public var time: Double
    }

    /// Notes that `keys` of `container` changed for `reason`. The newest 10,000 notices are
    /// kept: a watcher reads them as they come.
    public func note(_ reason: Reason, keys: [String], in container: String) throws(DocfsError) {
        let list = String(decoding: (try? JSONSerialization.data(withJSONObject: keys)) ?? Data("[]".utf8), as: UTF8.self)
        try run("note a key-value change of \(container)") { db in
            try db.cachedStatement(sql: "INSERT INTO notices (container, reason, keys, time) VALUES (?, ?, ?, ?)")
                .execute(arguments: [container, reason.rawValue, list, Date().timeIntervalSince1970])
            let id = db.lastInsertedRowID
            if id % 1000 == 0 { try db.execute(sql: "DELETE FROM notices WHERE id <= ?", arguments: [id - 10_000]) }
        }
    }

    /// The notices of `container` after notice `id`, oldest first.
    public func notices(of container: String, after id: Int64) throws(DocfsError) -> [Notice] {
        try read("read the key-value notices of \(container)") { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT id, container, reason, keys, time FROM notices WHERE container = ? AND id > ? ORDER BY id"),
                             arguments: [container, id]).compactMap { row in
                let keysText: String = row["keys"]
                guard let reason = Reason(rawValue: row["reason"]),
                      let keys = (try? JSONSerialization.jsonObject(with: Data(keysText.utf8))) as? [String] else { return nil }
                return Notice(id: row["id"], container: row["container"], reason: reason, keys: keys, time: row["time"])
            }
        }
    }

    /// The last notice's id (0: none): where a new watcher starts.
    public func lastNotice() throws(DocfsError) -> Int64 {
        try read("read the key-value notices") { db in try Int64.fetchOne(db, sql: "SELECT max(id) FROM notices") ?? 0 }
    }

    /// What a container holds, kept in a row of its own in each write's transaction, so a
    /// write's check costs the same however many keys there are.
    private static func usage(_ db: Database, _ container: String) throws -> (keys: Int, bytes: Int) {
        let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT keys, bytes FROM usage WHERE container = ?"), arguments: [container])
        return (row?[0] ?? 0, row?[1] ?? 0)
    }

    /// What `key` counts toward its container's limit (its key's and value's bytes); nil when
    /// it is not there.
    private static func countedSize(_ db: Database, _ container: String, _ key: String) throws -> Int? {
        try Int.fetchOne(try db.cachedStatement(sql: "SELECT length(CAST(key AS BLOB)) + length(value) FROM entries WHERE container = ? AND key = ? AND removed = 0"),
                         arguments: [container, key])
    }

    private static func record(_ db: Database, _ container: String, _ usage: (keys: Int, bytes: Int)) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO usage (container, keys, bytes) VALUES (?, ?, ?)").execute(arguments: [container, usage.keys, usage.bytes])
    }

    private static func entry(_ row: Row) throws -> KeyValueEntry {
        let data: Data = row["value"]
        return KeyValueEntry(key: row["key"], value: try KeyValue(kind: row["kind"], bytes: Array(data)), changed: row["changed"])
    }

    /// `body`, one statement read outside any explicit transaction (SQLite's own for the
    /// statement: no lock a writer waits for in WAL mode; GRDB's `read` costs a transaction and
    /// a `query_only` switch, each compiled again every time: a key file's stat ran at a
    /// seventh of a directory's); failures as `run`'s.
    private func read<T>(_ what: String, _ body: (Database) throws -> T) throws(DocfsError) -> T {
        do {
            return try queue.inDatabase(body)
        } catch {
            throw DocfsError(.storeUnavailable, "cannot \(what) in \(path)", cause: DocfsError(.internalFailure, String(describing: error)))
        }
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
