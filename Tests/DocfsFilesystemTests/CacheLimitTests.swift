import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import DocfsSync
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The cache limit and `status` in the index (issue 23 §1): content here past the limit goes,
/// least recently used first; a pinned, an open and a changed-but-not-sent document stay; the
/// index says which documents are promised, pinned or local, as their content comes and goes.
@Suite struct CacheLimitTests {
    typealias Machine = TwoStoresInStepTests.Machine
    let promised = PromisedItemsTests()

    func names(_ machine: Machine, status: String) throws -> Set<String> {
        let predicate = try PredicateParser().parse("kind == \"file\" && status == \"\(status)\"")
        return Set(try machine.index.records(matching: IndexQuery(predicate: predicate, scope: .all)).map(\.name))
    }

    func readWhole(_ machine: Machine, _ path: String) throws -> String {
        let text = try promised.read(machine, path, offset: 0, length: 1 << 20)
        #expect(promised.waitUntilFulfilled(machine, path))
        return text
    }

    @Test func theLeastRecentlyUsedGoFirstAndPinnedOpenAndUnsentOnesStay() throws {
        let remote = InMemoryRemote()
        let a = try Machine("a", remote: remote, firstID: 1_000, settings: TwoStoresInStepTests.everyVersion)
        let b = try Machine("b", remote: remote, firstID: 1_000_000_000, settings: PromisedItemsTests.onDemand)
        defer { a.cleanUp(); b.cleanUp() }
        let size = 100 << 10
        let names = ["pinned.txt", "open.txt", "changed.txt", "lru1.txt", "lru2.txt", "lru3.txt"]
        var contents: [String: String] = [:]
        for (i, name) in names.enumerated() {
            contents[name] = PromisedItemsTests.text(size, seed: UInt64(100 + i))
            try a.save(name, contents[name]!)
        }
        try a.engine.syncOnce()
        try b.engine.syncOnce()
        // All promised on b, and the index says so.
        #expect(try self.names(b, status: "promised") == Set(names))
        for name in names { #expect(try readWhole(b, name) == contents[name]) }
        #expect(try self.names(b, status: "promised").isEmpty)
        #expect(try self.names(b, status: "local") == Set(names))
        try b.filesystem.pin(#require(b.id("pinned.txt")).asItem, true)
        #expect(try self.names(b, status: "pinned") == ["pinned.txt"])
        let openNode = try b.filesystem.lookup(parent: 1, name: FileName("open.txt")).node
        let open = try b.filesystem.open(openNode, flags: O_RDONLY, caller: .daemon)
        try b.append("changed.txt", "changed here")
        // Used since, in this order: lru2 and lru3 are now the least recently used of those
        // that may go, the open and the changed ones (used before them) are tried first.
        for name in ["lru2.txt", "lru3.txt", "lru1.txt"] { #expect(try readWhole(b, name) == contents[name]) }

        let used = Int64(6 * size + 12)
        let limit = used - Int64(2 * size) + 1000
        let trim = try b.filesystem.trimContent(toFit: limit)
        #expect(trim.usedBefore == used)
        #expect(trim.evicted == [try #require(b.id("lru2.txt")).asItem, try #require(b.id("lru3.txt")).asItem])
        #expect(trim.used <= limit)
        // Tried first (used longer ago) but kept, each with its reason.
        #expect(trim.kept[try #require(b.id("open.txt")).asItem]?.contains("open") == true, "\(trim.kept)")
        #expect(trim.kept[try #require(b.id("changed.txt")).asItem]?.contains("not yet on the remote") == true, "\(trim.kept)")
        #expect(trim.kept[try #require(b.id("pinned.txt")).asItem] == nil)  // never a candidate
        #expect(try self.names(b, status: "promised") == ["lru2.txt", "lru3.txt"])
        for name in ["lru2.txt", "lru3.txt"] { #expect(promised.isPromised(b, name)) }
        for name in ["pinned.txt", "open.txt", "changed.txt", "lru1.txt"] { #expect(!promised.isPromised(b, name)) }
        #expect(try b.filesystem.read(open.handle, size: 16, offset: 0) == Array(contents["open.txt"]!.utf8.prefix(16)))

        // Closed and sent, they may go; the pinned one never does. An evicted one reads back whole.
        b.filesystem.release(open.handle)
        try b.engine.syncOnce()
        let all = try b.filesystem.trimContent(toFit: 0)
        #expect(Set(all.evicted) == Set(try ["open.txt", "changed.txt", "lru1.txt"].map { try #require(b.id($0)).asItem }))
        #expect(all.used == Int64(size))
        #expect(try self.names(b, status: "promised") == Set(names).subtracting(["pinned.txt"]))
        #expect(try self.names(b, status: "pinned") == ["pinned.txt"])
        #expect(try readWhole(b, "changed.txt") == contents["changed.txt"]! + "changed here")
        #expect(try readWhole(b, "lru2.txt") == contents["lru2.txt"])
    }

    @Test func theLimitIsASizeAShareOfTheDiskOrNone() throws {
        #expect(DownloadPolicy.CacheLimit("20GB") == .bytes(20_000_000_000))
        #expect(DownloadPolicy.CacheLimit("512MiB") == .bytes(512 << 20))
        #expect(DownloadPolicy.CacheLimit("25%") == .shareOfDisk(0.25))
        #expect(DownloadPolicy.CacheLimit("none") == DownloadPolicy.CacheLimit.none)
        for bad in ["", "12 parsecs", "0%", "150%", "-5GB"] { #expect(DownloadPolicy.CacheLimit(bad) == nil, "\(bad)") }
        var disk = statvfs()
        #expect(statvfs("/tmp", &disk) == 0)
        let quarter = try #require(DownloadPolicy.CacheLimit.shareOfDisk(0.25).bytes(forStoreAt: "/tmp"))
        #expect(abs(Double(quarter) - Double(disk.f_blocks) * Double(disk.f_frsize) / 4) < 4096)
        let directory = "/tmp/docfs-cachelimit-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let settings = directory + "/settings.json"
        try #"{"sync": {"downloads": "onDemand", "cacheLimit": 1048576}}"#.write(toFile: settings, atomically: true, encoding: .utf8)
        #expect(try DownloadPolicy.load(from: settings).cacheLimit == .bytes(1 << 20))
        try #"{"sync": {"downloads": "onDemand"}}"#.write(toFile: settings, atomically: true, encoding: .utf8)
        #expect(try DownloadPolicy.load(from: settings).cacheLimit == .shareOfDisk(0.25))
        try #"{"sync": {"cacheLimit": "lots"}}"#.write(toFile: settings, atomically: true, encoding: .utf8)
        #expect(throws: DocfsError.self) { try DownloadPolicy.load(from: settings) }
    }
}

extension UInt64 {
    var asItem: ItemID { ItemID(rawValue: self) }
}
