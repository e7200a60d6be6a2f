import DocfsChunks
import DocfsCore

/// What a machine's sync engine needs of the place its store is linked to (DESIGN §9, issue 22
/// §0): the change log read from an anchor, chunks put and fetched (each stored once, named by
/// its digest), versions committed with a compare-and-swap on their base, and each container's
/// key-value store. Two implementations sit behind it: `InMemoryRemote`, for kernel-free and
/// server-free tests of the engine, and PostgreSQL; one conformance suite runs against both.
///
/// Calls block the calling thread (the sync engine's own, never a FUSE worker's) and are safe
/// from several threads. A call that fails for the network may be retried; a commit carries an
/// operation id, so a retry after a lost answer is applied once.
public protocol Remote: Sendable {
    /// The changes committed after `anchor`, oldest first, at most `limit`, and the anchor to
    /// read from next (past the last one given; `anchor` itself when there are none). Throws
    /// `.pastRetention` when a prune removed changes after `anchor`.
    func changes(after anchor: RemoteAnchor, limit: Int) throws(RemoteError) -> (changes: [RemoteChange], next: RemoteAnchor)

    /// Which of `digests` the remote does not hold (what an upload must put first).
    func missingChunks(_ digests: [ChunkDigest]) throws(RemoteError) -> [ChunkDigest]

    /// Stores a chunk; its bytes must have the digest it is named by. Putting one the remote
    /// holds already changes nothing.
    func putChunk(_ digest: ChunkDigest, bytes: [UInt8]) throws(RemoteError)

    /// Stores several chunks at once (fewer round trips for many small ones), as `putChunk`.
    func putChunks(_ chunks: [(digest: ChunkDigest, bytes: [UInt8])]) throws(RemoteError)

    /// A chunk's bytes, checked against its digest (a damaged copy is refused, never answered).
    func fetchChunk(_ digest: ChunkDigest) throws(RemoteError) -> [UInt8]

    /// Several chunks' bytes, in the order asked (one round trip where the remote can: a
    /// promised file's content comes down a run of chunks at a time).
    func fetchChunks(_ digests: [ChunkDigest]) throws(RemoteError) -> [[UInt8]]

    /// How many bytes each of `digests` holds, in order, without fetching them: where each
    /// chunk of a promised file lies (issue 23), so a read fetches the chunks of its range.
    func chunkLengths(_ digests: [ChunkDigest]) throws(RemoteError) -> [Int64]

    /// Commits `proposal` once every chunk of its manifest is held, numbered the item's next
    /// number or the proposal's, whichever is higher:
    /// the item's current version when its base is the current one, else a conflict version.
    /// `operation` names the attempt: the same operation committed again answers the first
    /// outcome and adds nothing to the log.
    /// With `whenStale: .refuse`, a proposal whose base is not current is not committed at all
    /// (`.stale`, nothing logged, the operation id still free): the engine merges first.
    /// A `previous` proposal is neither: whatever its base, it commits beside the current
    /// version (`.current` answers its number), which stays as it was.
    /// A proposal that would become current but break the remote's tree is not committed
    /// (`.misplaced`, `TreeProblem`): its folder is deleted, it deletes a folder that holds
    /// items, or it moves a folder inside itself.
    func commit(_ proposal: RemoteVersion, operation: String, whenStale: StaleBase) throws(RemoteError) -> RemoteCommitOutcome

    /// The item's current version (a tombstone when it was deleted); nil when it never was.
    func currentVersion(of item: UInt64) throws(RemoteError) -> RemoteVersion?

    /// The item's versions numbered above `number` (conflict versions, saves set aside and
    /// tombstones too), lowest first, at most `limit`: what a machine keeps of an item that
    /// comes back to it, or that it takes a later version of at once.
    func versions(of item: UInt64, after number: UInt64, limit: Int) throws(RemoteError) -> [RemoteVersion]

    /// Registers the store `machine.store` (DESIGN §9.0 identity) and answers its item id space
    /// (ids `space << 41` up), the name its versions are made under, and where its ids go on
    /// from. A registration is one store's, never shared: the same store gets the same answer
    /// on every later join; any other store gets a space of its own, and a name of its own
    /// (`name-2`, `name-3`… when another store holds the one it asked for: several stores on
    /// one host all ask for the host's name). Space 0 goes to the first store to join a remote
    /// that holds no items (it keeps the ids it has given).
    func join(_ machine: MachineRegistration) throws(RemoteError) -> MachineJoin

    /// Calls `wake` whenever the log may have grown (a wake-up only, DESIGN §9: the engine reads
    /// the log from its anchor), and after the watch reconnects (a wake-up lost meanwhile is
    /// made up for). Runs until the answered watch is cancelled.
    func watchChanges(_ wake: @escaping @Sendable () -> Void) -> RemoteWatch

    /// The log's newest sequence: where a machine that listed every item goes on from.
    func head() throws(RemoteError) -> RemoteAnchor

    /// Every item's current version (a deleted one's tombstone while the log keeps it), with
    /// the sequence it was committed at, by item id after `item`, at most `limit`.
    func listing(after item: UInt64, limit: Int) throws(RemoteError) -> [RemoteChange]

    /// Which version of each item is current, summed per bucket of ids (`InStepDigest`, of
    /// `buckets` buckets; deleted items are not counted): what the daemon's own check compares
    /// with the versions it last agreed on, in one call whatever the number of items.
    func inStepDigest(buckets: Int) throws(RemoteError) -> InStepDigest

    /// Removes from the log what no machine in step needs (DESIGN §9: the log's retention):
    /// earlier versions and resolved conflict versions committed more than `seconds` ago, and
    /// items deleted that long ago. A machine whose anchor is older lists every item again.
    /// Their chunks go at the next sweep.
    func prune(olderThan seconds: Double) throws(RemoteError) -> Int

    /// How many changes the log holds after `anchor` (what is waiting to come down).
    func changeCount(after anchor: RemoteAnchor) throws(RemoteError) -> Int

    /// The key every linked machine signs bookmarks with (DESIGN §7, issue 22 §2: a bookmark
    /// made on one machine verifies on all): the first machine's proposal is kept, and every
    /// later one answered the key in effect.
    func storeKey(proposing key: [UInt8]) throws(RemoteError) -> [UInt8]

    /// Removes the chunks no version names and nobody put or looked for in the last `seconds`
    /// (what an upload cut short left: kill -9 mid-upload, a file changed while it was read).
    /// The pause keeps a chunk an upload under way found held until its commit names it.
    func sweepChunks(unusedFor seconds: Double) throws(RemoteError) -> ChunkSweep

    /// A container's key-value store (issue 24 builds on these): a value, nil when absent.
    func value(forKey key: String, in container: String) throws(RemoteError) -> [UInt8]?
    /// Sets (or with nil, removes) a key's value; answers the sequence the change took.
    @discardableResult
    func setValue(_ value: [UInt8]?, forKey key: String, in container: String) throws(RemoteError) -> UInt64
    /// A container's keys, sorted.
    func keys(in container: String) throws(RemoteError) -> [String]
    /// The key-value stores' changes (sets and removals, of every container) after `sequence`,
    /// in the server's order, at most `limit`: what a machine catches up from (issue 24).
    func keyValueChanges(after sequence: UInt64, limit: Int) throws(RemoteError) -> [KeyValueChange]
}

/// What a store asks for when it joins a remote: its registration key (`StoreInstance`: made
/// once per store, never shared) and the name it would like its versions made under.
public struct MachineRegistration: Sendable, Equatable {
    public var store: String
    public var name: String

    public init(store: String, name: String) {
        self.store = store
        self.name = name
    }
}

/// What a remote answers a store that joins it: the store's id space, the name that is its
/// alone on this remote, and the lowest id of the space that no item of the remote has reached
/// (ids the store gave before a copy of it was restored are never given again).
public struct MachineJoin: Sendable, Equatable {
    public var space: UInt64
    public var name: String
    public var nextItem: UInt64

    public init(space: UInt64, name: String, nextItem: UInt64) {
        self.space = space
        self.name = name
        self.nextItem = nextItem
    }

    /// The ids of space `space` (`ItemID.spaceSize` of them).
    public static func ids(ofSpace space: UInt64) -> Range<UInt64> {
        space * ItemID.spaceSize..<(space + 1) * ItemID.spaceSize
    }

    /// What a taken name is numbered from: the name, cut to 56 bytes at a character's end (room
    /// for the number within the 64 bytes a machine name may have).
    public static func stem(of name: String) -> String {
        var stem = ""
        for character in name {
            guard stem.utf8.count + character.utf8.count <= 56 else { break }
            stem.append(character)
        }
        return stem.utf8.count == name.utf8.count ? name : stem
    }

    /// `name`, or the first of `name-2`, `name-3`… that `taken` does not hold.
    public static func freeName(_ name: String, taken: (String) -> Bool) -> String {
        guard taken(name) else { return name }
        let stem = stem(of: name)
        var n = 2
        while taken("\(stem)-\(n)") { n += 1 }
        return "\(stem)-\(n)"
    }
}

/// A set (or, with no value, a removal) of a key in a container's key-value store, as the
/// remote ordered it.
public struct KeyValueChange: Sendable, Equatable {
    public var container: String
    public var key: String
    /// The stored value (`KeyValue.portable`); nil for a removal.
    public var value: [UInt8]?
    public var sequence: UInt64

    public init(container: String, key: String, value: [UInt8]?, sequence: UInt64) {
        self.container = container
        self.key = key
        self.value = value
        self.sequence = sequence
    }
}

/// A watch of a remote's log (`Remote.watchChanges`), stopped by `cancel`.
public final class RemoteWatch: Sendable {
    private let stop: @Sendable () -> Void

    public init(stop: @escaping @Sendable () -> Void) { self.stop = stop }

    public func cancel() { stop() }
}

/// What a sweep of unused chunks removed.
public struct ChunkSweep: Sendable, Equatable {
    public var chunks: Int
    public var bytes: Int64

    public init(chunks: Int, bytes: Int64) {
        self.chunks = chunks
        self.bytes = bytes
    }
}

/// What a commit does when its base is no longer the item's current version.
public enum StaleBase: Sendable {
    /// Commits it as a conflict version (kept, never current).
    case keepAsConflict
    /// Commits nothing and answers `.stale`.
    case refuse
}

extension Remote {
    /// The item's version `number` (a conflict version, a save set aside or a tombstone too);
    /// nil when it never was, or a prune removed it.
    public func version(of item: UInt64, number: UInt64) throws(RemoteError) -> RemoteVersion? {
        guard number > 0 else { return nil }
        return try versions(of: item, after: number - 1, limit: 1).first { $0.number == number }
    }

    /// Each chunk fetched and counted (a remote with no cheaper way).
    public func chunkLengths(_ digests: [ChunkDigest]) throws(RemoteError) -> [Int64] {
        var lengths: [Int64] = []
        for digest in digests { lengths.append(Int64(try fetchChunk(digest).count)) }
        return lengths
    }

    /// One `fetchChunk` after another.
    public func fetchChunks(_ digests: [ChunkDigest]) throws(RemoteError) -> [[UInt8]] {
        var chunks: [[UInt8]] = []
        for digest in digests { chunks.append(try fetchChunk(digest)) }
        return chunks
    }

    /// One `putChunk` after another.
    public func putChunks(_ chunks: [(digest: ChunkDigest, bytes: [UInt8])]) throws(RemoteError) {
        for (digest, bytes) in chunks { try putChunk(digest, bytes: bytes) }
    }

    /// Commits `proposal`, as a conflict version when its base is stale.
    public func commit(_ proposal: RemoteVersion, operation: String) throws(RemoteError) -> RemoteCommitOutcome {
        try commit(proposal, operation: operation, whenStale: .keepAsConflict)
    }
}

/// Why a remote call failed, in words, with what to do.
public struct RemoteError: Error, Equatable, CustomStringConvertible, Sendable {
    public enum Kind: Equatable, Sendable {
        /// The remote cannot be reached now (worth retrying with backoff).
        case unreachable
        /// The remote refused the request as it stands (bad input; retrying will not help).
        case refused
        /// A commit names chunks the remote does not hold: put them, then commit again.
        case missingChunks([ChunkDigest])
        /// No such chunk or item.
        case notFound
        /// The log no longer holds every change after the anchor (pruned): list every item's
        /// current version instead (`listing`).
        case pastRetention
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}
