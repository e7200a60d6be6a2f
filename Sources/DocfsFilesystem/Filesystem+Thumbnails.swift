import CLinux
import DocfsCoordination
import DocfsCore
import DocfsIndex
import DocfsProvider
import DocfsThumbnails
#if canImport(Glibc)
import Glibc
#endif

/// Thumbnails through the mount (issue 5 §2, DESIGN §6): `user.docfs.thumbnail` reads as the
/// PNG of the item's current content that fits 1024×1024 and 64 KiB, and takes a user's own
/// PNG, kept until the content next changes. Sets are made in the background (`Thumbnailer`)
/// when a write closes, a safe-save or restore replaces the content, or a change made behind
/// docfs is noticed; a file that has none yet when asked is queued then.
extension Filesystem {
    /// Queues a look at the content of `node` (a file a write just closed, say).
    func contentChanged(_ node: Node, outlook: IndexRecordBuilder.ThumbnailOutlook? = nil) {
        if let outlook, outlook.isPointless {
            thumbnailer?.enqueueUnlessPointless(node)
        } else {
            thumbnailer?.enqueue(node)
        }
    }

    /// Queues a look at the regular file at `path` in the store (a change the kernel may not
    /// know a node of: a restore, a change made behind docfs).
    func contentChanged(atBackingPath path: String) {
        guard thumbnailer != nil else { return }
        let fd = Glibc.open(FileName(path).cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        enqueueOwnNode(fd)
    }

    /// The same for `name` in the folder `folder` (a descriptor): the kernel's node of the file
    /// when it knows one.
    func contentChanged(_ name: FileName, inFolder folder: Int32) {
        guard let thumbnailer else { return }
        var st = stat()
        guard fstatat(folder, name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFREG else { return }
        if let node = nodes.known(key: BackingKey(st)) { return thumbnailer.enqueue(node) }
        let fd = openat(folder, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        enqueueOwnNode(fd)
    }

    /// Queues the regular file `fd` (an O_PATH descriptor, closed by the thumbnailer, or here
    /// when it is no document).
    private func enqueueOwnNode(_ fd: Int32) {
        guard let thumbnailer else {
            close(fd)
            return
        }
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0, st.st_mode & S_IFMT == S_IFREG,
              let item = ItemAttributes.id(ofDescriptor: fd) else {
            close(fd)
            return
        }
        // A node of the thumbnailer's own (the kernel's are found by lookups): it holds the
        // descriptor for the job and closes it after.
        thumbnailer.enqueue(Node(id: 0, fd: fd, key: BackingKey(st), type: S_IFREG, item: item))
    }

    /// Removes the sets of items that are no longer in the store (at mount: the index has just
    /// been reconciled with the store, and every later item is recorded before it gets a set).
    static func pruneThumbnails(_ thumbnails: ThumbnailStore, keepingItemsOf index: IndexDatabase) {
        for item in thumbnails.items() {
            if let records = try? index.records(id: Int64(bitPattern: item.rawValue)), records.isEmpty {
                thumbnails.remove(item)
            }
        }
    }

    /// A file removed by its last name loses its set (an open descriptor may still read it, but
    /// nothing can ask for its thumbnail any more). Only a set made from this very file goes:
    /// one made from another file of the item (the document an editor's safe-save left when it
    /// removes its backup) stays. One open of the set's file, no index read: unlink is a hot path.
    func removedLastName(of node: Node) {
        var st = stat()
        guard let thumbnailer, node.type == S_IFREG, !node.item.isDerived,
              fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0, st.st_nlink == 0,
              let (set, fd) = thumbnailer.store.open(node.item) else { return }
        close(fd)
        if set.stamp.inode == UInt64(st.st_ino) { thumbnailer.store.remove(node.item) }
    }

    /// The set made from the content `node` holds now, if there is one (a `none` set says the
    /// content has none). A file without a set is queued, so one follows.
    func currentThumbnail(of node: Node) -> ThumbnailFile? {
        guard let thumbnailer, node.type == S_IFREG, !node.item.isDerived, let stamp = Thumbnailer.stamp(of: node) else { return nil }
        if let file = thumbnailer.store.current(node.item, stamp: stamp) { return file.origin == .none ? nil : file }
        thumbnailer.ask(for: node)
        return nil
    }

    /// The rendition `size` of the current thumbnail of `node`.
    func thumbnail(_ size: ThumbnailSize, of node: Node) -> [UInt8]? {
        guard let thumbnailer, currentThumbnail(of: node) != nil, let stamp = Thumbnailer.stamp(of: node) else { return nil }
        return thumbnailer.store.rendition(size, of: node.item, stamp: stamp)
    }

    /// getxattr of `user.docfs.thumbnail`, under a read claim: a thumbnail another machine
    /// made is put in under the item's write claim with the record that says so, so it is
    /// never read before the index knows it (S1).
    func thumbnailAttribute(of node: Node) throws(DocfsError) -> [UInt8] {
        let png = try coordinator.withClaims([(node.item, .read)]) { () throws(DocfsError) in thumbnail(.attribute, of: node) }
        guard let png else { throw DocfsError.system(ENODATA) }
        return png
    }

    /// setxattr of `user.docfs.thumbnail`: `png` becomes the item's thumbnail until its content
    /// changes. It must be a PNG that decodes whole and fits 1024×1024.
    func setThumbnailAttribute(of node: Node, png: [UInt8], flags: Int32) throws(DocfsError) {
        guard let thumbnailer, let userImages = userThumbnailWorker else {
            throw DocfsError(.refused, "\(ItemAttributes.thumbnail) cannot be set: this mount makes no thumbnails")
        }
        guard node.type == S_IFREG, !node.item.isDerived else {
            throw DocfsError(.invalidArgument, "\(ItemAttributes.thumbnail): only files have thumbnails")
        }
        guard let declared = PNGChunks.size(of: png) else {
            throw DocfsError(.invalidArgument, "\(ItemAttributes.thumbnail) takes a PNG; this value does not start as one does")
        }
        let limit = ThumbnailSize.attribute.pixels
        guard declared.width <= limit, declared.height <= limit else {
            throw DocfsError(.invalidArgument, "\(ItemAttributes.thumbnail): the PNG is \(declared.width)×\(declared.height); a thumbnail fits \(limit)×\(limit)")
        }
        guard let stamp = Thumbnailer.stamp(of: node) else { throw DocfsError.system(ENOENT) }
        let exists = currentThumbnail(of: node) != nil
        if flags & DOCFS_XATTR_CREATE != 0 && exists { throw DocfsError.system(EEXIST) }
        if flags & DOCFS_XATTR_REPLACE != 0 && !exists { throw DocfsError.system(ENODATA) }
        // The worker checks it decodes, and makes the freedesktop sizes of it.
        let job = thumbnailer.store.newJob()
        let input = thumbnailer.store.workPath(job: job) + ".png"
        let output = thumbnailer.store.workPath(job: job)
        defer { Glibc.unlink(input); Glibc.unlink(output) }
        let fd = Glibc.open(input, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DocfsError.errno("keeping the thumbnail given for item \(node.item)") }
        defer { close(fd) }
        guard png.withUnsafeBytes({ pwrite(fd, $0.baseAddress, $0.count, 0) }) == png.count else {
            throw DocfsError.errno("keeping the thumbnail given for item \(node.item)")
        }
        let request = ThumbnailRequest(job: job, kind: .userImage, output: output, stamp: stamp)
        switch userImages.run(request, content: fd) {
        case .success(let reply) where reply.made: break
        case .success(let reply):
            throw DocfsError(.invalidArgument, "\(ItemAttributes.thumbnail): \(reply.problem ?? "not a usable PNG")")
        case .failure(let failure):
            throw DocfsError(.internalFailure, "\(ItemAttributes.thumbnail) could not be checked", cause: failure)
        }
        try changing([(node.item, .metadata)], touching: .file(node)) { () throws(DocfsError) in
            guard Thumbnailer.stamp(of: node) == stamp else {
                throw DocfsError(.system(.resourceTemporarilyUnavailable), "the content changed while its thumbnail was being set: try again")
            }
            try thumbnailer.store.install(output, as: node.item)
            return ((), [.file(.attributes, node)])  // the index's hasThumbnail
        }
    }

    /// removexattr of `user.docfs.thumbnail`: a user's thumbnail gives way to a generated one;
    /// a generated one goes until the content changes.
    func removeThumbnailAttribute(of node: Node) throws(DocfsError) {
        guard let thumbnailer, let current = currentThumbnail(of: node), let stamp = Thumbnailer.stamp(of: node) else {
            throw DocfsError.system(ENODATA)
        }
        try changing([(node.item, .metadata)], touching: .file(node)) { () throws(DocfsError) in
            if current.origin == .user {
                thumbnailer.store.remove(node.item)
            } else {
                let none = ThumbnailFile.encode(origin: .none, stamp: stamp, width: 0, height: 0, renditions: [:])
                try thumbnailer.store.write(none, as: node.item, job: thumbnailer.store.newJob())
            }
            return ((), [.file(.attributes, node)])
        }
        if current.origin == .user { thumbnailer.enqueue(node) }  // a generated one follows
    }
}
