import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// user.* xattrs pass through to the store with ext4's answers for probes, ERANGE, ENODATA and
/// XATTR_CREATE/REPLACE; other namespaces are not offered.
@Suite(.needsRootAndFUSE) struct ExtendedAttributeTests {
    @Test func userAttributesBehaveAsOnExt4() throws {
        try expectSameAsPlainDirectory { dir, r in
            let f = dir + "/doc"
            close(open(f, O_CREAT | O_WRONLY, 0o644))
            mkdir(dir + "/folder", 0o755)
            var buffer = [UInt8](repeating: 0, count: 65536)
            r.call("get missing", docfs_getxattr(f, "user.color", &buffer, buffer.count))
            r.call("set", docfs_setxattr(f, "user.color", "blue", 4, 0))
            r.call("probe size", docfs_getxattr(f, "user.color", nil, 0))
            r.call("get", docfs_getxattr(f, "user.color", &buffer, buffer.count))
            r.note("value", String(decoding: buffer[0..<4], as: UTF8.self))
            r.call("get into small buffer", docfs_getxattr(f, "user.color", &buffer, 2))
            r.call("XATTR_CREATE existing", docfs_setxattr(f, "user.color", "red", 3, DOCFS_XATTR_CREATE))
            r.call("XATTR_REPLACE missing", docfs_setxattr(f, "user.shape", "round", 5, DOCFS_XATTR_REPLACE))
            r.call("XATTR_REPLACE existing", docfs_setxattr(f, "user.color", "green", 5, DOCFS_XATTR_REPLACE))
            r.call("empty value", docfs_setxattr(f, "user.empty", "", 0, 0))
            r.call("get empty", docfs_getxattr(f, "user.empty", &buffer, buffer.count))
            var big = [UInt8](repeating: 0x61, count: 4000)
            r.call("4000-byte value", docfs_setxattr(f, "user.big", &big, big.count, 0))
            r.call("get big", docfs_getxattr(f, "user.big", &buffer, buffer.count))
            var names = [CChar](repeating: 0, count: 4096)
            // Sizes are compared without docfs's own names (user.docfs.*), which ext4 lacks.
            let n = docfs_listxattr(f, &names, names.count)
            let all = names[0..<max(n, 0)].split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
            let docfsBytes = all.filter { $0.hasPrefix(docfsAttributePrefix) }.reduce(0) { $0 + $1.utf8.count + 1 }
            r.note("list probe", docfs_listxattr(f, nil, 0) - docfsBytes)
            r.note("list probe is the list's size", docfs_listxattr(f, nil, 0) == n)
            r.call("list small buffer", docfs_listxattr(f, &names, 3))
            r.note("list", n - docfsBytes)
            r.note("names", all.filter { !$0.hasPrefix(docfsAttributePrefix) }.sorted())
            r.call("remove", docfs_removexattr(f, "user.big"))
            r.call("remove missing", docfs_removexattr(f, "user.big"))
            r.call("set on folder", docfs_setxattr(dir + "/folder", "user.k", "v", 1, 0))
            r.call("get on folder", docfs_getxattr(dir + "/folder", "user.k", &buffer, buffer.count))
            r.call("name too long", docfs_setxattr(f, "user." + String(repeating: "n", count: 251), "v", 1, 0))
            r.call("get on missing file", docfs_getxattr(dir + "/missing", "user.color", &buffer, buffer.count))
            symlink("doc", dir + "/link")
            r.call("lset on symlink", docfs_lsetxattr(dir + "/link", "user.k", "v", 1, 0))
            r.call("lget on symlink", docfs_lgetxattr(dir + "/link", "user.k", &buffer, buffer.count))
            r.call("get through symlink", docfs_getxattr(dir + "/link", "user.color", &buffer, buffer.count))
        }
    }

    @Test func otherNamespacesAreNotOffered() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        close(open(f, O_CREAT | O_WRONLY, 0o644))
        var buffer = [UInt8](repeating: 0, count: 256)
        #expect(errnoOf(docfs_getxattr(f, "security.capability", &buffer, 256)) == ENODATA)
        #expect(errnoOf(docfs_setxattr(f, "trusted.docfs", "x", 1, 0)) == EOPNOTSUPP)
        #expect(errnoOf(docfs_setxattr(f, "security.selinux", "x", 1, 0)) == EOPNOTSUPP)
        #expect(errnoOf(docfs_getxattr(f, "system.posix_acl_access", &buffer, 256)) == ENODATA)
        // A trusted.* attribute put on the backing file by someone else stays invisible.
        #expect(docfs_setxattr(fixture.documents + "/doc", "trusted.secret", "x", 1, 0) == 0)
        var names = [CChar](repeating: 0, count: 1024)
        let n = docfs_listxattr(f, &names, names.count)
        let listed = names[0..<max(n, 0)].split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        #expect(listed.sorted() == ["user.docfs.bookmark", "user.docfs.id", "user.docfs.version"])
    }

    @Test func largestValueRoundTrips() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        close(open(f, O_CREAT | O_WRONLY, 0o644))
        // ext4's in-inode and block limit is 4 KiB-ish per value; the backing disk decides.
        let value = (0..<3000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        #expect(docfs_setxattr(f, "user.blob", value, value.count, 0) == 0)
        var back = [UInt8](repeating: 0, count: 65536)
        let n = docfs_getxattr(f, "user.blob", &back, back.count)
        #expect(n == value.count)
        #expect(Array(back[0..<max(n, 0)]) == value)
    }
}
