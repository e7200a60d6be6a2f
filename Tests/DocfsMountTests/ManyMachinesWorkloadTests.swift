import CLinux
import DocfsTestSupport
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Three mounted machines linked to one database, working at once (issue 22 §6): 1,000
/// documents made, and edited, appended to, renamed, moved and deleted at random on all three
/// while they sync. Afterwards the three trees (names, contents, ids), the current version
/// numbers and the indexes are the same everywhere, and what was saved is not lost: every
/// payload written to a document that still exists is its content, or one of its kept versions.
@Suite(.serialized) struct ManyMachinesWorkloadTests {
    typealias Machine = ManyMachinesTests.Machine

    static let folders = ["", "docs", "notes", "archive"]

    /// What one machine does: makes its third of the documents and works on whatever it sees.
    /// Answers each payload written, by the id of the document it was written to.
    static func work(on machine: Machine, index: Int, documents: Int, seed: UInt64) -> [(id: String, payload: String)] {
        var random = SplitMix(seed: seed)
        var written: [(id: String, payload: String)] = []
        var made = 0
        var step = 0
        func place(_ folder: String, _ name: String) -> String { folder.isEmpty ? name : folder + "/" + name }
        func existing() -> [String] {
            folders.flatMap { folder in
                ((try? FileManager.default.contentsOfDirectory(atPath: machine.path(folder))) ?? [])
                    .filter { $0.hasSuffix(".txt") }.map { place(folder, $0) }
            }
        }
        while made < documents || step < documents * 2 {
            step += 1
            let roll = random.next(below: 100)
            if made < documents && (roll < 45 || step >= documents * 2) {
                let path = place(folders[random.next(below: folders.count)], "\(machine.name)-\(made).txt")
                let payload = "\(machine.name) made \(made) at step \(step)\n"
                if (try? payload.write(toFile: machine.path(path), atomically: false, encoding: .utf8)) != nil,
                   let id = machine.id(path) {
                    written.append((id, payload))
                }
                made += 1
                continue
            }
            let files = existing()
            guard !files.isEmpty else { continue }
            let path = files[random.next(below: files.count)]
            switch roll {
            case 45..<70:  // overwrite
                let payload = "\(machine.name) rewrote \(path) at step \(step)\n"
                if (try? payload.write(toFile: machine.path(path), atomically: false, encoding: .utf8)) != nil, let id = machine.id(path) {
                    written.append((id, payload))
                }
            case 70..<80:  // append
                guard let handle = FileHandle(forWritingAtPath: machine.path(path)) else { continue }
                let line = "\(machine.name) appended at step \(step)\n"
                _ = try? handle.seekToEnd()
                try? handle.write(contentsOf: Data(line.utf8))
                try? handle.close()
                if let id = machine.id(path), let whole = machine.content(path) { written.append((id, whole)) }
            case 80..<92:  // rename or move
                let name = "\(machine.name)-moved-\(step).txt"
                _ = rename(machine.path(path), machine.path(place(folders[random.next(below: folders.count)], name)))
            default:  // delete
                // What this machine wrote to it, it deletes now: that content may never have
                // gone up, and a deletion that loses to another machine's edit brings back the
                // edit, not it. It is not looked for after.
                let id = machine.id(path)
                if unlink(machine.path(path)) == 0, let id { written.removeAll { $0.id == id } }
            }
        }
        return written
    }

    /// The versions the machine keeps of item `id` (number and kind, from the version store's
    /// records), in number order: what `docfs versions` lists but the current one.
    static func keptVersions(_ machine: Machine, _ id: String) -> [String] {
        let directory = machine.fixture.store + "/versions/" + id
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }.compactMap { name -> (UInt64, String)? in
            guard let number = UInt64(name.dropLast(5)), let data = FileManager.default.contents(atPath: directory + "/" + name),
                  let record = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
            return (number, record["kind"] as? String ?? "?")
        }.sorted { $0.0 < $1.0 }.map { "v\($0.0) \($0.1)" }
    }

    /// path → "id content" for every document as the machine has it; with `numbers`, the
    /// version number too.
    static func snapshot(_ machine: Machine, numbers: Bool = false) -> [String: String] {
        var tree: [String: String] = [:]
        for folder in folders {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: machine.path(folder))) ?? [] where name.hasSuffix(".txt") {
                let path = folder.isEmpty ? name : folder + "/" + name
                var version = [UInt8](repeating: 0, count: 24)
                let n = docfs_getxattr(machine.path(path), "user.docfs.version", &version, version.count)
                let id = machine.id(path) ?? "-"
                let number = numbers ? " v" + (n > 0 ? String(decoding: version[0..<n], as: UTF8.self) : "-") : ""
                tree[path] = "\(id)\(number) \(machine.content(path) ?? "")"
            }
        }
        return tree
    }

    @Test func aThousandDocumentsWorkedOnAtOnceOnThreeMachinesConverge() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("workload")
        // Every version kept (no thinning), so "nothing saved is lost" can be checked.
        let machines = try ["a", "b", "c"].map { try Machine($0, mounted: true, settings: MountFixture.keepEveryVersion) }
        defer { for machine in machines { machine.fixture.tearDown() } }
        for machine in machines { #expect(try machine.link(uri).status == 0) }
        for folder in Self.folders where !folder.isEmpty {
            try FileManager.default.createDirectory(atPath: machines[0].path(folder), withIntermediateDirectories: false)
        }
        #expect(ManyMachinesTests.within(20) {
            machines.allSatisfy { machine in Self.folders.allSatisfy { FileManager.default.fileExists(atPath: machine.path($0)) } }
        } != nil)

        let written = Mutex<[(id: String, payload: String)]>([])
        let seed = UInt64(Date().timeIntervalSince1970)
        let start = Date()
        DispatchQueue.concurrentPerform(iterations: 3) { index in
            let mine = Self.work(on: machines[index], index: index, documents: 334, seed: seed &+ UInt64(index) &* 7919)
            written.withLock { $0 += mine }
        }
        let worked = Date().timeIntervalSince(start)

        // In step: the same tree, ids, contents and version numbers everywhere, nothing waiting.
        var snapshots: [[String: String]] = []
        let converged = ManyMachinesTests.within(240) {
            let statuses = machines.map { try? $0.status() }
            guard statuses.allSatisfy({ $0?["waiting"] as? Int == 0 && $0?["incoming"] as? Int == 0 }) else { return false }
            snapshots = machines.map { Self.snapshot($0) }
            return snapshots[0] == snapshots[1] && snapshots[1] == snapshots[2]
        }
        // The daemons' logs (each engine's decisions) outlive a failing run, to be read.
        func keepLogs() {
            try? FileManager.default.createDirectory(atPath: "/tmp/docfs-workload-logs", withIntermediateDirectories: true)
            for machine in machines {
                try? machine.fixture.log.write(toFile: "/tmp/docfs-workload-logs/\(machine.name).log", atomically: false, encoding: .utf8)
            }
        }
        if converged == nil {
            snapshots = machines.map { Self.snapshot($0) }
            keepLogs()
        }
        let differing = snapshots.count == 3 ? Set(snapshots[0].keys).union(snapshots[1].keys).union(snapshots[2].keys)
            .filter { key in !(snapshots[0][key] == snapshots[1][key] && snapshots[1][key] == snapshots[2][key]) }.sorted() : []
        let differences = differing.prefix(10).map { key in "\(key): \(snapshots.map { $0[key] ?? "absent" })" }
        // For a differing document: its log on the server and each machine's sync state of it.
        let differingIDs = differing.prefix(3)
            .compactMap { key in snapshots.compactMap { $0[key]?.split(separator: " ").first.map(String.init) }.first }
        // And the index records at a differing path, with the id its file has in the store.
        let records = differing.prefix(3).map { path -> String in
            machines.map { machine in
                let rows = (try? shell("sqlite3 -readonly '\(machine.fixture.store)/index/index.sqlite' \"SELECT path, id, version, sequence FROM items WHERE path = '/\(path)'\" 2>&1").output) ?? ""
                let stored = (try? shell("getfattr --only-values -n user.docfs.id '\(machine.fixture.documents)/\(path)' 2>&1").output) ?? ""
                return "\(machine.name) \(path): index \(rows) file id \(stored)"
            }.joined(separator: "; ")
        }
        // Each item's log on the server, and each machine's records, sync state, outbox rows and
        // engine decisions of it.
        func histories(of ids: [String]) -> [String] {
            ids.map { id -> String in
                let log = (try? server.sql("SELECT number, base, parent, name, deleted, conflict, author_machine, sequence FROM docfs.versions WHERE item = \(id) ORDER BY sequence", database: uri.databaseName)) ?? ""
                let states = machines.map { machine in
                    let query = "SELECT 'record', container, scope, path, version, sequence FROM items WHERE id = \(id); "
                        + "SELECT 'state', state FROM syncItems WHERE item = \(id); SELECT 'outbox', position, sequence FROM outbox WHERE item = \(id);"
                    let index = (try? shell("sqlite3 -readonly '\(machine.fixture.store)/index/index.sqlite' \"\(query)\" 2>&1").output) ?? ""
                    let log = machine.fixture.log.split(separator: "\n").filter { $0.contains("sync: up \(id):") || $0.contains("sync: down \(id) ") || $0.contains("sync: down \(id):")
                        || $0.contains("item \(id) ") }  // the engine's problems with it, too
                        .suffix(32).joined(separator: "\n")
                    return "\(machine.name): \(index) log: \(log)"
                }
                return "item \(id): \(log) states \(states)"
            }
        }
        let described = records + histories(of: differingIDs)
        #expect(converged != nil, "seed \(seed), worked \(Int(worked)) s: \(differences) \(described) \(machines.map { (try? $0.status()) ?? [:] })")
        #expect(snapshots.first.map { $0.count > 100 } == true, "\(snapshots.first?.count ?? 0) documents")
        // One number for each current version everywhere, conflicts or not: a machine's saves
        // that never went up give way to the numbers the remote gave others' versions.
        let numbered = machines.map { Self.snapshot($0, numbers: true) }
        let misnumbered = Set(numbered[0].keys).union(numbered[1].keys)
            .filter { numbered[0][$0] != numbered[1][$0] || numbered[1][$0] != numbered[2][$0] }.sorted().prefix(5)
        // With each machine's kept versions of such a document.
        let kept = misnumbered.map { key in
            machines.map { machine in "\(machine.name): \((try? machine.docfs("versions --json '\(machine.path(key))'"))?.output ?? "")" }
        }
        #expect(misnumbered.isEmpty,
                "\(misnumbered.map { key in numbered.map { $0[key] ?? "absent" } }) \(kept) \(histories(of: misnumbered.compactMap { key in numbered.compactMap { $0[key]?.split(separator: " ").first.map(String.init) }.first }))")
        // One list of versions everywhere: each document's kept versions, numbers and kinds, are
        // the same on every machine (saves that never went up on their own go up before the
        // content after them, or set aside beside it when they lost their race; versions a
        // machine skipped or missed while the item was gone there are fetched; saves begun while
        // the engine commits move up with the numbers the remote gives; a version kept under
        // another number than the remote's takes it once free). Measured on 2026-11-27, 30 runs
        // or so at a time across the three mount modes: before the fixes, 1 or 2 of about 860
        // documents differed in 11 of 32 runs; after each round of fixes (each with a test of
        // its own but one), 4 of 42, 1 of 30, 2 of 30, 1 of 30, 1 of 12, 0 of 30, then 1 of 25
        // runs (a machine whose deletion lost lacked the version it deleted: the document moved
        // while that version was fetched, fixed 2026-11-28 with its test); then 1 of about 40
        // (2026-11-28: the machine whose save lost a race lacked that conflict version, which
        // the others keep: a writer opened the file before the winner was taken). Fixed
        // 2026-11-29 with that race and the others `SyncRandomRaceTests` found (seeded random
        // interleavings on in-process stores): every list the same, no document excepted.
        let ids = Set(numbered[0].values.compactMap { $0.split(separator: " ").first.map(String.init) })
        let differentLists = ids.sorted().filter { id in
            let lists = machines.map { Self.keptVersions($0, id) }
            return lists[0] != lists[1] || lists[1] != lists[2]
        }
        print("ManyMachinesWorkloadTests: version lists differ for \(differentLists.count) of \(ids.count) documents")
        if !differentLists.isEmpty, ProcessInfo.processInfo.environment["DOCFS_WORKLOAD_DETAILS"] != nil {
            print("ManyMachinesWorkloadTests: \(differentLists.prefix(4).map { id in "\(id): \(machines.map { Self.keptVersions($0, id) })" }) \(histories(of: Array(differentLists.prefix(4))))")
        }
        #expect(differentLists.isEmpty, "\(differentLists.count) of \(ids.count) documents: \(differentLists.prefix(4).map { id in "\(id): \(machines.map { Self.keptVersions($0, id) })" }) \(histories(of: Array(differentLists.prefix(6))))")
        for machine in machines {
            let status = try machine.status()
            #expect(status["parked"] as? Int == 0 && status["lastError"] == nil, "\(machine.name): \(status)")
        }
        // Each machine's own check comes to say it is in step, and `remote check` finds nothing
        // (a loaded machine's checks of a thousand documents are spaced by what they cost).
        let saidInStep = ManyMachinesConvergenceTests.saysInStep(machines, within: 120)
        if !saidInStep { keepLogs() }  // the engines' decisions about what the check still finds
        #expect(saidInStep,
                "\(machines.map { (try? $0.status()) ?? [:] }) \(machines.map { (try? ManyMachinesConvergenceTests.check($0).output) ?? "" })")
        // The indexes agree: every document at the same path with the same id.
        let queries = try machines.map { machine in
            try machine.docfs("query 'name ENDSWITH \".txt\"' --store '\(machine.fixture.store)'").output
                .split(separator: "\n").sorted()
        }
        #expect(queries[0] == queries[1] && queries[1] == queries[2] && queries[0].count == snapshots.first?.count,
                "\(queries.map(\.count))")

        // Nothing saved is lost: for a sample of payloads written to documents that still exist,
        // the payload is the content or one of the kept versions on the machine.
        let byID = Dictionary(snapshots.first?.map { key, value in (String(value.split(separator: " ")[0]), key) } ?? [], uniquingKeysWith: { a, _ in a })
        var random = SplitMix(seed: seed)
        let candidates = written.withLock { $0 }.filter { byID[$0.id] != nil }
        var checked = 0
        for _ in 0..<min(60, candidates.count) {
            let (id, payload) = candidates[random.next(below: candidates.count)]
            guard let path = byID[id] else { continue }
            let found = machines.contains { machine in
                if machine.content(path) == payload { return true }
                let listed = (try? machine.docfs("versions --json '\(machine.path(path))'"))?.output ?? ""
                let rows = (try? JSONSerialization.jsonObject(with: Data(listed.utf8))) as? [[String: Any]] ?? []
                return rows.contains { row in
                    guard let number = (row["version"] as? NSNumber)?.uint64Value else { return false }
                    return (try? machine.docfs("versions --show \(number) '\(machine.path(path))'"))?.output == payload
                }
            }
            if !found {
                // Each machine's kept versions of it, number, kind and content.
                let kept = machines.map { machine -> String in
                    let listed = (try? machine.docfs("versions --json '\(machine.path(path))'"))?.output ?? ""
                    let rows = (try? JSONSerialization.jsonObject(with: Data(listed.utf8))) as? [[String: Any]] ?? []
                    return "\(machine.name): " + rows.map { row in
                        let number = (row["version"] as? NSNumber)?.uint64Value ?? 0
                        let shown = (try? machine.docfs("versions --show \(number) '\(machine.path(path))'"))?.output ?? "?"
                        return "v\(number) \(row["kind"] ?? "") \(shown.debugDescription)"
                    }.joined(separator: ", ")
                }
                Issue.record("the payload \(payload.debugDescription) of \(path) (\(id)) is nowhere (seed \(seed)): \(kept) \(histories(of: [id]))")
                keepLogs()
            }
            checked += 1
        }
        #expect(checked > 20)
    }
}

