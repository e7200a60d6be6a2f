import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What keeping versions costs (issue 20 §1): an append-only session keeps its predecessor as a
/// prefix (nothing copied), a burst of rewrites within the thinning window keeps one copy, and
/// every version the rules keep reads back byte for byte (`docfs versions --show`, restores).
@Suite(.needsRootAndFUSE) struct VersionCostTests {
    @Test func appendOnlySessionsKeepPrefixesAndCopyNothing() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("app.log")
        var expected = [Data(randomBytes(100_000))]
        try expected[0].write(to: URL(fileURLWithPath: f))
        for i in 1...20 {
            let line = "line \(i) appended\n"
            let appended = try shell("echo 'line \(i) appended' >> '\(f)'")
            #expect(appended.status == 0)
            expected.append(expected[i - 1] + Data(line.utf8))
        }
        #expect(attribute(f, "user.docfs.version") == "21")
        let listing = try versionsJSON(fixture, f)
        #expect(listing.map(\.version) == Array((1...21).reversed()))
        #expect(listing.allSatisfy { $0.stored == 0 }, "stored: \(listing.map(\.stored))")
        let bytes = try storeBytes(fixture)
        #expect(bytes < 16_384, "kept versions take \(bytes) bytes for 20 appended lines")
        for version in 1...20 {
            #expect(try shown(fixture, f, version) == expected[version - 1], "version \(version)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == expected[20])
    }

    @Test func aBurstOfAppendsKeepsOnePrefix() throws {
        let fixture = try MountFixture()  // the default window: a minute
        defer { fixture.tearDown() }
        let original = Data(randomBytes(200_000))
        let f = try fixture.placeInStore("burst.log", original)
        let appended = try shell("for i in $(seq 200); do echo \"line $i\" >> '\(f)'; done")
        #expect(appended.status == 0)
        #expect(attribute(f, "user.docfs.version") == "201")
        let listing = try versionsJSON(fixture, f)
        #expect(listing.map(\.version) == [201, 1])
        #expect(listing.map(\.stored) == [0, 0])
        #expect(try shown(fixture, f, 1) == original)
        // A rewrite now is not thinned away: it keeps a copy, which the prefix reads from.
        let beforeRewrite = try Data(contentsOf: URL(fileURLWithPath: f))
        let fd = open(f, O_WRONLY)
        #expect(pwrite(fd, "X", 1, 0) == 1)
        close(fd)
        #expect(eventually { (try? versionsJSON(fixture, f).map(\.version)) == [202, 201, 1] })
        #expect(try versionsJSON(fixture, f).map(\.stored) == [0, Int64(beforeRewrite.count), 0])
        #expect(try shown(fixture, f, 201) == beforeRewrite)
        #expect(try shown(fixture, f, 1) == original)
    }

    @Test func aRewriteAfterAppendsKeepsEveryEarlierVersionExact() throws {
        let fixture = try MountFixture(settings: #"{"versions": {"thinningWindowSeconds": 0}}"#)
        defer { fixture.tearDown() }
        let f = fixture.path("journal")
        var expected = [Data(randomBytes(50_000))]
        try expected[0].write(to: URL(fileURLWithPath: f))
        for i in 1...3 {
            try append(Data("entry \(i)\n".utf8), to: f)
            expected.append(expected[i - 1] + Data("entry \(i)\n".utf8))
        }
        // A writer that may write anywhere: version 4 is copied before it writes, and the
        // prefixes 1...3 now read from that copy.
        let fd = open(f, O_WRONLY)
        #expect(fd >= 0)
        #expect(pwrite(fd, "OVERWRITTEN", 11, 100) == 11)
        close(fd)
        var changed = expected[3]
        changed.replaceSubrange(100..<111, with: Data("OVERWRITTEN".utf8))
        expected.append(changed)
        #expect(truncate(f, 10) == 0)  // by path: a session of its own
        expected.append(changed.prefix(10))
        #expect(eventually { attribute(f, "user.docfs.version") == "6" })
        for version in 1...5 {
            #expect(try shown(fixture, f, version) == expected[version - 1], "version \(version)")
        }
        let stored = try versionsJSON(fixture, f).filter { $0.kind == "previous" }.map(\.stored)
        #expect(stored == [Int64(expected[4].count), Int64(expected[3].count), 0, 0, 0])
        // A restore of a prefix is exact too, and is itself a new version.
        let restored = try shell("'\(MountFixture.binary)' versions '\(f)' --restore 2")
        #expect(restored.status == 0, "\(restored.output)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == expected[1])
        #expect(try shown(fixture, f, 6) == expected[5])
    }

    @Test func aTruncateThroughAnAppendingHandleCopiesThePrefixFirst() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let original = Data(randomBytes(30_000))
        let f = try fixture.placeInStore("data", original)
        let fd = open(f, O_RDWR | O_APPEND)
        #expect(fd >= 0)
        #expect(write(fd, "tail", 4) == 4)
        #expect(ftruncate(fd, 1000) == 0)
        #expect(write(fd, "end", 3) == 3)
        close(fd)
        #expect(eventually { (try? versionsJSON(fixture, f).count) == 2 })
        #expect(try shown(fixture, f, 1) == original)
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == original.prefix(1000) + Data("end".utf8))
    }

    @Test func aWriterJoiningAnAppendingSessionCopiesThePrefixFirst() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let original = Data(randomBytes(20_000))
        let f = try fixture.placeInStore("shared", original)
        let appender = open(f, O_WRONLY | O_APPEND)
        #expect(appender >= 0)
        #expect(write(appender, "more", 4) == 4)
        let rewriter = open(f, O_WRONLY)
        #expect(rewriter >= 0)
        #expect(pwrite(rewriter, "FIRST", 5, 0) == 5)
        close(rewriter)
        close(appender)
        #expect(eventually { (try? versionsJSON(fixture, f).count) == 2 })
        #expect(try shown(fixture, f, 1) == original)
        #expect(try versionsJSON(fixture, f).last?.stored == Int64(original.count))
    }

    @Test func aBurstOfRewritesKeepsOneCopyAndTheWindowIsASetting() throws {
        let fixture = try MountFixture(settings: #"{"versions": {"thinningWindowSeconds": 2}}"#)
        defer { fixture.tearDown() }
        let first = Data(randomBytes(40_000))
        let f = try fixture.placeInStore("draft.odt", first)
        let burstStart = Date()
        for i in 1...10 { try write("save \(i)\n", to: f) }
        // Within the window: the state before the burst is kept, once; the newest is current.
        #expect(Date().timeIntervalSince(burstStart) < 2, "the burst took longer than the window: nothing to check")
        #expect(attribute(f, "user.docfs.version") == "11")
        #expect(try versionsJSON(fixture, f).map(\.version) == [11, 1])
        #expect(try shown(fixture, f, 1) == first)
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "save 10\n")
        usleep(2_100_000)
        try write("after the window\n", to: f)  // keeps its predecessor again
        #expect(try versionsJSON(fixture, f).map(\.version) == [12, 11, 1])
        #expect(try shown(fixture, f, 11) == Data("save 10\n".utf8))
    }

    /// A file created through the mount starts a burst: the state before it is no file, so
    /// rewrites within the window of its creation keep nothing; after the window, a session
    /// keeps its predecessor again.
    @Test func rewritesRightAfterACreateKeepNothingUntilTheWindowEnds() throws {
        let fixture = try MountFixture(settings: #"{"versions": {"thinningWindowSeconds": 2}}"#)
        defer { fixture.tearDown() }
        let f = fixture.path("build.out")
        let made = Date()
        for i in 1...5 { try write(String(repeating: "output \(i)\n", count: 500), to: f) }
        let appended = try shell("echo more >> '\(f)'")
        #expect(appended.status == 0)
        #expect(Date().timeIntervalSince(made) < 2, "the saves took longer than the window: nothing to check")
        #expect(attribute(f, "user.docfs.version") == "6")
        #expect(try versionsJSON(fixture, f).map(\.version) == [6])
        let status = try shell("'\(MountFixture.binary)' status --json '\(f)'")
        let json = try JSONSerialization.jsonObject(with: Data(status.output.utf8)) as? [String: Any]
        #expect(json?["keptBytes"] as? Int == 0, "\(status.output)")
        let sixth = try Data(contentsOf: URL(fileURLWithPath: f))
        usleep(2_100_000)
        try write("after the window\n", to: f)
        #expect(try versionsJSON(fixture, f).map(\.version) == [7, 6])
        #expect(try shown(fixture, f, 6) == sixth)
        // A file made behind docfs's back starts no window: its first session keeps it.
        let placed = try fixture.placeInStore("placed", Data("as found\n".utf8))
        try write("rewritten\n", to: placed)
        #expect(try versionsJSON(fixture, placed).map(\.version) == [2, 1])
        #expect(try shown(fixture, placed, 1) == Data("as found\n".utf8))
    }

    @Test func aWindowOfZeroKeepsEverySessionsPredecessor() throws {
        let fixture = try MountFixture(settings: #"{"versions": {"thinningWindowSeconds": 0}}"#)
        defer { fixture.tearDown() }
        let f = fixture.path("draft")
        for i in 1...4 { try write("save \(i)\n", to: f) }
        #expect(try versionsJSON(fixture, f).map(\.version) == [4, 3, 2, 1])
        for i in 1...3 { #expect(try shown(fixture, f, i) == Data("save \(i)\n".utf8)) }
    }

    @Test func prefixesOutliveTheDaemon() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("kept.log")
        try write("start\n", to: f)
        try append(Data("one\n".utf8), to: f)
        try append(Data("two\n".utf8), to: f)
        fixture.stop()
        try fixture.start()
        #expect(try versionsJSON(fixture, f).map(\.version) == [3, 2, 1])
        #expect(try shown(fixture, f, 1) == Data("start\n".utf8))
        #expect(try shown(fixture, f, 2) == Data("start\none\n".utf8))
    }

    /// Safe-saves (write a new file, rename it over) of a large document: each superseded file
    /// is kept at once (linked in), then the settler cuts it into chunks, so five versions of an
    /// 8 MiB document with small edits take about one copy and the chunks the edits touched.
    @Test func safeSavedVersionsShareTheirChunks() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("report.odt")
        // Seeded content and edits: how many chunks an edit touches depends on where it lands.
        let expected = safeSaveSeededVersions(to: f, seed: 20, size: 8 << 20, count: 6, inserting: 500)
        let folder = fixture.store + "/versions/\(itemID(f) ?? 0)"
        // The settler works at the lowest priority: on a machine busy with other tests it waits.
        #expect(eventually(seconds: 120) { settledIntoChunks(folder, versions: 5) }, "the settler cut every kept file into chunks")
        #expect(try versionsJSON(fixture, f).filter { $0.kind == "previous" }.count == 5)
        let bytes = try storeBytes(fixture)
        // About one copy and the chunks the edits touched (each edit one or two chunks of about 1 MiB).
        #expect(bytes < 3 * (8 << 20), "five 8 MiB versions take \(bytes) bytes")
        print("safeSavedVersionsShareTheirChunks: five 8 MiB versions take \(bytes) bytes")
        for version in 1...5 {
            #expect(try shown(fixture, f, version) == expected[version - 1], "version \(version)")
        }
        // Restoring one reads its chunks back exactly.
        #expect(try shell("'\(MountFixture.binary)' versions --restore 2 '\(f)'").status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == expected[1])
    }

    @Test func statusAndVersionsSayWhatKeptVersionsTake() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("sized")
        try write(String(repeating: "a", count: 5000), to: f)
        try write("short", to: f)
        try append(Data("+".utf8), to: f)
        let status = try shell("'\(MountFixture.binary)' status --json '\(f)'")
        let json = try JSONSerialization.jsonObject(with: Data(status.output.utf8)) as? [String: Any]
        #expect(json?["keptBytes"] as? Int == 5000)
        let table = try shell("'\(MountFixture.binary)' versions '\(f)'")
        #expect(table.output.contains("kept versions of this document take 5000 bytes; of the store, 5000 bytes"), "\(table.output)")
    }

    /// Issue 20 §2: a full disk while keeping a version fails the open (a copy) or the write (a
    /// delta's saving) with ENOSPC, changes nothing, and loses nothing already kept.
    @Test func aFullDiskFailsTheOpenOrTheWriteWithENOSPCAndLosesNothing() throws {
        let fixture = try MountFixture(mount: false)
        try FileManager.default.createDirectory(atPath: fixture.store, withIntermediateDirectories: true)
        guard mount("tmpfs", fixture.store, "tmpfs", 0, "size=8m") == 0 else { throw FixtureError("cannot mount a tmpfs: \(errno)") }
        defer {
            fixture.stop()
            _ = umount2(fixture.store, MNT_DETACH_VALUE)
            fixture.tearDown()
        }
        try #"{"versions": {"thinningWindowSeconds": 0}}"#.write(toFile: fixture.store + "/settings.json", atomically: false, encoding: .utf8)
        try fixture.start()
        // A small document (copied when a session starts) and a big one (a delta: what a write
        // overwrites is saved just before it).
        let small = fixture.path("small"), big = fixture.path("big")
        let first = Data(repeating: 0x61, count: 900_000), second = Data(repeating: 0x62, count: 900_000)
        try first.write(to: URL(fileURLWithPath: small))
        try second.write(to: URL(fileURLWithPath: small))  // keeps the first
        let bigContent = Data(randomBytes(2 << 20))
        try bigContent.write(to: URL(fileURLWithPath: big))
        #expect(try shown(fixture, small, 1) == first)
        // Fill the disk, then leave about half a megabyte.
        let filler = open(fixture.store + "/filler", O_WRONLY | O_CREAT, 0o600)
        #expect(filler >= 0)
        let block = [UInt8](repeating: 0x7A, count: 64 << 10)
        var filled = 0
        while true {
            let n = block.withUnsafeBytes { Glibc.write(filler, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            filled += n
        }
        #expect(ftruncate(filler, off_t(max(0, filled - (512 << 10)))) == 0)
        close(filler)

        let fd = open(small, O_WRONLY)
        let openFailure = errno
        if fd >= 0 { close(fd) }
        #expect(fd < 0 && openFailure == ENOSPC, "open for writing on a full disk: fd \(fd), errno \(openFailure)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: small)) == second)
        #expect(attribute(small, "user.docfs.version") == "2")
        #expect(try shown(fixture, small, 1) == first)

        let writer = open(big, O_WRONLY)
        #expect(writer >= 0)
        let overwrite = [UInt8](repeating: 0x58, count: 1 << 20)
        let written = overwrite.withUnsafeBytes { pwrite(writer, $0.baseAddress, $0.count, 0) }
        var writeFailure = errno
        if MountFixture.defaultOptions.contains("writeback") && written > 0 {
            // The kernel's cache took the write; its writeback fails, and fsync says so.
            let synced = fsync(writer)
            writeFailure = synced == 0 ? 0 : errno
            #expect(synced != 0 && writeFailure == ENOSPC, "fsync of a write whose old bytes do not fit: errno \(writeFailure)")
        } else {
            #expect(written < 0 && writeFailure == ENOSPC, "a write whose old bytes do not fit: \(written), errno \(writeFailure)")
        }
        close(writer)
        let after = try Data(contentsOf: URL(fileURLWithPath: fixture.documents + "/big"))
        if MountFixture.defaultOptions.contains("writeback") {
            // The kernel writes its cache back in pieces: those that fitted before the disk
            // filled are in the file (their old bytes kept in the delta), the rest are not.
            #expect(after.count == bigContent.count && after.indices.allSatisfy {
                after[$0] == bigContent[$0] || ($0 < overwrite.count && after[$0] == 0x58)
            }, "the file holds only its old bytes and pieces of the failed write")
        } else {
            #expect(after == bigContent)
        }

        let leftovers = try FileManager.default.contentsOfDirectory(atPath: fixture.store + "/versions")
            .flatMap { (try? FileManager.default.contentsOfDirectory(atPath: fixture.store + "/versions/" + $0)) ?? [] }
        #expect(!leftovers.contains { $0.hasPrefix(".incoming-") }, "\(leftovers)")

        // With room again the same open works and keeps what it supersedes.
        unlink(fixture.store + "/filler")
        try Data("third".utf8).write(to: URL(fileURLWithPath: small))
        #expect(try versionsJSON(fixture, small).map(\.version) == [3, 2, 1])
        #expect(try shown(fixture, small, 2) == second)
        // Its session changed no byte: rolled back, or (under the writeback cache, whose flush
        // moved the modification time) a version that reads as the content did.
        for row in try versionsJSON(fixture, big) where row.kind == "previous" {
            #expect(try shown(fixture, big, Int(row.version)) == bigContent)
        }
    }

    @Test func badThinningWindowsAreRefused() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        try FileManager.default.createDirectory(atPath: fixture.store, withIntermediateDirectories: true)
        try #"{"versions": {"thinningWindowSeconds": -1}}"#.write(toFile: fixture.store + "/settings.json", atomically: false, encoding: .utf8)
        let result = try shell("'\(MountFixture.binary)' mount --store '\(fixture.store)' '\(fixture.mountPoint)' 2>&1")
        #expect(result.status != 0)
        #expect(result.output.contains("version limits cannot be negative"), "\(result.output)")
    }
}

/// Bytes of seeded-by-nothing random content.
/// Pseudo-random bytes from a seed (xorshift), for tests whose outcome depends on the content.
struct SeededBytes {
    private var state: UInt64

    init(seed: UInt64) { state = seed | 1 }

    mutating func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }

    mutating func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        for i in 0..<count { out[i] = UInt8(truncatingIfNeeded: next() >> 24) }
        return out
    }
}

/// Safe-saves (writes a new file, renames it over `path`) `count` versions of a seeded document
/// of `size` bytes, each after the first with 64 bytes overwritten and `inserting` bytes inserted
/// at seeded places; answers each version's content, oldest first.
func safeSaveSeededVersions(to path: String, seed: UInt64, size: Int, count: Int, inserting: Int = 0) -> [Data] {
    var generator = SeededBytes(seed: seed)
    var content = generator.bytes(size)
    var versions: [Data] = []
    for round in 0..<count {
        if round > 0 {
            let at = Int(generator.next() % UInt64(content.count - 64))
            content.replaceSubrange(at..<(at + 64), with: generator.bytes(64))
            if inserting > 0 {
                content.insert(contentsOf: generator.bytes(inserting), at: Int(generator.next() % UInt64(content.count)))
            }
        }
        versions.append(Data(content))
        #expect(FileManager.default.createFile(atPath: path + ".tmp", contents: Data(content)))
        #expect(rename(path + ".tmp", path) == 0)
    }
    return versions
}

/// Whether the settler has cut `versions` kept files in the item's version folder `folder` into
/// chunks, leaving no whole kept file and nothing half made.
func settledIntoChunks(_ folder: String, versions: Int) -> Bool {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
    return names.filter { $0.hasSuffix(".chunks") }.count == versions
        && !names.contains { UInt64($0) != nil || $0.hasPrefix(".incoming-") }
}

func randomBytes(_ count: Int) -> [UInt8] {
    (0..<count).map { _ in UInt8.random(in: 0...255) }
}

/// Appends `data` to `path` as `>>` does (O_APPEND, one write, close).
func append(_ data: Data, to path: String) throws {
    let fd = open(path, O_WRONLY | O_APPEND)
    guard fd >= 0 else { throw FixtureError("cannot open \(path): \(errno)") }
    defer { close(fd) }
    guard data.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == data.count else {
        throw FixtureError("short append to \(path)")
    }
}

/// Kept version `version` of `path`, as `docfs versions --show` writes it.
func shown(_ fixture: MountFixture, _ path: String, _ version: Int) throws -> Data {
    let out = fixture.root + "/shown-\(version)"
    let result = try shell("'\(MountFixture.binary)' versions --show \(version) '\(path)' > '\(out)'")
    guard result.status == 0 else { throw FixtureError("docfs versions --show \(version) failed: \(result.output)") }
    return try Data(contentsOf: URL(fileURLWithPath: out))
}

/// What the store's kept versions take (du of versions/ and chunks/: their sizes, or the disk
/// blocks they take, which for the sparse files of deltas is what they saved; du counts a
/// chunk once however many versions link it).
func storeBytes(_ fixture: MountFixture, allocated: Bool = false) throws -> Int {
    let result = try shell("mkdir -p '\(fixture.store)/chunks' && du -sc \(allocated ? "-B1" : "-b") '\(fixture.store)/versions' '\(fixture.store)/chunks' | tail -n 1 | cut -f1")
    return Int(result.output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
}
