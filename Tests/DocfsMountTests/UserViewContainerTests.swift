import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The user view's container folders (issue 6 §1, DESIGN §2): each public container shows at
/// the mount root under its display name, carrying its name and id as attributes; its files
/// are the container's own (store, index, by-id); the user's own files keep their names when
/// they collide; the folders cannot be removed, renamed or replaced through the mount; and
/// container commands made while the store is served show at once.
@Suite(.needsRootAndFUSE) struct UserViewContainerTests {
    func names(_ path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    @Test func publicContainersAreFoldersAtTheRoot() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("mine\n", to: fixture.path("own.txt"))
        #expect(try runDocfs("container create com.example.Notes --name Notes --public '\(fixture.mountPoint)'").status == 0)
        #expect(try runDocfs("container create com.example.Secret --name Secret '\(fixture.mountPoint)'").status == 0)

        // Shown at once (the command went through the daemon), the private one not at all.
        #expect(try names(fixture.mountPoint) == ["Notes", "own.txt"])
        var st = stat()
        #expect(errnoOf(lstat(fixture.path("Secret"), &st)) == ENOENT)
        #expect(lstat(fixture.path("Notes"), &st) == 0 && st.st_mode & S_IFMT == S_IFDIR)
        // readdir and lookup agree on the folder's inode number (its backing folder's).
        #expect(try directoryInodes(fixture.mountPoint)["Notes"] == UInt64(st.st_ino))
        #expect(inode(fixture.store + "/containers/com.example.Notes/Documents") == UInt64(st.st_ino))
        #expect(itemID(fixture.path("Notes")) != nil)

        // The folder's attributes, listed and read; nobody may set them.
        #expect(attribute(fixture.path("Notes"), "user.docfs.container") == "Notes")
        #expect(attribute(fixture.path("Notes"), "user.docfs.container-id") == "com.example.Notes")
        let listed = try shell("getfattr -d -m - --absolute-names '\(fixture.path("Notes"))'").output
        #expect(listed.contains("user.docfs.container=\"Notes\"") && listed.contains("user.docfs.container-id=\"com.example.Notes\""), "\(listed)")
        #expect(errnoOf(docfs_setxattr(fixture.path("Notes"), "user.docfs.container", "X", 1, 0)) == EPERM)
        // An ordinary folder carries neither.
        #expect(mkdir(fixture.path("plain"), 0o755) == 0)
        #expect(attribute(fixture.path("plain"), "user.docfs.container") == nil)
        #expect(errnoOf(docfs_setxattr(fixture.path("plain"), "user.docfs.container-id", "x", 1, 0)) == EPERM)

        // Files made there are the container's: in its folder in the store, and in the index
        // under its id and name; the user view's path finds them.
        try write("a note\n", to: fixture.path("Notes/n1.txt"))
        #expect((try? String(contentsOfFile: fixture.store + "/containers/com.example.Notes/Documents/n1.txt", encoding: .utf8)) == "a note\n")
        let json = try runDocfs("query 'name == \"n1.txt\"' --json --store '\(fixture.store)'").output
        let records = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "\(json)")
        #expect(records.count == 1)
        #expect(records.first?["container"] as? String == "com.example.Notes")
        #expect(records.first?["containerName"] as? String == "Notes")
        #expect(records.first?["path"] as? String == "/n1.txt")
        #expect(try runDocfs("query 'name == \"n1.txt\"' '\(fixture.mountPoint)'").output == fixture.path("Notes/n1.txt") + "\n")
        let id = try #require(itemID(fixture.path("Notes/n1.txt")))
        #expect(ControlAreaTests.link(fixture.path(".docfs/by-id/\(id)")) == "../../Notes/n1.txt")
        let status = try runDocfs("status '\(fixture.path("Notes/n1.txt"))'").output
        #expect(status.contains("container: Notes (com.example.Notes), documents scope"), "\(status)")

        // Moving a file from the user's own files into the container makes it the container's.
        #expect(rename(fixture.path("own.txt"), fixture.path("Notes/own.txt")) == 0)
        let moved = try runDocfs("query 'name == \"own.txt\"' --json --store '\(fixture.store)'").output
        #expect(moved.contains("\"container\" : \"com.example.Notes\""), "\(moved)")
        #expect(FileManager.default.fileExists(atPath: fixture.store + "/containers/com.example.Notes/Documents/own.txt"))

        // A bookmark to an item of the container resolves there, across a daemon restart.
        let token = try #require(attribute(fixture.path("Notes/n1.txt"), "user.docfs.bookmark"))
        fixture.stop()
        try fixture.start()
        #expect(ControlAreaTests.link(fixture.path(".docfs/by-id/\(token)")) == "../../Notes/n1.txt")
        #expect(try names(fixture.mountPoint) == ["Notes", "plain"])
    }

    @Test func containerFoldersCannotBeRemovedRenamedOrReplaced() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try runDocfs("container create com.example.Notes --name Notes --public '\(fixture.mountPoint)'").status == 0)
        try write("x\n", to: fixture.path("file"))
        #expect(mkdir(fixture.path("dir"), 0o755) == 0)
        #expect(errnoOf(rmdir(fixture.path("Notes"))) == EBUSY)
        #expect(errnoOf(rename(fixture.path("Notes"), fixture.path("Other"))) == EBUSY)
        #expect(errnoOf(rename(fixture.path("dir"), fixture.path("Notes"))) == EBUSY)
        #expect(errnoOf(mkdir(fixture.path("Notes"), 0o755)) == EEXIST)
        #expect(errnoOf(symlink("file", fixture.path("Notes"))) == EEXIST)
        #expect(errnoOf(link(fixture.path("file"), fixture.path("Notes"))) == EEXIST)
        #expect(errnoOf(open(fixture.path("Notes"), O_CREAT | O_EXCL | O_WRONLY, 0o644)) == EEXIST)
        // What is inside is the user's to change, as in any folder.
        try write("y\n", to: fixture.path("Notes/inside"))
        #expect(rename(fixture.path("Notes/inside"), fixture.path("Notes/renamed")) == 0)
        #expect(unlink(fixture.path("Notes/renamed")) == 0)
        #expect(FileManager.default.fileExists(atPath: fixture.store + "/containers/com.example.Notes/Documents"))
        #expect(fixture.log.contains("container com.example.Notes's folder"), "\(fixture.log)")
    }

    @Test func theUsersOwnNamesWinCollisions() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(mkdir(fixture.path("Notes"), 0o755) == 0)
        try write("mine\n", to: fixture.path("Notes/mine.txt"))
        #expect(try runDocfs("container create com.example.Notes --name Notes --public '\(fixture.mountPoint)'").status == 0)
        try write("theirs\n", to: fixture.store + "/containers/com.example.Notes/Documents/theirs.txt")
        // The user's folder keeps its name; the container's shows qualified by its id.
        #expect(try names(fixture.mountPoint) == ["Notes", "Notes (com.example.Notes)"])
        #expect(try names(fixture.path("Notes")) == ["mine.txt"])
        #expect(try names(fixture.path("Notes (com.example.Notes)")) == ["theirs.txt"])
        #expect(attribute(fixture.path("Notes (com.example.Notes)"), "user.docfs.container-id") == "com.example.Notes")
        #expect(attribute(fixture.path("Notes"), "user.docfs.container-id") == nil)
        // The qualified name is taken while the container shows under it.
        #expect(errnoOf(mkdir(fixture.path("Notes (com.example.Notes)"), 0o755)) == EEXIST)
        // Once the user's folder goes, the container shows under its own name again.
        #expect(unlink(fixture.path("Notes/mine.txt")) == 0)
        #expect(rmdir(fixture.path("Notes")) == 0)
        #expect(try names(fixture.mountPoint) == ["Notes"])
        #expect(try names(fixture.path("Notes")) == ["theirs.txt"])
    }

    @Test func renamesAndDeletionsWhileServedShowAtOnce() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try runDocfs("container create com.example.Notes --name Notes --public '\(fixture.mountPoint)'").status == 0)
        try write("a\n", to: fixture.path("Notes/a.txt"))
        #expect(mkdir(fixture.path("Notes/sub"), 0o755) == 0)
        try write("b\n", to: fixture.path("Notes/sub/b.txt"))
        let id = try #require(itemID(fixture.path("Notes/sub/b.txt")))
        #expect(try names(fixture.mountPoint) == ["Notes"])  // the kernel has it cached now

        let renamed = try runDocfs("container rename com.example.Notes Jottings '\(fixture.mountPoint)'")
        #expect(renamed.status == 0, "\(renamed.output)")
        #expect(try names(fixture.mountPoint) == ["Jottings"])
        var st = stat()
        #expect(errnoOf(lstat(fixture.path("Notes"), &st)) == ENOENT)
        #expect(attribute(fixture.path("Jottings"), "user.docfs.container") == "Jottings")
        #expect(ControlAreaTests.link(fixture.path(".docfs/by-id/\(id)")) == "../../Jottings/sub/b.txt")
        // Every record of the container carries its new name.
        let json = try runDocfs("query 'container == \"com.example.Notes\"' --json --store '\(fixture.store)'").output
        let records = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "\(json)")
        #expect(records.count == 3 && records.allSatisfy { $0["containerName"] as? String == "Jottings" }, "\(json)")

        // Deleting: refused while it holds files, then forced; its records go with it.
        let refused = try runDocfs("container delete com.example.Notes '\(fixture.mountPoint)'")
        #expect(refused.status == 1 && refused.output.contains("--force"), "\(refused.output)")
        #expect(try runDocfs("container delete com.example.Notes --force '\(fixture.mountPoint)'").status == 0)
        #expect(try names(fixture.mountPoint) == [])
        #expect(errnoOf(lstat(fixture.path("Jottings"), &st)) == ENOENT)
        #expect(try runDocfs("query 'container == \"com.example.Notes\"' --store '\(fixture.store)'").output == "")
        #expect(try runDocfs("index check --store '\(fixture.store)'").status == 0)
    }
}
