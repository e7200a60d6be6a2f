import CLinux
import DocfsCore
import DocfsFilesystem
import DocfsProvider
import DocfsSync
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Promised items in-process (issue 23 §1): a store that downloads on demand lists a document
/// another machine made with its real size and no content on disk; a read through the
/// filesystem fetches it, byte-exact, and the rest follows in the background; writes and
/// truncates download it first; nothing the store sends up or keeps as a version is read from
/// the empty file; a read with no way to the remote fails (EIO) within the bound and works
/// once the remote is back.
@Suite struct PromisedItemsTests {
    typealias Machine = TwoStoresInStepTests.Machine

    static let onDemand = #"{"sync": {"downloads": "onDemand", "downloadWaitSeconds": 2}, "versions": {"keep": 1000000, "thinningWindowSeconds": 0}}"#

    /// `count` bytes of text no two runs of which repeat (so it cuts into several chunks).
    static func text(_ count: Int, seed: UInt64) -> String {
        var state = seed
        var bytes = [UInt8](repeating: 0, count: count)
        let digits = Array("0123456789abcdef".utf8)
        for i in 0..<count {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            bytes[i] = digits[Int(state >> 60)]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// a saves `path` as `content`; b (on demand) takes it, promised.
    func promisedOnB(_ path: String, _ content: String) throws -> (InMemoryRemote, Machine, Machine, UInt64) {
        try TwoStoresInStepTests().twoMachinesInStep(on: path, content, bSettings: Self.onDemand)
    }

    func backing(_ machine: Machine, _ path: String) -> stat {
        var st = stat()
        _ = stat(machine.documents + "/" + path, &st)
        return st
    }

    func isPromised(_ machine: Machine, _ path: String) -> Bool {
        let fd = open(machine.documents + "/" + path, O_RDONLY | O_CLOEXEC)
        defer { close(fd) }
        return PromisedContent.promisedNumber(fd) != nil
    }

    /// Reads `length` bytes at `offset` of `path` through b's filesystem.
    func read(_ machine: Machine, _ path: String, offset: Int, length: Int) throws -> String {
        String(decoding: try machine.read(path, offset: offset, length: length), as: UTF8.self)
    }

    /// `user.docfs.status` of `path` through the filesystem.
    func status(_ machine: Machine, _ path: String) -> String? {
        guard let node = try? machine.filesystem.lookup(parent: 1, name: FileName(path)).node,
              case .bytes(let value)? = try? machine.filesystem.getExtendedAttribute(node, name: "user.docfs.status", size: 4096)
        else { return nil }
        return String(decoding: value, as: UTF8.self)
    }

    func waitUntilFulfilled(_ machine: Machine, _ path: String) -> Bool {
        for _ in 0..<500 where isPromised(machine, path) { usleep(10_000) }
        return !isPromised(machine, path)
    }

    @Test func aDocumentFromAnotherMachineIsListedPromisedAndFetchedWhenRead() throws {
        let content = Self.text(6 << 20, seed: 1)
        let (_, a, b, item) = try promisedOnB("big.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        // Listed with its real size and id, no content on disk, nothing fetched.
        let st = backing(b, "big.txt")
        #expect(st.st_size == off_t(content.utf8.count))
        #expect(Int64(st.st_blocks) * 512 < Int64(st.st_size) / 4)
        #expect(b.id("big.txt") == item)
        #expect(isPromised(b, "big.txt"))
        #expect(b.filesystem.shared.promises.fetchedBytes.load(ordering: .relaxed) == 0)
        #expect(status(b, "big.txt") == "promised")
        // Where its chunks lie came with the version: a first read asks the remote for nothing else.
        let promisedFD = open(b.documents + "/big.txt", O_RDONLY | O_CLOEXEC)
        defer { close(promisedFD) }
        let number = try #require(PromisedContent.promisedNumber(promisedFD))
        let promise = try #require(try PromisedContent(directory: b.store.layout.promisedDirectory).record(of: item, number: number))
        #expect(promise.offsets?.last == Int64(content.utf8.count) && promise.manifest.count > 1)
        // The filesystem shows it whole: blocks for every byte, data everywhere.
        let node = try b.filesystem.lookup(parent: 1, name: FileName("big.txt"))
        #expect(Int64(node.attributes.st_blocks) == (Int64(content.utf8.count) + 511) / 512)
        let file = try b.filesystem.open(node.node, flags: O_RDONLY, caller: .daemon)
        #expect(try b.filesystem.seek(file.handle, offset: 4096, whence: DOCFS_SEEK_HOLE) == off_t(content.utf8.count))
        #expect(try b.filesystem.seek(file.handle, offset: 4096, whence: DOCFS_SEEK_DATA) == 4096)
        // A read in the middle answers the right bytes.
        let middle = 3 << 20
        let bytes = try b.filesystem.read(file.handle, size: 4096, offset: off_t(middle))
        b.filesystem.release(file.handle)
        #expect(String(decoding: bytes, as: UTF8.self) == String(Array(content.utf8)[middle..<(middle + 4096)].map { Character(UnicodeScalar($0)) }))
        // The rest follows in the background; then the file is an ordinary one, as a's.
        let during = status(b, "big.txt")
        #expect(during == "current" || during?.hasPrefix("downloading ") == true, "\(during ?? "none")")
        #expect(waitUntilFulfilled(b, "big.txt"))
        #expect(status(b, "big.txt") == "current")
        #expect(b.content("big.txt") == content)
        #expect(b.filesystem.shared.promises.fetchedBytes.load(ordering: .relaxed) == Int64(content.utf8.count))
        #expect(backing(b, "big.txt").st_mtim.tv_sec == backing(a, "big.txt").st_mtim.tv_sec)
        #expect(Int64(backing(b, "big.txt").st_blocks) * 512 >= Int64(content.utf8.count))
        #expect(b.versionNumber("big.txt") == max(a.versionNumber("big.txt"), 1))
        #expect(try FileManager.default.contentsOfDirectory(atPath: b.store.layout.promisedDirectory).isEmpty)
    }

    @Test func aWriteToAPromisedDocumentDownloadsItFirstAndGoesUpWhole() throws {
        let content = Self.text(2 << 20, seed: 2)
        let (_, a, b, _) = try promisedOnB("doc.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        #expect(isPromised(b, "doc.txt"))
        let node = try b.filesystem.lookup(parent: 1, name: FileName("doc.txt")).node
        let file = try b.filesystem.open(node, flags: O_WRONLY, caller: .daemon)
        #expect(!isPromised(b, "doc.txt"))
        _ = try b.filesystem.write(file.handle, bytes: Array("EDITED".utf8), offset: 0)
        try b.filesystem.flush(file.handle)
        b.filesystem.release(file.handle)
        let edited = "EDITED" + content.dropFirst(6)
        #expect(b.content("doc.txt") == edited)
        try b.engine.syncOnce()
        try a.engine.syncOnce()
        #expect(a.content("doc.txt") == edited)
    }

    @Test func aTruncateOfAPromisedDocumentDownloadsItFirst() throws {
        let content = Self.text(1 << 20, seed: 3)
        let (_, a, b, _) = try promisedOnB("doc.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        let node = try b.filesystem.lookup(parent: 1, name: FileName("doc.txt")).node
        var changes = AttributeChanges()
        changes.size = 1000
        _ = try b.filesystem.setAttributes(of: node, handle: nil, changes, caller: .daemon)
        #expect(b.content("doc.txt") == String(content.prefix(1000)))
        try b.engine.syncOnce()
        try a.engine.syncOnce()
        #expect(a.content("doc.txt") == String(content.prefix(1000)))
    }

    @Test func aModeChangeOfAPromisedDocumentSendsItsContentUnchanged() throws {
        let content = Self.text(1 << 20, seed: 4)
        let (_, a, b, _) = try promisedOnB("doc.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        let node = try b.filesystem.lookup(parent: 1, name: FileName("doc.txt")).node
        var changes = AttributeChanges()
        changes.mode = 0o600
        _ = try b.filesystem.setAttributes(of: node, handle: nil, changes, caller: .daemon)
        try b.engine.syncOnce()
        try a.engine.syncOnce()
        #expect(backing(a, "doc.txt").st_mode & 0o777 == 0o600)
        #expect(a.content("doc.txt") == content)
        #expect(isPromised(b, "doc.txt"))
        #expect(b.filesystem.shared.promises.fetchedBytes.load(ordering: .relaxed) == 0)
    }

    /// A new version of a document still promised here arrives promised too, and the content
    /// it replaces is kept as a version still on the remote: nothing comes down until a version
    /// is read, then that one alone; with nothing to fetch it (no daemon), reading it fails
    /// with what to do, never with the empty file's zeros.
    @Test func aNewVersionOverAPromisedDocumentKeepsTheOldOnePromised() throws {
        let first = Self.text(1 << 20, seed: 5)
        let (_, a, b, item) = try promisedOnB("doc.txt", first)
        defer { a.cleanUp(); b.cleanUp() }
        let second = Self.text(1 << 20, seed: 6)
        try a.save("doc.txt", second)
        try a.engine.syncOnce()
        try b.engine.syncOnce()
        let fetched = { b.filesystem.shared.promises.fetchedBytes.load(ordering: .relaxed) }
        #expect(fetched() == 0)
        #expect(isPromised(b, "doc.txt"))
        #expect(b.versionList(of: item) == a.versionList(of: item))
        let id = ItemID(rawValue: item)
        let kept = try #require(b.store.versions.versions(of: id).first)
        #expect(b.store.versions.isPromised(id, version: kept.version))
        // Promised, it takes no room in the store's count; fetched, it does.
        let usedBefore = b.store.versions.storedSize()
        #expect(VersionStore(directory: b.store.versions.directory, policy: .defaults).storedSize() == usedBefore)
        let unserved = VersionStore(directory: b.store.versions.directory, policy: .defaults)
        #expect(throws: DocfsError.self) { try unserved.openContent(id, version: kept.version, current: b.documents + "/doc.txt") }
        // Read: fetched, that version alone, byte-exact; an ordinary kept version from then on.
        let contents = try b.keptContents(of: item, at: "doc.txt")
        #expect(contents[kept.version] == first)
        #expect(fetched() == Int64(first.utf8.count))
        #expect(!b.store.versions.isPromised(id, version: kept.version))
        #expect(b.store.versions.storedSize() - usedBefore == Int64(first.utf8.count))
        #expect(isPromised(b, "doc.txt"))
        #expect(try read(b, "doc.txt", offset: 4096, length: 64) == String(second.dropFirst(4096).prefix(64)))
    }

    /// Versions another machine made that arrive beside a promised document (`keepBeside`: a
    /// third machine's conflict version here; the versions a machine skipped, and saves set
    /// aside, take the same path) are kept promised too (issue 23). Nothing is fetched until
    /// one is read; then that one alone, byte-exact.
    @Test func remoteVersionsKeptBesideAPromisedDocumentStayPromised() throws {
        let first = Self.text(1 << 20, seed: 40)
        let (remote, a, b, item) = try promisedOnB("plan.txt", first)
        let c = try Machine("c", remote: remote, firstID: 2_000_000_000, settings: TwoStoresInStepTests.everyVersion)
        defer { a.cleanUp(); b.cleanUp(); c.cleanUp() }
        try c.engine.syncOnce()
        let second = Self.text(1 << 20 + 11, seed: 41), losing = Self.text(1 << 20 + 22, seed: 42), fourth = Self.text(1 << 20 + 33, seed: 43)
        try a.save("plan.txt", second)
        try a.engine.syncOnce()
        try c.save("plan.txt", losing)  // from version 1: loses to a's, a conflict version on the remote
        try c.engine.syncOnce()
        try a.engine.syncOnce()
        try a.save("plan.txt", fourth)
        try a.engine.syncOnce()
        try b.engine.syncOnce()
        let fetched = { b.filesystem.shared.promises.fetchedBytes.load(ordering: .relaxed) }
        #expect(fetched() == 0)
        #expect(isPromised(b, "plan.txt"))
        #expect(b.versionList(of: item) == a.versionList(of: item))
        let id = ItemID(rawValue: item)
        let kept = b.store.versions.versions(of: id)
        #expect(kept.count == 3, "\(b.versionList(of: item))")
        #expect(kept.contains { $0.kind == .conflict }, "\(b.versionList(of: item))")
        for record in kept { #expect(b.store.versions.isPromised(id, version: record.version), "version \(record.version) \(record.kind)") }
        // Read: each fetched alone and byte-exact, as on a.
        let expected = try a.keptContents(of: item, at: "plan.txt")
        #expect(Set(expected.values) == [first, second, losing])
        let conflict = try #require(kept.first { $0.kind == .conflict })
        _ = try b.store.versions.openContent(id, version: conflict.version, current: b.documents + "/plan.txt")
        #expect(fetched() == Int64(losing.utf8.count))
        #expect(try b.keptContents(of: item, at: "plan.txt") == expected)
        #expect(fetched() == Int64(first.utf8.count + second.utf8.count + losing.utf8.count))
        for record in kept { #expect(!b.store.versions.isPromised(id, version: record.version)) }
        #expect(isPromised(b, "plan.txt"))
    }

    /// The record of a promise goes with what it stood for: a version kept promised that is
    /// removed, a promised document another machine deleted.
    @Test func promisesGoWithWhatTheyStoodFor() throws {
        let (_, a, b, item) = try promisedOnB("gone.txt", Self.text(1 << 20, seed: 10))
        defer { a.cleanUp(); b.cleanUp() }
        try a.save("gone.txt", Self.text(1 << 20, seed: 11))
        try a.engine.syncOnce()
        try b.engine.syncOnce()
        let records = { (try? FileManager.default.contentsOfDirectory(atPath: b.store.layout.promisedDirectory))?.filter { $0.hasSuffix(".json") } ?? [] }
        #expect(records().count == 2, "\(records())")  // the current content's and the kept version's
        let id = ItemID(rawValue: item)
        let kept = try #require(b.store.versions.versions(of: id).first)
        b.store.versions.remove(id, version: kept.version)
        #expect(records().count == 1, "\(records())")
        try a.filesystem.unlink(parent: 1, name: "gone.txt")
        try a.engine.syncOnce()
        try b.engine.syncOnce()
        #expect(b.id("gone.txt") == nil)
        #expect(records().isEmpty, "\(records())")
        #expect(b.filesystem.shared.promises.fetchedBytes.load(ordering: .relaxed) == 0)
    }

    /// Versions kept promised come down before the remote's retention would drop them: those
    /// kept before the cutoff are fetched (the sync loop's daily pass), the others wait.
    @Test func versionsKeptPromisedAreFetchedBeforeTheRemotesRetentionEnds() throws {
        let first = Self.text(1 << 20, seed: 7), second = Self.text(1 << 20, seed: 8)
        let (_, a, b, item) = try promisedOnB("notes.txt", first)
        defer { a.cleanUp(); b.cleanUp() }
        try a.save("notes.txt", second)
        try a.engine.syncOnce()
        try b.engine.syncOnce()
        try a.save("notes.txt", "third\n")
        try a.engine.syncOnce()
        try b.engine.syncOnce()
        let id = ItemID(rawValue: item)
        let kept = b.store.versions.versions(of: id)
        #expect(kept.count == 2 && kept.allSatisfy { b.store.versions.isPromised(id, version: $0.version) }, "\(kept)")
        // Kept before the cutoff: the older one only.
        let cutoff = (kept[0].kept + kept[1].kept) / 2
        #expect(kept[0].kept < kept[1].kept)
        let fetched = b.engine.store.fetchAgingPromisedVersions(keptBefore: cutoff)
        #expect(fetched.fetched == 1 && fetched.problems.isEmpty, "\(fetched)")
        #expect(!b.store.versions.isPromised(id, version: kept[0].version) && b.store.versions.isPromised(id, version: kept[1].version))
        #expect(b.filesystem.shared.promises.fetchedBytes.load(ordering: .relaxed) == Int64(first.utf8.count))
        #expect(b.engine.store.fetchAgingPromisedVersions(keptBefore: Date().timeIntervalSince1970 + 1).fetched == 1)
        #expect(try b.keptContents(of: item, at: "notes.txt") == [kept[0].version: first, kept[1].version: second])
        #expect(try FileManager.default.contentsOfDirectory(atPath: b.store.versions.directory + "/.promised").isEmpty)
    }

    /// A first read's chunks are fetched alone: the download's background runs are asked for
    /// only once they landed, so they do not compete with them (a first byte within 100 ms).
    @Test func aFirstReadsChunksComeDownBeforeTheBackgroundsRuns() throws {
        let content = Self.text(6 << 20, seed: 11)
        let (remote, a, b, _) = try promisedOnB("big.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        let promises = b.filesystem.shared.promises
        // Each call's chunks, and whether a chunk had come down before it.
        let calls = Mutex<[(count: Int, afterALanding: Bool)]>([])
        remote.beforeEachFetch { digests in
            let landed = promises.fetchedBytes.load(ordering: .relaxed) > 0
            calls.withLock { $0.append((digests.count, landed)) }
        }
        #expect(try read(b, "big.txt", offset: 0, length: 4096) == String(content.prefix(4096)))
        #expect(waitUntilFulfilled(b, "big.txt"))
        remote.beforeEachFetch(nil)
        #expect(b.content("big.txt") == content)
        let made = calls.withLock { $0 }
        #expect(made.count >= 2 && made.first?.count == 1 && made.first?.afterALanding == false, "\(made)")
        #expect(made.dropFirst().allSatisfy { $0.afterALanding }, "\(made)")
    }

    @Test func aReadWithNoWayToTheRemoteFailsWithinTheBoundAndWorksOnceItIsBack() throws {
        let content = Self.text(1 << 20, seed: 6)
        let (remote, a, b, item) = try promisedOnB("doc.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        b.sync.fetchPromisedContent(from: nil)
        let start = Date()
        #expect(throws: DocfsError.self) { try read(b, "doc.txt", offset: 0, length: 100) }
        #expect(Date().timeIntervalSince(start) < 3)
        #expect(b.filesystem.shared.promises.failure(of: item) != nil)
        #expect(isPromised(b, "doc.txt"))
        let failed = status(b, "doc.txt")
        #expect(failed?.hasPrefix("download failed: ") == true && failed?.contains("not linked") == true, "\(failed ?? "none")")
        b.sync.fetchPromisedContent(from: remote)
        #expect(try read(b, "doc.txt", offset: 0, length: 100) == String(content.prefix(100)))
        #expect(waitUntilFulfilled(b, "doc.txt"))
        #expect(b.content("doc.txt") == content)
        #expect(b.filesystem.shared.promises.failure(of: item) == nil)
        #expect(status(b, "doc.txt") == "current")
    }

    @Test func evictionGivesTheSpaceBackButLeavesPinnedOpenAndUnsentFilesAlone() throws {
        let content = Self.text(2 << 20, seed: 7)
        let (_, a, b, item) = try promisedOnB("doc.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        let id = ItemID(rawValue: item)
        #expect(try b.filesystem.download(id) == Int64(content.utf8.count))
        #expect(!isPromised(b, "doc.txt") && b.content("doc.txt") == content)
        // Evicted: promised again, its blocks given back, the same content when read.
        #expect(try b.filesystem.evict(id) >= Int64(content.utf8.count))
        #expect(isPromised(b, "doc.txt") && status(b, "doc.txt") == "promised")
        #expect(Int64(backing(b, "doc.txt").st_blocks) * 512 < 64 << 10)
        #expect(backing(b, "doc.txt").st_mtim.tv_sec == backing(a, "doc.txt").st_mtim.tv_sec)
        #expect(try b.filesystem.evict(id) == 0, "promised already")
        #expect(try read(b, "doc.txt", offset: 1 << 20, length: 10) == String(Array(content.utf8)[(1 << 20)..<((1 << 20) + 10)].map { Character(UnicodeScalar($0)) }))
        #expect(waitUntilFulfilled(b, "doc.txt"))
        // Pinned: downloaded, shown pinned, never evicted until unpinned.
        try b.filesystem.pin(id, true)
        #expect(status(b, "doc.txt") == "pinned")
        #expect(throws: DocfsError.self) { try b.filesystem.evict(id) }
        try b.filesystem.pin(id, false)
        #expect(status(b, "doc.txt") == "current")
        // Open: left alone until closed.
        let node = try b.filesystem.lookup(parent: 1, name: FileName("doc.txt")).node
        let file = try b.filesystem.open(node, flags: O_RDONLY, caller: .daemon)
        #expect(throws: DocfsError.self) { try b.filesystem.evict(id) }
        b.filesystem.release(file.handle)
        #expect(try b.filesystem.evict(id) > 0)
        // Changed here and not gone up: left alone.
        try b.save("doc.txt", "changed on b\n")
        #expect(throws: DocfsError.self) { try b.filesystem.evict(id) }
        #expect(b.content("doc.txt") == "changed on b\n")
        try b.engine.syncOnce()
        #expect(try b.filesystem.evict(id) > 0)
        #expect(try read(b, "doc.txt", offset: 0, length: 100) == "changed on b\n")
    }

    /// A promised file whose record was lost (records are not synced one by one: a crash) is
    /// never taken for its empty bytes: its record is made again from the version the item is
    /// in step with and the read answers the content; when that version is not what the file
    /// stands for (a damaged store), a read fails, and nothing is sent up from it.
    @Test func aPromisedFileWithoutItsRecordIsNeverReadAsContent() throws {
        let content = Self.text(1 << 20, seed: 8)
        let (_, a, b, item) = try promisedOnB("doc.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        func loseTheRecords() throws {
            for name in try FileManager.default.contentsOfDirectory(atPath: b.store.layout.promisedDirectory) where name.hasPrefix("\(item)-") {
                try FileManager.default.removeItem(atPath: b.store.layout.promisedDirectory + "/" + name)
            }
        }
        try loseTheRecords()
        try "{\"item\":".write(toFile: b.store.layout.promisedDirectory + "/\(item)-1.json", atomically: false, encoding: .utf8)  // cut short
        #expect(try read(b, "doc.txt", offset: 1000, length: 100) == String(content.dropFirst(1000).prefix(100)))
        #expect(waitUntilFulfilled(b, "doc.txt") && b.content("doc.txt") == content)
        // Promised again, its record lost, and the file no longer as large as the version.
        let id = ItemID(rawValue: item)
        #expect(try b.filesystem.evict(id) > 0 && isPromised(b, "doc.txt"))
        try loseTheRecords()
        #expect(truncate(b.documents + "/doc.txt", off_t(content.utf8.count - 1)) == 0)
        #expect(throws: DocfsError.self) { try read(b, "doc.txt", offset: 0, length: 100) }
        #expect(status(b, "doc.txt")?.contains("missing") == true, "\(status(b, "doc.txt") ?? "none")")
        let node = try b.filesystem.lookup(parent: 1, name: FileName("doc.txt")).node
        _ = try b.filesystem.setAttributes(of: node, handle: nil, AttributeChanges(mode: 0o600), caller: .daemon)
        _ = try? b.engine.syncOnce()
        try a.engine.syncOnce()
        #expect(a.content("doc.txt") == content)
    }

    /// A version kept here as a delta of the current content (an append's) is made whole
    /// before an eviction takes that content away: every kept version reads as before.
    @Test func evictionKeepsEveryKeptVersionReadable() throws {
        let content = Self.text(2 << 20, seed: 9)
        let (_, a, b, item) = try promisedOnB("log.txt", content)
        defer { a.cleanUp(); b.cleanUp() }
        let id = ItemID(rawValue: item)
        _ = try b.filesystem.download(id)
        try b.append("log.txt", "one more line\n")
        try b.engine.syncOnce()
        let before = try b.keptContents(of: item, at: "log.txt")
        #expect(before.values.contains(content), "the content before the append is kept")
        #expect(b.store.versions.versions(of: id).contains { $0.isPrefix }, "kept as a delta of the current content")
        #expect(try b.filesystem.evict(id) > 0)
        #expect(try b.keptContents(of: item, at: "log.txt") == before)
    }
}
