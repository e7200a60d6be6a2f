import DocfsCore
import Foundation
import Testing
@testable import DocfsProvider

/// Deltas in the version store (issue 20 §1): what a session saved before overwriting, read
/// back exactly through chains of deltas; made whole before a change no delta sees.
@Suite struct VersionDeltaTests {
    let directory = NSTemporaryDirectory() + "docfs-deltas-\(UUID().uuidString)"

    func makeStore() throws -> VersionStore {
        try FileManager.default.createDirectory(atPath: directory + "/versions", withIntermediateDirectories: true)
        return VersionStore(directory: directory + "/versions", policy: .defaults)
    }

    func record(_ version: UInt64, size: Int) -> VersionRecord {
        VersionRecord(version: version, kind: .previous, modified: 1, kept: Double(version), size: Int64(size), author: nil)
    }

    /// Overwrites `range` of the file at `path` (and of `model`) with `byte`, saving first.
    func overwrite(_ path: String, _ model: inout [UInt8], _ range: Range<Int>, with byte: UInt8,
                   saving store: VersionStore, into version: UInt64, item: ItemID, saved: inout ByteRanges) throws {
        let fd = open(path, O_RDWR)
        defer { close(fd) }
        let wanted = Int64(range.lowerBound)..<Int64(range.upperBound)
        try store.save(saved.missing(in: wanted.clamped(to: 0..<Int64(model.count))), of: item, version: version, from: fd)
        saved.insert(wanted.clamped(to: 0..<Int64(model.count)))
        let bytes = [UInt8](repeating: byte, count: range.count)
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(range.lowerBound)) }
        if range.upperBound > model.count { model += [UInt8](repeating: 0, count: range.upperBound - model.count) }
        model.replaceSubrange(range, with: bytes)
    }

    func content(_ store: VersionStore, _ item: ItemID, _ version: UInt64, current: String) throws -> [UInt8] {
        try store.bytes(of: item, version: version, current: current)
    }

    @Test func deltasReadBackExactlyThroughAChainAndWhenMadeWhole() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let item = ItemID(rawValue: 42)
        let current = directory + "/current"
        var model = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        try Data(model).write(to: URL(fileURLWithPath: current))
        var expected: [UInt64: [UInt8]] = [:]
        var rng = SystemRandomNumberGenerator()
        for version in UInt64(1)...6 {
            expected[version] = model
            try store.keepPrefix(item: item, record: record(version, size: model.count))
            var saved = ByteRanges()
            for _ in 0..<5 {
                let start = Int.random(in: 0..<model.count, using: &rng)
                let end = min(start + Int.random(in: 1...20_000, using: &rng), model.count + 5000)
                try overwrite(current, &model, start..<end, with: UInt8(version), saving: store, into: version, item: item, saved: &saved)
            }
            if version == 4 {  // a truncate saves what it cuts
                let cut = model.count / 2
                let fd = open(current, O_RDWR)
                try store.save(saved.missing(in: Int64(cut)..<Int64(model.count)), of: item, version: version, from: fd)
                ftruncate(fd, off_t(cut))
                close(fd)
                model.removeSubrange(cut...)
            }
        }
        let listed = store.versions(of: item)
        #expect(listed.map(\.version) == [1, 2, 3, 4, 5, 6])
        #expect(listed.allSatisfy { $0.isPrefix && ($0.savedBytes ?? 0) > 0 }, "\(listed.map(\.savedBytes))")
        for version in UInt64(1)...6 {
            #expect(try content(store, item, version, current: current) == expected[version], "version \(version)")
        }
        // Made whole before a change no delta would see: every version still reads the same,
        // and the newest is a plain copy.
        let fd = open(current, O_RDONLY)
        try store.materializeNewestPrefix(of: item, from: fd)
        close(fd)
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: current))
        #expect(store.versions(of: item).last?.isPrefix == false)
        for version in UInt64(1)...6 {
            #expect(try content(store, item, version, current: current) == expected[version], "version \(version) after")
        }
    }

    @Test func byteRangesMergeAndSayWhatIsMissing() {
        var ranges = ByteRanges()
        ranges.insert(10..<20)
        ranges.insert(30..<40)
        ranges.insert(20..<25)  // touches: merged
        #expect(ranges.ranges == [10..<25, 30..<40])
        #expect(ranges.missing(in: 0..<50) == [0..<10, 25..<30, 40..<50])
        #expect(ranges.missing(in: 12..<22) == [])
        ranges.insert(5..<35)
        #expect(ranges.ranges == [5..<40])
        #expect(ranges.byteCount == 35)
        #expect(ranges.missing(in: 40..<40) == [])
    }

    /// A save of the chain moves up to the number the remote gave it past a version out of the
    /// chain (a save set aside, numbered past the content when it was set aside), never past
    /// one of the chain or the content's number, nor onto a number held; it reads as it was.
    @Test func aSaveMovesUpPastAVersionOutOfTheChainOnly() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let item = ItemID(rawValue: 9)
        let current = directory + "/current"
        for (version, text) in [(UInt64(1), "one"), (2, "two"), (3, "three")] {
            try Data(text.utf8).write(to: URL(fileURLWithPath: current))
            let fd = open(current, O_RDONLY)
            defer { close(fd) }
            try store.keepCopy(of: fd, item: item, record: record(version, size: text.utf8.count))
        }
        try Data("four".utf8).write(to: URL(fileURLWithPath: current))
        // 2 is set aside: out of the chain, past the content's number (4).
        #expect(try store.detach(item, version: 2, past: 4, current: current) == 5)
        #expect(store.versions(of: item).map(\.version) == [1, 3, 5])
        // 3 cannot pass the content (4); 1 cannot pass 3 (of the chain); nothing moves onto 5.
        #expect(try store.moveUp(item, version: 3, to: 6, current: 4) == false)
        #expect(try store.moveUp(item, version: 1, to: 4, current: 7) == false)
        #expect(try store.moveUp(item, version: 3, to: 5, current: 7) == false)
        // With the content numbered past it, 3 moves past 5 (out of the chain) to 6.
        #expect(try store.moveUp(item, version: 3, to: 6, current: 7) == true)
        #expect(store.versions(of: item).map(\.version) == [1, 5, 6])
        #expect(try content(store, item, 6, current: current) == Array("three".utf8))
        #expect(try content(store, item, 5, current: current) == Array("two".utf8))
    }


    /// A scratch file a daemon left (it died while keeping a version of an item gone here) goes
    /// at the next start; the versions stay.
    @Test func aScratchFileLeftBehindGoesAtTheNextStart() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let scratch = try store.scratchFile("keep-9-1")
        close(scratch.fd)
        #expect(FileManager.default.fileExists(atPath: scratch.path) && scratch.path.hasPrefix(directory + "/versions/"))
        store.removeLeftovers()
        #expect(!FileManager.default.fileExists(atPath: scratch.path))
        #expect(FileManager.default.fileExists(atPath: directory + "/versions"))
    }

}
