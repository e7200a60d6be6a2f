import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Deltas (issue 20 §1): a session rewriting part of a big file keeps its predecessor by saving
/// only the bytes it overwrites, before it overwrites them (its writers are served through
/// docfs, which sees every write); every version reads back byte for byte, through chains of
/// deltas, after writes of every kind and after a restart.
@Suite(.needsRootAndFUSE) struct DeltaVersionTests {
    static let everySession = #"{"versions": {"thinningWindowSeconds": 0}}"#

    @Test func rewritesOfABigFileSaveOnlyWhatTheyOverwrite() throws {
        let fixture = try MountFixture(settings: Self.everySession)
        defer { fixture.tearDown() }
        let f = fixture.path("disk.img")
        var model = randomBytes(8 << 20)
        try Data(model).write(to: URL(fileURLWithPath: f))
        var expected: [[UInt8]] = []
        var written = 0
        for _ in 0..<12 {
            expected.append(model)
            let fd = open(f, O_WRONLY)
            #expect(fd >= 0)
            for _ in 0..<Int.random(in: 1...3) {
                let chunk = randomBytes(Int.random(in: 1...20_000))
                let offset = Int.random(in: 0..<(model.count - chunk.count))
                #expect(chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) } == chunk.count)
                model.replaceSubrange(offset..<offset + chunk.count, with: chunk)
                written += chunk.count
            }
            close(fd)
        }
        #expect(eventually { attribute(f, "user.docfs.version") == "13" })
        #expect(try versionsJSON(fixture, f).count == 13)
        for (index, content) in expected.enumerated() {
            #expect(try shown(fixture, f, index + 1) == Data(content), "version \(index + 1)")
        }
        // What was overwritten (in whole pages under the writeback cache), not 12 copies of 8 MiB.
        let stored = try versionsJSON(fixture, f).reduce(0) { $0 + $1.stored }
        #expect(stored <= Int64(written + 12 * 3 * 2 * 4096), "kept versions store \(stored) bytes for \(written) bytes written")
        let onDisk = try storeBytes(fixture, allocated: true)
        #expect(onDisk < 2 << 20, "kept versions take \(onDisk) bytes on disk")
    }

    /// A rewrite opening a big file just after the writer that made it (passed through to the
    /// kernel) closed it, before the kernel's release of that writer arrived, is still served
    /// through docfs and saves only what it overwrites, not a copy of the file: docfs waits a
    /// moment for the release (here a child holding the descriptor holds it back for 100 ms,
    /// as a busy machine may).
    @Test func aRewriteJustAfterTheWriterClosedSavesOnlyWhatItOverwrites() throws {
        let fixture = try MountFixture(settings: Self.everySession)
        defer { fixture.tearDown() }
        let f = fixture.path("disk.img")
        let size = 8 << 20
        let fd = open(f, O_RDWR | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0)
        #expect(randomBytes(size).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == size)
        var child: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("sleep"), strdup("0.1"), nil]
        defer { argv.forEach { free($0) } }
        try #require(posix_spawnp(&child, "sleep", nil, nil, argv, environ) == 0)  // inherits the descriptor
        close(fd)  // the flush; the release waits for the child
        let rewriter = open(f, O_WRONLY)
        try #require(rewriter >= 0)
        let chunk = randomBytes(4096)
        #expect(chunk.withUnsafeBytes { pwrite(rewriter, $0.baseAddress, $0.count, off_t(1 << 20)) } == chunk.count)
        close(rewriter)
        var status: Int32 = 0
        waitpid(child, &status, 0)
        #expect(eventually { attribute(f, "user.docfs.version") == "2" })
        let stored = try versionsJSON(fixture, f).reduce(0) { $0 + $1.stored }
        #expect(stored <= 2 * 4096, "the version kept stores \(stored) bytes for 4096 bytes overwritten")
    }

    /// `keep` bounds chains too: of twelve rewrite sessions of a big file (deltas, each made
    /// up from the next newer version) and twelve appends to a log (prefixes), only the three
    /// newest previous versions stay, each reading back exactly; dropping an older one never
    /// breaks the chain of the newer ones.
    @Test func keepBoundsChainsOfDeltasAndPrefixes() throws {
        let fixture = try MountFixture(settings: #"{"versions": {"keep": 3, "thinningWindowSeconds": 0}}"#)
        defer { fixture.tearDown() }
        let big = fixture.path("disk.img"), log = fixture.path("app.log")
        var model = randomBytes(3 << 20)
        try Data(model).write(to: URL(fileURLWithPath: big))
        var lines = Data("start\n".utf8)
        try lines.write(to: URL(fileURLWithPath: log))
        var bigStates = [model], logStates = [lines]
        for i in 0..<12 {
            let fd = open(big, O_WRONLY)
            #expect(fd >= 0)
            let chunk = randomBytes(Int.random(in: 1...30_000))
            let offset = Int.random(in: 0..<(model.count - chunk.count))
            #expect(chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) } == chunk.count)
            close(fd)
            model.replaceSubrange(offset..<offset + chunk.count, with: chunk)
            bigStates.append(model)
            let line = Data("line \(i)\n".utf8)
            try append(line, to: log)
            lines += line
            logStates.append(lines)
        }
        #expect(eventually(seconds: 20) { attribute(big, "user.docfs.version") == "13" && attribute(log, "user.docfs.version") == "13" })
        for (path, states) in [(big, bigStates.map { Data($0) }), (log, logStates)] {
            let kept = eventually(seconds: 20) { (try? versionsJSON(fixture, path).map(\.version)) == [13, 12, 11, 10] }
            #expect(kept, "\(path): \((try? versionsJSON(fixture, path).map(\.version)) ?? [])")
            for version in 10...12 {
                #expect(try shown(fixture, path, version) == states[version - 1], "version \(version) of \(path)")
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == states[12])
        }
    }

    @Test func aBurstOfSmallRewritesKeepsOneDeltaOfWhatTheyOverwrote() throws {
        let fixture = try MountFixture()  // the default window: a minute
        defer { fixture.tearDown() }
        let original = randomBytes(4 << 20)
        let f = try fixture.placeInStore("pages.db", Data(original))
        for _ in 0..<100 {
            let fd = open(f, O_WRONLY)
            let page = randomBytes(4096)
            _ = page.withUnsafeBytes { pwrite(fd, $0.baseAddress, 4096, off_t(Int.random(in: 0..<1024) * 4096)) }
            close(fd)
        }
        #expect(eventually { attribute(f, "user.docfs.version") == "101" })
        let listing = try versionsJSON(fixture, f)
        #expect(listing.map(\.version) == [101, 1])
        #expect(listing.last!.stored <= 100 * 4096)
        #expect(try shown(fixture, f, 1) == Data(original))
    }

    /// Within the thinning window, a replace (an editor's safe-save) keeps the replaced file as
    /// the newest previous version: a later rewrite must not save into the delta kept before
    /// it (that delta now reads through the replaced file).
    @Test func aSafeSaveBetweenRewritesEndsTheDeltaTheyShared() throws {
        let fixture = try MountFixture()  // the default window: all of this falls within it
        defer { fixture.tearDown() }
        let original = randomBytes(2 << 20)
        let f = try fixture.placeInStore("model.db", Data(original))
        func rewrite(_ at: Int, _ byte: UInt8) -> [UInt8] {
            let fd = open(f, O_WRONLY)
            let chunk = [UInt8](repeating: byte, count: 10_000)
            _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(at)) }
            close(fd)
            return chunk
        }
        var afterFirst = original
        afterFirst.replaceSubrange(1000..<11_000, with: rewrite(1000, 0x41))
        let saved = randomBytes(2 << 20)
        let aside = fixture.path("model.db.tmp")
        try Data(saved).write(to: URL(fileURLWithPath: aside))
        #expect(rename(aside, f) == 0)  // the safe-save: a replace
        var afterThird = saved
        afterThird.replaceSubrange(500_000..<510_000, with: rewrite(500_000, 0x42))
        let rows = try versionsJSON(fixture, f)
        #expect(rows.first?.kind == "current" && rows.count >= 3, "\(rows.map(\.version))")
        #expect(try shown(fixture, f, 1) == Data(original))
        #expect(try shown(fixture, f, 2) == Data(afterFirst))
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == Data(afterThird))
        for row in rows where row.kind == "previous" && row.version > 2 {
            #expect(try shown(fixture, f, Int(row.version)) == Data(saved), "version \(row.version)")
        }
    }

    /// A policy that keeps no versions prunes each delta as its session ends; the rewrites
    /// thinned after it leave no saved bytes behind.
    @Test func rewritesUnderAPolicyThatKeepsNothingLeaveNothing() throws {
        let fixture = try MountFixture(settings: #"{"versions": {"keep": 0}}"#)
        defer { fixture.tearDown() }
        let f = fixture.path("scratch.bin")
        try Data(randomBytes(2 << 20)).write(to: URL(fileURLWithPath: f))
        for i in 0..<5 {
            let fd = open(f, O_WRONLY)
            let chunk = randomBytes(50_000)
            _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(i * 100_000)) }
            close(fd)
        }
        #expect(eventually { attribute(f, "user.docfs.version") == "6" })
        #expect(eventually { (try? versionsJSON(fixture, f).map(\.kind)) == ["current"] })
        let left = (try? FileManager.default.subpathsOfDirectory(atPath: fixture.store + "/versions")) ?? []
        #expect(eventually { ((try? FileManager.default.subpathsOfDirectory(atPath: fixture.store + "/versions")) ?? []).isEmpty },
                "left in versions/: \(left)")
    }

    /// Random sessions of every kind on a big file, compared with a model of what each version
    /// held; then again after the daemon restarts.
    @Test func everyVersionOfRandomSessionsReadsBackExactly() throws {
        let fixture = try MountFixture(settings: Self.everySession)
        defer { fixture.tearDown() }
        let f = fixture.path("model.bin")
        var model = randomBytes(3 << 20)
        try Data(model).write(to: URL(fileURLWithPath: f))
        var expected: [Int: [UInt8]] = [:]  // version -> content
        var version = 1
        var log: [String] = []
        for step in 0..<30 {
            let kind = Int.random(in: 0..<8)
            let before = model
            var touched = true  // every step writes (and moves mtime), so it makes a version
            switch kind {
            case 0:  // rewrite in place
                let fd = open(f, O_RDWR)
                for _ in 0..<Int.random(in: 1...4) {
                    let chunk = randomBytes(Int.random(in: 1...70_000))
                    let offset = Int.random(in: 0...model.count)
                    _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
                    if offset + chunk.count > model.count { model += [UInt8](repeating: 0, count: offset + chunk.count - model.count) }
                    model.replaceSubrange(offset..<offset + chunk.count, with: chunk)
                }
                close(fd)
            case 1:  // append
                let chunk = randomBytes(Int.random(in: 1...50_000))
                try append(Data(chunk), to: f)
                model += chunk
            case 2:  // truncate through the writer's handle, shorter or longer, then a write
                let fd = open(f, O_RDWR)
                let size = Int.random(in: (1 << 20)...(4 << 20))
                #expect(ftruncate(fd, off_t(size)) == 0)
                model = size <= model.count ? Array(model[..<size]) : model + [UInt8](repeating: 0, count: size - model.count)
                #expect(pwrite(fd, "T", 1, 10) == 1)
                model[10] = 84
                close(fd)
            case 3:  // truncate by path
                let size = Int.random(in: (1 << 20)...model.count)
                #expect(truncate(f, off_t(size)) == 0)
                model = Array(model[..<size])
            case 4:  // a whole new content (O_TRUNC)
                model = randomBytes(Int.random(in: (1 << 20)...(3 << 20)))
                try Data(model).write(to: URL(fileURLWithPath: f))
            case 5:  // through a shared writable mapping
                let fd = open(f, O_RDWR)
                let length = model.count
                let map = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                #expect(map != MAP_FAILED)
                if let map, map != MAP_FAILED {
                    let offset = Int.random(in: 0..<(length - 5000))
                    let bytes = map.assumingMemoryBound(to: UInt8.self)
                    for i in 0..<5000 { bytes[offset + i] = UInt8(truncatingIfNeeded: i &* 7 &+ step) }
                    for i in 0..<5000 { model[offset + i] = UInt8(truncatingIfNeeded: i &* 7 &+ step) }
                    msync(map, length, MS_SYNC)
                    munmap(map, length)
                }
                close(fd)
            case 6:  // punch a hole
                let fd = open(f, O_RDWR)
                let offset = Int.random(in: 0..<(model.count - 100_000)), length = Int.random(in: 1...100_000)
                let r = docfs_fallocate(fd, DOCFS_FALLOC_FL_PUNCH_HOLE | DOCFS_FALLOC_FL_KEEP_SIZE, off_t(offset), off_t(length))
                if r == 0 { model.replaceSubrange(offset..<offset + length, with: [UInt8](repeating: 0, count: length)) }
                touched = r == 0
                close(fd)
            default:  // a reader holds the file open while a writer rewrites part of it
                let reader = open(f, O_RDONLY)
                let fd = open(f, O_WRONLY)
                let chunk = randomBytes(30_000)
                let offset = Int.random(in: 0..<(model.count - chunk.count))
                _ = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
                model.replaceSubrange(offset..<offset + chunk.count, with: chunk)
                close(fd)
                close(reader)
            }
            if touched {
                expected[version] = before
                version += 1
            }
            log.append("step \(step): kind \(kind), now version \(version), \(model.count) bytes")
            #expect(eventually { attribute(f, "user.docfs.version") == String(version) }, "\(log.joined(separator: "\n"))")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == Data(model))
        let kept = Set(try versionsJSON(fixture, f).map { Int($0.version) })
        for (number, content) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(kept.contains(number), "version \(number) is not listed\n\(log.joined(separator: "\n"))")
            guard kept.contains(number) else { continue }
            #expect(try shown(fixture, f, number) == Data(content), "version \(number)\n\(log.joined(separator: "\n"))")
        }
        fixture.stop()
        try fixture.start()
        for (number, content) in expected.sorted(by: { $0.key < $1.key }) where kept.contains(number) {
            #expect(try shown(fixture, f, number) == Data(content), "version \(number) after a restart")
        }
        // And a restore of the oldest is exact.
        let restored = try shell("'\(MountFixture.binary)' versions '\(f)' --restore 1")
        #expect(restored.status == 0, "\(restored.output)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == Data(expected[1]!))
    }
}
