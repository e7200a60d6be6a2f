import DocfsCore
import Foundation
import DocfsTestSupport
import Testing
@testable import DocfsIndex

/// The stitching journal (issue 4 §2, S1 kept fast): changes stitched into the journal read, from
/// another connection, exactly as the same changes written straight to SQLite — before their
/// commit, after it, and after a writer killed before committing them is replaced by the next
/// one. Model-based: random changes over a small tree, compared after every step.
@Suite struct IndexJournalTests {
    /// "/ü" twice: the composed and the decomposed spelling are two names, as on Linux; "/a/\u{301}"
    /// is a name that is one combining mark.
    static let places = ["/a", "/a/b", "/a/b/c", "/a/bc", "/a-b", "/d", "/d/e", "/d/e/f", "/g", "/\u{FC}", "/u\u{308}", "/a/\u{301}"]

    static func location(_ path: String) -> IndexLocation {
        IndexLocation(container: "docfs.default", scope: "documents", path: path)
    }

    /// `busy`: most changes are puts and touches of three places, as a busy folder's are.
    static func randomChange(_ rng: inout SplitMix, known entries: [Int64], busy: Bool = false) -> [IndexChange] {
        let crowded = busy && rng.next(below: 5) < 3
        func place() -> IndexLocation { location(places[rng.next(below: crowded ? 3 : places.count)]) }
        switch crowded ? rng.next(below: 3) : rng.next(below: 7) {
        case 0, 1:
            let at = place()
            var record = IndexQueryTests.record(Int64(rng.next(below: 5) + 1), at.name, size: Int64(rng.next(below: 4)) * 100,
                                                modified: 1_773_000_000 + Double(rng.next(below: 10)),
                                                tags: rng.next(below: 3) == 0 ? ["work"] : [])
            record.path = at.path
            // Now and then another machine's change (its name travels in the frame).
            if rng.next(below: 3) == 0 { record.remoteMachine = "machine-\(rng.next(below: 2))" }
            return [.put(record)]
        case 2:
            return [.touch(place(), modified: 1_773_100_000 + Double(rng.next(below: 100)), statusChanged: 1_773_100_000 + Double(rng.next(below: 100)))]
        case 3:
            // Now and then another machine's removal (its name travels too).
            return [.remove(place(), machine: rng.next(below: 3) == 0 ? "machine-1" : "")]
        case 4:
            let (from, to) = (place(), place())
            // As a rename does: whatever was at the destination goes first.
            return from == to || IndexOverlay.isSelfOrUnder(to, from) ? [] : [.remove(to), .move(from: from, to: to)]
        case 5:
            let (a, b) = (place(), place())
            return a == b || IndexOverlay.isSelfOrUnder(a, b) || IndexOverlay.isSelfOrUnder(b, a) ? [] : [.exchange(a, b)]
        default:
            guard !entries.isEmpty else { return [] }
            return [.removeEntries([entries[rng.next(below: entries.count)], 999_999])]
        }
    }

    /// What a reader sees: every record with its entry, what changed since a sequence, a
    /// query with sort and limit, and single places.
    static func view(_ index: IndexDatabase, since: Int64) throws -> [String] {
        var lines = try index.allRecords().map {
            "\($0.entry) \($0.path) \($0.id) \($0.size) \($0.modified) \($0.statusChanged) \($0.tags) \($0.remoteMachine)"
        }
        lines.append("count \(try index.count()) latest \(try index.latestSequence())")
        let changes = try index.changes(after: since)
        lines.append("written \(changes.written.map(\.entry)) removed \(changes.removed) by \(changes.removedBy.sorted { $0.key < $1.key }) sequence \(changes.sequence)")
        for query in try queries() { lines.append("query \(try index.records(matching: query).map(\.entry))") }
        lines.append("id 3: \(try index.records(id: 3).map(\.path))")
        for path in places { lines.append("\(path): \(try index.record(at: location(path))?.entry ?? 0)") }
        // Spelled out by scalars, so lines compare by bytes (`String ==` takes the NFC and the
        // NFD "ü" for one).
        return lines.map { line in
            line.unicodeScalars.map { $0.isASCII ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined()
        }
    }

    /// Queries of every kind the overlay answers: by its indexes (names, name beginnings and
    /// patterns, dates, ids, and their AND and OR) and by testing every waiting row, with and
    /// without a limit.
    static func queries() throws -> [IndexQuery] {
        func parsed(_ text: String, sort: [IndexQuery.SortKey] = [], limit: Int? = nil) throws -> IndexQuery {
            IndexQuery(predicate: try IndexQueryTests.parser.parse(text), sort: sort, limit: limit)
        }
        func dated(_ attribute: IndexAttribute, _ op: ComparisonOperator, _ instant: Double, day: Double? = nil) -> QueryPredicate {
            .comparison(Comparison(attribute: attribute, op: op, value: .date(instant, day: day)))
        }
        let newest = [IndexQuery.SortKey(attribute: .modified, descending: true)]
        return [
            try parsed("size >= 100 OR tags CONTAINS \"work\"", sort: newest, limit: 4),
            try parsed("name == \"b\""),
            try parsed("name == \"\u{FC}\" OR name == \"u\u{308}\""),
            try parsed("name BEGINSWITH \"b\"", limit: 2),
            try parsed("name LIKE \"a*\"", sort: newest),
            try parsed("name LIKE \"?\" AND size < 200", limit: 3),
            try parsed("id == 3 OR name == \"c\"", limit: 2),
            try parsed("NOT name == \"b\"", sort: newest, limit: 3),
            IndexQuery(predicate: .and(dated(.modified, .greaterOrEqual, 1_773_000_003), dated(.modified, .lessOrEqual, 1_773_000_006)),
                       sort: newest, limit: 3),
            IndexQuery(predicate: .or(.and(try IndexQueryTests.parser.parse("name BEGINSWITH \"a\""), dated(.modified, .greater, 1_773_100_050)),
                                      dated(.created, .less, 1_772_999_905))),
            IndexQuery(predicate: dated(.modified, .equal, 1_773_100_000, day: 1_773_100_040), sort: newest, limit: 5),
        ]
    }

    /// Seeds above 3 make busy places and long batches: batched commits (`IndexCommitPlan`
    /// folds a batch's touches and puts of one place) end as applying each change does.
    @Test(arguments: [1, 2, 3, 4, 5, 6] as [UInt64])
    func stitchedChangesReadAsCommittedOnesBeforeAndAfterTheCommit(seed: UInt64) throws {
        let busy = seed > 3
        let directory = NSTemporaryDirectory() + "docfs-journal-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var direct: IndexDatabase! = try IndexDatabase(path: directory + "/direct.sqlite")
        // A small journal: it starts again often, carrying the frames still waiting.
        var journaled: IndexDatabase? = try IndexDatabase(path: directory + "/journaled.sqlite", journalRestartSize: 2048)
        let reader = try IndexDatabase(path: directory + "/journaled.sqlite", readOnly: true)
        var rng = SplitMix(seed: seed)
        var commits = 0
        var overlaid = 0
        for step in 0..<400 {
            let entries = try direct.allRecords().map(\.entry)
            let changes = Self.randomChange(&rng, known: entries, busy: busy)
            try direct.apply(changes)
            try journaled!.stitch(changes)
            if rng.next(below: busy ? 20 : 6) == 0 {
                try journaled!.flush()
                commits += 1
            }
            if step % 97 == 96 {
                // Killed before committing: the next writer finds the frames in the journal.
                journaled = nil
                journaled = try IndexDatabase(path: directory + "/journaled.sqlite", journalRestartSize: 2048)
                // Both count on from the numbers their database holds.
                direct = nil
                direct = try IndexDatabase(path: directory + "/direct.sqlite")
            }
            if !IndexJournal.read(journaled!.journalPath).isEmpty { overlaid += 1 }
            let since = Int64(rng.next(below: step + 2))
            let expected = try Self.view(direct, since: since)
            let seen = try Self.view(reader, since: since)
            #expect(seen == expected, "step \(step) seed \(seed): \(changes)")
            // The writer itself lays its waiting frames over the database, without the journal file.
            let own = try Self.view(journaled!, since: since)
            #expect(own == expected, "the writer, step \(step) seed \(seed): \(changes)")
            if seen != expected || own != expected { return }
        }
        #expect(commits > (busy ? 10 : 30) && overlaid > 100, "commits \(commits), steps read through the journal \(overlaid)")
        try journaled!.flush()
        #expect(try Self.view(reader, since: 0) == Self.view(direct, since: 0))
    }

    /// Issue 20 §0: what a read or a stitch costs does not grow with the changes waiting for
    /// their commit. Counted in places the overlay visits, not timed: a read rebuilding the
    /// overlay from every waiting frame (as docfs did) visits them all.
    @Test func readsAndStitchesCostTheSameHoweverManyChangesWait() throws {
        let directory = NSTemporaryDirectory() + "docfs-journal-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let index = try IndexDatabase(path: directory + "/index.sqlite")  // no background commit: frames wait
        func put(_ n: Int) throws {
            var record = IndexQueryTests.record(Int64(n), "f\(n)", size: 1, modified: 1_773_000_000)
            record.path = "/dir/f\(n)"
            try index.stitch([.put(record), .touch(Self.location("/dir"), modified: 1_773_000_000, statusChanged: 1_773_000_000)])
        }
        func cost(_ body: () throws -> Void) rethrows -> Int {
            let before = index.overlaySteps
            try body()
            return index.overlaySteps - before
        }
        var costs: [Int: (stitch: Int, read: Int)] = [:]
        var n = 0
        for waiting in [10, 20_000] {
            while n < waiting { try put(n); n += 1 }
            #expect(index.waitingFrames == waiting)
            let stitch = try cost { () throws in try put(n); n += 1 }
            let read = try cost { () throws in
                #expect(try index.record(at: Self.location("/dir/f7"))?.id == 7)
                #expect(try index.records(id: 5).map(\.path) == ["/dir/f5"])
                #expect(try index.records(entries: [3]).map(\.path) == ["/dir/f2"])
                #expect(try index.record(at: Self.location("/dir/none")) == nil)
            }
            costs[waiting] = (stitch, read)
        }
        #expect(costs[10]!.stitch == costs[20_000]!.stitch && costs[10]!.read == costs[20_000]!.read,
                "10 waiting: \(costs[10]!), 20,000 waiting: \(costs[20_000]!)")
        // Committing them drops them from the overlay, in one pass.
        let commit = try cost { try index.flush() }
        #expect(index.waitingFrames == 0 && commit <= 3 * n, "commit visited \(commit) places for \(n) frames")
        #expect(try index.record(at: Self.location("/dir/f7"))?.id == 7)
        #expect(try index.count() == n + 0)  // "/dir" itself was never put
    }

    /// Issue 20 §0: a `docfs query` whose predicate an index serves reads only the waiting rows
    /// that predicate reaches, and a limit reads only as many database rows as the waiting
    /// changes hide: the same steps and rows with 10 or 20,000 changes waiting (a query laying
    /// every waiting row over its answer, as docfs did, visits them all).
    @Test func indexedQueriesCostTheSameHoweverManyChangesWait() throws {
        let directory = NSTemporaryDirectory() + "docfs-journal-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let index = try IndexDatabase(path: directory + "/index.sqlite")  // no background commit: frames wait
        func record(_ n: Int, _ name: String, modified: Double, size: Int64 = 1) -> IndexRecord {
            var record = IndexQueryTests.record(Int64(n), name, size: size, modified: modified)
            record.path = "/dir/" + name
            return record
        }
        // 2,000 committed rows, then waiting ones, some hiding committed rows (written again).
        try index.stitch((0..<2_000).map { .put(record($0, "c\($0)", modified: 1_700_000_000 + Double($0))) })
        try index.flush()
        for n in 0..<100 { try index.stitch([.put(record(n, "c\(n)", modified: 1_700_000_000 + Double(n), size: 2))]) }
        func cost(_ body: () throws -> Void) rethrows -> (steps: Int, rows: Int) {
            let (steps, rows) = (index.overlaySteps, index.queryRowsReadCount)
            try body()
            return (index.overlaySteps - steps, index.queryRowsReadCount - rows)
        }
        func names(_ text: String, sort: IndexAttribute? = nil, limit: Int? = nil) throws -> [String] {
            let query = IndexQuery(predicate: try IndexQueryTests.parser.parse(text), sort: sort.map { [.init(attribute: $0)] } ?? [], limit: limit)
            return try index.records(matching: query).map { "\($0.name):\($0.size)" }
        }
        let waitingModified = 1_800_000_000.0
        var costs: [Int: (steps: Int, rows: Int)] = [:]
        var n = 0
        for waiting in [10, 20_000] {
            while n < waiting { try index.stitch([.put(record(10_000 + n, "w\(n)", modified: waitingModified + Double(n)))]); n += 1 }
            costs[waiting] = try cost { () throws in
                #expect(try names("name == \"w7\"") == ["w7:1"])
                #expect(try names("name == \"c7\" OR name == \"c1999\"", sort: .name) == ["c1999:1", "c7:2"])
                #expect(try names("name BEGINSWITH \"c199\"", sort: .name, limit: 3) == ["c199:1", "c1990:1", "c1991:1"])
                #expect(try names("name LIKE \"c19?\"", sort: .name) == (190..<200).map { "c\($0):1" })
                #expect(try names("id == 10003") == ["w3:1"])
                let range = IndexQuery(predicate: .and(.comparison(Comparison(attribute: .modified, op: .greaterOrEqual, value: .date(waitingModified + 4, day: nil))),
                                                       .comparison(Comparison(attribute: .modified, op: .less, value: .date(waitingModified + 7, day: nil)))))
                #expect(try index.records(matching: range).map(\.name) == ["w4", "w5", "w6"])
            }
        }
        #expect(costs[10]!.steps == costs[20_000]!.steps && costs[10]!.rows == costs[20_000]!.rows,
                "10 waiting: \(costs[10]!), 20,000 waiting: \(costs[20_000]!)")
        // Waiting changes hiding the first rows a limit reads: it reads on until it has enough.
        #expect(try names("name BEGINSWITH \"c\"", sort: .name, limit: 5) == ["c0:2", "c1:2", "c10:2", "c100:1", "c1000:1"])
        #expect(try names("name BEGINSWITH \"c\" AND size == 2", sort: .name, limit: 3) == ["c0:2", "c1:2", "c10:2"])
        let hidden = try cost { () throws in _ = try names("name BEGINSWITH \"c\"", sort: .name, limit: 5) }
        #expect(hidden.rows < 200, "a limit of 5 behind 100 waiting rows read \(hidden.rows) rows")
    }

    /// Reading under places of every scope (as removals do) never compiles the cached
    /// statement again: with a partial index on `scope = 'external'`, SQLite would weigh each
    /// value bound to `scope = ?` against it and recompile whenever it changed (GRDB's authorizer
    /// running each time), unless the connection plans without bound values.
    @Test func readingPlacesOfEveryScopeNeverCompilesAStatementAgain() throws {
        let directory = NSTemporaryDirectory() + "docfs-journal-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let index = try IndexDatabase(path: directory + "/index.sqlite")
        try index.stitch([.put(IndexQueryTests.record(21, "a.txt"))])
        let places = (0..<200).map { i in
            IndexLocation(container: "docfs.default", scope: ["documents", "external", "data"][i % 3], path: "/f\(i)")
        }
        #expect(try index.recompilationsReadingUnder(places) == 0)
    }

    /// The background commit keeps up with a stream of stitches: it never waits while changes
    /// wait (docfs once stopped committing when a stitch arrived during a commit, and every
    /// change after that waited in the journal until the daemon ended).
    @Test func theBackgroundCommitKeepsUpWithAStream() throws {
        let directory = NSTemporaryDirectory() + "docfs-journal-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let index = try IndexDatabase(path: directory + "/index.sqlite")
        index.startCommitting(every: .milliseconds(1))
        defer { index.stopCommitting() }
        let reader = try IndexDatabase(path: directory + "/index.sqlite", readOnly: true)
        var mostWaiting = 0
        for n in 0..<6_000 {
            var record = IndexQueryTests.record(Int64(n), "f\(n)", size: 1, modified: 1_773_000_000)
            record.path = "/s/f\(n)"
            try index.stitch([.put(record)])
            if n % 500 == 0 { mostWaiting = max(mostWaiting, index.waitingFrames) }
        }
        var waited = 0
        while index.waitingFrames > 0 && waited < 200 {
            usleep(10_000)
            waited += 1
        }
        #expect(index.waitingFrames == 0, "frames still waiting 2 s after the stream: \(index.waitingFrames)")
        #expect(try reader.count() == 6_000)
        // The journal started again behind the commit: it holds a fraction of the stream.
        let size = (try FileManager.default.attributesOfItem(atPath: index.journalPath)[.size] as? Int) ?? 0
        #expect(size < 1 << 20 + 64 << 10, "journal \(size) bytes")
        #expect(mostWaiting < 6_000)
    }

    /// An index its users let go of closes its files though its background commit was never
    /// stopped, and a reopen finds what the commit had not moved yet (in-process test machines
    /// once kept every index they made open, taking the test process past 2,000 descriptors).
    @Test func anIndexLetGoOfClosesItsFilesAndKeepsItsChanges() throws {
        let directory = NSTemporaryDirectory() + "docfs-journal-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func descriptorsOnIndex() -> Int {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return fds.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) ?? "").hasPrefix(directory) }.count
        }
        weak var released: IndexDatabase?
        do {
            let index = try IndexDatabase(path: directory + "/index.sqlite")
            index.startCommitting(every: .seconds(60))  // never gets to commit
            try index.stitch([.put(IndexQueryTests.record(7, "kept.txt"))])
            _ = try index.count()
            #expect(descriptorsOnIndex() > 0)
            released = index
        }
        var waited = 0
        while (released != nil || descriptorsOnIndex() > 0) && waited < 100 {
            usleep(10_000)
            waited += 1
        }
        #expect(released == nil)
        #expect(descriptorsOnIndex() == 0)
        #expect(try IndexDatabase(path: directory + "/index.sqlite").count() == 1)
    }

    /// A torn last frame (a crash mid-append) ends the journal; garbage never crashes a reader.
    @Test func tornAndGarbageJournalsEndCleanly() throws {
        let one = IndexJournal.frame(sequence: 1, entryBase: 0, changes: [.remove(Self.location("/a"))])
        let two = IndexJournal.frame(sequence: 2, entryBase: 0, changes: [.touch(Self.location("/b"), modified: 1, statusChanged: 2)])
        let whole = IndexJournal.header + one + two
        #expect(IndexJournal.frames(in: whole).map(\.sequence) == [1, 2])
        for cut in (IndexJournal.header.count + one.count)..<whole.count {
            #expect(IndexJournal.frames(in: Array(whole[..<cut])).map(\.sequence) == [1])
        }
        var flipped = whole
        flipped[whole.count - 3] ^= 0x40
        #expect(IndexJournal.frames(in: flipped).map(\.sequence) == [1])
        #expect(IndexJournal.frames(in: Array("not a journal".utf8)).isEmpty)

        var rng = SplitMix(seed: 9)
        var decoded = 0
        for _ in 0..<20_000 {
            var bytes = rng.next(below: 2) == 0 ? Array(two[IndexJournal.frameHeaderLength...]) : []
            for _ in 0..<rng.next(below: 8) {
                if bytes.isEmpty || rng.next(below: 2) == 0 {
                    bytes.insert(UInt8(truncatingIfNeeded: rng.next()), at: rng.next(below: bytes.count + 1))
                } else {
                    bytes[rng.next(below: bytes.count)] = UInt8(truncatingIfNeeded: rng.next())
                }
            }
            if (try? IndexChangeCoding.decode(bytes[...])) != nil { decoded += 1 }
            _ = IndexJournal.frames(in: IndexJournal.header + bytes)
        }
        #expect(decoded > 0)
    }
}
