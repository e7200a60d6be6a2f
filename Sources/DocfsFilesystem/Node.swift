import CLinux
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Identity of a file in the backing store: device and inode number.
package struct BackingKey: Hashable, Sendable {
    var device: UInt64
    var inode: UInt64

    package init(_ st: stat) {
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
    }

    init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }
}

/// A file or folder the kernel holds a reference to. It keeps an O_PATH descriptor of its
/// backing file, so it can be reached after renames and unlinks without a path, and so its
/// backing inode cannot be reused while the kernel still knows it.
///
/// The node id is the kernel's handle for one backing inode, whose inode number users see; the
/// item id is the document's identity (`user.docfs.id`). They differ on purpose: after a safe-save
/// the document (same item) lives in a new backing inode, while a reader that opened it
/// before keeps the old content under the old node.
package final class Node: Sendable {
    let id: NodeID
    /// O_PATH descriptor of the backing file; closed when the node is forgotten.
    let fd: Int32
    let key: BackingKey
    /// S_IFMT bits: a backing inode never changes type.
    let type: mode_t
    /// This file is a reference (see `ReferenceStub`): it stands for the document `item`, which
    /// lives elsewhere; its content and attributes are the original's.
    let isReference: Bool
    private let itemStorage: Atomic<UInt64>
    /// Where the kernel last found this file: the folder and the name (for telling a write
    /// session that someone replaced the file it writes).
    private let placeStorage = Mutex<Place?>(nil)

    /// A name in a folder of the store.
    struct Place: Hashable {
        let directory: BackingKey
        let name: FileName
    }

    var place: Place? { placeStorage.withLock { $0 } }

    private let supersededStorage = Atomic<Bool>(false)

    /// This file is no longer the document's content: a replace kept it as a previous version.
    /// Writers that still reach it (they opened it before, or the kernel had not yet heard)
    /// write into that kept version, as into an unlinked file; no session starts on it.
    var isSuperseded: Bool { supersededStorage.load(ordering: .acquiring) }

    package func markSuperseded() { supersededStorage.store(true, ordering: .releasing) }

    func found(at place: Place?) { placeStorage.withLock { $0 = place } }

    init(id: NodeID, fd: Int32, key: BackingKey, type: mode_t, item: ItemID, isReference: Bool = false) {
        self.id = id
        self.fd = fd
        self.key = key
        self.type = type
        self.isReference = isReference
        self.itemStorage = Atomic(item.rawValue)
    }

    /// The item this backing file holds (content of that item, current or superseded). It
    /// changes when a safe-save makes this file the new content of an existing document.
    var item: ItemID {
        get { ItemID(rawValue: itemStorage.load(ordering: .acquiring)) }
    }

    func retag(_ item: ItemID) { itemStorage.store(item.rawValue, ordering: .releasing) }

    var isSymlink: Bool { type == S_IFLNK }
    var isDirectory: Bool { type == S_IFDIR }

    /// A path that reaches the backing file through /proc, for calls that need a path and
    /// cannot take an O_PATH descriptor (xattrs, chmod, truncate, utimensat).
    var procPath: String { "/proc/self/fd/\(fd)" }

    deinit { close(fd) }
}

/// Where the file or folder a descriptor (O_PATH included) refers to is, as the kernel names it
/// (a name since removed ends in " (deleted)"); nil when it cannot tell.
func backingPath(of fd: Int32) -> String? {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
    guard n > 0 else { return nil }
    return NameText.encode(buffer[0..<n].map { UInt8(bitPattern: $0) })
}

/// The nodes the kernel knows, with their lookup counts (FUSE's reference counting: each entry
/// replied adds one, `forget` takes some back; at zero the node is dropped).
///
/// Each node holds a descriptor, and the kernel keeps a node for every name it caches (a
/// `find` over a million files would make a million), so the table is bounded: past `limit`
/// nodes, the least recently used are handed out by `leastRecentlyUsed` for the kernel to be
/// asked to forget their names (it then forgets the nodes unless something holds them: an open
/// file, a working directory). Use is counted in ticks of a clock that moves on at every use.
///
/// Lock order: `NodeTable.state` is a leaf lock; nothing else is taken while holding it, and it
/// is never held across a reply to the kernel.
package final class NodeTable: Sendable {
    private struct Slot {
        var node: Node
        var lookups: UInt64
        /// The clock when the node was last used.
        var used: UInt64
        /// The clock when the kernel was last asked to forget the node (0: never).
        var asked: UInt64 = 0
    }

    private struct State {
        var slots: [NodeID: Slot] = [:]
        var byKey: [BackingKey: NodeID] = [:]
        var nextID: NodeID = 2
        var clock: UInt64 = 1
        /// Nodes made since the last time some were handed out to be forgotten.
        var madeSinceRound = 0
        /// Whether `pastLimit` was signalled since that time.
        var signalled = false

        mutating func tick() -> UInt64 {
            clock += 1
            return clock
        }
    }

    private let state = Mutex(State())
    /// How many nodes the table keeps before it asks for some to be forgotten.
    let limit: Int
    /// Signalled when the table is past its limit (see `leastRecentlyUsed`).
    private let pastLimit = ThreadSemaphore()

    init(root: Node, limit: Int = NodeTable.defaultLimit()) {
        self.limit = max(limit, 16)
        state.withLock {
            $0.slots[root.id] = Slot(node: root, lookups: 1, used: 1)
            $0.byKey[root.key] = root.id
        }
    }

    /// The limit for a process whose descriptors are limited to `descriptors`: half of what is
    /// left beside 512 for open files, folders being listed, the index and the store (the
    /// other half is room for what the kernel looks up before it forgets), and at most 100,000
    /// (a few hundred bytes each, so tens of megabytes at most).
    static func defaultLimit(descriptors: Int = NodeTable.descriptorLimit()) -> Int {
        min(100_000, max(256, (descriptors - 512) / 2))
    }

    /// Whether the table holds more nodes than its limit.
    var isPastLimit: Bool { state.withLock { $0.slots.count > limit } }

    /// This process's soft limit on open descriptors.
    static func descriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        return limit.rlim_cur > UInt(Int32.max) ? Int(Int32.max) : Int(limit.rlim_cur)
    }

    /// How many nodes one round hands out: a tenth of the limit, so the kernel is asked in
    /// batches and the table scanned once per batch.
    private var roundSize: Int { max(limit / 10, 8) }

    func node(_ id: NodeID) throws(DocfsError) -> Node {
        guard let node = state.withLock({ state -> Node? in
            guard state.slots[id] != nil else { return nil }
            let now = state.tick()
            state.slots[id]!.used = now
            return state.slots[id]!.node
        }) else {
            if VirtualNodes.isVirtual(id) {
                // Anything that would change a file or folder of docfs's own comes here.
                throw DocfsError(.system(.readOnlyFileSystem), "docfs's own files and folders are read-only")
            }
            throw DocfsError(.system(.badFileDescriptor), "unknown node \(id)")
        }
        return node
    }

    /// Counts one more lookup of the backing file `key` when the kernel already knows it.
    func referenceExisting(key: BackingKey) -> Node? {
        state.withLock { state -> Node? in
            guard let id = state.byKey[key], state.slots[id] != nil else { return nil }
            let now = state.tick()
            state.slots[id]!.lookups += 1
            state.slots[id]!.used = now
            return state.slots[id]!.node
        }
    }

    /// Counts one more lookup of the backing file `key`, making a node for it (holding `fd`, an
    /// O_PATH descriptor of that file) if the kernel did not know it. When another lookup made
    /// the node meanwhile, `fd` is closed and that node counted.
    func reference(key: BackingKey, fd: Int32, type: mode_t, item: ItemID, isReference: Bool = false) -> Node {
        let (node, duplicate, overLimit) = state.withLock { state -> (Node, Bool, Bool) in
            let now = state.tick()
            if let id = state.byKey[key], state.slots[id] != nil {
                state.slots[id]!.lookups += 1
                state.slots[id]!.used = now
                return (state.slots[id]!.node, true, false)
            }
            let id = state.nextID
            state.nextID += 1
            let node = Node(id: id, fd: fd, key: key, type: type, item: item, isReference: isReference)
            state.slots[id] = Slot(node: node, lookups: 1, used: now)
            state.byKey[key] = id
            state.madeSinceRound += 1
            let signal = !state.signalled && state.slots.count > limit && state.madeSinceRound >= roundSize
            if signal { state.signalled = true }
            return (node, false, signal)
        }
        if duplicate { close(fd) }
        if overLimit { pastLimit.signal() }
        return node
    }

    /// The node of backing file `key`, if the kernel knows it (no lookup counted).
    package func known(key: BackingKey) -> Node? {
        state.withLock { state in state.byKey[key].flatMap { state.slots[$0]?.node } }
    }

    /// Lets the backing file `key` be found anew: the next lookup of it makes a new node (a new
    /// inode to the kernel), while the kernel's references to the old one stay valid until
    /// forgotten. (With the writeback cache the kernel keeps a file's size as its own, so a
    /// file changed through another mount gets a fresh inode.)
    func detach(key: BackingKey) {
        state.withLock { _ = $0.byKey.removeValue(forKey: key) }
    }

    /// Counts one more lookup of a node already known (hard link, readdirplus of a known file).
    func reference(_ node: Node) {
        state.withLock { state in
            guard state.slots[node.id] != nil else { return }
            let now = state.tick()
            state.slots[node.id]!.lookups += 1
            state.slots[node.id]!.used = now
        }
    }

    /// Waits up to `seconds` for the table to be past its limit, then answers the least
    /// recently used nodes (never the root) to bring it back a round below it, leaving out any
    /// the kernel was asked to forget less than a round of lookups ago (it keeps what is in
    /// use). Empty when the table is within its limit.
    func leastRecentlyUsed(waitingUpTo seconds: Double) -> [Node] {
        _ = pastLimit.wait(seconds: seconds)
        return state.withLock { state -> [Node] in
            state.signalled = false
            let excess = state.slots.count - (limit - roundSize)
            guard state.slots.count > limit, excess > 0 else { return [] }
            state.madeSinceRound = 0
            let recentlyAsked = state.clock > UInt64(limit) ? state.clock - UInt64(limit) : 0
            // Folders only when there are not enough files: forgetting a folder's name unhashes
            // it even while it is some process's working directory, whose getcwd(3) then fails.
            var files: [(used: UInt64, id: NodeID)] = [], folders: [(used: UInt64, id: NodeID)] = []
            files.reserveCapacity(state.slots.count)
            var folderCount = 0
            for (id, slot) in state.slots where id != rootID {
                if slot.node.isDirectory { folderCount += 1 }
                guard slot.asked <= recentlyAsked else { continue }
                if slot.node.isDirectory { folders.append((slot.used, id)) } else { files.append((slot.used, id)) }
            }
            var chosen = Self.smallest(min(excess, files.count), of: &files)
            // Folders only when they alone are past the limit (files asked about but not yet
            // forgotten by the kernel are no reason: their FORGETs are on their way).
            if chosen.count < excess && folderCount > limit - roundSize && !folders.isEmpty {
                chosen += Self.smallest(min(excess - chosen.count, folders.count), of: &folders)
                _ = folderWarning.compareExchange(expected: 0, desired: 1, ordering: .relaxed)
            }
            let now = state.tick()
            return chosen.map { id in
                state.slots[id]!.asked = now
                return state.slots[id]!.node
            }
        }
    }

    /// 0 until `leastRecentlyUsed` first hands out folders (the kernel holds more folders than
    /// the limit allows), 1 then, 2 once `takeFolderWarning` said so.
    private let folderWarning = Atomic<Int>(0)

    /// True once, after folders were first handed out to be forgotten.
    func takeFolderWarning() -> Bool {
        folderWarning.compareExchange(expected: 1, desired: 2, ordering: .relaxed).exchanged
    }

    /// Ends a wait of `leastRecentlyUsed` at once.
    func wakeWaiter() { pastLimit.signal() }

    /// The ids of the `count` candidates used least recently (a partial selection, not a sort).
    private static func smallest(_ count: Int, of candidates: inout [(used: UInt64, id: NodeID)]) -> [NodeID] {
        guard count > 0 else { return [] }
        guard count < candidates.count else { return candidates.map(\.id) }
        var low = 0, high = candidates.count - 1
        let k = count - 1
        while low < high {
            let pivot = candidates[(low + high) / 2].used
            var i = low, j = high
            while i <= j {
                while candidates[i].used < pivot { i += 1 }
                while candidates[j].used > pivot { j -= 1 }
                if i <= j {
                    candidates.swapAt(i, j)
                    i += 1
                    j -= 1
                }
            }
            if k <= j { high = j } else if k >= i { low = i } else { break }
        }
        return candidates[0..<count].map(\.id)
    }

    /// Takes back `count` lookups; the node is dropped (and its descriptor closed, once no
    /// operation still uses it) when none remain.
    func forget(_ id: NodeID, count: UInt64) {
        let dropped: Node? = state.withLock { state in
            guard var slot = state.slots[id], id != rootID else { return nil }
            slot.lookups = slot.lookups > count ? slot.lookups - count : 0
            if slot.lookups == 0 {
                state.slots[id] = nil
                if state.byKey[slot.node.key] == id { state.byKey[slot.node.key] = nil }
                return slot.node
            }
            state.slots[id] = slot
            return nil
        }
        _ = dropped  // released outside the lock
    }

    /// Drops every node but the root (unmount: the kernel sends no forgets).
    func dropAll() {
        let nodes: [Node] = state.withLock { state in
            let all = state.slots.values.map(\.node).filter { $0.id != rootID }
            state.slots = state.slots.filter { $0.key == rootID }
            state.byKey = state.byKey.filter { $0.value == rootID }
            return all
        }
        _ = nodes
    }

    var count: Int { state.withLock { $0.slots.count } }

    /// Every node the kernel knows.
    func allIDs() -> [NodeID] { state.withLock { Array($0.slots.keys) } }

    func lookups(of id: NodeID) -> UInt64 { state.withLock { $0.slots[id]?.lookups ?? 0 } }
}

let rootID: NodeID = 1
