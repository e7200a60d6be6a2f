import DocfsChunks

/// An item as this machine's store has it now, in the terms a remote keeps (issue 22 §2):
/// where it is, its content as chunks, its modes, times and user attributes.
public struct LocalItem: Sendable, Equatable {
    public var item: UInt64
    public var container: String
    public var scope: String
    public var parent: UInt64
    public var name: String
    public var kind: RemoteItemKind
    public var manifest: [ChunkDigest]
    public var size: Int64
    public var mode: UInt32
    public var modified: Double
    public var attributes: [String: [UInt8]]
    /// Each chunk's length, when the read knows them (not part of the item's state).
    public var lengths: [Int64]?
    /// The number the content read has here (a file's save), read with it; nil when the store
    /// does not say (the engine then asks `versionNumber`). Not part of the item's state: two
    /// reads of one state are equal whatever numbers they carry.
    public var number: UInt64?

    public init(item: UInt64, container: String, scope: String = "documents", parent: UInt64 = 0, name: String,
                kind: RemoteItemKind, manifest: [ChunkDigest], size: Int64, mode: UInt32 = 0o644, modified: Double,
                attributes: [String: [UInt8]] = [:], number: UInt64? = nil) {
        self.item = item
        self.container = container
        self.scope = scope
        self.parent = parent
        self.name = name
        self.kind = kind
        self.manifest = manifest
        self.size = size
        self.mode = mode
        self.modified = modified
        self.attributes = attributes
        self.number = number
    }

    public static func == (a: LocalItem, b: LocalItem) -> Bool {
        a.item == b.item && a.container == b.container && a.scope == b.scope && a.parent == b.parent && a.name == b.name
            && a.kind == b.kind && a.manifest == b.manifest && a.size == b.size && a.mode == b.mode && a.modified == b.modified
            && a.attributes == b.attributes
    }

    /// Whether `other` is this item in every field but the content's chunks (its size still
    /// counts): what `SyncedStore.observed` can tell without reading the content.
    public func looksLike(_ other: LocalItem) -> Bool {
        var mine = self, theirs = other
        (mine.manifest, theirs.manifest) = ([], [])
        return mine == theirs
    }

    /// The item as `version` has it.
    public init(_ version: RemoteVersion) {
        self.init(item: version.item, container: version.container, scope: version.scope, parent: version.parent,
                  name: version.name, kind: version.kind, manifest: version.chunks ?? [], size: version.size,
                  mode: version.mode, modified: version.modified, attributes: version.attributes)
        lengths = version.lengths
    }

    /// A proposal of this state from `base`, by `author`.
    public func proposal(base: UInt64, by author: RemoteAuthor) -> RemoteVersion {
        var version = RemoteVersion(item: item, container: container, scope: scope, parent: parent, name: name, kind: kind,
                                    base: base, manifest: manifest, size: size, mode: mode, modified: modified,
                                    attributes: attributes, author: author)
        version.lengths = kind == .file ? lengths : nil
        return version
    }
}

/// Where an item stood the last time this machine was in step with the remote about it: the
/// remote version it matched, as that version has it (the base of a three-way merge when
/// both sides changed it since).
public struct ItemSyncState: Codable, Sendable, Equatable {
    public var version: RemoteVersion
    /// Where in the remote's log the item's first version is, when this machine saw it: which
    /// of two items claiming one name came later (`SyncNames`).
    public var created: UInt64?
    /// The item's conflict was resolved here since: it goes up as a version that resolves it
    /// everywhere (nil: no).
    public var resolvedHere: Bool?
    /// Other machines' versions came between this one and the one before it here, and the
    /// versions kept here are not yet the ones every machine keeps (`SyncEngine.keepSkipped`
    /// clears it; the daemon's check tries again, after a crash too). Nil: no.
    public var versionsBehind: Bool?

    public init(version: RemoteVersion, created: UInt64?, resolvedHere: Bool? = nil) {
        self.version = version
        self.created = created
        self.resolvedHere = resolvedHere
    }

    public var number: UInt64 { version.number }
}

/// Chunks of an item's content and their bytes, as they go up together (issue 22 §7).
public struct ChunkBatch: Sendable {
    /// About how many bytes a batch holds: one round trip for many small chunks.
    public static let size = 4 << 20

    public var chunks: [(digest: ChunkDigest, bytes: [UInt8])] = []
    public var byteCount = 0

    public init() {}

    public var isFull: Bool { byteCount >= Self.size }

    public mutating func append(_ digest: ChunkDigest, _ bytes: [UInt8]) {
        chunks.append((digest, bytes))
        byteCount += bytes.count
    }
}

extension SyncedStore {
    public var largestVersionKept: Int64 { .max }

    public func keeps(_ item: UInt64, version number: UInt64) throws -> Bool { try keptVersions(of: item)[number] != nil }

    /// A store that reads the content only when asked for a chunk hands none while reading.
    public func current(_ item: UInt64, cut: (_ batch: ChunkBatch) throws -> Void) throws -> LocalItem? {
        try current(item)
    }

    /// A store whose every item travels.
    public func keptHereOnly(limit: Int) throws -> (found: [KeptHereOnly], count: Int) { ([], 0) }

    /// A store that cannot read an item without its content reads it whole.
    public func observed(_ item: UInt64) throws -> LocalItem? {
        try current(item)
    }

    /// Fetches the versions kept promised (their content still on the remote) that were kept
    /// before `cutoff` (seconds since 1970), before the remote's retention drops them; answers
    /// how many it fetched and the problems it met. A store that keeps none fetches nothing.
    public func fetchAgingPromisedVersions(keptBefore cutoff: Double) -> (fetched: Int, problems: [String]) {
        (0, [])
    }
}

/// Something in a linked store that does not travel to other machines, and why (issue 49 §2:
/// never silently half-synced): `remote status` and `remote check` say so.
public struct KeptHereOnly: Sendable, Equatable, Codable, CustomStringConvertible {
    public enum Reason: String, Sendable, Codable {
        /// A fifo, socket or device: the remote keeps no such kind.
        case specialFile = "special file"
        /// A hard-linked file's other name: the file travels under one name.
        case hardLink = "hard link"
    }

    /// Where it is, as a person reads it (`SyncedStore.shownPath`).
    public var path: String
    public var reason: Reason

    public init(path: String, reason: Reason) {
        self.path = path
        self.reason = reason
    }

    public var description: String {
        switch reason {
        case .specialFile: "\(path): a special file (fifo, socket or device): kept here only, it does not travel"
        case .hardLink: "\(path): another name of a hard-linked file: kept here only, the file travels under one name"
        }
    }
}

/// The store cannot say what an item is right now (its index is a moment behind a rename or a
/// removal): not that it is gone. The engine tries the item again shortly.
public struct LocalItemUnsettled: Error, CustomStringConvertible {
    public var item: UInt64
    public init(item: UInt64) { self.item = item }
    public var description: String { "item \(item) is being moved or removed here: tried again shortly" }
}

/// A writer opened the file, or it changed, while it was read to go up: what was read may be
/// half of one state and half of another, so it does not go up. The file goes once its writer
/// lets go (its close puts it in the outbox again).
public struct LocalItemBeingWritten: Error, CustomStringConvertible {
    public var item: UInt64
    public init(item: UInt64) { self.item = item }
    public var description: String { "item \(item) was written while it was read: it goes up once its writer is done" }
}

/// One entry of the store's durable outbox: an item changed here (content, attributes, place,
/// or it went) and must go up. Written with the change itself, so a crash between the save and
/// the upload loses nothing; several entries of one item go up as one version of its state then.
public struct OutboxEntry: Sendable, Hashable {
    public var sequence: UInt64
    public var item: UInt64

    public init(sequence: UInt64, item: UInt64) {
        self.sequence = sequence
        self.item = item
    }
}

/// What the store must find an item to be for a remote version to be applied over it (else
/// it changed here meanwhile, and that change goes up first).
public enum ApplyExpectation: Sendable, Equatable {
    /// Whatever it is.
    case anything
    /// Not in the store.
    case absent
    /// Exactly this.
    case item(LocalItem)

    /// What the store has when it is in step with `version`.
    public init(_ version: RemoteVersion?) {
        guard let version, !version.deleted else {
            self = .absent
            return
        }
        self = .item(LocalItem(version))
    }

    /// Whether the store holds what the engine expects. A folder's modification time counts: a
    /// name made in it here since it was in step is a change of the folder's (it goes up with
    /// the folder's new time, and merges with the other machine's change), which keeps a folder
    /// another machine removed from being removed here with what was just made in it. Receiving
    /// is no change (`FolderTimes` keeps a folder's time across an apply).
    public func isMet(by local: LocalItem?) -> Bool {
        switch self {
        case .anything: true
        case .absent: local == nil
        case .item(let expected): local == expected
        }
    }
}

/// What becomes of a remote version applied to the store.
public enum ApplyOutcome: Sendable, Equatable {
    /// The store holds it now.
    case applied
    /// The item changed here since it was last in step: nothing was applied (the change goes
    /// up first, and the remote's compare-and-swap decides).
    case changedHere
}

/// The local side of the sync engine (issue 22 §0): the store of one machine, its durable
/// outbox, each item's sync state and the anchor in the remote's log, and the one coordinated
/// path by which remote changes are applied (under the coordinator's write claim, stitched,
/// told to presenters and the kernel; never echoed into the outbox). The filesystem implements
/// it for a served store; tests use one in memory.
public protocol SyncedStore: Sendable {
    /// Who this machine is, in versions it commits.
    var author: RemoteAuthor { get }

    /// The outbox's oldest entries, at most `limit`.
    func pendingChanges(limit: Int) throws -> [OutboxEntry]
    /// Removes `entry` from the outbox (durably): its item's state then went up.
    func acknowledge(_ entry: OutboxEntry) throws
    /// Puts `item` in the outbox again (its round could not settle it).
    func requeue(_ item: UInt64) throws

    /// The item as the store has it now; nil when it is gone (`LocalItemUnsettled` when that
    /// cannot be told right now).
    func current(_ item: UInt64) throws -> LocalItem?
    /// `current`, handing the content's chunks to `cut` while the file is read, in batches of
    /// about `ChunkBatch.size` bytes, so they can go up as they are cut rather than after the
    /// whole file was read. A store may hand none (the engine then reads what it needs with
    /// `chunk`); an error `cut` throws ends the call with that error.
    func current(_ item: UInt64, cut: (_ batch: ChunkBatch) throws -> Void) throws -> LocalItem?
    /// The item as the store has it now without reading its content (its manifest empty; its
    /// size, times, modes, place and attributes as `current` gives them): what the daemon's own
    /// check compares with the version last in step, cheaply. Nil when it is gone.
    func observed(_ item: UInt64) throws -> LocalItem?
    /// What the store holds that does not travel (at most `limit`), and how many in all.
    func keptHereOnly(limit: Int) throws -> (found: [KeptHereOnly], count: Int)
    /// Whether the item is gone here (cheaper than `current`: nothing is read).
    func isGone(_ item: UInt64) throws -> Bool
    /// A container's display name and whether the user view shows it; nil for the default
    /// container (every store has it) and one not here.
    func describeContainer(_ container: String) -> (name: String, isPublic: Bool)?

    /// The thumbnail set made here from the item's current content, as it travels; nil when
    /// none is made yet (or the store makes none).
    func thumbnailSet(of item: UInt64) -> [UInt8]?

    /// The number of the item's current version here (its last save's; 0 when it has none).
    func versionNumber(of item: UInt64) -> UInt64
    /// The item's save `key` (a pending key, `VersionNumber`: the current content, or a save it
    /// superseded) went up, and the remote numbered it `given`: it takes that number here too,
    /// as on every machine. `given` may also be the number of the version last in step, for a
    /// save that wrote that version's content again: then it is that version.
    func takeNumber(_ item: UInt64, key: UInt64, given: UInt64) throws

    /// The item's save `key` (pending) went up as conflict version `given` (it lost its race),
    /// and the document changed here again since, so the save is kept here as a previous
    /// version: it becomes conflict version `given` (out of the chain, never sent again).
    /// Answers whether it did; false when no such save is kept (then the conflict version is
    /// kept from the remote, `keepConflict`).
    func becameConflict(_ item: UInt64, key: UInt64, given: UInt64) throws -> Bool

    /// The item was settled: a version of another machine's kept here under another number
    /// than the remote's (one of this machine's held it then) takes the remote's, if it is
    /// free now.
    func takeRemoteNumbers(of item: UInt64) throws

    /// Whether a writer here has the item open (what it holds may be half written: bash's
    /// `>` closes a descriptor of the emptied file before the writes). If so, the store puts
    /// the item in the outbox again when the last writer lets go, and the engine leaves it now.
    func putOffWhileWritten(_ item: UInt64) -> Bool
    /// The bytes of one chunk of the item's current content.
    func chunk(_ digest: ChunkDigest, of item: UInt64) throws -> [UInt8]
    /// The item that holds `name` in the folder `parent` of a container's scope, if any.
    func item(named name: String, in parent: UInt64, container: String, scope: String) throws -> UInt64?

    func syncState(of item: UInt64) throws -> ItemSyncState?
    /// The item whose sync state has it at `name` in `parent` of a container's scope (the
    /// remote's place for it, as this machine last knew), other than `item`.
    func itemInStep(named name: String, in parent: UInt64, container: String, scope: String, other item: UInt64) throws -> UInt64?
    /// Every item with a sync state (a relisting finds those the remote no longer has).
    func syncedItems() throws -> [UInt64]
    /// Every item the store holds now, by the ids every machine knows them by (what a check
    /// compares with the remote's listing).
    func allItems() throws -> [UInt64]
    /// Where the item is here, as a person reads it (its path in its container; nil when it
    /// is not here).
    func shownPath(of item: UInt64) -> String?
    func setSyncState(_ state: ItemSyncState?, of item: UInt64) throws
    /// Where this machine is in the remote's log (persisted).
    func anchor() throws -> RemoteAnchor
    func setAnchor(_ anchor: RemoteAnchor) throws

    /// Fetches the versions kept promised before `cutoff` (see the extension's default).
    func fetchAgingPromisedVersions(keptBefore cutoff: Double) -> (fetched: Int, problems: [String])

    /// Changes of the log that could not be applied here (their folder is not here yet, a
    /// name this filesystem refuses, …), kept durably with why, so the log goes on past them;
    /// the engine tries them again later.
    func park(_ change: RemoteChange, problem: String) throws
    /// The parked changes, oldest first, with why each could not be applied.
    func parkedChanges() throws -> [(change: RemoteChange, problem: String)]
    func unpark(_ change: RemoteChange) throws

    /// Makes `version`'s item what it says here (created, moved, renamed under `name`, content
    /// or attributes replaced, or deleted when `version.deleted`), atomically, as one
    /// coordinated write, if the item here is what `expected` says (else `.changedHere`,
    /// nothing done). Content comes from `fetch`, chunk by chunk. `keepingHereAsConflict`: the
    /// content here is kept first as a conflict version of the item (it lost a race), under
    /// the number the remote gave it. Applied changes are not local changes (nothing enters the
    /// outbox), but for a `name` other than the version's (two items claimed one name): that
    /// rename is one, and goes up.
    func apply(_ version: RemoteVersion, placedAs name: String, expecting expected: ApplyExpectation,
               keepingHereAsConflict: UInt64?, fetch: (ChunkDigest) throws -> [UInt8]) throws -> ApplyOutcome
    /// Renames `item` here to `name` in its folder, as a local change (it enters the outbox):
    /// an item of this machine's that must give its name to one that came first.
    func moveAside(_ item: UInt64, to name: String) throws

    /// Another machine resolved the item's conflict (its version `number` says so): the
    /// conflict versions kept here below that number go, and with the last of them the mark.
    func resolveConflicts(of item: UInt64, before number: UInt64) throws

    /// Keeps `version` (another machine's content that lost a race) as a conflict version of
    /// its item, beside the current content.
    func keepConflict(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws

    /// Keeps `version` (content the item held before it was deleted, and came back with an
    /// edit that won over the deletion, or a version this machine skipped) as a previous
    /// version of its item, under its number; nothing when a version kept here holds that
    /// number already, or it is the content here.
    func keepPrevious(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws

    /// The numbers of the item's saves made here after its version `number` (the one last in
    /// step) that the current content (numbered `current` here) superseded and that never went
    /// up (kept previous versions between the two numbers), oldest first: each goes up as a
    /// version of its own before the current content, so every machine keeps it too.
    func unsentSaves(of item: UInt64, after number: UInt64, before current: UInt64) throws -> [UInt64]

    /// The saves `unsentSaves` leaves out for coming before a conflict version kept here: never
    /// current now (the race that conflict settled may have been theirs), they go up set aside.
    func unsentSavesBeforeConflicts(of item: UInt64, after number: UInt64, before current: UInt64) throws -> [UInt64]

    /// The content of save `number` of the item (see `unsentSaves`): its chunks (cut as
    /// `current`'s, handed to `cut` as they are cut), size and modification time; nil when it
    /// is no longer kept.
    func unsentSave(of item: UInt64, number: UInt64, cut: (_ batch: ChunkBatch) throws -> Void) throws
        -> (manifest: [ChunkDigest], size: Int64, modified: Double)?

    /// Removes the item's kept previous version `number` when it holds exactly the content
    /// `manifest` names (a later version holds the same content: the content here, or the
    /// version kept as `keptAs` when given, which must hold it too); answers whether it did.
    /// Never a conflict version; a delta kept below it, made up from it, is made whole first.
    func forgetPrevious(_ number: UInt64, of item: UInt64, holding manifest: [ChunkDigest], keptAs: UInt64?) throws -> Bool

    /// Sets saves `numbers` of the item (see `unsentSaves`) aside: they lost their race before
    /// they went up (their base is no longer current). Each leaves the chain (made whole, still
    /// pending), to go up as a version kept beside the current one (`unsentAside`).
    func setAside(_ numbers: [UInt64], of item: UInt64, above current: UInt64) throws

    /// The numbers of the item's saves made here and set aside (they lost their number or
    /// their race before they went up) that have not gone up yet, lowest first: each goes up
    /// as a `previous` version, so every machine keeps it.
    func unsentAside(of item: UInt64) throws -> [UInt64]

    /// The numbers of the versions of the item kept here that the remote gave (pending saves
    /// left out), each with whether it is a conflict version.
    func keptVersions(of item: UInt64) throws -> [UInt64: Bool]

    /// Whether a version of the item numbered `number` is kept here (one look, not a listing).
    func keeps(_ item: UInt64, version number: UInt64) throws -> Bool

    /// The largest content the store keeps a version of when a save replaces it (its version
    /// policy); a save's base above it is not fetched to be kept.
    var largestVersionKept: Int64 { get }

    /// Keeps another machine's save set aside (`RemoteVersion.previous`) as a previous version
    /// of its item under its number; a save of this machine's that never went up and holds
    /// that number moves past it (and goes up set aside in turn).
    func keepAside(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws
}

/// What `user.docfs.status` and `docfs status` say of an item of a linked store (DESIGN §6,
/// §9.1): `conflict` while it has a conflict version not resolved, `uploading` while this
/// machine has a change of it that has not gone up (never in step, a save numbered past the
/// version last in step, or a writer has it open), else `current`. (Promised items, issue 23,
/// add `promised`, `downloading N%` and `pinned`.)
public enum ItemSyncStatus {
    public static func describe(state: ItemSyncState?, versionHere: UInt64, conflict: Bool, beingWritten: Bool) -> String {
        if conflict { return "conflict" }
        guard let state, !beingWritten, versionHere <= state.number else { return "uploading" }
        return "current"
    }
}
