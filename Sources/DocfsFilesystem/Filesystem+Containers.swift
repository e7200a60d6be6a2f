import CLinux
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Public containers as folders at the user view's root (see `ContainerFolders`): looking them
/// up and listing them, refusing to remove, rename or replace them, and their attributes.
extension Filesystem {
    /// The container the root shows as `name` in `parent`, if `parent` is the root.
    func containerFolder(_ parent: NodeID, _ name: FileName) -> ContainerRecord? {
        guard parent == rootID, view == .user else { return nil }
        return userView.container(shownAs: name.description)
    }

    /// The entry of a container's documents folder, counting one lookup of it.
    func containerEntry(_ record: ContainerRecord) throws(DocfsError) -> Entry {
        let id = try ContainerID(record.id)
        let fd = Glibc.open(store.layout.documentsDirectory(id), DOCFS_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.system(ENOENT) }  // deleted meanwhile
        return try entry(of: fd)
    }

    /// Refuses to make `name` in `parent` while a container's folder shows under it (and
    /// anything at an app view's root).
    func refuseTakingContainerName(_ parent: NodeID, _ name: FileName) throws(DocfsError) {
        try refuseChangingAppRoot(parent, name)
        try refuseWorkingFileName(name)
        if let record = containerFolder(parent, name) {
            throw DocfsError(.system(.fileExists), "\(name) at the root is container \(record.id)'s folder")
        }
    }

    /// Refuses a new name that docfs keeps for its working files (`WorkingFileNames`): nobody
    /// would see the file, and a restart would remove it.
    func refuseWorkingFileName(_ name: FileName) throws(DocfsError) {
        if WorkingFileNames.contains(name) {
            throw DocfsError(.system(.notPermitted), "\(name): names beginning \(WorkingFileNames.prefixes.joined(separator: ", ")) are docfs's working files")
        }
    }

    /// Refuses to remove, rename or replace a container's folder (or anything at an app
    /// view's root).
    func refuseChangingContainerFolder(_ parent: NodeID, _ name: FileName) throws(DocfsError) {
        try refuseChangingAppRoot(parent, name)
        if let record = containerFolder(parent, name) {
            throw DocfsError(.system(.resourceBusy),
                             "\(name) at the root is container \(record.id)'s folder: rename it with docfs container rename, delete it with docfs container delete")
        }
    }

    /// The root's listing with the container folders in it (made when the root is opened).
    func rootListing() throws(DocfsError) -> DirectoryHandle {
        let dir = try Self.stream(of: root)
        defer { closedir(dir) }
        var entries: [(name: FileName, inode: UInt64, type: UInt8)] = []
        var own = Set<String>()
        while true {
            Glibc.errno = 0
            guard let raw = readdir(dir) else {
                if Glibc.errno != 0 { throw DocfsError.errno("readdir") }
                break
            }
            let entry = DirectoryHandle.entry(raw)
            if entry.name == "." || entry.name == ".." { continue }
            own.insert(entry.name.description)
            entries.append((entry.name, entry.inode, entry.type))
        }
        for (name, record) in containerFolders.catalog.shown(ownNames: own.contains) {
            guard let id = try? ContainerID(record.id) else { continue }
            var st = stat()
            guard lstat(store.layout.documentsDirectory(id), &st) == 0 else { continue }
            entries.append((FileName(name), UInt64(st.st_ino), UInt8(DT_DIR)))
        }
        return DirectoryHandle(listing: entries, inode: root.key.inode, virtualParent: rootID, node: root)
    }

    /// The value of a container folder's attribute `name` for `node`; nil when `node` is no
    /// container's folder or `name` is none of those attributes.
    func containerAttribute(_ name: String, of node: Node) -> String? {
        guard name == ItemAttributes.container || name == ItemAttributes.containerID, node.isDirectory,
              let record = containerFolders.container(atRoot: node.key) else { return nil }
        return name == ItemAttributes.container ? record.name : record.id
    }

    /// The container attributes `node` carries (none unless it is a container's folder).
    func containerAttributeNames(of node: Node) -> [String] {
        guard node.isDirectory, containerFolders.container(atRoot: node.key) != nil else { return [] }
        return [ItemAttributes.container, ItemAttributes.containerID]
    }

    // MARK: - Paths in the view

    /// This view's path of `place` ("/" for the root); nil when the view does not show it.
    func viewPath(of place: StorePlace) -> String? {
        guard let app = appContainer else { return userView.path(of: place) }
        guard place.container == app, let folder = StorePaths.scopeFolders.first(where: { $0.scope == place.scope }) else { return nil }
        return "/" + folder.name + place.path
    }

    /// Opens what the view shows at `path` (relative to the mount root, `/` separated; O_PATH,
    /// no symbolic link followed); -1 when nothing is there or the path has `.` or `..`.
    func openViewPath(_ path: String) -> Int32 {
        if path.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }) { return -1 }
        guard let app = appContainer else { return paths.openPlace(userView.place(of: path)) }
        guard let place = appPlace(of: path, in: app) else {
            return path.split(separator: "/").isEmpty ? dup(root.fd) : -1
        }
        return paths.openPlace(place)
    }
}
