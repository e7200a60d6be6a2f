import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Presenters (C6, issue 3 §6): `docfs watch` streams what happens under a path — created,
/// new versions, moves with the new path, deletions, conflicts — whoever causes it: this
/// mount, the CLI (a restore), or a program writing in the store directly.
@Suite(.needsRootAndFUSE) struct WatchTests {
    struct Event: Decodable, Equatable {
        var kind: String
        var path: String
        var newPath: String?
        var version: UInt64?
        var uncoordinated: Bool
    }

    /// A running `docfs watch --json` writing to files (what it prints, what it says).
    final class Watcher: @unchecked Sendable {
        let process = Process()
        let output: String
        private let messages: String

        init(_ path: String, in fixture: MountFixture) throws {
            output = fixture.root + "/watch-\(UUID().uuidString.prefix(8)).json"
            messages = output + ".err"
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = ["-c", "exec '\(MountFixture.binary)' watch --json '\(path)' >'\(output)' 2>'\(messages)'"]
            process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
            try process.run()
            // The watch is live once the command says so.
            let ready = eventually(seconds: 10) {
                ((try? String(contentsOfFile: self.messages, encoding: .utf8)) ?? "").contains("watching")
            }
            if !ready {
                stop()
                throw FixtureError("docfs watch did not start: \((try? String(contentsOfFile: messages, encoding: .utf8)) ?? "")")
            }
        }

        var events: [Event] {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Event.self, from: Data($0.utf8)) }
        }

        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGINT) }
            process.waitUntilExit()
        }
    }

    @Test func changesThroughTheMountInOrder() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        mkdir(fixture.path("docs"), 0o755)
        let watcher = try Watcher(fixture.path("docs"), in: fixture)
        defer { watcher.stop() }
        try write("one\n", to: fixture.path("docs/a.txt"))
        try write("two\n", to: fixture.path("docs/a.txt"))
        #expect(rename(fixture.path("docs/a.txt"), fixture.path("docs/b.txt")) == 0)
        #expect(unlink(fixture.path("docs/b.txt")) == 0)
        try write("elsewhere\n", to: fixture.path("outside.txt"))  // not under the watched folder
        let expected = [
            Event(kind: "created", path: "docs/a.txt", newPath: nil, version: nil, uncoordinated: false),
            Event(kind: "version", path: "docs/a.txt", newPath: nil, version: 2, uncoordinated: false),
            Event(kind: "moved", path: "docs/a.txt", newPath: "docs/b.txt", version: nil, uncoordinated: false),
            Event(kind: "deleted", path: "docs/b.txt", newPath: nil, version: nil, uncoordinated: false),
        ]
        #expect(eventually(seconds: 20) { watcher.events.count >= expected.count })
        usleep(200_000)
        #expect(watcher.events == expected)
    }

    /// An app's view is watched with paths of its own: its container's Documents and Data,
    /// picks into it, and the picker's move out of it (gone from the view, a reference in its
    /// place); nothing of the user's own. The user view's watcher sees the moved document
    /// arrive, and nothing of the private container.
    @Test func anAppViewIsWatchedWithPathsOfItsOwn() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try runDocfs("container create com.example.Notes --name Notes '\(fixture.mountPoint)'").status == 0)
        let app = try fixture.mountApp("com.example.Notes")
        try write("report\n", to: fixture.path("report.txt"))
        let appWatcher = try Watcher(app, in: fixture)
        defer { appWatcher.stop() }
        let userWatcher = try Watcher(fixture.mountPoint, in: fixture)
        defer { userWatcher.stop() }
        try write("one\n", to: app + "/Documents/a.txt")
        try write("state\n", to: app + "/Data/state.json")
        try write("mine\n", to: fixture.path("user.txt"))
        #expect(rename(app + "/Documents/a.txt", app + "/Documents/b.txt") == 0)
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))'").status == 0)
        #expect(try runDocfs("move '\(app)/Documents/b.txt' --to '\(fixture.mountPoint)'").status == 0)
        let expected = [
            Event(kind: "created", path: "Documents/a.txt", newPath: nil, version: nil, uncoordinated: false),
            Event(kind: "created", path: "Data/state.json", newPath: nil, version: nil, uncoordinated: false),
            Event(kind: "moved", path: "Documents/a.txt", newPath: "Documents/b.txt", version: nil, uncoordinated: false),
            Event(kind: "created", path: "Documents/report.txt", newPath: nil, version: nil, uncoordinated: false),
            Event(kind: "deleted", path: "Documents/b.txt", newPath: nil, version: nil, uncoordinated: false),
            Event(kind: "created", path: "Documents/b.txt", newPath: nil, version: nil, uncoordinated: false),
        ]
        #expect(eventually(seconds: 20) { appWatcher.events.count >= expected.count && userWatcher.events.count >= 2 })
        usleep(200_000)
        #expect(appWatcher.events == expected)
        #expect(userWatcher.events == [
            Event(kind: "created", path: "user.txt", newPath: nil, version: nil, uncoordinated: false),
            Event(kind: "created", path: "b.txt", newPath: nil, version: nil, uncoordinated: false),
        ])
        // A folder of the app's view, and a path in the store the user view does not show.
        let data = try Watcher(app + "/Data", in: fixture)
        defer { data.stop() }
        let inStore = try Watcher(fixture.store + "/containers/com.example.Notes/Documents", in: fixture)
        defer { inStore.stop() }
        try write("two\n", to: app + "/Data/state.json")
        try write("note\n", to: app + "/Documents/note.txt")
        #expect(eventually(seconds: 20) { data.events.count >= 1 && inStore.events.count >= 1 })
        usleep(200_000)
        #expect(data.events == [Event(kind: "version", path: "Data/state.json", newPath: nil, version: 2, uncoordinated: false)])
        #expect(inStore.events == [Event(kind: "created", path: "Documents/note.txt", newPath: nil, version: nil, uncoordinated: false)])
    }

    /// An app view's watch hears of its references' originals changing elsewhere (through the
    /// user view, or in the store behind the mount), at the reference's path in the app's view:
    /// new content as a version, a move or a deletion of the original as a change.
    @Test func anAppViewHearsOfItsReferencesOriginals() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(try runDocfs("container create com.example.Notes --name Notes '\(fixture.mountPoint)'").status == 0)
        let app = try fixture.mountApp("com.example.Notes")
        try write("report\n", to: fixture.path("report.txt"))
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))'").status == 0)
        let appWatcher = try Watcher(app, in: fixture)
        defer { appWatcher.stop() }
        try write("report, revised\n", to: fixture.path("report.txt"))
        #expect(eventually(seconds: 20) {
            appWatcher.events.contains { $0.kind == "version" && $0.path == "Documents/report.txt" && $0.version == 2 && !$0.uncoordinated }
        }, "\(appWatcher.events)")
        try write("from elsewhere\n", to: fixture.documents + "/report.txt")
        #expect(eventually(seconds: 20) {
            appWatcher.events.contains { $0.kind == "version" && $0.path == "Documents/report.txt" && $0.version == 3 && $0.uncoordinated }
        }, "\(appWatcher.events)")
        func changes() -> Int { appWatcher.events.filter { $0.kind == "changed" && $0.path == "Documents/report.txt" }.count }
        #expect(rename(fixture.path("report.txt"), fixture.path("final.txt")) == 0)
        #expect(eventually(seconds: 20) { changes() >= 1 }, "\(appWatcher.events)")
        usleep(200_000)
        let afterMove = changes()
        #expect(unlink(fixture.path("final.txt")) == 0)
        #expect(eventually(seconds: 20) { changes() > afterMove }, "\(appWatcher.events)")
        // Nothing else of the user view reached the app's watch.
        try write("mine\n", to: fixture.path("other.txt"))
        usleep(300_000)
        #expect(appWatcher.events.allSatisfy { $0.path == "Documents/report.txt" }, "\(appWatcher.events)")
    }

    @Test func changesByTheCLIAndBehindTheMount() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let f = fixture.path("notes.txt")
        try write("one\n", to: f)
        try write("two\n", to: f)
        let watcher = try Watcher(fixture.mountPoint, in: fixture)
        defer { watcher.stop() }
        let restored = try shell("'\(MountFixture.binary)' versions '\(f)' --restore 1")
        #expect(restored.status == 0, "\(restored.output)")
        #expect(eventually(seconds: 20) { watcher.events.contains { $0.kind == "version" && $0.path == "notes.txt" && $0.version == 3 } },
                "\(watcher.events)")
        // A program writing in the store itself.
        try write("from elsewhere\n", to: fixture.documents + "/notes.txt")
        #expect(eventually(seconds: 20) {
            watcher.events.contains { $0.kind == "version" && $0.path == "notes.txt" && $0.version == 4 && $0.uncoordinated }
        })
        #expect(unlink(fixture.documents + "/notes.txt") == 0)
        #expect(eventually(seconds: 20) {
            watcher.events.contains { $0.kind == "deleted" && $0.path == "notes.txt" && $0.uncoordinated }
        })
    }

    /// docfs's own changes are not reported as someone else's: names the watcher may hear of
    /// before the call that made them returns (mkdir, link), and changes that move a folder's
    /// or file's change time as a side effect (a name made in a folder just given its id, a hard
    /// link to a file just chmod-ed), which the watcher judges later by the state they left.
    @Test func docfsOwnFoldersLinksAndModesAreNotReportedAsUncoordinated() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let watcher = try Watcher(fixture.mountPoint, in: fixture)
        defer { watcher.stop() }
        // As a shell does them: each command right after the one before.
        let made = try shell("""
            cd '\(fixture.mountPoint)' && for i in $(seq 20); do
              mkdir d$i; echo x > d$i/x; echo f > f$i; ln f$i g$i; chmod 600 f$i
              sleep 0.1
            done
            """)
        #expect(made.status == 0, "\(made.output)")
        // A change behind docfs's back: once it is reported, the watcher saw all of the above.
        try write("s\n", to: fixture.documents + "/sentinel")
        #expect(eventually(seconds: 20) { watcher.events.contains { $0.path == "sentinel" && $0.uncoordinated } }, "\(watcher.events)")
        let uncoordinated = watcher.events.filter { $0.uncoordinated && $0.path != "sentinel" }
        #expect(uncoordinated.isEmpty, "\(uncoordinated)")
    }

    @Test func aRacedSaveReportsItsConflict() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        try write("base\n", to: f)
        let watcher = try Watcher(fixture.mountPoint, in: fixture)
        defer { watcher.stop() }
        let fd = open(f, O_WRONLY | O_TRUNC)
        #expect(Glibc.write(fd, "ours\n", 5) == 5)
        try write("theirs\n", to: fixture.documents + "/doc.partial")
        #expect(rename(fixture.documents + "/doc.partial", fixture.documents + "/doc") == 0)
        #expect(eventually(seconds: 20) {
            fixture.log.contains("both contents will be kept")
        })
        close(fd)
        #expect(eventually(seconds: 20) { watcher.events.contains { $0.kind == "conflict" && $0.path == "doc" } }, "\(watcher.events)")
    }

    @Test func watchingAStoreNobodyServesSaysWhatToDo() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("x\n", to: fixture.path("doc"))
        fixture.stop()
        let result = try shell("'\(MountFixture.binary)' watch '\(fixture.documents)/doc'")
        #expect(result.status == 1)
        #expect(result.output.contains("no daemon serves") && result.output.contains("docfs mount"), "\(result.output)")
    }
}
