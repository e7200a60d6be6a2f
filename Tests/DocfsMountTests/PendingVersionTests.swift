import Foundation
import Testing

/// Issue 49 §3 through real mounts and a real server: a version's number is the server's, given
/// in its commit order; a save the server has not taken yet is *pending* and says so, never a
/// guessed number that later changes.
@Suite struct PendingVersionTests {
    typealias Machine = ManyMachinesTests.Machine

    /// Two machines in step on a document; b's cable pulled, b saves twice: `user.docfs.version`
    /// reads `p2`, `docfs versions` lists `p1` and `p2` (table and JSON, no number) and
    /// `docfs status` says pending. Meanwhile a saves the document too, and goes first. With
    /// the cable back, b's saves take the numbers the server gives them (the first set aside,
    /// the last a conflict version, as they lost their race), and both machines list the same
    /// versions, numbers and makers, none pending.
    @Test func aSaveMadeWhileTheLinkIsCutIsPendingUntilTheServerNumbersIt() throws {
        // On b every save kept (no thinning of a burst), so each of b's two saves is a version;
        // a keeps the default window, and still keeps the version its save superseded a few
        // seconds after it went up (every machine keeps a version gone up).
        let everySave = #"{"versions": {"thinningWindowSeconds": 0}}"#
        let pair = try CuttablePair("pending", subnet: 140, settings: everySave)
        defer { pair.tearDown() }
        let (a, b, uri) = (pair.a, pair.b, pair.uri)
        try "base\n".write(toFile: a.path("plan.txt"), atomically: false, encoding: .utf8)
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(90) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        let linked = try b.link(uri)
        #expect(linked.status == 0, "\(linked.output)")
        try b.fixture.start()
        #expect(ManyMachinesTests.within(60) { b.content("plan.txt") == "base\n" } != nil)
        #expect(attribute(b.path("plan.txt"), "user.docfs.version") == "1")

        try pair.bSpace.cut()
        try "b's first, offline\n".write(toFile: b.path("plan.txt"), atomically: false, encoding: .utf8)
        try "b's second, offline\n".write(toFile: b.path("plan.txt"), atomically: false, encoding: .utf8)
        #expect(attribute(b.path("plan.txt"), "user.docfs.version") == "p2")
        let table = try b.docfs("versions '\(b.path("plan.txt"))'")
        #expect(table.status == 0 && table.output.contains("p1 ") && table.output.contains("p2 ")
                && table.output.contains("pN: a save not gone up yet"), "\(table.output)")
        let pending = try Self.versions(b)
        #expect(pending.map { $0["pending"] as? String } == ["p2", "p1", nil], "\(pending)")
        #expect(pending.last?["version"] as? Int == 1)
        let status = try b.docfs("status '\(b.path("plan.txt"))'")
        #expect(status.output.contains("p2 (pending"), "\(status.output)")
        #expect(try b.docfs("versions --show p1 '\(b.path("plan.txt"))'").output == "b's first, offline\n")
        // The index says so too: `docfs query --json` gives `pending`, no `version`.
        let queried = try b.docfs("query --json 'name == \"plan.txt\"' --store '\(b.fixture.store)'").output
        let record = ((try? JSONSerialization.jsonObject(with: Data(queried.utf8))) as? [[String: Any]])?.first
        #expect(record?["pending"] as? String == "p2" && record?["version"] == nil, "\(queried)")

        try "a's, while b was away\n".write(toFile: a.path("plan.txt"), atomically: false, encoding: .utf8)
        #expect(ManyMachinesTests.within(30) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        try pair.bSpace.restore()
        #expect(ManyMachinesTests.within(90) {
            ManyMachinesConvergenceTests.saysInStep([a, b]) && a.content("plan.txt") == b.content("plan.txt")
        } != nil, "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:])")
        let lists = try [a, b].map(Self.versions)
        #expect(lists[0].allSatisfy { $0["pending"] == nil && $0["version"] != nil }, "\(lists[0])")
        #expect(Self.shown(lists[0]) == Self.shown(lists[1]), "a: \(Self.shown(lists[0]))\nb: \(Self.shown(lists[1]))")
        #expect(Set(lists[0].compactMap { $0["kind"] as? String }) == ["current", "previous", "conflict"], "\(Self.shown(lists[0]))")
        // The conflict version and b's save set aside are b's; a's save is a's.
        let makers = Dictionary(lists[0].map { ("\($0["kind"] ?? "")", "\($0["machine"] ?? "")") }, uniquingKeysWith: { $1 })
        #expect(makers["conflict"] == b.name && makers["current"] == a.name, "\(Self.shown(lists[0]))")
        let number = try #require(attribute(b.path("plan.txt"), "user.docfs.version"))
        #expect(Int(number) != nil && attribute(a.path("plan.txt"), "user.docfs.version") == number)
        for machine in [a, b] {
            #expect(try machine.docfs("versions --show p1 '\(machine.path("plan.txt"))'").status != 0)
        }
    }

    /// An edit written in b's store folder while its daemon was stopped, then a save through
    /// b's mount before the edit could go up (b's cable pulled): the edit is a save of its own
    /// (`p1`), never the number the document had (which every other machine knows with other
    /// content). With the cable back both machines list the same versions, and each number
    /// shows the same content on both.
    @Test func anEditMadeWhileStoppedIsASaveOfItsOwnNotTheNumberItHad() throws {
        let everySave = #"{"versions": {"thinningWindowSeconds": 0}}"#
        let pair = try CuttablePair("stoppededit", subnet: 170, settings: everySave, aSettings: everySave)
        defer { pair.tearDown() }
        let (a, b, uri) = (pair.a, pair.b, pair.uri)
        try "base\n".write(toFile: a.path("plan.txt"), atomically: false, encoding: .utf8)
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(90) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        #expect(ManyMachinesTests.within(60) { b.content("plan.txt") == "base\n" } != nil)
        #expect(attribute(b.path("plan.txt"), "user.docfs.version") == "1")

        b.fixture.stop()
        try "edited while stopped\n".write(toFile: b.fixture.documents + "/plan.txt", atomically: false, encoding: .utf8)
        try pair.bSpace.cut()
        try b.fixture.start()
        #expect(attribute(b.path("plan.txt"), "user.docfs.version") == "p1", "the edit is a save of its own")
        try "saved after it\n".write(toFile: b.path("plan.txt"), atomically: false, encoding: .utf8)
        #expect(attribute(b.path("plan.txt"), "user.docfs.version") == "p2")
        #expect(try b.docfs("versions --show p1 '\(b.path("plan.txt"))'").output == "edited while stopped\n")

        try pair.bSpace.restore()
        #expect(ManyMachinesTests.within(90) {
            ManyMachinesConvergenceTests.saysInStep([a, b]) && a.content("plan.txt") == "saved after it\n"
        } != nil, "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:])")
        let lists = try [a, b].map(Self.versions)
        #expect(Self.shown(lists[0]) == Self.shown(lists[1]), "a: \(Self.shown(lists[0]))\nb: \(Self.shown(lists[1]))")
        for row in lists[0] where row["kind"] as? String != "current" {
            guard let number = row["version"] as? Int else { continue }
            let shown = try [a, b].map { try $0.docfs("versions --show \(number) '\($0.path("plan.txt"))'").output }
            #expect(shown[0] == shown[1], "v\(number): a \(shown[0].debugDescription), b \(shown[1].debugDescription)")
        }
        #expect(Set(lists[0].compactMap { $0["kind"] as? String }) == ["current", "previous"], "\(Self.shown(lists[0]))")
    }

    /// `docfs versions --json` of the machine's plan.txt, newest first.
    static func versions(_ machine: Machine) throws -> [[String: Any]] {
        let answer = try machine.docfs("versions --json '\(machine.path("plan.txt"))'")
        let rows = try JSONSerialization.jsonObject(with: Data(answer.output.utf8)) as? [[String: Any]]
        return try #require(rows, "\(answer.output)")
    }

    /// What every machine lists alike: number, kind, size and maker (machine and user).
    static func shown(_ rows: [[String: Any]]) -> [String] {
        rows.map { "\($0["version"] ?? "-") \($0["kind"] ?? "-") \($0["size"] ?? "-") \($0["user"] ?? "-")@\($0["machine"] ?? "-")" }
    }
}
