import DocfsChunks
import DocfsCore
import DocfsSync
import DocfsTestSupport
import Foundation

/// A deterministic simulation of several machines keeping one remote in step (DESIGN §9.0
/// "Proved", issue 49 §5; in the family of Dropbox's CanopyCheck and FoundationDB's
/// simulation). A seed decides everything: which machine does what, in which order, which
/// rounds of the real sync engine run where, and which faults strike (a link cut for a while, a
/// commit's answer lost, a machine crashing in the middle of a round and starting again from
/// what it persisted). Machines are in-memory stores (`MemoryStore`) on the in-memory remote;
/// time is the steps' count. After the steps the faults heal and every machine syncs until
/// nothing moves; then the invariants are checked:
/// - every machine holds the same tree (path → id, kind, content, attributes), with no item
///   whose folder is missing and no two items at one path;
/// - each machine agrees with the remote item by item (`RemoteCheck`: place, kind, content,
///   mode, time, attributes, number);
/// - nothing saved is lost: every content committed of an item that still exists is its
///   content or a kept version somewhere;
/// - nothing is left parked, and the machines came to rest (termination).
/// Run with `SWIFT_DETERMINISTIC_HASHING=1` (scripts/simulate and scripts/test set it), a seed
/// replays exactly: `scripts/simulate --seed N`.
struct SyncSimulation {
    /// What one run may do.
    struct Options: Sendable {
        var machines = 3
        var steps = 80
        /// Links cut, answers lost, machines crashing mid-round.
        var faults = true
        /// Folders made, renamed, moved and removed with what they hold.
        var folders = true
        /// The engine's own check (`SyncEngine.audit`) runs when a machine's round moved nothing
        /// while the machines settle, as the daemon runs it.
        var audits = true
    }

    /// What a run found wrong, with the steps that led there.
    struct Outcome: Sendable {
        var seed: UInt64
        var violations: [String]
        var steps: [String]

        var passed: Bool { violations.isEmpty }

        /// The command that runs this seed again, printing every step.
        var replay: String { "scripts/simulate --seed \(seed)" }

        var report: String {
            "seed \(seed) failed (replay: \(replay)):\n  " + violations.prefix(12).joined(separator: "\n  ")
                + "\n  last steps:\n    " + steps.suffix(30).joined(separator: "\n    ")
        }
    }

    let seed: UInt64
    let options: Options

    init(seed: UInt64, options: Options = Options()) {
        self.seed = seed
        self.options = options
    }

    /// Names drawn from small pools, so machines often pick the same one at once.
    static let fileNames = ["a.txt", "b.txt", "c.txt", "notes.md", "plan.txt"]
    static let folderNames = ["docs", "work", "old", "x"]

    func run() -> Outcome {
        var random = SplitMix(seed: seed)
        let base = InMemoryRemote()
        let links = (0..<options.machines).map { _ in FlakyRemote(base) }
        let stores = (0..<options.machines).map { MemoryStore(machine: "m\($0)", space: UInt64($0) + 1) }
        let tracing = ProcessInfo.processInfo.environment["DOCFS_SIMULATE_TRACE"] != nil
        /// A machine's engine (made again when it crashes), telling its decisions when tracing.
        func engine(_ index: Int) -> SyncEngine {
            let engine = SyncEngine(store: stores[index], remote: links[index], pageSize: 7)
            let name = stores[index].author.machine
            if tracing { engine.onTrace { print("  TRACE \(name) \($0)") } }
            return engine
        }
        var engines = stores.indices.map(engine)
        var steps: [String] = []
        var violations: [String] = []
        var written = 0
        func step(_ line: String) {
            steps.append(line)
            if tracing { print("STEP \(steps.count): \(line)") }
        }
        func pick(_ items: [UInt64]) -> UInt64? { items.isEmpty ? nil : items[random.next(below: items.count)] }

        for _ in 0..<options.steps {
            let index = random.next(below: stores.count)
            let store = stores[index], name = store.author.machine
            let files = store.items(of: .file), folders = options.folders ? store.items(of: .folder) : []
            let folder = random.next(below: 3) == 0 ? 0 : pick(folders) ?? 0
            written += 1
            let text = "\(name) wrote \(written)"
            switch random.next(below: 109) {
            case 0..<12:
                let file = Self.fileNames[random.next(below: Self.fileNames.count)]
                let item = store.create(file, in: folder, text: text)
                step("\(name) writes \(file) in \(folder) (item \(item)): \(text)")
            case 12..<24:
                guard let item = pick(files) else { continue }
                store.write(item, text)
                step("\(name) writes \(item): \(text)")
            case 24..<28:
                guard let item = pick(files) else { continue }
                store.write(item, (store.text(of: item) ?? "") + " + " + text)
                step("\(name) appends to \(item)")
            case 28..<34:
                guard let item = pick(files) else { continue }
                let file = Self.fileNames[random.next(below: Self.fileNames.count)]
                store.rename(item, to: file)
                step("\(name) renames \(item) to \(file)")
            case 34..<38:
                guard let item = pick(files) else { continue }
                store.rename(item, to: store.item(item)?.name ?? "moved.txt", in: folder)
                step("\(name) moves \(item) into \(folder)")
            case 38..<44 where options.folders:
                let made = Self.folderNames[random.next(below: Self.folderNames.count)]
                // mkdir of a name taken: nothing (as mkdir -p)
                let item = store.create(made, in: folder, text: nil, kind: .folder)
                step("\(name) makes folder \(made) in \(folder) (item \(item))")
            case 44..<47 where options.folders:
                guard let item = pick(folders) else { continue }
                let renamed = Self.folderNames[random.next(below: Self.folderNames.count)] + "2"
                store.rename(item, to: renamed)
                step("\(name) renames folder \(item) to \(renamed)")
            case 47..<50 where options.folders:
                guard let item = pick(folders), !store.isWithin(folder, item) else { continue }
                store.rename(item, to: store.item(item)?.name ?? "f", in: folder)
                step("\(name) moves folder \(item) into \(folder)")
            case 50..<55:
                guard let item = pick(files) else { continue }
                store.delete(item)
                step("\(name) deletes \(item)")
            case 55..<57 where options.folders:
                guard let item = pick(folders) else { continue }
                store.deleteTree(item)
                step("\(name) removes folder \(item) with what it holds")
            case 57..<60:
                guard let item = pick(files + folders) else { continue }
                store.setAttribute(item, "user.xdg.tags", random.next(below: 2) == 0 ? nil : text)
                step("\(name) tags \(item)")
            case 100..<102:
                guard let item = pick(files + folders) else { continue }
                let mode: UInt32 = [0o600, 0o644, 0o640, 0o755][random.next(below: 4)]
                store.setMode(item, mode)
                step("\(name) chmods \(item) to \(String(mode, radix: 8))")
            case 102..<104:
                guard let item = pick(files + folders) else { continue }
                store.touchItem(item)
                step("\(name) touches \(item)")
            case 104..<106:
                guard let item = pick(files) else { continue }
                let kept = String((store.text(of: item) ?? "").prefix(random.next(below: 12)))
                store.write(item, kept)
                step("\(name) truncates \(item) to \(kept.utf8.count) bytes")
            case 106..<109:
                // An editor's safe-save without docfs's help: a new file beside, renamed over
                // the document (the document is replaced: a new item at its name).
                guard let item = pick(files), let document = store.item(item) else { continue }
                let temporary = store.create(".\(document.name).swp", in: document.parent, text: text)
                store.rename(temporary, to: document.name)
                step("\(name) safe-saves \(item) as item \(temporary)")
            case 60..<92:
                let outcome = (try? engines[index].syncOnce()).map { "\($0.uploaded) up, \($0.applied) down, \($0.conflicts) conflicts" }
                step("\(name) syncs: \(outcome ?? "failed")")
            case 92..<95 where options.faults:
                let down = !links[index].down.load(ordering: .relaxed)
                links[index].down.store(down, ordering: .relaxed)
                step("\(name)'s link is \(down ? "cut" : "back")")
            case 95..<97 where options.faults:
                links[index].loseNextCommitAnswer.store(true, ordering: .relaxed)
                let outcome = (try? engines[index].syncOnce()).map { "\($0.uploaded) up" }
                step("\(name) syncs, the answer to its next commit lost: \(outcome ?? "failed")")
            case 97..<100 where options.faults:
                // A crash in the middle of a round: the link is cut after a few calls, the round
                // ends there, and the machine starts again from what it persisted.
                let calls = random.next(below: 6)
                links[index].callsBeforeCut.store(calls, ordering: .relaxed)
                _ = try? engines[index].syncOnce()
                links[index].callsBeforeCut.store(-1, ordering: .relaxed)
                links[index].down.store(false, ordering: .relaxed)
                engines[index] = engine(index)
                step("\(name) crashes after \(calls) calls of a round and starts again")
            default:
                continue
            }
        }

        // Faults heal; every machine syncs until a whole pass moves nothing.
        for link in links {
            link.down.store(false, ordering: .relaxed)
            link.loseNextCommitAnswer.store(false, ordering: .relaxed)
            link.callsBeforeCut.store(-1, ordering: .relaxed)
        }
        step("the links heal; every machine syncs until nothing moves")
        var rested = false
        for _ in 0..<20 {
            var moved = false
            for (engine, store) in zip(engines, stores) {
                do {
                    if try engine.syncOnce() != SyncEngine.Round() {
                        moved = true
                    } else if options.audits, let audit = try engine.audit(), audit.repaired > 0 {
                        // Idle: the engine's own check runs, as the daemon's loop runs it.
                        step("\(store.author.machine)'s check set right \(audit.repaired): \(audit)")
                        moved = true
                    }
                } catch {
                    moved = true
                    violations.append("\(store.author.machine): a round failed with every link up: \(error)")
                }
            }
            if !moved {
                rested = true
                break
            }
        }
        if !rested { violations.append("the machines did not come to rest in 20 passes") }
        violations += check(stores, engines: engines, remote: base)
        return Outcome(seed: seed, violations: violations, steps: steps)
    }

    /// The invariants, once the machines are at rest.
    private func check(_ stores: [MemoryStore], engines: [SyncEngine], remote: InMemoryRemote) -> [String] {
        var violations: [String] = []
        let trees = stores.map { $0.tree() }
        for (store, tree) in zip(stores, trees).dropFirst() where tree != trees[0] {
            let differing = Set(tree.map { "\($0) → \($1)" }).symmetricDifference(trees[0].map { "\($0) → \($1)" }).sorted()
            violations.append("\(store.author.machine)'s tree differs from m0's: \(differing.prefix(6))")
        }
        for (store, engine) in zip(stores, engines) {
            let name = store.author.machine
            let count = store.state.withLock { $0.items.count }
            if let tree = trees.first, count != store.tree().count || tree.isEmpty && count > 0 {
                violations.append("\(name): \(count) items at \(store.tree().count) paths (two items at one path)")
            }
            let orphans = store.orphans()
            if !orphans.isEmpty { violations.append("\(name): items whose folder is not here, or in a cycle: \(orphans.prefix(6))") }
            if store.parkedCount > 0 {
                violations.append("\(name): \(store.parkedCount) changes parked: \((try? store.parkedChanges())?.prefix(2).map(\.problem) ?? [])")
            }
            if store.pending > 0 { violations.append("\(name): \(store.pending) outbox entries left") }
            do {
                let differences = try RemoteCheck.run(store: store, remote: remote)
                if !differences.isEmpty { violations.append("\(name) differs from the remote: \(differences.prefix(4))") }
                // The engine's own check (what `remote status` says) never finds in step what
                // `remote check` finds different, nor differences it does not.
                if let audit = try engine.audit() {
                    if audit.inStep && !differences.isEmpty {
                        violations.append("\(name): the engine's check says in step, remote check finds \(differences.count) differences")
                    } else if !audit.inStep && differences.isEmpty {
                        violations.append("\(name): the engine's check finds differences remote check does not: \(audit)")
                    }
                }
            } catch {
                violations.append("\(name): the check against the remote failed: \(error)")
            }
        }
        // One number, one version, everywhere (DESIGN §9.0): every machine lists the same
        // numbers of each file, of the same kinds, and none pending.
        let files = stores[0].state.withLock { $0.items.values.filter { $0.kind == .file }.map(\.item) }.sorted()
        for item in files {
            let lists = stores.map { $0.versionList(of: item) }
            if let pending = lists.first(where: { $0.keys.contains(where: VersionNumber.isPending) }) {
                violations.append("item \(item) has saves still pending: \(pending.keys.filter(VersionNumber.isPending).map(VersionNumber.shown))")
            }
            for (store, list) in zip(stores, lists).dropFirst() where list != lists[0] {
                let shown = { (list: [UInt64: String]) in list.sorted { $0.key < $1.key }.map { "\(VersionNumber.shown($0.key)) \($0.value)" } }
                violations.append("item \(item)'s versions differ: m0 \(shown(lists[0])), \(store.author.machine) \(shown(list))")
            }
        }
        // Nothing saved is lost: what was committed of an item that exists is somewhere.
        guard let log = try? remote.changes(after: .start, limit: 1_000_000).changes.map(\.version) else {
            return violations + ["the remote's log could not be read"]
        }
        for version in log where !version.conflict && !version.deleted && version.kind == .file {
            guard let current = try? remote.currentVersion(of: version.item), !current.deleted else { continue }
            let payload = String(decoding: (version.chunks ?? []).flatMap { (try? remote.fetchChunk($0)) ?? [] }, as: UTF8.self)
            if !stores.contains(where: { $0.text(of: version.item) == payload || $0.keptTexts(of: version.item).contains(payload) }) {
                violations.append("v\(version.number) of \(version.item) (\(payload.debugDescription)) is nowhere")
            }
        }
        return violations
    }
}
