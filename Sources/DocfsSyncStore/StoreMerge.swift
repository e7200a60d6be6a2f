import CLinux
import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import DocfsSync
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Linking a store with documents to a remote that holds another store's (issue 22 §1): each
/// store handed out its ids on its own, so the two stores' ids collide. Before anything goes
/// up, every item here takes an id the remote cannot mean otherwise:
/// - the remote item's at the same place, when both are folders (the trees merge, one folder
///   for both) or both files with the same content (nothing is duplicated): *adopted*, in step
///   with the remote's current version at once, not sent again;
/// - else a new id from this machine's id space; what differs at one place then goes up as a
///   create and is kept both ways by the engine's rules (§4: the later renamed).
/// Files and their other names, references' originals, kept versions and thumbnails follow
/// their items' new ids; the index is rebuilt. Done on a store no daemon serves: a mount's
/// nodes would keep the old ids. Bookmarks made here before do not verify after linking
/// anyway (the remote's signing key replaces this store's, `RemoteLinking.shareBookmarkKey`).
public struct StoreMerge {
    /// What a merge did.
    public struct Outcome: Sendable {
        /// Items that took a new id of this machine's space.
        public var renumbered = 0
        /// The remote's current versions of the items adopted here, by their ids.
        public var adopted: [UInt64: RemoteChange] = [:]
    }

    let shared: ServedStore
    let sync: StoreSync

    public init(shared: ServedStore, sync: StoreSync) {
        self.shared = shared
        self.sync = sync
    }

    /// Renumbers the store's items against `remoteItems` (the remote's listing: every item's
    /// current version), ids taken from the store's allocator (already in this machine's
    /// space), and records the adopted items as in step.
    public func merge(with remoteItems: [RemoteChange], progress: ((String) -> Void)? = nil) throws -> Outcome {
        let index = sync.index
        let records = try index.allRecords()
        let remotePlaces = Self.places(of: remoteItems)
        var outcome = Outcome()
        var renumbering: [UInt64: UInt64] = [:]
        // Folders before what they hold: a file is adopted only under a folder that is.
        let own = records.filter { ($0.scope == Scope.documents.rawValue || $0.scope == Scope.data.rawValue) && $0.id > 0
            && !ItemID(rawValue: UInt64(bitPattern: $0.id)).isDerived }
            .sorted { ($0.path.count, $0.path) < ($1.path.count, $1.path) }
        for record in own {
            let old = UInt64(bitPattern: record.id)
            guard renumbering[old] == nil else { continue }  // another name of a file renumbered already
            if let remote = remotePlaces["\(record.container)/\(record.scope)\(record.path)"], outcome.adopted[remote.version.item] == nil,
               try isSame(record, as: remote.version) {
                renumbering[old] = remote.version.item
                outcome.adopted[remote.version.item] = remote
            } else {
                renumbering[old] = try shared.store.itemIDs.allocate().rawValue
                outcome.renumbered += 1
            }
        }
        progress?("renumbering \(renumbering.count) items (\(outcome.adopted.count) the same as the remote's)")
        try renumberFiles(records, renumbering, adopted: outcome.adopted)
        try renumberKept(renumbering, directory: shared.store.layout.versionsDirectory, suffix: "")
        try renumberKept(renumbering, directory: shared.store.layout.thumbnailsDirectory, suffix: ".thumb")
        progress?("rebuilding the index")
        guard let view = shared.servedViews().first else { throw StoreSyncError("the store has no view to rebuild its index through") }
        _ = try IndexMaintenance(view: view).walk(.rebuild)
        for (item, remote) in outcome.adopted {
            try sync.setSyncState(ItemSyncState(version: remote.version, created: nil), of: item)
        }
        return outcome
    }

    /// Each current, not deleted item of the listing by its place ("container/scope/path").
    static func places(of listing: [RemoteChange]) -> [String: RemoteChange] {
        var byItem: [UInt64: RemoteChange] = [:]
        for change in listing where !change.version.deleted { byItem[change.version.item] = change }
        var paths: [UInt64: String] = [:]
        func path(_ item: UInt64, depth: Int) -> String? {
            if let known = paths[item] { return known }
            guard depth < 256, let version = byItem[item]?.version else { return nil }
            let folder = version.parent == 0 ? "" : path(version.parent, depth: depth + 1)
            guard let folder else { return nil }
            paths[item] = folder + "/" + version.name
            return paths[item]
        }
        var places: [String: RemoteChange] = [:]
        for (item, change) in byItem {
            guard let path = path(item, depth: 0) else { continue }
            places["\(change.version.container)/\(change.version.scope)\(path)"] = change
        }
        return places
    }

    /// Whether the item of `record` here is the remote's `version`: both folders, or both files
    /// with the same content (compared by size first, cut as for the remote only then).
    private func isSame(_ record: IndexRecord, as version: RemoteVersion) throws -> Bool {
        switch version.kind {
        case .folder: return record.kind == IndexRecord.folderKind
        case .file:
            guard record.kind == IndexRecord.fileKind, record.size == version.size else { return false }
            return try sync.current(UInt64(bitPattern: record.id))?.manifest == (version.chunks ?? [])
        case .symlink, .reference, .container: return false
        }
    }

    /// Every name of a renumbered item takes its new id (an adopted file the remote's version
    /// number, when that is higher); every reference names its original's new id.
    private func renumberFiles(_ records: [IndexRecord], _ renumbering: [UInt64: UInt64], adopted: [UInt64: RemoteChange]) throws {
        for record in records {
            guard let new = renumbering[UInt64(bitPattern: record.id)] else { continue }
            let place: StorePlace
            if record.isExternal {
                guard let own = Filesystem.ownPlace(ofReference: record) else { continue }
                place = own
            } else {
                guard let container = try? ContainerID(record.container), let scope = Scope(rawValue: record.scope) else { continue }
                place = StorePlace(container: container, scope: scope, path: record.path)
            }
            let located = try Located(place: place, paths: shared.paths)
            defer { located.close() }
            let fd = openat(located.folder, located.name.cString, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
            guard fd >= 0 else { throw StoreSyncError("cannot open \(Filesystem.localPath(place)) to renumber it: \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            if record.isExternal {
                try ReferenceStub.mark(fd, target: ItemID(rawValue: new))
                continue
            }
            _ = try ItemAttributes.setID(ItemID(rawValue: new), onDescriptor: fd)
            if let remote = adopted[new], remote.version.kind == .file, ItemAttributes.version(ofDescriptor: fd) < remote.version.number {
                try ItemAttributes.setVersion(remote.version.number, onDescriptor: fd)
            }
        }
    }

    /// Moves what `directory` keeps per item (`<id><suffix>`) to the items' new ids: aside
    /// first, then to the new names, as an old id may be another item's new one.
    private func renumberKept(_ renumbering: [UInt64: UInt64], directory: String, suffix: String) throws {
        var moved: [(aside: String, new: UInt64)] = []
        for (old, new) in renumbering where old != new {
            let aside = "\(directory)/.merging-\(old)\(suffix)"
            if rename("\(directory)/\(old)\(suffix)", aside) == 0 {
                moved.append((aside, new))
            } else if errno != ENOENT {
                throw StoreSyncError("cannot move what \(directory) keeps for item \(old): \(String(cString: strerror(errno)))")
            }
        }
        for (aside, new) in moved where rename(aside, "\(directory)/\(new)\(suffix)") != 0 {
            throw StoreSyncError("cannot move \(aside) to item \(new): \(String(cString: strerror(errno)))")
        }
    }
}
