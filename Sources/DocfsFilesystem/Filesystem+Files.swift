import CLinux
import DocfsCoordination
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// An open file: the handle the kernel passes back with each read and write, and how the
/// kernel should cache it.
public struct OpenFile: Sendable {
    /// The handle (the backing descriptor).
    public var handle: UInt64
    /// Bypass the page cache (the caller asked for O_DIRECT).
    public var directIO: Bool
    /// Keep the page cache of the file from earlier opens. The kernel still drops it when it
    /// sees the file's size or mtime change (auto_inval_data).
    public var keepCache: Bool
    /// A regular file, whose reads and writes the kernel may do on the backing file itself:
    /// any but one with set-id bits a write may drop (see Filesystem+SetID), or one whose write
    /// session is to see every write.
    public var mayPassThrough: Bool
    /// The open's write session saves what each write overwrites, so docfs must serve it: if
    /// the kernel is given the backing file anyway (it was open that way already), call
    /// `Filesystem.lostSight` before replying.
    public var needsSight: Bool = false
    /// Its closes need docfs (a writer's close is stitched and may end a session): when false
    /// (an open for reading only) the kernel is told not to send them (FOPEN_NOFLUSH).
    public var needsFlush: Bool = true
}

/// Opening, reading and writing file content. Reads and writes go to the backing descriptor:
/// the bridge splices through `backingDescriptor(of:)`; `read`/`write` serve in-process use.
extension Filesystem {
    /// Flags the backing open must not see: creation is done by `create`; the kernel already
    /// resolved the path (O_NOFOLLOW would refuse the /proc link we open through); O_DIRECT is
    /// served by telling the kernel to bypass its cache (the backing file takes unaligned I/O).
    static let strippedOpenFlags = O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | DOCFS_O_DIRECT

    /// Opens a file; an open for writing (or truncating) joins the file's write session,
    /// starting it if it is the first (see `WriteSessions`).
    public func open(_ id: NodeID, flags: Int32, caller: Caller) throws(DocfsError) -> OpenFile {
        if VirtualNodes.isVirtual(id) { return try openVirtual(id, flags: flags) }
        let reached = try nodes.node(id)
        let node = try contentNode(reached)  // a reference opens its original
        if node.isDirectory && flags & O_ACCMODE != O_RDONLY { throw DocfsError.system(EISDIR) }
        let writes = node.type == S_IFREG && (flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0)
        // A promised file is downloaded whole before it is written; read, it waits per range.
        if writes { try fulfilBeforeChanging(node) }
        let promised = !writes && node.type == S_IFREG && isPromised(node.fd)
        if node.type == S_IFREG && shared.promises.isActive { shared.promises.use.used(node.item.rawValue) }
        // The sync engine leaves the file alone from here (the session may truncate it) until
        // the handle is a writer, or the open failed; told so once the claim is let go.
        if writes { stitcher?.willOpen(node.item) }
        defer { if writes { stitcher?.openEnded(node.item) } }
        return try coordinator.withClaims([(node.item, writes ? .write : .read)]) { () throws(DocfsError) -> OpenFile in
            var needsSight = false
            if writes {
                // An O_TRUNC open empties the file itself, unseen: its session keeps a copy.
                needsSight = try sessions.begin(node, caller: caller, appending: flags & O_APPEND != 0 && flags & O_TRUNC == 0,
                                                canSee: flags & O_TRUNC == 0)
                ownChanges.changedFile(at: node.fd, permissionsToo: false)
            }
            if writes { ownChanges.willWrite(node.key) }
            let fd = withDescriptorsToSpare { Glibc.open(node.procPath, backingFlags(flags & ~Self.strippedOpenFlags) | O_CLOEXEC) }
            guard fd >= 0 else {
                let e = Glibc.errno
                if writes {
                    ownChanges.abandon(node.key)
                    sessions.end(node)
                }
                throw DocfsError.system(e)
            }
            if writes {
                sessions.attach(UInt64(fd), to: node)
                ownChanges.attach(UInt64(fd), to: node.key)
                stitcher?.opened(UInt64(fd), writing: node, readable: flags & O_ACCMODE == O_RDWR)
            }
            var st = stat()
            var mayPassThrough = false
            if node.type == S_IFREG && fstat(fd, &st) == 0 {
                // O_TRUNC truncates: set-id bits go as they would for truncate(2).
                let dropped = flags & O_TRUNC != 0 ? Self.setIDBitsDropped(from: st, by: caller) : 0
                if dropped != 0 && fchmod(fd, st.st_mode & 0o7777 & ~dropped) == 0 {
                    st.st_mode &= ~dropped
                    ownChanges.knowPermissions(st)
                }
                mayPassThrough = !Self.hasSetIDBits(st.st_mode)
            }
            // A reference's pages are its own node's in the kernel, the original's another's:
            // they are not kept, and I/O goes through docfs to the original's file.
            return OpenFile(handle: UInt64(fd) | (promised ? Self.promisedHandleBit : 0), directIO: flags & DOCFS_O_DIRECT != 0,
                            keepCache: !reached.isReference,
                            mayPassThrough: mayPassThrough && !reached.isReference && !needsSight && !promised, needsSight: needsSight,
                            needsFlush: writes)
        }
    }

    public func create(parent: NodeID, name: FileName, mode: mode_t, flags: Int32, caller: Caller) throws(DocfsError) -> (Entry, OpenFile) {
        if let container = keyValueFolder(parent) { return try createKeyValueFile(name, in: container, flags: flags) }
        let directory = try nodes.node(parent)
        try refuseTakingContainerName(parent, name)
        let made = try changing([(directory.item, .write)], touching: .name(name, in: directory), by: caller) { () throws(DocfsError) in
            let creation = try createExclusively(in: directory, name: name, mode: mode, flags: flags, caller: caller)
            guard case .made(let entry, _) = creation else { return (creation, []) }
            return (creation, [.name(.createdOpen, name, in: directory, item: try nodes.node(entry.node).item)])
        }
        switch made {
        case let .made(entry, file):
            return (entry, file)
        case .existing:
            // A file appeared in the store since the kernel looked (and the caller did not ask
            // for O_EXCL): it is opened as it is, as a local filesystem would.
            return try openExisting(in: directory, name: name, flags: flags, caller: caller)
        case let .savingThroughReference(vacated):
            try turnIntoBackup(vacated.newName, of: vacated.item, in: directory)
            return try openExisting(in: directory, name: name, flags: flags | O_TRUNC, caller: caller)
        }
    }

    /// What an exclusive create came to.
    private enum Creation {
        case made(Entry, OpenFile)
        /// The name was taken already, and the caller did not ask for O_EXCL.
        case existing
        /// The name is a reference again, whose original the caller is about to save (an
        /// editor renamed the reference to a backup name and makes the file anew).
        case savingThroughReference(SafeSaveTracker.Vacated)
    }

    /// Creates `name` exclusively, so only a file made here is given to the caller.
    private func createExclusively(in directory: Node, name: FileName, mode: mode_t, flags: Int32,
                                   caller: Caller) throws(DocfsError) -> Creation {
        let openFlags = backingFlags(flags & ~(O_NOCTTY | DOCFS_O_DIRECT)) | O_CREAT | O_CLOEXEC | O_NOFOLLOW
        ownChanges.changedName(name, in: directory.key)
        let fd = openat(directory.fd, name.cString, openFlags | O_EXCL, mode & 0o7777)
        guard fd >= 0 else {
            if errno == EEXIST && flags & O_EXCL == 0 { return .existing }
            throw DocfsError.system(Glibc.errno)
        }
        do throws(DocfsError) {
            var st = stat()
            try check(fstat(fd, &st))
            let vacated = safeSaves.takeVacated(directory: directory.key, name: name)
            if let vacated, vacated.isReference, vacated.newDirectory == directory.key {
                try makeReference(fd, st, to: vacated.item, named: name, in: directory)
                close(fd)
                return .savingThroughReference(vacated)
            }
            safeSaves.noteCreated(BackingKey(st))
            ownChanges.openedForWriting(UInt64(fd), file: st)
            let item: ItemID
            if let vacated, let document = takeOverVacatedDocument(vacated, createdIn: directory, name: name, newFile: fd, caller: caller) {
                item = document
            } else {
                item = try identity.assignNew(to: BackingKey(st), createdAs: UInt64(fd), fd: fd)
                sessions.noteAuthor(of: item, version: 1, caller: caller)  // who made version 1
                sessions.created(item)
            }
            if let (uid, gid) = try ownership(for: caller, in: directory) {
                try check(fchown(fd, uid, gid))
                if mode & (S_ISUID | S_ISGID) != 0 { try check(fchmod(fd, mode & 0o7777)) }
            }
            let entry = try self.entry(in: directory, name: name, newItem: item)
            if let stitcher {
                stitcher.opened(UInt64(fd), writing: try nodes.node(entry.node), readable: flags & O_ACCMODE == O_RDWR,
                                createdAs: name, in: directory)
            }
            return .made(entry, OpenFile(handle: UInt64(fd), directIO: flags & DOCFS_O_DIRECT != 0, keepCache: true,
                                         mayPassThrough: !Self.hasSetIDBits(mode)))
        } catch {
            identity.pending.drop(createdAs: UInt64(fd))
            close(fd)
            unlinkat(directory.fd, name.cString, 0)
            throw error
        }
    }

    /// A create that found the file there already (made in the store since the kernel looked):
    /// an ordinary open of it, write session included.
    private func openExisting(in directory: Node, name: FileName, flags: Int32, caller: Caller) throws(DocfsError) -> (Entry, OpenFile) {
        let entry = try self.entry(in: directory, name: name)
        do throws(DocfsError) {
            return (entry, try open(entry.node, flags: flags, caller: caller))
        } catch {
            forget(entry.node, count: 1)
            throw error
        }
    }

    /// Open flags for the backing file, given the kernel's caching (see `CachePolicy`).
    private func backingFlags(_ flags: Int32) -> Int32 {
        guard cachePolicy.writebackCache else { return flags }
        var result = flags & ~O_APPEND
        if result & O_ACCMODE == O_WRONLY { result = (result & ~O_ACCMODE) | O_RDWR }
        return result
    }

    /// A descriptor of the node's backing file open for reading and writing (reading only on a
    /// read-only store), for the kernel to do I/O on directly; the caller closes it.
    public func openBacking(_ id: NodeID) throws(DocfsError) -> Int32 {
        let node = try nodes.node(id)
        guard node.type == S_IFREG else { throw DocfsError.system(EINVAL) }
        var fd = Glibc.open(node.procPath, O_RDWR | O_CLOEXEC)
        if fd < 0 && (errno == EROFS || errno == EACCES || errno == ETXTBSY) {
            fd = Glibc.open(node.procPath, O_RDONLY | O_CLOEXEC)
        }
        guard fd >= 0 else { throw DocfsError.system(Glibc.errno) }
        return fd
    }

    /// Calls `body` with the node's O_PATH descriptor of its backing file (a regular file),
    /// kept open meanwhile.
    public func withPathDescriptor(of id: NodeID, _ body: (Int32) -> Int32) throws(DocfsError) -> Int32 {
        let node = try nodes.node(id)
        guard node.type == S_IFREG else { throw DocfsError.system(EINVAL) }
        return withExtendedLifetime(node) { body(node.fd) }
    }

    /// The descriptor reads and writes of `handle` go to (for splicing in the bridge).
    @inline(__always)
    public func backingDescriptor(of handle: UInt64) -> Int32 { Int32(truncatingIfNeeded: handle) }

    public func read(_ handle: UInt64, size: Int, offset: off_t) throws(DocfsError) -> [UInt8] {
        try prepareRead(handle, offset: offset, size: size)
        var buffer = [UInt8](repeating: 0, count: size)
        let n = buffer.withUnsafeMutableBytes { pread(backingDescriptor(of: handle), $0.baseAddress, size, offset) }
        guard n >= 0 else { throw DocfsError.system(Glibc.errno) }
        buffer.removeSubrange(n...)
        return buffer
    }

    /// Before `caller` changes `length` bytes of the open file `handle` from `offset` on (a
    /// write, copy or fallocate through docfs): what the write session's delta relies on is
    /// saved or copied first (see `WriteSessions`); set-id bits go as a write drops them.
    @inline(__always)
    public func prepareWrite(_ handle: UInt64, at offset: off_t, length: Int, caller: Caller) throws(DocfsError) {
        try checkKeyValueWrite(handle, at: offset, length: length)
        try sessions.willChange(handle, from: Int64(offset), length: Int64(length), writtenBack: cachePolicy.writebackCache)
        ownChanges.willWrite(through: handle)
        try dropSetIDBitsBeforeWrite(handle, caller: caller)
    }

    /// The open `handle`, which wanted docfs to serve it (`OpenFile.needsSight`), is passed
    /// through to the kernel: its session stops saving deltas and copies what they rely on.
    public func lostSight(_ handle: UInt64) throws(DocfsError) {
        try sessions.lostSight(handle)
    }

    /// The open `handle` is passed through to the kernel, which serves its reads and writes.
    public func passedThrough(_ handle: UInt64) {
        ownChanges.passedThrough(handle)
    }

    public func write(_ handle: UInt64, bytes: [UInt8], offset: off_t, caller: Caller = .daemon) throws(DocfsError) -> Int {
        try prepareWrite(handle, at: offset, length: bytes.count, caller: caller)
        let n = bytes.withUnsafeBytes { pwrite(backingDescriptor(of: handle), $0.baseAddress, bytes.count, offset) }
        guard n >= 0 else { throw DocfsError.system(Glibc.errno) }
        return n
    }

    /// close(2) of one of the descriptors sharing an open file: reports errors of the backing
    /// file's close (as NFS would) without closing the handle.
    public func flush(_ handle: UInt64) throws(DocfsError) {
        if try commitKeyValueFile(handle, .close) { return }
        let copy = dup(backingDescriptor(of: handle))
        guard copy >= 0 else { throw DocfsError.system(Glibc.errno) }
        try check(close(copy))
        sessions.flushed(handle)
        ownChanges.flushed(handle, fd: backingDescriptor(of: handle))
        if let written = stitcher?.closed(handle) {
            stitchedWriter(written)
            safeSaves.endTakeover(written.node.item)  // a safe-save's new file is recorded now
        }
    }

    /// Whether a rewrite of `id` served through docfs would keep a delta of what it
    /// overwrites rather than a copy (a file of `WriteSessions.deltaThreshold` or more).
    public func rewriteKeepsADelta(_ id: NodeID) -> Bool {
        ((try? attributes(of: id))?.st_size ?? 0) >= WriteSessions.deltaThreshold
    }

    /// The last close of an open file; the last writer of a file ends its write session.
    public func release(_ handle: UInt64) {
        if releaseKeyValueFile(handle) {
            close(backingDescriptor(of: handle))
            return
        }
        stitcher?.released(handle)  // before the handle's number is closed and can be reused
        let writer = sessions.detach(handle)
        let fd = backingDescriptor(of: handle)
        storePendingID(createdAs: handle, fd: fd)  // while a writer: an own change
        if let recheck = ownChanges.closingForWriting(handle, fd: fd) { shared.storeRechecks.post(recheck) }
        guard let writer else {
            close(fd)
            return
        }
        // The descriptor (the handle's number) is closed once the session has let go of it.
        let raced = try? coordinator.withClaims([(writer.item, .write)]) { () throws(DocfsError) -> Node? in
            sessions.end(writer, handle: handle)
        }
        close(fd)
        if let raced { keepBoth(raced, caller: .daemon) }
        ownChanges.changedAttributes(at: writer.fd)  // the session's version
    }

    /// Stores the id given at create to the file `handle` made (see `PendingItemIDs`). When the
    /// store refuses it, the file is left as one made behind docfs's back: it gets an id when
    /// next looked up.
    private func storePendingID(createdAs handle: UInt64, fd: Int32) {
        reporting("store the id given at create to the file of handle \(handle) (it gets one when next looked up)") { () throws(DocfsError) in
            try identity.pending.store(createdAs: handle, fd: fd)
        }
    }

    public func fsync(_ handle: UInt64, dataOnly: Bool) throws(DocfsError) {
        if try commitKeyValueFile(handle, .fsync) { return }
        let fd = backingDescriptor(of: handle)
        storePendingID(createdAs: handle, fd: fd)
        try check(dataOnly ? fdatasync(fd) : Glibc.fsync(fd))
        if let written = stitcher?.closed(handle) {
            stitchedWriter(written)
            safeSaves.endTakeover(written.node.item)
        }
    }

    /// fallocate(2) with any mode (keep-size, punch-hole, zero-range, collapse/insert range).
    public func allocate(_ handle: UInt64, mode: Int32, offset: off_t, length: off_t, caller: Caller) throws(DocfsError) {
        try refuseKeyValueAllocation(handle)
        // Collapsing or inserting a range moves everything after it: all of it counts.
        try prepareWrite(handle, at: offset, length: Int.max, caller: caller)
        try check(docfs_fallocate(backingDescriptor(of: handle), mode, offset, length))
    }

    /// lseek(2), for SEEK_DATA and SEEK_HOLE (the kernel answers the other whences itself).
    public func seek(_ handle: UInt64, offset: off_t, whence: Int32) throws(DocfsError) -> off_t {
        if let promised = try promisedSeek(handle, offset: offset, whence: whence) { return promised }
        let r = lseek(backingDescriptor(of: handle), offset, whence)
        guard r >= 0 else { throw DocfsError.system(Glibc.errno) }
        return r
    }

    public func copyRange(from source: UInt64, at sourceOffset: off_t, to target: UInt64, at targetOffset: off_t,
                          length: Int, flags: UInt32, caller: Caller) throws(DocfsError) -> Int {
        try prepareRead(source, offset: sourceOffset, size: length)
        try prepareWrite(target, at: targetOffset, length: length, caller: caller)
        var inOffset = sourceOffset
        var outOffset = targetOffset
        let n = docfs_copy_file_range(backingDescriptor(of: source), &inOffset, backingDescriptor(of: target),
                                      &outOffset, length, flags)
        guard n >= 0 else { throw DocfsError.system(Glibc.errno) }
        return n
    }
}
