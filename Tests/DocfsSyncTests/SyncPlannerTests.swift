import DocfsChunks
import DocfsCore
@testable import DocfsSync
import Testing

/// The planner's table (issue 49 §2): each case is the three views of an item and what the
/// engine is told to do. The cases the issue names as "new rules" before are lines here like
/// any other: an edit made while no daemon ran is a local state unlike the synced one; a folder
/// renamed on another machine while a file was added here is two items, each compared alone.
@Suite struct SyncPlannerTests {
    static let a = RemoteAuthor(machine: "a", user: "alice")
    static let b = RemoteAuthor(machine: "b", user: "bob")

    static func version(_ number: UInt64, _ text: String = "one", kind: RemoteItemKind = .file, by author: RemoteAuthor = a,
                        name: String = "plan.txt", parent: UInt64 = 0, deleted: Bool = false) -> RemoteVersion {
        let chunks = text.isEmpty || kind == .folder ? [] : [Array(text.utf8).withUnsafeBytes { ChunkDigest(of: $0) }]
        var made = RemoteVersion(item: 7, container: "docfs.default", parent: parent, name: name, kind: kind, number: number,
                                 base: number - 1, manifest: chunks, size: Int64(text.utf8.count), modified: 1_000,
                                 author: author, deleted: deleted)
        made.number = number
        return made
    }

    static func synced(_ version: RemoteVersion, resolvedHere: Bool = false) -> ItemSyncState {
        ItemSyncState(version: version, created: 1, resolvedHere: resolvedHere ? true : nil)
    }

    // MARK: Incoming

    @Test func aVersionOfTheLogIsAppliedKeptOrLeftByWhatIsInStepHere() {
        let two = Self.version(2, "two", by: Self.b)
        #expect(SyncPlanner.incoming(two, synced: Self.synced(Self.version(1)), me: "a") == .apply(resolvingFirst: false))
        #expect(SyncPlanner.incoming(two, synced: nil, me: "a") == .apply(resolvingFirst: false), "new here")
        #expect(SyncPlanner.incoming(two, synced: Self.synced(Self.version(2)), me: "a") == .nothing(why: "have v2 already"))
        #expect(SyncPlanner.incoming(two, synced: Self.synced(Self.version(5)), me: "a") == .nothing(why: "have v5 already"))
        var conflict = two
        conflict.conflict = true
        #expect(SyncPlanner.incoming(conflict, synced: Self.synced(Self.version(5)), me: "a") == .keepConflict,
                "a conflict version is kept whatever is in step here, ours too")
        #expect(SyncPlanner.incoming(conflict, synced: nil, me: "b") == .keepConflict)
        var aside = two
        aside.previous = true
        #expect(SyncPlanner.incoming(aside, synced: Self.synced(Self.version(1)), me: "a") == .keepAside)
        #expect(SyncPlanner.incoming(aside, synced: Self.synced(Self.version(1)), me: "b") == .nothing(why: "a save of ours set aside"))
        var resolving = Self.version(3, "two", by: Self.b)
        resolving.resolves = true
        #expect(SyncPlanner.incoming(resolving, synced: Self.synced(Self.version(2)), me: "a") == .apply(resolvingFirst: true))
        #expect(SyncPlanner.incoming(resolving, synced: Self.synced(Self.version(2)), me: "b") == .apply(resolvingFirst: false),
                "resolved here already")
        let deletion = Self.version(3, by: Self.b, deleted: true)
        #expect(SyncPlanner.incoming(deletion, synced: Self.synced(Self.version(2)), me: "a") == .apply(resolvingFirst: false))
    }

    // MARK: Outgoing

    @Test func whatIsHereGoesUpUnlessItIsTheSyncedState() {
        let one = Self.version(1)
        let same = LocalItem(one)
        #expect(SyncPlanner.outgoing(same, observed: .init(number: 1), synced: Self.synced(one)) == .inStep(takingNumber: nil))
        // Edited (here while served, or in the store while no daemon ran: the same comparison).
        var edited = same
        edited.manifest = [Array("edited".utf8).withUnsafeBytes { ChunkDigest(of: $0) }]
        let pending = VersionNumber.pendingBase + 1
        #expect(SyncPlanner.outgoing(edited, observed: .init(number: pending), synced: Self.synced(one)) == .propose(savesFirst: true),
                "a pending save: saves before it (if any) go first")
        #expect(SyncPlanner.outgoing(edited, observed: .init(number: 2), synced: Self.synced(one)) == .propose(savesFirst: false))
        // Moved or renamed here: a new place is a change like content.
        var moved = same
        moved.parent = 40
        #expect(SyncPlanner.outgoing(moved, observed: .init(number: 1), synced: Self.synced(one)) == .propose(savesFirst: false))
        // New here: proposed from no base.
        #expect(SyncPlanner.outgoing(same, observed: .init(number: 1), synced: nil) == .propose(savesFirst: false))
        // The content last in step written again under a pending key: it takes the synced number.
        #expect(SyncPlanner.outgoing(same, observed: .init(number: pending), synced: Self.synced(one)) == .inStep(takingNumber: pending))
        // The same state, but a conflict resolved here, a thumbnail made here, or saves not gone up.
        #expect(SyncPlanner.outgoing(same, observed: .init(number: 1), synced: Self.synced(one, resolvedHere: true)) == .propose(savesFirst: false))
        #expect(SyncPlanner.outgoing(same, observed: .init(number: 1, newThumbnail: true), synced: Self.synced(one)) == .propose(savesFirst: false))
        #expect(SyncPlanner.outgoing(same, observed: .init(number: pending, savesNotGoneUp: true), synced: Self.synced(one))
                == .propose(savesFirst: true))
    }

    @Test func whatIsGoneHereGoesUpAsADeletionOfWhatWasInStep() {
        #expect(SyncPlanner.outgoing(nil, observed: .init(), synced: nil) == .nothing, "never on the remote")
        #expect(SyncPlanner.outgoing(nil, observed: .init(), synced: Self.synced(Self.version(3))) == .delete(savesFirst: true))
        let folder = Self.version(1, kind: .folder, name: "r1")
        #expect(SyncPlanner.outgoing(nil, observed: .init(), synced: Self.synced(folder)) == .delete(savesFirst: false))
        #expect(SyncPlanner.outgoing(nil, observed: .init(), synced: Self.synced(Self.version(4, deleted: true))) == .asideOnly)
    }

    @Test func aFolderIsInStepByItsPlaceAndTimesAlone() {
        let folder = Self.version(1, kind: .folder, name: "r1")
        var here = LocalItem(folder)
        #expect(SyncPlanner.outgoing(here, observed: .init(), synced: Self.synced(folder)) == .inStep(takingNumber: nil))
        here.name = "r1b"  // renamed here
        #expect(SyncPlanner.outgoing(here, observed: .init(), synced: Self.synced(folder)) == .propose(savesFirst: false))
        here = LocalItem(folder)
        here.modified = 2_000  // a name came or went in it here
        #expect(SyncPlanner.outgoing(here, observed: .init(), synced: Self.synced(folder)) == .propose(savesFirst: false))
    }

    // MARK: Versions kept

    @Test func versionsAreBehindWhenAVersionWasNotTakenInTurn() {
        let two = Self.version(2)
        #expect(!SyncPlanner.versionsBehind(after: two, number: 2, synced: Self.synced(Self.version(1)), raced: false))
        #expect(SyncPlanner.versionsBehind(after: two, number: 4, synced: Self.synced(Self.version(1)), raced: false), "a gap")
        #expect(SyncPlanner.versionsBehind(after: two, number: 2, synced: Self.synced(Self.version(1, deleted: true)), raced: false),
                "back over a deletion")
        #expect(SyncPlanner.versionsBehind(after: two, number: 2, synced: Self.synced(Self.version(1)), raced: true), "over a change that lost")
        var marked = Self.synced(Self.version(1))
        marked.versionsBehind = true
        #expect(SyncPlanner.versionsBehind(after: two, number: 2, synced: marked, raced: false), "an earlier mark stays until cleared")
        #expect(!SyncPlanner.versionsBehind(after: Self.version(4, kind: .folder, name: "r1"), number: 4, synced: nil, raced: true),
                "folders keep no versions")
        #expect(SyncPlanner.versionsBehind(after: Self.version(3), number: 3, synced: nil, raced: false), "new here at v3")
    }
}
