import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// SIGKILL of the daemon in the middle of writes: the mount point is usable again after a
/// remount, and every write whose fsync returned is intact.
@Suite(.needsRootAndFUSE) struct CrashTests {
    static let writer = """
    import os, sys
    root = sys.argv[1]
    fds = [os.open(os.path.join(root, f"journal{k}"), os.O_CREAT | os.O_RDWR, 0o644) for k in range(3)]
    i = 0
    try:
        while True:
            record = (f"record {i:08d} ".encode() * 300)[:4096]
            os.pwrite(fds[i % 3], record, (i // 3) * 4096)
            os.fsync(fds[i % 3])
            print(i, flush=True)
            i += 1
    except OSError as error:
        print("stopped", error.errno, flush=True)
    """

    @Test func fsyncedWritesSurviveAKilledDaemon() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let text = try Self.killDaemon(of: fixture, after: 800_000, whileRunning: Self.writer)
        let acknowledged = text.split(separator: "\n").compactMap { Int($0) }
        #expect(acknowledged.count > 20, "the writer made too little progress: \(text.suffix(200))")
        #expect(text.contains("stopped"), "the writer did not notice the daemon died")

        try fixture.restartAfterCrash()
        var damaged: [Int] = []
        let files = (0..<3).map { FileHandle(forReadingAtPath: fixture.path("journal\($0)")) }
        for i in acknowledged {
            guard let file = files[i % 3] else { damaged.append(i); continue }
            try file.seek(toOffset: UInt64((i / 3) * 4096))
            let data = try file.read(upToCount: 4096) ?? Data()
            let expected = Data(String(repeating: "record \(String(format: "%08d", i)) ", count: 300).utf8.prefix(4096))
            if data != expected { damaged.append(i) }
        }
        #expect(damaged.isEmpty, "\(damaged.count) of \(acknowledged.count) fsync'd records damaged, first \(damaged.prefix(5))")
    }

    static let saver = """
    import os, sys
    path = sys.argv[1]
    i = 0
    try:
        while True:
            fd = os.open(path, os.O_RDWR)
            os.pwrite(fd, f"record {i:06d}\\n".encode(), os.fstat(fd).st_size)
            os.fsync(fd)
            os.close(fd)
            print(i, flush=True)
            i += 1
    except OSError as error:
        print("stopped", error.errno, flush=True)
    """

    /// SIGKILL in the middle of write sessions and restores: after a restart every fsync'd
    /// record is in the document or one of its kept versions, nothing half done is left in the
    /// store, and the document can be written and restored again at once (no claim stuck).
    @Test func killedDuringSessionsAndRestoresLosesNothingAndLeavesNothing() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("journal.txt")
        try write("start\n", to: f)
        let id = try #require(itemID(f))
        let (saver, output) = try Self.python(Self.saver, [f])
        let restorer = Process()
        restorer.executableURL = URL(fileURLWithPath: "/bin/bash")
        restorer.arguments = ["-c", "while true; do '\(MountFixture.binary)' versions '\(f)' --restore 1 >/dev/null 2>&1; sleep 0.05; done"]
        try restorer.run()
        usleep(1_500_000)
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        saver.waitUntilExit()
        restorer.terminate()
        kill(restorer.processIdentifier, SIGKILL)
        restorer.waitUntilExit()
        let acknowledged = text.split(separator: "\n").compactMap { Int($0) }
        #expect(acknowledged.count > 5, "the saver made too little progress: \(text.suffix(200))")

        try fixture.restartAfterCrash()
        // Every acknowledged record survives: in the current content or in a kept version.
        var everything = (try? String(contentsOfFile: f, encoding: .utf8)) ?? ""
        let versions = fixture.store + "/versions/\(id)"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: versions)) ?? [] where !name.contains(".") {
            everything += (try? String(contentsOfFile: versions + "/" + name, encoding: .utf8)) ?? ""
        }
        let lost = acknowledged.filter { !everything.contains(String(format: "record %06d", $0)) }
        #expect(lost.isEmpty, "\(lost.count) of \(acknowledged.count) fsync'd records lost, first \(lost.prefix(5))")
        // Nothing half done is left (the watcher's first walk and the version store clean up).
        #expect(eventually(seconds: 20) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: fixture.documents)) ?? []
            return !names.contains { $0.hasPrefix(".docfs-") }
        })
        let kept = (try? FileManager.default.contentsOfDirectory(atPath: versions)) ?? []
        #expect(!kept.contains { $0.hasPrefix(".incoming-") })
        // No claim is stuck: a save and a restore go through at once.
        try write("after the crash\n", to: f)
        let restored = try shell("timeout 10 '\(MountFixture.binary)' versions '\(f)' --restore 1")
        #expect(restored.status == 0, "\(restored.output)")
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "start\n")
    }

    static let deltaSaver = """
    import os, sys
    big, log = sys.argv[1], sys.argv[2]
    i = 0
    try:
        while i < 500:
            fd = os.open(big, os.O_RDWR)
            os.pwrite(fd, (f"record {i:06d} ".encode() * 300)[:4096], i * 4096)
            os.fsync(fd)
            os.close(fd)
            fd = os.open(log, os.O_WRONLY | os.O_APPEND)
            os.write(fd, f"line {i:06d}\\n".encode())
            os.fsync(fd)
            os.close(fd)
            print(i, flush=True)
            i += 1
        print("done", flush=True)
    except OSError as error:
        print("stopped", error.errno, flush=True)
    """

    /// SIGKILL in the middle of sessions whose predecessors are kept as deltas (4 KiB rewrites
    /// of a 2 MiB file) and as prefixes (appends to a log): after a restart every fsync'd write
    /// is in the current content, and every kept version reads back as a state the file really
    /// had: the big file's as the first k records over the original bytes, the log's as its
    /// first k lines, none torn by the kill.
    @Test func killedDuringDeltaAndPrefixSessionsLosesNoWriteAndTearsNoVersion() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let big = fixture.path("model.bin"), log = fixture.path("events.log")
        let original = [UInt8](repeating: UInt8(ascii: "."), count: 2 << 20)
        try Data(original).write(to: URL(fileURLWithPath: big))
        try write("", to: log)
        let text = try Self.killDaemon(of: fixture, after: 2_000_000, whileRunning: Self.deltaSaver, on: [big, log])
        let acknowledged = text.split(separator: "\n").compactMap { Int($0) }
        #expect(acknowledged.count > 5, "the saver made too little progress: \(text.suffix(200))")
        try fixture.restartAfterCrash()

        func record(_ i: Int) -> [UInt8] { Array(String(repeating: "record \(String(format: "%06d", i)) ", count: 300).utf8.prefix(4096)) }
        /// How many records `content` holds from the start, when it is exactly those over the
        /// original bytes (nil: not a state the file had).
        func recordsHeld(_ content: [UInt8]) -> Int? {
            guard content.count == original.count else { return nil }
            var k = 0
            while k < 500, Array(content[k * 4096..<(k + 1) * 4096]) == record(k) { k += 1 }
            return content[(k * 4096)...].allSatisfy { $0 == UInt8(ascii: ".") } ? k : nil
        }
        let current = try [UInt8](Data(contentsOf: URL(fileURLWithPath: big)))
        let held = recordsHeld(current)
        #expect(held != nil && held! >= (acknowledged.last ?? -1) + 1, "the current content holds \(held.map(String.init) ?? "a torn state")")
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        #expect(lines.count >= acknowledged.count && lines.enumerated().allSatisfy { $0.element == "line \(String(format: "%06d", $0.offset))" })

        // The newest ten versions of each (those the kill may have caught) and a sample of the rest.
        func sample(_ rows: [VersionRow]) -> [VersionRow] {
            let older = rows.sorted { $0.version > $1.version }
            return Array(older.prefix(10)) + older.dropFirst(10).enumerated().filter { $0.offset % 10 == 0 }.map(\.element)
        }
        let logVersions = try versionsJSON(fixture, log).filter { $0.kind != "current" }
        #expect(logVersions.count >= min(acknowledged.count, 20))
        for row in sample(logVersions) {
            let shown = try shell("'\(MountFixture.binary)' versions --show \(row.version) '\(log)'")
            let kept = shown.output.split(separator: "\n", omittingEmptySubsequences: true)
            #expect(shown.status == 0 && kept.enumerated().allSatisfy { $0.element == "line \(String(format: "%06d", $0.offset))" },
                    "log version \(row.version): \(shown.output.suffix(100))")
        }
        let bigVersions = try versionsJSON(fixture, big).filter { $0.kind != "current" }
        #expect(bigVersions.count >= min(acknowledged.count, 20))
        var previous: Int?
        for row in sample(bigVersions) {
            let shown = try shell("'\(MountFixture.binary)' versions --show \(row.version) '\(big)' | base64 -w0")
            let content = [UInt8](Data(base64Encoded: shown.output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? Data())
            let k = recordsHeld(content)
            #expect(k != nil, "version \(row.version) of the big file is not a state it had (\(content.count) bytes)")
            if let k, let newer = previous { #expect(k <= newer, "version \(row.version) holds more records than a newer one") }
            if let k { previous = k }
        }
    }

    /// SIGKILL right after a run of safe-saves of a big document, while the settler cuts the
    /// kept files into chunks: after a restart every version reads back exactly, nothing half
    /// made is left, every kept file is cut into chunks, and no chunk is left that no version uses.
    @Test func killedWhileVersionsAreCutIntoChunksLosesNoVersion() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let f = fixture.path("report.odt")
        let expected = safeSaveSeededVersions(to: f, seed: 7, size: 4 << 20, count: 9)
        let id = try #require(itemID(f))
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()

        try fixture.restartAfterCrash()
        for version in 1...8 {
            #expect(try shown(fixture, f, version) == expected[version - 1], "version \(version)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: f)) == expected[8])
        let versions = fixture.store + "/versions/\(id)"
        #expect(eventually(seconds: 120) { settledIntoChunks(versions, versions: 8) }, "every kept file cut into chunks, nothing half made left")
        let chunks = fixture.store + "/chunks"
        let unused = (FileManager.default.subpaths(atPath: chunks) ?? []).filter { path in
            var st = stat()
            return path.count == 67 && stat(chunks + "/" + path, &st) == 0 && st.st_nlink < 2
        }
        #expect(unused.isEmpty, "chunks no version uses: \(unused.prefix(3))")
        for version in 1...8 {
            #expect(try shown(fixture, f, version) == expected[version - 1], "version \(version), settled")
        }
    }

    /// Writes, renames, tags and removes files until the mount fails. Everything goes through
    /// a descriptor of the mount's root, so once the daemon is killed every call fails
    /// (ENOTCONN) even after the dead mount is detached: nothing lands in the folder beneath.
    static let churner = """
    import os, sys
    root = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
    i = 0
    try:
        while True:
            d = f"d{i % 7}"
            try:
                os.mkdir(d, dir_fd=root)
            except FileExistsError:
                pass
            p = f"{d}/f{i}.txt"
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=root)
            try:
                os.write(fd, b"x" * (i % 5000))
                if i % 5 == 0 and i % 3 != 0:
                    os.setxattr(fd, "user.xdg.tags", f"t{i % 4}".encode())
            finally:
                os.close(fd)
            if i % 3 == 0:
                os.rename(p, f"moved{i}.md", src_dir_fd=root, dst_dir_fd=root)
            elif i % 7 == 0 and i % 5 != 0:
                os.unlink(p, dir_fd=root)
            if i % 50 == 49:
                os.rename(d, f"renamed{i}", src_dir_fd=root, dst_dir_fd=root)
            print(i, flush=True)
            i += 1
    except OSError as error:
        print("stopped", error.errno, flush=True)
    """

    /// S4: a daemon killed while many writes are stitched (some still only in the index's
    /// journal) leaves an index that, once the store is served again, agrees with the store.
    @Test func killedDuringHeavyWritesTheIndexStillAgreesWithTheStore() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let text = try Self.killDaemon(of: fixture, after: 1_500_000, whileRunning: Self.churner)
        let done = text.split(separator: "\n").compactMap { Int($0) }.count
        #expect(done > 100, "the writer made too little progress: \(text.suffix(200))")
        let journal = fixture.store + "/index/index.journal"
        let journalSize = (try? FileManager.default.attributesOfItem(atPath: journal)[.size] as? Int) ?? 0
        #expect(journalSize > 100, "the killed daemon's journal holds no stitched changes")

        try fixture.restartAfterCrash()
        let check = try shell("'\(MountFixture.binary)' index check '\(fixture.mountPoint)'")
        #expect(check.status == 0, "\(check.output)")
        // And what a query finds is what the mount shows.
        let listed = try shell("cd '\(fixture.mountPoint)' && find . -mindepth 1 | sed 's|^\\.||' | sort")
        let found = try shell("'\(MountFixture.binary)' query '*' '\(fixture.mountPoint)' | sed 's|^\(fixture.mountPoint)||' | sort")
        #expect(found.status == 0 && listed.status == 0)
        #expect(found.output == listed.output && listed.output.split(separator: "\n").count > 100,
                "query and mount differ: \(found.output.count) vs \(listed.output.count) bytes")
    }

    /// Runs the Python `script` on the mount point (or on `paths`), SIGKILLs the daemon
    /// `microseconds` later, and answers what the script printed until it noticed.
    static func killDaemon(of fixture: MountFixture, after microseconds: useconds_t, whileRunning script: String,
                           on paths: [String]? = nil) throws -> String {
        let (process, output) = try python(script, paths ?? [fixture.mountPoint])
        usleep(microseconds)
        guard let daemon = fixture.daemon else { throw FixtureError("the fixture has no daemon") }
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return text
    }

    /// Starts the Python `script` with `arguments`; what it prints is read from `output`.
    static func python(_ script: String, _ arguments: [String]) throws -> (process: Process, output: Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        return (process, output)
    }
}
