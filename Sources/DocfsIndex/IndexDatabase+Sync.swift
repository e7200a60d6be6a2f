import DocfsCore
import Foundation
import GRDB

/// The sync engine's local records (issue 22), kept in the index's database: the durable
/// outbox the write path fills (`IndexChange.outbox`, committed with the frame that stitched
/// the change), each item's sync state and the anchor in the remote's log. Only the daemon
/// (the index's writer) uses them.
extension IndexDatabase {
    /// One waiting outbox entry: its position (the order changes were made in) and its item.
    public struct OutboxRow: Sendable, Equatable {
        public var position: Int64
        public var item: Int64
    }

    /// The outbox's oldest entries, at most `limit`, after committing what the journal holds
    /// (so an entry stitched a moment ago is among them).
    public func outbox(limit: Int) throws(DocfsError) -> [OutboxRow] {
        try flush()
        return try readSync { db in
            try Row.fetchAll(db, sql: "SELECT position, item FROM outbox ORDER BY position LIMIT ?", arguments: [limit]).map {
                OutboxRow(position: $0["position"], item: $0["item"])
            }
        }
    }

    /// How many outbox entries wait, a change stitched a moment ago among them (committed
    /// first, as `outbox` does: `docfs remote status` once said nothing waited while the
    /// background commit had not yet moved a save's entry, and a machine linked then merged
    /// against a remote without that save).
    public func outboxCount() throws(DocfsError) -> Int {
        try flush()
        return try readSync { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") ?? 0 }
    }

    /// Removes the entry at `position`: its item went up.
    public func acknowledgeOutbox(_ position: Int64) throws(DocfsError) {
        try write { db in try db.execute(sql: "DELETE FROM outbox WHERE position = ?", arguments: [position]) }
    }

    /// Puts every item of `items` in the outbox (linking a store with documents sends them all up).
    public func enqueueForUpload(_ items: [Int64]) throws(DocfsError) {
        guard !items.isEmpty else { return }
        try write { db in
            let statement = try db.cachedStatement(sql: "INSERT INTO outbox (item, sequence) VALUES (?, 0)")
            for item in items { try statement.execute(arguments: [item]) }
        }
    }

    /// The ids of every item with a record in a container's documents or data (committed
    /// records: callers flush first), folders before what they hold.
    public func allItemIDs() throws(DocfsError) -> [Int64] {
        try flush()
        return try readSync { db in
            try Int64.fetchAll(db, sql: """
                SELECT id FROM items WHERE scope IN ('documents', 'data') AND id > 0
                GROUP BY id ORDER BY min(length(path)), min(path)
                """)
        }
    }

    /// Where the special files (fifos, sockets, devices: records of kind `other`) of every
    /// container's documents and data are, at most `limit`, and how many there are.
    public func specialFilePlaces(limit: Int) throws(DocfsError) -> (places: [IndexLocation], count: Int) {
        try flush()
        return try readSync { db in
            let rows = try Row.fetchAll(db, sql: """
                SELECT container, scope, path FROM items WHERE kind = 'other' AND scope IN ('documents', 'data')
                ORDER BY container, scope, path LIMIT ?
                """, arguments: [limit])
            let count = try Int.fetchOne(db, sql: "SELECT count(*) FROM items WHERE kind = 'other' AND scope IN ('documents', 'data')") ?? 0
            return (rows.map { IndexLocation(container: $0["container"], scope: $0["scope"], path: $0["path"]) }, count)
        }
    }

    /// The ids of files with more than one name in documents and data (hard links), at most
    /// `limit`, and how many such names there are beyond each file's first.
    public func hardLinkedIDs(limit: Int) throws(DocfsError) -> (ids: [Int64], extraNames: Int) {
        try flush()
        return try readSync { db in
            let linked = """
                SELECT id, count(*) AS names FROM items WHERE kind = 'file' AND scope IN ('documents', 'data') AND id > 0
                GROUP BY id HAVING count(*) > 1
                """
            let ids = try Int64.fetchAll(db, sql: "SELECT id FROM (\(linked)) ORDER BY id LIMIT ?", arguments: [limit])
            let extra = try Int.fetchOne(db, sql: "SELECT COALESCE(sum(names - 1), 0) FROM (\(linked))") ?? 0
            return (ids, extra)
        }
    }

    /// The inodes of every reference's own file (committed records: callers flush first).
    public func referenceInodes() throws(DocfsError) -> [UInt64] {
        try readSync { db in
            try Int64.fetchAll(db, sql: "SELECT backingInode FROM items WHERE scope = 'external' ORDER BY length(path), path")
                .map { UInt64(bitPattern: $0) }
        }
    }

    /// An item's sync state as the engine encoded it; nil when it has none.
    public func syncState(of item: Int64) throws(DocfsError) -> [UInt8]? {
        try readSync { db in try Data.fetchOne(db.cachedStatement(sql: "SELECT state FROM syncItems WHERE item = ?"), arguments: [item]).map { Array($0) } }
    }

    /// Every item with a sync state.
    public func syncedItems() throws(DocfsError) -> [Int64] {
        try readSync { db in try Int64.fetchAll(db, sql: "SELECT item FROM syncItems ORDER BY item") }
    }

    /// The item whose sync state puts it at `place` (as the engine spells places), other than `except`.
    public func syncedItem(at place: String, except: Int64) throws(DocfsError) -> Int64? {
        try readSync { db in
            try Int64.fetchOne(db.cachedStatement(sql: "SELECT item FROM syncItems WHERE place = ? AND item <> ? LIMIT 1"), arguments: [place, except])
        }
    }

    public func setSyncState(_ state: [UInt8]?, of item: Int64, place: String? = nil) throws(DocfsError) {
        try write { db in
            if let state {
                try db.cachedStatement(sql: "INSERT OR REPLACE INTO syncItems (item, state, place) VALUES (?, ?, ?)")
                    .execute(arguments: [item, Data(state), place])
            } else {
                try db.cachedStatement(sql: "DELETE FROM syncItems WHERE item = ?").execute(arguments: [item])
            }
        }
    }

    /// Where the engine is in the remote's log (0: before every change).
    public func syncAnchor() throws(DocfsError) -> Int64 {
        try readSync { db in try Int64.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE key = 'syncAnchor'")) ?? 0 }
    }

    public func setSyncAnchor(_ anchor: Int64) throws(DocfsError) {
        try write { db in try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('syncAnchor', ?)").execute(arguments: [anchor]) }
    }

    /// A change of the remote's log (as the engine encoded it) this machine could not apply
    /// yet, and why.
    public struct ParkedRow: Sendable, Equatable {
        public var sequence: Int64
        public var change: [UInt8]
        public var problem: String
    }

    /// Keeps `change` (sequence `sequence` of the log) to try again later; again: the problem
    /// is updated.
    public func parkSyncChange(_ sequence: Int64, change: [UInt8], problem: String) throws(DocfsError) {
        try write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO syncParked (sequence, change, problem) VALUES (?, ?, ?)",
                           arguments: [sequence, Data(change), problem])
        }
    }

    /// The parked changes, oldest first, at most `limit`.
    public func parkedSyncChanges(limit: Int) throws(DocfsError) -> [ParkedRow] {
        try readSync { db in
            try Row.fetchAll(db, sql: "SELECT sequence, change, problem FROM syncParked ORDER BY sequence LIMIT ?", arguments: [limit]).map {
                ParkedRow(sequence: $0["sequence"], change: Array($0["change"] as Data), problem: $0["problem"])
            }
        }
    }

    public func parkedSyncCount() throws(DocfsError) -> Int {
        try readSync { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM syncParked") ?? 0 }
    }

    public func unparkSyncChange(_ sequence: Int64) throws(DocfsError) {
        try write { db in try db.execute(sql: "DELETE FROM syncParked WHERE sequence = ?", arguments: [sequence]) }
    }

    /// The id a symbolic link has on every machine, by the one derived here; nil: none yet.
    public func remoteLink(local: Int64) throws(DocfsError) -> Int64? {
        try withSyncLinks { $0.remote[local] }
    }

    /// The id derived here of the symbolic link whose id everywhere is `remote`.
    public func localLink(remote: Int64) throws(DocfsError) -> Int64? {
        try withSyncLinks { $0.local[remote] }
    }

    /// Records that the link `local` here is `remote` everywhere (replacing what either was).
    public func setLink(local: Int64, remote: Int64) throws(DocfsError) {
        try withSyncLinks { links throws(DocfsError) in
            try write { db in
                try db.execute(sql: "DELETE FROM syncLinks WHERE local = ? OR remote = ?", arguments: [local, remote])
                try db.execute(sql: "INSERT INTO syncLinks (local, remote) VALUES (?, ?)", arguments: [local, remote])
            }
            links.forget(local: local, remote: remote)
            links.remote[local] = remote
            links.local[remote] = local
        }
    }

    public func forgetLink(remote: Int64) throws(DocfsError) {
        try withSyncLinks { links throws(DocfsError) in
            try write { db in try db.execute(sql: "DELETE FROM syncLinks WHERE remote = ?", arguments: [remote]) }
            links.forget(local: nil, remote: remote)
        }
    }

    /// Runs `body` on the table of links in memory (read first if it was not yet).
    private func withSyncLinks<T>(_ body: (inout SyncLinkMap) throws(DocfsError) -> T) throws(DocfsError) -> T {
        try syncLinks.withLock { cached throws(DocfsError) -> T in
            if cached == nil {
                let rows = try readSync { db in try Row.fetchAll(db, sql: "SELECT local, remote FROM syncLinks") }
                var map = SyncLinkMap()
                for row in rows {
                    let local: Int64 = row["local"], remote: Int64 = row["remote"]
                    map.remote[local] = remote
                    map.local[remote] = local
                }
                cached = map
            }
            return try body(&cached!)
        }
    }

    /// Forgets every sync record (the store was unlinked, or linked to another remote).
    public func forgetSync() throws(DocfsError) {
        try syncLinks.withLock { cached throws(DocfsError) in
            try write { db in
                try db.execute(sql: "DELETE FROM syncParked")
                try db.execute(sql: "DELETE FROM syncLinks")
                try db.execute(sql: "DELETE FROM outbox")
                try db.execute(sql: "DELETE FROM syncItems")
                try db.execute(sql: "DELETE FROM meta WHERE key = 'syncAnchor'")
            }
            cached = SyncLinkMap()
        }
    }

    /// One statement's read, outside a transaction: a statement reads one snapshot on its own
    /// (WAL), and GRDB's `read` would compile a savepoint, its release and two `query_only`
    /// pragmas around it each time (a first sync makes several of these reads per item).
    private func readSync<T>(_ body: (Database) throws -> T) throws(DocfsError) -> T {
        do {
            return try pool.unsafeRead(body)
        } catch {
            throw DocfsError(.internalFailure, "reading the sync records of the index at \(path) failed",
                             cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }
}

/// Symbolic links' ids here and everywhere, both ways (`IndexDatabase.syncLinks`).
struct SyncLinkMap: Sendable {
    var remote: [Int64: Int64] = [:]
    var local: [Int64: Int64] = [:]

    /// Drops the pairs `local` and `remote` are in.
    mutating func forget(local: Int64?, remote: Int64) {
        if let local, let paired = self.remote.removeValue(forKey: local) { self.local[paired] = nil }
        if let paired = self.local.removeValue(forKey: remote) { self.remote[paired] = nil }
    }
}
