import DocfsChunks
import DocfsSync
import DocfsTestSupport
import Foundation
import Testing

/// Sync engines running on their own threads (issue 22 §1, §5): a save on one machine reaches
/// another through the remote's wake-ups (NOTIFY on PostgreSQL), not the poll; a watch whose
/// connection the server ends reconnects and misses nothing; a cut link shows in the status
/// and its changes go up once it is back.
@Suite struct SyncLoopTests {
    /// Waits up to `seconds` for `condition`; answers how long it took, nil if it never held.
    static func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Double? {
        let start = Date()
        while Date().timeIntervalSince(start) < seconds {
            if condition() { return Date().timeIntervalSince(start) }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return nil
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func aSaveReachesAnotherMachineByWakeUpNotByPoll(_ kind: RemoteUnderTest) throws {
        let remote = FlakyRemote(try kind.make())
        let a = MemoryStore(machine: "a"), b = MemoryStore(machine: "b")
        // Polls far apart: only wake-ups can deliver within the test's bounds.
        let loops = [a, b].map { SyncLoop(engine: SyncEngine(store: $0, remote: remote), pollInterval: 60, log: { _ in }) }
        loops.forEach { $0.start() }
        defer { loops.forEach { $0.stop() } }
        var latencies: [Double] = []
        var doc: UInt64 = 0
        for round in 0..<20 {
            if round == 0 {
                doc = a.create("live.txt", text: "save 0")
            } else {
                a.write(doc, "save \(round)")
            }
            loops[0].wake()
            let latency = try #require(Self.waitFor(5) { b.text(of: doc) == "save \(round)" }, "save \(round) never reached b")
            latencies.append(latency)
        }
        latencies.sort()
        #expect(latencies[latencies.count - 1] < 1, "latencies \(latencies)")
        #expect(loops[1].status.lastError == nil && loops[1].status.lastContact != nil)
    }

    /// A burst of local changes (a tar x) is not read and sent while it streams in: the loop's
    /// rounds give way until it stops for `burstQuiet` (at most `burstDeferral`), then send it
    /// in a round or two. Its own short pauses (a big file, a busy machine's scheduler) do not
    /// end it. The lone saves of `aSaveReachesAnotherMachineByWakeUpNotByPoll` still go at once.
    @Test func roundsGiveWayToABurstOfLocalChangesAndItsShortPauses() throws {
        let remote = InMemoryRemote()
        let a = MemoryStore(machine: "a")
        let loop = SyncLoop(engine: SyncEngine(store: a, remote: remote), pollInterval: 60, burstDeferral: 5, burstQuiet: 0.15, log: { _ in })
        loop.start()
        defer { loop.stop() }
        let first = a.create("first.txt", text: "before the burst")
        loop.wake()
        #expect(Self.waitFor(5) { (try? remote.currentVersion(of: first)) != nil } != nil)
        let before = loop.status.rounds
        // About a second of creates, each waking the loop as a stitched close does, with a
        // 60 ms pause every tenth of a second.
        var made: [UInt64] = []
        let start = Date()
        var lastPause = start
        while Date().timeIntervalSince(start) < 1 {
            made.append(a.create("burst \(made.count).txt", text: "file \(made.count)"))
            loop.wake()
            usleep(500)
            if Date().timeIntervalSince(lastPause) > 0.1 {
                usleep(60_000)
                lastPause = Date()
            }
        }
        let during = loop.status.rounds - before
        // Without the hold about 30 rounds go in that second, and 6 with a hold that a 20 ms
        // pause ends (the loop before 2026-11-29); with it none, or one for each moment this
        // thread is kept off the CPU longer than `burstQuiet`.
        #expect(during <= 2, "\(during) rounds while \(made.count) files were made")
        #expect(Self.waitFor(10) { made.allSatisfy { (try? remote.currentVersion(of: $0)) != nil } } != nil,
                "the burst never went up whole")
    }

    /// More than a page of items that cannot be read now go again each round: the loop waits
    /// for news (or the poll) before going round them again, rather than spinning on them.
    @Test func itemsUnsettledForAWhileDoNotMakeTheLoopSpin() throws {
        let remote = InMemoryRemote()
        let a = MemoryStore(machine: "a")
        let loop = SyncLoop(engine: SyncEngine(store: a, remote: remote), pollInterval: 60, log: { _ in })
        let items = (0..<250).map { a.create("file \($0).txt", text: "file \($0)") }
        a.state.withLock { $0.unsettled = Set(items) }
        loop.start()
        defer { loop.stop() }
        Thread.sleep(forTimeInterval: 1)
        let rounds = loop.status.rounds
        #expect(rounds <= 10, "\(rounds) rounds in a second over items that could not be read")
        a.state.withLock { $0.unsettled = [] }
        loop.wake()
        #expect(Self.waitFor(10) { items.allSatisfy { (try? remote.currentVersion(of: $0)) != nil } } != nil)
    }

    @Test func aWatchWhoseConnectionTheServerEndsReconnectsAndMissesNothing() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("watch")
        let name = String(uri.split(separator: "/").last!.split(separator: "?")[0])
        let remote = try RemoteUnderTest.postgresRemote(uri)
        let a = MemoryStore(machine: "a"), b = MemoryStore(machine: "b")
        let engineA = SyncEngine(store: a, remote: remote)
        let loopB = SyncLoop(engine: SyncEngine(store: b, remote: remote), pollInterval: 60, log: { _ in })
        loopB.start()
        defer { loopB.stop() }
        let doc = a.create("watched.txt", text: "first")
        try engineA.syncOnce()
        #expect(Self.waitFor(5) { b.text(of: doc) == "first" } != nil)
        // The server ends every listening connection; a save made right after still arrives.
        let ended = try server.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'",
                                   database: name)
        #expect(ended == "1\n")
        a.write(doc, "after the watch was cut")
        try engineA.syncOnce()
        #expect(Self.waitFor(10) { b.text(of: doc) == "after the watch was cut" } != nil)
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func aCutLinkShowsInTheStatusAndItsChangesGoUpWhenItIsBack(_ kind: RemoteUnderTest) throws {
        let remote = FlakyRemote(try kind.make())
        let a = MemoryStore(machine: "a"), b = MemoryStore(machine: "b")
        let loopA = SyncLoop(engine: SyncEngine(store: a, remote: remote), pollInterval: 60, log: { _ in })
        let engineB = SyncEngine(store: b, remote: remote)
        loopA.start()
        defer { loopA.stop() }
        remote.down.store(true, ordering: .relaxed)
        let doc = a.create("offline.txt", text: "made offline")
        loopA.wake()
        #expect(Self.waitFor(5) { loopA.status.lastError?.contains("the link is cut") == true } != nil)
        #expect(loopA.status.nextTry != nil && a.pending == 1)
        remote.down.store(false, ordering: .relaxed)
        // The retry comes by itself (1 s, then 2 s, …), no wake-up needed.
        // The outbox empties during the round; the status is the round's, once it is over.
        #expect(Self.waitFor(10) { a.pending == 0 && loopA.status.lastError == nil } != nil)
        try engineB.syncOnce()
        #expect(b.text(of: doc) == "made offline")
    }

    /// The loop sweeps the remote's unused chunks now and then (daily by default), never one
    /// a version names.
    @Test func theLoopSweepsChunksNoVersionNames() throws {
        let remote = InMemoryRemote()
        let a = MemoryStore(machine: "a")
        let doc = a.create("kept.txt", text: "kept content")
        let orphan = Array("left by an upload cut short".utf8)
        let digest = orphan.withUnsafeBytes { ChunkDigest(of: $0) }
        try remote.putChunk(digest, bytes: orphan)
        let loop = SyncLoop(engine: SyncEngine(store: a, remote: remote), pollInterval: 0.2, sweepInterval: 0.2, sweepGrace: 0,
                            log: { _ in })
        loop.start()
        defer { loop.stop() }
        #expect(Self.waitFor(10) { (try? remote.missingChunks([digest])) == [digest] } != nil)
        let kept = try #require(a.current(doc)?.manifest)
        #expect(try remote.missingChunks(kept).isEmpty)
    }
}
