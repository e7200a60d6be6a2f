import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Item identity (issue 3 §1, issue 21 §1): every file and folder has a persistent id, shown as
/// `user.docfs.id`, that survives renames, moves, remounts and daemon restarts; its inode number
/// is its backing file's own (see `InodeNumberTests`).
@Suite(.needsRootAndFUSE) struct IdentityTests {
    @Test func idAndInodeNumberSurviveRenameMoveRemountAndRestart() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try "draft".write(toFile: fixture.path("report.txt"), atomically: false, encoding: .utf8)
        mkdir(fixture.path("archive"), 0o755)
        let id = try #require(itemID(fixture.path("report.txt")))
        let folder = try #require(itemID(fixture.path("archive")))
        let number = try #require(inode(fixture.path("report.txt")))
        #expect(number == inode(fixture.documents + "/report.txt"))
        #expect(inode(fixture.path("archive")) == inode(fixture.documents + "/archive"))
        #expect(id != folder)

        #expect(rename(fixture.path("report.txt"), fixture.path("final.txt")) == 0)
        #expect(itemID(fixture.path("final.txt")) == id)
        #expect(rename(fixture.path("final.txt"), fixture.path("archive/final.txt")) == 0)
        #expect(rename(fixture.path("archive"), fixture.path("old")) == 0)
        #expect(itemID(fixture.path("old/final.txt")) == id)
        #expect(itemID(fixture.path("old")) == folder)
        #expect(inode(fixture.path("old/final.txt")) == number)

        fixture.stop()
        try fixture.start()
        #expect(itemID(fixture.path("old/final.txt")) == id)
        #expect(inode(fixture.path("old/final.txt")) == number)

        // A daemon killed outright: the next one still knows every id, and new ids are new.
        kill(try #require(fixture.daemon).processIdentifier, SIGKILL)
        fixture.daemon?.waitUntilExit()
        fixture.stop()
        try fixture.start()
        #expect(itemID(fixture.path("old/final.txt")) == id)
        close(open(fixture.path("new.txt"), O_CREAT | O_WRONLY, 0o644))
        let fresh = try #require(itemID(fixture.path("new.txt")))
        #expect(fresh != id && fresh != folder)
    }

    @Test func listingsReportTheSameInodeNumbersAsStat() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        for name in ["a", "b", "c"] { close(open(fixture.path(name), O_CREAT | O_WRONLY, 0o644)) }
        mkdir(fixture.path("folder"), 0o755)
        symlink("a", fixture.path("link"))
        // Also items made in the store behind docfs's back, listed before anything looked them up.
        close(open(fixture.documents + "/outside", O_CREAT | O_WRONLY, 0o644))
        mkdir(fixture.documents + "/outside-folder", 0o755)
        let listed = try directoryInodes(fixture.path(""))
        #expect(Set(listed.keys) == [".", "..", "a", "b", "c", "folder", "link", "outside", "outside-folder"])
        for (name, number) in listed where name != ".." {
            #expect(inode(fixture.path(name)) == number, "\(name)")
        }
        #expect(inode(fixture.documents + "/outside") == listed["outside"])
        #expect(itemID(fixture.path("outside")) != nil)
        #expect(Set(listed.values).count == listed.count)
    }

    @Test func hardLinksShareTheirIdAndCopiesGetTheirOwn() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try "content".write(toFile: fixture.path("doc"), atomically: false, encoding: .utf8)
        #expect(docfs_setxattr(fixture.path("doc"), "user.color", "blue", 4, 0) == 0)
        #expect(link(fixture.path("doc"), fixture.path("same")) == 0)
        let id = try #require(itemID(fixture.path("doc")))
        #expect(itemID(fixture.path("same")) == id)
        // cp -a copies user attributes; the id is docfs's and is not copied, without a complaint.
        let copy = try shell("cp -a doc copy", in: fixture.mountPoint)
        #expect(copy.status == 0)
        #expect(copy.output.isEmpty, "\(copy.output)")
        let copied = try #require(itemID(fixture.path("copy")))
        #expect(copied != id)
        #expect(attribute(fixture.path("copy"), "user.color") == "blue")
    }

    @Test func docfsAttributesRefuseWritesAndCheckValues() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        close(open(f, O_CREAT | O_WRONLY, 0o644))
        let id = try #require(itemID(f))
        for name in ["user.docfs.id", "user.docfs.version", "user.docfs.bookmark", "user.docfs.conflict",
                     "user.docfs.external", "user.docfs.anything-new"] {
            #expect(errnoOf(docfs_setxattr(f, name, "7", 1, 0)) == EPERM, "\(name)")
        }
        #expect(errnoOf(docfs_removexattr(f, "user.docfs.id")) == EPERM)
        #expect(itemID(f) == id)
        #expect(errnoOf(docfs_setxattr(f, "user.docfs.skip-backup", "yes", 3, 0)) == EINVAL)
        #expect(docfs_setxattr(f, "user.docfs.skip-backup", "1", 1, 0) == 0)
        #expect(attribute(f, "user.docfs.skip-backup") == "1")
        #expect(docfs_removexattr(f, "user.docfs.skip-backup") == 0)
        let log = fixture.log
        #expect(log.contains("user.docfs.id is kept by docfs"))
    }

    /// A create leaves storing the id to its handle's release (or an fsync): until then the id
    /// shows everywhere as if it were stored, and a replace that gives the file a document's
    /// id meanwhile wins over it.
    @Test func aNewFileShowsItsIdWhileOpenAndStoresItByItsRelease() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let fd = open(fixture.path("open.txt"), O_CREAT | O_WRONLY | O_EXCL, 0o644)
        #expect(write(fd, "draft", 5) == 5)
        let id = try #require(itemID(fixture.path("open.txt")))
        #expect(inode(fixture.path("open.txt")) == inode(fixture.documents + "/open.txt"))
        #expect(try directoryInodes(fixture.path(""))["open.txt"] == inode(fixture.path("open.txt")))
        var names = [CChar](repeating: 0, count: 4096)
        let n = docfs_listxattr(fixture.path("open.txt"), &names, names.count)
        #expect(n > 0 && names[0..<max(n, 0)].split(separator: 0).contains { String(cString: Array($0) + [0]) == "user.docfs.id" })
        #expect(docfs_listxattr(fixture.path("open.txt"), nil, 0) == n)
        #expect(fsync(fd) == 0)  // durable: the id is in the store now
        #expect(attribute(fixture.documents + "/open.txt", "user.docfs.id") == String(id))

        // A temporary file renamed over a document while still open takes the document's id,
        // and keeps it when its handle is released.
        try "v1".write(toFile: fixture.path("doc.txt"), atomically: false, encoding: .utf8)
        let document = try #require(itemID(fixture.path("doc.txt")))
        let temp = open(fixture.path(".doc.txt.tmp"), O_CREAT | O_WRONLY | O_EXCL, 0o644)
        let temporary = try #require(itemID(fixture.path(".doc.txt.tmp")))
        #expect(write(temp, "v2", 2) == 2)
        #expect(rename(fixture.path(".doc.txt.tmp"), fixture.path("doc.txt")) == 0)
        #expect(itemID(fixture.path("doc.txt")) == document)
        #expect(temporary != document)
        close(temp)
        close(fd)
        fixture.stop()  // every handle released
        #expect(attribute(fixture.documents + "/open.txt", "user.docfs.id") == String(id))
        #expect(attribute(fixture.documents + "/doc.txt", "user.docfs.id") == String(document))
        try fixture.start()
        #expect(itemID(fixture.path("open.txt")) == id)
        #expect(itemID(fixture.path("doc.txt")) == document)
        #expect(try String(contentsOfFile: fixture.path("doc.txt"), encoding: .utf8) == "v2")
    }

    @Test func manyNewItemsGetDistinctIdsAcrossRestarts() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        var seen = Set<UInt64>()
        for round in 0..<3 {
            for i in 0..<300 {
                let f = fixture.path("r\(round)-\(i)")
                close(open(f, O_CREAT | O_WRONLY, 0o644))
                seen.insert(try #require(itemID(f)))
                if i % 2 == 0 { unlink(f) }
            }
            fixture.stop()
            try fixture.start()
        }
        #expect(seen.count == 900)
    }
}

/// The item id a file shows as `user.docfs.id`.
func itemID(_ path: String) -> UInt64? {
    attribute(path, "user.docfs.id").flatMap { UInt64($0) }
}

/// An extended attribute's value as text, nil when absent.
func attribute(_ path: String, _ name: String) -> String? {
    var buffer = [UInt8](repeating: 0, count: 65536)
    let n = docfs_getxattr(path, name, &buffer, buffer.count)
    return n < 0 ? nil : String(decoding: buffer[0..<n], as: UTF8.self)
}

func inode(_ path: String) -> UInt64? {
    var st = stat()
    return lstat(path, &st) == 0 ? UInt64(st.st_ino) : nil
}

/// Every name in a directory with the inode number readdir reports for it.
func directoryInodes(_ path: String) throws -> [String: UInt64] {
    guard let dir = opendir(path) else { throw FixtureError("cannot open \(path)") }
    defer { closedir(dir) }
    var result: [String: UInt64] = [:]
    while let entry = readdir(dir) {
        let name = withUnsafePointer(to: &entry.pointee.d_name) {
            $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
        }
        result[name] = UInt64(entry.pointee.d_ino)
    }
    return result
}
