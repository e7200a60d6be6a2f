import CLinux
import DocfsIndex
import DocfsTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Several "machines" (stores and daemons on this machine) linked to one PostgreSQL database
/// (issue 22 §1, §3, §6), through their mounts: `docfs remote link` of a served store and of an
/// empty unserved one, a save on one seen on the other (content, id, attributes, index) within
/// a second, renames and deletions, the status, a server restarted while saves go on, and
/// links that cannot work refused in one line, changing nothing.
@Suite(.serialized) struct ManyMachinesTests {
    /// A machine: a store, its daemon once mounted, and a home of its own (its ~/.pgpass).
    final class Machine: @unchecked Sendable {
        let fixture: MountFixture
        let name: String
        var home: String { fixture.root }

        init(_ name: String, mounted: Bool, settings: String? = nil) throws {
            self.name = name
            fixture = try MountFixture(mount: false)
            if let settings {
                try FileManager.default.createDirectory(atPath: fixture.store, withIntermediateDirectories: true)
                try settings.write(toFile: fixture.store + "/settings.json", atomically: false, encoding: .utf8)
            }
            // The engine says what it decided for each item: a failing test shows why.
            fixture.daemonEnvironment = ["HOME": fixture.root, "DOCFS_SYNC_TRACE": "1"]
            if mounted { try fixture.start() }
        }

        func docfs(_ arguments: String) throws -> (status: Int32, output: String) {
            try shell("'\(MountFixture.binary)' \(arguments) 2>&1", environment: ["HOME": home])
        }

        func link(_ uri: String) throws -> (status: Int32, output: String) {
            try docfs("remote link '\(uri)' --machine \(name) --store '\(fixture.store)'")
        }

        func path(_ relative: String) -> String { fixture.path(relative) }

        func id(_ relative: String) -> String? {
            var value = [UInt8](repeating: 0, count: 32)
            let n = docfs_getxattr(path(relative), "user.docfs.id", &value, value.count)
            return n > 0 ? String(decoding: value[0..<n], as: UTF8.self) : nil
        }

        func content(_ relative: String) -> String? { try? String(contentsOfFile: path(relative), encoding: .utf8) }

        func status() throws -> [String: Any] {
            let answer = try docfs("remote status --json --store '\(fixture.store)'")
            return (try? JSONSerialization.jsonObject(with: Data(answer.output.utf8))) as? [String: Any] ?? ["output": answer.output]
        }
    }

    /// Waits up to `seconds` for `condition`; answers the time it took, nil when it never held.
    static func within(_ seconds: Double, _ condition: () -> Bool) -> Double? {
        let start = Date()
        while Date().timeIntervalSince(start) < seconds {
            if condition() { return Date().timeIntervalSince(start) }
            usleep(10_000)
        }
        return nil
    }

    @Test func aSaveOnOneMachineIsSeenOnAnotherThroughTheirMounts() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("machines")
        let a = try Machine("a", mounted: true, settings: MountFixture.keepEveryVersion)  // its saves each keep a version
        let b = try Machine("b", mounted: false)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        try "plan from a\n".write(toFile: a.path("plan.txt"), atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: a.path("Projects"), withIntermediateDirectories: false)
        try "inner\n".write(toFile: a.path("Projects/inner.txt"), atomically: false, encoding: .utf8)
        #expect(docfs_setxattr(a.path("plan.txt"), "user.xdg.tags", "work", 4, 0) == 0)

        // a is served: its daemon links and sends its documents up in the background.
        let linked = try a.link(uri)
        #expect(linked.status == 0 && linked.output.contains("linked to postgresql://docfs_test@127.0.0.1"), "\(linked.output)")
        #expect(!linked.output.contains(server.password))
        #expect(Self.within(10) { (try? a.status())?["waiting"] as? Int == 0 && (try? a.status())?["lastContact"] != nil } != nil)
        // The password is in a's ~/.pgpass, not in the store or the daemon's log.
        #expect(try String(contentsOfFile: a.home + "/.pgpass", encoding: .utf8).contains(server.password))
        let store = try shell("grep -rl '\(server.password)' '\(a.fixture.store)' '\(a.fixture.daemonLog)' || true")
        #expect(store.output.isEmpty, "\(store.output)")

        // b is empty and not served: linking brings a's documents down now; its daemon keeps them in step.
        let bLinked = try b.link(uri.replacingOccurrences(of: ":\(server.password)@", with: "@"))
        #expect(bLinked.status != 0 && bLinked.output.contains("password"), "without a's ~/.pgpass b has no password: \(bLinked.output)")
        // On a terminal (script(1) gives it one) the link shows its progress as it goes.
        let onTerminal = "'\(MountFixture.binary)' remote link '\(uri)' --machine b --store '\(b.fixture.store)'"
        let withPassword = try shell("script -qec \"\(onTerminal)\" /dev/null", environment: ["HOME": b.home])
        #expect(withPassword.status == 0 && withPassword.output.contains("3 received"), "\(withPassword.output)")
        #expect(withPassword.output.contains("items sent,") && withPassword.output.contains("received\u{2026}"), "\(withPassword.output)")
        try b.fixture.start()
        #expect(b.content("plan.txt") == "plan from a\n" && b.content("Projects/inner.txt") == "inner\n")
        #expect(b.id("plan.txt") != nil && b.id("plan.txt") == a.id("plan.txt") && b.id("Projects") == a.id("Projects"))
        var tag = [UInt8](repeating: 0, count: 16)
        #expect(docfs_getxattr(b.path("plan.txt"), "user.xdg.tags", &tag, tag.count) == 4)
        let query = try b.docfs("query 'name == \"inner.txt\"' --store '\(b.fixture.store)'")
        #expect(query.output.contains("/Projects/inner.txt"), "\(query.output)")

        // b's watchers hear a's saves as another machine's.
        let watchOutput = b.fixture.root + "/watch.jsonl"
        let watch = Process()
        watch.executableURL = URL(fileURLWithPath: MountFixture.binary)
        watch.arguments = ["watch", "--json", b.path("")]
        _ = FileManager.default.createFile(atPath: watchOutput, contents: nil)
        watch.standardOutput = FileHandle(forWritingAtPath: watchOutput)
        try watch.run()
        defer { kill(watch.processIdentifier, SIGTERM) }
        // And a live query, which reads the index: its record says which machine changed it.
        let queryOutput = b.fixture.root + "/query-watch.jsonl"
        let liveQuery = Process()
        liveQuery.executableURL = URL(fileURLWithPath: MountFixture.binary)
        liveQuery.arguments = ["query", "name ENDSWITH \".txt\"", "--watch", "--json", "--store", b.fixture.store]
        _ = FileManager.default.createFile(atPath: queryOutput, contents: nil)
        liveQuery.standardOutput = FileHandle(forWritingAtPath: queryOutput)
        try liveQuery.run()
        defer { kill(liveQuery.processIdentifier, SIGTERM) }
        #expect(Self.within(5) { ((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "").contains(#""event":"gathered""#) } != nil)
        usleep(300_000)
        // Saves both ways, each seen within a second.
        for round in 0..<5 {
            try "save \(round) on a\n".write(toFile: a.path("plan.txt"), atomically: false, encoding: .utf8)
            let seen = Self.within(5) { b.content("plan.txt") == "save \(round) on a\n" }
            #expect(seen.map { $0 < 1 } == true, "round \(round) on b after \(seen.map { "\($0) s" } ?? "never")")
        }
        let heard = Self.within(5) {
            ((try? String(contentsOfFile: watchOutput, encoding: .utf8)) ?? "").contains(#""machine":"a""#)
        }
        let events = (try? String(contentsOfFile: watchOutput, encoding: .utf8)) ?? ""
        #expect(heard != nil && events.contains(#""origin":"remote""#) && events.contains(#""path":"plan.txt""#), "\(events)")
        let queryHeard = Self.within(5) {
            ((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "").split(separator: "\n").contains { line in
                line.contains(#""event":"changed""#) && line.contains(#""origin":"remote""#) && line.contains(#""machine":"a""#)
                    && line.contains(#""name":"plan.txt""#)
            }
        }
        #expect(queryHeard != nil, "\((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "")")
        // The same version number on both, and the same document by id on both.
        #expect(Self.within(5) {
            let number = attribute(a.path("plan.txt"), "user.docfs.version")
            return number != nil && attribute(b.path("plan.txt"), "user.docfs.version") == number
        } != nil)
        let planID = try #require(a.id("plan.txt"))
        #expect(b.content(".docfs/by-id/\(planID)") == "save 4 on a\n")
        // A mode changed alone travels.
        #expect(chmod(a.path("plan.txt"), 0o640) == 0)
        #expect(Self.within(5) {
            var st = stat()
            return stat(b.path("plan.txt"), &st) == 0 && st.st_mode & 0o7777 == 0o640
        } != nil)
        try "made on b\n".write(toFile: b.path("from-b.txt"), atomically: false, encoding: .utf8)
        #expect(Self.within(5) { a.content("from-b.txt") == "made on b\n" } != nil)
        // b's own change, to b's live query: local, no machine.
        #expect(Self.within(5) {
            ((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "").split(separator: "\n").contains { line in
                line.contains(#""name":"from-b.txt""#) && line.contains(#""origin":"local""#) && !line.contains(#""machine""#)
            }
        } != nil, "\((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "")")
        #expect(a.id("from-b.txt") == b.id("from-b.txt"))
        // b's ids come from b's own space: no item of a's has them.
        #expect((UInt64(b.id("from-b.txt") ?? "0") ?? 0) >= 1 << 41)
        // A rename on a and a deletion on b travel.
        #expect(rename(a.path("Projects/inner.txt"), a.path("inner-moved.txt")) == 0)
        #expect(Self.within(5) { b.content("inner-moved.txt") == "inner\n" && b.content("Projects/inner.txt") == nil } != nil)
        // b's live query hears the rename as a's.
        #expect(Self.within(5) {
            ((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "").split(separator: "\n").contains { line in
                line.contains(#""name":"inner-moved.txt""#) && line.contains(#""origin":"remote""#) && line.contains(#""machine":"a""#)
            }
        } != nil, "\((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "")")
        #expect(unlink(b.path("from-b.txt")) == 0)
        #expect(Self.within(5) { a.content("from-b.txt") == nil } != nil)
        // Removals too say where they came from, to b's live query: b's own, local; a's, remote.
        try "to go on a\n".write(toFile: a.path("gone-on-a.txt"), atomically: false, encoding: .utf8)
        // Once b's live query has reported it (a name made and removed between two of its looks
        // is not reported at all).
        #expect(Self.within(5) {
            ((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "").split(separator: "\n").contains { line in
                line.contains(#""event":"added""#) && line.contains(#""name":"gone-on-a.txt""#)
            }
        } != nil)
        #expect(unlink(a.path("gone-on-a.txt")) == 0)
        #expect(Self.within(5) { b.content("gone-on-a.txt") == nil } != nil)
        func removal(_ name: String, _ says: [String]) -> Bool {
            ((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "").split(separator: "\n").contains { line in
                line.contains(#""event":"removed""#) && line.contains(#""name":"\#(name)""#) && says.allSatisfy { line.contains($0) }
            }
        }
        #expect(Self.within(5) {
            removal("from-b.txt", [#""origin":"local""#]) && removal("gone-on-a.txt", [#""origin":"remote""#, #""machine":"a""#])
        } != nil,
                "\((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "")")
        // Nothing b did of itself to a's documents: applying a's rename and mode change (which
        // set the file's attributes where it stands) is no change of b's, to its live query.
        let heardOnB = ((try? String(contentsOfFile: queryOutput, encoding: .utf8)) ?? "").split(separator: "\n")
        let localOnB = heardOnB.filter { line in
            (line.contains(#""name":"plan.txt""#) || line.contains(#""name":"inner-moved.txt""#))
                && !line.contains(#""event":"gathered""#) && line.contains(#""origin":"local""#)
        }
        #expect(localOnB.isEmpty, "\(localOnB)")
        // The versions a kept of what b's saves replaced, and a clean status on both.
        let versions = try a.docfs("versions '\(a.path("plan.txt"))'")
        #expect(versions.output.contains("previous"), "\(versions.output)")
        for machine in [a, b] {
            let status = try machine.status()
            #expect(status["waiting"] as? Int == 0 && status["lastError"] == nil && status["served"] as? Bool == true, "\(machine.name): \(status)")
        }
        // b unlinks while served: its documents stay, a's next save no longer reaches it, and
        // the link is gone from the store.
        let unlinked = try b.docfs("remote unlink --store '\(b.fixture.store)'")
        #expect(unlinked.status == 0 && unlinked.output.contains("unlinked"), "\(unlinked.output)")
        #expect(!FileManager.default.fileExists(atPath: b.fixture.store + "/remote.json"))
        try "after b left\n".write(toFile: a.path("plan.txt"), atomically: false, encoding: .utf8)
        usleep(1_500_000)
        #expect(b.content("plan.txt") == "save 4 on a\n" && b.content("inner-moved.txt") == "inner\n")
        let gone = try b.docfs("remote status --store '\(b.fixture.store)'")
        #expect(gone.status == 1 && gone.output.contains("not linked"), "\(gone.output)")
    }

    @Test func linksThatCannotWorkSayWhatToDoAndChangeNothing() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("refused")
        let machine = try Machine("lonely", mounted: false)
        defer { machine.fixture.tearDown() }
        let cases: [(String, String)] = [
            ("mysql://u@h/db", "is not a PostgreSQL URI"),
            (uri.replacingOccurrences(of: server.password, with: "hunter2"), "refused the login of user 'docfs_test'"),
            ("postgresql://docfs_test:x@127.0.0.1:1/db?sslmode=disable&connect_timeout=3", "cannot reach PostgreSQL at 127.0.0.1:1"),
            (uri.replacingOccurrences(of: "/\(uri.databaseName)?", with: "/nosuchdb?"), "has no database 'nosuchdb'"),
        ]
        for (bad, reason) in cases {
            let answer = try machine.link(bad)
            #expect(answer.status == 1, "\(bad): \(answer.output)")
            #expect(answer.output.contains(reason) && !answer.output.contains("hunter2"), "\(bad): \(answer.output)")
            #expect(answer.output.split(separator: "\n").count == 1, "\(bad): \(answer.output)")
            #expect(!FileManager.default.fileExists(atPath: machine.fixture.store + "/remote.json"))
        }
        // A database holding another application's tables is left alone.
        let foreign = try server.makeDatabase("foreign")
        try server.sql("CREATE TABLE invoices (id int)", database: foreign.databaseName)
        let answer = try machine.link(foreign)
        #expect(answer.status == 1 && answer.output.contains("not docfs's"), "\(answer.output)")
        #expect(!FileManager.default.fileExists(atPath: machine.fixture.store + "/remote.json"))
        // A remote whose schema is newer than this docfs (a machine updated first): refused.
        let newer = try server.makeDatabase("newer")
        let first = try Machine("first", mounted: false)
        defer { first.fixture.tearDown() }
        #expect(try first.link(newer).status == 0)
        try server.sql("UPDATE docfs.meta SET value = '99' WHERE key = 'schema_version'", database: newer.databaseName)
        let refused = try machine.link(newer)
        #expect(refused.status == 1 && refused.output.contains("update docfs"), "\(refused.output)")
        #expect(refused.output.split(separator: "\n").count == 1, "\(refused.output)")
        #expect(!FileManager.default.fileExists(atPath: machine.fixture.store + "/remote.json"))
        let status = try machine.docfs("remote status --store '\(machine.fixture.store)'")
        #expect(status.status == 1 && status.output.contains("not linked"), "\(status.output)")
    }

    /// Remote changes are applied as replaces under the item's claim: a reader on b polling
    /// the document while a saves it twenty times reads each save whole, never a mix of two,
    /// and the index already has a version at least as new as the one the file showed (the
    /// record is stitched before the content can be seen).
    @Test func readersOfAnotherMachinesSavesSeeEachWholeAndIndexedFirst() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("whole")
        let a = try Machine("a", mounted: true)
        let b = try Machine("b", mounted: true)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        #expect(try a.link(uri).status == 0)
        #expect(try b.link(uri).status == 0)
        let size = 256 << 10
        try String(repeating: "@", count: size).write(toFile: a.path("page.txt"), atomically: false, encoding: .utf8)
        #expect(Self.within(10) { b.content("page.txt")?.count == size } != nil)
        let saving = Thread {
            for round in 0..<20 {
                let letter = String(UnicodeScalar(UInt8(ascii: "a") + UInt8(round)))
                try? String(repeating: letter, count: size).write(toFile: a.path("page.txt"), atomically: false, encoding: .utf8)
                usleep(150_000)
            }
        }
        saving.start()
        var seen = Set<UInt8>(), mixed: [String] = [], lagging: [String] = []
        let deadline = Date().addingTimeInterval(60)
        while !seen.contains(UInt8(ascii: "t")) && Date() < deadline {
            usleep(5_000)
            let shown = UInt64(attribute(b.path("page.txt"), "user.docfs.version") ?? "") ?? 0
            guard let content = FileManager.default.contents(atPath: b.path("page.txt")), let first = content.first else { continue }
            if content.count != size || content.contains(where: { $0 != first }) { mixed.append("\(content.count) bytes from \(first)") }
            if !seen.contains(first), let record = try indexedRecord(b.fixture, "/page.txt"), record.version < Int64(shown) {
                lagging.append("\(first): file at \(shown), index at \(record.version)")
            }
            seen.insert(first)
        }
        #expect(seen.contains(UInt8(ascii: "t")), "b saw \(seen.sorted())")
        #expect(seen.count >= 3, "b saw only \(seen.sorted())")
        #expect(mixed.isEmpty, "\(mixed.prefix(5))")
        #expect(lagging.isEmpty, "\(lagging.prefix(5))")
    }

    /// A mounted machine with documents of its own joins a remote that holds another's: the
    /// store is unmounted for the merge (refused, not linked, while a file is open on it)
    /// and mounted again with the options it had. The folder both have is one, the file both
    /// have the same is one, the one that differs is kept both ways; both machines show the
    /// same tree, and an edit on the joined machine reaches the first under the merged ids.
    @Test func aStoreWithDocumentsLinkedToARemoteWithAnothersMergesIntoIt() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("merged")
        let a = try Machine("a", mounted: true)
        let c = try Machine("c", mounted: true)
        defer { a.fixture.tearDown(); c.fixture.tearDown() }
        #expect(try a.link(uri).status == 0)
        for machine in [a, c] {
            #expect(mkdir(machine.path("Projects"), 0o755) == 0)
            try "the same on both\n".write(toFile: machine.path("Projects/same.txt"), atomically: false, encoding: .utf8)
            try "\(machine.name)'s report\n".write(toFile: machine.path("report.txt"), atomically: false, encoding: .utf8)
        }
        try "c's notes\n".write(toFile: c.path("Projects/notes.txt"), atomically: false, encoding: .utf8)
        #expect(Self.within(10) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        // Merging renumbers c's items, so c is linked unmounted for a moment: refused while a
        // file is open on it (nothing changes, it stays mounted), done once it is closed.
        let held = open(c.path("report.txt"), O_RDONLY)
        #expect(held >= 0)
        let refused = try c.link(uri)
        close(held)
        #expect(refused.status == 1 && refused.output.contains("is busy") && refused.output.contains("was not linked"), "\(refused.output)")
        #expect(!FileManager.default.fileExists(atPath: c.fixture.store + "/remote.json"))
        #expect(MountFixture.isMounted(c.fixture.mountPoint) && c.content("report.txt") == "c's report\n")
        let linked = try c.link(uri)
        #expect(linked.status == 0 && linked.output.contains("linked to") && linked.output.contains("mounted again"), "\(linked.output)")
        #expect(MountFixture.isMounted(c.fixture.mountPoint))
        func tree(_ machine: Machine) -> [String: String] {
            var found: [String: String] = [:]
            let enumerator = FileManager.default.enumerator(atPath: machine.path(""))
            while let path = enumerator?.nextObject() as? String {
                if !path.hasPrefix(".docfs") { found[path] = machine.content(path) ?? "(folder)" }
            }
            return found
        }
        #expect(Self.within(15) { tree(a) == tree(c) && tree(a).count == 5 } != nil, "\(tree(a)) \(tree(c))")
        #expect(Set(tree(a).values.filter { $0.contains("report") }) == ["a's report\n", "c's report\n"])
        #expect(a.id("Projects") == c.id("Projects") && a.id("Projects/same.txt") == c.id("Projects/same.txt"))
        #expect(a.id("Projects/notes.txt") == c.id("Projects/notes.txt") && a.id("Projects/notes.txt") != nil)
        try "c's notes, edited\n".write(toFile: c.path("Projects/notes.txt"), atomically: false, encoding: .utf8)
        #expect(Self.within(10) { a.content("Projects/notes.txt") == "c's notes, edited\n" } != nil)
        for machine in [a, c] {
            let status = try machine.status()
            #expect(status["parked"] as? Int == 0 && status["lastError"] == nil, "\(machine.name): \(status)")
        }
    }

    /// The server goes away while a machine saves: its saves wait in the outbox (the status
    /// says so, with the error in words), and reach the other machine once the server is back.
    /// Then the server is restarted in the middle of a stream of saves: every one arrives.
    @Test func savesMadeWhileTheServerIsDownArriveWhenItIsBack() throws {
        let server = try ThrowawayPostgres.private()
        let uri = try server.makeDatabase("restart")
        let a = try Machine("a", mounted: true)
        let b = try Machine("b", mounted: true)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        #expect(try a.link(uri).status == 0)
        #expect(try b.link(uri).status == 0)
        try "before\n".write(toFile: a.path("doc.txt"), atomically: false, encoding: .utf8)
        #expect(Self.within(5) { b.content("doc.txt") == "before\n" } != nil)
        try server.stop()
        for round in 0..<5 {
            try "while down \(round)\n".write(toFile: a.path("doc.txt"), atomically: false, encoding: .utf8)
            usleep(100_000)
        }
        try "new while down\n".write(toFile: a.path("new.txt"), atomically: false, encoding: .utf8)
        #expect(Self.within(10) { ((try? a.status())?["lastError"] as? String)?.contains("PostgreSQL") == true } != nil,
                "\((try? a.status()) ?? [:])")
        #expect(((try? a.status())?["waiting"] as? Int ?? 0) >= 1)
        #expect(b.content("doc.txt") == "before\n")
        try server.start()
        // The retry comes by itself (1 s doubling); the local copies were never blocked.
        #expect(Self.within(40) { b.content("doc.txt") == "while down 4\n" && b.content("new.txt") == "new while down\n" } != nil)
        #expect(Self.within(10) { (try? a.status())?["lastError"] == nil && (try? a.status())?["waiting"] as? Int == 0 } != nil)

        // PostgreSQL restarted in the middle of a stream of saves: every save arrives.
        let stream = Thread {
            for round in 0..<40 {
                try? "stream \(round)\n".write(toFile: a.path("stream-\(round).txt"), atomically: false, encoding: .utf8)
                try? "doc at \(round)\n".write(toFile: a.path("doc.txt"), atomically: false, encoding: .utf8)
                usleep(50_000)
            }
        }
        stream.start()
        usleep(600_000)
        try server.stop()
        try server.start()
        let arrived = Self.within(60) {
            b.content("doc.txt") == "doc at 39\n" && (0..<40).allSatisfy { b.content("stream-\($0).txt") == "stream \($0)\n" }
        }
        #expect(arrived != nil, "b has \((0..<40).filter { b.content("stream-\($0).txt") != nil }.count) of 40, doc: \(b.content("doc.txt") ?? ""); a: \((try? a.status()) ?? [:]); b: \((try? b.status()) ?? [:]); a's log: \(a.fixture.log.suffix(3000))")
        #expect(Self.within(10) { (try? a.status())?["lastError"] == nil && (try? a.status())?["waiting"] as? Int == 0 } != nil)
    }
}
