import DocfsCore
@testable import DocfsFilesystem
@testable import DocfsProvider
import DocfsSync
import DocfsTestSupport
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Seeded random interleavings of saves, writers held open and sync rounds on three
/// in-process stores sharing one document through one remote (issue 22 §4): saves race on
/// the remote, and writers open the document while an engine commits or takes the winner.
/// Once every writer let go and the stores synced, all three hold the remote's current
/// content under its number, list the same versions, and keep every content ever committed.
/// A failing run names its seed; the seed replays it.
@Suite struct SyncRandomRaceTests {
    /// A machine's writer held open across steps (its handle), or none.
    final class Writers: Sendable {
        let held = Mutex<[String: UInt64]>([:])

        /// Releases the writer `machine` holds, if any.
        func letGo(_ machine: TwoStoresInStepTests.Machine) {
            if let handle = held.withLock({ $0.removeValue(forKey: machine.sync.author.machine) }) { machine.filesystem.release(handle) }
        }
    }

    /// Opens the top-level `document` on `filesystem` for writing (truncating it) and writes
    /// `text`; answers the handle, open until let go.
    static func openAndWrite(_ filesystem: Filesystem, _ document: String, _ text: String) throws -> UInt64 {
        let node = try filesystem.lookup(parent: 1, name: FileName(document)).node
        let file = try filesystem.open(node, flags: O_RDWR | O_TRUNC, caller: .daemon)
        _ = try filesystem.write(file.handle, bytes: Array(text.utf8), offset: 0)
        try filesystem.flush(file.handle)
        return file.handle
    }

    // 32 seeds each in the suite (600 and more run by hand): every in-process machine keeps its
    // index open (about 8 descriptors), and with 64 the test process passed 1,000 descriptors,
    // where Foundation's `Process` crashed a mount test running beside.
    @Test(arguments: 0..<32) func randomSavesAndWritersRacingTheEnginesConvergeOnEveryStore(seed: UInt64) throws {
        let fixture = TwoStoresInStepTests()
        let (remote, a, b, c, item) = try fixture.threeMachinesInStep(on: "plan.txt", "base")
        defer { for machine in [a, b, c] { machine.cleanUp() } }
        let machines = [a, b, c]
        var random = SplitMix(seed: 0xD0C5 &+ seed)
        let writers = Writers()
        var saved = 0
        var steps: [String] = []
        let tracing = ProcessInfo.processInfo.environment["DOCFS_SYNC_TRACE"] != nil
        func step(_ line: String) {
            steps.append(line)
            if tracing {
                print("STEP \(line) [" + machines.map { "\(name($0)) v\($0.versionNumber("plan.txt")) \($0.versionList(of: item).joined(separator: ","))" }.joined(separator: " | ") + "]")
            }
        }
        func name(_ machine: TwoStoresInStepTests.Machine) -> String { machine.sync.author.machine }
        func letGo(_ machine: TwoStoresInStepTests.Machine) { writers.letGo(machine) }
        for _ in 0..<40 {
            let machine = machines[random.next(below: 3)]
            let holding = writers.held.withLock { $0[name(machine)] != nil }
            saved += 1
            let text = "\(name(machine))'s save \(saved)"
            switch random.next(below: 10) {
            case 0...2 where !holding:
                try machine.save("plan.txt", text)
                step("\(name(machine)) saves")
            case 3 where !holding:
                writers.held.withLock { $0[name(machine)] = try? SyncRandomRaceTests.openAndWrite(machine.filesystem, "plan.txt", text) }
                step("\(name(machine)) opens a writer")
            case 4 where holding:
                letGo(machine)
                step("\(name(machine)) lets its writer go")
            case 5 where !holding:
                // A writer opens the document while the engine commits (the commit's answer,
                // a refusal of a stale base, a conflict version's commit: whichever comes next).
                let filesystem = machine.filesystem
                let key = name(machine)
                remote.beforeNextCommit {
                    writers.held.withLock { held in
                        if held[key] == nil { held[key] = try? SyncRandomRaceTests.openAndWrite(filesystem, "plan.txt", text) }
                    }
                }
                _ = try? machine.engine.syncOnce()
                step("\(name(machine)) syncs, a writer opening during a commit")
            default:
                _ = try? machine.engine.syncOnce()
                step("\(name(machine)) syncs")
            }
        }
        remote.beforeNextCommit { }  // a hook no commit ran stays unrun
        for machine in machines { letGo(machine) }
        for _ in 0..<6 { for machine in machines { _ = try? machine.engine.syncOnce() } }
        let current = try #require(try remote.currentVersion(of: item))
        let history = try remote.versions(of: item, after: 0, limit: 200)
        let described = history.map { "v\($0.number)\($0.conflict ? " conflict" : $0.previous == true ? " aside" : "")" }
        let committed = Set(try history.filter { !$0.deleted }.map { String(decoding: try ($0.chunks ?? []).flatMap { try remote.fetchChunk($0) }, as: UTF8.self) })
        let first = a.versionList(of: item)
        let context = "seed \(seed): \(steps.joined(separator: "; ")); remote: \(described)"
        for machine in machines {
            let here = machine.versionNumber("plan.txt")
            #expect(machine.content("plan.txt").map { committed.contains($0) } == true, "\(name(machine)): \(context)")
            #expect(here == current.number, "\(name(machine)) holds v\(here), the remote v\(current.number): \(context)")
            #expect(machine.versionList(of: item) == first, "\(name(machine)): \(machine.versionList(of: item)), a: \(first); \(context)")
            let kept = Set(try machine.keptContents(of: item, at: "plan.txt").values + [machine.content("plan.txt") ?? ""])
            #expect(kept.isSuperset(of: committed), "\(name(machine)) lacks \(committed.subtracting(kept).sorted()); \(context)")
        }
    }

    /// The top-level documents of `machine` (no working or control files), by name.
    static func documentNames(_ machine: TwoStoresInStepTests.Machine) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: machine.documents)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    /// Each document of `machine` as "name id vN content", and the versions kept of each.
    static func tree(_ machine: TwoStoresInStepTests.Machine) -> (documents: [String], versions: [UInt64: [String]]) {
        var documents: [String] = []
        var versions: [UInt64: [String]] = [:]
        for name in documentNames(machine) {
            let id = machine.id(name) ?? 0
            // No number yet (a document made here, not saved since) counts as 1, as everywhere.
            documents.append("\(name) \(id) v\(max(machine.versionNumber(name), 1)) \(machine.content(name) ?? "?")")
            versions[id] = machine.versionList(of: id)
        }
        return (documents, versions)
    }

    /// As above, with renames, deletions (an edit elsewhere brings the document back), appends
    /// and safe-saves (a new file renamed over the document) among the steps, on documents
    /// that come and go: once every writer let go and the stores synced, all three hold the
    /// same documents (names, ids, numbers, content) and list the same versions of each.
    @Test(arguments: 0..<32) func randomEditsRenamesAndDeletionsConvergeOnEveryStore(seed: UInt64) throws {
        // `DOCFS_RACE_SEED=N` replays seed N alone (with `DOCFS_SYNC_TRACE=1`, every step).
        if let only = ProcessInfo.processInfo.environment["DOCFS_RACE_SEED"].flatMap({ UInt64($0) }), only != seed { return }
        let fixture = TwoStoresInStepTests()
        let (remote, a, b, c, _) = try fixture.threeMachinesInStep(on: "plan.txt", "base")
        defer { for machine in [a, b, c] { machine.cleanUp() } }
        let machines = [a, b, c]
        let names = ["plan.txt", "notes.txt", "draft.txt"]
        var random = SplitMix(seed: 0xED17 &+ seed)
        let writers = Writers()
        var saved = 0
        var steps: [String] = []
        let tracing = ProcessInfo.processInfo.environment["DOCFS_SYNC_TRACE"] != nil
        func name(_ machine: TwoStoresInStepTests.Machine) -> String { machine.sync.author.machine }
        func step(_ line: String) {
            steps.append(line)
            if tracing { print("STEP \(line) " + machines.map { "\(name($0)): \(Self.tree($0))" }.joined(separator: " | ")) }
        }
        func letGo(_ machine: TwoStoresInStepTests.Machine) { writers.letGo(machine) }
        for _ in 0..<48 {
            let machine = machines[random.next(below: 3)]
            let holding = writers.held.withLock { $0[name(machine)] != nil }
            let present = Self.documentNames(machine)
            let document = present.isEmpty ? names[random.next(below: names.count)] : present[random.next(below: present.count)]
            let other = names[random.next(below: names.count)]
            saved += 1
            let text = "\(name(machine))'s save \(saved)"
            let filesystem = machine.filesystem
            switch random.next(below: 14) {
            case 0...2 where !holding:
                try machine.save(document, text)
                step("\(name(machine)) saves \(document)")
            case 3 where !holding && present.contains(document):
                try machine.append(document, " +\(saved)")
                step("\(name(machine)) appends to \(document)")
            case 4 where !holding && present.contains(document) && !present.contains(other):
                _ = try filesystem.rename(parent: 1, name: FileName(document), newParent: 1, newName: FileName(other), flags: 0, caller: .daemon)
                step("\(name(machine)) renames \(document) to \(other)")
            case 5 where !holding && present.contains(document):
                try filesystem.unlink(parent: 1, name: FileName(document))
                step("\(name(machine)) deletes \(document)")
            case 6 where !holding && present.contains(document):
                // A safe-save: the new content written to a new file, renamed over the document.
                try machine.save(".\(document).tmp", text)
                _ = try filesystem.rename(parent: 1, name: FileName(".\(document).tmp"), newParent: 1, newName: FileName(document), flags: 0, caller: .daemon)
                step("\(name(machine)) safe-saves \(document)")
            case 7 where !holding && present.contains(document):
                writers.held.withLock { $0[name(machine)] = try? SyncRandomRaceTests.openAndWrite(filesystem, document, text) }
                step("\(name(machine)) opens a writer on \(document)")
            case 8 where holding:
                letGo(machine)
                step("\(name(machine)) lets its writer go")
            case 9 where !holding && present.contains(document):
                let key = name(machine)
                remote.beforeNextCommit {
                    writers.held.withLock { held in
                        if held[key] == nil { held[key] = try? SyncRandomRaceTests.openAndWrite(filesystem, document, text) }
                    }
                }
                _ = try? machine.engine.syncOnce()
                step("\(name(machine)) syncs, a writer opening \(document) during a commit")
            default:
                _ = try? machine.engine.syncOnce()
                step("\(name(machine)) syncs")
            }
        }
        remote.beforeNextCommit { }
        for machine in machines { letGo(machine) }
        for _ in 0..<6 { for machine in machines { _ = try? machine.engine.syncOnce() } }
        let first = Self.tree(a)
        if tracing { for machine in machines { for name in Self.documentNames(machine) { if let id = machine.id(name) { print("RECORDS \(machine.sync.author.machine) \(name): \(machine.store.versions.versions(of: ItemID(rawValue: id)).map { "\($0.version) \($0.kind) prefix=\($0.prefix ?? false) detached=\($0.detached ?? false) unsent=\($0.unsent ?? false) remote=\($0.remoteNumber ?? 0) size=\($0.size)" })") } } } }
        let context = "seed \(seed): \(steps.joined(separator: "; "))"
        for machine in [b, c] {
            let tree = Self.tree(machine)
            #expect(tree.documents == first.documents, "\(name(machine)): \(tree.documents), a: \(first.documents); \(context)")
            for (id, list) in first.versions where tree.versions[id] != list {
                Issue.record("item \(id): \(name(machine)) keeps \(tree.versions[id] ?? []), a \(list); \(context)")
            }
        }
    }
}
