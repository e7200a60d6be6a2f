import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The layout of the user view (a plain `docfs mount`, DESIGN §2) as paths: the root is the
/// default container's documents scope, and each public container's documents scope is a
/// folder at the root named as `ContainerCatalog.shown` says. The mount and the command line
/// both translate between a path in the view and a place in the store with it.
public struct UserView: Sendable {
    public let layout: StoreLayout
    public let catalog: ContainerCatalog

    public init(layout: StoreLayout, catalog: ContainerCatalog) {
        self.layout = layout
        self.catalog = catalog
    }

    /// Whether the user's own documents hold `name` at the root.
    public func rootHolds(_ name: String) -> Bool {
        var st = stat()
        return lstat(layout.documentsDirectory(.userDefault) + "/" + name, &st) == 0
    }

    /// The folders the root shows for public containers.
    public func containerFolders() -> [(name: String, record: ContainerRecord)] {
        catalog.shown(ownNames: rootHolds)
    }

    /// The container the root shows as `name` (none when the user's own entry has it).
    public func container(shownAs name: String) -> ContainerRecord? {
        guard !catalog.publicContainers.isEmpty, !rootHolds(name) else { return nil }
        return containerFolders().first { $0.name == name }?.record
    }

    /// The view's path of `place` ("/" for the root); nil when the view does not show it.
    public func path(of place: StorePlace) -> String? {
        if place.container == .userDefault && place.scope == .documents { return place.path.isEmpty ? "/" : place.path }
        guard place.scope == .documents, !catalog.publicContainers.isEmpty,
              let folder = containerFolders().first(where: { $0.record.id == place.container.rawValue }) else { return nil }
        return "/" + folder.name + place.path
    }

    /// The place the view shows at `path` (relative to the root, `/` separated; "" or "/" is
    /// the root). Names are not checked to exist, except the first, which says where it is.
    public func place(of path: String) -> StorePlace {
        let parts = path.split(separator: "/").map(String.init)
        if let first = parts.first, let record = container(shownAs: first), let id = try? ContainerID(record.id) {
            let rest = parts.dropFirst()
            return StorePlace(container: id, scope: .documents, path: rest.isEmpty ? "" : "/" + rest.joined(separator: "/"))
        }
        return StorePlace(container: .userDefault, scope: .documents, path: parts.isEmpty ? "" : "/" + parts.joined(separator: "/"))
    }
}
