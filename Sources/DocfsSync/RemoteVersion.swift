import DocfsChunks
import DocfsCore

/// Where a machine is in a remote's change log: the changes after it are the ones it has yet to
/// apply. Persisted by each machine; a change that commits late still comes after every anchor
/// handed out before it (the remote orders its log by commit, DESIGN §9).
public struct RemoteAnchor: Codable, Hashable, Comparable, Sendable {
    public var sequence: UInt64

    public init(sequence: UInt64) { self.sequence = sequence }

    /// Before every change.
    public static let start = RemoteAnchor(sequence: 0)

    public static func < (a: RemoteAnchor, b: RemoteAnchor) -> Bool { a.sequence < b.sequence }
}

/// What an item is, as it travels. A reference (DESIGN §8, open mode) is an app's entry for a
/// document in another container: its one chunk is the original's item id, as text. A
/// container (issue 22 §2) travels as an item of its own, so its display name and visibility
/// change on every machine when they change on one: its name is the display name, its mode
/// says whether it is public (`containerPublicMode`), its scope is empty.
public enum RemoteItemKind: String, Codable, Sendable {
    case file, folder, symlink, reference, container
}

/// A container item's mode when the container is public (shown in the user view's root).
public let containerPublicMode: UInt32 = 1

/// Who committed a version: the machine (its name) and the user there.
public struct RemoteAuthor: Codable, Hashable, Sendable {
    public var machine: String
    public var user: String

    public init(machine: String, user: String) {
        self.machine = machine
        self.user = user
    }
}

/// One version of an item as a remote keeps it (DESIGN §9 `versions` joined with `items`):
/// where the item is (its parent folder's item and its name, so a folder's move is one version,
/// not one per item under it), its content as a manifest of chunks (a symlink's target is its one
/// chunk, a reference's original's id too), its modes, times and user attributes, and whether it is a conflict version or a
/// tombstone. Paths and names are NameText.
public struct RemoteVersion: Codable, Hashable, Sendable {
    /// The document id, the same on every machine.
    public var item: UInt64
    public var container: String
    /// `documents` or `data`.
    public var scope: String
    /// The folder the item is in: its item id, 0 for the scope's top.
    public var parent: UInt64
    /// The item's name in its parent (NameText).
    public var name: String
    public var kind: RemoteItemKind
    /// Given by the remote when the version commits, in its commit order: the item's next
    /// number (DESIGN §9.0). In a proposal, the number or pending key (`VersionNumber`) the
    /// save has on the machine that made it: the remote takes it only as `askedNumber` says.
    public var number: UInt64
    /// The version this one was made from (0 for a new item): the remote's compare-and-swap.
    public var base: UInt64
    /// The content's chunks, in order (hex digests).
    public var manifest: [String]
    /// Each chunk's length, in order, when the machine that saved it said (nil for versions
    /// saved before): a promised file maps a read to its chunks without asking the remote.
    public var lengths: [Int64]?
    public var size: Int64
    public var mode: UInt32
    /// Seconds since the epoch.
    public var modified: Double
    /// `user.*` extended attributes (tags, comments, …), name to value.
    public var attributes: [String: [UInt8]]
    public var author: RemoteAuthor
    /// A version that lost a race: kept beside the current content until resolved (C4).
    public var conflict: Bool
    /// The item was deleted (a tombstone).
    public var deleted: Bool
    /// The machine that made it resolved the item's conflict there (`docfs versions --resolve`):
    /// every machine drops the conflict versions numbered below it (nil: no).
    public var resolves: Bool?
    /// A version kept beside the item's content, never its current one: a save one machine made
    /// that did not go up before another machine's version took its number (or won its race).
    /// Every machine keeps it as a previous version under its number (nil: no).
    public var previous: Bool?
    /// The container's display name and whether the user view shows it (not for the default
    /// container): a machine without the container makes it so.
    public var containerName: String?
    public var containerPublic: Bool?
    /// The chunk holding the content's thumbnail set, made by the machine that saved it (other
    /// machines install it rather than render their own); nil when none went with it.
    public var thumbnail: String?

    public init(item: UInt64, container: String, scope: String = "documents", parent: UInt64 = 0, name: String, kind: RemoteItemKind,
                number: UInt64 = 0, base: UInt64, manifest: [ChunkDigest], size: Int64, mode: UInt32 = 0o644,
                modified: Double, attributes: [String: [UInt8]] = [:], author: RemoteAuthor, conflict: Bool = false,
                deleted: Bool = false) {
        self.item = item
        self.container = container
        self.scope = scope
        self.parent = parent
        self.name = name
        self.kind = kind
        self.number = number
        self.base = base
        self.manifest = manifest.map(\.hex)
        self.size = size
        self.mode = mode
        self.modified = modified
        self.attributes = attributes
        self.author = author
        self.conflict = conflict
        self.deleted = deleted
    }

    /// The number a proposal asks the remote for (it takes the item's next one when that is
    /// higher): only an item's first version (from no base) asks, for the number it has on the
    /// one machine that knows it (history kept before the store was linked numbers it past 1).
    /// Every later version is numbered by the remote's commit order alone, and a pending save
    /// asks for nothing.
    public var askedNumber: UInt64 {
        base == 0 && !VersionNumber.isPending(number) ? number : 0
    }

    /// Why the version cannot be committed as it stands; nil when it can.
    public var problem: String? {
        if item == 0 { return "a version needs an item id" }
        if name.isEmpty || name == "." || name == ".." || name.contains("/") || name.contains("\0") {
            return "item \(item): '\(name)' is not a name"
        }
        if parent == item { return "item \(item) cannot be its own parent" }
        if chunks == nil { return "the manifest of item \(item) names chunks wrongly" }
        return nil
    }

    /// `lengths` when they fit the manifest and the size (a damaged answer's are left out);
    /// a single chunk's is the size.
    public var knownLengths: [Int64]? {
        if let lengths, lengths.count == manifest.count, lengths.allSatisfy({ $0 > 0 }), lengths.reduce(0, +) == size { return lengths }
        return manifest.count == 1 && size > 0 ? [size] : nil
    }

    /// The manifest's digests; nil when one is not a digest (a damaged answer).
    public var chunks: [ChunkDigest]? {
        let digests = manifest.compactMap { ChunkDigest(hex: $0) }
        return digests.count == manifest.count ? digests : nil
    }
}

/// One entry of a remote's change log: a version committed, in commit order.
public struct RemoteChange: Codable, Hashable, Sendable {
    public var sequence: UInt64
    public var version: RemoteVersion

    public init(sequence: UInt64, version: RemoteVersion) {
        self.sequence = sequence
        self.version = version
    }
}

/// What became of a proposed version: the item's current version, or a conflict version (its
/// base was no longer current: another machine committed first), either way in the log; or,
/// when asked, nothing (its base was stale); or nothing because it would break the remote's
/// tree (`misplaced`).
public enum RemoteCommitOutcome: Codable, Hashable, Sendable {
    case current(version: UInt64, sequence: UInt64)
    case conflict(version: UInt64, sequence: UInt64)
    /// Not committed (asked to refuse a stale base): `current` is the item's current version.
    case stale(current: UInt64)
    /// Not committed: as the item's current version it would break the remote's tree. Nothing
    /// logged, the operation id still free.
    case misplaced(TreeProblem)
}

/// Why a version cannot become its item's current one (DESIGN §9.0: the remote's tree is whole
/// by construction, so no machine ever applies an item into a folder that is gone, or a folder
/// into itself). The remote checks it at each commit, in the commits' order.
public enum TreeProblem: Codable, Hashable, Sendable, CustomStringConvertible {
    /// The folder the version puts the item in is deleted on the remote (or is no folder).
    case folderGone(UInt64)
    /// A folder's deletion while the remote has items in it that the deleting machine did not
    /// remove (made or moved there by another machine meanwhile).
    case folderNotEmpty
    /// A folder moved into itself or into a folder inside it (two machines moved two folders
    /// into each other).
    case cycle
    /// Another item holds the name in the folder on the remote (two machines made or moved
    /// items there while apart): the later commit takes another name.
    case nameTaken

    public var description: String {
        switch self {
        case .folderGone(let folder): "its folder \(folder) is deleted on the remote"
        case .folderNotEmpty: "the folder holds items on the remote that were not removed with it"
        case .cycle: "the folder would be inside itself"
        case .nameTaken: "another item holds its name in its folder on the remote"
        }
    }
}
