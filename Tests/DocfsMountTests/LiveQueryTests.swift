import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `docfs query --watch` (issue 4 §3, §5): the results, a `gathered` line, then exactly the
/// events each change makes — create, modify, rename (within the results, and out of them),
/// delete, and changes made in the store behind the mount — read from another process while the
/// mount is written.
@Suite(.needsRootAndFUSE) struct LiveQueryTests {
    struct Line: Decodable, Equatable, CustomStringConvertible {
        struct Record: Decodable, Equatable { var path: String }
        var event: String
        var record: Record?
        var count: Int?

        var description: String { "\(event) \(record?.path ?? count.map(String.init) ?? "")" }
    }

    /// A running `docfs query --watch --json`, writing to a file.
    final class LiveQuery: @unchecked Sendable {
        let process = Process()
        let output: String

        init(_ predicate: String, in fixture: MountFixture) throws {
            output = fixture.root + "/live-\(UUID().uuidString.prefix(8)).json"
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = ["-c", "exec '\(MountFixture.binary)' query --watch --json --interval 0.05 '\(predicate)' '\(fixture.mountPoint)' >'\(output)' 2>&1"]
            process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
            try process.run()
            guard eventually(seconds: 10, { self.lines.contains { $0.event == "gathered" } }) else {
                stop()
                throw FixtureError("docfs query --watch did not start: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
            }
        }

        var lines: [Line] {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Line.self, from: Data($0.utf8)) }
        }

        /// The lines after the first `seen`, once `count` more have come and nothing more
        /// follows for `quiet` seconds.
        func next(_ count: Int, after seen: Int, quiet: Double = 0.3) -> [String] {
            _ = eventually(seconds: 20) { self.lines.count >= seen + count }
            var known = lines.count
            repeat {
                usleep(useconds_t(quiet * 1_000_000))
                let now = lines.count
                if now == known { break }
                known = now
            } while true
            return lines.dropFirst(seen).map(\.description)
        }

        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGINT) }
            process.waitUntilExit()
        }
    }

    @Test func exactEventsForEachKindOfChange() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("old\n", to: fixture.path("old.md"))
        try write("not matched\n", to: fixture.path("skip.txt"))
        let live = try LiveQuery("name LIKE \"*.md\"", in: fixture)
        defer { live.stop() }
        #expect(live.lines.map(\.description) == ["result /old.md", "gathered 1"])
        var seen = 2
        func expect(_ events: [String], _ step: String) {
            let got = live.next(events.count, after: seen)
            #expect(got == events, "\(step)")
            seen += got.count
        }

        try write("one\n", to: fixture.path("a.md"))
        expect(["added /a.md"], "create")
        let fd = open(fixture.path("a.md"), O_WRONLY | O_APPEND)
        #expect(Glibc.write(fd, "two\n", 4) == 4)
        #expect(fsync(fd) == 0)  // under the writeback cache, nothing of the write is left for later
        close(fd)
        // The close stitches the new content; the version it makes is committed at the
        // release that follows, which may fall in the next batch (and, under load, well after
        // the close): one change, seen once or twice; the rename waits for the quiet after it.
        let modified = live.next(1, after: seen, quiet: 1)
        #expect((1...2).contains(modified.count) && modified.allSatisfy { $0 == "changed /a.md" }, "modify: \(modified)")
        seen += modified.count
        #expect(rename(fixture.path("a.md"), fixture.path("b.md")) == 0)
        // Under the writeback cache the kernel may send the file's times at the release (a
        // setattr, recorded), which under load can still fall after the rename: the same
        // change seen twice, never another.
        let renamed = live.next(1, after: seen, quiet: 1)
        #expect((1...2).contains(renamed.count) && renamed.allSatisfy { $0 == "changed /b.md" }, "rename within the results: \(renamed)")
        seen += renamed.count
        #expect(rename(fixture.path("b.md"), fixture.path("b.txt")) == 0)
        expect(["removed /b.md"], "rename out of the results")
        #expect(unlink(fixture.path("old.md")) == 0)
        expect(["removed /old.md"], "delete")
        try write("not matched either\n", to: fixture.path("other.txt"))
        #expect(rename(fixture.path("b.txt"), fixture.path("back.md")) == 0)
        expect(["added /back.md"], "rename into the results (and a change outside them)")
        // Behind the mount, in the store itself: the daemon's store watcher records it. A sync
        // tool's way (a whole new file renamed into place) is one change each time.
        try write("from elsewhere\n", to: fixture.documents + "/.c.md.partial")
        #expect(rename(fixture.documents + "/.c.md.partial", fixture.documents + "/c.md") == 0)
        expect(["added /c.md"], "uncoordinated create")
        try write("changed elsewhere\n", to: fixture.documents + "/.c.md.partial")
        #expect(rename(fixture.documents + "/.c.md.partial", fixture.documents + "/c.md") == 0)
        expect(["changed /c.md"], "uncoordinated modify")
        // Written in place, a file may be seen part-way (each look is a change), and the last
        // look is the file as written.
        let appender = open(fixture.documents + "/c.md", O_WRONLY | O_APPEND)
        #expect(Glibc.write(appender, "more\n", 5) == 5)
        close(appender)
        let inPlace = live.next(1, after: seen)
        #expect(!inPlace.isEmpty && inPlace.allSatisfy { $0 == "changed /c.md" }, "\(inPlace)")
        seen += inPlace.count
        #expect(unlink(fixture.documents + "/c.md") == 0)
        expect(["removed /c.md"], "uncoordinated delete")
    }

    @Test func badUseOfWatchIsRefused() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let limited = try shell("'\(MountFixture.binary)' query --watch --limit 3 '*' '\(fixture.mountPoint)'")
        #expect(limited.status == 2 && limited.output.contains("--limit"), "\(limited.output)")
        let interval = try shell("'\(MountFixture.binary)' query --watch --interval 0 '*' '\(fixture.mountPoint)'")
        #expect(interval.status == 2 && interval.output.contains("--interval"), "\(interval.output)")
    }
}
