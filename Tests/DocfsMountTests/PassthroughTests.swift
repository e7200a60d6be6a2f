import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// FUSE passthrough: as root on Linux 6.9+, the kernel reads and writes open files' backing
/// files itself. Every other mount test runs with it (the default) and without it
/// (`scripts/test` repeats them with -o nopassthrough and -o writeback); this one checks it is
/// really in use by default and that files opened many times at once share one backing file.
@Suite(.needsRootAndFUSE) struct PassthroughTests {
    @Test func defaultMountsUsePassthroughForConcurrentOpens() throws {
        let fixture = try MountFixture(options: ["allow_other"])
        defer { fixture.tearDown() }
        let path = fixture.path("shared")
        let writer = open(path, O_CREAT | O_RDWR, 0o644)
        let reader = open(path, O_RDONLY)
        let appender = open(path, O_WRONLY | O_APPEND)
        #expect(writer >= 0 && reader >= 0 && appender >= 0)
        #expect(pwrite(writer, "0123456789", 10, 0) == 10)
        #expect(write(appender, "abc", 3) == 3)
        var buffer = [UInt8](repeating: 0, count: 32)
        #expect(pread(reader, &buffer, 32, 0) == 13)
        #expect(String(decoding: buffer[0..<13], as: UTF8.self) == "0123456789abc")
        close(writer); close(reader); close(appender)
        // After the last close the backing file is released; a new open registers it again.
        let again = open(path, O_RDONLY)
        #expect(pread(again, &buffer, 32, 0) == 13)
        close(again)
        let log = fixture.log
        #expect(log.contains("FUSE passthrough in use"), "daemon log:\n\(log)")
        #expect(!log.contains("refused"), "daemon log:\n\(log)")
    }

    @Test func nopassthroughServesThroughDocfs() throws {
        let fixture = try MountFixture(options: ["allow_other", "nopassthrough"])
        defer { fixture.tearDown() }
        let path = fixture.path("file")
        #expect(FileManager.default.createFile(atPath: path, contents: Data("through docfs".utf8)))
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "through docfs")
        let log = fixture.log
        #expect(!log.contains("FUSE passthrough in use"), "daemon log:\n\(log)")
    }
}
