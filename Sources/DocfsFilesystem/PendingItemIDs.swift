import CLinux
import DocfsCore
import DocfsProvider
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Ids given to files made through the mount that are not yet stored on them. Writing the id
/// attribute costs a journaled inode update (about 9 µs on ext4), so a create leaves it to the
/// release of its handle, which the caller of close(2) does not wait for; an fsync writes it at
/// once. Until then every reader of ids (lookups, listings, getxattr and listxattr, the
/// watcher) finds the id here, so nobody can tell it is not on disk yet. An id set on the file
/// meanwhile (a safe-save replace gives the new file the document's id) wins: the pending one
/// is written only where the file still has none. A daemon killed between the create and the
/// release (which comes after close(2) returns) leaves the file without an id; it gets a new
/// one when next looked up.
///
/// Lock order: `state` is a leaf lock, held across the attribute write so a reader that finds
/// neither the attribute nor a pending id knows the file has none.
final class PendingItemIDs: Sendable {
    private struct State {
        var byFile: [BackingKey: ItemID] = [:]
        /// The creating handle of each pending file.
        var byHandle: [UInt64: BackingKey] = [:]
    }

    private let state = Mutex(State())

    /// `item` was given to `file`, just created and open as `handle` (its descriptor `fd`):
    /// answers the file's id, which is the one it has already when someone gave it one between
    /// the create and now (the store watcher judging a late event of the name, a lookup through
    /// another folder): under the lock `storeUnlessPending` writes under, so exactly one id wins.
    func add(_ item: ItemID, file: BackingKey, handle: UInt64, fd: Int32) -> ItemID {
        state.withLock { state in
            if let stored = ItemAttributes.id(ofDescriptor: fd) { return stored }
            state.byFile[file] = item
            state.byHandle[handle] = file
            return item
        }
    }

    /// Gives `file` an id by `write` unless a create gave it one that is pending: then that
    /// one (a reader that found neither the attribute nor a pending id raced the create).
    func storeUnlessPending(_ file: BackingKey, _ write: () throws(DocfsError) -> ItemID) throws(DocfsError) -> ItemID {
        try state.withLock { (state: inout State) throws(DocfsError) -> ItemID in
            if let pending = state.byFile[file] { return pending }
            return try write()
        }
    }

    /// The id given to `file` and not stored yet.
    func item(of file: BackingKey) -> ItemID? {
        state.withLock { $0.byFile[file] }
    }

    /// Stores the id given to the file created as `handle` on its descriptor `fd` (open for
    /// writing), unless the file has one by now. Answers whether there was one to store.
    @discardableResult
    func store(createdAs handle: UInt64, fd: Int32) throws(DocfsError) -> Bool {
        try state.withLock { (state: inout State) throws(DocfsError) -> Bool in
            guard let file = state.byHandle.removeValue(forKey: handle) else { return false }
            guard let item = state.byFile.removeValue(forKey: file) else { return false }
            // The handle's number may lead elsewhere by now (its descriptor closed under it):
            // the id is never written to a file it was not given to.
            guard Self.reaches(fd, file) else {
                throw DocfsError(.internalFailure, "handle \(handle) no longer reaches the file it made (inode \(file.inode)): its id \(item) is not stored")
            }
            try Self.write(item, to: fd)
            return true
        }
    }

    /// Stores every pending id through its creating handle (still open: its release never came).
    /// At unmount the kernel drops the releases of files closed just before it, so without this
    /// those files would be left without their ids.
    func storeAll() {
        state.withLock { state in
            for (handle, file) in state.byHandle {
                let fd = Int32(truncatingIfNeeded: handle)
                guard let item = state.byFile[file], Self.reaches(fd, file) else { continue }
                try? Self.write(item, to: fd)
            }
            state.byHandle.removeAll()
            state.byFile.removeAll()
        }
    }

    /// Forgets the id given to the file created as `handle` (the create failed).
    func drop(createdAs handle: UInt64) {
        state.withLock { state in
            guard let file = state.byHandle.removeValue(forKey: handle) else { return }
            state.byFile[file] = nil
        }
    }

    /// Whether `fd` is (still) a descriptor of `file`.
    private static func reaches(_ fd: Int32, _ file: BackingKey) -> Bool {
        var st = stat()
        return fstat(fd, &st) == 0 && BackingKey(st) == file
    }

    /// Writes `item` where no id is stored yet. The daemon may write a file it created read-only
    /// (git's objects are 0444) only while it owns it: it lends itself write permission for the
    /// moment, as the kernel checks it even for an open descriptor.
    private static func write(_ item: ItemID, to fd: Int32) throws(DocfsError) {
        do throws(DocfsError) {
            try ItemAttributes.setID(item, onDescriptor: fd, onlyIfAbsent: true)
        } catch where error.systemErrno == EACCES {
            var st = stat()
            guard fstat(fd, &st) == 0, st.st_uid == geteuid() else { throw error }
            try check(fchmod(fd, (st.st_mode & 0o7777) | S_IWUSR))
            defer { fchmod(fd, st.st_mode & 0o7777) }
            try ItemAttributes.setID(item, onDescriptor: fd, onlyIfAbsent: true)
        }
    }
}
