import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Safe-saves keep identity (C3, issue 3 §3): real editors and tools that save through a new
/// file leave the document with its item id and user attributes, and exactly one new version
/// whose predecessor is kept.
@Suite(.needsRootAndFUSE) struct SafeSaveTests {
    /// A document with an id, a user attribute, and version 1 holding "first draft".
    private func document(_ fixture: MountFixture, _ name: String = "report.txt") throws -> (path: String, id: UInt64) {
        let path = fixture.path(name)
        try write("first draft\n", to: path)
        #expect(docfs_setxattr(path, "user.xdg.tags", "work", 4, 0) == 0)
        return (path, try #require(itemID(path)))
    }

    private func expectReplaced(_ fixture: MountFixture, _ path: String, id: UInt64, content: String,
                                sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(itemID(path) == id, "id", sourceLocation: sourceLocation)
        // The inode number is the file's own (POSIX: the saved file's), the id the document's.
        let backing = fixture.documents + path.dropFirst(fixture.mountPoint.count)
        #expect(inode(path) == inode(backing), "inode number", sourceLocation: sourceLocation)
        #expect(attribute(path, "user.xdg.tags") == "work", "user attribute", sourceLocation: sourceLocation)
        #expect(attribute(path, "user.docfs.version") == "2", "version", sourceLocation: sourceLocation)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == content, sourceLocation: sourceLocation)
        let versions = try versionsJSON(fixture, path)
        #expect(versions.map(\.version) == [2, 1], "exactly one new version", sourceLocation: sourceLocation)
        #expect(try kept(fixture, id, 1) == "first draft\n", "previous content kept", sourceLocation: sourceLocation)
    }

    @Test func sedInPlace() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture)
        let result = try shell("sed -i 's/first/second/' '\(path)'")
        #expect(result.status == 0, "\(result.output)")
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
    }

    @Test func pythonOsReplace() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture)
        let script = """
            import os, tempfile
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname('\(path)'))
            os.write(fd, b'second draft\\n'); os.fsync(fd); os.close(fd)
            os.replace(tmp, '\(path)')
            """
        let result = try shell("python3 -c \"$SCRIPT\"", environment: ["SCRIPT": script])
        #expect(result.status == 0, "\(result.output)")
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
    }

    @Test func vimRenamingTheDocumentToABackup() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture)
        // backupcopy=no: vim renames the document to report.txt~, writes a new report.txt and
        // deletes the backup.
        let result = try shell("vim -u NONE -N -n -es -c 'set backupskip= backupcopy=no writebackup nobackup' "
                               + "-c '%s/first/second/' -c 'wq' '\(path)'")
        #expect(result.status == 0, "\(result.output)")
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
        #expect(access(path + "~", F_OK) != 0)
    }

    @Test func vimKeepingItsBackup() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture)
        let result = try shell("vim -u NONE -N -n -es -c 'set backupskip= backupcopy=no backup' -c '%s/first/second/' -c 'wq' '\(path)'")
        #expect(result.status == 0, "\(result.output)")
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
        // The backup is a file of its own now, with its own id.
        let backup = try #require(itemID(path + "~"))
        #expect(backup != id)
        #expect(try String(contentsOfFile: path + "~", encoding: .utf8) == "first draft\n")
    }

    @Test func vimWritingInPlace() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture)
        let result = try shell("vim -u NONE -N -n -es -c 'set backupskip= backupcopy=yes' -c '%s/first/second/' -c 'wq' '\(path)'")
        #expect(result.status == 0, "\(result.output)")
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
    }

    @Test func renameExchangeSave() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture)
        let temporary = fixture.path(".report.txt.new")
        try write("second draft\n", to: temporary)
        #expect(docfs_renameat2(AT_FDCWD, temporary, AT_FDCWD, path, DOCFS_RENAME_EXCHANGE) == 0)
        // The old content, now under the temporary name, is another item; deleting it loses
        // nothing: it is the kept version.
        let swapped = try #require(itemID(temporary))
        #expect(swapped != id)
        #expect(unlink(temporary) == 0)
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
    }

    @Test func libreOfficeLikeSave() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture, "report.odt")
        // Lock file, a temporary file beside the document, rename over it, lock removed.
        let script = """
            set -e
            cd '\(fixture.mountPoint)'
            printf 'user,host,,date,' > '.~lock.report.odt#'
            printf 'second draft\\n' > lu4711abc.tmp
            mv -f lu4711abc.tmp report.odt
            rm '.~lock.report.odt#'
            """
        let result = try shell(script)
        #expect(result.status == 0, "\(result.output)")
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
    }

    @Test func attributesTheNewFileSetWin() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let (path, id) = try document(fixture)
        #expect(docfs_setxattr(path, "user.color", "blue", 4, 0) == 0)
        let temporary = fixture.path("report.tmp")
        try write("second draft\n", to: temporary)
        #expect(docfs_setxattr(temporary, "user.color", "red", 3, 0) == 0)
        #expect(rename(temporary, path) == 0)
        try expectReplaced(fixture, path, id: id, content: "second draft\n")
        #expect(attribute(path, "user.color") == "red")
    }

    @Test func renamingOneEstablishedDocumentOverAnotherIsNoSafeSave() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("a\n", to: fixture.path("a"))
        try write("b\n", to: fixture.path("b"))
        let a = try #require(itemID(fixture.path("a")))
        // After a restart neither file counts as a save's temporary file.
        fixture.stop()
        try fixture.start()
        #expect(rename(fixture.path("a"), fixture.path("b")) == 0)
        #expect(itemID(fixture.path("b")) == a)
        #expect(attribute(fixture.path("b"), "user.docfs.version") == "1")
    }
}
