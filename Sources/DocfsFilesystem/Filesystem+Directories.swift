import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Listing folders. A directory handle is a retained `DirectoryHandle` whose address is the
/// number the kernel passes back.
extension Filesystem {
    public func openDirectory(_ id: NodeID) throws(DocfsError) -> UInt64 {
        if VirtualNodes.isVirtual(id) {
            return UInt64(UInt(bitPattern: Unmanaged.passRetained(try openVirtualDirectory(id)).toOpaque()))
        }
        if id == rootID && appContainer != nil {
            return UInt64(UInt(bitPattern: Unmanaged.passRetained(appRootListing()).toOpaque()))
        }
        if id == rootID && view == .user && !containerFolders.isEmpty {
            return UInt64(UInt(bitPattern: Unmanaged.passRetained(try rootListing()).toOpaque()))
        }
        let node = try nodes.node(id)
        let handle = DirectoryHandle(node: node, dir: try Self.stream(of: node))
        return UInt64(UInt(bitPattern: Unmanaged.passRetained(handle).toOpaque()))
    }

    /// A directory stream of the folder `folder` (for readdir; the caller closes it).
    static func stream(of folder: Node) throws(DocfsError) -> OpaquePointer {
        let fd = openat(folder.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.system(Glibc.errno) }
        guard let dir = fdopendir(fd) else {
            let e = Glibc.errno
            close(fd)
            throw DocfsError.system(e)
        }
        return dir
    }

    public func releaseDirectory(_ handle: UInt64) {
        directoryHandle(handle).release()
    }

    private func directoryHandle(_ handle: UInt64) -> Unmanaged<DirectoryHandle> {
        Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: UInt(handle))!)
    }

    /// Hands entries from `offset` on to `body` until it answers false (the buffer is full).
    /// Each entry's inode number is its backing file's, as lookups report it.
    public func readDirectory(_ handle: UInt64, offset: Int64, _ body: (DirectoryEntry) -> Bool) throws(DocfsError) {
        try directoryHandle(handle).takeUnretainedValue().read(from: offset, body)
    }

    /// readdirplus: each entry but `.` and `..` comes with its looked-up Entry. `body` answers
    /// whether it took the entry; a lookup it did not take is given back at once.
    public func readDirectoryPlus(_ handle: UInt64, offset: Int64,
                                  _ body: (DirectoryEntry, Entry?) -> Bool) throws(DocfsError) {
        let directory = directoryHandle(handle).takeUnretainedValue()
        try directory.read(from: offset) { item throws(DocfsError) in
            // Past the node limit, entries go without a lookup (the kernel then looks up only
            // what a program stats, rather than every name listed).
            if item.name == "." || item.name == ".." || nodes.isPastLimit { return body(item, nil) }
            let looked: Entry
            do throws(DocfsError) {
                if let parent = directory.virtualParent {
                    looked = try lookup(parent: parent, name: item.name)
                } else {
                    looked = try entry(in: directory.node!, name: item.name)
                }
            } catch {
                if error.systemErrno == ENOENT { return true }  // removed since it was listed
                throw error
            }
            if !body(item, looked) {
                forget(looked.node, count: 1)
                return false
            }
            return true
        }
    }

    public func syncDirectory(_ handle: UInt64, dataOnly: Bool) throws(DocfsError) {
        guard let folder = directoryHandle(handle).takeUnretainedValue().node else { return }
        let fd = openat(folder.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.system(Glibc.errno) }
        defer { close(fd) }
        try check(dataOnly ? fdatasync(fd) : Glibc.fsync(fd))
    }
}
