/// The three scopes a container's items fall in (DESIGN §1): what the user sees, the app's own
/// data, and references to documents of other containers.
public enum Scope: String, Sendable, CaseIterable, Codable {
    case documents, data, external
}

/// Where an item is in the store: a path (starting with `/`, "" for the scope's root folder)
/// in one scope of one container. Views (the user view, an app view) show places under paths
/// of their own; the index and bookmarks name items by place.
public struct StorePlace: Hashable, Sendable, CustomStringConvertible {
    public var container: ContainerID
    public var scope: Scope
    public var path: String

    public init(container: ContainerID, scope: Scope, path: String) {
        self.container = container
        self.scope = scope
        self.path = path
    }

    /// The place of `name` in the folder at this place.
    public func appending(_ name: String) -> StorePlace {
        StorePlace(container: container, scope: scope, path: path + "/" + name)
    }

    /// Whether this is the root folder of its scope (which has no index record).
    public var isScopeRoot: Bool { path.isEmpty }

    public var description: String { "\(container) (\(scope.rawValue)) \(path.isEmpty ? "/" : path)" }
}
