import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Restoring a kept version (issue 3 §4): the version's content becomes the document's new
/// content as a replace, so it is atomic for readers (they see the old content or the new,
/// never a mix), the document keeps its id and attributes, and the restore is itself a new
/// version whose predecessor is kept. Resolving a conflict (C4) too. Not filesystem operations:
/// `docfs versions --restore|--resolve` ask for them through the daemon's control socket.
public struct DocumentRestorer: Sendable {
    /// The view whose claims, replace and consumers a restore uses.
    let view: Filesystem

    public init(view: Filesystem) {
        self.view = view
    }

    /// Restores `version` of the document at `path` (relative to the mount root; or at `place`,
    /// for one the user view does not show), which must be item `item` (so a document renamed
    /// since the caller looked is not mistaken for another).
    public func restore(path: String, place: StorePlace? = nil, item: ItemID, version: UInt64,
                        caller: Caller) throws(DocfsError) -> KernelInvalidations {
        let (directory, name) = try view.openParent(of: path, place: place)
        defer { close(directory) }
        var claims: [(ItemID, ClaimIntent)] = [(item, .replace)]
        if let folder = ItemAttributes.id(ofDescriptor: directory) { claims.append((folder, .write)) }
        // The name holds new content now: the other mounts look it up again.
        return try view.changing(claims, touching: Self.name(name, in: directory), by: caller) { () throws(DocfsError) in
            try restore(in: directory, name: name, path: path, item: item, version: version, caller: caller)
        }
    }

    /// The name `name` in the folder `directory` (a descriptor), for the other views to forget.
    private static func name(_ name: FileName, in directory: Int32) -> TouchedPlaces {
        var folder = stat()
        return fstat(directory, &folder) == 0 ? TouchedPlaces(names: [(BackingKey(folder), name)]) : TouchedPlaces()
    }

    private func restore(in directory: Int32, name: FileName, path: String, item: ItemID, version: UInt64,
                         caller: Caller) throws(DocfsError) -> (KernelInvalidations, [ChangeRecord]) {
        guard let document = view.replaceSide(inDirectory: directory, name: name) else {
            throw DocfsError(.invalidArgument, "\(path) is not a regular file with a single link: only those have versions")
        }
        defer { close(document.fd) }
        guard document.item == item else {
            throw DocfsError(.invalidArgument, "\(path) is no longer item \(item) (it was replaced or renamed meanwhile): look again")
        }
        guard view.store.versions.versions(of: item).contains(where: { $0.version == version }) else {
            throw DocfsError(.invalidArgument, "version \(version) of \(path) is not kept: see docfs versions for the ones that are")
        }
        let content = try view.store.versions.openContent(item, version: version, current: "/proc/self/fd/\(document.fd)")

        let working = try WorkingFile(prefix: ".docfs-restore-", in: directory, replacing: name, mode: document.st.st_mode,
                                      ownChanges: view.ownChanges, purpose: "restore \(path) into")
        defer { working.close() }
        let fd = working.fd
        let temporary = working.name
        do throws(DocfsError) {
            try content.copy(to: fd)
            try check(fchown(fd, document.st.st_uid, document.st.st_gid))
            try check(fchmod(fd, document.st.st_mode & 0o7777))  // chown cleared set-id bits
            var st = stat()
            try check(fstat(fd, &st))
            let restored = Filesystem.ReplaceSide(fd: fd, st: st, item: item)
            _ = try view.replace(document: document, with: restored, keepingOldAs: nil, caller: caller) { () throws(DocfsError) in
                try check(docfs_renameat2(directory, temporary.cString, directory, name.cString, 0))
            }
        } catch {
            unlinkat(directory, temporary.cString, 0)
            throw error
        }
        let version = view.store.versions.nextSaveNumber(of: item, after: max(ItemAttributes.version(ofDescriptor: document.fd), 1))
        var restored = ChangeRecord.name(.newVersion(version, conflict: false), name, inFolder: directory, item: item)
        restored.version = version
        var invalidations = KernelInvalidations()
        var st = stat()
        if fstat(directory, &st) == 0, let parent = view.nodes.known(key: BackingKey(st)) {
            invalidations.entries.append((parent.id, name))
        }
        return (invalidations, [restored])
    }

    /// Clears the conflict of the document at `path`: its conflict versions are dropped; with
    /// `keep`, that version first becomes the current content (a restore).
    public func resolveConflict(path: String, place: StorePlace? = nil, item: ItemID, keep: UInt64?,
                                caller: Caller) throws(DocfsError) -> KernelInvalidations {
        var invalidations = KernelInvalidations()
        if let keep { invalidations = try restore(path: path, place: place, item: item, version: keep, caller: caller) }
        let (directory, name) = try view.openParent(of: path, place: place)
        defer { close(directory) }
        // Attributes only (user.docfs.conflict): the other views' kernels cache none.
        try view.changing([(item, .metadata)], touching: TouchedPlaces(), by: caller) { () throws(DocfsError) -> ((), [ChangeRecord]) in
            guard let document = view.replaceSide(inDirectory: directory, name: name), document.item == item else {
                throw DocfsError(.invalidArgument, "\(path) is no longer item \(item): look again")
            }
            defer { close(document.fd) }
            for record in view.store.versions.versions(of: item) where record.kind == .conflict {
                view.store.versions.remove(item, version: record.version)
            }
            let path = "/proc/self/fd/\(document.fd)"
            if docfs_removexattr(path, Filesystem.conflictAttribute) != 0 && errno != ENODATA {
                throw DocfsError.errno("clearing \(Filesystem.conflictAttribute)")
            }
            return ((), [.name(.attributes, name, inFolder: directory, item: item)])
        }
        view.shared.conflictResolved(item)
        return invalidations
    }
}
