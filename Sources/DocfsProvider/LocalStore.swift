import CLinux
import DocfsChunks
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The embedded `local` provider: a store that is a directory on this machine. Opening it
/// creates the layout on first use and checks it can be read and written; serving it (see
/// `StoreLock`) makes sure one daemon at a time owns it.
public final class LocalStore: Sendable {
    public static let formatVersion = 1

    public let layout: StoreLayout
    /// Where new item ids come from.
    public let itemIDs: ItemIDAllocator
    /// Previous and conflict versions of items.
    public let versions: VersionStore
    /// The store's key, read (or made) when first needed: `bookmarkKey()`.
    private let key = Mutex<StoreKey?>(nil)

    /// The store's id and bookmark signing key (made the first time a store needs one).
    public func bookmarkKey() throws(DocfsError) -> StoreKey {
        if let known = key.withLock({ $0 }) { return known }
        let loaded = try StoreKey.load(layout)
        key.withLock { $0 = loaded }
        return loaded
    }

    /// Makes `shared` the store's key from now on (linking to a remote: every machine signs
    /// with the remote's key, so a bookmark made on one verifies on all).
    public func adoptBookmarkKey(_ shared: StoreKey) throws(DocfsError) {
        guard try bookmarkKey() != shared else { return }
        try StoreKey.replace(layout, with: shared)
        key.withLock { $0 = shared }
    }

    /// Opens the store at `path`, creating it and its default container when missing.
    public init(path: String) throws(DocfsError) {
        let absolute = path.hasPrefix("/") ? path : LocalStore.currentDirectory() + "/" + path
        layout = StoreLayout(root: absolute)
        try Self.makeDirectory(layout.root)
        guard access(layout.root, R_OK | W_OK | X_OK) == 0 else {
            throw DocfsError(.storeUnavailable,
                             "store \(layout.root) is not readable and writable by this user: fix its permissions or pass --store",
                             cause: DocfsError.errno("access"))
        }
        for directory in [layout.containersDirectory, layout.containerDirectory(.userDefault),
                          layout.documentsDirectory(.userDefault), layout.dataDirectory(.userDefault),
                          layout.logsDirectory] {
            try Self.makeDirectory(directory)
        }
        try Self.writeFormatMarkerIfMissing(layout)
        itemIDs = try ItemIDAllocator(path: layout.itemIDsFile)
        versions = VersionStore(directory: layout.versionsDirectory, policy: try VersionPolicy.load(from: layout.settingsFile),
                                chunks: ChunkStore(directory: layout.chunksDirectory))
    }

    /// The default store: $DOCFS_STORE, else $XDG_DATA_HOME/docfs, else ~/.local/share/docfs.
    public static func defaultPath(environment: [String: String]) -> String {
        if let store = environment["DOCFS_STORE"], !store.isEmpty { return store }
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") { return xdg + "/docfs" }
        let home = environment["HOME"] ?? "/root"
        return home + "/.local/share/docfs"
    }

    /// Opens a directory of the store for fd-relative work (O_PATH, close-on-exec).
    public func openDirectory(_ path: String) throws(DocfsError) -> Int32 {
        let fd = open(path, DOCFS_O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            throw DocfsError(.storeUnavailable, "cannot open \(path) in the store", cause: DocfsError.errno("open"))
        }
        return fd
    }

    private static func writeFormatMarkerIfMissing(_ layout: StoreLayout) throws(DocfsError) {
        if access(layout.formatFile, F_OK) == 0 { return }
        let text = "{\"format\": \(Self.formatVersion), \"defaultContainer\": \"\(ContainerID.userDefault)\"}\n"
        let fd = open(layout.formatFile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        if fd < 0 {
            if Glibc.errno == EEXIST { return }
            throw DocfsError(.storeUnavailable, "cannot create \(layout.formatFile)", cause: DocfsError.errno("open"))
        }
        defer { close(fd) }
        _ = text.withCString { write(fd, $0, strlen($0)) }
    }

    static func makeDirectory(_ path: String) throws(DocfsError) {
        if mkdir(path, 0o755) == 0 || Glibc.errno == EEXIST {
            var st = stat()
            if stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR { return }
            throw DocfsError(.storeUnavailable, "\(path) exists but is not a directory: move it away or choose another --store")
        }
        if Glibc.errno == ENOENT {
            let parent = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
            if !parent.isEmpty && parent != path {
                try makeDirectory(parent)
                return try makeDirectory(path)
            }
        }
        throw DocfsError(.storeUnavailable, "cannot create \(path): check the permissions of its parent or choose another --store",
                         cause: DocfsError.errno("mkdir"))
    }

    static func currentDirectory() -> String {
        guard let cwd = getcwd(nil, 0) else { return "/" }
        defer { free(cwd) }
        return String(cString: cwd)
    }
}
