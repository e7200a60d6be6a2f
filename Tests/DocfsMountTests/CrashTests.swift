import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// SIGKILL of the daemon in the middle of writes: the mount point is usable again after a
/// remount, and every write whose fsync returned is intact.
@Suite struct CrashTests {
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
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", Self.writer, fixture.mountPoint]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        usleep(800_000)
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let acknowledged = text.split(separator: "\n").compactMap { Int($0) }
        #expect(acknowledged.count > 20, "the writer made too little progress: \(text.suffix(200))")
        #expect(text.contains("stopped"), "the writer did not notice the daemon died")

        let deadline = Date().addingTimeInterval(5)
        while MountFixture.isMounted(fixture.mountPoint) && Date() < deadline { usleep(20_000) }
        try fixture.start()
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
}
