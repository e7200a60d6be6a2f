import DocfsCore
import DocfsThumbnails
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A file or folder docfs shows that the store does not hold: the control area (`.docfs/`),
/// a folder's shared thumbnail repository (`.sh_thumbnails/`), read-only views of what a
/// read-only bookmark token names, and an app's key files.
enum VirtualNode: Sendable {
    /// `/.docfs`
    case controlArea
    /// `/.docfs/by-id`
    case byID
    /// `/.docfs/thumbnails`
    case thumbnails
    /// `/.docfs/by-id/<id or token>`: a symbolic link to where the item is now.
    case itemLink(target: FileName)
    /// `/.docfs/thumbnails/<id>.png`: the 1024-pixel thumbnail of the file `image`.
    case thumbnailImage(image: Node)
    /// `<folder>/.sh_thumbnails`
    case sharedRepository(folder: Node)
    /// `<folder>/.sh_thumbnails/<size>`
    case sharedSize(folder: Node, size: ThumbnailSize)
    /// `<folder>/.sh_thumbnails/<size>/<md5>.png`: the thumbnail of `image`, with the text
    /// chunks a shared repository's thumbnails carry (its URI is `uri`).
    case sharedThumbnail(image: Node, size: ThumbnailSize, uri: String)
    /// What a read-only bookmark token names, and everything under it: `real` read-only.
    case readOnlyView(real: Node)
    /// `/.docfs/kv` of an app view: a file per key of the app's key-value store.
    case keyValues(container: ContainerID)
    /// `/.docfs/kv/<key>`: the key's value; written, it sets the value at close.
    case keyValue(container: ContainerID, key: String)

    var isDirectory: Bool {
        switch self {
        case .controlArea, .byID, .thumbnails, .sharedRepository, .sharedSize, .keyValues: true
        case .readOnlyView(let real): real.isDirectory
        case .itemLink, .thumbnailImage, .sharedThumbnail, .keyValue: false
        }
    }
}

/// What makes two lookups of docfs's own the same node (so its inode number stays put).
enum VirtualKey: Hashable, Sendable {
    case controlArea, byID, thumbnails, keyValues
    case itemLink(String)
    /// A key file, by its name's bytes (two spellings of one accented name are two keys).
    case keyValue([UInt8])
    case thumbnailImage(ItemID)
    case sharedRepository(BackingKey)
    case sharedSize(BackingKey, ThumbnailSize)
    case sharedThumbnail(folder: BackingKey, size: ThumbnailSize, name: String)
    case readOnlyView(BackingKey)
}

/// The virtual nodes the kernel knows, with their lookup counts, numbered apart from the
/// store's nodes (at `base` and up, which no item id reaches), so any operation can tell them
/// by their number alone.
///
/// Lock order: `state` is a leaf lock, never held across a reply or another lock.
final class VirtualNodes: Sendable {
    static let base: NodeID = 1 << 63

    static func isVirtual(_ id: NodeID) -> Bool { id >= base }

    private struct Slot {
        var node: VirtualNode
        var key: VirtualKey
        var lookups: UInt64
    }

    private struct State {
        var slots: [NodeID: Slot] = [:]
        var byKey: [VirtualKey: NodeID] = [:]
        var nextID: NodeID = VirtualNodes.base
    }

    private let state = Mutex(State())

    /// Counts one lookup of the node `key` names, making it if the kernel did not know it; its
    /// content becomes `node` (a link's target may have moved since).
    func reference(_ key: VirtualKey, _ node: VirtualNode) -> NodeID {
        let (id, replaced) = state.withLock { state -> (NodeID, VirtualNode?) in
            if let id = state.byKey[key], var slot = state.slots[id] {
                let old = slot.node
                slot.node = node
                slot.lookups += 1
                state.slots[id] = slot
                return (id, old)
            }
            let id = state.nextID
            state.nextID += 1
            state.slots[id] = Slot(node: node, key: key, lookups: 1)
            state.byKey[key] = id
            return (id, nil)
        }
        _ = replaced  // released outside the lock (it may close a descriptor)
        return id
    }

    /// The node the kernel knows as `key` is now `newKey`'s, as `node` (a renamed key file: an
    /// fstat of it open answers for its new name); the node of what `newKey` named before keeps
    /// its number for the kernel but is no longer found by the key.
    func renamed(_ key: VirtualKey, to newKey: VirtualKey, _ node: VirtualNode) {
        let replaced = state.withLock { state -> VirtualNode? in
            guard let id = state.byKey.removeValue(forKey: key), var slot = state.slots[id] else { return nil }
            let old = slot.node
            slot.node = node
            slot.key = newKey
            state.slots[id] = slot
            state.byKey[newKey] = id
            return old
        }
        _ = replaced  // released outside the lock
    }

    func node(_ id: NodeID) throws(DocfsError) -> VirtualNode {
        guard let node = state.withLock({ $0.slots[id]?.node }) else {
            throw DocfsError(.system(.badFileDescriptor), "unknown node \(id)")
        }
        return node
    }

    func forget(_ id: NodeID, count: UInt64) {
        let dropped: Slot? = state.withLock { state in
            guard var slot = state.slots[id] else { return nil }
            slot.lookups = slot.lookups > count ? slot.lookups - count : 0
            if slot.lookups > 0 {
                state.slots[id] = slot
                return nil
            }
            state.slots[id] = nil
            if state.byKey[slot.key] == id { state.byKey[slot.key] = nil }
            return slot
        }
        _ = dropped
    }

    func dropAll() {
        let all = state.withLock { state in
            defer { state = State() }
            return state.slots
        }
        _ = all
    }

    var count: Int { state.withLock { $0.slots.count } }
}
