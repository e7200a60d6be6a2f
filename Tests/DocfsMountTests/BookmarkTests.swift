import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Bookmarks through a real mount (issue 5 §3, DESIGN §7): `user.docfs.bookmark` and `docfs
/// bookmark create` make tokens; `docfs bookmark resolve` finds the item after renames, moves,
/// safe-saves and daemon restarts, says when the token is stale, and refuses what it cannot
/// trust with exit status 1.
@Suite(.needsRootAndFUSE) struct BookmarkTests {
    struct Resolved: Decodable {
        var path: String
        var stale: Bool
        var staleBecause: [String]
        var recordedPath: String
        var resourceIdentifier: UInt64
        var resourceType: String
        var localizedName: String
        var contentModificationDate: Double
        var securityScope: Scope?

        struct Scope: Decodable, Equatable {
            var issuedTo: String
            var readOnly: Bool
        }
    }

    static func resolve(_ token: String, _ location: String) throws -> (status: Int32, resolved: Resolved?, output: String) {
        let result = try shell("'\(MountFixture.binary)' bookmark resolve --json '\(token)' \(location)")
        let resolved = result.status == 0 ? try? JSONDecoder().decode(Resolved.self, from: Data(result.output.utf8)) : nil
        return (result.status, resolved, result.output)
    }

    @Test func bookmarksFindTheItemAfterRenamesMovesSafeSavesAndRestarts() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let mount = "'\(fixture.mountPoint)'"
        try write("first\n", to: fixture.path("report.txt"))
        #expect(mkdir(fixture.path("a"), 0o755) == 0)
        let id = try #require(itemID(fixture.path("report.txt")))
        let token = try #require(attribute(fixture.path("report.txt"), "user.docfs.bookmark"))
        #expect(token.hasPrefix("docfs-bm1:"))

        var r = try #require(try Self.resolve(token, mount).resolved)
        #expect(r.path == fixture.path("report.txt") && !r.stale && r.resourceIdentifier == id)
        #expect(r.resourceType == "file" && r.localizedName == "report.txt" && r.securityScope == nil && r.recordedPath == "/report.txt")

        // Renamed and moved to another folder: found, and stale.
        #expect(rename(fixture.path("report.txt"), fixture.path("a/q3.txt")) == 0)
        r = try #require(try Self.resolve(token, mount).resolved)
        #expect(r.path == fixture.path("a/q3.txt") && r.stale && r.staleBecause == ["moved", "renamed"])
        let fresh = try shell("'\(MountFixture.binary)' bookmark create '\(fixture.path("a/q3.txt"))'")
        #expect(fresh.status == 0, "\(fresh.output)")
        let second = fresh.output.trimmingCharacters(in: .whitespacesAndNewlines)
        r = try #require(try Self.resolve(second, mount).resolved)
        #expect(r.path == fixture.path("a/q3.txt") && !r.stale)

        // An editor's safe-save (new file renamed over it) keeps the item: found, but replaced.
        try write("second\n", to: fixture.path("a/.q3.txt.swp"))
        #expect(rename(fixture.path("a/.q3.txt.swp"), fixture.path("a/q3.txt")) == 0)
        #expect(itemID(fixture.path("a/q3.txt")) == id)
        r = try #require(try Self.resolve(second, mount).resolved)
        #expect(r.path == fixture.path("a/q3.txt") && r.stale && r.staleBecause == ["replaced"])
        let third = try #require(attribute(fixture.path("a/q3.txt"), "user.docfs.bookmark"))

        // Remounted by a new daemon: every token still resolves, from the mount and the store.
        fixture.stop()
        r = try #require(try Self.resolve(third, "--store '\(fixture.store)'").resolved)
        #expect(r.path.hasSuffix("/containers/docfs.default/Documents/a/q3.txt") && !r.stale)
        try fixture.start()
        for old in [token, second, third] {
            r = try #require(try Self.resolve(old, mount).resolved)
            #expect(r.path == fixture.path("a/q3.txt"))
        }
        #expect(try #require(try Self.resolve(third, mount).resolved).stale == false)

        // Gone: a clear error and exit status 1.
        #expect(unlink(fixture.path("a/q3.txt")) == 0)
        let gone = try Self.resolve(third, mount)
        #expect(gone.status == 1 && gone.output.contains("is gone"), "\(gone.output)")
    }

    /// Root serves another user's store (issue 21 §4): the store's key and index are root's,
    /// and that user's `docfs bookmark create|resolve` goes through the daemon, which makes
    /// bookmarks only of files the user may read.
    @Test func anotherUsersBookmarksWorkThroughARootDaemon() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        try FileManager.default.createDirectory(atPath: fixture.store, withIntermediateDirectories: true)
        #expect(chown(fixture.store, 65534, 65534) == 0)
        try fixture.start()
        try write("mine\n", to: fixture.path("mine.txt"))
        #expect(chown(fixture.path("mine.txt"), 65534, 65534) == 0)
        try write("root's\n", to: fixture.path("secret.txt"))
        #expect(chmod(fixture.path("secret.txt"), 0o600) == 0)
        let asNobody = "setpriv --reuid=65534 --regid=65534 --clear-groups '\(MountFixture.binary)'"
        // The key is root's: nobody cannot read it.
        #expect(try shell("setpriv --reuid=65534 --regid=65534 --clear-groups cat '\(fixture.store)/keys/bookmarks.key'").status != 0)

        let made = try shell("\(asNobody) bookmark create '\(fixture.documents)/mine.txt' 2>&1")
        #expect(made.status == 0 && made.output.hasPrefix("docfs-bm1:"), "\(made.output)")
        let token = made.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let resolved = try shell("\(asNobody) bookmark resolve --json '\(token)' --store '\(fixture.store)' 2>&1")
        #expect(resolved.status == 0, "\(resolved.output)")
        let first = try JSONDecoder().decode(Resolved.self, from: Data(resolved.output.utf8))
        #expect(first.path.hasSuffix("/mine.txt") && !first.stale, "\(resolved.output)")
        #expect(rename(fixture.path("mine.txt"), fixture.path("moved.txt")) == 0)
        let again = try shell("\(asNobody) bookmark resolve --json '\(token)' --store '\(fixture.store)' 2>&1")
        let second = try JSONDecoder().decode(Resolved.self, from: Data(again.output.utf8))
        #expect(second.path.hasSuffix("/moved.txt") && second.stale, "\(again.output)")
        // A file nobody may not read gets no bookmark; a forged token is refused.
        let refused = try shell("\(asNobody) bookmark create '\(fixture.documents)/secret.txt' 2>&1")
        #expect(refused.status != 0, "\(refused.output)")
        let forged = try shell("\(asNobody) bookmark resolve '\(token.dropLast(4))AAAA' --store '\(fixture.store)' 2>&1")
        #expect(forged.status != 0, "\(forged.output)")
    }

    @Test func foldersAndTheRootHaveBookmarksThatUsersCannotSet() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(mkdir(fixture.path("Projects"), 0o755) == 0)
        let names = try shell("getfattr -m - --absolute-names '\(fixture.path("Projects"))'").output
        #expect(names.contains("user.docfs.bookmark") && names.contains("user.docfs.id"))
        let folder = try #require(attribute(fixture.path("Projects"), "user.docfs.bookmark"))
        #expect(rename(fixture.path("Projects"), fixture.path("Work")) == 0)
        let r = try #require(try Self.resolve(folder, "'\(fixture.mountPoint)'").resolved)
        #expect(r.path == fixture.path("Work") && r.resourceType == "folder" && r.staleBecause == ["renamed"])
        let root = try #require(attribute(fixture.mountPoint, "user.docfs.bookmark"))
        let atRoot = try #require(try Self.resolve(root, "'\(fixture.mountPoint)'").resolved)
        #expect(atRoot.path == fixture.mountPoint && !atRoot.stale)
        // Reserved: users may not set or remove it (EPERM, and the log says why).
        #expect(docfs_setxattr(fixture.path("Work"), "user.docfs.bookmark", "x", 1, 0) == -1 && errno == EPERM)
        #expect(docfs_removexattr(fixture.path("Work"), "user.docfs.bookmark") == -1 && errno == EPERM)
        #expect(fixture.log.contains("user.docfs.bookmark is kept by docfs"))
        // Symbolic links carry no user attributes, as on ext4.
        #expect(symlink("Work", fixture.path("link")) == 0)
        #expect(docfs_lgetxattr(fixture.path("link"), "user.docfs.bookmark", nil, 0) == -1 && errno == ENODATA)
    }

    @Test func securityScopedBookmarksNameWhoTheyWereIssuedTo() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("notes\n", to: fixture.path("notes.txt"))
        for (flags, scope) in [("--security-scope", Resolved.Scope(issuedTo: "uid:\(getuid())", readOnly: false)),
                               ("--read-only --issued-to com.example.Notes", Resolved.Scope(issuedTo: "com.example.Notes", readOnly: true))] {
            let made = try shell("'\(MountFixture.binary)' bookmark create \(flags) '\(fixture.path("notes.txt"))'")
            #expect(made.status == 0, "\(made.output)")
            let r = try #require(try Self.resolve(made.output.trimmingCharacters(in: .whitespacesAndNewlines), "'\(fixture.mountPoint)'").resolved)
            #expect(r.securityScope == scope && r.path == fixture.path("notes.txt"))
        }
        let text = try shell("'\(MountFixture.binary)' bookmark resolve \"$(getfattr --only-values -n user.docfs.bookmark '\(fixture.path("notes.txt"))')\" '\(fixture.mountPoint)'")
        #expect(text.status == 0 && text.output.contains("path:") && text.output.contains("not security-scoped"), "\(text.output)")
        // Named neither store nor mount point: the mounted store whose key checks the token is found.
        let token = try #require(attribute(fixture.path("notes.txt"), "user.docfs.bookmark"))
        let found = try shell("'\(MountFixture.binary)' bookmark resolve --json '\(token)'",
                              environment: ["DOCFS_STORE": fixture.root + "/no-such-store"])
        let r = try? JSONDecoder().decode(Resolved.self, from: Data(found.output.utf8))
        #expect(found.status == 0 && r?.path == fixture.path("notes.txt"), "\(found.output)")
    }

    @Test func tokensNotMadeByThisStoreOrChangedAreRefused() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let other = try MountFixture()
        defer { other.tearDown() }
        try write("a\n", to: fixture.path("a.txt"))
        try write("b\n", to: other.path("b.txt"))
        let token = try #require(attribute(fixture.path("a.txt"), "user.docfs.bookmark"))
        let foreign = try #require(attribute(other.path("b.txt"), "user.docfs.bookmark"))
        var altered = Array(token.utf8)
        altered[80] = altered[80] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
        let cases: [(String, String)] = [
            ("hello", "not a docfs bookmark"),
            (String(token.prefix(40)), "cut short"),
            (String(decoding: altered, as: UTF8.self), "altered or forged"),
            (foreign, "made by another store"),
            ("docfs-bm1:%%%%", "damaged"),
        ]
        for (bad, reason) in cases {
            let r = try Self.resolve(bad, "'\(fixture.mountPoint)'")
            #expect(r.status == 1 && r.output.contains(reason), "\(bad): \(r.output)")
        }
        // The daemon serving the store is unaffected.
        #expect(attribute(fixture.path("a.txt"), "user.docfs.id") != nil)
    }
}
