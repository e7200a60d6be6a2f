import DocfsTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `docfs kv` as an app's script uses it (issue 24): each kind of value set and read back, as
/// text and as JSON, from a store that is served and one that is not; each bad input a
/// one-line error with what to do, a non-zero exit, and nothing changed.
@Suite(.needsRootAndFUSE) struct KeyValueCommandTests {
    let docfs = MountFixture.binary

    @Test func everyKindOfValueIsSetReadListedAndRemoved() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try shell("'\(docfs)' container create com.example.Notes --name Notes '\(fixture.mountPoint)'").status == 0)
        let at = "--store '\(fixture.store)' --app com.example.Notes"
        /// `docfs kv ARGUMENTS` on the fixture's store, for the app; `input` (printf's format) on its standard input.
        func run(_ arguments: String, input: String? = nil) throws -> (status: Int32, output: String) {
            let command = "'\(docfs)' kv \(arguments) \(at)"
            return try shell(input.map { "printf '\($0)' | \(command)" } ?? command)
        }
        #expect(try run("set theme 'dark blue'").status == 0)
        #expect(try run("set --number page 12.5").status == 0)
        #expect(try run("set --bool synced true").status == 0)
        #expect(try run(#"set --json layout '{"columns": 2, "sidebar": [true, "left"]}'"#).status == 0)
        #expect(try run("set --data icon -", input: #"\000\001\377png"#).status == 0)
        #expect(try run("get theme").output == "dark blue\n")
        #expect(try run("get page").output == "12.5\n")
        #expect(try run("get synced").output == "true\n")
        #expect(try run("get layout").output == #"{"columns":2,"sidebar":[true,"left"]}"# + "\n")
        let icon = try shell("'\(docfs)' kv get icon \(at) | od -An -tx1")
        #expect(icon.output.split(separator: " ").map(String.init).joined(separator: " ").trimmingCharacters(in: .whitespacesAndNewlines) == "00 01 ff 70 6e 67")
        let json = try run("get icon --json")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any], "\(json.output)")
        #expect(object["kind"] as? String == "data" && object["value"] as? String == "AAH/cG5n", "\(object)")
        let listed = try run("list --json")
        let list = try #require(try JSONSerialization.jsonObject(with: Data(listed.output.utf8)) as? [String: Any], "\(listed.output)")
        let entries = try #require(list["entries"] as? [[String: Any]])
        let keys = entries.map { $0["key"] as? String ?? "" }
        #expect(keys == ["icon", "layout", "page", "synced", "theme"])
        #expect(entries.first { $0["key"] as? String == "layout" }?["value"] as? [String: Any] != nil)
        #expect(list["keys"] as? Int == 5)
        // The same through the store unserved.
        fixture.stop()
        #expect(try run("get page --json").output.contains("12.5"))
        #expect(try run("remove theme").status == 0)
        #expect(try run("list").output.hasPrefix("icon\tdata\t6\n"))
        #expect(try run("list").output.contains("4 of 1024 keys"))
    }

    @Test func badInputIsAOneLineErrorAndChangesNothing() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try shell("'\(docfs)' container create com.example.Notes --name Notes '\(fixture.mountPoint)'").status == 0)
        let kv = "'\(docfs)' kv"
        let at = "--store '\(fixture.store)' --app com.example.Notes"
        #expect(try shell("\(kv) set \(at) keep 'this'").status == 0)
        let long = String(repeating: "k", count: 65)
        let cases: [(String, String)] = [
            ("set \(at) \(long) x", "65 bytes of UTF-8: at most 64"),
            ("set \(at) \"$(printf 'bad\\377')\" x", "a key must be UTF-8"),
            ("set \(at) a/b x", "no '/'"),
            ("set \(at) --json keep '{\"a\": '", "malformed JSON"),
            ("set \(at) --json keep null", "null is no value"),
            ("set \(at) --number keep twelve", "is not a finite number"),
            ("set \(at) --bool keep yes", "give true or false"),
            ("set \(at) keep \"$(printf 'bad\\377')\"", "not UTF-8"),
            ("set \(at) --data keep /nonexistent/file", "cannot read /nonexistent/file"),
            ("get \(at) missing", "has no key 'missing'"),
            ("remove \(at) missing", "has no key 'missing'"),
            ("set --store '\(fixture.store)' --app com.example.Nope k v", "docfs container create com.example.Nope"),
            ("set --store '\(fixture.store)' --app 'not an id' k v", "is not a container id"),
            ("set --store /nonexistent --app com.example.Notes k v", "no store at /nonexistent"),
        ]
        for (arguments, words) in cases {
            let result = try shell("\(kv) \(arguments)")
            #expect(result.status == 1, "\(arguments): \(result.status) \(result.output)")
            #expect(result.output.hasPrefix("docfs: ") && result.output.contains(words), "\(arguments): \(result.output)")
            #expect(result.output.split(separator: "\n").count == 1, "\(arguments): \(result.output)")
        }
        // A value past the store's 1 MiB: refused with the numbers, the old value kept.
        try Data(count: 1 << 20).write(to: URL(fileURLWithPath: fixture.root + "/big"))
        let big = try shell("\(kv) set \(at) --data keep '\(fixture.root)/big'")
        #expect(big.status == 1 && big.output.contains("quota violation") && big.output.contains("at most 1048576"), "\(big.output)")
        #expect(try shell("\(kv) get \(at) keep").output == "this\n")
        #expect(try shell("\(kv) list \(at)").output.contains("1 of 1024 keys, 8 of 1048576 bytes"))
    }

    /// Issue 24: three machines (daemons) linked to one PostgreSQL; each sets one key of an
    /// app's store at once through `docfs kv`; within a second every machine holds one value,
    /// the same, the one the server took last; a removal travels as fast, and so does a value an
    /// app writes to its key file.
    @Test func concurrentWritesOfOneKeyOnThreeMachinesConvergeWithinASecond() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("kv")
        var machines: [ManyMachinesTests.Machine] = []
        defer { for machine in machines { machine.fixture.tearDown() } }
        for name in ["a", "b", "c"] { machines.append(try ManyMachinesTests.Machine(name, mounted: true)) }
        #expect(try machines[0].docfs("container create com.example.Reader --name Reader '\(machines[0].fixture.mountPoint)'").status == 0)
        for machine in machines { #expect(try machine.link(uri).status == 0) }
        // The container reaches every machine (a key-value store needs its container there).
        #expect(ManyMachinesTests.within(30) {
            machines.allSatisfy { FileManager.default.fileExists(atPath: $0.fixture.store + "/containers/com.example.Reader/container.json") }
        } != nil)
        func get(_ machine: ManyMachinesTests.Machine) -> String? {
            guard let answer = try? machine.docfs("kv get page --app com.example.Reader --store '\(machine.fixture.store)'"), answer.status == 0 else { return nil }
            return answer.output
        }
        let writers = machines.enumerated().map { index, machine in
            Thread { _ = try? machine.docfs("kv set --number page \(index + 1) --app com.example.Reader --store '\(machine.fixture.store)'") }
        }
        let start = Date()
        writers.forEach { $0.start() }
        while writers.contains(where: { !$0.isFinished }) { usleep(1_000) }
        let written = Date()
        let converged = ManyMachinesTests.within(10) {
            let values = machines.map(get)
            return values[0] != nil && Set(values).count == 1
        }
        #expect(converged != nil, "\(machines.map(get))")
        #expect(converged.map { $0 + written.timeIntervalSince(start) < 1.5 } == true, "converged \(String(describing: converged)) s after the writes")
        let agreed = try #require(get(machines[0]))
        #expect(["1\n", "2\n", "3\n"].contains(agreed))
        // A removal on c: gone everywhere within a second, and a's watcher is told.
        let watcher = Process()
        watcher.executableURL = URL(fileURLWithPath: MountFixture.binary)
        watcher.arguments = ["kv", "watch", "--json", "--app", "com.example.Reader", "--store", machines[0].fixture.store]
        let watched = machines[0].fixture.root + "/watched"
        FileManager.default.createFile(atPath: watched, contents: nil)
        watcher.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: watched))
        try watcher.run()
        defer {
            watcher.terminate()  // SIGTERM ends it, though this process has it blocked (the child inherits the mask)
            watcher.waitUntilExit()
        }
        usleep(300_000)  // it has read where the notices are
        #expect(try machines[2].docfs("kv remove page --app com.example.Reader --store '\(machines[2].fixture.store)'").status == 0)
        let gone = ManyMachinesTests.within(5) { machines.allSatisfy { get($0) == nil } }
        #expect(gone.map { $0 < 1 } == true, "removal seen everywhere after \(String(describing: gone)) s")
        let heard = ManyMachinesTests.within(5) {
            ((try? String(contentsOfFile: watched, encoding: .utf8)) ?? "").contains(#""keys":["page"],"reason":"server-change""#)
        }
        #expect(heard != nil, "\((try? String(contentsOfFile: watched, encoding: .utf8)) ?? "")")
        // An app writes its key file in b's app view: every machine has the value within a second.
        let view = try machines[1].fixture.mountApp("com.example.Reader")
        try "sepia".write(toFile: view + "/.docfs/kv/theme", atomically: true, encoding: .utf8)
        func theme(_ machine: ManyMachinesTests.Machine) -> String? {
            try? machine.docfs("kv get theme --app com.example.Reader --store '\(machine.fixture.store)'").output
        }
        let arrived = ManyMachinesTests.within(5) { machines.allSatisfy { theme($0) == "sepia\n" } }
        #expect(arrived.map { $0 < 1 } == true, "a key file's write seen everywhere after \(String(describing: arrived)) s: \(machines.map(theme))")
    }

    /// A store unlinked from one remote and linked to another (the model's account change)
    /// takes the new remote's value of a key it had, through the commands and the link's own
    /// sync (no daemon): `docfs remote unlink` forgets what the first remote said.
    @Test func relinkingToAnotherRemoteTakesItsValues() throws {
        let server = try ThrowawayPostgres.shared()
        let (first, second) = (try server.makeDatabase("kv-first"), try server.makeDatabase("kv-second"))
        let a = try ManyMachinesTests.Machine("a", mounted: false)
        let c = try ManyMachinesTests.Machine("c", mounted: false)
        defer { a.fixture.tearDown(); c.fixture.tearDown() }
        func kv(_ machine: ManyMachinesTests.Machine, _ arguments: String) throws -> (status: Int32, output: String) {
            try machine.docfs("kv \(arguments) --app com.example.Reader --store '\(machine.fixture.store)'")
        }
        for (machine, theme) in [(a, "dark"), (c, "light")] {
            #expect(try machine.docfs("container create com.example.Reader --name Reader --store '\(machine.fixture.store)'").status == 0)
            #expect(try kv(machine, "set theme \(theme)").status == 0)
        }
        #expect(try kv(a, "set page 7").status == 0)
        #expect(try a.link(first).status == 0)
        let linked = try c.link(second)
        #expect(linked.status == 0, "\(linked.output)")
        #expect(try a.docfs("remote unlink --store '\(a.fixture.store)'").status == 0)
        let relinked = try a.link(second)
        #expect(relinked.status == 0, "\(relinked.output)")
        // The second remote's theme replaced a's; the page it lacked went up to it.
        #expect(try kv(a, "get theme").output == "light\n")
        #expect(try kv(a, "get page").output == "7\n")
        // c, served now, gets the page from the second remote.
        try c.fixture.start()
        #expect(ManyMachinesTests.within(10) { (try? kv(c, "get page"))?.output == "7\n" } != nil)
        #expect(try kv(c, "get theme").output == "light\n")
    }
}
