import CLinux
import DocfsCore
import DocfsProvider
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The containers a mount shows as folders (DESIGN §2): in the user view, each public
/// container's `Documents/` appears at the root under the name `ContainerCatalog.shown`
/// gives it. The folders are the containers' own backing folders, so everything under them is
/// an ordinary part of the store.
///
/// It also knows each container's documents folder by its backing inode, for the attributes
/// a container's folder carries (`user.docfs.container`, `user.docfs.container-id`).
///
/// Lock order: `roots` is a leaf lock, held for a copy only.
package final class ContainerFolders: Sendable {
    package let catalog: ContainerCatalog
    private let layout: StoreLayout
    /// Each container's documents folder, by backing inode.
    private let roots = Mutex<[BackingKey: ContainerRecord]>([:])

    init(catalog: ContainerCatalog, layout: StoreLayout) {
        self.catalog = catalog
        self.layout = layout
        refreshRoots()
    }

    /// Reads the registry again; answers the names the root showed before and shows now (the
    /// kernel must forget what it cached of them).
    func reload(ownNames: (String) -> Bool) throws(DocfsError) -> Set<String> {
        let before = Set(catalog.shown(ownNames: ownNames).map(\.name))
        try catalog.reload()
        refreshRoots()
        return before.union(catalog.shown(ownNames: ownNames).map(\.name))
    }

    private func refreshRoots() {
        var found: [BackingKey: ContainerRecord] = [:]
        for record in catalog.all {
            guard let id = try? ContainerID(record.id) else { continue }
            var st = stat()
            if stat(layout.documentsDirectory(id), &st) == 0 { found[BackingKey(st)] = record }
        }
        roots.withLock { $0 = found }
    }

    /// Whether the root shows any container at all (most stores have none public).
    var isEmpty: Bool { catalog.publicContainers.isEmpty }

    /// The container whose documents folder `key` is, if any.
    func container(atRoot key: BackingKey) -> ContainerRecord? {
        roots.withLock { $0[key] }
    }
}
