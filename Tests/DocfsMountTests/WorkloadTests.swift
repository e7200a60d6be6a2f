import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Real tools (cp -a, mv, rm -r, tar, git, sqlite3 with two writers, sed -i, vim, python's
/// os.replace) run on a plain directory and on a docfs mount: they answer the same and leave
/// the same tree (names, modes, owners, sizes, contents, xattrs), but for the attributes a
/// safe-save keeps.
@Suite(.needsRootAndFUSE) struct WorkloadTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Workloads/tools.sh").path

    @Test func realToolsLeaveTheSameTree() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let plain = fixture.root + "/plain"
        mkdir(plain, 0o755)
        let expected = try shell("bash '\(Self.script)' '\(plain)'")
        let actual = try shell("bash '\(Self.script)' '\(fixture.mountPoint)'")
        let sameOutput = actual.output == expected.output
        #expect(sameOutput, "tools answered differently:\n--- plain\n\(expected.output)\n--- docfs\n\(actual.output)")
        #expect(expected.output.contains("== done"))
        #expect(actual.output.contains("alpha|150|11325"))
        #expect(actual.output.contains("fsck ok"))
        // git's index and sqlite's files hold inode numbers and timings; their content was
        // checked through the tools' own answers above.
        let volatile: Set<String> = ["repo/.git/index", "db.sqlite", "db.sqlite-wal", "db.sqlite-shm"]
        let a = TreeSnapshot.take(plain, excluding: volatile)
        var b = TreeSnapshot.take(fixture.mountPoint, excluding: volatile)
        #expect(a.count > 100)
        // docfs's one departure: sed -i is a safe-save, which keeps the document's attributes
        // (a plain folder loses them with the replaced file).
        let edited = try #require(b.firstIndex { $0.hasPrefix("edit.txt ") })
        #expect(b[edited].hasSuffix("xattrs=user.keep=me"))
        b[edited] = String(b[edited].dropLast("user.keep=me".count))
        let same = a == b
        #expect(same, "trees differ:\n\(TreeSnapshot.difference(a, b))")
    }
}
