import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The attribute set of DESIGN §6 as a user meets it, with getfattr and setfattr through a real
/// mount (issue 5 §1): each name's access rule, the values refused, and what reaches the index.
@Suite(.needsRootAndFUSE) struct AttributeSetTests {
    private func run(_ command: String) throws -> (status: Int32, output: String) { try shell(command) }

    @Test func everyDocfsNameKeepsItsAccessRule() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("notes.txt")
        try "hello".write(toFile: f, atomically: false, encoding: .utf8)
        let dump = try run("getfattr --absolute-names -d -m - '\(f)'").output
        for name in ["user.docfs.id", "user.docfs.version", "user.docfs.bookmark"] {
            #expect(dump.contains(name + "="), "\(name) missing from\n\(dump)")
        }
        // Read-only names, present or reserved for later (containers issue): EPERM, and why.
        for name in ["user.docfs.id", "user.docfs.version", "user.docfs.bookmark", "user.docfs.conflict", "user.docfs.external",
                     "user.docfs.container", "user.docfs.original", "user.docfs.local-path", "user.docfs.container-id"] {
            let set = try run("setfattr -n \(name) -v 1 '\(f)'")
            #expect(set.status != 0 && set.output.contains("Operation not permitted"), "\(name): \(set.output)")
            let remove = try run("setfattr -x \(name) '\(f)'")
            #expect(remove.status != 0, "\(name) could be removed")
        }
        #expect(fixture.log.contains("user.docfs.original is kept by docfs"))
        // Absent ones answer ENODATA as any missing attribute does.
        for name in ["user.docfs.conflict", "user.docfs.external", "user.docfs.thumbnail", "user.docfs.skip-backup"] {
            #expect(errnoOf(docfs_getxattr(f, name, nil, 0)) == ENODATA, "\(name)")
        }
        // skip-backup takes 1 or 0.
        #expect(try run("setfattr -n user.docfs.skip-backup -v yes '\(f)'").output.contains("Invalid argument"))
        #expect(try run("setfattr -n user.docfs.skip-backup -v 1 '\(f)'").status == 0)
        #expect(try run("getfattr --absolute-names --only-values -n user.docfs.skip-backup '\(f)'").output == "1")
        // Size-0 probes and ERANGE, on a computed name too.
        let length = docfs_getxattr(f, "user.docfs.bookmark", nil, 0)
        #expect(length > 100)
        var small = [UInt8](repeating: 0, count: 10)
        #expect(errnoOf(docfs_getxattr(f, "user.docfs.bookmark", &small, small.count)) == ERANGE)
        // No value over 64 KiB is taken (the kernel's limit).
        let huge = [UInt8](repeating: 0x61, count: 65537)
        #expect(errnoOf(docfs_setxattr(f, "user.big", huge, huge.count, 0)) == E2BIG)
    }

    @Test func userAttributesAreCheckedWhereTheIndexReadsThem() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("data.bin")
        try "{\"a\": 1}".write(toFile: f, atomically: false, encoding: .utf8)
        for bad in ["json", "application/", "/json", "application/js on", "text/plain/extra"] {
            #expect(errnoOf(docfs_setxattr(f, "user.mime_type", bad, bad.utf8.count, 0)) == EINVAL, "\(bad)")
        }
        let invalidUTF8: [UInt8] = [0x66, 0xFF, 0xFE]
        #expect(errnoOf(docfs_setxattr(f, "user.xdg.comment", invalidUTF8, invalidUTF8.count, 0)) == EINVAL)
        #expect(try run("setfattr -n user.mime_type -v application/json '\(f)'").status == 0)
        #expect(try run("setfattr -n user.xdg.tags -v 'work,ünïcode' '\(f)'").status == 0)
        #expect(try run("setfattr -n user.xdg.comment -v 'the settings' '\(f)'").status == 0)
        #expect(try run("setfattr -n user.anything -v kept '\(f)'").status == 0)
        // The user's content type wins over detection, and the index has all of it at once.
        let query = try run("'\(MountFixture.binary)' query 'contentType == \"application/json\" AND tags CONTAINS \"ünïcode\" AND comment == \"the settings\"' '\(fixture.mountPoint)'")
        #expect(query.output.contains("data.bin"), "\(query.output)")
    }

    @Test func userAttributesAndSkipBackupSurviveSafeSaves() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("essay.txt")
        try "first draft\n".write(toFile: f, atomically: false, encoding: .utf8)
        #expect(try run("setfattr -n user.docfs.skip-backup -v 1 '\(f)' && setfattr -n user.xdg.tags -v draft '\(f)' && setfattr -n user.mime_type -v text/x-essay '\(f)'").status == 0)
        let id = try #require(itemID(f))
        #expect(try run("sed -i 's/first/second/' '\(f)'").status == 0)
        #expect(try run("python3 -c \"import os; open('\(f).tmp','w').write('third'); os.replace('\(f).tmp', '\(f)')\"").status == 0)
        #expect(itemID(f) == id)
        #expect(attribute(f, "user.docfs.skip-backup") == "1")
        #expect(attribute(f, "user.xdg.tags") == "draft")
        #expect(attribute(f, "user.mime_type") == "text/x-essay")
    }
}
