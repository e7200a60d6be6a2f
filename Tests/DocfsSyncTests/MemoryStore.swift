import DocfsChunks
import DocfsCore
import DocfsSync
import Foundation
import Synchronization

/// A machine's store held in memory, for tests of the sync engine without a kernel: items
/// with content, an outbox that every local change appends to, sync states and an anchor, and
/// conflict versions kept per item. Local changes are made as a user would make them (create,
/// write, rename, delete); applied remote changes never enter the outbox.
final class MemoryStore: SyncedStore, Sendable {
    struct State {
        var items: [UInt64: LocalItem] = [:]
        var chunks: [ChunkDigest: [UInt8]] = [:]
        var outbox: [OutboxEntry] = []
        var nextEntry: UInt64 = 1
        var states: [UInt64: ItemSyncState] = [:]
        var anchor = RemoteAnchor.start
        /// Content kept as conflict versions, per item.
        var conflicts: [UInt64: [String]] = [:]
        /// Items a writer has open here.
        var writing: Set<UInt64> = []
        /// Names this store refuses (as a filesystem refuses a name too long for it): applying an
        /// item under one fails.
        var refusedNames: Set<String> = []
        /// Items the store cannot tell about right now (a rename under way, as a real store's
        /// index can be a moment behind): reading them throws `LocalItemUnsettled`.
        var unsettled: Set<UInt64> = []
        /// Each file's version numbers: its current one, and those of its kept versions (number
        /// to kind) as a real store keeps them.
        var numbers: [UInt64: UInt64] = [:]
        var parked: [UInt64: (change: RemoteChange, problem: String)] = [:]
        var kept: [UInt64: [UInt64: String]] = [:]
        /// The content of every version kept here (previous and conflict), per item.
        var keptTexts: [UInt64: Set<String>] = [:]
        /// The content of saves made here that later ones superseded, per item and number.
        var saves: [UInt64: [UInt64: String]] = [:]
        /// The content an applied version replaced here, kept as a previous version (no save of
        /// this machine's: it never goes up), per item and number.
        var replaced: [UInt64: [UInt64: String]] = [:]
        /// Saves made here set aside (they lost their race before they went up), per item.
        var aside: [UInt64: Set<UInt64>] = [:]

        func text(of item: UInt64) -> String? {
            items[item].map { local in String(decoding: local.manifest.flatMap { chunks[$0] ?? [] }, as: UTF8.self) }
        }

        /// The first number above `number` no kept version of `item` has.
        func free(_ item: UInt64, above number: UInt64) -> UInt64 {
            var next = number + 1
            while kept[item]?[next] != nil { next += 1 }
            return next
        }

        /// A save here: the content it replaces is kept as a previous version.
        mutating func saved(_ item: UInt64, replacing old: String?) {
            let current = numbers[item] ?? 0
            if current > 0 { kept[item, default: [:]][current] = "previous" }
            if let old {
                keptTexts[item, default: []].insert(old)
                if current > 0 { saves[item, default: [:]][current] = old }
            }
            // Linked: a save is pending until the remote numbers it (`VersionNumber`).
            numbers[item] = free(item, above: VersionNumber.after(current, pending: true))
        }

        /// Save `key` (the content here or a kept one) takes the number the remote gave it.
        mutating func take(_ item: UInt64, key: UInt64, given: UInt64) {
            guard key != given else { return }
            if numbers[item] == key {
                // A save that repeats the version kept under `given` is that version.
                if kept[item]?[given] != nil { forget(item, given) }
                numbers[item] = given
            } else if let kind = kept[item]?[key] {
                kept[item]?[key] = nil
                kept[item, default: [:]][given] = kind
                if let text = saves[item]?.removeValue(forKey: key) { saves[item, default: [:]][given] = text }
                if let text = replaced[item]?.removeValue(forKey: key) { replaced[item, default: [:]][given] = text }
                aside[item]?.remove(key)
            }
        }

        mutating func forget(_ item: UInt64, _ number: UInt64) {
            kept[item]?[number] = nil
            saves[item]?[number] = nil
            replaced[item]?[number] = nil
            aside[item]?.remove(number)
        }
        var clock: Double = 1_700_000_000

        /// A name came or went in `folder`: its modification time moves, as a filesystem moves
        /// it, and that change of the folder's goes up (a removal another machine made of the
        /// folder then finds it changed here, and does not take the name with it).
        mutating func touch(_ folder: UInt64) {
            guard folder != 0, items[folder]?.kind == .folder else { return }
            let now = tick()
            items[folder]?.modified = now
            enqueue(folder)
        }

        mutating func enqueue(_ item: UInt64) {
            outbox.append(OutboxEntry(sequence: nextEntry, item: item))
            nextEntry += 1
        }

        mutating func tick() -> Double {
            clock += 1
            return clock
        }
    }

    let author: RemoteAuthor
    let state = Mutex(State())
    /// Where this machine's new item ids come from: its own space (DESIGN §9.0), so ids are
    /// unique by construction and a seeded run makes the same ones again.
    private let nextID: Atomic<UInt64>

    /// A store whose ids come from space `space` (a random one when not given).
    init(machine: String, space: UInt64? = nil) {
        author = RemoteAuthor(machine: machine, user: "alice")
        nextID = Atomic((space ?? UInt64.random(in: 1..<(1 << 20))) << 41 + 1)
    }

    // MARK: What a user does here

    /// Makes a new item, or (a file's name that is taken) writes the file there, as `>` does.
    @discardableResult
    func create(_ name: String, in parent: UInt64 = 0, text: String? = "", kind: RemoteItemKind = .file) -> UInt64 {
        if let existing = state.withLock({ $0.items.values.first { $0.name == name && $0.parent == parent } }) {
            if existing.kind == .file && kind == .file { write(existing.item, text ?? "") }
            return existing.item
        }
        let item = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        state.withLock { state in
            let (manifest, size) = Self.store(text ?? "", in: &state)
            let now = state.tick()
            state.items[item] = LocalItem(item: item, container: "docfs.default", parent: parent, name: name, kind: kind,
                                          manifest: kind == .folder ? [] : manifest, size: kind == .folder ? 0 : size,
                                          mode: kind == .folder ? 0o755 : 0o644, modified: now)
            if kind == .file { state.numbers[item] = 1 }
            state.enqueue(item)
            state.touch(parent)
        }
        return item
    }

    func write(_ item: UInt64, _ text: String) {
        state.withLock { state in
            let old = state.text(of: item)
            let (manifest, size) = Self.store(text, in: &state)
            let now = state.tick()
            state.items[item]?.manifest = manifest
            state.items[item]?.size = size
            state.items[item]?.modified = now
            state.saved(item, replacing: old)
            state.enqueue(item)
        }
    }

    /// Renames as rename(2) does: an item the new name held is replaced (deleted); a folder
    /// over a file, a file over a folder, or anything over a folder that holds something, is
    /// refused (nothing changes).
    func rename(_ item: UInt64, to name: String, in parent: UInt64? = nil) {
        state.withLock { state in
            guard let moving = state.items[item] else { return }
            let folder = parent ?? moving.parent
            if let replaced = state.items.values.first(where: { $0.name == name && $0.parent == folder && $0.item != item }) {
                guard (replaced.kind == .folder) == (moving.kind == .folder),
                      !state.items.values.contains(where: { $0.parent == replaced.item }) else { return }
                state.items[replaced.item] = nil
                state.enqueue(replaced.item)
            }
            state.items[item]?.name = name
            if let parent { state.items[item]?.parent = parent }
            state.enqueue(item)
            state.touch(moving.parent)
            if folder != moving.parent { state.touch(folder) }
        }
    }

    /// Writes the file as a process working behind the store's back would, where no watcher
    /// sees it: nothing enters the outbox.
    func writeUnseen(_ item: UInt64, _ text: String) {
        state.withLock { state in
            let (manifest, size) = Self.store(text, in: &state)
            let now = state.tick()
            state.items[item]?.manifest = manifest
            state.items[item]?.size = size
            state.items[item]?.modified = now
        }
    }

    /// Loses the item where no watcher sees it (an apply left half done): nothing enters the outbox.
    func removeUnseen(_ item: UInt64) {
        state.withLock { state in
            state.items[item] = nil
            state.numbers[item] = nil  // the file's number went with it
        }
    }

    /// chmod: the item's mode (permission bits) changes; a change of its own that goes up.
    func setMode(_ item: UInt64, _ mode: UInt32) {
        state.withLock { state in
            guard state.items[item] != nil else { return }
            state.items[item]?.mode = mode
            state.enqueue(item)
        }
    }

    /// touch -m: the item's modification time is set (to a time of the clock's), its content
    /// unchanged.
    func touchItem(_ item: UInt64) {
        state.withLock { state in
            guard state.items[item] != nil else { return }
            let now = state.tick()
            state.items[item]?.modified = now
            state.enqueue(item)
        }
    }

    func setAttribute(_ item: UInt64, _ name: String, _ value: String?) {
        state.withLock { state in
            state.items[item]?.attributes[name] = value.map { Array($0.utf8) }
            state.enqueue(item)
        }
    }

    func delete(_ item: UInt64) {
        state.withLock { state in
            let parent = state.items[item]?.parent ?? 0
            state.items[item] = nil
            state.enqueue(item)
            state.touch(parent)
        }
    }

    /// Removes the item and everything under it, as `rm -rf` does (innermost first).
    func deleteTree(_ item: UInt64) {
        state.withLock { state in
            var seen: Set<UInt64> = []
            func remove(_ item: UInt64) {
                guard seen.insert(item).inserted else { return }  // a cycle (a sync that went wrong) ends here
                for child in state.items.values.filter({ $0.parent == item }).map(\.item).sorted() { remove(child) }
                state.items[item] = nil
                state.enqueue(item)
            }
            let parent = state.items[item]?.parent ?? 0
            remove(item)
            state.touch(parent)
        }
    }

    /// The items of `kind` here, by id (a seeded run picks among them in a stable order).
    func items(of kind: RemoteItemKind) -> [UInt64] {
        state.withLock { $0.items.values.filter { $0.kind == kind }.map(\.item).sorted() }
    }

    /// Whether `item` is `folder` or lies under it.
    func isWithin(_ item: UInt64, _ folder: UInt64) -> Bool {
        state.withLock { state in
            var at = item
            for _ in 0..<1000 {
                if at == folder { return true }
                guard at != 0, let parent = state.items[at]?.parent else { return false }
                at = parent
            }
            return true
        }
    }

    /// Items whose folder is not here (a tree that lost its root), or that lie in a cycle.
    func orphans() -> [UInt64] {
        state.withLock { state in
            state.items.values.filter { local in
                var at = local.parent
                var seen: Set<UInt64> = [local.item]
                while at != 0 {
                    guard let parent = state.items[at], seen.insert(at).inserted else { return true }
                    at = parent.parent
                }
                return false
            }.map(\.item).sorted()
        }
    }

    // MARK: What a test looks at

    func text(of item: UInt64) -> String? { state.withLock { $0.text(of: item) } }

    /// The content of the item's kept versions (previous and conflict ones).
    func keptTexts(of item: UInt64) -> Set<String> { state.withLock { $0.keptTexts[item] ?? [] } }

    func item(_ item: UInt64) -> LocalItem? { state.withLock { $0.items[item] } }

    func conflicts(of item: UInt64) -> [String] { state.withLock { $0.conflicts[item] ?? [] }.sorted() }

    /// The item's versions as `docfs versions` lists them: number to kind, the current one too.
    func versionList(of item: UInt64) -> [UInt64: String] {
        state.withLock { state in
            var list = state.kept[item] ?? [:]
            if let current = state.numbers[item] { list[current] = "current" }
            return list
        }
    }

    var pending: Int { state.withLock { $0.outbox.count } }

    /// Every item as path → (id, content), comparable across machines.
    func tree() -> [String: String] {
        state.withLock { state in
            var tree: [String: String] = [:]
            for local in state.items.values {
                var path = local.name
                var parent = local.parent
                var seen: Set<UInt64> = [local.item]
                while parent != 0, let folder = state.items[parent] {
                    guard seen.insert(parent).inserted else {
                        path = "(cycle)/" + path  // a sync that went wrong; `orphans` says so
                        break
                    }
                    path = folder.name + "/" + path
                    parent = folder.parent
                }
                let content = String(decoding: local.manifest.flatMap { state.chunks[$0] ?? [] }, as: UTF8.self)
                tree[path] = "\(local.item) \(local.kind) \(content) \(local.attributes.keys.sorted())"
            }
            return tree
        }
    }

    private static func store(_ text: String, in state: inout State) -> ([ChunkDigest], Int64) {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { return ([], 0) }
        // Chunks of at most 8 bytes, so content shares chunks and edits change some.
        var manifest: [ChunkDigest] = []
        var start = 0
        while start < bytes.count {
            let piece = Array(bytes[start..<min(bytes.count, start + 8)])
            let digest = piece.withUnsafeBytes { ChunkDigest(of: $0) }
            state.chunks[digest] = piece
            manifest.append(digest)
            start += 8
        }
        return (manifest, Int64(bytes.count))
    }

    // MARK: SyncedStore

    func pendingChanges(limit: Int) throws -> [OutboxEntry] {
        state.withLock { Array($0.outbox.prefix(limit)) }
    }

    func requeue(_ item: UInt64) throws { state.withLock { $0.enqueue(item) } }

    func acknowledge(_ entry: OutboxEntry) throws {
        state.withLock { $0.outbox.removeAll { $0 == entry } }
    }

    func current(_ item: UInt64) throws -> LocalItem? {
        try state.withLock { state in
            if state.unsettled.contains(item) { throw LocalItemUnsettled(item: item) }
            return state.items[item]
        }
    }

    func isGone(_ item: UInt64) throws -> Bool { state.withLock { $0.items[item] == nil } }

    func putOffWhileWritten(_ item: UInt64) -> Bool { state.withLock { $0.writing.contains(item) } }

    func describeContainer(_ container: String) -> (name: String, isPublic: Bool)? { nil }

    func thumbnailSet(of item: UInt64) -> [UInt8]? { nil }

    func versionNumber(of item: UInt64) -> UInt64 { state.withLock { $0.numbers[item] ?? 0 } }

    /// This store keeps another machine's version under the remote's number or not at all.
    func takeRemoteNumbers(of item: UInt64) throws {}

    func becameConflict(_ item: UInt64, key: UInt64, given: UInt64) throws -> Bool {
        state.withLock { state in
            guard state.kept[item]?[key] == "previous", let text = state.saves[item]?[key] else { return false }
            if let kept = state.kept[item]?[given] {
                // Kept already from the log: the save is that version, and goes.
                guard kept == "conflict" else { return false }
                state.forget(item, key)
                return true
            }
            state.forget(item, key)
            state.kept[item, default: [:]][given] = "conflict"
            state.conflicts[item, default: []].append(text)
            return true
        }
    }

    func takeNumber(_ item: UInt64, key: UInt64, given: UInt64) throws {
        state.withLock { $0.take(item, key: key, given: given) }
    }

    /// A writer opens the item (its changes are not saves until `closeWriter`).
    func openWriter(_ item: UInt64) { state.withLock { _ = $0.writing.insert(item) } }

    /// The writer closes: the item is saved (it enters the outbox).
    func closeWriter(_ item: UInt64) {
        state.withLock { state in
            state.writing.remove(item)
            state.enqueue(item)
        }
    }

    func chunk(_ digest: ChunkDigest, of item: UInt64) throws -> [UInt8] {
        guard let bytes = state.withLock({ $0.chunks[digest] }) else { throw MemoryStoreError.noChunk }
        return bytes
    }

    func item(named name: String, in parent: UInt64, container: String, scope: String) throws -> UInt64? {
        state.withLock { state in
            state.items.values.first { $0.name == name && $0.parent == parent && $0.container == container && $0.scope == scope }?.item
        }
    }

    func syncState(of item: UInt64) throws -> ItemSyncState? { state.withLock { $0.states[item] } }

    func syncedItems() throws -> [UInt64] { state.withLock { Array($0.states.keys) } }
    func allItems() throws -> [UInt64] { state.withLock { Array($0.items.keys) } }
    func shownPath(of item: UInt64) -> String? { state.withLock { $0.items[item].map { "\($0.container)/\($0.name)" } } }

    func itemInStep(named name: String, in parent: UInt64, container: String, scope: String, other item: UInt64) throws -> UInt64? {
        state.withLock { state in
            state.states.first { id, syncState in
                let version = syncState.version
                return id != item && !version.deleted && version.name == name && version.parent == parent
                    && version.container == container && version.scope == scope
            }?.key
        }
    }

    func setSyncState(_ syncState: ItemSyncState?, of item: UInt64) throws {
        state.withLock { $0.states[item] = syncState }
    }

    func anchor() throws -> RemoteAnchor { state.withLock { $0.anchor } }

    func setAnchor(_ anchor: RemoteAnchor) throws { state.withLock { $0.anchor = anchor } }

    func park(_ change: RemoteChange, problem: String) throws {
        state.withLock { $0.parked[change.sequence] = (change, problem) }
    }

    func parkedChanges() throws -> [(change: RemoteChange, problem: String)] {
        state.withLock { state in state.parked.keys.sorted().map { state.parked[$0]! } }
    }

    func unpark(_ change: RemoteChange) throws {
        state.withLock { _ = $0.parked.removeValue(forKey: change.sequence) }
    }

    var parkedCount: Int { state.withLock { $0.parked.count } }

    func apply(_ version: RemoteVersion, placedAs name: String, expecting expected: ApplyExpectation,
               keepingHereAsConflict conflict: UInt64?, fetch: (ChunkDigest) throws -> [UInt8]) throws -> ApplyOutcome {
        // Content first, outside the lock (as the real store writes beside, then renames).
        var fetched: [ChunkDigest: [UInt8]] = [:]
        for digest in version.chunks ?? [] where state.withLock({ $0.chunks[digest] }) == nil {
            fetched[digest] = try fetch(digest)
        }
        return try state.withLock { state in
            guard expected.isMet(by: state.items[version.item]) else { return .changedHere }
            // As a real store: a folder that holds something here stays (what is in it goes up).
            if version.deleted, state.items.values.contains(where: { $0.parent == version.item }) { return .changedHere }
            if !version.deleted, state.refusedNames.contains(name) { throw MemoryStoreError.nameRefused(name) }
            // As a real store: an item goes in a folder that is here.
            if !version.deleted, version.parent != 0, state.items[version.parent] == nil {
                throw MemoryStoreError.noParent(version.parent)
            }
            // The engine places items only under free names: a rename over another item here
            // would delete it.
            if !version.deleted, state.items.values.contains(where: {
                $0.name == name && $0.parent == version.parent && $0.item != version.item
            }) {
                throw MemoryStoreError.nameTaken(name)
            }
            // Numbered as the real store numbers (StoreSync+Apply).
            // A file's number goes with it (a real store keeps it on the file).
            var old = state.items[version.item] == nil ? 0 : state.numbers[version.item] ?? 0
            // Saves that never went up leave the chain before another machine's content comes
            // after them (back over a deletion too): they go up set aside.
            let chain = (state.saves[version.item] ?? [:]).keys.filter {
                VersionNumber.isPending($0) && state.kept[version.item]?[$0] != nil && state.aside[version.item]?.contains($0) != true
            }
            if version.kind == .file && !version.deleted && !chain.isEmpty {
                state.aside[version.item, default: []].formUnion(chain)
                state.enqueue(version.item)
            }
            if let here = state.items[version.item], here.kind == .file {
                // Pending yet taken over without a race: it repeats the version last in step.
                if conflict == nil && VersionNumber.isPending(old), let synced = state.states[version.item]?.number {
                    old = state.kept[version.item]?[synced] != nil ? 0 : synced
                }
                if conflict != nil || version.kind == .file && version.chunks != here.manifest, let text = state.text(of: version.item) {
                    state.keptTexts[version.item, default: []].insert(text)
                }
                // Kept already (from the log, or when the document changed here first): that version.
                if let conflict {
                    if state.kept[version.item]?[conflict] == nil {
                        state.conflicts[version.item, default: []].append(
                            String(decoding: here.manifest.flatMap { state.chunks[$0] ?? [] }, as: UTF8.self))
                        state.kept[version.item, default: [:]][conflict] = "conflict"
                    }
                } else if version.kind == .file && version.chunks != here.manifest && (old > 0 || state.numbers[version.item] == nil) {
                    state.kept[version.item, default: [:]][max(old, 1)] = "previous"
                    state.replaced[version.item, default: [:]][max(old, 1)] = state.text(of: version.item)
                }
            }
            if version.kind == .file && !version.deleted && (state.items[version.item]?.manifest != version.chunks || state.numbers[version.item] == nil) {
                let lowest = conflict != nil || VersionNumber.isPending(old) ? version.number : max(version.number, old + 1)
                // A version kept here under the remote's number is that version: it goes.
                if state.kept[version.item]?[lowest] != nil { state.forget(version.item, lowest) }
                state.numbers[version.item] = lowest
            } else if version.kind == .file && !version.deleted && VersionNumber.isPending(old) {
                // A pending save holding the content (a merge of ours committed) is that version.
                if state.kept[version.item]?[version.number] != nil { state.forget(version.item, version.number) }
                state.numbers[version.item] = version.number
            } else if version.kind == .file && !version.deleted && old < version.number && state.kept[version.item]?[version.number] == nil {
                state.numbers[version.item] = version.number  // the same content, the remote's newer number
            }
            state.chunks.merge(fetched) { old, _ in old }
            if version.deleted {
                state.items[version.item] = nil
            } else {
                var local = LocalItem(version)
                local.name = name
                state.items[version.item] = local
                if name != version.name { state.enqueue(version.item) }
            }
            return .applied
        }
    }

    func moveAside(_ item: UInt64, to name: String) throws {
        rename(item, to: name)
    }

    func resolveConflicts(of item: UInt64, before number: UInt64) throws {
        state.withLock { state in
            for (kept, kind) in state.kept[item] ?? [:] where kind == "conflict" && kept < number { state.kept[item]?[kept] = nil }
            state.conflicts[item] = nil
        }
    }

    /// Resolves the item's conflict here, as `docfs versions --resolve` does: its conflict
    /// versions go, and the resolution goes up.
    func resolve(_ item: UInt64) {
        state.withLock { state in
            for (kept, kind) in state.kept[item] ?? [:] where kind == "conflict" { state.kept[item]?[kept] = nil }
            state.conflicts[item] = nil
            state.states[item]?.resolvedHere = true
            state.enqueue(item)
        }
    }

    func keepConflict(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        try keep(version, as: "conflict", fetch: fetch)
    }

    func unsentSaves(of item: UInt64, after number: UInt64, before current: UInt64) throws -> [UInt64] {
        state.withLock { state in
            // As a real store: after every conflict version kept here.
            let floor = max(number, (state.kept[item] ?? [:]).filter { $0.value == "conflict" }.keys.max() ?? 0)
            return (state.saves[item] ?? [:]).keys.filter { kept in
                kept > floor && kept < current && state.kept[item]?[kept] == "previous" && state.aside[item]?.contains(kept) != true
            }.sorted()
        }
    }

    func unsentSave(of item: UInt64, number: UInt64, cut: (_ batch: ChunkBatch) throws -> Void) throws
        -> (manifest: [ChunkDigest], size: Int64, modified: Double)? {
        let made = state.withLock { state -> ([ChunkDigest], Int64, [[UInt8]])? in
            guard let text = state.saves[item]?[number] else { return nil }
            let (manifest, size) = Self.store(text, in: &state)
            return (manifest, size, manifest.map { state.chunks[$0] ?? [] })
        }
        guard let (manifest, size, pieces) = made else { return nil }
        var batch = ChunkBatch()
        for (digest, piece) in zip(manifest, pieces) { batch.append(digest, piece) }
        if !batch.chunks.isEmpty { try cut(batch) }
        return (manifest, size, 1_700_000_000 + Double(number))
    }

    func keepPrevious(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        try keep(version, as: "previous", fetch: fetch)
    }

    func setAside(_ numbers: [UInt64], of item: UInt64, above current: UInt64) throws {
        state.withLock { state in
            guard !state.writing.contains(item) else { return }  // as a real store: not under a writer
            state.aside[item, default: []].formUnion(numbers.filter { state.saves[item]?[$0] != nil })
        }
    }

    func unsentSavesBeforeConflicts(of item: UInt64, after number: UInt64, before current: UInt64) throws -> [UInt64] { [] }

    func keptVersions(of item: UInt64) throws -> [UInt64: Bool] {
        state.withLock { state in
            (state.kept[item] ?? [:]).filter { !VersionNumber.isPending($0.key) }.mapValues { $0 == "conflict" }
        }
    }

    func unsentAside(of item: UInt64) throws -> [UInt64] {
        state.withLock { ($0.aside[item] ?? []).filter(VersionNumber.isPending).sorted() }
    }

    func forgetPrevious(_ number: UInt64, of item: UInt64, holding manifest: [ChunkDigest], keptAs: UInt64?) throws -> Bool {
        state.withLock { state in
            if let keptAs, state.kept[item]?[keptAs] == nil { return false }
            guard state.kept[item]?[number] == "previous", let text = state.saves[item]?[number] ?? state.replaced[item]?[number],
                  Self.store(text, in: &state).0 == manifest else { return false }
            state.forget(item, number)
            return true
        }
    }

    func keepAside(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        try keep(version, as: "previous", fetch: fetch)
    }

    private func keep(_ version: RemoteVersion, as kind: String, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        let bytes = try (version.chunks ?? []).flatMap { try fetch($0) }
        state.withLock { state in
            // A previous version never moves a kept one, nor the content here.
            if kind == "previous" && (state.kept[version.item]?[version.number] != nil || state.numbers[version.item] == version.number) { return }
            let text = String(decoding: bytes, as: UTF8.self)
            state.keptTexts[version.item, default: []].insert(text)
            // Kept already under the remote's number (which no save here holds): that version.
            if state.kept[version.item]?[version.number] != nil { return }
            if kind == "conflict" { state.conflicts[version.item, default: []].append(text) }
            state.kept[version.item, default: [:]][version.number] = kind
            if kind == "previous" { state.replaced[version.item, default: [:]][version.number] = text }
        }
    }
}

enum MemoryStoreError: Error {
    case noChunk
    case nameRefused(String)
    case nameTaken(String)
    case noParent(UInt64)
}
