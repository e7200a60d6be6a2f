import CLinux
import DocfsTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Promised items through a mount (issue 23 §1, §2): a machine that joins on demand lists
/// another's documents at once with no content on disk; through its mount they read like the
/// files they stand for — range reads, ten readers at once, mmap — and `du`, `find -empty`,
/// `tar --sparse`, `cp --sparse=auto` and `rsync -S` give the same answers, archives and copies
/// as on the downloaded file (byte-compared).
@Suite(.serialized) struct PromisedItemsMountTests {
    typealias Machine = ManyMachinesTests.Machine

    static let onDemand = #"{"sync": {"downloads": "onDemand", "downloadWaitSeconds": 30}}"#

    /// `count` seeded pseudo-random bytes.
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in 0..<words.count {
                state = state &* 6364136223846793005 &+ 1442695040888963407
                words[i] = state ^ (state >> 29)
            }
        }
        return bytes
    }

    static let files: [String: [UInt8]] = [
        "big.bin": bytes(64 << 20, seed: 1), "readers.bin": bytes(16 << 20, seed: 2), "tar.bin": bytes(8 << 20, seed: 3),
        "cp.bin": bytes(8 << 20, seed: 4), "rsync.bin": bytes(8 << 20, seed: 5), "mmap.bin": bytes(8 << 20, seed: 6),
        "du.bin": bytes(8 << 20, seed: 7), "small.txt": Array("small\n".utf8), "empty.txt": [],
    ]

    /// A new database of the shared server, machine a mounted and machine b (with `settings`)
    /// not yet: the caller tears both down.
    static func pair(_ label: String, settings: String) throws -> (ThrowawayPostgres, String, Machine, Machine) {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase(label)
        let a = try Machine("a", mounted: true)
        do {
            return (server, uri, a, try Machine("b", mounted: false, settings: settings))
        } catch {
            a.fixture.tearDown()
            throw error
        }
    }

    /// Whether b's `name` is promised still (its store file carries the mark).
    static func isPromised(_ machine: Machine, _ name: String) -> Bool {
        docfs_getxattr(machine.path(name), "user.docfs.promised", nil, 0) >= 0
    }

    @Test func promisedFilesReadThroughTheMountLikeTheirContent() throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair("promised", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        for (name, content) in Self.files { try Data(content).write(to: URL(fileURLWithPath: a.path(name))) }
        let linked = try a.link(uri)
        #expect(linked.status == 0, "\(linked.output)")
        #expect(ManyMachinesTests.within(60) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        let bLinked = try b.link(uri)
        #expect(bLinked.status == 0, "\(bLinked.output)")
        try b.fixture.start()
        // Listed at once with their real sizes, nothing on disk yet.
        var promised = 0
        for (name, content) in Self.files {
            var st = stat()
            #expect(stat(b.path(name), &st) == 0, "\(name)")
            #expect(st.st_size == off_t(content.count), "\(name)")
            if Self.isPromised(b, name) { promised += 1 }
        }
        #expect(promised == Self.files.count - 1, "every non-empty file arrives promised")
        #expect(attribute(b.path("big.bin"), "user.docfs.status") == "promised")
        let shown = try b.docfs("status '\(b.path("big.bin"))'")
        #expect(shown.output.contains("promised"), "\(shown.output)")
        let store = b.fixture.store + "/containers/docfs.default/Documents/big.bin"
        var backing = stat()
        #expect(stat(store, &backing) == 0 && Int64(backing.st_blocks) * 512 < 1 << 20, "the store holds no content of big.bin yet")

        // du and find -empty answer as on a (their files are whole there).
        for command in ["du -k du.bin big.bin", "du -b du.bin", "find . -empty | sort", "ls -ls --block-size=512 du.bin"] {
            let onA = try shell("cd '\(a.path(""))' && \(command)")
            let onB = try shell("cd '\(b.path(""))' && \(command)")
            #expect(onB.status == 0 && onB.output == onA.output, "\(command): b \(onB.output) a \(onA.output)")
        }
        #expect(Self.isPromised(b, "du.bin"), "du and find read no content")

        // A range read in the middle of a big file answers its bytes, before the rest is here.
        let big = Self.files["big.bin"]!
        let start = Date()
        let fd = open(b.path("big.bin"), O_RDONLY)
        var slice = [UInt8](repeating: 0, count: 4096)
        let n = pread(fd, &slice, 4096, 40 << 20)
        let firstByte = Date().timeIntervalSince(start)
        close(fd)
        #expect(n == 4096 && slice == Array(big[(40 << 20)..<((40 << 20) + 4096)]))
        print("PromisedItemsMountTests: first 4 KiB at 40 MiB of a promised 64 MiB file in \(Int(firstByte * 1000)) ms")

        // Ten readers at once share one download; each reads the whole file right.
        let readers = try shell("""
            cd '\(b.path(""))' && for i in 0 1 2 3 4 5 6 7 8 9; do cmp readers.bin '\(a.path("readers.bin"))' & done; \
            fails=0; for job in $(jobs -p); do wait $job || fails=$((fails+1)); done; echo "failed $fails"
            """)
        #expect(readers.output.contains("failed 0"), "\(readers.output)")

        // mmap reads fetch what they touch.
        let mapped = try shell("""
            python3 -c "import mmap,sys; f=open('\(b.path("mmap.bin"))','rb'); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); \
            sys.stdout.buffer.write(m[5000000:5000016].hex().encode())"
            """)
        #expect(mapped.output == Self.files["mmap.bin"]![5_000_000..<5_000_016].map { String(format: "%02x", $0) }.joined(), "\(mapped.output)")

        // tar --sparse, cp --sparse=auto and rsync -S copy the promised file whole, and the same
        // way as the downloaded one.
        let out = b.fixture.root + "/out"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        #expect(Self.isPromised(b, "tar.bin") && Self.isPromised(b, "cp.bin") && Self.isPromised(b, "rsync.bin"))
        func copies() throws -> [String] {
            [try shell("cd '\(b.path(""))' && tar --sparse -cf - tar.bin | sha256sum").output,
             try shell("cp --sparse=auto '\(b.path("cp.bin"))' '\(out)/cp.bin' && sha256sum < '\(out)/cp.bin'").output,
             try shell("rm -f '\(out)/rsync.bin' && rsync -S '\(b.path("rsync.bin"))' '\(out)/rsync.bin' && sha256sum < '\(out)/rsync.bin'").output]
        }
        let fromPromised = try copies()
        for name in ["tar.bin", "cp.bin", "rsync.bin"] {
            #expect(ManyMachinesTests.within(30) { !Self.isPromised(b, name) } != nil, "\(name) is downloaded after it was read")
        }
        let fromDownloaded = try copies()
        #expect(fromPromised == fromDownloaded)
        // Against a's files: the copies' bytes, and what the archive holds (its header carries
        // the times each machine shows, which under -o writeback a's kernel may still hold).
        let expected = try [shell("sha256sum < '\(a.path("cp.bin"))'").output, shell("sha256sum < '\(a.path("rsync.bin"))'").output]
        #expect(Array(fromPromised.dropFirst()) == expected)
        let archived = try shell("cd '\(b.path(""))' && tar --sparse -cf - tar.bin | tar -xOf - | sha256sum").output
        #expect(archived == (try shell("sha256sum < '\(a.path("tar.bin"))'").output))
        // What was read whole is on disk, byte for byte.
        #expect(ManyMachinesTests.within(30) { !Self.isPromised(b, "big.bin") } != nil)
        #expect(try shell("cmp '\(b.path("big.bin"))' '\(a.path("big.bin"))'").status == 0)
        #expect(attribute(b.path("big.bin"), "user.docfs.status") == "current")
    }

    /// Range reads of a 1 GiB promised file (issue 23 §2): islands of random bytes at offsets
    /// across the whole gigabyte (two overlapping, later writes winning) in zeros (the zero chunks are one chunk, so the
    /// gigabyte goes up in seconds). Each read, farthest first, answers exactly its bytes,
    /// including reads that span an island's edge and the end of the file; then the whole file
    /// comes down and compares equal.
    @Test func rangeReadsOfAPromisedGigabyteFileAnswerTheirBytes() throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair("gigabyte", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        let size = 1 << 30
        let starts = [0, (1 << 20) + 123, (300 << 20) + 7, (512 << 20) - 5000, (2047 << 19) + 1, (1000 << 20) + 77_777, size - 300_000]
        let islands = starts.enumerated().map { (offset: $1, bytes: Self.bytes(256 << 10, seed: 40 + UInt64($0))) }
        let writer = open(a.path("gigabyte.bin"), O_CREAT | O_WRONLY, 0o644)
        try #require(writer >= 0 && ftruncate(writer, off_t(size)) == 0)
        for island in islands {
            #expect(island.bytes.withUnsafeBytes { pwrite(writer, $0.baseAddress, $0.count, off_t(island.offset)) } == island.bytes.count)
        }
        #expect(close(writer) == 0)
        /// What a's file holds at `offset ..< offset + length` (clipped to its end).
        func expected(_ offset: Int, _ length: Int) -> [UInt8] {
            let end = min(offset + length, size)
            var bytes = [UInt8](repeating: 0, count: max(0, end - offset))
            for island in islands {
                let from = max(offset, island.offset), to = min(end, island.offset + island.bytes.count)
                if from < to { bytes.replaceSubrange((from - offset)..<(to - offset), with: island.bytes[(from - island.offset)..<(to - island.offset)]) }
            }
            return bytes
        }
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(120) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        #expect(Self.isPromised(b, "gigabyte.bin"))
        var st = stat()
        #expect(stat(b.path("gigabyte.bin"), &st) == 0 && st.st_size == off_t(size))

        var reads: [(Int, Int)] = [(size + 10, 10), (size, 4096), (size - 1, 1), (size - 1000, 4096), (size - 200, 64 << 10)]
        for island in islands.reversed() {
            let end = island.offset + island.bytes.count
            reads += [(island.offset + 4096 * 7 + 3, 4096), (end - 100, 4096), (max(0, island.offset - 50), 200), (island.offset, 128 << 10)]
        }
        reads.append(((700 << 20) + 11, 1 << 20))  // zeros only
        let fd = open(b.path("gigabyte.bin"), O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        var slowest = 0.0
        for (offset, length) in reads {
            var buffer = [UInt8](repeating: 0xAA, count: length)
            let start = Date()
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, length, off_t(offset)) }
            slowest = max(slowest, Date().timeIntervalSince(start))
            let want = expected(offset, length)
            #expect(n == want.count && Array(buffer.prefix(max(n, 0))) == want, "\(length) bytes at \(offset): \(n) read")
        }
        print("PromisedItemsMountTests: \(reads.count) range reads of a promised 1 GiB file, the slowest \(Int(slowest * 1000)) ms")
        #expect(ManyMachinesTests.within(180) { !Self.isPromised(b, "gigabyte.bin") } != nil, "the rest comes down in the background")
        #expect(try shell("cmp '\(b.path("gigabyte.bin"))' '\(a.path("gigabyte.bin"))'").status == 0)
    }

    /// A file manager showing a folder of promised photos (issue 23 §2): the thumbnail
    /// attribute and the shared thumbnail repository answer from the thumbnails that came with
    /// them, and nothing of the photos is fetched.
    @Test func thumbnailLookupsOfPromisedPhotosFetchNothing() throws {
        let (server, uri, a, b) = try PromisedItemsMountTests.pair("thumbs", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        try ThumbnailTests.copy("photo.jpg", to: a.path("photo.jpg"))
        let made = try #require(ThumbnailTests.thumbnail(a.path("photo.jpg")), "a made no thumbnail")
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(90) {
            ManyMachinesFaultTests.count(server, "SELECT count(*) FROM docfs.versions WHERE name = 'photo.jpg' AND thumbnail IS NOT NULL", uri) == 1
        } != nil, "\((try? a.status()) ?? [:])")
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        #expect(Self.isPromised(b, "photo.jpg"))
        #expect(ThumbnailTests.thumbnail(b.path("photo.jpg"), within: 10) == made)
        let shared = b.path(".sh_thumbnails/normal/\(SharedThumbnailTests.md5("photo.jpg")).png")
        #expect(FileManager.default.contents(atPath: shared)?.isEmpty == false)
        #expect(try shell("ls -la '\(b.path(""))' '\(b.path(".sh_thumbnails/normal"))'").status == 0)
        #expect(Self.isPromised(b, "photo.jpg"), "a thumbnail lookup downloaded the photo")
        #expect((try b.status())["downloadedBytes"] as? Int == 0, "\((try? b.status()) ?? [:])")
        // Opened, it comes down (and is counted).
        #expect(try shell("cmp '\(b.path("photo.jpg"))' '\(a.path("photo.jpg"))'").status == 0)
        #expect(((try b.status())["downloadedBytes"] as? Int ?? 0) > 0)
    }

    /// `docfs download`, `docfs pin` and `docfs evict` through b's mount (issue 23 §1):
    /// folders walked, JSON on request, pinned and open files never evicted, an evicted file
    /// read again whole.
    @Test func downloadPinAndEvictFromTheCommandLine() throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair("commands", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        try FileManager.default.createDirectory(atPath: a.path("Projects/deep"), withIntermediateDirectories: true)
        let files = ["Projects/one.bin": Self.bytes(3 << 20, seed: 11), "Projects/deep/two.bin": Self.bytes(3 << 20, seed: 12),
                     "solo.bin": Self.bytes(3 << 20, seed: 13)]
        for (name, content) in files { try Data(content).write(to: URL(fileURLWithPath: a.path(name))) }
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(30) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        for name in files.keys { #expect(Self.isPromised(b, name), "\(name)") }

        let downloaded = try b.docfs("download '\(b.path("Projects"))'")
        #expect(downloaded.status == 0 && downloaded.output.contains("downloaded"), "\(downloaded.output)")
        #expect(!Self.isPromised(b, "Projects/one.bin") && !Self.isPromised(b, "Projects/deep/two.bin") && Self.isPromised(b, "solo.bin"))
        let report = try b.docfs("download --json '\(b.path("solo.bin"))'")
        let rows = (try? JSONSerialization.jsonObject(with: Data(report.output.utf8))) as? [[String: Any]] ?? []
        #expect(rows.count == 1 && rows.first?["ok"] as? Bool == true && (rows.first?["bytes"] as? Int) == 3 << 20, "\(report.output)")
        #expect(attribute(b.path("solo.bin"), "user.docfs.status") == "current")

        // Pinned and open files stay; the rest of the folder is evicted and reads back whole.
        #expect(try b.docfs("pin '\(b.path("Projects/one.bin"))'").status == 0)
        #expect(attribute(b.path("Projects/one.bin"), "user.docfs.status") == "pinned")
        let held = open(b.path("solo.bin"), O_RDONLY)
        let evicted = try b.docfs("evict '\(b.path("Projects"))' '\(b.path("solo.bin"))'")
        #expect(evicted.status == 1, "\(evicted.output)")
        #expect(evicted.output.contains("pinned") && evicted.output.contains("open"), "\(evicted.output)")
        #expect(!Self.isPromised(b, "Projects/one.bin") && Self.isPromised(b, "Projects/deep/two.bin") && !Self.isPromised(b, "solo.bin"))
        #expect(attribute(b.path("Projects/deep/two.bin"), "user.docfs.status") == "promised")
        var backing = stat()
        #expect(stat(b.fixture.store + "/containers/docfs.default/Documents/Projects/deep/two.bin", &backing) == 0 && backing.st_blocks < 128)
        #expect(try shell("cmp '\(b.path("Projects/deep/two.bin"))' '\(a.path("Projects/deep/two.bin"))'").status == 0)
        close(held)
        #expect(try b.docfs("pin --unpin '\(b.path("Projects"))'").status == 0)
        #expect(try b.docfs("evict '\(b.path(""))'").status == 0)
        for name in files.keys { #expect(Self.isPromised(b, name), "\(name) after evicting everything") }
        // An app's import copies the promised file whole (downloaded first, not its empty bytes).
        #expect(try b.docfs("container create com.example.Notes --name Notes '\(b.fixture.mountPoint)'").status == 0)
        let imported = try b.docfs("pick --app com.example.Notes --import '\(b.path("solo.bin"))'")
        #expect(imported.status == 0, "\(imported.output)")
        let copy = b.fixture.store + "/containers/com.example.Notes/Documents/solo.bin"
        #expect(try shell("cmp '\(copy)' '\(a.path("solo.bin"))'").status == 0)
        for name in files.keys { #expect(try shell("cmp '\(b.path(name))' '\(a.path(name))'").status == 0, "\(name)") }
    }

    /// Another machine's new version of a document promised here: the content it replaces is
    /// kept promised (listed, nothing fetched); `docfs versions --show` has the daemon fetch
    /// that version alone and writes it out byte-exact; the current content stays promised.
    /// Issue 49 reproduction 6: a promised file open on b reads on, byte for byte, after a
    /// removes it, as a downloaded one does (POSIX: a removed file lives while it is open); a
    /// promised file not open is removed without a download.
    @Test func aPromisedFileOpenWhenAnotherMachineRemovesItReadsOn() throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair("removedwhileopen", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        let content = Self.bytes(6 << 20, seed: 31)
        try Data(content).write(to: URL(fileURLWithPath: a.path("open.bin")))
        try Data(Self.bytes(2 << 20, seed: 32)).write(to: URL(fileURLWithPath: a.path("closed.bin")))
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(30) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        #expect(Self.isPromised(b, "open.bin") && Self.isPromised(b, "closed.bin"))
        // Opened, nothing read yet (no download under way).
        let fd = open(b.path("open.bin"), O_RDONLY)
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(unlink(a.path("open.bin")) == 0 && unlink(a.path("closed.bin")) == 0)
        #expect(ManyMachinesTests.within(30) { access(b.path("open.bin"), F_OK) != 0 && access(b.path("closed.bin"), F_OK) != 0 } != nil)
        var read = [UInt8](repeating: 0, count: content.count)
        var done = 0
        while done < content.count {
            let n = read[done...].withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(done)) }
            #expect(n > 0, "read at \(done) after the removal: errno \(errno)")
            guard n > 0 else { break }
            done += n
        }
        #expect(done == content.count && read == content, "the open file read on as it was")
        #expect(try b.status()["downloadedBytes"] as? Int ?? 0 <= content.count, "closed.bin was not downloaded to be removed")
    }

    /// Issue 49 reproduction 3b: a promised file written in the store folder (behind the
    /// mount) holds what was written, whole: never torn by its download, not promised any more,
    /// and it goes up as a new version with that content, which the other machine then has. The
    /// same while no daemon serves the store (found at the next mount).
    @Test(arguments: [false, true]) func aPromisedFileWrittenBehindTheMountIsThatContentEverywhere(whileStopped: Bool) throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair(whileStopped ? "behindstopped" : "behind", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        try Data(Self.bytes(3 << 20, seed: 41)).write(to: URL(fileURLWithPath: a.path("report.bin")))
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(30) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        #expect(Self.isPromised(b, "report.bin"))
        if whileStopped { b.fixture.stop() }
        let store = b.fixture.documents + "/report.bin"
        #expect(try shell("printf 'hello' > '\(store)'").status == 0)
        if whileStopped { try b.fixture.start() }
        #expect(ManyMachinesTests.within(30) { a.content("report.bin") == "hello" } != nil,
                "a has \(a.content("report.bin")?.prefix(16) ?? "nothing"); b \((try? b.status()) ?? [:])")
        // (Under -o writeback b's kernel owns the size it knew until it forgets the file.)
        UncoordinatedWriterTests.dropKernelCaches()
        #expect(b.content("report.bin") == "hello")
        #expect(!Self.isPromised(b, "report.bin"))
        #expect(ManyMachinesConvergenceTests.saysInStep([a, b]), "\((try? a.status()) ?? [:]) \((try? b.status()) ?? [:])")
        let lists = try [a, b].map { machine in
            try machine.docfs("versions --json '\(machine.path("report.bin"))'").output
        }
        let rows = lists.map { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [[String: Any]] ?? [] }
        #expect(rows.map { $0.map { "\($0["version"] ?? "-") \($0["kind"] ?? "-") \($0["size"] ?? "-")" } }.allSatisfy { $0 == ["2 current 5", "1 previous \(3 << 20)"] },
                "\(rows)")
    }

    @Test func aVersionKeptPromisedIsFetchedWhenShown() throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair("versions", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        let first = Self.bytes(3 << 20, seed: 21), second = Self.bytes(3 << 20, seed: 22)
        try Data(first).write(to: URL(fileURLWithPath: a.path("report.bin")))
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(30) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        #expect(Self.isPromised(b, "report.bin"))
        try Data(second).write(to: URL(fileURLWithPath: a.path("report.bin")))
        func rows() -> [[String: Any]] {
            let listed = (try? b.docfs("versions --json '\(b.path("report.bin"))'"))?.output ?? ""
            return (try? JSONSerialization.jsonObject(with: Data(listed.utf8))) as? [[String: Any]] ?? []
        }
        #expect(ManyMachinesTests.within(30) { rows().count == 2 } != nil, "\(rows())")
        #expect(Self.isPromised(b, "report.bin"))
        let kept = try #require(rows().first { $0["kind"] as? String == "previous" })
        #expect(kept["promised"] as? Bool == true, "\(kept)")
        #expect(try b.status()["downloadedBytes"] as? Int == 0)
        let number = try #require((kept["version"] as? NSNumber)?.uint64Value)
        let shown = b.fixture.root + "/shown.bin"
        #expect(try shell("'\(MountFixture.binary)' versions --show \(number) '\(b.path("report.bin"))' > '\(shown)'",
                          environment: ["HOME": b.home]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: shown)) == Data(first))
        let fetched = try #require(rows().first { $0["kind"] as? String == "previous" })
        #expect(fetched["promised"] == nil, "\(fetched)")
        #expect(try b.status()["downloadedBytes"] as? Int == first.count)
        #expect(Self.isPromised(b, "report.bin"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: b.path("report.bin"))) == Data(second))
    }

    /// `docfs versions --restore` of a version kept promised, over a current content still
    /// promised: the daemon fetches that version (and nothing else), the restore is a new
    /// version on every machine, byte-exact, and the content it replaced stays a kept version
    /// whose bytes read back right.
    @Test func aVersionKeptPromisedIsFetchedWhenRestored() throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair("restore", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        let first = Self.bytes(2 << 20, seed: 31), second = Self.bytes(2 << 20, seed: 32)
        try Data(first).write(to: URL(fileURLWithPath: a.path("plan.bin")))
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(30) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try b.link(uri).status == 0)
        try b.fixture.start()
        try Data(second).write(to: URL(fileURLWithPath: a.path("plan.bin")))
        func rows() -> [[String: Any]] {
            let listed = (try? b.docfs("versions --json '\(b.path("plan.bin"))'"))?.output ?? ""
            return (try? JSONSerialization.jsonObject(with: Data(listed.utf8))) as? [[String: Any]] ?? []
        }
        #expect(ManyMachinesTests.within(30) { rows().count == 2 } != nil, "\(rows())")
        #expect(Self.isPromised(b, "plan.bin"))
        let kept = try #require(rows().first { $0["kind"] as? String == "previous" })
        #expect(kept["promised"] as? Bool == true, "\(kept)")
        let number = try #require((kept["version"] as? NSNumber)?.uint64Value)
        let restored = try b.docfs("versions --restore \(number) '\(b.path("plan.bin"))'")
        #expect(restored.status == 0, "\(restored.output)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: b.path("plan.bin"))) == Data(first))
        #expect(!Self.isPromised(b, "plan.bin"))
        // The restore goes up as a new version: a has it, byte-exact.
        #expect(ManyMachinesTests.within(30) { (try? Data(contentsOf: URL(fileURLWithPath: a.path("plan.bin")))) == Data(first) } != nil)
        // The content it replaced is a kept version on b, and reads back as `second`.
        let after = rows()
        #expect(after.contains { $0["kind"] as? String == "current" && ($0["version"] as? NSNumber)?.uint64Value ?? 0 > number + 1 }, "\(after)")
        let replaced = try #require(after.filter { $0["kind"] as? String != "current" }
                                         .max { ($0["version"] as? NSNumber)?.uint64Value ?? 0 < ($1["version"] as? NSNumber)?.uint64Value ?? 0 },
                                    "\(after)")
        let replacedNumber = try #require((replaced["version"] as? NSNumber)?.uint64Value)
        let shown = b.fixture.root + "/replaced.bin"
        #expect(try shell("'\(MountFixture.binary)' versions --show \(replacedNumber) '\(b.path("plan.bin"))' > '\(shown)'",
                          environment: ["HOME": b.home]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: shown)) == Data(second))
        // Fetched: the restored version, and the replaced one once (when shown, or to be kept).
        let downloaded = try #require(b.status()["downloadedBytes"] as? Int)
        #expect(downloaded >= first.count && downloaded <= first.count + second.count, "\(downloaded)")
    }
}
