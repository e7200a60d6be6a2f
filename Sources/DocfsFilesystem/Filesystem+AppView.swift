import CLinux
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// App views (issue 6 §2, DESIGN §2): `docfs mount --app ID` shows exactly that container —
/// `Documents/` (its documents scope) and `Data/` (its data scope) at the root, which holds
/// nothing else — and nothing else is reachable through it. Every attempt to reach beyond it is
/// refused with the errno a permission check gives (EACCES), or EPERM for a hard link to what
/// the app does not own (as ext4 with protected_hardlinks), and logged; crossing to another
/// mount is refused by the kernel itself (EXDEV).
extension Filesystem {
    /// The names an app view's root shows.
    static let appRootNames: [FileName] = StorePaths.scopeFolders.map { FileName($0.name) }

    /// The container an app view shows; nil for the user view.
    public var appContainer: ContainerID? {
        if case .app(let id) = view { return id }
        return nil
    }

    /// A lookup at an app view's root: `Documents` and `Data` only.
    func appRootEntry(_ name: FileName) throws(DocfsError) -> Entry {
        if name == ".." {
            throw DocfsError(.system(.permissionDenied), "\(view): nothing above the root may be reached")
        }
        guard Self.appRootNames.contains(name) else { throw DocfsError.system(ENOENT) }
        return try entry(in: root, name: name)
    }

    /// An app view's root, listed.
    func appRootListing() -> DirectoryHandle {
        let entries = Self.appRootNames.compactMap { name -> (name: FileName, inode: UInt64, type: UInt8)? in
            let fd = openat(root.fd, name.cString, DOCFS_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { return nil }
            return (name, UInt64(st.st_ino), UInt8(DT_DIR))
        }
        return DirectoryHandle(listing: entries, inode: root.key.inode, virtualParent: rootID, node: root)
    }

    /// Refuses to make, remove or rename anything at an app view's root.
    func refuseChangingAppRoot(_ parent: NodeID, _ name: FileName) throws(DocfsError) {
        guard parent == rootID, appContainer != nil else { return }
        throw DocfsError(.system(.permissionDenied), "\(view): its root holds only Documents and Data (refused: \(name))")
    }

    /// Refuses a symbolic link at `name` in `folder` whose target leads out of the app view.
    func refuseEscapingLink(_ target: FileName, in folder: Node, name: FileName) throws(DocfsError) {
        guard appContainer != nil, Self.escapes(target.description, fromDepth: depth(of: folder)) else { return }
        throw DocfsError(.system(.permissionDenied), "\(view): a symbolic link to \(target) would lead out of it (refused: \(name))")
    }

    /// Refuses to read a symbolic link of an app view that leads out of it (one made behind
    /// docfs's back, or through the user view).
    func refuseEscapingTarget(_ target: FileName, of link: Node) throws(DocfsError) {
        guard appContainer != nil, let place = paths.place(of: link.fd) else { return }
        let folderDepth = place.path.split(separator: "/").count  // the link's folder: one less than the link, plus the scope folder
        guard Self.escapes(target.description, fromDepth: folderDepth) else { return }
        throw DocfsError(.system(.permissionDenied), "\(view): the symbolic link \(place.path) leads out of it to \(target)")
    }

    /// How deep `folder` is below the view's root (the root 0, `Documents` 1).
    private func depth(of folder: Node) -> Int {
        if folder.key == root.key { return 0 }
        guard let place = paths.place(of: folder.fd) else { return 0 }
        return 1 + place.path.split(separator: "/").count
    }

    /// Whether a link target, followed from a folder `depth` levels below the root, leaves it:
    /// an absolute target always does; a relative one when its `..`s climb above the root.
    static func escapes(_ target: String, fromDepth depth: Int) -> Bool {
        if target.hasPrefix("/") { return true }
        var level = depth
        for part in target.split(separator: "/", omittingEmptySubsequences: true) {
            switch part {
            case ".": continue
            case "..":
                level -= 1
                if level < 0 { return true }
            default: level += 1
            }
        }
        return false
    }

    /// The place an app view's path names (`/Documents/a` → the documents scope's `/a`); nil
    /// for its root and for paths it does not show.
    func appPlace(of path: String, in id: ContainerID) -> StorePlace? {
        let parts = path.split(separator: "/").map(String.init)
        guard let first = parts.first, let scope = StorePaths.scopeFolders.first(where: { $0.name == first })?.scope else { return nil }
        let rest = parts.dropFirst()
        return StorePlace(container: id, scope: scope, path: rest.isEmpty ? "" : "/" + rest.joined(separator: "/"))
    }
}
