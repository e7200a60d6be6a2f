import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// What the kernel must forget after a change docfs made itself, not through a request: the
/// names whose entries changed. Sent by whoever owns the kernel session (the bridge).
public struct KernelInvalidations: Sendable {
    public var entries: [(parent: NodeID, name: FileName)] = []
    /// Nodes whose attributes and pages changed.
    public var inodes: [NodeID] = []
    /// Nodes whose attributes alone changed.
    public var attributes: [NodeID] = []

    public init() {}

    /// Adds what `other` says to forget.
    public mutating func add(_ other: KernelInvalidations) {
        entries += other.entries
        inodes += other.inodes
        attributes += other.attributes
    }
}

/// Restoring a kept version (issue 3 §4): the version's content becomes the document's new
/// content as a replace, so it is atomic for readers (they see the old content or the new,
/// never a mix), the document keeps its id and attributes, and the restore is itself a new
/// version whose predecessor is kept.
extension Filesystem {
    /// Restores `version` of the document at `path` (relative to the mount root; or at `place`,
    /// for one the user view does not show), which must be item `item` (so a document renamed
    /// since the caller looked is not mistaken for another).
    public func restore(path: String, place: StorePlace? = nil, item: ItemID, version: UInt64,
                        caller: Caller) throws(DocfsError) -> KernelInvalidations {
        let (directory, name) = try openParent(of: path, place: place)
        defer { close(directory) }
        defer {
            // The name holds new content now: the other mounts look it up again.
            var folder = stat()
            if fstat(directory, &folder) == 0 { shared.changed(by: self, names: [(BackingKey(folder), name)]) }
        }
        var claims: [(ItemID, ClaimIntent)] = [(item, .replace)]
        if let folder = ItemAttributes.id(ofDescriptor: directory) { claims.append((folder, .write)) }
        return try coordinator.withClaims(claims) { () throws(DocfsError) -> KernelInvalidations in
            try restore(in: directory, name: name, path: path, item: item, version: version, caller: caller)
        }
    }

    private func restore(in directory: Int32, name: FileName, path: String, item: ItemID, version: UInt64,
                         caller: Caller) throws(DocfsError) -> KernelInvalidations {
        guard let document = replaceSide(inDirectory: directory, name: name) else {
            throw DocfsError(.invalidArgument, "\(path) is not a regular file with a single link: only those have versions")
        }
        defer { close(document.fd) }
        guard document.item == item else {
            throw DocfsError(.invalidArgument, "\(path) is no longer item \(item) (it was replaced or renamed meanwhile): look again")
        }
        guard store.versions.versions(of: item).contains(where: { $0.version == version }) else {
            throw DocfsError(.invalidArgument, "version \(version) of \(path) is not kept: see docfs versions for the ones that are")
        }
        let content = try store.versions.openContent(item, version: version, current: "/proc/self/fd/\(document.fd)")

        let working = try WorkingFile(prefix: ".docfs-restore-", in: directory, replacing: name, mode: document.st.st_mode,
                                      ownChanges: ownChanges, purpose: "restore \(path) into")
        defer { working.close() }
        let fd = working.fd
        let temporary = working.name
        do throws(DocfsError) {
            try content.copy(to: fd)
            try check(fchown(fd, document.st.st_uid, document.st.st_gid))
            try check(fchmod(fd, document.st.st_mode & 0o7777))  // chown cleared set-id bits
            var st = stat()
            try check(fstat(fd, &st))
            let restored = ReplaceSide(fd: fd, st: st, item: item)
            _ = try replace(document: document, with: restored, keepingOldAs: nil, caller: caller) { () throws(DocfsError) in
                try check(docfs_renameat2(directory, temporary.cString, directory, name.cString, 0))
            }
        } catch {
            unlinkat(directory, temporary.cString, 0)
            throw error
        }
        stitcher?.recordName(name, in: directory, item: item)
        if let folder = backingPath(of: directory) { contentChanged(atBackingPath: folder + "/" + name.description) }
        if presenters.isListened {
            present(.version, name, inFolder: directory, item: item, version: max(ItemAttributes.version(ofDescriptor: document.fd), 1) + 1)
        }
        var invalidations = KernelInvalidations()
        var st = stat()
        if fstat(directory, &st) == 0, let parent = nodes.known(key: BackingKey(st)) {
            invalidations.entries.append((parent.id, name))
        }
        return invalidations
    }

    /// Opens the folder holding `path` (relative to the mount root, no `..`; or `place`, when
    /// given) and names its last part.
    func openParent(of path: String, place: StorePlace? = nil) throws(DocfsError) -> (Int32, FileName) {
        if let place, let slash = place.path.lastIndex(of: "/") {
            let directory = paths.openPlace(StorePlace(container: place.container, scope: place.scope, path: String(place.path[..<slash])))
            guard directory >= 0 else { throw DocfsError(.system(.noSuchFileOrDirectory), "\(path) does not exist") }
            return (directory, FileName(String(place.path[place.path.index(after: slash)...])))
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let last = parts.last, !parts.contains(".."), !parts.contains(".") else {
            throw DocfsError(.invalidArgument, "\"\(path)\" does not name a document under the mount root")
        }
        let directory = openViewPath(parts.dropLast().joined(separator: "/"))
        guard directory >= 0 else { throw DocfsError(.system(.noSuchFileOrDirectory), "\(path) does not exist") }
        return (directory, FileName(last))
    }

    func copyAll(from source: Int32, to target: Int32) throws(DocfsError) {
        while true {
            let n = docfs_copy_file_range(source, nil, target, nil, 1 << 30, 0)
            if n < 0 {
                if errno == EINTR { continue }
                throw DocfsError.errno("copying the kept version")
            }
            if n == 0 { return }
        }
    }
}
