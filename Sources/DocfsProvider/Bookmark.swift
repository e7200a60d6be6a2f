import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// What a bookmark records of an item when it is made (DESIGN §7, like NSURL bookmark data):
/// which store and item, where the item was, the resource values an app may ask of it, and, for
/// a security-scoped bookmark, who it was issued to and whether it grants reading only. A
/// token (`BookmarkToken`) carries it, signed with the store's key.
public struct Bookmark: Sendable, Equatable {
    /// What kind of item a bookmark names (the resource type of the model).
    public enum ResourceType: UInt8, Sendable, CaseIterable {
        case file = 1, folder = 2, symlink = 3, other = 4

        public var name: String {
            switch self {
            case .file: "file"
            case .folder: "folder"
            case .symlink: "symlink"
            case .other: "other"
            }
        }
    }

    /// Who a security-scoped bookmark was issued to (an app id, or a user as `uid:N`) and
    /// whether it lets them only read.
    public struct SecurityScope: Sendable, Equatable {
        public var issuedTo: String
        public var readOnly: Bool

        public init(issuedTo: String, readOnly: Bool) {
            self.issuedTo = issuedTo
            self.readOnly = readOnly
        }
    }

    public var storeID: [UInt8]
    /// The resource identifier: the item's persistent id.
    public var item: ItemID
    public var container: String
    /// `documents` or `data`.
    public var scope: String
    /// Where the item was within its scope when the bookmark was made (`/a/b.txt`).
    public var path: String
    /// The backing file the item was then: another one later, on the store the bookmark was
    /// made on, means the item was replaced (a safe-save). Another machine's backing files are
    /// its own, so there it says nothing.
    public var backingInode: UInt64
    /// The store the bookmark was made on (`StoreInstance`, 16 bytes), when it was linked; nil:
    /// made on the store that resolves it (one never linked has no other).
    public var madeOn: [UInt8]?
    /// The content modification date then, in seconds since the epoch.
    public var contentModified: Double
    public var resourceType: ResourceType
    /// The item's name as shown to people (the localized name of the model).
    public var localizedName: String
    /// When the bookmark was made, in seconds since the epoch.
    public var made: Double
    public var securityScope: SecurityScope?

    public init(storeID: [UInt8], item: ItemID, container: String, scope: String, path: String, backingInode: UInt64,
                contentModified: Double, resourceType: ResourceType, localizedName: String, made: Double,
                securityScope: SecurityScope? = nil, madeOn: [UInt8]? = nil) {
        self.storeID = storeID
        self.item = item
        self.container = container
        self.scope = scope
        self.path = path
        self.backingInode = backingInode
        self.contentModified = contentModified
        self.resourceType = resourceType
        self.localizedName = localizedName
        self.made = made
        self.securityScope = securityScope
        self.madeOn = madeOn
    }

    /// A bookmark made now of the item `item` at `path` in `container`'s `scope`, whose backing
    /// file has the attributes `st`.
    public init(item: ItemID, container: String, scope: String, path: String, backing st: stat, storeID: [UInt8],
                securityScope: SecurityScope? = nil, madeOn: [UInt8]?) {
        let type: ResourceType = switch st.st_mode & S_IFMT {
        case S_IFREG: .file
        case S_IFDIR: .folder
        case S_IFLNK: .symlink
        default: .other
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let name = path.split(separator: "/").last.map(String.init) ?? ""
        self.init(storeID: storeID, item: item, container: container, scope: scope, path: path.isEmpty ? "/" : path,
                  backingInode: UInt64(st.st_ino),
                  contentModified: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9,
                  resourceType: type, localizedName: name, made: Double(now.tv_sec) + Double(now.tv_nsec) / 1e9,
                  securityScope: securityScope, madeOn: madeOn)
    }

    /// Whether the item the bookmark names was replaced by another backing file since, as the
    /// store at `layout` can tell: only the store it was made on can.
    public func wasReplaced(byBackingInode inode: UInt64, in layout: StoreLayout) -> Bool {
        guard madeOn == nil || madeOn == StoreInstance.existingBytes(layout) else { return false }
        return inode != backingInode
    }
}

extension Bookmark {
    /// Where the item was when the bookmark was made; nil when the bookmark names a container
    /// or scope this version of docfs does not know.
    public var place: StorePlace? {
        guard let container = try? ContainerID(container), let scope = Scope(rawValue: scope) else { return nil }
        return StorePlace(container: container, scope: scope, path: path == "/" ? "" : path)
    }
}
