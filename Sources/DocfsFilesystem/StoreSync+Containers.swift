import DocfsChunks
import DocfsCore
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
    /// Container items' ids: this bit set, under it 41 bits of the SHA-256 of the container's
    /// id. Above every machine's id space (`space << 41`, for fewer than 2^20 machines) and
    /// below derived ids (`ItemID.derivedBase`, 2^62).
    public static let containerItemBit: UInt64 = 1 << 61

    /// The item container `id` travels as, the same on every machine.
    public static func containerItem(_ id: ContainerID) -> UInt64 {
        let digest = Array(id.rawValue.utf8).withUnsafeBytes { ChunkDigest(of: $0) }
        let low = digest.hex.prefix(16).reduce(UInt64(0)) { $0 << 4 | UInt64($1.hexDigitValue ?? 0) }
        return containerItemBit | (low & ((1 << 41) - 1))
    }

    static func isContainerItem(_ item: UInt64) -> Bool { item >> 41 == containerItemBit >> 41 }

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
                var lastError: (any Error)?
                for name in [version.name, "\(version.name) (\(id.rawValue))"] {
                    do {
                        view.invalidate(try administration.create(id, name: name, isPublic: isPublic).1)
                        return
                    } catch {
                        lastError = error
                    }
                }
                throw StoreSyncError("container \(id.rawValue) could not be made here: \(lastError.map { "\($0)" } ?? "")")
            }
            if here.isPublic != isPublic { view.invalidate(try administration.setPublic(id, isPublic)) }
            guard here.name != version.name else { return }
            do {
                view.invalidate(try administration.rename(id, to: version.name))
            } catch {
                // Another container here has that name: this one takes its id along.
                view.invalidate(try administration.rename(id, to: "\(version.name) (\(id.rawValue))"))
            }
        }
        return .applied
    }
}
