import CLinux
import DocfsCore
import DocfsProvider
import DocfsThumbnails
#if canImport(Glibc)
import Glibc
#endif

/// The names of the control area (DESIGN §5): a folder `.docfs` at the mount's root that the
/// store does not hold. Like ZFS's `.zfs`, it is found by name and never listed, so `ls -a`,
/// `find`, `cp -a` and `rm -r` of the root pass it by; it shadows a real `.docfs` there.
enum ControlArea {
    static let name: FileName = ".docfs"
    /// `.docfs/by-id/<item-id>` and `.docfs/by-id/<bookmark token>`
    static let byID: FileName = "by-id"
    /// `.docfs/thumbnails/<item-id>.png`
    static let thumbnails: FileName = "thumbnails"
    /// `.docfs/kv/<key>` (an app view's only)
    static let keyValues: FileName = "kv"
}

/// Lookups in the control area: items by id or bookmark token, and thumbnails by item id.
extension Filesystem {
    func controlAreaEntry(_ name: FileName) throws(DocfsError) -> Entry {
        if name == ControlArea.byID { return try virtualEntry(.byID, .byID) }
        if name == ControlArea.thumbnails { return try virtualEntry(.thumbnails, .thumbnails) }
        if name == ControlArea.keyValues, let app = appContainer { return try virtualEntry(.keyValues, .keyValues(container: app)) }
        throw DocfsError.system(ENOENT)
    }

    /// `.docfs/by-id/NAME`: NAME is an item id or a bookmark token. Either is a symbolic link to
    /// where the item is now, except a read-only security-scoped token, which is the item itself
    /// read-only (so the scope holds where it is opened). A token issued to someone else is
    /// refused (EACCES); a forged, damaged or foreign one finds nothing (ENOENT), and says why
    /// in the daemon's log.
    func byIDEntry(_ name: FileName, caller: Caller) throws(DocfsError) -> Entry {
        let text = name.description
        if let item = ItemID(text: text) {
            let (path, _) = try locate(item)
            return try virtualEntry(.itemLink(text), .itemLink(target: Self.linkTarget(to: path)))
        }
        guard text.hasPrefix(BookmarkToken.prefix) else { throw DocfsError.system(ENOENT) }
        let key = try store.bookmarkKey()
        let bookmark: Bookmark
        do throws(BookmarkTokenProblem) {
            bookmark = try BookmarkToken.decode(text, key: key)
        } catch {
            throw DocfsError(.notFound, "bookmark token refused: \(error)")
        }
        guard let place = bookmark.place,
              viewPath(of: place) != nil || appContainer.flatMap({ existingReference(to: bookmark.item, in: $0) }) != nil else {
            throw notShown("the bookmark names an item of \(bookmark.container) (\(bookmark.scope))")
        }
        if let scope = bookmark.securityScope {
            try check(scope, usableBy: caller)
            if scope.readOnly {
                let (_, real) = try locate(bookmark.item, preferring: place)
                return try virtualEntry(.readOnlyView(real.key), .readOnlyView(real: real))
            }
        }
        let (path, _) = try locate(bookmark.item, preferring: place)
        return try virtualEntry(.itemLink(text), .itemLink(target: Self.linkTarget(to: path)))
    }

    /// A security scope is for whom it was issued to (`uid:N`; root may use any); one issued to
    /// an app is used through that app's view.
    private func check(_ scope: Bookmark.SecurityScope, usableBy caller: Caller) throws(DocfsError) {
        if scope.issuedTo.hasPrefix("uid:"), let uid = uid_t(scope.issuedTo.dropFirst(4)) {
            if caller.uid == uid || caller.uid == 0 { return }
            throw DocfsError(.denied, "the bookmark was issued to \(scope.issuedTo); uid \(caller.uid) may not use it")
        }
        if let app = appContainer, scope.issuedTo == app.rawValue { return }
        throw DocfsError(.denied, "the bookmark was issued to \(scope.issuedTo); only that app's view may use it (this is \(view))")
    }

    /// The error for an item this view does not show: in an app view a refusal (EACCES: the
    /// app was not granted it), in the user view nothing found (ENOENT).
    func notShown(_ what: String) -> DocfsError {
        if appContainer != nil { return DocfsError(.denied, "\(what), which \(view) may not reach") }
        return DocfsError(.notFound, "\(what), which this mount does not show")
    }

    /// The link from `.docfs/by-id/` to `path` (a path in the view, "/" its root).
    static func linkTarget(to path: String) -> FileName {
        FileName(path == "/" ? "../.." : "../.." + path)
    }

    /// Where the item is now, from the index (every write updates it before it returns), and a
    /// node of it there (not counted in the kernel's table); `recorded` is where the caller last
    /// saw it (an item with several hard links is found at that one if it still is).
    func locate(_ item: ItemID, preferring recorded: StorePlace? = nil) throws(DocfsError) -> (path: String, node: Node) {
        if item == root.item { return ("/", root) }
        guard let stitcher else {
            throw DocfsError(.notFound, "this mount keeps no index, so items cannot be found by id")
        }
        let places = try stitcher.index.records(id: Int64(bitPattern: item.rawValue)).compactMap { record -> StorePlace? in
            guard let container = try? ContainerID(record.container), let scope = Scope(rawValue: record.scope) else { return nil }
            return StorePlace(container: container, scope: scope, path: record.path)
        }
        let candidates = places.filter { $0 == recorded } + places.sorted { $0.description < $1.description }
        for place in candidates {
            guard let path = viewPath(of: place), let node = node(at: place), node.item == item else { continue }
            return (path, node)
        }
        // An app reaches another container's document through the reference it was granted:
        // the reference's path, the original's content.
        if let app = appContainer, let local = existingReference(to: item, in: app), let path = viewPath(of: local),
           let (_, original) = original(item) {
            return (path, original)
        }
        if let hidden = places.first, !places.contains(where: { viewPath(of: $0) != nil }) {
            throw notShown("item \(item) is in \(hidden.container) (\(hidden.scope.rawValue))")
        }
        throw DocfsError(.notFound, "item \(item) is gone: nothing in the store has that id")
    }

    /// A node of what is at `place`, reached one name at a time without following symbolic
    /// links (not counted in the kernel's table); nil when there is nothing there.
    func node(at place: StorePlace) -> Node? {
        let fd = paths.openPlace(place)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else {
            close(fd)
            return nil
        }
        let key = BackingKey(st)
        if let original = ReferenceStub.target(ofDescriptor: fd, st) {
            return Node(id: 0, fd: fd, key: key, type: S_IFREG, item: original, isReference: true)
        }
        let item = nodes.known(key: key)?.item ?? identity.item(of: fd, st)
        return Node(id: 0, fd: fd, key: key, type: st.st_mode & S_IFMT, item: item)
    }

    /// `.docfs/thumbnails/<item-id>.png`: the item's 1024-pixel thumbnail, when it has one.
    func thumbnailImageEntry(_ name: FileName) throws(DocfsError) -> Entry {
        let text = name.description
        guard text.hasSuffix(".png"), let item = ItemID(text: String(text.dropLast(4))) else { throw DocfsError.system(ENOENT) }
        let (_, image) = try locate(item)
        guard image.type == S_IFREG else { throw DocfsError.system(ENOENT) }
        return try virtualEntry(.thumbnailImage(item), .thumbnailImage(image: image))
    }

    func thumbnailImage(of image: Node) throws(DocfsError) -> [UInt8] {
        guard let png = thumbnail(.xxLarge, of: image) else { throw DocfsError.system(ENOENT) }
        return png
    }

    /// What `.docfs/thumbnails/` lists: a name for each item whose 1024-pixel thumbnail is made.
    func thumbnailImageNames() -> [FileName] {
        guard let store = thumbnailer?.store else { return [] }
        return store.items().sorted { $0.rawValue < $1.rawValue }.compactMap { item in
            guard let (file, fd) = store.open(item) else { return nil }
            close(fd)
            return file.parts[.xxLarge] == nil ? nil : FileName("\(item.rawValue).png")
        }
    }

    /// A name in a read-only view's folder: the same, read-only.
    func readOnlyEntry(_ name: FileName, in folder: Node) throws(DocfsError) -> Entry {
        guard folder.isDirectory else { throw DocfsError.system(ENOTDIR) }
        let fd = openat(folder.fd, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.system(Glibc.errno) }
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else {
            let e = Glibc.errno
            close(fd)
            throw DocfsError.system(e)
        }
        let key = BackingKey(st)
        let item = nodes.known(key: key)?.item ?? identity.item(of: fd, st)
        let real = Node(id: 0, fd: fd, key: key, type: st.st_mode & S_IFMT, item: item)
        return try virtualEntry(.readOnlyView(key), .readOnlyView(real: real))
    }
}
