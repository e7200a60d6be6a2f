import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// App views (issue 6 §2, DESIGN §2, C7): `docfs mount --app ID` shows exactly that container
/// (`Documents/` and `Data/`), served by the daemon that serves the user view; nothing else is
/// reachable through it, and every attempt is refused with the errno a permission check gives
/// (or the kernel's EXDEV between mounts), and logged.
@Suite(.needsRootAndFUSE) struct AppViewTests {
    func names(_ path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    /// A store with the user's secret.txt, a private container Notes and a public one Other,
    /// and Notes' app view mounted.
    func notesView(_ fixture: MountFixture) throws -> String {
        try write("secret\n", to: fixture.path("secret.txt"))
        #expect(try runDocfs("container create com.example.Notes --name Notes --store '\(fixture.store)'").status == 0)
        #expect(try runDocfs("container create com.example.Other --name Other --public --store '\(fixture.store)'").status == 0)
        try write("theirs\n", to: fixture.path("Other/o.txt"))
        return try fixture.mountApp("com.example.Notes")
    }

    @Test func anAppViewShowsExactlyItsContainer() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let app = try notesView(fixture)
        #expect(try names(app) == ["Data", "Documents"])
        var st = stat()
        for hidden in ["container.json", "secret.txt", "Other", "Notes", "docfs.default"] {
            #expect(errnoOf(lstat(app + "/" + hidden, &st)) == ENOENT, "\(hidden)")
        }
        // What the app writes is its container's: documents and data scopes, in the store and
        // in the index.
        try write("a note\n", to: app + "/Documents/a.txt")
        #expect(mkdir(app + "/Data/cache", 0o755) == 0)
        try write("state\n", to: app + "/Data/cache/state.json")
        let container = fixture.store + "/containers/com.example.Notes"
        #expect((try? String(contentsOfFile: container + "/Documents/a.txt", encoding: .utf8)) == "a note\n")
        #expect((try? String(contentsOfFile: container + "/Data/cache/state.json", encoding: .utf8)) == "state\n")
        let json = try runDocfs("query 'container == \"com.example.Notes\"' --scope all --sort path --json --store '\(fixture.store)'").output
        let records = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "\(json)")
        #expect(records.map { "\($0["scope"] ?? "")\($0["path"] ?? "")" }.sorted() == ["data/cache", "data/cache/state.json", "documents/a.txt"])
        // The container is private: the user view does not show it.
        #expect(try names(fixture.mountPoint) == ["Other", "secret.txt"])
        // by-id of the app's own item leads to it inside the view.
        let id = try #require(itemID(app + "/Documents/a.txt"))
        #expect(ControlAreaTests.link(app + "/.docfs/by-id/\(id)") == "../../Documents/a.txt")
        #expect(ControlAreaTests.contents(app + "/.docfs/by-id/\(id)") == "a note\n")
        let status = try runDocfs("status '\(app)/Data/cache/state.json'").output
        #expect(status.contains("container: Notes (com.example.Notes), data scope"), "\(status)")
        // Its documents' versions are restored through the app view too (the user view does not
        // show them: the daemon is told their place).
        try write("state 2\n", to: app + "/Data/cache/state.json")
        let restored = try runDocfs("versions '\(app)/Data/cache/state.json' --restore 1")
        #expect(restored.status == 0, "\(restored.output)")
        #expect(ControlAreaTests.contents(app + "/Data/cache/state.json") == "state\n")
    }

    @Test func everyWayOutIsRefusedAndLogged() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try notesView(fixture)
        try write("a note\n", to: app + "/Documents/a.txt")

        // `..` at the root leaves the mount for the folder it is mounted on, never the store.
        #expect(URL(fileURLWithPath: app + "/Documents/../..").standardizedFileURL.resolvingSymlinksInPath().path == fixture.root)
        var up = stat(), host = stat()
        #expect(stat(app + "/..", &up) == 0 && stat(fixture.root, &host) == 0 && up.st_ino == host.st_ino && up.st_dev == host.st_dev)
        #expect(try names(app + "/Documents/../..").contains("store"))  // the host's folder, as any mount's parent
        // Nothing at the root but its two folders.
        #expect(errnoOf(mkdir(app + "/other", 0o755)) == EACCES)
        #expect(errnoOf(open(app + "/file", O_CREAT | O_WRONLY, 0o644)) == EACCES)
        #expect(errnoOf(rename(app + "/Documents/a.txt", app + "/a.txt")) == EACCES)
        #expect(errnoOf(rename(app + "/Documents", app + "/Docs")) == EACCES)
        #expect(errnoOf(rmdir(app + "/Data")) == EACCES)

        // Symbolic links out of the view, absolute and relative: refused; inside it: made.
        #expect(errnoOf(symlink(fixture.path("secret.txt"), app + "/Documents/abs")) == EACCES)
        #expect(errnoOf(symlink("../../docfs.default/Documents/secret.txt", app + "/Documents/rel")) == EACCES)
        #expect(errnoOf(symlink("../../../../secret.txt", app + "/Data/deep")) == EACCES)
        #expect(symlink("../Data", app + "/Documents/data-link") == 0)
        #expect(symlink("a.txt", app + "/Documents/same") == 0)
        #expect(ControlAreaTests.contents(app + "/Documents/same") == "a note\n")
        // One made behind docfs's back in the store cannot be read, nor followed, in the view.
        #expect(symlink("../../docfs.default/Documents/secret.txt",
                        fixture.store + "/containers/com.example.Notes/Documents/planted") == 0)
        var buffer = [CChar](repeating: 0, count: 256)
        #expect(errnoOf(readlink(app + "/Documents/planted", &buffer, buffer.count)) == EACCES)
        #expect(errnoOf(open(app + "/Documents/planted", O_RDONLY)) == EACCES)

        // Items of other containers by id: refused, though they exist.
        let secret = try #require(itemID(fixture.path("secret.txt")))
        let other = try #require(itemID(fixture.path("Other/o.txt")))
        var st = stat()
        #expect(errnoOf(lstat(app + "/.docfs/by-id/\(secret)", &st)) == EACCES)
        #expect(errnoOf(lstat(app + "/.docfs/by-id/\(other)", &st)) == EACCES)

        // Hard links and renames between the views: the kernel refuses them (another mount).
        #expect(errnoOf(link(fixture.path("secret.txt"), app + "/Documents/hard")) == EXDEV)
        #expect(errnoOf(rename(app + "/Documents/a.txt", fixture.path("a.txt"))) == EXDEV)
        #expect(errnoOf(rename(fixture.path("secret.txt"), app + "/Documents/secret.txt")) == EXDEV)
        #expect(link(app + "/Documents/a.txt", app + "/Documents/a-again.txt") == 0)  // its own: fine

        // Bookmark tokens: one issued to another app is refused; one issued to this app opens
        // its item; the user's token to an item outside the view finds nothing it may reach.
        let foreign = try runDocfs("bookmark create --issued-to com.example.Other '\(app)/Documents/a.txt'").output
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(errnoOf(lstat(app + "/.docfs/by-id/" + foreign, &st)) == EACCES, "\(foreign)")
        let own = try runDocfs("bookmark create --issued-to com.example.Notes '\(app)/Documents/a.txt'").output
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(ControlAreaTests.contents(app + "/.docfs/by-id/" + own) == "a note\n", "\(own)")
        let users = try #require(attribute(fixture.path("secret.txt"), "user.docfs.bookmark"))
        #expect(errnoOf(lstat(app + "/.docfs/by-id/" + users, &st)) == EACCES)

        // Each refusal says why in the daemon's log.
        let log = fixture.log
        for reason in ["holds only Documents and Data", "would lead out of it", "leads out of it to",
                       "may not reach", "issued to com.example.Other"] {
            #expect(log.contains(reason), "\(reason)")
        }
    }

    @Test func oneDaemonServesEveryViewAndChangesCrossBetweenThem() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try runDocfs("container create com.example.Notes --name Notes --public '\(fixture.mountPoint)'").status == 0)
        let app = try fixture.mountApp("com.example.Notes")
        let pid = try #require(fixture.daemon?.processIdentifier)
        #expect(try runDocfs("status '\(fixture.mountPoint)'").output.contains("store:"))

        // Written in one view, read in the other at once — including what the other had
        // cached (its attributes, its open file's size).
        try write("one\n", to: app + "/Documents/shared.txt")
        #expect(ControlAreaTests.contents(fixture.path("Notes/shared.txt")) == "one\n")
        let appended = open(fixture.path("Notes/shared.txt"), O_WRONLY | O_APPEND)
        #expect(appended >= 0)
        #expect(write(appended, "two\n", 4) == 4)
        close(appended)
        var seen = ""
        for _ in 0..<100 {
            seen = ControlAreaTests.contents(app + "/Documents/shared.txt") ?? ""
            if seen == "one\ntwo\n" { break }
            usleep(20_000)
        }
        #expect(seen == "one\ntwo\n")
        // One item, one version history, whichever view wrote.
        #expect(itemID(app + "/Documents/shared.txt") == itemID(fixture.path("Notes/shared.txt")))
        #expect(attribute(app + "/Documents/shared.txt", "user.docfs.version") == "2")

        // A mounted container cannot be deleted; an app view of a missing container is refused.
        let refused = try runDocfs("container delete com.example.Notes --force '\(fixture.mountPoint)'")
        #expect(refused.status == 1 && refused.output.contains("mounted as an app view"), "\(refused.output)")
        let elsewhere = fixture.root + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        let missing = try runDocfs("mount --store '\(fixture.store)' --app com.example.Missing '\(elsewhere)'")
        #expect(missing.status != 0 && missing.output.contains("no container com.example.Missing"), "\(missing.output)")
        #expect(!MountFixture.isMounted(elsewhere))

        // Unmounting the user view leaves the app view served by the same daemon; unmounting
        // the last view ends it.
        #expect(try runDocfs("unmount '\(fixture.mountPoint)'").status == 0)
        #expect(!MountFixture.isMounted(fixture.mountPoint) && MountFixture.isMounted(app))
        #expect(kill(pid, 0) == 0)
        #expect(ControlAreaTests.contents(app + "/Documents/shared.txt") == "one\ntwo\n")
        #expect(try runDocfs("unmount '\(app)'").status == 0)
        #expect(waitForExit(try #require(fixture.daemon)), "the daemon did not end with its last mount")
    }
}
