import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// An app's key-value store as files (issue 24): `.docfs/kv/` of its app view holds a file per
/// key, which plain file calls read, write, make, rename and remove, the same values `docfs kv`
/// reads and writes; an app reaches only its own container's store, the user view none; the
/// limits and kinds hold through the files as through the command (close(2) says EDQUOT or
/// EINVAL, and nothing changes).
@Suite(.needsRootAndFUSE) struct KeyValueFilesTests {
    let docfs = MountFixture.binary

    /// Writes `text` to the file at `path` as a program does (again after a short write);
    /// answers the errno of the open, of the write or of the close (0: none failed).
    func write(_ text: String, to path: String) -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return errno }
        let bytes = Array(text.utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else {
                let failed = errno
                close(fd)
                return failed
            }
            done += n
        }
        return close(fd) == 0 ? 0 : errno
    }

    func names(_ path: String) -> [String]? { try? FileManager.default.contentsOfDirectory(atPath: path).sorted() }

    func kind(_ path: String) -> String? {
        var value = [UInt8](repeating: 0, count: 16)
        let n = docfs_getxattr(path, "user.docfs.kind", &value, value.count)
        return n >= 0 ? String(decoding: value[0..<n], as: UTF8.self) : nil
    }

    @Test func anAppReadsWritesAndRemovesItsKeysAsFiles() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        for app in ["com.example.Notes", "com.example.Other"] {
            #expect(try runDocfs("container create \(app) --name \(app.split(separator: ".").last!) --store '\(fixture.store)'").status == 0)
        }
        let at = "--store '\(fixture.store)' --app com.example.Notes"
        #expect(try runDocfs("kv set --number page 12 \(at)").status == 0)
        #expect(try runDocfs("kv set secret other-app --store '\(fixture.store)' --app com.example.Other").status == 0)
        let app = try fixture.mountApp("com.example.Notes")
        let kv = app + "/.docfs/kv"

        // What docfs kv set is there, typed; the other app's key is not.
        #expect(names(app + "/.docfs")?.contains("kv") == true)
        #expect(names(kv) == ["page"])
        #expect(ControlAreaTests.contents(kv + "/page") == "12" && kind(kv + "/page") == "number")
        var st = stat()
        #expect(stat(kv + "/page", &st) == 0 && st.st_size == 2 && st.st_mode & S_IFMT == S_IFREG)
        #expect(errnoOf(stat(kv + "/secret", &st)) == ENOENT)
        // The user view has no key files.
        #expect(errnoOf(stat(fixture.mountPoint + "/.docfs/kv", &st)) == ENOENT)
        #expect(names(fixture.mountPoint + "/.docfs")?.contains("kv") == false)

        // Written through the files, read through the command (and the other way).
        #expect(write("dark blue", to: kv + "/theme") == 0)
        #expect(try runDocfs("kv get theme \(at)").output == "dark blue\n")
        #expect(write("13\n", to: kv + "/page") == 0)  // a number stays a number; echo's newline is fine
        #expect(try runDocfs("kv get page --json \(at)").output.contains(#""kind" : "number""#))
        #expect(try runDocfs("kv get page \(at)").output == "13\n")
        #expect(try shell("echo -n sepia >> '\(kv)/theme'").status == 0)
        #expect(ControlAreaTests.contents(kv + "/theme") == "dark bluesepia")
        #expect(truncate(kv + "/theme", 4) == 0)
        #expect(try runDocfs("kv get theme \(at)").output == "dark\n")
        #expect(try shell(": > '\(kv)/theme'").status == 0)  // opened to be emptied, closed unwritten
        #expect(try runDocfs("kv get theme \(at)").output == "\n")
        #expect(try runDocfs("kv set --bool synced true \(at)").status == 0)
        #expect(ControlAreaTests.contents(kv + "/synced") == "true")
        // Binary content makes a data value; JSON through the kind attribute.
        let blob: [UInt8] = [0, 1, 0xFF]
        #expect(FileManager.default.createFile(atPath: kv + "/icon", contents: Data(blob)))
        #expect(kind(kv + "/icon") == "data")
        #expect(write(#"{"b": [1, 2], "a": true}"#, to: kv + "/layout") == 0)
        #expect(kind(kv + "/layout") == "text")
        #expect(docfs_setxattr(kv + "/layout", "user.docfs.kind", "json", 4, 0) == 0)
        #expect(kind(kv + "/layout") == "json" && ControlAreaTests.contents(kv + "/layout") == #"{"a":true,"b":[1,2]}"#)

        // A program's safe-save: written to a temporary name, renamed over the key.
        #expect(write("light", to: kv + "/theme.tmp") == 0)
        #expect(rename(kv + "/theme.tmp", kv + "/theme") == 0)
        #expect(names(kv) == ["icon", "layout", "page", "synced", "theme"])
        #expect(try runDocfs("kv get theme \(at)").output == "light\n")
        // Removed through the file, gone for the command.
        #expect(unlink(kv + "/synced") == 0)
        #expect(try runDocfs("kv get synced \(at)").status != 0)
        #expect(errnoOf(unlink(kv + "/synced")) == ENOENT)

        // Bad input: a number key given text, a key name too long, a value past the limit (the
        // write that passes it fails; the file made stays, empty, as on a full disk), a kind
        // that is none: each refused with its errno, nothing else changed.
        #expect(write("many", to: kv + "/page") == EINVAL)
        #expect(try runDocfs("kv get page \(at)").output == "13\n")
        #expect(write("x", to: kv + "/" + String(repeating: "k", count: 65)) == ENAMETOOLONG)
        let big = String(repeating: "v", count: (1 << 20) + 1)
        #expect(write(big, to: kv + "/big") == EFBIG)
        #expect(ControlAreaTests.contents(kv + "/big") == "")
        #expect(unlink(kv + "/big") == 0)
        #expect(docfs_setxattr(kv + "/page", "user.docfs.kind", "colour", 6, 0) == -1 && errno == EINVAL)
        #expect(kind(kv + "/page") == "number")
        // Within the byte limit as a value, past it with the rest of the store: EDQUOT at close.
        let nearly = String(repeating: "v", count: (1 << 20) - 20)
        #expect(write(nearly, to: kv + "/theme") == EDQUOT)
        #expect(try runDocfs("kv get theme \(at)").output == "light\n")
        // Foundation's atomic write: a temporary file written, renamed over the key, then
        // closed: the value is there at the rename, in the key's kind (a number stays one).
        let temporary = open(kv + "/.page.tmp", O_WRONLY | O_CREAT | O_EXCL, 0o600)
        #expect(temporary >= 0)
        #expect(Glibc.write(temporary, "14", 2) == 2)
        #expect(rename(kv + "/.page.tmp", kv + "/page") == 0)
        #expect(try runDocfs("kv get page --json \(at)").output.contains(#""value" : 14"#))
        var held = stat()
        #expect(fstat(temporary, &held) == 0 && held.st_size == 2)  // the open file follows its name
        #expect(close(temporary) == 0)
        #expect(kind(kv + "/page") == "number" && names(kv)?.contains(".page.tmp") == false)
        // A key removed while a program writes it stays removed when it closes.
        let writer = open(kv + "/icon", O_WRONLY)
        #expect(writer >= 0 && unlink(kv + "/icon") == 0)
        #expect(Glibc.write(writer, "late", 4) == 4 && close(writer) == 0)
        #expect(errnoOf(stat(kv + "/icon", &st)) == ENOENT)
        // fallocate is not for key files (it was a crash: an offset past 0 overflowed).
        #expect(try shell("fallocate -o 1 -l 1 '\(kv)/page'").status != 0)
        #expect(try runDocfs("kv get page \(at)").output == "14\n")
        // Keys cannot leave the folder, nor files enter it.
        #expect(errnoOf(rename(kv + "/page", app + "/Documents/page")) == EXDEV)
        #expect(write("note", to: app + "/Documents/n.txt") == 0)
        #expect(errnoOf(rename(app + "/Documents/n.txt", kv + "/n")) == EXDEV)
        #expect(names(kv) == ["layout", "page", "theme"])
        // The daemon served all of it: still mounted, the other app's key untouched.
        #expect(MountFixture.isMounted(fixture.mountPoint))
        #expect(try runDocfs("kv get secret --store '\(fixture.store)' --app com.example.Other").output == "other-app\n")
    }

    /// SIGKILL of the daemon while an app writes its key files: every value whose close(2)
    /// answered is there after a restart (the write in flight may or may not be), whole.
    @Test func aDaemonKilledWhileAnAppWritesLosesNothingAcknowledged() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try runDocfs("container create com.example.Notes --name Notes --store '\(fixture.store)'").status == 0)
        let kv = try fixture.mountApp("com.example.Notes") + "/.docfs/kv"
        let acknowledged = fixture.root + "/acknowledged"
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        // Each value counts as acknowledged once its close(2) answered. (A shell's `>` is no
        // good here: its last close is a dup2, which drops the close's error, so a value the
        // killed daemon never set looked acknowledged.)
        writer.arguments = ["-c", """
            import os
            i = 0
            while True:
                i += 1
                try:
                    for name, text in (("count", str(i)), ("note", "note %d" % i)):
                        fd = os.open('\(kv)/' + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                        os.write(fd, text.encode())
                        os.close(fd)
                except OSError:
                    break
                with open('\(acknowledged)', 'a') as log:
                    log.write("%d\\n" % i)
            """]
        try writer.run()
        usleep(1_500_000)
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()
        #expect(waitForExit(writer, seconds: 20))
        let written = ((try? String(contentsOfFile: acknowledged, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int($0) }
        let last = try #require(written.last)
        #expect(written.count > 20, "the writer made too little progress: \(written.count) values")

        try fixture.restartAfterCrash()
        let count = Int(try runDocfs("kv get count --store '\(fixture.store)' --app com.example.Notes").output.trimmingCharacters(in: .newlines))
        let note = try runDocfs("kv get note --store '\(fixture.store)' --app com.example.Notes").output
        #expect(count == last || count == last + 1, "count \(String(describing: count)), last acknowledged \(last): \((try? runDocfs("kv list --store '\(fixture.store)' --app com.example.Notes"))?.output ?? "")")
        #expect(note == "note \(last)\n" || note == "note \(last + 1)\n", "note \(note), last acknowledged \(last)")
    }
}
