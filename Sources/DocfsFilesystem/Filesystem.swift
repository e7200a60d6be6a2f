import CLinux
import DocfsCoordination
import DocfsCore
import DocfsIndex
import DocfsProvider
import DocfsThumbnails
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The filesystem logic behind a mount: every FUSE operation as a Swift method working on the
/// store through descriptors (fd-relative), throwing `DocfsError`. It never talks to the kernel,
/// so tests can drive it in-process; the FUSE bridge turns its results into replies.
///
/// Permission checks are the kernel's (the bridge mounts with `default_permissions` whenever
/// anyone but the daemon's own user can reach the mount; otherwise the store's checks with the
/// daemon's credentials are the same); this type makes new items belong to the caller, as ext4
/// does, with setgid-directory inheritance.
/// Modes given to create, mkdir and mknod are used as they are: the kernel already applied the
/// caller's umask, so the daemon runs with umask 0.
public final class Filesystem: Sendable {
    /// How long the kernel may cache entries and attributes, in seconds.
    public struct CachePolicy: Sendable {
        public var entryTimeout: Double
        public var attributeTimeout: Double
        public var negativeTimeout: Double
        /// The kernel caches writes and sends them later (FUSE writeback cache). It then reads
        /// pages of files opened write-only and computes O_APPEND offsets itself, so opens of the
        /// backing file are read-write and never append.
        public var writebackCache: Bool

        public init(entryTimeout: Double = 1, attributeTimeout: Double = 1, negativeTimeout: Double = 1,
                    writebackCache: Bool = false) {
            self.entryTimeout = entryTimeout
            self.attributeTimeout = attributeTimeout
            self.negativeTimeout = negativeTimeout
            self.writebackCache = writebackCache
        }
    }

    /// Which view of the store a mount shows (DESIGN §2).
    public enum View: Sendable, Equatable, CustomStringConvertible {
        /// A plain mount: the default container's documents at the root, public containers
        /// as folders there.
        case user
        /// `docfs mount --app ID`: that container's `Documents/` and `Data/`, nothing else.
        case app(ContainerID)

        public var description: String {
            switch self {
            case .user: "the user view"
            case .app(let id): "the app view of \(id)"
            }
        }
    }

    /// What every view of the store shares: coordinator, sessions, index, thumbnails.
    public let shared: ServedStore
    public let view: View
    public let cachePolicy: CachePolicy
    package let nodes: NodeTable
    /// docfs's own files and folders the kernel knows (the control area, shared thumbnail
    /// repositories, read-only views).
    let virtualNodes = VirtualNodes()
    /// Key files open for writing (`.docfs/kv/` of an app view).
    let keyValueHandles = KeyValueHandles()
    /// The thumbnail names of recently asked folders (`.sh_thumbnails`).
    let sharedThumbnailFolders = SharedThumbnailFolders()
    let root: Node
    /// Where invalidations found outside a request's reply go (the bridge's notifier).
    private let invalidationSink = Callback<KernelInvalidations>()

    public var store: LocalStore { shared.store }
    /// Generation of every node this daemon hands out; node ids are never reused within it.
    public var generation: UInt64 { shared.generation }
    var identity: ItemIdentity { shared.identity }
    var sessions: WriteSessions { shared.sessions }
    var safeSaves: SafeSaveTracker { shared.safeSaves }
    var ownChanges: OwnChanges { shared.ownChanges }
    /// The arbiter every operation that changes an item claims it from (C1).
    public var coordinator: Coordinator { shared.coordinator }
    /// Whoever wants to hear about changes (C6).
    public var presenters: Presenters { shared.presenters }
    var stitcher: IndexStitcher? { shared.stitcher }
    var paths: StorePaths { shared.paths }
    var containerFolders: ContainerFolders { shared.containerFolders }
    var userView: UserView { shared.userView }
    var thumbnailer: Thumbnailer? { shared.thumbnailer }
    var userThumbnailWorker: ThumbnailWorkerClient? { shared.userThumbnailWorker }

    /// Sends what the kernel must forget, for changes made outside a request (a raced save).
    public func onInvalidations(_ sink: @escaping @Sendable (KernelInvalidations) -> Void) {
        invalidationSink.set(sink)
    }

    package func invalidate(_ invalidations: KernelInvalidations) {
        invalidationSink(invalidations)
    }

    /// The same, for a request whose reply the kernel waits for with the folders locked (a
    /// rename): sent from a thread of its own, so it goes out once the reply has.
    func invalidateAfterReply(_ invalidations: KernelInvalidations) {
        DetachedThread.start { [self] in invalidate(invalidations) }
    }

    /// Serves the user view of `store` on its own (the store's first and only view), stitching
    /// records into `index` when one is given and making thumbnails with `thumbnailWorker`
    /// when it is given (see `ServedStore`).
    public convenience init(store: LocalStore, cachePolicy: CachePolicy = CachePolicy(), index: IndexDatabase? = nil,
                            thumbnailWorker: [String]? = nil) throws(DocfsError) {
        try self.init(serving: try ServedStore(store: store, index: index, thumbnailWorker: thumbnailWorker),
                      view: .user, cachePolicy: cachePolicy)
    }

    /// Serves `view` of the store `shared` serves.
    public init(serving shared: ServedStore, view: View, cachePolicy: CachePolicy = CachePolicy()) throws(DocfsError) {
        self.shared = shared
        self.view = view
        self.cachePolicy = cachePolicy
        let layout = shared.store.layout
        let rootPath: String
        switch view {
        case .user: rootPath = layout.documentsDirectory(.userDefault)
        case .app(let id):
            guard id != .userDefault, shared.containerFolders.catalog.record(of: id) != nil else {
                throw DocfsError(.invalidArgument, "there is no container \(id) to show (docfs container list shows them)")
            }
            rootPath = layout.containerDirectory(id)
        }
        let fd = try shared.store.openDirectory(rootPath)
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0 else {
            close(fd)
            throw DocfsError(.storeUnavailable, "cannot stat \(rootPath)", cause: DocfsError.errno("fstatat"))
        }
        root = Node(id: rootID, fd: fd, key: BackingKey(st), type: S_IFDIR, item: shared.identity.item(of: fd, st))
        nodes = NodeTable(root: root)
        shared.viewStarted(self)
    }

    /// Where thumbnail problems are reported (a worker that crashed or ran out of time).
    public func onThumbnailProblem(_ sink: @escaping @Sendable (String) -> Void) {
        shared.onThumbnailProblem(sink)
    }

    /// Where failed index writes are reported (the operations themselves succeed).
    public func onIndexFailure(_ sink: @escaping @Sendable (DocfsError) -> Void) {
        shared.onIndexFailure(sink)
    }

    /// The number of nodes the kernel holds references to (the root included).
    public var knownNodeCount: Int { nodes.count }

    /// How many lookups of `node` the kernel holds.
    public func lookupCount(of node: NodeID) -> UInt64 { nodes.lookups(of: node) }

    // MARK: lookup and forget

    /// Looks `name` up for `caller` (who matters only to a security-scoped bookmark token).
    public func lookup(parent: NodeID, name: FileName, caller: Caller = .daemon) throws(DocfsError) -> Entry {
        if VirtualNodes.isVirtual(parent) { return try lookupVirtual(parent: parent, name: name, caller: caller) }
        let directory = try nodes.node(parent)
        if parent == rootID && name == ControlArea.name { return try virtualEntry(.controlArea, .controlArea) }
        if parent == rootID && appContainer != nil { return try appRootEntry(name) }
        // docfs's own working files are not there for anyone else (`WorkingFileNames`).
        if WorkingFileNames.contains(name) { throw DocfsError.system(ENOENT) }
        do throws(DocfsError) {
            return try entry(in: directory, name: name)
        } catch where error.systemErrno == ENOENT && name.description == SharedThumbnailNames.repository {
            return try sharedRepositoryEntry(in: directory)
        } catch where error.systemErrno == ENOENT {
            guard let container = containerFolder(parent, name) else { throw error }
            return try containerEntry(container)
        }
    }

    /// Waits up to `seconds` for this view to know more nodes than it keeps (`NodeTable`), then
    /// answers the names of the least recently used, for the kernel to be asked to forget them
    /// (`fuse_lowlevel_notify_inval_entry`, from a thread that answers no request). Empty when
    /// there are not too many, or when `wakeForgetting` woke the wait.
    public func namesToForget(waitingUpTo seconds: Double) -> [(parent: NodeID, name: FileName)] {
        let names = nodes.leastRecentlyUsed(waitingUpTo: seconds).compactMap { node -> (parent: NodeID, name: FileName)? in
            guard let place = node.place, let parent = nodes.known(key: place.directory) else { return nil }
            return (parent.id, place.name)
        }
        if nodes.takeFolderWarning() {
            shared.problemSink("the kernel keeps more folders than docfs keeps descriptors for (\(nodes.limit)): it is asked to forget some, and a program whose working directory is one of them may find getcwd failing; raise the daemon's descriptor limit (ulimit -n, or LimitNOFILE= in its systemd unit)")
        }
        return names
    }

    /// Opens a descriptor with `open`; when the daemon is out of descriptors (a burst of lookups
    /// outran the forgetting of nodes: EMFILE, ENFILE), wakes the forgetting and tries again for
    /// up to half a second, sleeping between tries, rather than answering EMFILE to a program
    /// (git reports a file it cannot stat as modified). A timed wait, never one on a condition:
    /// the kernel holds this lookup's folder, which a forgetting of a name in it waits for.
    func withDescriptorsToSpare(_ open: () -> Int32) -> Int32 {
        var fd = open()
        var waited: useconds_t = 0
        while fd < 0 && (Glibc.errno == EMFILE || Glibc.errno == ENFILE) && waited < 500_000 {
            nodes.wakeWaiter()
            let pause: useconds_t = waited < 20_000 ? 2_000 : 10_000
            usleep(pause)
            waited += pause
            fd = open()
        }
        return fd
    }

    /// Ends a wait of `namesToForget` at once (the mount is ending).
    public func wakeForgetting() { nodes.wakeWaiter() }

    public func forget(_ node: NodeID, count: UInt64) {
        if VirtualNodes.isVirtual(node) { return virtualNodes.forget(node, count: count) }
        nodes.forget(node, count: count)
    }

    /// Unmount: the kernel drops its references without forgets. The last view's end stores
    /// the pending ids of files closed just before it and finishes the shared work.
    public func forgetAll() {
        virtualNodes.dropAll()
        nodes.dropAll()
        shared.viewEnded(self)
    }

    /// Looks `name` up in `directory` and counts one lookup of it. `newItem` is the id just
    /// given to an item made there, so it need not be read back.
    func entry(in directory: Node, name: FileName, newItem: ItemID? = nil) throws(DocfsError) -> Entry {
        let fd = withDescriptorsToSpare { openat(directory.fd, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { throw DocfsError.system(Glibc.errno) }
        let (node, st) = try referenced(fd, newItem: newItem)
        node.found(at: Node.Place(directory: directory.key, name: name))
        return Entry(node: node.id, generation: generation, attributes: st)
    }

    /// The entry of the file or folder `fd` (an O_PATH descriptor, which the node keeps or
    /// which is closed), counting one lookup of it.
    func entry(of fd: Int32) throws(DocfsError) -> Entry {
        let (node, st) = try referenced(fd, newItem: nil)
        return Entry(node: node.id, generation: generation, attributes: st)
    }

    /// The node of `fd` (kept by it, or closed), counted one lookup more, and its attributes
    /// as the kernel is shown them (the backing file's, its inode number included).
    private func referenced(_ fd: Int32, newItem: ItemID?) throws(DocfsError) -> (Node, stat) {
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else {
            let e = Glibc.errno
            close(fd)
            throw DocfsError.system(e)
        }
        let key = BackingKey(st)
        let node: Node
        if let known = nodes.referenceExisting(key: key) {
            close(fd)
            node = known
        } else {
            // A file made just now (`newItem`) is no reference: its create costs no extra read.
            if newItem == nil, let original = ReferenceStub.target(ofDescriptor: fd, st) {
                node = nodes.reference(key: key, fd: fd, type: S_IFREG, item: original, isReference: true)
            } else {
                node = nodes.reference(key: key, fd: fd, type: st.st_mode & S_IFMT, item: newItem ?? identity.item(of: fd, st))
            }
        }
        if node.isReference, let original = try? referenceAttributes(of: node) { st = original }
        reportPromised(&st, fd: node.fd)
        return (node, st)
    }

    // MARK: attributes

    public func attributes(of id: NodeID, handle: UInt64? = nil) throws(DocfsError) -> stat {
        if VirtualNodes.isVirtual(id) { return try virtualAttributes(id, try virtualNodes.node(id), handle: handle) }
        let node = try nodes.node(id)
        var st = try backingAttributes(of: node, handle: handle)
        if node.isReference {
            if handle == nil, let original = try? referenceAttributes(of: node) { st = original }
            st.st_ino = ino_t(node.key.inode)  // the reference's own file, not the original's
        }
        reportPromised(&st, fd: node.fd)
        return st
    }

    /// The backing file's attributes as they are (its own inode number), through the open
    /// `handle` of a regular file when there is one.
    private func backingAttributes(of node: Node, handle: UInt64?) throws(DocfsError) -> stat {
        var st = stat()
        if let handle, node.type == S_IFREG {
            guard fstat(Int32(truncatingIfNeeded: handle), &st) == 0 else { throw DocfsError.system(Glibc.errno) }
        } else {
            guard fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else {
                throw DocfsError.system(Glibc.errno)
            }
        }
        return st
    }

    public func setAttributes(of id: NodeID, handle: UInt64?, _ changes: AttributeChanges, caller: Caller) throws(DocfsError) -> stat {
        if let (container, key) = keyValueFile(id) {
            // A key file's size is its value's; its mode, owner and times are docfs's (ignored,
            // so `cp -p` into the folder works).
            if let size = changes.size { try truncateKeyValueFile(container, key, handle: handle, size: size) }
            return try virtualAttributes(id, .keyValue(container: container, key: key), handle: handle)
        }
        let node = try changeableNode(id)
        if changes.size != nil { try fulfilBeforeChanging(node) }
        return try changing([(node.item, changes.size == nil ? .metadata : .write)], touching: .file(node), by: caller) { () throws(DocfsError) in
            let st = try setAttributes(of: node, handle: handle, changes, caller: caller)
            ownChanges.changedFile(st)
            // Mode and owner are no part of the index's record; size and times are. A mode
            // travels to the other machines of a linked store: a document's item goes up (its
            // record is as it was: tar's fchmod of each file costs no look at it); anything
            // else's record is made again, which puts its item in the outbox.
            if changes.size != nil || changes.changesTimes { return (st, [.file(.attributes, node)]) }
            guard changes.mode != nil, stitcher?.fillsOutbox.load(ordering: .relaxed) == true else { return (st, []) }
            let document = node.type == S_IFREG && !node.isReference && !node.item.isDerived
            return (st, [.file(document ? .modeChanged : .attributes, node)])
        }
    }

    /// Applies `changes`; answers the backing file's attributes after them.
    private func setAttributes(of node: Node, handle: UInt64?, _ changes: AttributeChanges, caller: Caller) throws(DocfsError) -> stat {
        // The kernel passes a handle only for regular files; never trust one for anything else.
        let fd = node.type == S_IFREG ? handle.map { Int32(truncatingIfNeeded: $0) } : nil
        if let mode = changes.mode {
            if node.isSymlink { throw DocfsError.system(EOPNOTSUPP) }
            let r = fd.map { fchmod($0, mode & 0o7777) } ?? docfs_path_fd_chmod(node.fd, mode & 0o7777)
            try check(r)
        }
        if changes.uid != nil || changes.gid != nil {
            let uid = changes.uid ?? uid_t.max
            let gid = changes.gid ?? gid_t.max
            try check(fchownat(node.fd, "", uid, gid, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
        }
        if let size = changes.size {
            if node.isDirectory { throw DocfsError.system(EISDIR) }
            if let fd {
                try sessions.willChange(UInt64(fd), from: Int64(size), length: Int64.max)
                try check(ftruncate(fd, size))  // a writer's handle: inside its session
                if changes.mode == nil { try dropSetIDBits(ofOpen: fd, for: caller) }
            } else {
                // truncate(2) by path is a session of its own.
                try sessions.begin(node, caller: caller)
                ownChanges.willWrite(node.key)
                defer {
                    var st = stat()
                    ownChanges.abandon(node.key, now: fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0 ? st : nil)
                    sessions.end(node)
                }
                try check(truncate(node.procPath, size))
                if changes.mode == nil { try dropSetIDBits(of: node, for: caller) }
            }
        }
        if changes.changesTimes {
            let times = changes.timespecs
            let r: Int32
            if let fd {
                r = futimens(fd, times)
            } else if node.isSymlink {
                r = utimensat(node.fd, "", times, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)
            } else {
                r = docfs_path_fd_utimens(node.fd, times)
            }
            try check(r)
        }
        return try backingAttributes(of: node, handle: fd.map { UInt64($0) })
    }

    /// access(2) with the daemon's credentials on the backing file (the kernel asks only when
    /// the daemon's user is the only one that can reach the mount).
    public func checkAccess(_ id: NodeID, mask: Int32) throws(DocfsError) {
        if VirtualNodes.isVirtual(id) { return try checkVirtualAccess(id, mask: mask) }
        let node = try nodes.node(id)
        if node.isSymlink { return }
        try check(faccessat(AT_FDCWD, node.procPath, mask, AT_EACCESS))
    }

    public func readLink(_ id: NodeID) throws(DocfsError) -> FileName {
        if VirtualNodes.isVirtual(id) { return try readVirtualLink(id) }
        let node = try nodes.node(id)
        let target = try readLink(of: node)
        try refuseEscapingTarget(target, of: node)
        return target
    }

    func readLink(of node: Node) throws(DocfsError) -> FileName {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlinkat(node.fd, "", &buffer, buffer.count - 1)
        guard n >= 0 else { throw DocfsError.system(Glibc.errno) }
        return FileName(bytes: buffer[0..<n].map { UInt8(bitPattern: $0) })
    }

    public func statistics() throws(DocfsError) -> statvfs {
        var sv = statvfs()
        try check(fstatvfs(root.fd, &sv))
        return sv
    }
}

/// Throws the current errno when a system call answered -1.
@inline(__always)
package func check(_ result: Int32) throws(DocfsError) {
    if result < 0 { throw DocfsError.system(Glibc.errno) }
}
