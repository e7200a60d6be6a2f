import DocfsChunks
import DocfsCore
@testable import DocfsFilesystem
import DocfsIndex
@testable import DocfsProvider
import DocfsSync
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A real store as the sync engine's local side (issue 22 §0, §2), in-process without the
/// kernel: changes made through the filesystem enter the outbox in the same append as their
/// index records, and the engine sends each item up as the store has it (content as the
/// version store's chunks, its parent folder's id, name, mode, user attributes), a rename as
/// a version of the same item, a deletion as a tombstone; an edit of a big file sends only the
/// chunks it changed.
@Suite struct StoreSyncTests {
    let directory = "/tmp/docfs-storesync-" + UUID().uuidString.prefix(8)

    func write(_ filesystem: Filesystem, parent: NodeID, name: FileName, _ bytes: [UInt8]) throws -> NodeID {
        let (entry, file) = try filesystem.create(parent: parent, name: name, mode: 0o640, flags: O_RDWR, caller: .daemon)
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + (1 << 20))
            _ = try filesystem.write(file.handle, bytes: Array(bytes[offset..<end]), offset: off_t(offset))
            offset = end
        }
        try filesystem.flush(file.handle)
        filesystem.release(file.handle)
        return entry.node
    }

    func text(_ remote: InMemoryRemote, _ version: RemoteVersion) throws -> [UInt8] {
        try (version.chunks ?? []).flatMap { try remote.fetchChunk($0) }
    }

    @Test func changesThroughTheFilesystemGoUpAsTheStoreHasThem() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try LocalStore(path: directory)
        let index = try IndexDatabase(path: store.layout.indexFile)
        let filesystem = try Filesystem(store: store, index: index)
        let sync = try StoreSync(serving: filesystem.shared, author: RemoteAuthor(machine: "a", user: "alice"))
        let remote = InMemoryRemote()
        let engine = SyncEngine(store: sync, remote: remote)
        // Before the link: changes stay local.
        _ = try write(filesystem, parent: 1, name: "before.txt", Array("made before the link".utf8))
        #expect(try index.outbox(limit: 10).isEmpty)
        sync.fillOutbox(true)

        let folder = try filesystem.makeDirectory(parent: 1, name: "Projects", mode: 0o750, caller: .daemon)
        let plan = try write(filesystem, parent: folder.node, name: "plan.txt", Array("the plan".utf8))
        try filesystem.setExtendedAttribute(plan, name: "user.xdg.tags", value: Array("work".utf8), flags: 0)
        #expect(try index.outbox(limit: 100).map(\.item).count >= 2)
        let round = try engine.syncOnce()
        #expect(round.uploaded >= 2)
        #expect(try index.outbox(limit: 10).isEmpty)

        let log = try remote.changes(after: .start, limit: 100).changes.map(\.version)
        let folderID = try #require(ItemAttributes.id(in: try filesystem.shared.paths.openPlace(
            StorePlace(container: ContainerID("docfs.default"), scope: .documents, path: "")), name: "Projects")).rawValue
        let planVersion = try #require(log.last { $0.name == "plan.txt" })
        #expect(planVersion.parent == folderID && planVersion.kind == .file && planVersion.mode == 0o640)
        #expect(try text(remote, planVersion) == Array("the plan".utf8) && planVersion.size == 8)
        #expect(planVersion.attributes["user.xdg.tags"] == Array("work".utf8))
        #expect(planVersion.attributes.keys.allSatisfy { !$0.hasPrefix("user.docfs.") })
        let folderVersion = try #require(log.last { $0.item == folderID })
        #expect(folderVersion.kind == .folder && folderVersion.parent == 0 && folderVersion.mode == 0o750)
        #expect(!log.contains { $0.name == "before.txt" })
        // Each item's sync state is the version it went up as.
        #expect(try sync.syncState(of: planVersion.item)?.number == planVersion.number)

        // A rename is a new version of the same item; a deletion a tombstone.
        _ = try filesystem.rename(parent: folder.node, name: "plan.txt", newParent: 1, newName: "final.txt", flags: 0, caller: .daemon)
        try filesystem.unlink(parent: 1, name: "before.txt")
        try engine.syncOnce()
        let renamed = try #require(try remote.currentVersion(of: planVersion.item))
        #expect(renamed.name == "final.txt" && renamed.parent == 0 && renamed.number == planVersion.number + 1)
        #expect(try text(remote, renamed) == Array("the plan".utf8))
        #expect(try remote.changes(after: .start, limit: 100).changes.allSatisfy { $0.version.name != "before.txt" })
        try filesystem.unlink(parent: 1, name: "final.txt")
        try engine.syncOnce()
        #expect(try remote.currentVersion(of: planVersion.item)?.deleted == true)
    }

    @Test func anEditOfABigFileSendsOnlyTheChunksItChanged() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try LocalStore(path: directory)
        let index = try IndexDatabase(path: store.layout.indexFile)
        let filesystem = try Filesystem(store: store, index: index)
        let sync = try StoreSync(serving: filesystem.shared, author: RemoteAuthor(machine: "a", user: "alice"))
        sync.fillOutbox(true)
        let remote = InMemoryRemote()
        let engine = SyncEngine(store: sync, remote: remote)
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<(12 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let node = try write(filesystem, parent: 1, name: "big.bin", bytes)
        try engine.syncOnce()
        let item = try filesystem.nodes.node(node).item.rawValue
        let first = try #require(try remote.currentVersion(of: item))
        let chunkCount = first.manifest.count
        #expect(chunkCount >= 4 && first.size == Int64(bytes.count))
        // One byte in the middle changes: the new manifest shares all but a chunk or two.
        bytes[6 << 20] ^= 0xff
        let file = try filesystem.open(node, flags: O_RDWR, caller: .daemon)
        _ = try filesystem.write(file.handle, bytes: [bytes[6 << 20]], offset: off_t(6 << 20))
        try filesystem.flush(file.handle)
        filesystem.release(file.handle)
        let local = try #require(try sync.current(first.item))
        let missing = try remote.missingChunks(local.manifest)
        #expect(missing.count >= 1 && missing.count <= 2, "\(missing.count) of \(local.manifest.count) chunks are new")
        try engine.syncOnce()
        let second = try #require(try remote.currentVersion(of: first.item))
        #expect(second.number == first.number + 1)
        #expect(try text(remote, second) == bytes)
    }
}
