import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import DocfsSync

/// A request to the daemon serving a store, over `STORE/control.sock` (one JSON line each way).
/// CLI commands that change a served store send these instead of touching it behind the
/// daemon's back (issue 3 §2, C7).
public struct ControlRequest: Codable {
    /// What is asked: a change, a question, or a stream.
    public enum Kind: String, Codable {
        case restore, resolve, watch, claims, rebuildIndex, checkIndex
        /// Who made the item's current version (the request's `version`), if the daemon saw it.
        case author
        case createContainer, renameContainer, deleteContainer
        /// Mount one more view of the served store.
        case mount
        /// A picker mode: open, import, move or export a document.
        case pick
        /// Make a bookmark of the item at `place`, or resolve `token` (for a user who cannot
        /// read the store's key: `BookmarkRequests`).
        case bookmark, resolveBookmark
        /// Link the served store to a remote (`remote`), say how its sync goes, compare it with
        /// the remote (`docfs remote check`), unlink it.
        case remoteLink, remoteStatus, remoteCheck, remoteUnlink
        /// Run a `docfs query` (`query`) on the daemon's index, which holds the waiting changes
        /// in memory: its records come back in batches.
        case query
        /// Promised items (issue 23): fetch the item now, pin or unpin it, make it promised again.
        case download, pin, unpin, evict
        /// `docfs kv` changed a container's key-value store: a linked store's sync goes now.
        case keyValuesChanged

        /// Requests about a promised item's content.
        var isPromiseChange: Bool { self == .download || self == .pin || self == .unpin || self == .evict }

        /// Requests about a container rather than an item.
        var isContainerChange: Bool { self == .createContainer || self == .renameContainer || self == .deleteContainer }

        /// Requests answered by a stream of lines on a thread of their own.
        var isStreamed: Bool { self == .watch || self == .rebuildIndex || self == .checkIndex || self == .query }
    }

    public var kind: Kind
    /// The document, relative to the mount root.
    public var path: String
    public var item: UInt64?
    /// The version to restore, or to keep when resolving a conflict (none: keep the current).
    public var version: UInt64?
    /// The container to create, rename or delete.
    public var container: ContainerChange? = nil
    /// The mount to add.
    public var mount: MountRequest? = nil
    /// The picker mode to carry out.
    public var pick: PickRequest? = nil
    /// Where the document is, when the user view does not show it (`path` then only names it).
    public var place: PlaceRequest? = nil
    /// The app whose view a watch's `path` is in; nil for the user view.
    public var view: String? = nil
    /// The security scope a bookmark asks for; the token to resolve.
    public var bookmarkScope: BookmarkScopeRequest? = nil
    public var token: String? = nil
    /// The remote to link to.
    public var remote: RemoteLinkRequest? = nil
    /// The query to run.
    public var query: QueryRequest? = nil
    /// The protocol the sender speaks (`ControlProtocol.version`); nil from a docfs before it had one.
    var protocolVersion: Int? = ControlProtocol.version

    public init(kind: Kind, path: String, item: UInt64? = nil, version: UInt64? = nil, container: ContainerChange? = nil,
         mount: MountRequest? = nil, pick: PickRequest? = nil, view: String? = nil) {
        self.view = view
        self.kind = kind
        self.path = path
        self.item = item
        self.version = version
        self.container = container
        self.mount = mount
        self.pick = pick
    }
}

/// A `docfs query` as the command read it: the predicate's text (parsed again by the daemon,
/// with the command's clock and time zone, so `today` and `-7d` mean the same), where to look,
/// the order (`attr` or `attr:desc`) and the limit.
public struct QueryRequest: Codable, Sendable {
    public var predicate: String
    public var scope: String
    public var sort: [String]
    public var limit: Int?
    public var now: Double
    public var timeZone: String

    public init(predicate: String, scope: String, sort: [String], limit: Int?, now: Double, timeZone: String) {
        self.predicate = predicate
        self.scope = scope
        self.sort = sort
        self.limit = limit
        self.now = now
        self.timeZone = timeZone
    }
}

/// A remote to link a store to: its URI (a password in it goes to `home`'s ~/.pgpass, never
/// to the store), and the name this machine commits under (nil: the host name).
public struct RemoteLinkRequest: Codable {
    public var uri: String
    public var machine: String?
    public var home: String

    public init(uri: String, machine: String?, home: String) {
        self.uri = uri
        self.machine = machine
        self.home = home
    }
}

/// A picker mode to carry out on a document (the request's item): into which folder.
public struct PickRequest: Codable {
    public var mode: DocumentPicker.Mode
    public var folder: PlaceRequest

    public init(mode: DocumentPicker.Mode, folder: PlaceRequest) {
        self.mode = mode
        self.folder = folder
    }
}

/// A place in the store (container, scope, path), as requests carry it.
public struct PlaceRequest: Codable {
    public var container: String
    public var scope: Scope
    public var path: String

    public init(_ place: StorePlace) {
        container = place.container.rawValue
        scope = place.scope
        path = place.path
    }

    func place() throws(DocfsError) -> StorePlace {
        StorePlace(container: try ContainerID(container), scope: scope, path: path)
    }
}

/// A mount to add to a served store: where, which view (an app's, or the user view), options.
public struct MountRequest: Codable {
    public var mountPoint: String
    public var app: String?
    public var options: [String]

    public init(mountPoint: String, app: String?, options: [String]) {
        self.mountPoint = mountPoint
        self.app = app
        self.options = options
    }
}

/// What a container request names: the container, and its (new) display name, visibility,
/// or whether to delete it with what it holds.
public struct ContainerChange: Codable {
    public var id: String
    public var name: String? = nil
    public var isPublic: Bool? = nil
    public var force: Bool? = nil

    public init(id: String, name: String? = nil, isPublic: Bool? = nil, force: Bool? = nil) {
        self.id = id
        self.name = name
        self.isPublic = isPublic
        self.force = force
    }
}

/// The version of the control socket's requests and replies: a daemon and a `docfs` command
/// that differ (an upgrade while a daemon runs) say so instead of misreading each other.
enum ControlProtocol {
    static let version = 2
    /// How long the daemon waits for a request's line, and for a reply to be taken.
    static let requestTimeout: Int = 10
    /// Requests answered at once; more connections are refused (a client gone wild).
    static let concurrentRequests = 64
    /// How a daemon's answer to a request it cannot read begins (an older daemon's answer to a
    /// kind of request it does not know: `QueryStream` then reads the index itself).
    static let unreadableRequest = "malformed or missing request"
}

/// The daemon's answer to a `ControlRequest` (one JSON line; a streamed request's connection
/// carries more): whether it was done, what to tell the user, and what the request asked for.
public struct ControlReply: Codable {
    public var ok: Bool
    public var message: String
    /// The protocol the daemon speaks.
    var protocolVersion: Int? = ControlProtocol.version
    /// The coordinator's state, for a `claims` request.
    public var claims: ClaimReport?
    /// Who made a version, for an `author` request (nil: the daemon did not see it made).
    public var author: Author? = nil
    /// How far an index rebuild or check is: done, total.
    public var progress: [Int]? = nil
    /// The outcome of an index rebuild or check (its last line).
    public var index: IndexWalkOutcome? = nil
    /// A batch of a query's records, in its order; the last batch says `done`.
    public var records: [IndexRecord]? = nil
    public var done: Bool? = nil
    /// The bookmark token made, or where a resolved bookmark's item is.
    public var token: String? = nil
    public var resolution: BookmarkResolution.Report? = nil
    /// How a linked store's sync goes, for `remoteStatus` and `remoteLink`.
    public var remote: RemoteStatusReport? = nil
    /// For `remoteLink`: the store must be merged into the remote's items, which renumbers
    /// them, so it must be linked unmounted (`docfs remote link` unmounts and remounts it).
    public var mergeNeedsUnmountedStore: Bool? = nil
    /// For `remoteCheck`: every difference between the store and its remote, and what the
    /// store holds that does not travel.
    public var differences: [RemoteDifference]? = nil
    public var keptHereOnly: [KeptHereOnly]? = nil
}

/// What the daemon's coordinator holds (`docfs status` shows it): whether the item asked about
/// is claimed now, how many items are, and how many claims were granted and had to wait.
public struct ClaimReport: Codable {
    public var itemClaimed: Bool
    public var claimedItems: Int
    public var granted: Int
    public var waited: Int
    /// Folders of the store past the kernel's inotify limit (rescanned instead of watched).
    public var unwatchedFolders: Int?
    /// Whether the daemon watches the store at all.
    public var watched: Bool?
}

/// What a bookmark request asks for its security scope (none: not security-scoped).
public struct BookmarkScopeRequest: Codable {
    /// Who it is issued to; nil: the caller (`uid:N`).
    public var issuedTo: String?
    public var readOnly: Bool

    public init(issuedTo: String?, readOnly: Bool) {
        self.issuedTo = issuedTo
        self.readOnly = readOnly
    }
}
