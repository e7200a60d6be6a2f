import DocfsCore
import Foundation
import GRDB
import Testing
@testable import DocfsIndex

/// `IndexDatabase.open` tells its caller when the index must be made again (issue 4 §4): a new
/// file, an index from an older schema (migrated, needing a rebuild), and a damaged file (set
/// aside and replaced); and once a rebuild has filled it, that it is ready.
@Suite struct IndexConditionTests {
    @Test func openSaysWhenARebuildIsNeeded() throws {
        let directory = NSTemporaryDirectory() + "docfs-condition-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/index.sqlite"

        do {
            let (fresh, condition) = try IndexDatabase.open(path: path)
            #expect(condition == .unbuilt)
            try fresh.apply([], built: true)
            // One writer at a time: a second is refused while the first has the index open.
            #expect(throws: DocfsError.self) { try IndexDatabase.open(path: path, waitingForWriter: 0.2) }
        }
        #expect(try IndexDatabase.open(path: path).1 == .ready)

        // An index made by the previous docfs (schema v1 only).
        let older = directory + "/older.sqlite"
        let queue = try DatabaseQueue(path: older)
        try IndexSchema.migrator().migrate(queue, upTo: "v1")
        try queue.close()
        let (migrated, olderCondition) = try IndexDatabase.open(path: older)
        #expect(olderCondition == .migrated)
        #expect(try migrated.count() == 0)
        #expect(try migrated.isBuilt() == false)

        // Damaged: not a database at all.
        let damaged = directory + "/damaged.sqlite"
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: damaged))
        let (replaced, damagedCondition) = try IndexDatabase.open(path: damaged)
        guard case .replaced(let reason, let aside) = damagedCondition else {
            Issue.record("a damaged index was not replaced: \(damagedCondition)")
            return
        }
        #expect(reason.contains("cannot be read") || reason.contains("damaged"), "\(reason)")
        #expect(FileManager.default.fileExists(atPath: aside))
        #expect(try replaced.count() == 0)
    }

    /// Issue 20 §3: the date indexes come by a migration that keeps the rows (no rebuild), and a
    /// date range reads them; so do issue 22's outbox, sync states and the machine a record's
    /// last change (and a removal) came from.
    @Test func anIndexWithoutTheDateIndexesGetsThemAndKeepsItsRows() throws {
        let directory = NSTemporaryDirectory() + "docfs-condition-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/index.sqlite"
        let day = 86400.0
        do {
            let (index, _) = try IndexDatabase.open(path: path)
            let records = (1...300).map { IndexQueryTests.record(Int64($0), "file\($0)", modified: 1_773_000_000 + Double($0) * day) }
            try index.apply(records.map { .put($0) }, built: true)
        }
        // As the previous docfs left it: no date indexes, its last step v2.
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in
            try db.execute(sql: "DROP INDEX items_modified")
            try db.execute(sql: "DROP INDEX items_created")
            try db.execute(sql: "DROP TABLE outbox")
            try db.execute(sql: "DROP TABLE syncItems")
            try db.execute(sql: "DROP TABLE syncParked")
            try db.execute(sql: "DROP TABLE syncLinks")
            try db.execute(sql: "DROP INDEX items_reference_inode")
            try db.execute(sql: "ALTER TABLE items DROP COLUMN remoteMachine")
            try db.execute(sql: "ALTER TABLE removals DROP COLUMN machine")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier IN ('v3-dates', 'v4-sync', 'v5-sync-parked', 'v6-reference-inodes', 'v7-remote-machine', ?)",
                           arguments: [IndexSchema.newest])
        }
        try queue.close()

        let (index, condition) = try IndexDatabase.open(path: path)
        #expect(condition == .ready)
        #expect(try index.count() == 300)
        // Which machine made a record's last change: none yet, and a put says so from now on.
        #expect(try index.allRecords().allSatisfy { $0.remoteMachine.isEmpty })
        var fromB = IndexQueryTests.record(1, "file1", modified: 1_773_000_000 + day)
        fromB.remoteMachine = "b"
        try index.apply([.put(fromB)])
        #expect(try index.records(id: 1).map(\.remoteMachine) == ["b"])
        // And a removal says it, for watchers.
        let before = try index.latestSequence()
        try index.apply([.remove(IndexQueryTests.location("/file2"), machine: "c"), .remove(IndexQueryTests.location("/file3"))])
        let removals = try index.changes(after: before)
        #expect(removals.removed.count == 2 && removals.removedBy == [2: "c"], "\(removals.removed) \(removals.removedBy)")
        // The sync tables of issue 22 came by their migration too.
        #expect(try index.outboxCount() == 0 && index.syncAnchor() == 0 && index.parkedSyncChanges(limit: 10).isEmpty)
        let plan = try DatabaseQueue(path: path).read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN SELECT * FROM items WHERE modified > ? AND modified < ?",
                             arguments: [0, 1]).map { $0["detail"] as String }.joined(separator: " ")
        }
        #expect(plan.contains("items_modified"), "\(plan)")
        let referencePlan = try DatabaseQueue(path: path).read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN SELECT * FROM items WHERE scope = 'external' AND backingInode = ?",
                             arguments: [1]).map { $0["detail"] as String }.joined(separator: " ")
        }
        #expect(referencePlan.contains("items_reference_inode"), "\(referencePlan)")
        let range = QueryPredicate.and(
            .comparison(Comparison(attribute: .modified, op: .greater, value: .date(1_773_000_000 + 100.5 * day, day: nil))),
            .comparison(Comparison(attribute: .modified, op: .less, value: .date(1_773_000_000 + 110.5 * day, day: nil))))
        let found = try index.records(matching: IndexQuery(predicate: range)).map(\.name).sorted()
        #expect(found == (101...110).map { "file\($0)" }.sorted())
    }
}
