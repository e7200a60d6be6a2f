import CLinux
import DocfsCoordination
import DocfsCore
import DocfsThumbnails
#if canImport(Glibc)
import Glibc
#endif

/// The operations on docfs's own files and folders (`VirtualNode`): looked up, listed, read;
/// never changed. Control-area files answer EROFS to a change (NodeTable refuses their
/// numbers), read-only views EACCES.
extension Filesystem {
    /// Whether the kernel may cache the node's attributes (docfs's own are made as asked).
    public func isCacheable(_ id: NodeID) -> Bool { !VirtualNodes.isVirtual(id) }

    /// Counts a lookup of the virtual node `key` names and answers its entry.
    func virtualEntry(_ key: VirtualKey, _ node: VirtualNode) throws(DocfsError) -> Entry {
        let id = virtualNodes.reference(key, node)
        do throws(DocfsError) {
            return Entry(node: id, generation: generation, attributes: try virtualAttributes(id, node), cacheable: false)
        } catch {
            virtualNodes.forget(id, count: 1)
            throw error
        }
    }

    /// A lookup in a folder of docfs's own.
    func lookupVirtual(parent: NodeID, name: FileName, caller: Caller) throws(DocfsError) -> Entry {
        switch try virtualNodes.node(parent) {
        case .controlArea: return try controlAreaEntry(name)
        case .byID: return try byIDEntry(name, caller: caller)
        case .thumbnails: return try thumbnailImageEntry(name)
        case .sharedRepository(let folder): return try sharedSizeEntry(name, in: folder)
        case .sharedSize(let folder, let size): return try sharedThumbnailEntry(name, size: size, in: folder)
        case .readOnlyView(let real): return try readOnlyEntry(name, in: real)
        case .keyValues(let container): return try keyValueFileEntry(name, in: container)
        case .itemLink, .thumbnailImage, .sharedThumbnail, .keyValue: throw DocfsError.system(ENOTDIR)
        }
    }

    func virtualAttributes(_ id: NodeID, _ node: VirtualNode, handle: UInt64? = nil) throws(DocfsError) -> stat {
        switch node {
        case .controlArea, .byID, .thumbnails:
            return Self.folderAttributes(like: try realAttributes(of: root), inode: id)
        case .sharedRepository(let folder), .sharedSize(let folder, _):
            return Self.folderAttributes(like: try realAttributes(of: folder), inode: id)
        case .itemLink(let target):
            var st = try realAttributes(of: root)
            st.st_mode = S_IFLNK | 0o777
            st.st_size = off_t(target.cString.count - 1)
            st.st_nlink = 1
            st.st_blocks = 0
            st.st_ino = ino_t(id)
            return st
        case .thumbnailImage(let image):
            return try thumbnailFileAttributes(of: image, png: try thumbnailImage(of: image), inode: id)
        case .sharedThumbnail(let image, let size, let uri):
            return try thumbnailFileAttributes(of: image, png: try sharedThumbnail(of: image, size: size, uri: uri), inode: id)
        case .readOnlyView(let real):
            var st = stat()
            if let handle, real.type == S_IFREG {
                try check(fstat(Int32(truncatingIfNeeded: handle), &st))
            } else {
                st = try realAttributes(of: real)
            }
            st.st_mode &= ~mode_t(0o222)
            return st
        case .keyValues:
            var st = Self.folderAttributes(like: try realAttributes(of: root), inode: id)
            st.st_mode = S_IFDIR | 0o700
            return st
        case .keyValue(let container, let key):
            return try keyValueFileAttributes(container, key, handle: handle, like: try realAttributes(of: root), inode: id)
        }
    }

    func realAttributes(of node: Node) throws(DocfsError) -> stat {
        var st = stat()
        try check(fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
        return st
    }

    /// A read-only folder of docfs's own, owned as `real` is.
    private static func folderAttributes(like real: stat, inode: NodeID) -> stat {
        var st = real
        st.st_mode = S_IFDIR | (real.st_mode & 0o555)
        st.st_nlink = 2
        st.st_size = 0
        st.st_blocks = 0
        st.st_ino = ino_t(inode)
        return st
    }

    /// A thumbnail `png` of `image` as a read-only file readable by whoever may read the image.
    private func thumbnailFileAttributes(of image: Node, png: [UInt8], inode: NodeID) throws(DocfsError) -> stat {
        var st = try realAttributes(of: image)
        st.st_mode = S_IFREG | (st.st_mode & 0o444)
        st.st_nlink = 1
        st.st_size = off_t(png.count)
        st.st_blocks = blkcnt_t((png.count + 511) / 512)
        st.st_ino = ino_t(inode)
        return st
    }

    /// open(2) of a file of docfs's own: a thumbnail is read from a memory file made now; a
    /// read-only view's file is the item's content, opened for reading under a read claim.
    func openVirtual(_ id: NodeID, flags: Int32) throws(DocfsError) -> OpenFile {
        let node = try virtualNodes.node(id)
        let writes = flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0
        switch node {
        case .readOnlyView(let real):
            if writes {
                throw DocfsError(.denied, "item \(real.item) was reached through a read-only bookmark: it may only be read")
            }
            if real.isDirectory { return OpenFile(handle: 0, directIO: false, keepCache: false, mayPassThrough: false) }
            return try coordinator.withClaims([(real.item, .read)]) { () throws(DocfsError) -> OpenFile in
                let fd = Glibc.open(real.procPath, flags & ~Self.strippedOpenFlags | O_CLOEXEC)
                guard fd >= 0 else { throw DocfsError.system(Glibc.errno) }
                return OpenFile(handle: UInt64(fd), directIO: flags & DOCFS_O_DIRECT != 0, keepCache: false,
                                mayPassThrough: false)
            }
        case .thumbnailImage, .sharedThumbnail:
            if writes { throw DocfsError(.system(.readOnlyFileSystem), "thumbnails under the mount are read-only") }
            let png: [UInt8]
            if case .sharedThumbnail(let image, let size, let uri) = node {
                png = try sharedThumbnail(of: image, size: size, uri: uri)
            } else if case .thumbnailImage(let image) = node {
                png = try thumbnailImage(of: image)
            } else {
                png = []
            }
            return OpenFile(handle: UInt64(try Self.memoryFile(holding: png)), directIO: true, keepCache: false,
                            mayPassThrough: false)
        case .itemLink:
            throw DocfsError.system(ELOOP)
        case .keyValue(let container, let key):
            return try openKeyValueFile(container, key, flags: flags)
        case .controlArea, .byID, .thumbnails, .sharedRepository, .sharedSize, .keyValues:
            if writes { throw DocfsError.system(EISDIR) }
            return OpenFile(handle: 0, directIO: false, keepCache: false, mayPassThrough: false)
        }
    }

    /// A descriptor of an anonymous memory file holding `bytes`, read from offset 0 on.
    static func memoryFile(holding bytes: [UInt8], name: String = "docfs-thumbnail") throws(DocfsError) -> Int32 {
        let fd = docfs_memfd(name)
        guard fd >= 0 else { throw DocfsError.errno("memfd_create") }
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        guard written == bytes.count else {
            let error = DocfsError.errno("writing \(name) to memory")
            close(fd)
            throw error
        }
        return fd
    }

    /// opendir(3) of a folder of docfs's own.
    func openVirtualDirectory(_ id: NodeID) throws(DocfsError) -> DirectoryHandle {
        let node = try virtualNodes.node(id)
        let unknown = UInt64(UInt32.max)  // the number of an entry not looked up yet
        let directory = UInt8(DT_DIR)
        switch node {
        case .controlArea:
            let keyValues = appContainer == nil ? [] : [(ControlArea.keyValues, unknown, directory)]
            return DirectoryHandle(listing: [(ControlArea.byID, unknown, directory), (ControlArea.thumbnails, unknown, directory)] + keyValues,
                                   inode: id, virtualParent: id)
        case .keyValues(let container):
            return DirectoryHandle(listing: try keyValueFileNames(in: container).map { ($0, unknown, UInt8(DT_REG)) }, inode: id, virtualParent: id)
        case .byID:
            return DirectoryHandle(listing: [], inode: id, virtualParent: id)
        case .thumbnails:
            return DirectoryHandle(listing: thumbnailImageNames().map { ($0, unknown, UInt8(DT_REG)) }, inode: id, virtualParent: id)
        case .sharedRepository:
            return DirectoryHandle(listing: ThumbnailSize.freedesktop.map { (FileName($0.rawValue), unknown, directory) },
                                   inode: id, virtualParent: id)
        case .sharedSize(let folder, let size):
            return DirectoryHandle(listing: sharedThumbnailNames(in: folder, size: size).map { ($0, unknown, UInt8(DT_REG)) },
                                   inode: id, virtualParent: id)
        case .readOnlyView(let real):
            guard real.isDirectory else { throw DocfsError.system(ENOTDIR) }
            return DirectoryHandle(node: real, dir: try Self.stream(of: real), virtualParent: id)
        case .itemLink, .thumbnailImage, .sharedThumbnail, .keyValue:
            throw DocfsError.system(ENOTDIR)
        }
    }

    func readVirtualLink(_ id: NodeID) throws(DocfsError) -> FileName {
        switch try virtualNodes.node(id) {
        case .itemLink(let target): return target
        case .readOnlyView(let real) where real.isSymlink: return try readLink(of: real)
        default: throw DocfsError.system(EINVAL)
        }
    }

    /// access(2) of a node of docfs's own: it may be read (and searched), never written.
    func checkVirtualAccess(_ id: NodeID, mask: Int32) throws(DocfsError) {
        let node = try virtualNodes.node(id)
        switch node {
        case .keyValues, .keyValue: return  // the app's own, read and written
        default: break
        }
        if mask & W_OK != 0 {
            if case .readOnlyView = node { throw DocfsError(.denied, "reached through a read-only bookmark") }
            throw DocfsError.system(EROFS)
        }
        if case .readOnlyView(let real) = node, !real.isSymlink {
            try check(faccessat(AT_FDCWD, real.procPath, mask, AT_EACCESS))
        }
    }

    /// The store node a change to `id` would change: a read-only view refuses (EACCES); any
    /// other node of docfs's own is read-only (EROFS, from the node table).
    func changeableNode(_ id: NodeID) throws(DocfsError) -> Node {
        if VirtualNodes.isVirtual(id), case .readOnlyView(let real)? = try? virtualNodes.node(id) {
            throw DocfsError(.denied, "item \(real.item) was reached through a read-only bookmark: it may only be read")
        }
        return try contentNode(try nodes.node(id))  // a reference changes its original
    }
}
