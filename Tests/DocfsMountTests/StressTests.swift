import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The stress test of issue 3 §7: writers, safe-savers, restorers and readers through the
/// mount, and a writer in the store behind it, for a bounded time, every payload tagged.
/// Afterwards every payload ever committed is current content or a kept version (nothing
/// silently vanished), and no reader saw a torn result of docfs's own operations (replaces and
/// restores are whole or not at all).
@Suite(.needsRootAndFUSE) struct StressTests {
    /// Payloads committed by the actors, by document.
    final class Ledger: @unchecked Sendable {
        private let lock = NSLock()
        private var committed: [String: [String]] = [:]

        func note(_ tag: String, in document: String) {
            lock.lock()
            committed[document, default: []].append(tag)
            lock.unlock()
        }

        var all: [String: [String]] {
            lock.lock()
            defer { lock.unlock() }
            return committed
        }
    }

    @Test func nothingCommittedVanishesAndNothingIsTorn() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let documents = ["appended.txt", "saved.txt", "outside.txt"]
        for name in documents { try write("start\n", to: fixture.path(name)) }
        let ledger = Ledger()
        let torn = Atomic(0), reads = Atomic(0)
        let saves = (0..<400).map { "save \($0) " + String(repeating: "x", count: 4000 + $0) + "\n" }
        let actors = ActorThreads()
        // Two writers append tagged lines to one document (shared POSIX writing).
        for writer in 0..<2 {
            actors.start { round in
                let tag = "w\(writer)-\(round)"
                let fd = open(fixture.path("appended.txt"), O_WRONLY | O_APPEND)
                guard fd >= 0 else { return }
                let line = Array("\(tag)\n".utf8)
                let ok = Glibc.write(fd, line, line.count) == line.count && fsync(fd) == 0
                close(fd)
                if ok { ledger.note(tag, in: "appended.txt") }
            }
        }
        // A safe-saver replaces another whole (temporary file, rename over).
        actors.start { round in
            let text = saves[round % saves.count]
            let temporary = fixture.path(".saved.txt.tmp\(round)")
            guard (try? write(text, to: temporary)) != nil else { return }
            if rename(temporary, fixture.path("saved.txt")) == 0 {
                ledger.note("save \(round % saves.count) ", in: "saved.txt")
            }
        }
        // A restorer brings back the first version of it now and then.
        actors.start { _ in
            _ = try? shell("'\(MountFixture.binary)' versions '\(fixture.path("saved.txt"))' --restore 1")
            usleep(50_000)
        }
        // A reader: every read of the saved document is one whole save (or the start).
        let whole = Set(saves + ["start\n"])
        actors.start { _ in
            guard let text = try? String(contentsOfFile: fixture.path("saved.txt"), encoding: .utf8) else { return }
            reads.add(1, ordering: .relaxed)
            if !whole.contains(text) { torn.add(1, ordering: .relaxed) }
        }
        // An uncoordinated writer in the store: replaces its document now and then.
        actors.start { round in
            let tag = "u-\(round)"
            let temporary = fixture.documents + "/.outside.partial"
            guard (try? write("\(tag)\n", to: temporary)) != nil,
                  rename(temporary, fixture.documents + "/outside.txt") == 0 else { return }
            ledger.note(tag, in: "outside.txt")
            usleep(20_000)
        }
        usleep(3_000_000)
        #expect(actors.stop(within: 60))
        usleep(500_000)  // the last releases and watcher events

        let readCount = reads.load(ordering: .relaxed), tornCount = torn.load(ordering: .relaxed)
        #expect(readCount > 10)
        #expect(tornCount == 0, "\(tornCount) of \(readCount) reads saw a torn save or restore")
        for (document, tags) in ledger.all {
            #expect(tags.count > 3, "\(document): too little happened")
            let path = fixture.path(document)
            var everything = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            if let id = itemID(path) {
                let versions = fixture.store + "/versions/\(id)"
                for name in (try? FileManager.default.contentsOfDirectory(atPath: versions)) ?? [] where !name.contains(".") {
                    everything += (try? String(contentsOfFile: versions + "/" + name, encoding: .utf8)) ?? ""
                }
            }
            // The uncoordinated writer's replaces are outside docfs: only the last is certain.
            let mustSurvive = document == "outside.txt" ? Array(tags.suffix(1)) : tags
            let lost = mustSurvive.filter { !everything.contains($0 + (document == "saved.txt" ? "" : "\n")) }
            #expect(lost.isEmpty, "\(document): \(lost.count) of \(mustSurvive.count) committed payloads vanished, first \(lost.prefix(3))")
        }
    }
}
