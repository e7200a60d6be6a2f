import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// References (DESIGN §8, open mode): an entry in one container that stands for a document
/// living in another. Its node is its own (so it carries the external-document attributes of
/// its own place), but its content, attributes and extended attributes are the original's,
/// found by item id wherever the original now lives; opening it opens the original, under the
/// same claims and write sessions as any open of the original. A reference whose original was
/// deleted still lists (so it can be removed) but cannot be opened: ENOENT, and `docfs
/// status` says why.
extension Filesystem {
    /// The original document `item`: its place and a node of it (this view's, when the kernel
    /// knows it here, so sessions and places are shared); nil when it is gone.
    func original(_ item: ItemID) -> (place: StorePlace, node: Node)? {
        guard let stitcher, let records = try? stitcher.index.records(id: Int64(bitPattern: item.rawValue)) else { return nil }
        for record in records where record.scope != Scope.external.rawValue {
            guard let container = try? ContainerID(record.container), let scope = Scope(rawValue: record.scope) else { continue }
            let place = StorePlace(container: container, scope: scope, path: record.path)
            guard let found = node(at: place), found.item == item, !found.isReference else { continue }
            if let known = nodes.known(key: found.key) { return (place, known) }
            return (place, found)
        }
        return nil
    }

    /// What reads and writes of `node` reach: the node itself, or a reference's original.
    func contentNode(_ node: Node) throws(DocfsError) -> Node {
        guard node.isReference else { return node }
        if let (_, original) = original(node.item) { return original }
        // Being moved (a move holds the original's claim until the index knows its new place,
        // and the reference already stands where it was): looked for again once that is over.
        if waitWhileClaimed(node.item), let (_, original) = original(node.item) { return original }
        throw DocfsError(.notFound, "the original of this reference (item \(node.item)) was deleted: docfs status on the reference says so; remove the reference")
    }

    /// Waits while `item` is claimed, up to two seconds (the caller may hold the claim itself);
    /// answers whether it was claimed at all.
    private func waitWhileClaimed(_ item: ItemID) -> Bool {
        coordinator.waitWhileClaimed(item, seconds: 2)
    }

    /// A reference's attributes: its original's, with the inode number of the reference's own file.
    func referenceAttributes(of node: Node) throws(DocfsError) -> stat {
        let original = try contentNode(node)
        var st = stat()
        try check(fstatat(original.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
        st.st_ino = ino_t(node.key.inode)  // a file of its own: its inode number is the reference's
        return st
    }

    /// The external-document attribute `name` of a reference (DESIGN §6): `user.docfs.external`
    /// is 1, `.container` the display name of the container holding the original, `.original`
    /// its path in the user view, `.local-path` the reference's own path in its container.
    /// Nil for another name, or a node that is no reference.
    func externalAttribute(_ name: String, of node: Node) -> String? {
        guard node.isReference, ExtendedAttributePolicy.externalNames.contains(name) else { return nil }
        switch name {
        case ItemAttributes.external: return "1"
        case ItemAttributes.localPath: return paths.place(of: node.fd).map(Self.localPath)
        default:
            guard let (place, _) = original(node.item) else { return nil }
            if name == ItemAttributes.container { return containerFolders.catalog.displayName(of: place.container) }
            return userView.path(of: place) ?? "\(place.container) (\(place.scope.rawValue)) \(place.path)"
        }
    }

    /// The external-document attributes a reference carries (all four, or only the two of its
    /// own place when its original is gone).
    func externalAttributeNames(of node: Node) -> [String] {
        guard node.isReference else { return [] }
        let own = [ItemAttributes.external, ItemAttributes.localPath]
        return original(node.item) == nil ? own : own + [ItemAttributes.container, ItemAttributes.original]
    }

    /// A place's path within its container, as references name their own (`/Documents/a`).
    public static func localPath(_ place: StorePlace) -> String {
        "/" + (StorePaths.scopeFolders.first { $0.scope == place.scope }?.name ?? place.scope.rawValue) + place.path
    }
}

extension Filesystem {
    /// The original `name` in `directory` stands for, when it is a reference.
    func reference(at name: FileName, in directory: Node) -> ItemID? {
        let fd = openat(directory.fd, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return ReferenceStub.target(ofDescriptor: fd, st)
    }

    /// A rename of the file `name` in `from` onto a reference to `item` (an editor's save
    /// through the reference): the file becomes the original's new content, in the original's
    /// place, as a replace (the original keeps its id, its previous content is kept as a
    /// version); the reference stays. Answers the nodes whose attributes changed, and the
    /// original's name (its folder, its name) that now holds the new content.
    func replaceOriginal(_ item: ItemID, from: Node, name: FileName,
                         caller: Caller) throws(DocfsError) -> ([NodeID], (folder: BackingKey, name: FileName)) {
        guard let (place, _) = original(item), let slash = place.path.lastIndex(of: "/") else {
            throw DocfsError(.notFound, "the original of this reference (item \(item)) was deleted: nothing to save into")
        }
        guard let source = replaceSide(in: from, name: name) else {
            throw DocfsError(.refused, "only a file (with one name) can be saved onto a reference")
        }
        defer { close(source.fd) }
        let folderPlace = StorePlace(container: place.container, scope: place.scope, path: String(place.path[..<slash]))
        let folder = paths.openPlace(folderPlace)
        guard folder >= 0 else { throw DocfsError.system(ENOENT) }
        defer { close(folder) }
        let originalName = FileName(String(place.path[place.path.index(after: slash)...]))
        guard let document = replaceSide(inDirectory: folder, name: originalName), document.item == item else {
            throw DocfsError(.system(.noSuchFileOrDirectory), "the original of item \(item) moved meanwhile: save again")
        }
        defer { close(document.fd) }
        var st = stat()
        try check(fstat(folder, &st))
        ownChanges.changedName(originalName, in: BackingKey(st))
        let retagged = try replace(document: document, with: source, keepingOldAs: nil, caller: caller) { () throws(DocfsError) in
            try check(docfs_renameat2(from.fd, name.cString, folder, originalName.cString, 0))
        }
        deliver(.name(.replaced(from: name, inFolder: from.fd, exchange: false), originalName, inFolder: folder, item: item))
        return (retagged, (BackingKey(st), originalName))
    }
}

/// Editors that save by renaming the file to a backup name and writing a new one (vim, emacs)
/// save through a reference too: the new file at the reference's name becomes the reference
/// again, and its content the original's (a write session of the original, truncated as a new
/// file is empty); the renamed reference becomes the backup the editor meant, a copy of the
/// original's content before the save, a document of the app's own.
extension Filesystem {
    /// Makes the file `fd` (in state `st`), just created at `name` in `directory`, a reference
    /// to `original`.
    func makeReference(_ fd: Int32, _ st: stat, to original: ItemID, named name: FileName, in directory: Node) throws(DocfsError) {
        let key = BackingKey(st)
        ownChanges.willWrite(key)
        try ReferenceStub.mark(fd, target: original)
        var marked = stat()
        ownChanges.abandon(key, now: fstat(fd, &marked) == 0 ? marked : nil)
        deliver(.name(.created, name, in: directory, item: original))
    }

    /// The reference to `original` at `backupName` in `directory` becomes a copy of the
    /// original's content as it is now, with a new item id: the editor's backup. Nothing
    /// changes when the name holds something else by now, or the original is gone.
    func turnIntoBackup(_ backupName: FileName, of original: ItemID, in directory: Node) throws(DocfsError) {
        guard let (_, source) = self.original(original) else { return }
        // The other mounts forget the name: it holds a document now.
        let touched = TouchedPlaces.name(backupName, in: directory)
        let changed = try changing([(directory.item, .write), (original, .read)], touching: touched) { () throws(DocfsError) in
            guard reference(at: backupName, in: directory) == original else { return (false, []) }
            let target = openat(directory.fd, backupName.cString, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
            guard target >= 0 else { throw DocfsError.errno("opening the backup \(backupName)") }
            defer { close(target) }
            var st = stat()
            try check(fstat(target, &st))
            let key = BackingKey(st)
            ownChanges.willWrite(key)
            var after: stat? = nil
            defer { ownChanges.abandon(key, now: after) }
            let content = Glibc.open(source.procPath, O_RDONLY | O_CLOEXEC)
            guard content >= 0 else { throw DocfsError.errno("reading the original of the backup \(backupName)") }
            defer { close(content) }
            try copyAll(from: content, to: target)
            var originalStat = stat()
            if fstat(content, &originalStat) == 0 { fchmod(target, originalStat.st_mode & 0o7777) }
            for attribute in ExtendedAttributeCopy.userNames(of: source.fd) where !attribute.hasPrefix(ExtendedAttributePolicy.docfsPrefix)
                || ExtendedAttributePolicy.userWritableDocfsNames.contains(attribute) {
                ExtendedAttributeCopy.copyIfMissing(attribute, from: source.fd, to: target)
            }
            guard docfs_removexattr("/proc/self/fd/\(target)", ReferenceStub.attribute) == 0 else { throw DocfsError.errno("unmarking the backup \(backupName)") }
            let item = try identity.allocator.allocate()
            try ItemAttributes.setID(item, onDescriptor: target)
            try ItemAttributes.setVersion(1, onDescriptor: target)
            var made = stat()
            if fstat(target, &made) == 0 { after = made }
            // The kernel knows the backup as the reference it was: it finds a new node at the name.
            nodes.detach(key: key)
            return (true, [.name(.referenceBecameDocument, backupName, in: directory, item: item)])
        }
        guard changed else { return }
        var forget = KernelInvalidations()
        forget.entries = [(directory.id, backupName)]
        invalidateAfterReply(forget)
    }

    /// An existing reference of container `app` to `item`, from the index.
    func existingReference(to item: ItemID, in app: ContainerID) -> StorePlace? {
        referencePlaces(to: item, in: app).first { place in node(at: place).map { $0.isReference && $0.item == item } ?? false }
    }

    /// Where the index says container `app` holds references to `item` (an app view shows its
    /// original's changes at these places too).
    public func referencePlaces(to item: ItemID, in app: ContainerID) -> [StorePlace] {
        guard let records = try? stitcher?.index.records(id: Int64(bitPattern: item.rawValue)) else { return [] }
        return records.compactMap { record -> StorePlace? in
            guard record.container == app.rawValue else { return nil }
            return Self.ownPlace(ofReference: record)
        }
    }

    /// The place of the reference whose record (in the external scope, under its path in its
    /// container, `/Documents/a`) is `record`; nil for any other record.
    package static func ownPlace(ofReference record: IndexRecord) -> StorePlace? {
        guard record.scope == Scope.external.rawValue, let container = try? ContainerID(record.container) else { return nil }
        let parts = record.path.split(separator: "/", maxSplits: 1).map(String.init)
        guard let scope = StorePaths.scopeFolders.first(where: { $0.name == parts.first })?.scope else { return nil }
        return StorePlace(container: container, scope: scope, path: parts.count > 1 ? "/" + parts[1] : "")
    }
}
