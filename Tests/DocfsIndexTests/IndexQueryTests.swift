import DocfsCore
import DocfsIndex
import Foundation
import DocfsTestSupport
import Testing

/// The index database: records written and read back whole, removals remembered, queries with
/// scope, sort and limit, and SQL agreeing with the predicate's Swift meaning on random
/// records and predicates (model-based).
@Suite struct IndexQueryTests {
    static let parser = PredicateParser(now: Date(timeIntervalSince1970: 1_773_576_000), timeZone: TimeZone(identifier: "UTC")!)

    func temporaryIndex() throws -> (IndexDatabase, String) {
        let directory = NSTemporaryDirectory() + "docfs-index-\(UUID().uuidString)"
        return (try IndexDatabase(path: directory + "/index.sqlite"), directory)
    }

    static func record(_ id: Int64, _ name: String, scope: String = "documents", size: Int64 = 100,
                       modified: Double = 1_773_000_000, tags: [String] = []) -> IndexRecord {
        IndexRecord(id: id, name: name, path: "/" + name, container: "docfs.default", containerName: "Documents",
                    scope: scope, kind: "file", size: size, created: modified - 100, modified: modified,
                    contentType: "text/plain", version: 1, tags: tags)
    }

    static func location(_ path: String) -> IndexLocation {
        IndexLocation(container: "docfs.default", scope: "documents", path: path)
    }

    @Test func recordsRoundTripAndRemovalsAreRemembered() throws {
        let (index, directory) = try temporaryIndex()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var full = Self.record(7, "ünïcode name.md", tags: ["a", "b,c"])
        full.comment = "line\nbreak"
        full.uti = "net.daringfireball.markdown"
        full.hasThumbnail = true
        full.isExternal = true
        full.originalPath = "/elsewhere"
        full.localPath = "/here"
        full.conflict = true
        full.backingInode = 1234
        full.statusChanged = 1_773_000_001.5
        try index.apply([.put(full), .put(Self.record(8, "other"))])
        let stored = try #require(try index.record(at: full.location))
        #expect(stored == full)
        #expect(stored.entry > 0)
        #expect(try index.count() == 2)
        let before = try index.latestSequence()
        full.size = 999
        try index.apply([.put(full)])
        let updated = try #require(try index.record(at: full.location))
        #expect(updated.size == 999)
        #expect(updated.entry == stored.entry)  // the same entry, written again
        let changes = try index.changes(after: before)
        #expect(changes.written.map(\.entry) == [stored.entry])
        #expect(changes.removed.isEmpty)
        try index.apply([.remove(full.location)])
        #expect(try index.record(at: full.location) == nil)
        #expect(try index.count() == 1)
        #expect(try index.changes(after: changes.sequence).removed == [stored.entry])
        // Another connection (a `docfs query` process) reads what was written.
        let reader = try IndexDatabase(path: index.path, readOnly: true)
        #expect(try reader.count() == 1)
    }

    /// A folder's move takes everything under it along (and nothing that merely shares a
    /// prefix); an exchange trades places; removing a folder removes what is under it.
    @Test func movesExchangesAndRemovalsReachEverythingUnder() throws {
        let (index, directory) = try temporaryIndex()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func put(_ id: Int64, _ path: String) -> IndexChange {
            var r = Self.record(id, IndexLocation(container: "", scope: "", path: path).name)
            r.path = path
            return .put(r)
        }
        try index.apply([put(1, "/a"), put(2, "/a/x"), put(3, "/a/x/y"), put(4, "/a-b"), put(5, "/ab"), put(6, "/c")])
        let entryOfY = try #require(try index.record(at: Self.location("/a/x/y"))).entry
        try index.apply([.move(from: Self.location("/a"), to: Self.location("/d/e"))])
        func paths() throws -> [String] { try index.allRecords().map(\.path) }
        #expect(try paths() == ["/a-b", "/ab", "/c", "/d/e", "/d/e/x", "/d/e/x/y"])
        #expect(try index.record(at: Self.location("/d/e"))?.name == "e")
        #expect(try index.record(at: Self.location("/d/e/x/y"))?.entry == entryOfY)
        try index.apply([.exchange(Self.location("/d/e"), Self.location("/c"))])
        #expect(try paths() == ["/a-b", "/ab", "/c", "/c/x", "/c/x/y", "/d/e"])
        #expect(try index.record(at: Self.location("/c"))?.id == 1)
        #expect(try index.record(at: Self.location("/d/e"))?.id == 6)
        try index.apply([.remove(Self.location("/c"))])
        #expect(try paths() == ["/a-b", "/ab", "/d/e"])
    }

    /// Hard links: each name of an item has its own entry, found by the item's id.
    @Test func eachNameOfAnItemHasItsEntry() throws {
        let (index, directory) = try temporaryIndex()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let a = Self.record(9, "a.txt")
        var b = Self.record(9, "b.md")
        b.contentType = "text/markdown"
        try index.apply([.put(a), .put(b), .put(Self.record(10, "c"))])
        let names = try index.records(id: 9)
        #expect(names.map(\.path) == ["/a.txt", "/b.md"])
        #expect(Set(names.map(\.entry)).count == 2)
        #expect(names.map(\.contentType) == ["text/plain", "text/markdown"])
    }

    /// Fingerprints find the entry at a place and say which were never asked for.
    @Test func fingerprintsTellUnchangedAndUnseenEntries() throws {
        let (index, directory) = try temporaryIndex()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var records = (1...50).map { Self.record(Int64($0), "f\($0)") }
        try index.apply(records.map { .put($0) })
        var prints = try index.fingerprints()
        #expect(prints.count == 50)
        records[0].size += 1
        for record in records.dropLast(10) {
            let taken = prints.take(record.location)
            let found = try #require(taken)
            #expect((found.print == IndexFingerprints.print(of: record)) == (record.id != 1))
            #expect(found.id == record.id)
        }
        #expect(prints.take(Self.location("/nowhere")) == nil)
        let unseen = Set(try index.records(entries: prints.unseenEntries).map(\.id))
        #expect(unseen == Set(41...50))
    }

    @Test func scopeSortAndLimit() throws {
        let (index, directory) = try temporaryIndex()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try index.apply([Self.record(1, "b", size: 30), Self.record(2, "a", size: 10), Self.record(3, "c", size: 20),
                         Self.record(4, "d", scope: "data", size: 5)].map { .put($0) })
        let all = try Self.parser.parse("")
        #expect(try index.records(matching: IndexQuery(predicate: all)).map(\.id) == [2, 1, 3])  // by path
        #expect(try index.records(matching: IndexQuery(predicate: all, scope: .all)).map(\.id) == [2, 1, 3, 4])
        #expect(try index.records(matching: IndexQuery(predicate: all, scope: .data)).map(\.id) == [4])
        #expect(try index.records(matching: IndexQuery(predicate: all, sort: [.init(attribute: .name)])).map(\.name) == ["a", "b", "c"])
        #expect(try index.records(matching: IndexQuery(predicate: all, sort: [.init(attribute: .size, descending: true)],
                                                       limit: 2)).map(\.size) == [30, 20])
    }

    /// Random records, random predicates: the rows SQL selects are exactly those the Swift
    /// meaning of the predicate selects.
    @Test func sqlAgreesWithTheSwiftMeaningOnRandomPredicates() throws {
        let (index, directory) = try temporaryIndex()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var rng = SplitMix(seed: 44)
        let names = ["Report.odt", "report.ODT", "notes.md", "a*b?.txt", "Ünï.md", "", "x", "photo.JPG", "photo.jpg", "z z",
                     "[draft] a.md", "e\u{301}t\u{e9}.md", "back\\slash"]
        let tagWords = ["work", "Work", "home", "urgent", "ünï"]
        var records: [IndexRecord] = []
        for id in 1...300 {
            var r = Self.record(Int64(id), names[rng.next(below: names.count)],
                                scope: ["documents", "data", "external"][rng.next(below: 3)],
                                size: Int64(rng.next(below: 5)) * 1_000_000,
                                modified: 1_773_576_000 - Double(rng.next(below: 20)) * 43_200,
                                tags: (0..<rng.next(below: 3)).map { _ in tagWords[rng.next(below: tagWords.count)] })
            r.path = "/\(id)/\(r.name)"  // names repeat; places do not
            r.version = Int64(rng.next(below: 4))
            r.conflict = rng.next(below: 2) == 0
            records.append(r)
        }
        try index.apply(records.map { .put($0) })
        let textOps = ["==", "!=", "<", ">=", "LIKE", "BEGINSWITH", "ENDSWITH", "CONTAINS"]
        let patterns = ["\"report*\"", "\"*.md\"", "\"photo.jpg\"", "\"a\\\\*b?.txt\"", "\"\"", "\"?\"", "\"ÜNÏ.md\"", "\"*\"",
                        "\"[draft]*\"", "\"?t?.md\"", "\"??t?.md\"", "\"back\\\\slash\"", "\"*a*\""]
        func comparison() -> String {
            switch rng.next(below: 6) {
            case 0:
                let op = textOps[rng.next(below: textOps.count)]
                return "name \(op)\(rng.next(below: 2) == 0 ? "[c]" : "") \(patterns[rng.next(below: patterns.count)])"
            case 1:
                return "size \(["==", "!=", "<", "<=", ">", ">="][rng.next(below: 6)]) \(rng.next(below: 5))MB"
            case 2:
                return "modified \(["==", "!=", "<", "<=", ">", ">="][rng.next(below: 6)]) \(["today", "yesterday", "-3d", "2026-03-10", "2026-03-14T12:00"][rng.next(below: 5)])"
            case 3:
                return "tags \(["CONTAINS", "==", "!=", "LIKE", "BEGINSWITH"][rng.next(below: 5)])\(rng.next(below: 2) == 0 ? "[c]" : "") \"\(["work", "w*", "ünï", "ÜNÏ", "h"][rng.next(below: 5)])\""
            case 4:
                return "version \(["==", "!=", "<", ">="][rng.next(below: 4)]) \(rng.next(below: 4))"
            default:
                return "conflict \(["==", "!="][rng.next(below: 2)]) \(["true", "false"][rng.next(below: 2)])"
            }
        }
        func predicate(_ depth: Int) -> String {
            if depth > 2 || rng.next(below: 3) == 0 { return comparison() }
            switch rng.next(below: 3) {
            case 0: return "(\(predicate(depth + 1)) AND \(predicate(depth + 1)))"
            case 1: return "(\(predicate(depth + 1)) OR \(predicate(depth + 1)))"
            default: return "NOT \(predicate(depth + 1))"
            }
        }
        var nonEmpty = 0
        for _ in 0..<400 {
            let text = predicate(0)
            let query = IndexQuery(predicate: try Self.parser.parse(text), scope: IndexQuery.Scope.allCases[rng.next(below: 4)])
            let fromSQL = try index.records(matching: query).map(\.id).sorted()
            let fromSwift = records.filter(query.matches).map(\.id).sorted()
            #expect(fromSQL == fromSwift, "\(text) in \(query.scope)")
            if !fromSQL.isEmpty { nonEmpty += 1 }
        }
        #expect(nonEmpty > 100)
    }
}

/// What a live query reports as changed (issue 20: the writeback cache's late times).
@Suite struct LiveQueryEventTests {
    @Test func aStatusChangeAloneIsNoChangeButAnAttributeIs() throws {
        let directory = NSTemporaryDirectory() + "docfs-live-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let index = try IndexDatabase(path: directory + "/index.sqlite")
        var record = IndexQueryTests.record(1, "a.md")
        record.statusChanged = 100
        try index.apply([.put(record)])
        var live = try LiveQuery(index: index, query: IndexQuery(predicate: .all))
        #expect(live.initial.map(\.name) == ["a.md"])
        record.statusChanged = 200  // a rename's or the kernel's late times: bookkeeping only
        record.backingInode = 77
        try index.stitch([.put(record)])
        #expect(try live.poll().isEmpty)
        record.modified += 1
        try index.stitch([.put(record)])
        #expect(try live.poll().map { "\($0.name) \($0.record.path)" } == ["changed /a.md"])
    }
}
