import CLinux
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Finds the item id of a backing file, giving one to files and folders that have none yet
/// (made in the store behind docfs's back, or before docfs kept ids). Symbolic links and
/// special files cannot carry an id in the store: theirs is derived from the backing inode.
/// When the store cannot take the attribute (read-only, no permission), the id is derived too.
struct ItemIdentity: Sendable {
    let allocator: ItemIDAllocator
    /// Told of the ids given here, so the store watcher does not take them for someone else's
    /// attribute change.
    let ownChanges: OwnChanges
    /// Ids of files made through the mount, until their creating handle stores them.
    let pending = PendingItemIDs()

    /// The id of the file `fd` (an O_PATH descriptor) whose attributes are `st`.
    func item(of fd: Int32, _ st: stat) -> ItemID {
        let type = st.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFDIR else { return .derived(fromBackingInode: UInt64(st.st_ino)) }
        return existingID(of: fd, st) ?? assign(to: fd, st)
    }

    /// The id the file `fd` whose attributes are `st` has (stored, or given at its create and
    /// not stored yet); nil when it has none.
    func existingID(of fd: Int32, _ st: stat) -> ItemID? {
        ItemAttributes.id(ofDescriptor: fd) ?? pending.item(of: BackingKey(st))
    }

    /// A new id for `file`, just made through the mount and open as `handle` (descriptor
    /// `fd`): stored when that handle is released or synced (`PendingItemIDs`); the file's own
    /// when someone gave it one since it was made.
    func assignNew(to file: BackingKey, createdAs handle: UInt64, fd: Int32) throws(DocfsError) -> ItemID {
        pending.add(try allocator.allocate(), file: file, handle: handle, fd: fd)
    }

    private func assign(to fd: Int32, _ st: stat) -> ItemID {
        do {
            let fresh = try allocator.allocate()  // a number a lost race wastes is harmless
            let id = try pending.storeUnlessPending(BackingKey(st)) { () throws(DocfsError) -> ItemID in
                try ItemAttributes.setID(fresh, onDescriptor: fd, onlyIfAbsent: true)
            }
            if id == fresh { ownChanges.changedFile(at: fd, permissionsToo: false) }
            return id
        } catch {
            return .derived(fromBackingInode: UInt64(st.st_ino))
        }
    }
}
