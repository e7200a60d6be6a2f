import DocfsCore
import GRDB

/// The index's answers: each reads its rows from a snapshot of the database, then lays the
/// stitched changes the snapshot lacks over them (`IndexDatabase.read`), so a change is seen
/// the moment its `stitch` returned (S1).
extension IndexDatabase {
    /// The record at `location`, if the index has one.
    public func record(at location: IndexLocation) throws(DocfsError) -> IndexRecord? {
        try pointRead({ db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.selection) FROM items WHERE container = ? AND scope = ? AND path = ?"),
                             arguments: [location.container, location.scope, location.path]).map(Self.record)
        }, merge: { stored, overlay in
            switch overlay.lookup(location) {
            case .notHeld: return stored
            case .absent: return nil
            case .present(let row): return row.record
            }
        })
    }

    /// The records held by `entries` (those still there).
    public func records(entries: [Int64]) throws(DocfsError) -> [IndexRecord] {
        guard !entries.isEmpty else { return [] }
        let wanted = Set(entries)
        return try merged(where: "entry IN (SELECT value FROM json_each(?))", [Self.encodeNumbers(entries)], few: true) { overlay in
            overlay.rows(entries: wanted)
        }
    }

    /// The records of item `id` (one per name).
    public func records(id: Int64) throws(DocfsError) -> [IndexRecord] {
        try merged(where: "id = ?", [id], few: true) { overlay in overlay.rows(id: id) }
    }

    /// Where item `id`'s names are and the backing inode each stands for, without the rest of
    /// their records: what a change to a hard-linked file needs to find its other names.
    public func places(id: Int64) throws(DocfsError) -> [(location: IndexLocation, backingInode: UInt64)] {
        try pointRead({ db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT container, scope, path, backingInode FROM items WHERE id = ?"),
                             arguments: [id]).map { row -> (location: IndexLocation, backingInode: UInt64) in
                (IndexLocation(container: row[0], scope: row[1], path: row[2]), UInt64(bitPattern: row[3]))
            }
        }, merge: { stored, overlay in
            stored.filter { !overlay.holds($0.location) }
                + overlay.rows(id: id).map { ($0.record.location, $0.record.backingInode) }
        })
    }

    /// The records of the references whose own file is the inode `backingInode` (a reference's
    /// record carries its original's id; the sync engine knows it by its own file).
    public func referenceRecords(backingInode: UInt64) throws(DocfsError) -> [IndexRecord] {
        try merged(where: "scope = 'external' AND backingInode = ?", [Int64(bitPattern: backingInode)], few: true) { overlay in
            overlay.referenceRows(backingInode: backingInode)
        }
    }

    /// Every record, by container, scope and path.
    public func allRecords() throws(DocfsError) -> [IndexRecord] {
        try merged(where: "1", []) { overlay in overlay.rows }
    }

    /// The item ids that records of more than one backing file carry, outside the external
    /// scope (where references carry their originals' ids): copies that took their original's
    /// id along.
    public func sharedIDs() throws(DocfsError) -> [Int64] {
        // Shared in the database, or carried by a waiting change: each is looked at as merged.
        let candidates = try read({ db in
            try Int64.fetchAll(db, sql: """
                SELECT id FROM items WHERE scope != 'external' GROUP BY id HAVING COUNT(DISTINCT backingInode) > 1
                """)
        }, merge: { stored, overlay in Set(stored).union(overlay.rows.map(\.record.id)) })
        var shared: [Int64] = []
        for id in candidates.sorted() where Set(try records(id: id).filter { $0.scope != "external" }.map(\.backingInode)).count > 1 {
            shared.append(id)
        }
        return shared
    }

    /// The records `query` selects, in its order.
    public func records(matching query: IndexQuery) throws(DocfsError) -> [IndexRecord] {
        try recordsAndSequence(matching: query).records
    }

    /// The records `query` selects and the sequence of the last change they reflect, read
    /// together (a watcher's starting point).
    ///
    /// The waiting changes are laid over the database's answer through the overlay's indexes
    /// (`IndexOverlay.rows(mayMatch:)`), and a limit reads only as many more rows as the
    /// waiting changes hid from it, asking again with more when they hid more: the cost
    /// follows the answer, not how many changes wait (issue 20 §0).
    public func recordsAndSequence(matching query: IndexQuery) throws(DocfsError) -> (records: [IndexRecord], sequence: Int64) {
        var extra = 0
        while true {
            let asked = extra
            let answer = try read({ db in
                let (condition, arguments) = query.whereClause()
                var sql = "SELECT \(Self.selection) FROM items WHERE \(condition) ORDER BY \(query.orderClause())"
                if let limit = query.limit { sql += " LIMIT \(max(limit, 0) + asked)" }
                // Each row becomes a record as it is read (no array of rows in between).
                let rows = try Array(Row.fetchCursor(db, sql: sql, arguments: arguments).map(Self.record))
                queryRowsRead.add(rows.count)
                let cut = query.limit.map { rows.count >= max($0, 0) + asked } ?? false
                return (rows, cut, try Self.lastSequence(db))
            }, merge: { stored, overlay -> QueryAnswer? in
                let (rows, cut, sequence) = stored
                let newest = max(sequence, overlay.newestSequence)
                // (A read asked for more may find the overlay committed meanwhile: the limit still holds.)
                guard !overlay.isEmpty else { return .records(query.limit.map { Array(rows.prefix(max($0, 0))) } ?? rows, newest) }
                var records = rows.filter { !overlay.holds($0.location) }
                // The limit may have left out rows that the waiting changes did not hide.
                let hidden = rows.count - records.count
                if cut && hidden > asked { return .readMore(hidden) }
                records += overlay.rows(mayMatch: query.predicate).map(\.record).filter(query.matches)
                records.sort(by: query.areInOrder)
                if let limit = query.limit { records = Array(records.prefix(max(limit, 0))) }
                return .records(records, newest)
            })
            switch answer {
            case .records(let records, let sequence): return (records, sequence)
            case .readMore(let hidden): extra = max(2 * hidden, 2 * extra, 16)
            }
        }
    }

    /// What one read of a query found: its answer, or that the waiting changes hid this many of
    /// the rows its limit let through.
    private enum QueryAnswer: Sendable {
        case records([IndexRecord], Int64)
        case readMore(Int)
    }

    /// How many records the index holds.
    public func count() throws(DocfsError) -> Int {
        do {
            return try lockedRead { db, overlay in
                var count = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items") ?? 0
                let exists = try db.cachedStatement(sql: "SELECT 1 FROM items WHERE container = ? AND scope = ? AND path = ?")
                for location in overlay.heldLocationList {
                    if try Int.fetchOne(exists, arguments: [location.container, location.scope, location.path]) != nil { count -= 1 }
                    if case .present = overlay.lookup(location) { count += 1 }
                }
                return count
            }
        } catch {
            throw DocfsError(.internalFailure, "counting the index's records at \(path) failed",
                             cause: DocfsError(.internalFailure, String(describing: error)))
        }
    }

    /// What changed after sequence `after`, for a watcher: records written since, entries
    /// removed since, and the newest sequence. `complete` is false when removals that old were
    /// pruned (read the whole result set again).
    public struct Changes: Sendable {
        public var written: [IndexRecord]
        public var removed: [Int64]
        /// The removed entries whose removal was another machine's change, with its name.
        public var removedBy: [Int64: String] = [:]
        public var sequence: Int64
        public var complete: Bool
    }

    public func changes(after: Int64) throws(DocfsError) -> Changes {
        try read({ db in
            let written = try Row.fetchAll(db, sql: "SELECT \(Self.selection) FROM items WHERE sequence > ? ORDER BY sequence, entry", arguments: [after])
                .map { (record: Self.record($0), sequence: $0[Self.sequenceColumn] as Int64) }
            let removed = try Row.fetchAll(db, sql: "SELECT sequence, entry, machine FROM removals WHERE sequence > ? ORDER BY sequence, entry",
                                           arguments: [after]).map { Removal(sequence: $0[0], entry: $0[1], machine: $0[2]) }
            let oldestKept = try Int64.fetchOne(db, sql: "SELECT min(sequence) FROM removals") ?? 0
            let pruned = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM removals") ?? 0 >= Self.removalsKept
            return (written, removed, try Self.lastSequence(db), !(pruned && oldestKept > after + 1))
        }, merge: { stored, overlay in
            var (written, removed, newest, complete) = stored
            newest = max(newest, overlay.newestSequence)
            if !overlay.isEmpty {
                written = written.filter { !overlay.holds($0.record.location) }
                    + overlay.rows(writtenAfter: after).map { ($0.record, $0.sequence) }
                written.sort { ($0.sequence, $0.record.entry) < ($1.sequence, $1.record.entry) }
                // A removal the snapshot holds may still be in the overlay (committed meanwhile).
                var seen = Set(removed.map(\.entry))
                removed += overlay.removals(after: after).filter { seen.insert($0.entry).inserted }
                removed.sort { ($0.sequence, $0.entry) < ($1.sequence, $1.entry) }
            }
            guard newest > after else { return Changes(written: [], removed: [], sequence: after, complete: true) }
            var removedBy: [Int64: String] = [:]
            for removal in removed where !removal.machine.isEmpty { removedBy[removal.entry] = removal.machine }
            return Changes(written: written.map(\.record), removed: removed.map(\.entry), removedBy: removedBy, sequence: newest, complete: complete)
        })
    }

    /// The newest change sequence.
    public func latestSequence() throws(DocfsError) -> Int64 {
        try read({ db in try Self.lastSequence(db) }, merge: { stored, overlay in max(stored, overlay.newestSequence) })
    }

    /// Every entry's place and fingerprint, for a reconciling walk.
    public func fingerprints() throws(DocfsError) -> IndexFingerprints {
        typealias Print = (location: IndexLocation, print: UInt64, entry: Int64, id: Int64)
        @Sendable func print(_ record: IndexRecord) -> Print { (record.location, IndexFingerprints.print(of: record), record.entry, record.id) }
        return try read({ db in
            var rows: [Print] = []
            let cursor = try Row.fetchCursor(db, sql: "SELECT \(Self.selection) FROM items")
            while let row = try cursor.next() { rows.append(print(Self.record(row))) }
            return rows
        }, merge: { stored, overlay in
            guard !overlay.isEmpty else { return IndexFingerprints(stored) }
            return IndexFingerprints(stored.filter { !overlay.holds($0.location) } + overlay.rows.map { print($0.record) })
        })
    }

    /// The rows `condition` selects, with the waiting changes laid over them (`overlaid`: the
    /// overlay's rows the condition would select), by container, scope and path.
    /// `few`: the condition selects a handful of rows by an index (a point read).
    private func merged(where condition: String, _ arguments: StatementArguments, few: Bool = false,
                        overlaid: @escaping @Sendable (IndexOverlay) -> [IndexOverlay.Row]) throws(DocfsError) -> [IndexRecord] {
        // Cached per connection: the conditions are a handful of fixed texts.
        let stored = { (db: Database) in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT \(Self.selection) FROM items WHERE \(condition) ORDER BY container, scope, path"),
                             arguments: arguments).map(Self.record)
        }
        let merge = { @Sendable (stored: [IndexRecord], overlay: IndexOverlay) -> [IndexRecord] in
            guard !overlay.isEmpty else { return stored }
            var records = stored.filter { !overlay.holds($0.location) }
            records += overlaid(overlay).map(\.record)
            records.sort { IndexQuery.precedes($0.location, $1.location) }
            return records
        }
        if few { return try pointRead(stored, merge: merge) }
        return try read({ db in try stored(db) }, merge: merge)
    }
}
