import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Names are bytes (issue 21 §2): names in Latin-1, invalid UTF-8 and with control characters
/// are stored, indexed, queried, watched, bookmarked and printed exactly, through every command.
/// JSON carries them as PEP 383 escapes (read back here with Python's `os.fsencode`); plain
/// output is literal when it goes to a pipe and quoted as `ls` quotes with QUOTING_STYLE.
@Suite(.needsRootAndFUSE) struct NamesAsBytesTests {
    /// The names, as bash's $'…' words and as bytes.
    static let names: [(word: String, bytes: [UInt8])] = [
        (#"$'caf\xe9.txt'"#, Array("caf".utf8) + [0xE9] + Array(".txt".utf8)),           // Latin-1
        (#"$'caf\xe8.txt'"#, Array("caf".utf8) + [0xE8] + Array(".txt".utf8)),           // differs in that byte only
        (#"$'bad\xff\xc3(.txt'"#, Array("bad".utf8) + [0xFF, 0xC3, 0x28] + Array(".txt".utf8)),  // invalid UTF-8
        (#"$'tab\there\nline.txt'"#, Array("tab\there\nline.txt".utf8)),                // control characters
    ]

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// The hex of the bytes of each `key` in the JSON at `file` (a list, an object, or lines of
    /// objects), as Python's os.fsencode reads PEP 383 escapes.
    static func jsonBytes(_ file: String, key: String) throws -> [String] {
        let script = """
        import json, os, sys
        text = open(sys.argv[1], encoding="utf-8", errors="surrogateescape").read()
        try:
            values = [json.loads(text)]
        except ValueError:
            values = [json.loads(line) for line in text.splitlines() if line.strip()]
        def walk(v):
            if isinstance(v, list):
                for x in v: walk(x)
            elif isinstance(v, dict):
                for k, x in v.items():
                    if k == sys.argv[2] and isinstance(x, str): print(os.fsencode(x).hex())
                    else: walk(x)
        walk(values)
        """
        let run = try shell("python3 -c \(shellQuoted(script)) '\(file)' \(key)")
        #expect(run.status == 0, "\(run.output)")
        return run.output.split(separator: "\n").map(String.init)
    }

    @Test func namesThatAreNotUTF8AreExactThroughEveryCommand() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let docfs = "'\(MountFixture.binary)'"
        for (index, name) in Self.names.enumerated() {
            let made = try shell("printf 'content %d' \(index) > \(name.word)", in: fixture.mountPoint)
            #expect(made.status == 0, "\(made.output)")
        }
        // Stored exactly, each its own file.
        let listed = try shell("python3 -c 'import os; [print(n.hex()) for n in sorted(os.listdir(b\".\"))]'", in: fixture.documents)
        #expect(Set(listed.output.split(separator: "\n").map(String.init)) == Set(Self.names.map { Self.hex($0.bytes) }))

        // Indexed exactly: the check finds nothing to fix, the query every name once.
        let check = try shell("\(docfs) index check '\(fixture.mountPoint)' 2>&1")
        #expect(check.status == 0 && check.output.contains("index and store agree"), "\(check.output)")
        let queried = fixture.root + "/query.json"
        #expect(try shell("\(docfs) query '*' --json --store '\(fixture.store)' > '\(queried)'").status == 0)
        let paths = try Self.jsonBytes(queried, key: "path")
        #expect(Set(paths) == Set(Self.names.map { Self.hex([0x2F] + $0.bytes) }), "\(paths)")
        // A query naming one of them by its bytes finds it and no other.
        let one = try shell("\(docfs) query \"name == '\"$'caf\\xe9.txt'\"'\" --json --store '\(fixture.store)' > '\(queried)'")
        #expect(one.status == 0, "\(one.output)")
        #expect(try Self.jsonBytes(queried, key: "name") == [Self.hex(Self.names[0].bytes)])

        // Plain output: the bytes into a pipe (as ls), quoted as ls quotes with QUOTING_STYLE.
        let literal = try shell("\(docfs) query 'name BEGINSWITH \"caf\"' --sort path --store '\(fixture.store)' | od -An -tx1 | tr -d ' \\n'")
        #expect(literal.output.contains(Self.hex(Self.names[0].bytes)) && literal.output.contains(Self.hex(Self.names[1].bytes)), "\(literal.output)")
        let quoted = try shell("QUOTING_STYLE=shell-escape \(docfs) query '*' --sort path --store '\(fixture.store)'")
        #expect(quoted.output.contains(#"'/caf'$'\351''.txt'"#), "\(quoted.output)")
        #expect(quoted.output.contains(#"'/tab'$'\t''here'$'\n''line.txt'"#), "\(quoted.output)")
        #expect(quoted.output.contains(#"'/bad'$'\377'$'\303''(.txt'"#), "\(quoted.output)")

        // status and versions take the names as arguments and show them.
        let status = try shell("QUOTING_STYLE=shell-escape \(docfs) status \(Self.names[2].word)", in: fixture.mountPoint)
        #expect(status.status == 0 && status.output.contains(#"/bad'$'\377'$'\303''(.txt'"#), "\(status.output)")
        let statusJSON = fixture.root + "/status.json"
        #expect(try shell("\(docfs) status --json \(Self.names[0].word) > '\(statusJSON)'", in: fixture.mountPoint).status == 0)
        #expect(try Self.jsonBytes(statusJSON, key: "path") == [Self.hex(Array(fixture.mountPoint.utf8) + [0x2F] + Self.names[0].bytes)])
        #expect(try shell("printf more >> \(Self.names[0].word) && \(docfs) versions \(Self.names[0].word)", in: fixture.mountPoint).status == 0)

        // A bookmark of each resolves to its exact bytes.
        for name in Self.names {
            let token = try shell("\(docfs) bookmark create \(name.word)", in: fixture.mountPoint)
            #expect(token.status == 0, "\(token.output)")
            let resolved = fixture.root + "/resolved.json"
            let resolve = try shell("\(docfs) bookmark resolve --json \(token.output.trimmingCharacters(in: .whitespacesAndNewlines)) --store '\(fixture.store)' > '\(resolved)'")
            #expect(resolve.status == 0, "\(resolve.output)")
            #expect(try Self.jsonBytes(resolved, key: "path").first.map { $0.hasSuffix(Self.hex(name.bytes)) } == true)
        }

        // The picker: an app gets a reference to one and a copy of another, each under the
        // exact name, which the index records exactly.
        #expect(try shell("\(docfs) container create com.example.Notes --name Notes '\(fixture.mountPoint)'").status == 0)
        let opened = try shell("\(docfs) pick --app com.example.Notes --open \(Self.names[2].word)", in: fixture.mountPoint)
        #expect(opened.status == 0, "\(opened.output)")
        let imported = try shell("\(docfs) pick --app com.example.Notes --import \(Self.names[0].word)", in: fixture.mountPoint)
        #expect(imported.status == 0, "\(imported.output)")
        let picked = fixture.root + "/picked.json"
        #expect(try shell("\(docfs) query 'container == \"com.example.Notes\"' --scope all --json --store '\(fixture.store)' > '\(picked)'").status == 0)
        let pickedPaths = try Self.jsonBytes(picked, key: "path")
        // The copy's path in its documents scope; the reference's in the app (external scope).
        #expect(Set(pickedPaths) == [Self.hex(Array("/".utf8) + Self.names[0].bytes), Self.hex(Array("/Documents/".utf8) + Self.names[2].bytes)],
                "\(pickedPaths) \((try? String(contentsOfFile: picked, encoding: .utf8)) ?? "")")
        let appFiles = try shell("python3 -c 'import os; [print(n.hex()) for n in sorted(os.listdir(b\".\"))]'",
                                 in: fixture.store + "/containers/com.example.Notes/Documents")
        #expect(Set(appFiles.output.split(separator: "\n").map(String.init)) == [Self.hex(Self.names[0].bytes), Self.hex(Self.names[2].bytes)])

        // Watched: made through the mount and behind it, each event with its exact name.
        let watcher = try WatchTests.Watcher(fixture.mountPoint, in: fixture)
        defer { watcher.stop() }
        #expect(try shell(#"printf new > $'new\xfe.txt'"#, in: fixture.mountPoint).status == 0)
        #expect(try shell(#"printf behind > $'behind\xe9.txt'"#, in: fixture.documents).status == 0)
        let newName = Self.hex(Array("new".utf8) + [0xFE] + Array(".txt".utf8))  // watch paths are relative
        let behindName = Self.hex(Array("behind".utf8) + [0xE9] + Array(".txt".utf8))
        #expect(eventually(seconds: 20) {
            let seen = (try? Self.jsonBytes(watcher.output, key: "path")) ?? []
            return seen.contains(newName) && seen.contains(behindName)
        }, "\((try? String(contentsOfFile: watcher.output, encoding: .utf8)) ?? "")")
        // The store watcher's record of the name made behind the mount is exact too.
        #expect(eventually(seconds: 20) {
            (try? shell("\(docfs) query 'name BEGINSWITH \"behind\"' --json --store '\(fixture.store)' > '\(queried)'")) != nil
                && ((try? Self.jsonBytes(queried, key: "path")) ?? []) == ["2f" + behindName]
        })
        let again = try shell("\(docfs) index check '\(fixture.mountPoint)' 2>&1")
        #expect(again.status == 0, "\(again.output)")
    }
}
