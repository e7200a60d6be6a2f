import DocfsChunks
import DocfsCore
import DocfsRemotePostgres
import DocfsSync
import DocfsTestSupport
import Dispatch
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The remotes a sync engine can be linked to, each run through the same suite (as JuiceFS
/// runs one suite per metadata engine): in memory, and PostgreSQL on the test process's own
/// throwaway server, a new database for each test.
enum RemoteUnderTest: String, CaseIterable, CustomStringConvertible, Sendable {
    case inMemory
    case postgres

    var description: String { rawValue }

    func make() throws -> any Remote {
        switch self {
        case .inMemory:
            InMemoryRemote()
        case .postgres:
            try Self.postgresRemote(try ThrowawayPostgres.shared().makeDatabase("conformance"))
        }
    }

    static func postgresRemote(_ uri: String) throws -> PostgresRemote {
        try PostgresRemote(PostgresLocation(uri), machine: "test")
    }
}

/// What every `Remote` must answer (issue 22 §0): the change log read from anchors, chunks
/// stored once and checked, commits with a compare-and-swap on their base (a lost race is a
/// conflict version, never lost), retries applied once, and each container's key-value store.
@Suite struct RemoteConformanceTests {
    static let machineA = RemoteAuthor(machine: "a", user: "alice")
    static let machineB = RemoteAuthor(machine: "b", user: "alice")

    /// Puts `text` as one chunk and answers a proposal of it for `item` named `name` from `base`.
    static func proposal(_ remote: any Remote, item: UInt64, name: String, text: String, base: UInt64,
                         by author: RemoteAuthor = machineA) throws -> RemoteVersion {
        let bytes = Array(text.utf8)
        let digest = bytes.withUnsafeBytes { ChunkDigest(of: $0) }
        try remote.putChunk(digest, bytes: bytes)
        return RemoteVersion(item: item, container: "docfs.default", name: name, kind: .file, base: base,
                             manifest: [digest], size: Int64(bytes.count), modified: 1_700_000_000, author: author)
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func committedVersionsAreListedInCommitOrderAfterAnyAnchor(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        #expect(try remote.changes(after: .start, limit: 10).changes.isEmpty)
        var outcomes: [RemoteCommitOutcome] = []
        for (index, name) in ["a.txt", "b.txt", "c.txt"].enumerated() {
            let proposal = try Self.proposal(remote, item: UInt64(100 + index), name: "" + name, text: name, base: 0)
            outcomes.append(try remote.commit(proposal, operation: "create-\(name)"))
        }
        guard case .current(1, let first) = outcomes[0], case .current(1, let last) = outcomes[2] else {
            Issue.record("\(outcomes)")
            return
        }
        let all = try remote.changes(after: .start, limit: 10)
        #expect(all.changes.map(\.version.name) == ["a.txt", "b.txt", "c.txt"])
        #expect(all.changes.map(\.sequence) == all.changes.map(\.sequence).sorted() && all.next.sequence == last)
        // Pages: a reader that takes one at a time sees each change once, in order.
        var anchor = RemoteAnchor.start
        var seen: [String] = []
        while true {
            let page = try remote.changes(after: anchor, limit: 1)
            if page.changes.isEmpty { break }
            seen += page.changes.map(\.version.name)
            anchor = page.next
        }
        #expect(seen == ["a.txt", "b.txt", "c.txt"] && anchor.sequence == last)
        #expect(try remote.changes(after: RemoteAnchor(sequence: first), limit: 10).changes.count == 2)
        #expect(try remote.changes(after: all.next, limit: 10).changes.isEmpty)
        #expect(throws: RemoteError.self) { try remote.changes(after: .start, limit: 0) }
    }

    /// A save set aside (`previous`) commits whatever its base, beside the current version:
    /// numbered in commit order like every version (what it asks for counts only for an item's
    /// first version), listed in the log as such, and the current version and the next save's
    /// compare-and-swap stay as they were.
    @Test(arguments: RemoteUnderTest.allCases)
    func aSaveSetAsideCommitsBesideTheCurrentVersion(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let first = try Self.proposal(remote, item: 9, name: "doc.txt", text: "one", base: 0)
        _ = try remote.commit(first, operation: "one")
        let second = try Self.proposal(remote, item: 9, name: "doc.txt", text: "two", base: 1)
        _ = try remote.commit(second, operation: "two")
        var aside = try Self.proposal(remote, item: 9, name: "doc.txt", text: "b's, set aside", base: 1, by: Self.machineB)
        aside.previous = true
        aside.number = 5
        guard case .current(3, _) = try remote.commit(aside, operation: "aside", whenStale: .refuse) else {
            Issue.record("a save set aside was not committed in commit order")
            return
        }
        aside.number = VersionNumber.pendingBase + 1  // a pending save asks for nothing
        guard case .current(4, _) = try remote.commit(aside, operation: "aside-again", whenStale: .refuse) else {
            Issue.record("a pending save set aside was not numbered in commit order")
            return
        }
        #expect(try remote.currentVersion(of: 9)?.number == 2)
        let log = try remote.changes(after: .start, limit: 10).changes.map(\.version)
        #expect(log.map(\.number) == [1, 2, 3, 4] && log.map { $0.previous == true } == [false, false, true, true])
        #expect(try remote.version(of: 9, number: 3)?.previous == true)
        // The next save on the current version is current, numbered past the saves set aside.
        let third = try Self.proposal(remote, item: 9, name: "doc.txt", text: "three", base: 2)
        guard case .current(5, _) = try remote.commit(third, operation: "three", whenStale: .refuse) else {
            Issue.record("the save after the ones set aside was not current")
            return
        }
        // An item's versions above a number, whatever they are, lowest first.
        #expect(try remote.versions(of: 9, after: 1, limit: 10).map(\.number) == [2, 3, 4, 5])
        #expect(try remote.versions(of: 9, after: 3, limit: 1).map(\.number) == [4])
        #expect(try remote.versions(of: 10, after: 0, limit: 10).isEmpty)
    }

    /// Numbers come from the remote's commit order (DESIGN §9.0): a later version's number is
    /// the item's next whatever the proposal says, conflict versions included; only an item's
    /// first version takes the number it asks (its history from before the store was linked).
    @Test(arguments: RemoteUnderTest.allCases)
    func numbersComeFromCommitOrderOnly(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        var first = try Self.proposal(remote, item: 11, name: "old.txt", text: "seventh save", base: 0)
        first.number = 7
        guard case .current(7, _) = try remote.commit(first, operation: "first") else {
            Issue.record("an item's first version did not take the number it asked")
            return
        }
        var next = try Self.proposal(remote, item: 11, name: "old.txt", text: "next", base: 7)
        next.number = 30
        guard case .current(8, _) = try remote.commit(next, operation: "next") else {
            Issue.record("a later version was not numbered in commit order")
            return
        }
        var racing = try Self.proposal(remote, item: 11, name: "old.txt", text: "racing", base: 7, by: Self.machineB)
        racing.number = VersionNumber.pendingBase + 3
        guard case .conflict(9, _) = try remote.commit(racing, operation: "racing") else {
            Issue.record("a conflict version was not numbered in commit order")
            return
        }
        var fresh = try Self.proposal(remote, item: 12, name: "new.txt", text: "pending first", base: 0)
        fresh.number = VersionNumber.pendingBase + 1
        guard case .current(1, _) = try remote.commit(fresh, operation: "fresh") else {
            Issue.record("a pending first save was not numbered 1")
            return
        }
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func chunksAreStoredOnceAndChecked(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let bytes = Array("some content".utf8)
        let digest = bytes.withUnsafeBytes { ChunkDigest(of: $0) }
        let other = Array("other".utf8).withUnsafeBytes { ChunkDigest(of: $0) }
        #expect(try remote.missingChunks([digest, other]) == [digest, other])
        try remote.putChunk(digest, bytes: bytes)
        try remote.putChunk(digest, bytes: bytes)  // again: nothing changes
        #expect(try remote.missingChunks([digest, other]) == [other])
        #expect(try remote.fetchChunk(digest) == bytes)
        // Bytes that are not what the digest names are refused; an unknown chunk is not found.
        #expect { try remote.putChunk(other, bytes: bytes) } throws: { ($0 as? RemoteError)?.kind == .refused }
        #expect { try remote.fetchChunk(other) } throws: { ($0 as? RemoteError)?.kind == .notFound }
        // A commit naming a chunk the remote lacks says which.
        let proposal = RemoteVersion(item: 7, container: "docfs.default", name: "x", kind: .file, base: 0,
                                     manifest: [digest, other], size: 17, modified: 0, author: Self.machineA)
        #expect { try remote.commit(proposal, operation: "x") } throws: { ($0 as? RemoteError)?.kind == .missingChunks([other]) }
        #expect(try remote.currentVersion(of: 7) == nil)
        #expect(try remote.changes(after: .start, limit: 10).changes.isEmpty)
        // Several at once (one of them held already); a batch with a wrong one is refused.
        let batch = ["one", "two", "some content"].map { text in
            let bytes = Array(text.utf8)
            return (digest: bytes.withUnsafeBytes { ChunkDigest(of: $0) }, bytes: bytes)
        }
        try remote.putChunks(batch)
        #expect(try remote.missingChunks(batch.map(\.digest)).isEmpty)
        #expect(try batch.allSatisfy { try remote.fetchChunk($0.digest) == $0.bytes })
        // Fetched several at once, in the order asked, one asked twice; any unknown one is not found.
        let asked = batch.map(\.digest).reversed() + [batch[0].digest]
        #expect(try remote.fetchChunks(asked) == batch.map(\.bytes).reversed() + [batch[0].bytes])
        #expect { try remote.fetchChunks([batch[0].digest, other]) } throws: { ($0 as? RemoteError)?.kind == .notFound }
        #expect { try remote.putChunks([(digest: other, bytes: bytes)]) } throws: { ($0 as? RemoteError)?.kind == .refused }
        // Their lengths, in the order asked (a promised file's layout), without their bytes.
        #expect(try remote.chunkLengths(batch.map(\.digest).reversed() + [digest]) == [12, 3, 3, 12])
        #expect(try remote.chunkLengths([]) == [])
        #expect { try remote.chunkLengths([digest, other]) } throws: { ($0 as? RemoteError)?.kind == .notFound }
        // A version carries its chunks' lengths (a promised file needs not ask); lengths that do
        // not fit its manifest and size are not kept as such.
        var sized = RemoteVersion(item: 8, container: "docfs.default", name: "y", kind: .file, base: 0,
                                  manifest: batch.map(\.digest), size: 18, modified: 0, author: Self.machineA)
        sized.lengths = [3, 3, 12]
        _ = try remote.commit(sized, operation: "sized")
        #expect(try remote.currentVersion(of: 8)?.knownLengths == [3, 3, 12])
        #expect(try remote.changes(after: .start, limit: 10).changes.last?.version.lengths == [3, 3, 12])
        var wrong = sized
        (wrong.item, wrong.name, wrong.lengths) = (9, "z", [3, 3, 11])
        _ = try remote.commit(wrong, operation: "wrong")
        #expect(try remote.currentVersion(of: 9)?.knownLengths == nil)
    }

    /// An upload cut short leaves chunks no version names: a sweep removes them once unused
    /// for the pause it is given, and never a chunk a version (current, earlier or conflict)
    /// names, nor one an upload under way has just looked for.
    @Test(arguments: RemoteUnderTest.allCases)
    func aSweepRemovesOnlyChunksNoVersionNames(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let first = try Self.proposal(remote, item: 300, name: "kept.txt", text: "first content", base: 0)
        #expect(try remote.commit(first, operation: "first") == .current(version: 1, sequence: 1))
        let second = try Self.proposal(remote, item: 300, name: "kept.txt", text: "second content", base: 1)
        _ = try remote.commit(second, operation: "second")
        let lost = try Self.proposal(remote, item: 300, name: "kept.txt", text: "lost a race", base: 1, by: Self.machineB)
        if case .conflict = try remote.commit(lost, operation: "lost") {} else { Issue.record("not a conflict") }
        let orphan = Array("uploaded, never committed".utf8)
        let orphanDigest = orphan.withUnsafeBytes { ChunkDigest(of: $0) }
        try remote.putChunk(orphanDigest, bytes: orphan)
        // Just put: an upload under way may be about to commit it.
        #expect(try remote.sweepChunks(unusedFor: 3600) == ChunkSweep(chunks: 0, bytes: 0))
        usleep(1_100_000)
        #expect(try remote.sweepChunks(unusedFor: 1) == ChunkSweep(chunks: 1, bytes: Int64(orphan.count)))
        #expect { try remote.fetchChunk(orphanDigest) } throws: { ($0 as? RemoteError)?.kind == .notFound }
        for text in ["first content", "second content", "lost a race"] {
            let bytes = Array(text.utf8)
            #expect(try remote.fetchChunk(bytes.withUnsafeBytes { ChunkDigest(of: $0) }) == bytes)
        }
        // Looking for a chunk marks it used: the upload that found it held can commit it.
        try remote.putChunk(orphanDigest, bytes: orphan)
        usleep(1_100_000)
        #expect(try remote.missingChunks([orphanDigest]).isEmpty)
        #expect(try remote.sweepChunks(unusedFor: 1).chunks == 0)
        #expect(try remote.sweepChunks(unusedFor: 0).chunks == 1)
    }

    /// A prune keeps every item's current version and drops what came before (and items long
    /// deleted); an anchor below what it removed is told to list every item instead.
    @Test(arguments: RemoteUnderTest.allCases)
    func aPruneKeepsCurrentVersionsAndSendsOlderAnchorsToTheListing(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        _ = try remote.commit(try Self.proposal(remote, item: 500, name: "kept.txt", text: "v1", base: 0), operation: "k1")
        _ = try remote.commit(try Self.proposal(remote, item: 500, name: "kept.txt", text: "v2", base: 1), operation: "k2")
        _ = try remote.commit(try Self.proposal(remote, item: 501, name: "gone.txt", text: "soon gone", base: 0), operation: "g1")
        var tombstone = try #require(try remote.currentVersion(of: 501))
        tombstone.base = tombstone.number
        tombstone.deleted = true
        _ = try remote.commit(tombstone, operation: "g2")
        let head = try remote.head()
        #expect(head.sequence == 4)
        // Any version the log holds, by number: an earlier one, a tombstone; none past the last.
        #expect(try remote.version(of: 500, number: 1)?.size == 2 && remote.version(of: 500, number: 1)?.deleted == false)
        #expect(try remote.version(of: 501, number: 2)?.deleted == true)
        #expect(try remote.version(of: 500, number: 3) == nil && remote.version(of: 77, number: 1) == nil)
        #expect(try remote.listing(after: 0, limit: 10).map(\.version.item) == [500, 501])
        #expect(try remote.prune(olderThan: 3600) == 0)
        #expect(try remote.prune(olderThan: 0) == 3)
        #expect { try remote.changes(after: .start, limit: 10) } throws: { ($0 as? RemoteError)?.kind == .pastRetention }
        let listed = try remote.listing(after: 0, limit: 10)
        #expect(listed.map(\.version.item) == [500] && listed.first?.version.number == 2 && listed.first?.sequence == 2)
        #expect(try remote.changes(after: head, limit: 10).changes.isEmpty)
        #expect(try remote.currentVersion(of: 501) == nil)
        #expect(try remote.version(of: 500, number: 1) == nil && remote.version(of: 500, number: 2)?.number == 2)
        #expect(try remote.fetchChunk(Array("v2".utf8).withUnsafeBytes { ChunkDigest(of: $0) }) == Array("v2".utf8))
        // The pruned chunks go at the sweep; the current one stays.
        #expect(try remote.sweepChunks(unusedFor: 0).chunks == 2)
        #expect(try remote.fetchChunk(Array("v2".utf8).withUnsafeBytes { ChunkDigest(of: $0) }) == Array("v2".utf8))
    }

    /// Retention counts from when a version was superseded, not from when it was committed: a
    /// version current for long and replaced a moment ago stays its whole retention (machines
    /// keep it promised and fetch it from the remote when it is read).
    @Test(arguments: RemoteUnderTest.allCases)
    func aPruneCountsAVersionsRetentionFromWhenItWasSuperseded(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        _ = try remote.commit(try Self.proposal(remote, item: 600, name: "long.txt", text: "current for long", base: 0), operation: "l1")
        usleep(1_500_000)
        _ = try remote.commit(try Self.proposal(remote, item: 600, name: "long.txt", text: "replaced now", base: 1), operation: "l2")
        #expect(try remote.prune(olderThan: 1) == 0)
        #expect(try remote.version(of: 600, number: 1)?.deleted == false)
        usleep(1_500_000)
        #expect(try remote.prune(olderThan: 1) == 1)
        #expect(try remote.version(of: 600, number: 1) == nil && remote.version(of: 600, number: 2)?.number == 2)
    }

    /// The first machine's bookmark key is the remote's; every later one is answered it.
    @Test(arguments: RemoteUnderTest.allCases)
    func theFirstBookmarkKeyProposedIsEveryMachines(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let first = (0..<48).map { UInt8($0) }
        let second = (0..<48).map { UInt8(255 - $0) }
        #expect(try remote.storeKey(proposing: first) == first)
        #expect(try remote.storeKey(proposing: second) == first)
        #expect(try remote.storeKey(proposing: first) == first)
    }

    /// What is waiting to come down: the changes after an anchor.
    @Test(arguments: RemoteUnderTest.allCases)
    func theChangesAfterAnAnchorAreCounted(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        #expect(try remote.changeCount(after: .start) == 0)
        for index in 0..<3 {
            _ = try remote.commit(try Self.proposal(remote, item: UInt64(400 + index), name: "n\(index)", text: "t\(index)", base: 0),
                                  operation: "c\(index)")
        }
        let all = try remote.changes(after: .start, limit: 10).changes
        #expect(try remote.changeCount(after: .start) == 3)
        #expect(try remote.changeCount(after: RemoteAnchor(sequence: all[0].sequence)) == 2)
        #expect(try remote.changeCount(after: RemoteAnchor(sequence: all[2].sequence)) == 0)
    }

    /// Two machines save one document from the same base: the first commit is current, the
    /// second a conflict version (kept, never lost); both are in the log for every machine.
    @Test(arguments: RemoteUnderTest.allCases)
    func aCommitFromAStaleBaseIsAConflictVersion(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let created = try remote.commit(try Self.proposal(remote, item: 42, name: "doc", text: "v1", base: 0), operation: "a1")
        #expect(created == .current(version: 1, sequence: try #require(remote.changes(after: .start, limit: 1).changes.first?.sequence)))
        let fromA = try remote.commit(try Self.proposal(remote, item: 42, name: "doc", text: "v2 by a", base: 1), operation: "a2")
        let fromB = try remote.commit(try Self.proposal(remote, item: 42, name: "doc", text: "v2 by b", base: 1, by: Self.machineB),
                                      operation: "b2")
        guard case .current(2, _) = fromA, case .conflict(3, _) = fromB else {
            Issue.record("\(fromA) \(fromB)")
            return
        }
        let current = try #require(try remote.currentVersion(of: 42))
        #expect(current.number == 2 && current.author == Self.machineA && !current.conflict)
        let log = try remote.changes(after: .start, limit: 10).changes.map(\.version)
        #expect(log.map(\.number) == [1, 2, 3] && log.map(\.conflict) == [false, false, true])
        #expect(log[2].author == Self.machineB)
        // Asked to refuse a stale base, the remote commits nothing and names the current version;
        // the operation id stays free for the conflict version made after.
        let stale = try Self.proposal(remote, item: 42, name: "doc", text: "v2 by c", base: 1)
        #expect(try remote.commit(stale, operation: "c2", whenStale: .refuse) == .stale(current: 2))
        #expect(try remote.changes(after: .start, limit: 10).changes.count == 3)
        guard case .conflict(4, _) = try remote.commit(stale, operation: "c2") else {
            Issue.record("the refused operation id was taken")
            return
        }
        // Saving on from the current version is current again.
        let next = try remote.commit(try Self.proposal(remote, item: 42, name: "doc", text: "v5", base: 2), operation: "a5",
                                     whenStale: .refuse)
        guard case .current(5, _) = next else {
            Issue.record("\(next)")
            return
        }
    }

    /// Eight machines save one document from the same base at once: exactly one becomes
    /// current, the seven others conflict versions, every number given once.
    @Test(arguments: RemoteUnderTest.allCases)
    func simultaneousSavesFromOneBaseMakeOneCurrentVersion(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        _ = try remote.commit(try Self.proposal(remote, item: 77, name: "shared", text: "base", base: 0), operation: "base")
        let proposals = try (0..<8).map { machine in
            try Self.proposal(remote, item: 77, name: "shared", text: "from \(machine)", base: 1,
                              by: RemoteAuthor(machine: "m\(machine)", user: "alice"))
        }
        let outcomes = Mutex<[RemoteCommitOutcome]>([])
        DispatchQueue.concurrentPerform(iterations: proposals.count) { machine in
            if let outcome = try? remote.commit(proposals[machine], operation: "m\(machine)") {
                outcomes.withLock { $0.append(outcome) }
            }
        }
        let all = outcomes.withLock { $0 }
        let current = all.filter { if case .current = $0 { true } else { false } }
        #expect(all.count == 8 && current.count == 1, "\(all)")
        let numbers = try remote.changes(after: .start, limit: 20).changes.map(\.version.number)
        #expect(numbers.sorted() == Array(1...9))
    }

    /// A commit retried after its answer was lost (same operation id) is applied once.
    @Test(arguments: RemoteUnderTest.allCases)
    func aRetriedCommitIsAppliedOnce(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let proposal = try Self.proposal(remote, item: 9, name: "once", text: "once", base: 0)
        let first = try remote.commit(proposal, operation: "op-1")
        let again = try remote.commit(proposal, operation: "op-1")
        #expect(first == again)
        #expect(try remote.changes(after: .start, limit: 10).changes.count == 1)
        // A deletion is a tombstone version: the item's current version says so.
        var tombstone = proposal
        tombstone.base = 1
        tombstone.deleted = true
        tombstone.manifest = []
        tombstone.size = 0
        _ = try remote.commit(tombstone, operation: "op-2")
        #expect(try remote.currentVersion(of: 9)?.deleted == true)
        #expect(try remote.changes(after: .start, limit: 10).changes.last?.version.deleted == true)
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func eachContainerHasItsOwnKeyValueStore(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        #expect(try remote.value(forKey: "page", in: "com.example.Reader") == nil)
        let first = try remote.setValue(Array("12".utf8), forKey: "page", in: "com.example.Reader")
        let second = try remote.setValue(Array("dark".utf8), forKey: "theme", in: "com.example.Reader")
        try remote.setValue(Array("x".utf8), forKey: "page", in: "com.example.Other")
        #expect(second > first)
        #expect(try remote.value(forKey: "page", in: "com.example.Reader") == Array("12".utf8))
        #expect(try remote.keys(in: "com.example.Reader") == ["page", "theme"])
        try remote.setValue(nil, forKey: "page", in: "com.example.Reader")
        #expect(try remote.keys(in: "com.example.Reader") == ["theme"])
        #expect(try remote.value(forKey: "page", in: "com.example.Reader") == nil)
        #expect(try remote.value(forKey: "page", in: "com.example.Other") == Array("x".utf8))
        // The changes after a sequence, in the server's order, a removal without a value; each
        // key's last change only.
        let changes = try remote.keyValueChanges(after: 0, limit: 100)
        #expect(changes.map { "\($0.container) \($0.key) \($0.value.map { String(decoding: $0, as: UTF8.self) } ?? "-")" }
                == ["com.example.Reader theme dark", "com.example.Other page x", "com.example.Reader page -"])
        #expect(changes.map(\.sequence) == changes.map(\.sequence).sorted() && changes[0].sequence == second)
        #expect(try remote.keyValueChanges(after: changes[1].sequence, limit: 100) == [changes[2]])
        #expect(try remote.keyValueChanges(after: 0, limit: 2) == Array(changes.prefix(2)))
        #expect(try remote.keyValueChanges(after: changes[2].sequence, limit: 100).isEmpty)
    }

    /// A key-value change wakes every machine watching the remote, as a commit does.
    @Test(arguments: RemoteUnderTest.allCases)
    func aKeyValueChangeWakesWatchers(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let woken = Atomic<Int>(0)
        let watch = remote.watchChanges { woken.add(1, ordering: .relaxed) }
        defer { watch.cancel() }
        Thread.sleep(forTimeInterval: 0.3)  // the listener is listening
        let before = woken.load(ordering: .relaxed)
        try remote.setValue(Array("1".utf8), forKey: "k", in: "com.example.Reader")
        let start = Date()
        while woken.load(ordering: .relaxed) == before && Date().timeIntervalSince(start) < 5 { Thread.sleep(forTimeInterval: 0.01) }
        #expect(woken.load(ordering: .relaxed) > before)
    }

    /// Stores join with id spaces and names of their own (DESIGN §9.0 identity): the first to
    /// join a remote without items keeps the ids it has (space 0); a store joining again gets
    /// its space and name back; stores asking for one name (several on one host ask for the
    /// host's) get names and spaces of their own; ids go on past what the remote holds.
    @Test(arguments: RemoteUnderTest.allCases)
    func storesJoinWithIdSpacesAndNamesOfTheirOwn(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let first = MachineRegistration(store: "s1", name: "host"), second = MachineRegistration(store: "s2", name: "host")
        #expect(try remote.join(first) == MachineJoin(space: 0, name: "host", nextItem: 0))
        #expect(try remote.join(second) == MachineJoin(space: 1, name: "host-2", nextItem: 1 << 41))
        #expect(try remote.join(first).space == 0 && remote.join(second) == MachineJoin(space: 1, name: "host-2", nextItem: 1 << 41))
        let third = try remote.join(MachineRegistration(store: "s3", name: "host"))
        #expect(third.space == 2 && third.name == "host-3")
        // Ids the remote holds in a space are never given again (a copy of the store restored).
        _ = try remote.commit(try Self.proposal(remote, item: (1 << 41) + 7, name: "x", text: "x", base: 0), operation: "x")
        #expect(try remote.join(second).nextItem == (1 << 41) + 8)
        #expect(try remote.join(MachineRegistration(store: "s4", name: "other")) == MachineJoin(space: 3, name: "other", nextItem: 3 << 41))
        // A name with LIKE's wildcards is matched as itself.
        #expect(try remote.join(MachineRegistration(store: "s5", name: "h_st")).name == "h_st")
        #expect(try remote.join(MachineRegistration(store: "s6", name: "h%")).name == "h%")
        // A remote that holds items gives space 0 to no newcomer.
        let other = try kind.make()
        _ = try other.commit(try Self.proposal(other, item: 3, name: "x", text: "x", base: 0), operation: "x")
        #expect(try other.join(MachineRegistration(store: "late", name: "late")).space == 1)
    }

    /// The digest of current versions (`inStepDigest`) counts each item not deleted once, at its
    /// current number, in its bucket, with the term `InStepDigest.term` makes: the PostgreSQL
    /// remote's SQL and the engine's Swift agree term for term.
    @Test(arguments: RemoteUnderTest.allCases)
    func theDigestOfCurrentVersionsIsTheOneAMachineMakes(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        #expect(try remote.inStepDigest(buckets: 8) == InStepDigest(buckets: 8))
        var expected = InStepDigest(buckets: 8)
        for item: UInt64 in [5, 13, 1 << 41 + 3, 40] {
            _ = try remote.commit(try Self.proposal(remote, item: item, name: "f\(item)", text: "one", base: 0), operation: "a\(item)")
        }
        _ = try remote.commit(try Self.proposal(remote, item: 13, name: "f13", text: "two", base: 1), operation: "b13")
        var gone = try Self.proposal(remote, item: 40, name: "f40", text: "", base: 1)
        gone.deleted = true
        _ = try remote.commit(gone, operation: "c40")
        expected.add(item: 5, number: 1)
        expected.add(item: 13, number: 2)
        expected.add(item: 1 << 41 + 3, number: 1)
        #expect(try remote.inStepDigest(buckets: 8) == expected)
        #expect { try remote.inStepDigest(buckets: 0) } throws: { ($0 as? RemoteError)?.kind == .refused }
    }

    /// Bad proposals are refused with a reason and change nothing.
    @Test(arguments: RemoteUnderTest.allCases)
    func badProposalsAreRefused(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        var proposal = try Self.proposal(remote, item: 5, name: "ok", text: "ok", base: 0)
        proposal.manifest = ["not a digest"]
        #expect { try remote.commit(proposal, operation: "bad-1") } throws: { ($0 as? RemoteError)?.kind == .refused }
        for bad in ["", ".", "..", "a/b"] {
            var badName = try Self.proposal(remote, item: 5, name: "ok", text: "ok", base: 0)
            badName.name = bad
            #expect { try remote.commit(badName, operation: "bad-name-\(bad)") } throws: { ($0 as? RemoteError)?.kind == .refused }
        }
        var ownParent = try Self.proposal(remote, item: 5, name: "ok", text: "ok", base: 0)
        ownParent.parent = 5
        #expect { try remote.commit(ownParent, operation: "bad-parent") } throws: { ($0 as? RemoteError)?.kind == .refused }
        #expect(try remote.changes(after: .start, limit: 10).changes.isEmpty)
    }
}
