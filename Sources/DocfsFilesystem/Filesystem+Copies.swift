import CLinux
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Copies made in the store behind docfs's back (`cp -a`, `rsync -X`, a file manager that keeps
/// extended attributes, a reference's empty file written into) carry the item id of the file
/// they copy. Two items never share an id: bookmarks, versions and the index must lead to one
/// document. So when
/// the store watcher sees such a file appear or be closed after writing, it gets an id of its
/// own and the file that had the id keeps it. A file whose id no other file carries keeps it
/// (moved in from outside the store, restored from a backup after its original was deleted), so
/// its bookmarks resolve again. A tool that restores a document by writing a temporary file and
/// renaming it over the document (rsync sets the attributes just before the rename) has renamed
/// it by the time the watcher's batch is looked at, so the document keeps its id.
extension Filesystem {
    /// Gives the file or folder at `path` (in the store) an id of its own when it carries the
    /// id of another that exists; with `andContents`, everything under it too (a folder that
    /// appeared: the watcher may not have seen the names made in it before it watched it).
    func separateCopies(atBackingPath path: String, andContents: Bool, into result: inout StoreChangeEffects) {
        var pending = [path]
        while let next = pending.popLast() {
            let fd = Glibc.open(FileName(next).cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { continue }
            let type = st.st_mode & S_IFMT
            guard type == S_IFREG || type == S_IFDIR else { continue }
            if andContents && type == S_IFDIR {
                let folder = Glibc.open(FileName(next).cString, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                if folder >= 0 {
                    pending += IndexRebuild.names(in: folder).map { next + "/" + $0.description }
                    close(folder)
                }
            }
            separateCopy(fd, st, at: next, into: &result)
        }
    }

    /// Separates the file `fd` (attributes `st`) at `path` when it is a copy, under a claim on
    /// the id it carries: a replace in progress (whose new content carries the document's id
    /// until it is renamed over the document) is over before the file is judged.
    private func separateCopy(_ fd: Int32, _ st: stat, at path: String, into result: inout StoreChangeEffects) {
        guard let id = ItemAttributes.id(ofDescriptor: fd), !id.isDerived, ReferenceStub.target(ofDescriptor: fd, st) == nil,
              otherHolder(of: id, than: st) != nil else { return }
        let separated = reporting("give the copy at \(path) an id of its own") { () throws(DocfsError) in
            try coordinator.withClaims([(id, .write)]) { () throws(DocfsError) -> (ItemID, String)? in
                var now = stat()
                guard fstat(fd, &now) == 0, now.st_nlink > 0, ItemAttributes.id(ofDescriptor: fd) == id,
                      let holder = otherHolder(of: id, than: now) else { return nil }
                let key = BackingKey(now)
                ownChanges.willWrite(key)
                var after: stat? = nil
                defer { ownChanges.abandon(key, now: after) }
                let fresh = try identity.allocator.allocate()
                try ItemAttributes.setID(fresh, onDescriptor: fd)
                // Written into, a reference's file is a document of its own: no reference any more.
                _ = docfs_removexattr("/proc/self/fd/\(fd)", ReferenceStub.attribute)
                if fstat(fd, &now) == 0 { after = now }
                if let node = nodes.known(key: key) { result.invalidations.add(letGo(node)) }
                return (fresh, holder)
            }
        }
        guard let (fresh, holder) = separated ?? nil else { return }
        forgetStaleNode(of: BackingKey(st), carrying: fresh)
        result.notices.append("\(path) is a copy of \(holder), made behind docfs's back with its item id \(id): it is item \(fresh) now")
    }

    /// A lookup that read the copy's old id just before it changed may have made a node of it
    /// just after: looked for again a moment later, such a node is let go too.
    private func forgetStaleNode(of key: BackingKey, carrying fresh: ItemID) {
        DetachedThread.start { [self] in
            usleep(100_000)
            guard let node = nodes.known(key: key), node.item != fresh else { return }
            invalidate(letGo(node))
        }
    }

    /// Lets the node of a separated copy go (the next lookup makes one with its new id): what
    /// the kernel must forget of it.
    private func letGo(_ node: Node) -> KernelInvalidations {
        var forget = KernelInvalidations()
        forget.inodes = [node.id]
        if let place = node.place, let parent = nodes.known(key: place.directory) { forget.entries = [(parent.id, place.name)] }
        nodes.detach(key: node.key)
        return forget
    }

    /// The store path of a file other than the one in state `st` that carries `id` and is no
    /// reference, as the index knows where the item is; nil when there is none.
    private func otherHolder(of id: ItemID, than st: stat) -> String? {
        guard let stitcher, let records = try? stitcher.index.records(id: Int64(bitPattern: id.rawValue)) else { return nil }
        for record in records where record.scope != Scope.external.rawValue {
            guard let container = try? ContainerID(record.container), let scope = Scope(rawValue: record.scope) else { continue }
            let place = StorePlace(container: container, scope: scope, path: record.path)
            let fd = paths.openPlace(place)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var other = stat()
            guard fstat(fd, &other) == 0, BackingKey(other) != BackingKey(st), ItemAttributes.id(ofDescriptor: fd) == id,
                  ReferenceStub.target(ofDescriptor: fd, other) == nil else { continue }
            return userView.path(of: place) ?? "\(place.container) \(Self.localPath(place))"
        }
        return nil
    }
}
