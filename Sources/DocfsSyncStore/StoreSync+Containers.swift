import DocfsChunks
import DocfsCore
import DocfsFilesystem
import DocfsProvider
import DocfsSync

/// Containers as items of their own (issue 22 §2: "containers and their display names"): a
/// container's display name and visibility travel as versions of an item whose id every
/// machine derives from the container's id (`containerItem`), so a rename on one machine
/// renames it on all, and two renames race by the remote's commit order like any item's.
/// Made, renamed or deleted here, the container's item enters the outbox (`IndexStitcher`);
/// documents carry their container's name too, but only for a machine that has not got the
/// container yet.
extension StoreSync {
    /// Container items' ids (`ContainerItems`): above every machine's id space (`space << 41`,
    /// for fewer than 2^20 machines) and below derived ids (`ItemID.derivedBase`, 2^62).
    public static var containerItemBit: UInt64 { ContainerItems.bit }

    /// The item container `id` travels as, the same on every machine.
    public static func containerItem(_ id: ContainerID) -> UInt64 { ContainerItems.item(of: id) }

    static func isContainerItem(_ item: UInt64) -> Bool { ContainerItems.isContainer(item) }

    /// The container here whose item `item` is; nil when there is none (gone, or not made yet).
    func container(ofItem item: UInt64) -> ContainerRecord? {
        let registry = shared.containerFolders.catalog.registry
        return (try? registry.list())?.first { record in
            guard let id = try? ContainerID(record.id), id != .userDefault else { return false }
            return Self.containerItem(id) == item
        }
    }

    /// The items of every container here but the user's own (linking sends them up).
    func containerItems() -> [UInt64] {
        ((try? shared.containerFolders.catalog.registry.list()) ?? []).compactMap { record in
            guard let id = try? ContainerID(record.id), id != .userDefault else { return nil }
            return Self.containerItem(id)
        }
    }

    /// Container item `item` as it is here.
    func currentContainer(_ item: UInt64) -> LocalItem? {
        guard let record = container(ofItem: item) else { return nil }
        return LocalItem(item: item, container: record.id, scope: "", parent: 0, name: record.name, kind: .container,
                         manifest: [], size: 0, mode: record.isPublic ? containerPublicMode : 0, modified: 0)
    }

    /// Applies another machine's version of a container item: the container is made, renamed
    /// or made public or private as it says, or deleted when it holds nothing here (a deletion
    /// of one still holding documents is parked and tried again: their own deletions come as
    /// their items', and a document edited here meanwhile keeps its container).
    func applyContainer(_ version: RemoteVersion, expecting expected: ApplyExpectation) throws -> ApplyOutcome {
        guard let view = shared.servedViews().first else {
            throw StoreSyncError("the store has no view to apply remote changes through")
        }
        guard let id = try? ContainerID(version.container), id != .userDefault, Self.containerItem(id) == version.item else {
            throw StoreSyncError("item \(version.item) is no container's item (\(version.container))")
        }
        guard expected.isMet(by: currentContainer(version.item)) else { return .changedHere }
        let administration = ContainerAdministration(view: view)
        let registry = shared.containerFolders.catalog.registry
        try RemoteApplication.$machine.withValue(version.author.machine) { () throws in
            let here = try registry.record(of: id)
            if version.deleted {
                guard here != nil else { return }
                do {
                    view.invalidate(try administration.delete(id, force: false))
                } catch {
                    // Parked, tried again later: by then their own deletions came.
                    throw StoreSyncError("container \(id.rawValue) was deleted on \(version.author.machine) but still holds documents here: it goes once they do")
                }
                return
            }
            let isPublic = version.mode & containerPublicMode != 0
            guard let here else {
                return try makeContainer(id, named: version.name, isPublic: isPublic, view: view)
            }
            if here.isPublic != isPublic { view.invalidate(try administration.setPublic(id, isPublic)) }
            guard here.name != version.name else { return }
            try Self.underNameOrWithID(version.name, id) { name throws(DocfsError) in
                view.invalidate(try administration.rename(id, to: name))
            }
        }
        return .applied
    }

    /// A version in a container this machine does not have: the container is made, under the
    /// display name the version carries, as another machine's change.
    func makeContainerIfMissing(for version: RemoteVersion, view: Filesystem) throws {
        guard let id = try? ContainerID(version.container), id != .userDefault,
              try shared.containerFolders.catalog.registry.record(of: id) == nil else { return }
        let wanted = version.containerName ?? String(id.rawValue.split(separator: ".").last ?? Substring(id.rawValue))
        try RemoteApplication.$machine.withValue(version.author.machine) {
            try makeContainer(id, named: wanted, isPublic: version.containerPublic ?? false, view: view)
        }
    }

    /// Makes container `id` named `name` (see `underNameOrWithID`).
    private func makeContainer(_ id: ContainerID, named name: String, isPublic: Bool, view: Filesystem) throws {
        do {
            try Self.underNameOrWithID(name, id) { name throws(DocfsError) in
                view.invalidate(try ContainerAdministration(view: view).create(id, name: name, isPublic: isPublic).1)
            }
        } catch {
            throw StoreSyncError("container \(id.rawValue) could not be made here: \(error)")
        }
    }

    /// Runs `body` with `name`, and when that fails (another container here has the name) with
    /// the name and the container's id, `Name (com.example.id)`.
    private static func underNameOrWithID(_ name: String, _ id: ContainerID,
                                          _ body: (String) throws(DocfsError) -> Void) throws(DocfsError) {
        do {
            try body(name)
        } catch {
            try body("\(name) (\(id.rawValue))")
        }
    }
}
