import DocfsCore
import DocfsIndex
import Foundation
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
        try index.upsert([full, Self.record(8, "other")])
        #expect(try index.record(id: 7) == full)
        #expect(try index.count() == 2)
        full.size = 999
        try index.upsert([full])
        #expect(try index.record(id: 7)?.size == 999)
        try index.remove([7])
        #expect(try index.record(id: 7) == nil)
        #expect(try index.count() == 1)
        // Another connection (a `docfs query` process) reads what was written.
        let reader = try IndexDatabase(path: index.path, readOnly: true)
        #expect(try reader.count() == 1)
    }

    @Test func scopeSortAndLimit() throws {
        let (index, directory) = try temporaryIndex()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try index.upsert([Self.record(1, "b", size: 30), Self.record(2, "a", size: 10), Self.record(3, "c", size: 20),
                          Self.record(4, "d", scope: "data", size: 5)])
        let all = try Self.parser.parse("")
        #expect(try index.records(matching: IndexQuery(predicate: all)).map(\.id) == [1, 2, 3])
        #expect(try index.records(matching: IndexQuery(predicate: all, scope: .all)).map(\.id) == [1, 2, 3, 4])
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
        let names = ["Report.odt", "report.ODT", "notes.md", "a*b?.txt", "Ünï.md", "", "x", "photo.JPG", "photo.jpg", "z z"]
        let tagWords = ["work", "Work", "home", "urgent", "ünï"]
        var records: [IndexRecord] = []
        for id in 1...300 {
            var r = Self.record(Int64(id), names[rng.next(below: names.count)],
                                scope: ["documents", "data", "external"][rng.next(below: 3)],
                                size: Int64(rng.next(below: 5)) * 1_000_000,
                                modified: 1_773_576_000 - Double(rng.next(below: 20)) * 43_200,
                                tags: (0..<rng.next(below: 3)).map { _ in tagWords[rng.next(below: tagWords.count)] })
            r.version = Int64(rng.next(below: 4))
            r.conflict = rng.next(below: 2) == 0
            records.append(r)
        }
        try index.upsert(records)
        let textOps = ["==", "!=", "<", ">=", "LIKE", "BEGINSWITH", "ENDSWITH", "CONTAINS"]
        let patterns = ["\"report*\"", "\"*.md\"", "\"photo.jpg\"", "\"a\\\\*b?.txt\"", "\"\"", "\"?\"", "\"ÜNÏ.md\"", "\"*\""]
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
            let fromSQL = try index.records(matching: query).map(\.id)
            let fromSwift = records.filter(query.matches).map(\.id).sorted()
            #expect(fromSQL == fromSwift, "\(text) in \(query.scope)")
            if !fromSQL.isEmpty { nonEmpty += 1 }
        }
        #expect(nonEmpty > 100)
    }
}
