import DocfsSync
import Testing

/// The engine's own check (`SyncEngine.audit`, DESIGN §9.0 "Checked", issue 49 §4): what it
/// finds when a machine silently differs from the remote, that it sets it right, and that it
/// then finds nothing.
@Suite struct SyncAuditTests {
    /// Two machines on one remote, each with a store and an engine.
    struct Pair {
        let remote = InMemoryRemote()
        let a = MemoryStore(machine: "a", space: 1)
        let b = MemoryStore(machine: "b", space: 2)
        let engineA: SyncEngine
        let engineB: SyncEngine

        init() {
            engineA = SyncEngine(store: a, remote: remote)
            engineB = SyncEngine(store: b, remote: remote)
        }

        func syncBoth() throws {
            for _ in 0..<2 {
                try engineA.syncOnce()
                try engineB.syncOnce()
            }
        }
    }

    @Test func machinesInStepAreFoundInStep() throws {
        let pair = Pair()
        let folder = pair.a.create("docs", kind: .folder)
        pair.a.create("a.txt", in: folder, text: "one")
        pair.b.create("b.txt", text: "two")
        try pair.syncBoth()
        let audits = [try pair.engineA.audit(), try pair.engineB.audit()]
        #expect(audits.map { $0?.inStep } == [true, true])
        #expect(audits.map { $0?.repaired } == [0, 0])
    }

    @Test func aChangeTheLogNeverGaveIsFoundAndTaken() throws {
        let pair = Pair()
        let item = pair.a.create("a.txt", text: "one")
        try pair.syncBoth()
        pair.a.write(item, "two")
        try pair.engineA.syncOnce()
        // B's anchor passes the save without taking it (as a sequence committed out of order would).
        try pair.b.setAnchor(try pair.remote.head())
        try pair.engineB.syncOnce()
        #expect(pair.b.text(of: item) == "one")

        let found = try #require(try pair.engineB.audit())
        #expect(found.remote == [item])
        #expect(found.repaired == 1)
        #expect(pair.b.text(of: item) == "two")
        #expect(try pair.engineB.audit()?.inStep == true)
        #expect(try RemoteCheck.run(store: pair.b, remote: pair.remote).isEmpty)
    }

    @Test func aChangeHereNoWatcherSawGoesUp() throws {
        let pair = Pair()
        let item = pair.a.create("a.txt", text: "one")
        try pair.syncBoth()
        pair.b.writeUnseen(item, "written behind the store's back")
        #expect(try pair.engineB.syncOnce().uploaded == 0)

        let found = try #require(try pair.engineB.audit())
        #expect(found.here == [item])
        #expect(found.remote.isEmpty)
        try pair.syncBoth()
        #expect(pair.a.text(of: item) == "written behind the store's back")
        #expect([try pair.engineA.audit()?.inStep, try pair.engineB.audit()?.inStep] == [true, true])
    }

    @Test func anItemLostHereUnseenIsFetchedAgain() throws {
        let pair = Pair()
        let folder = pair.a.create("docs", kind: .folder)
        let item = pair.a.create("a.txt", in: folder, text: "kept")
        try pair.syncBoth()
        pair.b.removeUnseen(item)

        let found = try #require(try pair.engineB.audit())
        #expect(found.here == [item])
        #expect(pair.b.text(of: item) == "kept")
        #expect(pair.b.item(item)?.parent == folder)
        // Nothing went up as a removal: A keeps it too.
        try pair.syncBoth()
        #expect(pair.a.text(of: item) == "kept")
        let again = try pair.engineB.audit()
        #expect(again?.inStep == true, "\(String(describing: again))")
    }

    @Test func anItemTheRemoteDoesNotListGoesUpAgain() throws {
        let pair = Pair()
        pair.a.create("a.txt", text: "one")
        try pair.syncBoth()
        // A store whose sync state says it agreed on an item the remote never had (a remote
        // restored from an older copy): the item goes up again instead of being removed here.
        let restored = InMemoryRemote()
        let c = MemoryStore(machine: "c", space: 3)
        let lonely = c.create("lonely.txt", text: "only here")
        try SyncEngine(store: c, remote: pair.remote).syncOnce()
        let engine = SyncEngine(store: c, remote: restored)
        let found = try #require(try engine.audit())
        #expect(found.remote.contains(lonely))
        try engine.syncOnce()
        #expect(try restored.currentVersion(of: lonely)?.deleted == false)
        #expect(c.text(of: lonely) == "only here")
    }

    /// A check of the changed items reads here only what went up or came down since the last
    /// check (the remote's digest whole); a check of everything reads every item.
    @Test func aCheckOfTheChangedItemsReadsOnlyThose() throws {
        let pair = Pair()
        let untouched = pair.a.create("a.txt", text: "one")
        let saved = pair.a.create("b.txt", text: "two")
        try pair.syncBoth()
        #expect(try pair.engineB.audit(.everything)?.inStep == true)
        pair.b.writeUnseen(untouched, "behind the store's back")
        pair.a.write(saved, "three")
        try pair.syncBoth()
        let changed = try #require(try pair.engineB.audit(.changed))
        #expect(changed.scope == .changed && changed.here.isEmpty && changed.inStep)
        let everything = try #require(try pair.engineB.audit(.everything))
        #expect(everything.here == [untouched])
    }

    @Test func nothingIsCheckedWhileChangesWaitToGoUp() throws {
        let pair = Pair()
        pair.a.create("a.txt", text: "one")
        #expect(try pair.engineA.audit() == nil)
    }

    @Test func theDigestChangesWithAnItemsCurrentNumberOnly() {
        var one = InStepDigest(buckets: 4), two = InStepDigest(buckets: 4)
        one.add(item: 5, number: 1)
        one.add(item: 6, number: 2)
        two.add(item: 6, number: 2)
        two.add(item: 5, number: 1)
        #expect(one == two)
        two = InStepDigest(buckets: 4)
        two.add(item: 5, number: 2)
        two.add(item: 6, number: 2)
        #expect(one.differingBuckets(from: two) == [one.bucket(of: 5)])
        // The term is what PostgreSQL makes of md5('5:1') (checked against the server in
        // RemoteConformanceTests): the first 31 bits of fb472fce3505b79a617e85c461edec2e.
        #expect(InStepDigest.term(item: 5, number: 1) == 0x7b47_2fce)
    }
}
