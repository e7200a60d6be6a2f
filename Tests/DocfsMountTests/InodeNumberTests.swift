import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Inode numbers follow POSIX (issue 21 §1): st_ino is the file's own, as on ext4. A rename
/// moves the source's inode number to the target name whatever was there, a safe-save gives the
/// document the saved file's inode number (and hands on the document id), a replaced file still
/// held open keeps its own number, and numbers stay the same across a remount.
@Suite(.needsRootAndFUSE) struct InodeNumberTests {
    /// Renames of every file type over every file type (and over nothing), as user nobody in
    /// a sticky folder where some targets belong to root: what each rename answers, whether
    /// the target then has the source's inode number, whether a replaced file held open keeps
    /// a number of its own, as in a plain folder.
    @Test func renamesMoveTheSourcesInodeNumberAsInAPlainFolder() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let plain = NSTemporaryDirectory() + "docfs-inodes-" + UUID().uuidString.prefix(8)
        mkdir(plain, 0o755)
        defer { try? FileManager.default.removeItem(atPath: plain) }
        let setup = """
        cd "$1" && mkdir sticky && chmod 1777 sticky && cd sticky
        for kind in file dir link fifo sock; do echo root > root-file-$kind; mkdir root-dir-$kind; done
        """
        let renames = #"""
        import errno, os, socket, sys
        os.chdir(sys.argv[1] + "/sticky")
        kinds = ["file", "dir", "link", "fifo", "sock"]
        def make(kind, name):
            if kind == "file": open(name, "w").write(name)
            elif kind == "dir": os.mkdir(name)
            elif kind == "link": os.symlink("target-" + name, name)
            elif kind == "fifo": os.mkfifo(name)
            else:
                s = socket.socket(socket.AF_UNIX); s.bind(name); s.close()
        def ino(name):
            try: return os.lstat(name).st_ino
            except FileNotFoundError: return None
        for a in kinds:
            for b in kinds + ["nothing", "root-file", "root-dir"]:
                src, dst = "s-%s-%s" % (a, b), "d-%s-%s" % (a, b)
                make(a, src)
                if b in kinds: make(b, dst)
                elif b != "nothing": dst = "%s-%s" % (b, a)
                held = os.open(dst, os.O_RDONLY) if b == "file" else None
                before, replaced = ino(src), ino(dst)
                try:
                    os.rename(src, dst); answer = "ok"
                except OSError as e:
                    answer = errno.errorcode[e.errno]
                after = ino(dst)
                moved = "moved" if after == before else ("kept" if after == replaced else "other")
                line = "%s over %s: %s, target %s, source %s" % (a, b, answer, moved, "gone" if ino(src) is None else "there")
                if held is not None:
                    line += ", held file " + ("own number" if os.fstat(held).st_ino != after or answer != "ok" else "SHARES the number")
                    os.close(held)
                print(line)
        # A hard link renamed over another name of the same file: nothing happens (POSIX).
        make("file", "h1"); os.link("h1", "h2")
        os.rename("h1", "h2")
        print("hard link over its other name: both there" if ino("h1") == ino("h2") != None else "hard link: one name gone")
        """#
        let report = "cd sticky && for f in *; do echo \"$f $(stat -c %h $f)\"; done"
        let outputs = try LockAndPermissionTests.run("python3 -c \(shellQuoted(renames)) \"$1\"", after: setup,
                                                     in: [plain, fixture.mountPoint], thenAsRoot: report)
        #expect(outputs[0] == outputs[1], "plain folder:\n\(outputs[0])\ndocfs:\n\(outputs[1])")
        #expect(outputs[1].contains("file over file: ok, target moved, source gone, held file own number"))
        #expect(outputs[1].contains("dir over root-dir: EPERM, target kept, source there"))
        #expect(outputs[1].contains("sock over link: ok, target moved"))
        #expect(outputs[1].contains("hard link over its other name: both there"))
        #expect(!outputs[1].contains("SHARES"))

        // Every name keeps its inode number across a remount, and the mount shows the store's.
        let names = try FileManager.default.contentsOfDirectory(atPath: fixture.path("sticky"))
        let numbers = Dictionary(uniqueKeysWithValues: names.map { ($0, inode(fixture.path("sticky/" + $0))) })
        for name in names { #expect(numbers[name]! == inode(fixture.documents + "/sticky/" + name), "\(name)") }
        fixture.stop()
        try fixture.start()
        for name in names { #expect(inode(fixture.path("sticky/" + name)) == numbers[name]!, "\(name)") }
        #expect(names.count > 20)
    }

    /// A safe-save (write a temporary file, rename it over the document) gives the document the
    /// saved file's inode number, as ext4 does, and the document's id; a reader that opened the
    /// document before keeps a file with a number of its own.
    @Test func aSafeSaveHandsOnTheIdButNotTheInodeNumber() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("one\n", to: fixture.path("doc.txt"))
        let id = try #require(itemID(fixture.path("doc.txt")))
        let reader = open(fixture.path("doc.txt"), O_RDONLY)
        defer { close(reader) }
        try write("two\n", to: fixture.path(".doc.txt.tmp"))
        let saved = try #require(inode(fixture.path(".doc.txt.tmp")))
        #expect(rename(fixture.path(".doc.txt.tmp"), fixture.path("doc.txt")) == 0)
        #expect(inode(fixture.path("doc.txt")) == saved)
        #expect(itemID(fixture.path("doc.txt")) == id)
        var held = stat()
        #expect(fstat(reader, &held) == 0 && UInt64(held.st_ino) != saved)
        #expect(try directoryInodes(fixture.mountPoint)["doc.txt"] == saved)
    }
}

/// `text` quoted for a POSIX shell.
func shellQuoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
