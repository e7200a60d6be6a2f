import DocfsCore
import Synchronization

/// The containers a serving daemon knows, read from the registry once and again whenever a
/// container changes (`reload`), so the per-operation questions — a container's display name
/// for an index record, the public containers the user view shows — cost no file reads. A
/// damaged record leaves the container out (its id still names it) until it is fixed.
///
/// Lock order: `records` is a leaf lock, held for a copy only.
public final class ContainerCatalog: Sendable {
    public let registry: ContainerRegistry
    private let records = Mutex<[ContainerRecord]>([ContainerRegistry.defaultRecord])

    public init(registry: ContainerRegistry) {
        self.registry = registry
        try? reload()
    }

    /// Reads the registry again.
    public func reload() throws(DocfsError) {
        let fresh = try registry.list()
        records.withLock { $0 = fresh }
    }

    /// Every container, the default one first.
    public var all: [ContainerRecord] { records.withLock { $0 } }

    /// The containers whose documents the user view shows.
    public var publicContainers: [ContainerRecord] { all.filter(\.isPublic) }

    /// The record of `id`, if the container exists.
    public func record(of id: ContainerID) -> ContainerRecord? {
        records.withLock { $0.first { $0.id == id.rawValue } }
    }

    /// The name people see for container `id` (its id's last part while it has no record).
    public func displayName(of id: ContainerID) -> String {
        record(of: id)?.name ?? id.displayName
    }

    /// The folders the user view's root shows for public containers, given which names the
    /// user's own entries at the root take (`ownNames`). The user's own files keep their
    /// names: a container whose display name one of them has appears as `Name (container-id)`
    /// instead, and not at all while that name is taken too.
    public func shown(ownNames: (String) -> Bool) -> [(name: String, record: ContainerRecord)] {
        publicContainers.compactMap { record in
            if !ownNames(record.name) { return (record.name, record) }
            let qualified = "\(record.name) (\(record.id))"
            return ownNames(qualified) ? nil : (qualified, record)
        }
    }
}
