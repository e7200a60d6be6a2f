import DocfsCore
@testable import DocfsFilesystem
import DocfsProvider
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The id given at a create is stored only on the file the create made: a handle whose
/// number reaches another file by the time it is stored (its descriptor closed under it and the
/// number reused) leaves that file's identity alone (issue 22: a machine's index once took an
/// applied document for a file made there).
@Suite struct PendingItemIDsTests {
    /// A fresh folder for one test (the caller removes it) and a pending-id table.
    static func start() throws -> (String, PendingItemIDs, ItemID) {
        let folder = NSTemporaryDirectory() + "pending-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return (folder, PendingItemIDs(), ItemID(rawValue: 4_398_046_511_117))
    }

    static func file(_ folder: String, _ name: String) throws -> (fd: Int32, key: BackingKey) {
        let fd = open(folder + "/" + name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        var st = stat()
        #expect(fstat(fd, &st) == 0)
        return (fd, BackingKey(st))
    }

    @Test func theIDIsStoredOnTheFileTheCreateMade() throws {
        let (folder, pending, id) = try Self.start()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let made = try Self.file(folder, "made.txt")
        defer { close(made.fd) }
        #expect(pending.add(id, file: made.key, handle: UInt64(made.fd), fd: made.fd) == id)
        #expect(pending.item(of: made.key) == id)
        #expect(try pending.store(createdAs: UInt64(made.fd), fd: made.fd))
        #expect(ItemAttributes.id(ofDescriptor: made.fd) == id)
        #expect(pending.item(of: made.key) == nil)
    }

    @Test func aHandleThatReachesAnotherFileStoresNothingThere() throws {
        let (folder, pending, id) = try Self.start()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let made = try Self.file(folder, "made.txt")
        defer { close(made.fd) }
        let other = try Self.file(folder, "applied.txt")
        defer { close(other.fd) }
        _ = pending.add(id, file: made.key, handle: 265, fd: made.fd)
        // Handle 265's number now reaches another file: the store refuses, says so, writes nothing.
        #expect(throws: DocfsError.self) { try pending.store(createdAs: 265, fd: other.fd) }
        #expect(ItemAttributes.id(ofDescriptor: other.fd) == nil)
        #expect(ItemAttributes.id(ofDescriptor: made.fd) == nil)
        // Nor does the store of every pending id at unmount.
        _ = pending.add(id, file: made.key, handle: UInt64(other.fd), fd: made.fd)
        pending.storeAll()
        #expect(ItemAttributes.id(ofDescriptor: other.fd) == nil)
    }
}
