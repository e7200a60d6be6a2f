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
}
