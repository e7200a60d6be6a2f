import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `docfs query` and `docfs index rebuild` (issue 4 §3, §4) on a store made through a mount:
/// records carry the S2 attributes, predicates select, sort and limit, bad predicates exit 2
/// pointing at the column, and a missing index is built on first use.
@Suite struct QueryTests {
    func docfs(_ arguments: String) throws -> (status: Int32, output: String) {
        try shell("'\(MountFixture.binary)' \(arguments)")
    }

    @Test func rebuildThenQueryAStoreNoDaemonServes() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        mkdir(fixture.path("notes"), 0o755)
        try "# Plan\n".write(toFile: fixture.path("notes/plan.md"), atomically: false, encoding: .utf8)
        try String(repeating: "x", count: 3_000_000).write(toFile: fixture.path("big.txt"), atomically: false, encoding: .utf8)
        try Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13]).write(to: URL(fileURLWithPath: fixture.path("photo")))
        #expect(docfs_setxattr(fixture.path("notes/plan.md"), "user.xdg.tags", "work, Urgent", 12, 0) == 0)
        #expect(docfs_setxattr(fixture.path("big.txt"), "user.xdg.comment", "the log", 7, 0) == 0)
        let planID = try #require(itemID(fixture.path("notes/plan.md")))
        fixture.stop()
        // Made behind docfs's back: the rebuild gives it an id.
        try "behind".write(toFile: fixture.documents + "/outside.md", atomically: false, encoding: .utf8)

        // Served: the rebuild refuses and says what to do.
        try fixture.start()
        let refused = try docfs("index rebuild --store '\(fixture.store)'")
        #expect(refused.status == 1)
        #expect(refused.output.contains("unmount it first"), "\(refused.output)")
        fixture.stop()

        // No index yet: the first query builds it.
        let first = try docfs("query 'name ENDSWITH \".md\"' --sort name --store '\(fixture.store)'")
        #expect(first.status == 0, "\(first.output)")
        #expect(first.output.contains("has no index yet"))
        #expect(first.output.split(separator: "\n").filter { $0.hasPrefix("/") } == ["/outside.md", "/notes/plan.md"])

        let rebuilt = try docfs("index rebuild --store '\(fixture.store)'")
        #expect(rebuilt.status == 0)
        #expect(rebuilt.output.contains("indexed 5 items"), "\(rebuilt.output)")  // notes, plan.md, big.txt, photo, outside.md

        let json = try docfs("query 'tags CONTAINS[c] \"urgent\"' --json --store '\(fixture.store)'")
        let records = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [[String: Any]])
        #expect(records.count == 1)
        let plan = try #require(records.first)
        #expect(plan["id"] as? Int == Int(planID))
        #expect(plan["path"] as? String == "/notes/plan.md")
        #expect(plan["contentType"] as? String == "text/markdown")
        #expect(plan["uti"] as? String == "net.daringfireball.markdown")
        #expect(plan["tags"] as? [String] == ["work", "Urgent"])
        #expect(plan["kind"] as? String == "file")
        #expect(plan["version"] as? Int == 1)
        #expect(plan["container"] as? String == "docfs.default")
        #expect(plan["scope"] as? String == "documents")

        let cases: [(String, [String])] = [
            ("size > 2MB", ["/big.txt"]),
            ("contentType BEGINSWITH \"image/\"", ["/photo"]),
            ("comment CONTAINS \"log\" OR name == \"photo\"", ["/big.txt", "/photo"]),
            ("kind == \"folder\"", ["/notes"]),
            ("NOT kind == \"folder\" AND modified > -1d AND size < 1KB", ["/notes/plan.md", "/outside.md", "/photo"]),
            ("path BEGINSWITH \"/notes/\"", ["/notes/plan.md"]),
        ]
        for (predicate, expected) in cases {
            let result = try docfs("query '\(predicate)' --sort path --store '\(fixture.store)'")
            #expect(result.status == 0, "\(predicate): \(result.output)")
            #expect(result.output.split(separator: "\n").map(String.init) == expected, "\(predicate)")
        }
        let limited = try docfs("query '*' --sort size:desc --limit 2 --store '\(fixture.store)'")
        #expect(limited.output.split(separator: "\n").map(String.init) == ["/big.txt", "/photo"])

        let bad = try docfs("query 'name LIKE \"*.md\" AND modified >' --store '\(fixture.store)'")
        #expect(bad.status == 2)
        #expect(bad.output.contains("column 32"), "\(bad.output)")
        #expect(bad.output.contains("name LIKE \"*.md\" AND modified >\n"))
        let badSort = try docfs("query '*' --sort colour --store '\(fixture.store)'")
        #expect(badSort.status == 2)
        #expect(badSort.output.contains("cannot sort by colour"))

        // Through a mount point: paths under it, and a note that the answer is the last rebuild's.
        try fixture.start()
        let mounted = try docfs("query 'name == \"plan.md\"' '\(fixture.mountPoint)'")
        #expect(mounted.status == 0)
        #expect(mounted.output.contains(fixture.mountPoint + "/notes/plan.md\n"), "\(mounted.output)")
        #expect(mounted.output.contains("results are as of the last rebuild"))
    }
}
