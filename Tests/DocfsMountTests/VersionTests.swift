import CLinux
import DocfsIndex
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Write sessions and versions (issue 3 §1, §4): each session that changes a file makes one
/// version, and the content it superseded is kept and listed by `docfs versions`.
@Suite(.needsRootAndFUSE) struct VersionTests {
    @Test func eachWriteSessionMakesOneVersionAndKeepsWhatItReplaced() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("notes.txt")
        try write("one\n", to: f)
        #expect(attribute(f, "user.docfs.version") == "1")
        try write("two, longer\n", to: f)  // O_TRUNC: a session
        #expect(attribute(f, "user.docfs.version") == "2")
        let appended = try shell("echo three >> '\(f)'")
        #expect(appended.status == 0)
        #expect(attribute(f, "user.docfs.version") == "3")

        // Two writers at once are one session: one version when the last closes.
        let a = open(f, O_WRONLY)
        let b = open(f, O_WRONLY | O_APPEND)
        #expect(a >= 0 && b >= 0)
        #expect(pwrite(a, "TWO", 3, 0) == 3)
        #expect(write(b, "four\n", 5) == 5)
        close(a)
        close(b)
        #expect(attribute(f, "user.docfs.version") == "4")
        let id = try #require(itemID(f))

        let listing = try versionsJSON(fixture, f)
        #expect(listing.map(\.version) == [4, 3, 2, 1])
        #expect(listing.map(\.kind) == ["current", "previous", "previous", "previous"])
        #expect(listing.first?.size == Int64("TWO, longer\nthree\nfour\n".utf8.count))
        #expect(try kept(fixture, id, 1) == "one\n")
        #expect(try shown(fixture, f, 2) == Data("two, longer\n".utf8))  // appended to: a prefix of version 3
        #expect(try kept(fixture, id, 3) == "two, longer\nthree\n")
        #expect(listing.map(\.stored) == [0, 18, 0, 4])
        #expect(listing.first { $0.version == 3 }?.command == "bash")  // who wrote version 3

        let table = try shell("'\(MountFixture.binary)' versions '\(f)'")
        #expect(table.status == 0)
        #expect(table.output.contains("VERSION") && table.output.contains("current") && table.output.contains("bash"))
    }

    @Test func aSessionThatChangesNothingMakesNoVersion() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let f = fixture.path("data.bin")
        try write("same bytes", to: f)
        let fd = open(f, O_RDWR)
        #expect(fd >= 0)
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(read(fd, &buffer, 64) == 10)
        close(fd)
        // The release reaches the daemon after close returns: wait for the rollback.
        #expect(eventually { attribute(f, "user.docfs.version") == "1" })
        #expect(eventually { (try? versionsJSON(fixture, f).count) == 1 })
        // A change that keeps the size is one (even within one tick of the coarse mtime clock:
        // then the content is compared with what was kept).
        let other = open(f, O_WRONLY)
        #expect(pwrite(other, "SAME", 4, 0) == 4)
        close(other)
        #expect(eventually { (try? versionsJSON(fixture, f).map(\.version)) == [2, 1] })
        #expect(attribute(f, "user.docfs.version") == "2")
    }

    /// `docfs versions` says who made every version while the daemon saw it: the one a create
    /// made (kept once it is superseded) and the current one, in the table and in JSON.
    /// A store in which no version was kept yet has no versions folder: who made the files
    /// made so far is saved all the same.
    @Test func whoMadeTheFirstFilesIsKeptBeforeAnyVersionIs() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try shell("sh -c 'echo first > \"\(fixture.path("first.txt"))\"'").status == 0)
        fixture.stop()
        let rows = try versionsJSON(fixture, fixture.documents + "/first.txt")
        #expect(rows.count == 1 && rows[0].command == "sh", "with no daemon: \(rows)")
        #expect(!fixture.log.contains("could not save who made"), "\(fixture.log)")
    }

    @Test func versionsSayWhoMadeThemTheCurrentAndTheCreatedOneToo() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let f = fixture.path("log.txt")
        #expect(try shell("sh -c 'echo first > \"\(f)\"'").status == 0)
        var rows = try versionsJSON(fixture, f)
        #expect(rows.count == 1 && rows[0].kind == "current" && rows[0].command == "sh", "\(rows)")
        #expect(try shell("echo second | tee '\(f)' > /dev/null").status == 0)
        rows = try versionsJSON(fixture, f)
        #expect(rows.map(\.version) == [2, 1], "\(rows)")
        #expect(rows.first { $0.version == 2 }?.command == "tee", "\(rows)")
        #expect(rows.first { $0.version == 1 }?.command == "sh", "the create's version keeps who made it: \(rows)")
        let table = try shell("'\(MountFixture.binary)' versions '\(f)'").output
        let lines = table.split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("2 ") && $0.hasSuffix(", tee") } && lines.contains { $0.hasPrefix("1 ") && $0.hasSuffix(", sh") },
                "\(table)")
        // Saved in the store (versions/makers.json): known with no daemon, after the daemon
        // restarts, and to the next save, which keeps version 2 with who made it although this
        // daemon never saw it made.
        fixture.stop()
        rows = try versionsJSON(fixture, fixture.documents + "/log.txt")
        #expect(rows.first { $0.version == 2 }?.command == "tee", "with no daemon: \(rows)")
        try fixture.start()
        rows = try versionsJSON(fixture, f)
        #expect(rows.first { $0.version == 2 }?.command == "tee" && rows.first { $0.version == 1 }?.command == "sh", "\(rows)")
        #expect(try shell("echo third | dd of='\(f)' status=none").status == 0)
        rows = try versionsJSON(fixture, f)
        #expect(rows.map(\.version) == [3, 2, 1] && rows[0].command == "dd" && rows[1].command == "tee", "\(rows)")
        // Saved every few seconds while the daemon runs, so a daemon killed after that loses nothing.
        #expect(try shell("sh -c 'echo new > \"\(fixture.path("new.txt"))\"'").status == 0)
        usleep(6_000_000)
        kill(try #require(fixture.daemon).processIdentifier, SIGKILL)
        fixture.daemon?.waitUntilExit()
        fixture.stop()
        try fixture.restartAfterCrash()
        rows = try versionsJSON(fixture, fixture.path("new.txt"))
        #expect(rows.count == 1 && rows[0].command == "sh", "after a killed daemon: \(rows)")
    }

    @Test func truncateByPathIsASession() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let f = fixture.path("log")
        try write("0123456789", to: f)
        #expect(truncate(f, 4) == 0)
        #expect(attribute(f, "user.docfs.version") == "2")
        #expect(try kept(fixture, try #require(itemID(f)), 1) == "0123456789")
    }

    @Test func statusReportsIdVersionAndDatesOnTheMountAndInTheStore() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let f = fixture.path("report.txt")
        try write("v1", to: f)
        try write("v2!", to: f)
        let id = try #require(itemID(f))
        for path in [f, fixture.documents + "/report.txt"] {
            let result = try shell("'\(MountFixture.binary)' status --json '\(path)'")
            #expect(result.status == 0, "\(result.output)")
            let json = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]
            #expect(json?["item"] as? UInt64 == id)
            #expect(json?["version"] as? UInt64 == 2)
            #expect(json?["size"] as? Int == 3)
            #expect(json?["keptVersions"] as? Int == 1)
            #expect(json?["conflict"] as? Bool == false)
            #expect(json?["created"] != nil && json?["modified"] != nil)
        }
        let text = try shell("'\(MountFixture.binary)' status '\(f)'")
        #expect(text.output.contains("item id:   \(id)") && text.output.contains("version:   2"))
        let missing = try shell("'\(MountFixture.binary)' status /nonexistent/file")
        #expect(missing.status == 1 && missing.output.contains("does not exist"))
        let elsewhere = try shell("'\(MountFixture.binary)' status /etc/hostname")
        #expect(elsewhere.status == 1 && elsewhere.output.contains("neither on a docfs mount nor in a docfs store"))
    }

    @Test func thePolicyBoundsWhatIsKept() throws {
        let fixture = try MountFixture(settings: #"{"versions": {"keep": 2, "maximumFileMiB": 1, "thinningWindowSeconds": 0}}"#)
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        for i in 1...5 { try write("save \(i)", to: f) }
        #expect(attribute(f, "user.docfs.version") == "5")
        let settled = eventually { (try? versionsJSON(fixture, f).map(\.version)) == [5, 4, 3] }
        #expect(settled, "kept: \((try? versionsJSON(fixture, f)).map { "\($0)" } ?? "no listing")\ndaemon log:\n\(fixture.log)")
        // Larger than maximumFileMiB: written in place, versions counted, nothing kept.
        let big = fixture.path("big")
        try write(String(repeating: "x", count: 2 << 20), to: big)
        try write(String(repeating: "y", count: 2 << 20), to: big)
        #expect(attribute(big, "user.docfs.version") == "2")
        #expect(try versionsJSON(fixture, big).map(\.kind) == ["current"])
    }

    @Test func badSettingsAreReportedWhenMounting() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        try FileManager.default.createDirectory(atPath: fixture.store, withIntermediateDirectories: true)
        try "{ keep: 2".write(toFile: fixture.store + "/settings.json", atomically: false, encoding: .utf8)
        let result = try shell("'\(MountFixture.binary)' mount --store '\(fixture.store)' '\(fixture.mountPoint)'")
        #expect(result.status != 0)
        #expect(result.output.contains("settings.json is not valid JSON"))
    }
}

struct VersionRow: Decodable {
    var version: UInt64
    var kind: String
    var size: Int64
    var stored: Int64
    var command: String?
}

func versionsJSON(_ fixture: MountFixture, _ path: String) throws -> [VersionRow] {
    let result = try shell("'\(MountFixture.binary)' versions --json '\(path)'")
    guard result.status == 0 else { throw FixtureError("docfs versions failed: \(result.output)") }
    return try JSONDecoder().decode([VersionRow].self, from: Data(result.output.utf8))
}

/// The content docfs kept as `version` of item `id`.
func kept(_ fixture: MountFixture, _ id: UInt64, _ version: Int) throws -> String {
    try String(contentsOfFile: fixture.store + "/versions/\(id)/\(version)", encoding: .utf8)
}

/// Writes `text` to `path` as `>` in a shell does (create or truncate, write, close).
func write(_ text: String, to path: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    guard fd >= 0 else { throw FixtureError("cannot open \(path): \(errno)") }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
        throw FixtureError("short write to \(path)")
    }
}

/// Whether `condition` holds within two seconds (for what the kernel sends after a call returns,
/// such as the release of a closed file).
func eventually(_ condition: () -> Bool) -> Bool {
    for _ in 0..<200 {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}

/// Restoring a version (issue 3 §4, C2): through the daemon's control socket while the store
/// is served, on the store directly when not; atomic for readers; itself a new version.
@Suite(.needsRootAndFUSE) struct RestoreTests {
    @Test func restoreThroughTheDaemonIsANewVersionAndSeenAtOnce() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("notes.txt")
        for text in ["one\n", "two\n", "three\n"] { try write(text, to: f) }
        #expect(docfs_setxattr(f, "user.xdg.tags", "work", 4, 0) == 0)
        let id = try #require(itemID(f))
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "three\n")  // cached by the kernel now
        let reader = open(f, O_RDONLY)
        defer { close(reader) }

        let result = try shell("'\(MountFixture.binary)' versions '\(f)' --restore 1")
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("restored version 1"))
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "one\n")
        #expect(itemID(f) == id && inode(f) == inode(fixture.documents + "/notes.txt"))
        #expect(attribute(f, "user.xdg.tags") == "work")
        #expect(attribute(f, "user.docfs.version") == "4")
        #expect(try versionsJSON(fixture, f).map(\.version) == [4, 3, 2, 1])
        #expect(try kept(fixture, id, 3) == "three\n")
        // The restore is in the index when the command returns (S1): no wait, no retry.
        let record = try #require(try indexedRecord(fixture, "/notes.txt"))
        #expect(record.version == 4 && record.size == 4 && UInt64(bitPattern: record.id) == id && record.tags == ["work"])
        // A reader that opened the file before keeps the content it opened.
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(String(decoding: buffer[0..<max(pread(reader, &buffer, 64, 0), 0)], as: UTF8.self) == "three\n")
        let log = fixture.log
        #expect(log.contains("restored version 1 of notes.txt"))
    }

    @Test func restoreWithoutADaemonWorksOnTheStore() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        try write("first\n", to: f)
        try write("second\n", to: f)
        let id = try #require(itemID(f))
        fixture.stop()
        let backing = fixture.documents + "/doc"
        let result = try shell("'\(MountFixture.binary)' versions '\(backing)' --restore 1")
        #expect(result.status == 0, "\(result.output)")
        #expect(try String(contentsOfFile: backing, encoding: .utf8) == "first\n")
        try fixture.start()
        #expect(itemID(f) == id)
        #expect(attribute(f, "user.docfs.version") == "3")
        #expect(try kept(fixture, id, 2) == "second\n")
    }

    @Test func restoreErrorsSayWhatToDo() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        try write("only\n", to: f)
        let missing = try shell("'\(MountFixture.binary)' versions '\(f)' --restore 7")
        #expect(missing.status == 1)
        #expect(missing.output.contains("version 7 of doc is not kept"))
        mkdir(fixture.path("folder"), 0o755)
        let folder = try shell("'\(MountFixture.binary)' versions '\(fixture.path("folder"))' --restore 1")
        #expect(folder.status == 1)
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "only\n")
    }

    @Test func readersSeeTheOldContentOrTheNewNeverAMix() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let f = fixture.path("big")
        let a = String(repeating: "A", count: 1 << 20), b = String(repeating: "B", count: 1 << 20)
        try write(a, to: f)
        try write(b, to: f)  // version 1 holds A
        let done = Atomic(false)
        let torn = Atomic(0), reads = Atomic(0)
        let readerThread = Thread {
            while !done.load(ordering: .relaxed) {
                guard let data = FileManager.default.contents(atPath: f), data.count == 1 << 20 else { continue }
                reads.add(1, ordering: .relaxed)
                if Set(data).count != 1 { torn.add(1, ordering: .relaxed) }
            }
        }
        readerThread.start()
        // Back and forth: each restore brings the other letter back.
        for round in 0..<6 {
            let versions = try versionsJSON(fixture, f)
            let target = versions.first { $0.kind == "previous" && $0.version == versions[0].version - 1 }?.version ?? 1
            let result = try shell("'\(MountFixture.binary)' versions '\(f)' --restore \(target)")
            #expect(result.status == 0, "round \(round): \(result.output)")
        }
        done.store(true, ordering: .relaxed)
        while !readerThread.isFinished { usleep(1000) }
        let readCount = reads.load(ordering: .relaxed), tornCount = torn.load(ordering: .relaxed)
        #expect(readCount > 0)
        #expect(tornCount == 0)
    }
}
