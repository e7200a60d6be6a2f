import DocfsChunks
import DocfsCore
import Foundation
import Testing
@testable import DocfsProvider

/// Versions kept as chunks (issue 20 §1, §2): copies and settled safe-save files share the
/// chunks their content has in common, read back exactly, and chunks go with the last
/// version that uses them.
@Suite struct VersionChunkTests {
    let directory = NSTemporaryDirectory() + "docfs-chunks-\(UUID().uuidString)"
    let item = ItemID(rawValue: 7)

    func makeStore(maximumTotal: Int64 = 2 << 30) throws -> VersionStore {
        try FileManager.default.createDirectory(atPath: directory + "/versions", withIntermediateDirectories: true)
        var policy = VersionPolicy.defaults
        policy.maximumTotalSize = maximumTotal
        return VersionStore(directory: directory + "/versions", policy: policy)
    }

    func record(_ version: UInt64, size: Int) -> VersionRecord {
        VersionRecord(version: version, kind: .previous, modified: 1, kept: Double(version), size: Int64(size), author: nil)
    }

    /// Pseudo-random bytes: content-defined chunking needs content, not a repeating pattern.
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed | 1
        var out = [UInt8](repeating: 0, count: count)
        for i in 0..<count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            out[i] = UInt8(truncatingIfNeeded: state >> 24)
        }
        return out
    }

    func write(_ bytes: [UInt8], to path: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    func keepCopy(_ store: VersionStore, _ version: UInt64, of path: String, size: Int) throws {
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        try store.keepCopy(of: fd, item: item, record: record(version, size: size))
    }

    func content(_ store: VersionStore, _ version: UInt64, current: String) throws -> [UInt8] {
        try store.bytes(of: item, version: version, current: current)
    }

    func chunkFiles() -> Int {
        (FileManager.default.subpaths(atPath: directory + "/chunks") ?? []).filter { $0.count == 67 }.count
    }

    @Test func copiesShareTheirCommonChunksAndReadBackExactly() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let current = directory + "/current"
        var model = Self.bytes(12 << 20, seed: 1)
        var expected: [UInt64: [UInt8]] = [:]
        for version in UInt64(1)...5 {
            try write(model, to: current)
            try keepCopy(store, version, of: current, size: model.count)
            expected[version] = model
            // Each session edits a little: an insertion and an overwrite.
            // Where the edits land is seeded too: how many chunks they touch depends on it.
            model.insert(contentsOf: Self.bytes(3000, seed: version + 100), at: Int(version * 2_345_677) % model.count)
            let at = Int(version * 1_876_543 + 777) % (model.count - 100)
            model.replaceSubrange(at..<(at + 100), with: Self.bytes(100, seed: version + 200))
        }
        try write(model, to: current)
        let listed = store.versions(of: item)
        #expect(listed.map(\.version) == [1, 2, 3, 4, 5] && listed.allSatisfy { $0.isChunked })
        for version in UInt64(1)...5 {
            #expect(try content(store, version, current: current) == expected[version]!, "version \(version)")
            #expect(store.chunkList(of: item, version: version)?.count ?? 0 >= 4)
        }
        // Five versions of 12 MiB take about one copy and the chunks the edits touched.
        let stored = store.storedSize()
        #expect(stored < Int64(5 * (12 << 20)) / 2, "\(stored) bytes for five 12 MiB versions")
        #expect(store.sameContent(item, version: 5, as: current) == false)
        #expect(store.sameContent(item, version: 1, as: current) == false)
        try write(expected[3]!, to: current)
        #expect(store.sameContent(item, version: 3, as: current))
        // Chunks go with the last version using them; the store's usage follows.
        for version in UInt64(1)...5 {
            store.remove(item, version: version)
            #expect(store.storedSize() == ChunkStore(directory: directory + "/chunks").storedBytes())
        }
        #expect(chunkFiles() == 0)
        #expect(store.storedSize() == 0)
    }

    @Test func theStoreLimitHoldsWithChunksCountedOnce() throws {
        // 10 MiB allowed; five unrelated 3 MiB versions, then five that share most of a 3 MiB file.
        let store = try makeStore(maximumTotal: 10 << 20)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let current = directory + "/current"
        for version in UInt64(1)...5 {
            try write(Self.bytes(3 << 20, seed: version * 17), to: current)
            try keepCopy(store, version, of: current, size: 3 << 20)
            store.prune(item, now: Double(version))
            #expect(store.storedSize() <= 10 << 20, "after version \(version): \(store.storedSize())")
        }
        #expect(store.versions(of: item).map(\.version) == [3, 4, 5], "the oldest went first, down to 90% of the limit")
        var shared = Self.bytes(3 << 20, seed: 99)
        for version in UInt64(6)...10 {
            shared.replaceSubrange(0..<100, with: Self.bytes(100, seed: version))
            try write(shared, to: current)
            try keepCopy(store, version, of: current, size: shared.count)
            store.prune(item, now: Double(version))
        }
        // The shared versions take about one copy: they all fit beside the newest unrelated one.
        #expect(store.versions(of: item).map(\.version).suffix(5) == [6, 7, 8, 9, 10])
        #expect(store.storedSize() <= 10 << 20)
        #expect(store.storedSize() == ChunkStore(directory: directory + "/chunks").storedBytes())
        for version in UInt64(6)...10 {
            shared.replaceSubrange(0..<100, with: Self.bytes(100, seed: version))
            #expect(try content(store, version, current: current) == shared, "version \(version)")
        }
    }

    @Test func aLinkedInFileIsSettledIntoChunks() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = Self.bytes(6 << 20, seed: 9)
        var second = first
        second.replaceSubrange(100..<200, with: Self.bytes(100, seed: 10))
        try write(first, to: directory + "/one")
        try write(second, to: directory + "/two")
        for (version, name) in [(UInt64(1), "one"), (2, "two")] {
            let fd = open(directory + "/" + name, O_RDONLY)
            try store.keepFile(fd, item: item, record: record(version, size: first.count))
            close(fd)
            unlink(directory + "/" + name)  // the replace moves it away
        }
        #expect(store.storedSize() == Int64(2 * first.count))
        #expect(store.settle(item, version: 1) && store.settle(item, version: 2))
        #expect(store.versions(of: item).allSatisfy { $0.isChunked })
        #expect(!FileManager.default.fileExists(atPath: store.contentPath(item, 1)))
        #expect(try content(store, 1, current: "/nonexistent") == first)
        #expect(try content(store, 2, current: "/nonexistent") == second)
        // Only the first chunk differs.
        let firstChunk = store.chunkList(of: item, version: 1)!.first!.length
        #expect(store.storedSize() == Int64(first.count) + firstChunk, "\(store.storedSize())")
    }

    @Test func settlingWaitsWhileTheFileIsStillTheCurrentContent() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = Self.bytes(1 << 20, seed: 3)
        try write(bytes, to: directory + "/current")
        let fd = open(directory + "/current", O_RDONLY)
        try store.keepFile(fd, item: item, record: record(1, size: bytes.count))
        close(fd)
        #expect(store.settle(item, version: 1) == false)  // a second name of the current content
        unlink(directory + "/current")
        #expect(store.settle(item, version: 1))
        #expect(store.versions(of: item).first?.isChunked == true)
    }

    @Test func aDeltaReadsThroughANewerVersionKeptAsChunks() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let current = directory + "/current"
        let original = Self.bytes(3 << 20, seed: 4)
        try write(original, to: current)
        try store.keepPrefix(item: item, record: record(1, size: original.count))
        let fd = open(current, O_RDWR)
        try store.save([1000..<5000], of: item, version: 1, from: fd)
        let patch = Self.bytes(4000, seed: 5)
        _ = patch.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 1000) }
        close(fd)
        var changed = original
        changed.replaceSubrange(1000..<5000, with: patch)
        try keepCopy(store, 2, of: current, size: changed.count)  // version 2: chunks
        try write(Self.bytes(100, seed: 6), to: current)  // the current file moves on
        #expect(try content(store, 1, current: current) == original)
        #expect(try content(store, 2, current: current) == changed)
    }

    @Test func leftoversOfADaemonThatDiedAreCleared() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = Self.bytes(2 << 20, seed: 8)
        try write(bytes, to: directory + "/current")
        try keepCopy(store, 1, of: directory + "/current", size: bytes.count)
        try keepCopy(store, 2, of: directory + "/current", size: bytes.count)
        let folder = directory + "/versions/\(item)"
        // Died while cutting a manifest, after settling but before removing the whole file,
        // and after removing a record but before its chunks.
        try FileManager.default.copyItem(atPath: folder + "/1.chunks", toPath: folder + "/.incoming-dead")
        try write(bytes, to: folder + "/1")
        unlink(folder + "/2.json")
        // ... and between storing a chunk and linking it into a version.
        let stray = directory + "/chunks/ab/ab" + String(repeating: "0", count: 62)
        try FileManager.default.createDirectory(atPath: directory + "/chunks/ab", withIntermediateDirectories: true)
        try write([1, 2, 3], to: stray)
        let again = VersionStore(directory: directory + "/versions", policy: .defaults)
        again.removeLeftovers()
        let left = try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
        #expect(left == ["1.chunks", "1.json"], "\(left)")
        #expect(try content(again, 1, current: "/nonexistent") == bytes)
        #expect(!FileManager.default.fileExists(atPath: stray), "a chunk no version links is gone")
        again.remove(item, version: 1)
        #expect(chunkFiles() == 0)
    }

    @Test(.enabled(if: getuid() == 0, "needs root to mount a small tmpfs: run as root (CI does)"))
    func aFullDiskFailsTheCopyWithENOSPCAndLeavesNothingHalfKept() throws {
        // A store on a 4 MiB tmpfs (the tests run as root), content 6 MiB from elsewhere.
        let small = directory + "/small"
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        guard mount("tmpfs", small, "tmpfs", 0, "size=4m") == 0 else {
            Issue.record("cannot mount a tmpfs (errno \(errno)): this test needs root")
            return
        }
        defer { umount2(small, 2) }
        try FileManager.default.createDirectory(atPath: small + "/versions", withIntermediateDirectories: true)
        let store = VersionStore(directory: small + "/versions", policy: .defaults)
        let bytes = Self.bytes(6 << 20, seed: 12)
        try write(bytes, to: directory + "/current")
        let fd = open(directory + "/current", O_RDONLY)
        defer { close(fd) }
        do {
            try store.keepCopy(of: fd, item: item, record: record(1, size: bytes.count))
            Issue.record("kept 6 MiB on a 4 MiB disk")
        } catch {
            #expect(error.systemErrno == ENOSPC, "\(error)")
        }
        #expect(store.versions(of: item).isEmpty)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: small + "/versions/\(item)")) ?? []).isEmpty)
        #expect((FileManager.default.subpaths(atPath: small + "/chunks") ?? []).filter { $0.count == 67 }.isEmpty)
        // What was kept before the disk filled stays readable.
        let smaller = Array(bytes.prefix(1 << 20))
        try write(smaller, to: directory + "/one")
        let one = open(directory + "/one", O_RDONLY)
        defer { close(one) }
        try store.keepCopy(of: one, item: item, record: record(2, size: smaller.count))
        do {
            try store.keepCopy(of: fd, item: item, record: record(3, size: bytes.count))
        } catch {
            #expect(error.systemErrno == ENOSPC)
        }
        #expect(try content(store, 2, current: "/nonexistent") == smaller)
    }
}
