import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Where the item a bookmark names is now (from the index, which every write updates before it
/// returns), and whether the bookmark is stale. The daemon resolves bookmarks for users who
/// cannot read the store's key; `docfs bookmark resolve` resolves the others itself: both the
/// same way, and the daemon's answer travels as the `Report`.
public struct BookmarkResolution {
    /// The security scope a bookmark records, as a report says it.
    public struct ScopeReport: Codable {
        public var issuedTo: String
        public var readOnly: Bool
    }

    /// What `docfs bookmark resolve` prints (as JSON with --json), and the daemon's reply carries.
    public struct Report: Codable {
        public var path: String
        public var stale: Bool
        public var staleBecause: [String]
        public var container: String
        public var scope: String
        public var recordedPath: String
        public var made: Double
        // The resource values recorded when the bookmark was made.
        public var securityScope: ScopeReport?
        public var contentModificationDate: Double
        public var resourceIdentifier: UInt64
        public var resourceType: String
        public var localizedName: String
    }

    public var report: Report

    public init(report: Report) {
        self.report = report
    }

    public static func find(_ bookmark: Bookmark, index: IndexDatabase, store: StoreLayout,
                            mountPoint: String?) throws(DocfsError) -> BookmarkResolution {
        let records = try index.records(id: Int64(bitPattern: bookmark.item.rawValue))
        let current: (container: String, scope: String, path: String, inode: UInt64)
        if let record = records.first(where: { $0.container == bookmark.container && $0.scope == bookmark.scope && $0.path == bookmark.path })
            ?? records.sorted(by: { $0.path < $1.path }).first {
            current = (record.container, record.scope, record.path, record.backingInode)
        } else if bookmark.path == "/", let root = scopeRoot(store, bookmark), root.item == bookmark.item {
            current = (bookmark.container, bookmark.scope, "/", root.inode)
        } else {
            throw DocfsError(.invalidArgument,
                             "the item this bookmark names (id \(bookmark.item), last at \(bookmark.path)) is gone: it was deleted, or moved out of the store")
        }
        var because: [String] = []
        if current.container != bookmark.container || current.scope != bookmark.scope { because.append("moved to another container") }
        let oldFolder = bookmark.path.split(separator: "/").dropLast()
        let newFolder = current.path.split(separator: "/").dropLast()
        if oldFolder != newFolder { because.append("moved") }
        if bookmark.path.split(separator: "/").last != current.path.split(separator: "/").last { because.append("renamed") }
        if bookmark.wasReplaced(byBackingInode: current.inode, in: store) && because.isEmpty { because.append("replaced") }
        let shown: String
        let view = UserView(layout: store, catalog: ContainerCatalog(registry: ContainerRegistry(layout: store)))
        let place = (try? ContainerID(current.container)).flatMap { container in
            Scope(rawValue: current.scope).map { StorePlace(container: container, scope: $0, path: current.path == "/" ? "" : current.path) }
        }
        if let mountPoint, let place, let path = view.path(of: place) {
            shown = (mountPoint == "/" ? "" : mountPoint) + (path == "/" ? "" : path)
        } else {
            shown = store.containerDirectory(try ContainerID(current.container)) + (current.scope == "documents" ? "/Documents" : "/Data")
                + (current.path == "/" ? "" : current.path)
        }
        let report = Report(
            path: shown.isEmpty ? "/" : shown, stale: !because.isEmpty, staleBecause: because, container: current.container,
            scope: current.scope, recordedPath: bookmark.path, made: bookmark.made,
            securityScope: bookmark.securityScope.map { ScopeReport(issuedTo: $0.issuedTo, readOnly: $0.readOnly) },
            contentModificationDate: bookmark.contentModified, resourceIdentifier: bookmark.item.rawValue,
            resourceType: bookmark.resourceType.name, localizedName: bookmark.localizedName)
        return BookmarkResolution(report: report)
    }

    /// The item id and backing inode of the scope's root folder (which has no record).
    private static func scopeRoot(_ store: StoreLayout, _ bookmark: Bookmark) -> (item: ItemID, inode: UInt64)? {
        guard let container = try? ContainerID(bookmark.container) else { return nil }
        let folder = store.containerDirectory(container) + (bookmark.scope == "documents" ? "/Documents" : "/Data")
        let fd = open(folder, DOCFS_O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, let item = ItemAttributes.id(ofDescriptor: fd) else { return nil }
        return (item, UInt64(st.st_ino))
    }
}
