import CLinux
import DocfsCore
import DocfsDaemon
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// A document named on the command line, found either through a docfs mount or directly in a
/// store's folders, with the store it belongs to.
struct LocatedDocument {
    var path: String
    var store: StoreLayout
    /// The mount the path was reached through, nil when it names a file inside the store.
    var mountPoint: String?
    /// The container whose app view that mount shows; nil for the user view.
    var app: ContainerID? = nil
    var item: ItemID
    var version: UInt64?
    var attributes: stat

    /// Where the document is in the store: through a mount, the place the user view shows
    /// at its path; in the store's folders, the place those folders are.
    var place: StorePlace {
        let view = UserView(layout: store, catalog: ContainerCatalog(registry: ContainerRegistry(layout: store)))
        guard let mountPoint else {
            let relative = path.dropFirst(store.containersDirectory.count + 1).split(separator: "/", maxSplits: 2).map(String.init)
            if relative.count >= 2, let id = try? ContainerID(relative[0]), let scope = Self.scopes[relative[1]] {
                return StorePlace(container: id, scope: scope, path: relative.count == 3 ? "/" + relative[2] : "")
            }
            return StorePlace(container: .userDefault, scope: .documents, path: "")
        }
        let relative = String(path.dropFirst(mountPoint == "/" ? 0 : mountPoint.count))
        guard let app else { return view.place(of: relative) }
        let parts = relative.split(separator: "/").map(String.init)
        let scope = parts.first.flatMap { Self.scopes[$0] } ?? .documents
        return StorePlace(container: app, scope: scope, path: parts.count > 1 ? "/" + parts.dropFirst().joined(separator: "/") : "")
    }

    private static let scopes: [String: Scope] = ["Documents": .documents, "Data": .data]

    /// Where the document's file lies in the store, for what the mount does not pass on, such
    /// as the birth time.
    var backingPath: String {
        guard mountPoint != nil else { return path }
        let place = self.place
        return store.containerDirectory(place.container) + (place.scope == .data ? "/Data" : "/Documents") + place.path
    }

    /// The document's path under the mount root ("" for the root), as the user view shows it.
    func pathUnderRoot() throws(DocfsError) -> String {
        let view = UserView(layout: store, catalog: ContainerCatalog(registry: ContainerRegistry(layout: store)))
        guard let shown = view.path(of: place) else {
            throw DocfsError(.invalidArgument, "\(path) is in container \(place.container) (\(place.scope.rawValue)), which the user view does not show")
        }
        return String(shown.dropFirst())
    }

    /// Finds `path`, or throws an error saying what to do.
    static func locate(_ path: String) throws(DocfsError) -> LocatedDocument {
        let absolute = MountTable.canonical(path)
        var st = stat()
        guard lstat(FileName(absolute).cString, &st) == 0 else {
            throw DocfsError(.system(.noSuchFileOrDirectory), "\(path) does not exist")
        }
        let store: StoreLayout
        let mountPoint: String?
        var app: ContainerID? = nil
        if let mount = MountTable.entries().filter({ $0.type == "fuse.docfs" && isInside(absolute, $0.mountPoint) })
            .max(by: { $0.mountPoint.count < $1.mountPoint.count }) {
            guard let record = MountRegistry.record(for: mount.mountPoint) else {
                throw DocfsError(.storeUnavailable,
                                 "cannot tell which store the mount at \(mount.mountPoint) serves: run this as the user who mounted it")
            }
            store = StoreLayout(root: record.store)
            mountPoint = mount.mountPoint
            app = record.app.flatMap { try? ContainerID($0) }
        } else if let root = storeRoot(containing: absolute) {
            store = StoreLayout(root: root)
            mountPoint = nil
        } else {
            throw DocfsError(.invalidArgument, "\(path) is neither on a docfs mount nor in a docfs store")
        }
        let fd = open(FileName(absolute).cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError(.system(.permissionDenied), "cannot open \(path)") }
        defer { close(fd) }
        guard let item = ItemAttributes.id(ofDescriptor: fd) else {
            throw DocfsError(.invalidArgument, "\(path) has no item id (symbolic links and special files have none)")
        }
        let isFile = st.st_mode & S_IFMT == S_IFREG
        let version = isFile ? max(ItemAttributes.version(ofDescriptor: fd), 1) : nil
        return LocatedDocument(path: absolute, store: store, mountPoint: mountPoint, app: app, item: item, version: version,
                               attributes: st)
    }

    private static func isInside(_ path: String, _ folder: String) -> Bool {
        folder == "/" || path == folder || path.hasPrefix(folder + "/")
    }

    /// The store whose folders hold `path`: the nearest ancestor with a store.json and containers/.
    private static func storeRoot(containing path: String) -> String? {
        var folder = path
        while let slash = folder.lastIndex(of: "/"), !folder.isEmpty {
            folder = String(folder[..<slash])
            let layout = StoreLayout(root: folder.isEmpty ? "/" : folder)
            if access(layout.formatFile, F_OK) == 0 && access(layout.containersDirectory, F_OK) == 0 { return layout.root }
        }
        return nil
    }
}
