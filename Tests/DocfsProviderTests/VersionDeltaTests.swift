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

    /// Pending saves (a linked store's, DESIGN §9.0): numbered from keys no remote number
    /// reaches, shown `p1`, `p2`; a delta among them takes the remote's number with its saved
    /// ranges and reads as it was, in the chain's order; a number held is refused, never taken
    /// over; a save the content repeats goes with the delta below it made whole first.
    @Test func pendingSavesTakeTheRemotesNumbersAndReadAsTheyWere() throws {
        let store = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let item = ItemID(rawValue: 7)
        let current = directory + "/current"
        var model = Array("version three, the one in step".utf8)
        try Data(model).write(to: URL(fileURLWithPath: current))
        store.numbersPending.store(true, ordering: .relaxed)
        #expect(store.nextSaveNumber(of: item, after: 3) == VersionNumber.pendingBase + 1)
        #expect(VersionNumber.shown(VersionNumber.pendingBase + 2) == "p2" && VersionNumber.parse("p2") == VersionNumber.pendingBase + 2)
        #expect(VersionNumber.parse("p0") == nil && VersionNumber.parse("x") == nil && VersionNumber.parse("12") == 12)
        // v3 kept as a delta of the first pending save, which is kept as a delta of the second.
        var expected: [UInt64: [UInt8]] = [:]
        for version in [UInt64(3), VersionNumber.pendingBase + 1] {
            expected[version] = model
            try store.keepPrefix(item: item, record: record(version, size: model.count))
            var saved = ByteRanges()
            try overwrite(current, &model, 0..<7, with: UInt8(48 + version % 10), saving: store, into: version, item: item, saved: &saved)
        }
        #expect(store.nextSaveNumber(of: item, after: VersionNumber.pendingBase + 2) == VersionNumber.pendingBase + 3)
        #expect(try store.takeNumber(item, key: VersionNumber.pendingBase + 1, number: 9))
        #expect(store.versions(of: item).map(\.version) == [3, 9] && store.versions(of: item).allSatisfy(\.isPrefix))
        #expect(try content(store, item, 3, current: current) == expected[3])
        #expect(try content(store, item, 9, current: current) == expected[VersionNumber.pendingBase + 1])
        #expect(throws: DocfsError.self) { try store.takeNumber(item, key: 9, number: 3) }
        #expect(try !store.takeNumber(item, key: VersionNumber.pendingBase + 5, number: 10))
        // The content repeats v9 (a save wrote it again): v9 goes, v3 (a delta of it) made whole.
        try Data(expected[VersionNumber.pendingBase + 1]!).write(to: URL(fileURLWithPath: current))
        try store.removeRepeated(item, version: 9, current: current)
        #expect(store.versions(of: item).map(\.version) == [3] && !store.versions(of: item)[0].isPrefix)
        #expect(try content(store, item, 3, current: current) == expected[3])
    }
}
