import DocfsCore

/// Where things live inside a store directory (DESIGN §3). Containers are ordinary directory
/// trees, so a store stays readable without docfs; docfs's own state sits beside them.
///
///     STORE/
///       store.json                       format marker
///       daemon.lock                      held (flock) by the daemon serving the store
///       control.sock                     the serving daemon's control socket (see ControlServer)
///       item-ids                         the next unused item id (see ItemIDAllocator)
///       instance-id                      the key the store joins remotes under (see StoreInstance)
///       settings.json                    optional settings (see VersionPolicy)
///       versions/<item>/<version>[.json] kept versions and their records (see VersionStore)
///       chunks/<xx>/<sha-256>           content-defined chunks versions are made of (see ChunkStore)
///       containers/<id>/Documents/       a container's documents scope (user-visible)
///       containers/<id>/Data/            the rest of the container (data scope)
///       index/index.sqlite[-wal,-shm]   the metadata index (see IndexDatabase)
///       index/index.journal              stitched changes not yet in it (see IndexJournal)
///       keys/bookmarks.key               store id and bookmark signing key (see StoreKey)
///       promised/<item>.json|.present  what a promised file stands for (see PromisedContent)
///       thumbnails/<item>.thumb          an item's thumbnails (see ThumbnailStore)
///       logs/daemon.log                  the background daemon's log
public struct StoreLayout: Sendable {
    public let root: String

    public init(root: String) {
        self.root = root.count > 1 && root.hasSuffix("/") ? String(root.dropLast()) : root
    }

    public var formatFile: String { root + "/store.json" }
    public var lockFile: String { root + "/daemon.lock" }
    public var controlSocket: String { root + "/control.sock" }
    public var itemIDsFile: String { root + "/item-ids" }
    public var instanceFile: String { root + "/instance-id" }
    public var settingsFile: String { root + "/settings.json" }
    /// The remote the store is linked to (issue 22), when it is.
    public var remoteFile: String { root + "/remote.json" }
    public var containersDirectory: String { root + "/containers" }
    public var indexDirectory: String { root + "/index" }
    /// The metadata index (SQLite, WAL): see DocfsIndex.
    public var indexFile: String { indexDirectory + "/index.sqlite" }
    public var versionsDirectory: String { root + "/versions" }
    public var chunksDirectory: String { root + "/chunks" }
    public var keysDirectory: String { root + "/keys" }
    public var bookmarkKeyFile: String { keysDirectory + "/bookmarks.key" }
    public var thumbnailsDirectory: String { root + "/thumbnails" }
    public var promisedDirectory: String { root + "/promised" }
    /// When each downloaded document was last used: the cache limit's order (issue 23).
    public var contentUseFile: String { root + "/content-use.json" }
    public var logsDirectory: String { root + "/logs" }
    /// The containers' key-value stores (DESIGN §9.3): see `KeyValueDatabase`.
    public var keyValuesFile: String { root + "/kv/keyvalues.sqlite" }
    public var daemonLog: String { logsDirectory + "/daemon.log" }

    public func containerDirectory(_ id: ContainerID) -> String { containersDirectory + "/" + id.rawValue }
    public func documentsDirectory(_ id: ContainerID) -> String { containerDirectory(id) + "/Documents" }
    public func dataDirectory(_ id: ContainerID) -> String { containerDirectory(id) + "/Data" }
}
