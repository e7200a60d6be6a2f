import CLinux
import DocfsThumbnails
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The control area through a real mount (issue 5 §3, DESIGN §5): `.docfs/by-id/` finds an
/// item by id or bookmark token wherever it now lives, a read-only token's scope holds where
/// the token is used to open, and the area is found by name, never listed, never changed.
@Suite(.needsRootAndFUSE) struct ControlAreaTests {
    static func link(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n >= 0 else { return nil }
        return String(cString: Array(buffer[0..<n]) + [0])
    }

    static func contents(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    @Test func byIDFindsTheItemWhereverItLivesAcrossRestarts() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(mkdir(fixture.path("a"), 0o755) == 0)
        try write("first\n", to: fixture.path("report.txt"))
        let id = try #require(itemID(fixture.path("report.txt")))
        let folder = try #require(itemID(fixture.path("a")))
        let byID = fixture.path(".docfs/by-id/\(id)")
        #expect(Self.link(byID) == "../../report.txt")
        #expect(Self.contents(byID) == "first\n")

        // Renamed and moved: the same name follows it at once (nothing cached).
        #expect(rename(fixture.path("report.txt"), fixture.path("a/q3.txt")) == 0)
        #expect(Self.link(byID) == "../../a/q3.txt")
        #expect(Self.contents(byID) == "first\n")
        // Written through it: the item itself changes.
        try write("second\n", to: byID)
        #expect(Self.contents(fixture.path("a/q3.txt")) == "second\n")
        // A folder by id, and the root.
        #expect(Self.link(fixture.path(".docfs/by-id/\(folder)")) == "../../a")
        #expect(try shell("ls '\(fixture.path(".docfs/by-id/\(folder)"))/'").output == "q3.txt\n")

        // After a daemon restart.
        fixture.stop()
        try fixture.start()
        #expect(Self.link(byID) == "../../a/q3.txt")

        // Gone: nothing there.
        #expect(unlink(fixture.path("a/q3.txt")) == 0)
        var st = stat()
        #expect(errnoOf(lstat(byID, &st)) == ENOENT)
        #expect(errnoOf(lstat(fixture.path(".docfs/by-id/999999"), &st)) == ENOENT)
        #expect(errnoOf(lstat(fixture.path(".docfs/by-id/not-an-id"), &st)) == ENOENT)
    }

    @Test func theControlAreaIsFoundByNameNeverListedNeverChanged() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("x\n", to: fixture.path("doc"))
        var st = stat()
        #expect(stat(fixture.path(".docfs"), &st) == 0 && st.st_mode & S_IFMT == S_IFDIR)
        #expect(stat(fixture.path(".docfs/by-id"), &st) == 0 && st.st_mode & S_IFMT == S_IFDIR)
        #expect(try shell("ls -a '\(fixture.mountPoint)'").output == ".\n..\ndoc\n")
        #expect(try shell("ls '\(fixture.path(".docfs"))'").output == "by-id\nthumbnails\n")
        #expect(errnoOf(mkdir(fixture.path(".docfs/by-id/x"), 0o755)) == EROFS)
        #expect(errnoOf(open(fixture.path(".docfs/new"), O_CREAT | O_WRONLY, 0o644)) == EROFS)
        #expect(errnoOf(rename(fixture.path("doc"), fixture.path(".docfs"))) != 0)
        #expect(errnoOf(rmdir(fixture.path(".docfs"))) == EBUSY)
        #expect(errnoOf(chmod(fixture.path(".docfs"), 0o777)) == EROFS)
        // A tree walk and a recursive removal pass it by.
        #expect(try shell("find '\(fixture.mountPoint)' | wc -l").output.trimmingCharacters(in: .whitespacesAndNewlines) == "2")
        #expect(try shell("rm -rf '\(fixture.mountPoint)'/*").status == 0)
        #expect(stat(fixture.path(".docfs"), &st) == 0)
    }

    @Test func tokensOpenTheItemAndAReadOnlyScopeHolds() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(mkdir(fixture.path("shared"), 0o755) == 0)
        try write("plans\n", to: fixture.path("shared/plan.txt"))
        chmod(fixture.path("shared/plan.txt"), 0o644)
        let binary = "'\(MountFixture.binary)'"
        func token(_ path: String, _ options: String = "") throws -> String {
            let made = try shell("\(binary) bookmark create \(options) '\(fixture.path(path))'")
            #expect(made.status == 0, "\(made.output)")
            return made.output.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        // A plain token: a link to where the item is, even after a move.
        let plain = try #require(attribute(fixture.path("shared/plan.txt"), "user.docfs.bookmark"))
        #expect(rename(fixture.path("shared/plan.txt"), fixture.path("shared/plan-v2.txt")) == 0)
        #expect(Self.link(fixture.path(".docfs/by-id/\(plain)")) == "../../shared/plan-v2.txt")

        // A read-only token: readable, refused every change, its folder's too.
        let readOnly = try token("shared/plan-v2.txt", "--read-only")
        let file = fixture.path(".docfs/by-id/\(readOnly)")
        #expect(Self.contents(file) == "plans\n")
        var st = stat()
        #expect(stat(file, &st) == 0 && st.st_mode & 0o222 == 0)
        #expect(errnoOf(open(file, O_WRONLY)) == EACCES)
        #expect(errnoOf(open(file, O_RDWR | O_TRUNC)) == EACCES)
        #expect(errnoOf(truncate(file, 0)) == EACCES)
        #expect(errnoOf(docfs_setxattr(file, "user.note", "x", 1, 0)) == EACCES)
        #expect(errnoOf(docfs_getxattr(file, "user.docfs.bookmark", nil, 0)) == ENODATA)
        let folderToken = try token("shared", "--read-only")
        let folder = fixture.path(".docfs/by-id/\(folderToken)")
        #expect(try shell("ls '\(folder)'").output == "plan-v2.txt\n")
        #expect(Self.contents(folder + "/plan-v2.txt") == "plans\n")
        #expect(errnoOf(open(folder + "/plan-v2.txt", O_WRONLY)) == EACCES)
        #expect(errnoOf(open(folder + "/new.txt", O_CREAT | O_WRONLY, 0o644)) != 0)
        #expect(errnoOf(mkdir(folder + "/sub", 0o755)) != 0)
        #expect(errnoOf(unlink(folder + "/plan-v2.txt")) != 0)
        #expect(Self.contents(fixture.path("shared/plan-v2.txt")) == "plans\n")
        #expect(try shell("ls '\(fixture.path("shared"))'").output == "plan-v2.txt\n")
        #expect(fixture.log.contains("read-only bookmark"), "the refusals are logged")

        // Issued to someone: theirs to use, nobody else's.
        let nobodys = try token("shared/plan-v2.txt", "--read-only --issued-to uid:65534")
        let someoneElses = try token("shared/plan-v2.txt", "--read-only --issued-to uid:12345")
        let asNobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"
        #expect(try shell("\(asNobody) cat '\(fixture.path(".docfs/by-id/\(nobodys)"))'").output == "plans\n")
        let refused = try shell("\(asNobody) cat '\(fixture.path(".docfs/by-id/\(someoneElses)"))' 2>&1")
        #expect(refused.status != 0 && refused.output.contains("Permission denied"), "\(refused.output)")

        // Altered, truncated and made-up tokens find nothing, and the log says why.
        var altered = Array(readOnly)
        let at = altered.count - 5
        altered[at] = altered[at] == "A" ? "B" : "A"
        for bad in [String(altered), String(readOnly.dropLast(7)), "docfs-bm1:AAAA", "docfs-bm1:@@"] {
            #expect(errnoOf(lstat(fixture.path(".docfs/by-id/\(bad)"), &st)) == ENOENT, "\(bad)")
        }
        #expect(fixture.log.contains("bookmark token refused"))
    }
}
