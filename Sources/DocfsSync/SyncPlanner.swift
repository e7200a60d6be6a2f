import DocfsChunks
import DocfsCore

/// The one place the engine decides what to do with an item (issue 49 §2, DESIGN §9.0): pure
/// functions of the three views of it — what the remote holds (a version of its log), what this
/// store holds (observed, `LocalItem`), and the version both last agreed on (the synced state,
/// the merge base, `ItemSyncState`) — plus a few observations of this store's own kept saves.
/// The engine gathers the views, asks, and carries out what it is told; carrying it out moves
/// the views (a commit or an apply settles a new synced state), and the next question is asked
/// of them. Nothing here reads, writes or waits, so every case is a line of a table
/// (`SyncPlannerTests`), and "edited here while stopped" or "renamed there while a file was
/// added here" are the same comparison as any other change.
public enum SyncPlanner {
    /// What to do with a version the remote's log gives.
    public enum Incoming: Equatable, Sendable {
        /// Another machine's save set aside: kept here as a previous version, beside the content.
        case keepAside
        /// A conflict version: kept here, as on every machine.
        case keepConflict
        /// Nothing: a save of this machine's set aside (kept here when it went up), or a version
        /// at or below the one in step here (ours, or applied already).
        case nothing(why: String)
        /// Applied over what is here, when that is still the synced state (else what is here
        /// goes up from that base, and the remote decides). `resolvingFirst`: another machine
        /// resolved the item's conflict, which is over here too whatever becomes of the content.
        case apply(resolvingFirst: Bool)
    }

    /// `version` from the remote's log, against the synced state of its item here; `me`: the
    /// machine this store commits as.
    public static func incoming(_ version: RemoteVersion, synced: ItemSyncState?, me: String) -> Incoming {
        if version.previous == true {
            return version.author.machine == me ? .nothing(why: "a save of ours set aside") : .keepAside
        }
        if version.conflict { return .keepConflict }
        if let synced, synced.number >= version.number { return .nothing(why: "have v\(synced.number) already") }
        return .apply(resolvingFirst: version.resolves == true && version.author.machine != me)
    }

    /// What this store observed of an item beside its state: the number its content has here
    /// (a file's save, pending or the remote's), whether a thumbnail made here is not on the
    /// remote yet, and whether saves made here between the synced version and the content have
    /// not gone up.
    public struct Observed: Equatable, Sendable {
        public var number: UInt64
        public var newThumbnail: Bool
        public var savesNotGoneUp: Bool

        public init(number: UInt64 = 0, newThumbnail: Bool = false, savesNotGoneUp: Bool = false) {
            self.number = number
            self.newThumbnail = newThumbnail
            self.savesNotGoneUp = savesNotGoneUp
        }
    }

    /// What to do with an item this store holds (or held), against its synced state.
    public enum Outgoing: Equatable, Sendable {
        /// In step already. `takingNumber`: the content's pending key here, which takes the
        /// synced version's number (a save that wrote that content again).
        case inStep(takingNumber: UInt64?)
        /// This content goes up on the synced version. `savesFirst`: saves made here before it
        /// and not gone up go first, each a version of its own.
        case propose(savesFirst: Bool)
        /// Gone here: its deletion goes up on the synced version (a file's saves made here
        /// before it go first).
        case delete(savesFirst: Bool)
        /// Gone here and deleted on the remote already: only saves set aside here go up.
        case asideOnly
        /// Gone here, and the remote never had it: nothing to say.
        case nothing
    }

    /// What to do with the item `local` (nil: gone here) whose synced state is `synced`.
    public static func outgoing(_ local: LocalItem?, observed: Observed, synced: ItemSyncState?) -> Outgoing {
        guard let local else {
            guard let synced else { return .nothing }
            if synced.version.deleted { return .asideOnly }
            return .delete(savesFirst: synced.version.kind == .file)
        }
        // A conflict resolved here goes up (as a version that says so) even when nothing else changed.
        let resolving = synced?.resolvedHere == true
        if let synced, LocalItem(synced.version) == local, !resolving, !observed.newThumbnail, !observed.savesNotGoneUp {
            let pending = local.kind == .file && observed.number != synced.number && VersionNumber.isPending(observed.number)
            return .inStep(takingNumber: pending ? observed.number : nil)
        }
        let savesFirst = local.kind == .file && !resolving && observed.number > (synced?.number ?? 0) + 1
        return .propose(savesFirst: savesFirst)
    }

    /// Whether, once `applied` is in step here as `number` after `synced`, the versions kept here
    /// may not be the ones every machine keeps (`VersionList.kept`): it did not follow the synced
    /// version in turn (a gap, back over a deletion, or over a change of ours that lost), or an
    /// earlier such mark was not cleared yet.
    public static func versionsBehind(after applied: RemoteVersion, number: UInt64, synced: ItemSyncState?, raced: Bool) -> Bool {
        guard applied.kind == .file else { return false }
        return raced || number > (synced?.number ?? 0) + 1 || synced?.version.deleted == true || synced?.versionsBehind == true
    }
}
