import DocfsTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The reproductions of issue 49 (machines that silently ended up different), as a new user
/// meets them, each converging now (DESIGN §9.0), with `docfs remote check` saying so:
/// - one id per item: several stores on one host, each linked while mounted without a machine
///   name (so each asks for the host's), make items at the same instant; no id is shared by two
///   items anywhere, each store commits under a name of its own, and two folders that took one
///   id, then a rename that lost a file, converge with every file where it was put; bookmarks
///   made on one machine resolve on the others;
/// - a folder renamed, then removed, on one machine is renamed, then removed, on the others;
/// - edits made in the store folder while its daemon was stopped go up at the next mount, and
///   the item goes on taking the other machines' saves.
@Suite(.serialized) struct ManyMachinesConvergenceTests {
    typealias Machine = ManyMachinesTests.Machine

    /// path → id for every item under the mount (folders and files), as the machine has it.
    static func ids(_ machine: Machine) -> [String: String] {
        var found: [String: String] = [:]
        let root = machine.path("")
        guard let walker = FileManager.default.enumerator(atPath: root) else { return found }
        while let path = walker.nextObject() as? String {
            if path.hasPrefix(".docfs") { walker.skipDescendants(); continue }
            found[path] = machine.id(path) ?? "-"
        }
        return found
    }

    @Test func storesOnOneHostLinkedWithoutANameGiveIdsOfTheirOwn() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("identity")
        let machines = try ["a", "b", "c"].map { try Machine($0, mounted: true) }
        defer { for machine in machines { machine.fixture.tearDown() } }
        // Linked as a new user links: no --machine, every store asks for this host's name.
        for machine in machines {
            let linked = try machine.docfs("remote link '\(uri)' --store '\(machine.fixture.store)'")
            #expect(linked.status == 0, "\(linked.output)")
        }
        let names = try machines.map { try $0.status()["machine"] as? String ?? "?" }
        #expect(Set(names).count == 3 && names.allSatisfy { $0.hasPrefix(RemoteHostName.name) }, "\(names)")
        let spaces = try machines.map { try $0.status()["space"] as? Int ?? -1 }
        #expect(Set(spaces).count == 3, "\(spaces)")

        // The issue's reproduction: a folder and a file in it on each machine at the same instant.
        let folders = ["fa", "gb", "hc"]
        DispatchQueue.concurrentPerform(iterations: 3) { index in
            let folder = folders[index]
            _ = mkdir(machines[index].path(folder), 0o755)
            try? "\(folder) from \(machines[index].name)\n".write(toFile: machines[index].path(folder + "/x"), atomically: false, encoding: .utf8)
            // And a burst of files made at once everywhere.
            for n in 0..<40 { try? "\(n)\n".write(toFile: machines[index].path("\(folder)/f\(n)"), atomically: false, encoding: .utf8) }
        }
        func converged() -> [[String: String]]? {
            let trees = machines.map { Self.ids($0) }
            guard trees[0].count == 3 * 42, trees[0] == trees[1], trees[1] == trees[2] else { return nil }
            return trees
        }
        var trees: [[String: String]]?
        #expect(ManyMachinesTests.within(30) { trees = converged(); return trees != nil } != nil,
                "\(machines.map { Self.ids($0).count }) \(machines.map { (try? $0.status()) ?? [:] })")
        let tree = trees?.first ?? Self.ids(machines[0])
        // No id is shared by two items, and no item lacks one.
        let ids = Array(tree.values)
        #expect(!ids.contains("-") && Set(ids).count == ids.count, "\(tree.sorted { $0.key < $1.key }.prefix(12))")

        // The rename that lost a file when two folders shared an id: everything stays where it was put.
        #expect(rename(machines[0].path("fa"), machines[0].path("fa2")) == 0)
        #expect(ManyMachinesTests.within(20) {
            machines.allSatisfy { $0.content("fa2/x") == "fa from a\n" && $0.content("gb/x") == "gb from b\n" && $0.content("hc/x") == "hc from c\n"
                && !FileManager.default.fileExists(atPath: $0.path("fa")) }
        } != nil, "\(machines.map { Self.ids($0).keys.filter { !$0.contains("/f") }.sorted() })")
        let after = machines.map { Self.ids($0) }
        #expect(after[0] == after[1] && after[1] == after[2] && after[0]["fa2"] == tree["fa"], "\(after.map(\.count))")
        // A bookmark made on any machine resolves on every other, not stale, until the item
        // really changes (here: a rename on the machine it was made on).
        for (maker, path) in [(0, "fa2/x"), (1, "gb/x"), (2, "hc/f3")] {
            let token = try #require(attribute(machines[maker].path(path), "user.docfs.bookmark"))
            for machine in machines {
                let resolved = try BookmarkTests.resolve(token, "'\(machine.fixture.mountPoint)'")
                #expect(resolved.resolved?.path == machine.path(path) && resolved.resolved?.stale == false,
                        "made on \(machines[maker].name), resolved on \(machine.name): \(resolved.output)")
            }
        }
        let token = try #require(attribute(machines[1].path("gb/f1"), "user.docfs.bookmark"))
        #expect(rename(machines[1].path("gb/f1"), machines[1].path("gb/g1")) == 0)
        #expect(ManyMachinesTests.within(20) { machines.allSatisfy { FileManager.default.fileExists(atPath: $0.path("gb/g1")) } } != nil)
        for machine in machines {
            let resolved = try BookmarkTests.resolve(token, "'\(machine.fixture.mountPoint)'")
            #expect(resolved.resolved?.path == machine.path("gb/g1") && resolved.resolved?.staleBecause == ["renamed"],
                    "resolved on \(machine.name): \(resolved.output)")
        }

        // The issue's second reproduction: a folder renamed, then removed with what it holds,
        // on one machine is renamed, then removed, on every other.
        #expect(mkdir(machines[0].path("r1"), 0o755) == 0)
        try "1\n".write(toFile: machines[0].path("r1/a"), atomically: false, encoding: .utf8)
        #expect(ManyMachinesTests.within(20) { machines.allSatisfy { $0.content("r1/a") == "1\n" } } != nil)
        #expect(rename(machines[0].path("r1"), machines[0].path("r1b")) == 0)
        #expect(ManyMachinesTests.within(20) {
            machines.allSatisfy { $0.content("r1b/a") == "1\n" && !FileManager.default.fileExists(atPath: $0.path("r1")) }
        } != nil, "\(machines.map { Self.ids($0).keys.filter { $0.hasPrefix("r1") }.sorted() })")
        #expect(try shell("rm -rf '\(machines[0].path("r1b"))'").status == 0)
        #expect(ManyMachinesTests.within(20) {
            machines.allSatisfy { !FileManager.default.fileExists(atPath: $0.path("r1b")) && !FileManager.default.fileExists(atPath: $0.path("r1")) }
        } != nil, "\(machines.map { Self.ids($0).keys.filter { $0.hasPrefix("r1") }.sorted() })")

        // Each machine's versions are committed under its own name.
        let authors = try server.sql("SELECT DISTINCT author_machine FROM docfs.versions ORDER BY 1", database: uri.databaseName)
        #expect(authors.split(separator: "\n").map(String.init) == names.sorted(), "\(authors)")
        for machine in machines {
            let checked = try Self.check(machine)
            #expect(checked.status == 0, "\(machine.name): \(checked.output)")
        }
        #expect(Self.saysInStep(machines), "\(machines.map { (try? $0.status()) ?? [:] })")
    }
}

extension ManyMachinesConvergenceTests {
    /// Whether each machine's `remote status` comes to say it is in step (its daemon's own
    /// check found nothing, nothing moved since) within `seconds`; `remote check` agrees then.
    static func saysInStep(_ machines: [Machine], within seconds: Double = 30) -> Bool {
        let said = ManyMachinesTests.within(seconds) { machines.allSatisfy { (try? $0.status()["inStep"] as? Bool) == true } } != nil
        return said && machines.allSatisfy { (try? check($0).status) == 0 }
    }

    /// `docfs remote check` on `machine` (served or not): its exit status and output.
    static func check(_ machine: Machine, json: Bool = false) throws -> (status: Int32, output: String) {
        try machine.docfs("remote check\(json ? " --json" : "") --store '\(machine.fixture.store)'")
    }

    /// A folder renamed on one machine while another makes a file in it ends renamed, with the
    /// file, on both; a folder removed with what it holds on one machine while another makes a
    /// file in it comes back on both with that file alone (nothing made is lost).
    @Test func foldersRenamedOrRemovedWhileAnotherMachineFillsThemLoseNothing() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("filled")
        let (a, b) = (try Machine("a", mounted: true), try Machine("b", mounted: true))
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        #expect(try a.link(uri).status == 0 && b.link(uri).status == 0)
        #expect(mkdir(a.path("F"), 0o755) == 0)
        try "1\n".write(toFile: a.path("F/a"), atomically: false, encoding: .utf8)
        #expect(ManyMachinesTests.within(20) { b.content("F/a") == "1\n" } != nil)
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            if index == 0 { _ = rename(a.path("F"), a.path("F2")) } else { try? "g\n".write(toFile: b.path("F/g"), atomically: false, encoding: .utf8) }
        }
        func names(_ machine: Machine) -> [String] { Self.ids(machine).keys.sorted() }
        #expect(ManyMachinesTests.within(20) { [a, b].allSatisfy { names($0) == ["F2", "F2/a", "F2/g"] } } != nil, "\(names(a)) \(names(b))")
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            if index == 0 { _ = try? shell("rm -rf '\(a.path("F2"))'") } else { try? "h\n".write(toFile: b.path("F2/h"), atomically: false, encoding: .utf8) }
        }
        #expect(ManyMachinesTests.within(20) { [a, b].allSatisfy { names($0) == ["F2", "F2/h"] && $0.content("F2/h") == "h\n" } } != nil,
                "\(names(a)) \(names(b))")
        let settled = ManyMachinesTests.within(20) { (try? Self.check(a).status) == 0 && (try? Self.check(b).status) == 0 }
        let (lastA, lastB) = (try Self.check(a).output, try Self.check(b).output)
        #expect(settled != nil, "\(lastA) \(lastB)")
        #expect(Self.saysInStep([a, b]), "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:])")
    }

    /// Two folders moved into each other at once on two machines (`mv A B/` on one, `mv B A/`
    /// on the other): the remote takes the first move and refuses the second (it would put a
    /// folder inside itself), so both machines end with one inside the other, the same way,
    /// every file kept, and both say they are in step.
    @Test func foldersMovedIntoEachOtherAtOnceEndTheSameWithoutACycle() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("crossed")
        let (a, b) = (try Machine("a", mounted: true), try Machine("b", mounted: true))
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        #expect(try a.link(uri).status == 0 && b.link(uri).status == 0)
        for folder in ["A", "B"] {
            #expect(mkdir(a.path(folder), 0o755) == 0)
            try "in \(folder)\n".write(toFile: a.path("\(folder)/\(folder.lowercased()).txt"), atomically: false, encoding: .utf8)
        }
        #expect(ManyMachinesTests.within(20) { b.content("A/a.txt") == "in A\n" && b.content("B/b.txt") == "in B\n" } != nil)
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            if index == 0 { _ = rename(a.path("A"), a.path("B/A")) } else { _ = rename(b.path("B"), b.path("A/B")) }
        }
        func names(_ machine: Machine) -> [String] { Self.ids(machine).keys.sorted() }
        let oneWay = ["B", "B/A", "B/A/a.txt", "B/b.txt"], otherWay = ["A", "A/B", "A/B/b.txt", "A/a.txt"]
        #expect(ManyMachinesTests.within(30) {
            let (onA, onB) = (names(a), names(b))
            return onA == onB && (onA == oneWay || onA == otherWay)
        } != nil, "\(names(a)) \(names(b))")
        #expect(Self.ids(a) == Self.ids(b))
        #expect(Self.saysInStep([a, b]), "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:]) \((try? Self.check(a).output) ?? "") \((try? Self.check(b).output) ?? "")")
    }

    /// What does not travel is said, never silently half-synced (issue 49 §2): a fifo and a
    /// hard-linked file's second name stay on the machine they were made on, the file travels
    /// under its first name; `remote status` says how many are kept here only and `remote check`
    /// lists each as a note (no difference: exit 0), and both machines still say in step.
    @Test func whatDoesNotTravelIsSaid() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("untravelled")
        let (a, b) = (try Machine("a", mounted: true), try Machine("b", mounted: true))
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        #expect(try a.link(uri).status == 0 && b.link(uri).status == 0)
        try "linked\n".write(toFile: a.path("first.txt"), atomically: false, encoding: .utf8)
        #expect(link(a.path("first.txt"), a.path("second.txt")) == 0)
        #expect(mkfifo(a.path("pipe"), 0o644) == 0)
        #expect(ManyMachinesTests.within(20) { b.content("first.txt") == "linked\n" } != nil)
        #expect(Self.saysInStep([a, b]), "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:])")
        #expect(!FileManager.default.fileExists(atPath: b.path("second.txt")) && !FileManager.default.fileExists(atPath: b.path("pipe")))
        let status = try a.status()
        #expect(status["keptHereOnlyCount"] as? Int == 2, "\(status)")
        let said = try a.docfs("remote status --store '\(a.fixture.store)'").output
        #expect(said.contains("kept here only (does not travel): 2 items"), "\(said)")
        let checked = try Self.check(a)
        #expect(checked.status == 0, "\(checked.output)")
        #expect(checked.output.contains("note: /pipe: a special file") && checked.output.contains("note: /second.txt: another name of a hard-linked file"),
                "\(checked.output)")
        #expect((try b.status())["keptHereOnlyCount"] as? Int == 0)
    }

    @Test func editsMadeInTheStoreWhileStoppedGoUpAtTheNextMount() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("stopped")
        let (a, b) = (try Machine("a", mounted: true), try Machine("b", mounted: true))
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        #expect(try a.link(uri).status == 0 && b.link(uri).status == 0)
        try "orig\n".write(toFile: a.path("doc.txt"), atomically: false, encoding: .utf8)
        #expect(mkdir(a.path("dir"), 0o755) == 0)
        try "in\n".write(toFile: a.path("dir/in.txt"), atomically: false, encoding: .utf8)
        #expect(ManyMachinesTests.within(20) { b.content("doc.txt") == "orig\n" && b.content("dir/in.txt") == "in\n" } != nil)
        for machine in [a, b] {
            let checked = try Self.check(machine)
            #expect(checked.status == 0 && checked.output.contains("in step"), "\(machine.name): \(checked.output)")
        }

        // b's daemon stopped: its store folder edited, a file removed, a folder renamed.
        b.fixture.stop()
        try "edited while stopped\n".write(toFile: b.fixture.documents + "/doc.txt", atomically: false, encoding: .utf8)
        #expect(unlink(b.fixture.documents + "/dir/in.txt") == 0)
        #expect(rename(b.fixture.documents + "/dir", b.fixture.documents + "/dir2") == 0)
        // The check, with no daemon, says each difference; exit 3.
        let differing = try Self.check(b)
        #expect(differing.status == 3, "\(differing.output)")
        #expect(differing.output.contains("/doc.txt (item") && differing.output.contains("content differs"), "\(differing.output)")
        #expect(differing.output.contains("/dir2 (item") && differing.output.contains("place differs"), "\(differing.output)")
        #expect(differing.output.contains("missing here"), "\(differing.output)")
        let rows = (try? JSONSerialization.jsonObject(with: Data(try Self.check(b, json: true).output.utf8))) as? [[String: Any]] ?? []
        #expect(Set(rows.compactMap { $0["field"] as? String }).isSuperset(of: ["content", "place", "missing here"]), "\(rows)")

        // Mounted again: all of it goes up, and a has it.
        try b.fixture.start()
        #expect(ManyMachinesTests.within(20) {
            a.content("doc.txt") == "edited while stopped\n" && a.content("dir2/in.txt") == nil
                && FileManager.default.fileExists(atPath: a.path("dir2")) && !FileManager.default.fileExists(atPath: a.path("dir"))
        } != nil, "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:])")
        // And the item goes on taking a's saves.
        try "from a again\n".write(toFile: a.path("doc.txt"), atomically: false, encoding: .utf8)
        #expect(ManyMachinesTests.within(20) { b.content("doc.txt") == "from a again\n" } != nil, "\(b.content("doc.txt") ?? "absent")")
        let settled = ManyMachinesTests.within(20) { (try? Self.check(a).status) == 0 && (try? Self.check(b).status) == 0 }
        let (lastA, lastB) = (try Self.check(a).output, try Self.check(b).output)
        #expect(settled != nil, "\(lastA) \(lastB)")
        let json = try Self.check(b, json: true).output
        #expect((try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [Any] != nil && json.filter { !$0.isWhitespace } == "[]", "\(json)")
        #expect(Self.saysInStep([a, b]), "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:])")
    }
}

extension ManyMachinesConvergenceTests {
    /// Issue 49 reproduction 6: a machine joining a store that holds folders takes each
    /// folder's time as the remote has it, not the moment it received it, and sends none of
    /// them up again: every folder has one version on the remote, and both machines' checks
    /// find no difference.
    @Test func aJoiningMachineTakesFolderTimesAndSendsNoneUp() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("foldertimes")
        let (a, b) = (try Machine("a", mounted: true), try Machine("b", mounted: false))
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        let folders = ["docs/2025/q4", "docs/2025", "docs", "photos"]  // deepest first
        for folder in folders.reversed() { #expect(mkdir(a.path(folder), 0o755) == 0, "\(folder)") }
        for file in ["docs/2025/q4/report.txt", "docs/notes.txt", "photos/list.txt"] {
            try "\(file)\n".write(toFile: a.path(file), atomically: false, encoding: .utf8)
        }
        // Folder times set well in the past, deepest first (a name made in a folder moves it).
        for folder in folders {
            #expect(try shell("touch -m -d '2024-03-01 12:00:00' '\(a.path(folder))'").status == 0)
        }
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(30) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        #expect(ManyMachinesTests.within(60) {
            b.content("docs/2025/q4/report.txt") != nil && Self.saysInStep([a, b])
        } != nil, "\((try? b.status()) ?? [:])")
        func modified(_ machine: Machine, _ folder: String) -> Int {
            var st = stat()
            return stat(machine.path(folder), &st) == 0 ? st.st_mtim.tv_sec : -1
        }
        for folder in folders {
            #expect(modified(b, folder) == modified(a, folder) && modified(a, folder) < 1_735_689_600,
                    "\(folder): a \(modified(a, folder)) b \(modified(b, folder))")
        }
        let numbers = try server.sql("""
            SELECT string_agg(v.name || ':' || i.current_number::text, ',') FROM docfs.items i
            JOIN docfs.versions v ON v.item = i.item AND v.number = i.current_number WHERE v.kind = 'folder'
            """, database: uri.databaseName).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(numbers.split(separator: ",").count == folders.count && numbers.split(separator: ",").allSatisfy { $0.hasSuffix(":1") },
                "folders' current numbers: \(numbers)")
        for machine in [a, b] {
            let checked = try Self.check(machine)
            #expect(checked.status == 0, "\(machine.name): \(checked.output)")
        }
    }

    /// A change the log never gives a machine (its sequence moved to 0, behind every anchor, as
    /// a sequence committed out of order would be) is found by the daemon's own check and taken; until
    /// then `remote status` never says the machine is in step, and once it does, `remote check`
    /// agrees (issue 49 §4).
    @Test func aChangeTheLogSkippedIsFoundByTheDaemonsOwnCheck() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("audit")
        let (a, b) = (try Machine("a", mounted: true), try Machine("b", mounted: true))
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        #expect(try a.link(uri).status == 0 && b.link(uri).status == 0)
        try "one\n".write(toFile: a.path("doc.txt"), atomically: false, encoding: .utf8)
        #expect(ManyMachinesTests.within(20) { b.content("doc.txt") == "one\n" } != nil)
        #expect(ManyMachinesTests.within(30) { (try? b.status()["inStep"] as? Bool) == true } != nil, "\((try? b.status()) ?? [:])")
        let said = try b.docfs("remote status --store '\(b.fixture.store)'").output
        #expect(said.contains("in step: yes"), "\(said)")

        b.fixture.stop()
        try "two\n".write(toFile: a.path("doc.txt"), atomically: false, encoding: .utf8)
        #expect(ManyMachinesTests.within(20) { (try? a.status()["waiting"] as? Int) == 0 && (try? a.status()["inStep"] as? Bool) == true } != nil)
        let moved = try server.sql("""
            UPDATE docfs.versions v SET sequence = 0 FROM docfs.items i
            WHERE i.item = v.item AND v.number = i.current_number AND v.name = 'doc.txt' RETURNING v.number
            """, database: uri.databaseName)
        #expect(moved.trimmingCharacters(in: .whitespacesAndNewlines) == "2", "\(moved)")

        try b.fixture.start()
        var saidInStepWhileDifferent: [String: Any]?
        let found = ManyMachinesTests.within(30) {
            let status = (try? b.status()) ?? [:]
            let inStep = status["inStep"] as? Bool == true
            if b.content("doc.txt") != "two\n" {
                if inStep { saidInStepWhileDifferent = status }
                return false
            }
            return inStep
        }
        #expect(found != nil, "\(b.content("doc.txt") ?? "absent") \((try? b.status()) ?? [:])")
        #expect(saidInStepWhileDifferent == nil, "\(saidInStepWhileDifferent ?? [:])")
        let checked = try Self.check(b)
        #expect(checked.status == 0, "\(checked.output)")
        let log = (try? String(contentsOfFile: b.fixture.daemonLog, encoding: .utf8)) ?? ""
        #expect(log.contains("items not as the remote has them 1, items here not as last in step 0"), "\(log.suffix(2000))")
    }
}

/// This host's name, as `docfs remote link` asks for it by default.
enum RemoteHostName {
    static var name: String {
        var buffer = [CChar](repeating: 0, count: 256)
        gethostname(&buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
