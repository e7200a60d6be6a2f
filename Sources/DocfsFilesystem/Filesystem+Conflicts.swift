import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Races (C4): a write session through the mount, and an uncoordinated writer who replaced or
/// removed the file in the store meanwhile. Neither content is discarded. The session's, saved
/// last, stays the document's current content (same item id, a new version); the other writer's
/// becomes a *conflict version*, kept until resolved, and the document carries
/// `user.docfs.conflict` = `1`. A session that changed nothing simply lets the other writer's
/// content stand.
extension Filesystem {
    package static let conflictAttribute = "user.docfs.conflict"

    /// The raced session on `ours` ended having changed it: puts its content back in place and
    /// keeps the other writer's as a conflict version.
    func keepBoth(_ ours: Node, caller: Caller) {
        guard let place = ours.place, let folder = nodes.known(key: place.directory) else { return }
        let item = ours.item
        // The other views' kernels forget the name (it holds the put-back file now) and the
        // file the session wrote.
        let touched = TouchedPlaces(names: [(folder.key, place.name)], files: [ours.key])
        let effects = reporting("put the raced save of item \(item) back in place at \(place.name)") { () throws(DocfsError) in
            try changing([(folder.item, .write), (item, .replace)], touching: touched) { () throws(DocfsError) in
                try putBack(ours, at: place.name, in: folder, caller: caller)
            }
        }
        if let effects { invalidate(effects) }
    }

    private func putBack(_ ours: Node, at name: FileName, in folder: Node,
                         caller: Caller) throws(DocfsError) -> (KernelInvalidations, [ChangeRecord]) {
        let item = ours.item
        sessions.keptElsewhere(item)
        var version = store.versions.nextSaveNumber(of: item, after: max(ItemAttributes.version(ofDescriptor: ours.fd), 1))
        let theirs = replaceSide(in: folder, name: name)
        defer { if let theirs { close(theirs.fd) } }
        if let theirs {
            let record = VersionRecord(version: version, kind: .conflict, modified: WriteSessions.seconds(theirs.st.st_mtim),
                                       kept: WriteSessions.now(), size: Int64(theirs.st.st_size), author: nil)
            try store.versions.keepFile(theirs.fd, item: item, record: record)
            nodes.known(key: BackingKey(theirs.st))?.markSuperseded()
            version = store.versions.nextSaveNumber(of: item, after: version)
        }
        var st = stat()
        try check(fstatat(ours.fd, "", &st, DOCFS_AT_EMPTY_PATH))
        let working = try WorkingFile(prefix: ".docfs-conflict-", in: folder.fd, replacing: name, mode: st.st_mode,
                                      ownChanges: ownChanges, purpose: "put a raced save back into")
        defer { working.close() }
        let fd = working.fd
        let temporary = working.name
        do throws(DocfsError) {
            let source = Glibc.open("/proc/self/fd/\(ours.fd)", O_RDONLY | O_CLOEXEC)
            guard source >= 0 else { throw DocfsError.errno("reading the raced save") }
            defer { close(source) }
            try copyAll(from: source, to: fd)
            try check(fchown(fd, st.st_uid, st.st_gid))
            try check(fchmod(fd, st.st_mode & 0o7777))
            for attribute in ExtendedAttributeCopy.userNames(of: ours.fd) {
                ExtendedAttributeCopy.copyIfMissing(attribute, from: ours.fd, to: fd)
            }
            try ItemAttributes.setID(item, onDescriptor: fd)
            try ItemAttributes.setVersion(version, onDescriptor: fd)
            if theirs != nil { try check(docfs_fd_setxattr(fd, Self.conflictAttribute, "1", 1, 0)) }
            try check(docfs_renameat2(folder.fd, temporary.cString, folder.fd, name.cString, 0))
        } catch {
            unlinkat(folder.fd, temporary.cString, 0)
            throw error
        }
        sessions.noteAuthor(of: item, version: version, caller: caller)
        var invalidations = KernelInvalidations()
        invalidations.entries.append((folder.id, name))
        return (invalidations, [.name(.newVersion(version, conflict: theirs != nil), name, in: folder, item: item)])
    }
}
