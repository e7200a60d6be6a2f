import DocfsCore
import DocfsProvider

/// Creating, renaming and deleting containers while the store is served (issue 9): the
/// registry changes, the index follows, and the view's root shows the change at once. Not a
/// filesystem operation: the daemon's control socket asks for it.
public struct ContainerAdministration: Sendable {
    /// The user view whose root shows the containers.
    let view: Filesystem

    public init(view: Filesystem) {
        self.view = view
    }

    /// Makes container `id` (see `ContainerRegistry.create`); the root shows it at once when
    /// it is public.
    public func create(_ id: ContainerID, name: String, isPublic: Bool) throws(DocfsError) -> (ContainerRecord, KernelInvalidations) {
        let record = try view.containerFolders.catalog.registry.create(id, name: name, isPublic: isPublic)
        let invalidations = try containersChanged()
        DeliveryScope.within(.containers) { view.deliver(.container(id, deleted: false)) }
        return (record, invalidations)
    }

    /// Gives container `id` another display name: its folder in the root takes it, and so do
    /// its index records.
    public func rename(_ id: ContainerID, to name: String) throws(DocfsError) -> KernelInvalidations {
        try view.containerFolders.catalog.registry.rename(id, to: name)
        let invalidations = try containersChanged()
        DeliveryScope.within(.containers) { view.deliver(.container(id, deleted: false)) }
        return invalidations
    }

    /// Shows container `id` in the root, or stops showing it.
    public func setPublic(_ id: ContainerID, _ isPublic: Bool) throws(DocfsError) -> KernelInvalidations {
        try view.containerFolders.catalog.registry.setPublic(id, isPublic)
        let invalidations = try containersChanged()
        DeliveryScope.within(.containers) { view.deliver(.container(id, deleted: false)) }
        return invalidations
    }

    /// Deletes container `id` (see `ContainerRegistry.delete`) and its index records.
    public func delete(_ id: ContainerID, force: Bool) throws(DocfsError) -> KernelInvalidations {
        try view.containerFolders.catalog.registry.delete(id, force: force)
        DeliveryScope.within(.containers) { view.deliver(.container(id, deleted: true)) }
        return try containersChanged()
    }

    /// The registry was read again: the answer says which names at the root the kernel must
    /// forget (those the containers showed under before and now).
    func containersChanged() throws(DocfsError) -> KernelInvalidations {
        let names = try view.containerFolders.reload(ownNames: view.userView.rootHolds)
        var invalidations = KernelInvalidations()
        invalidations.entries = names.sorted().map { (rootID, FileName($0)) }
        invalidations.inodes = [rootID]
        return invalidations
    }
}
