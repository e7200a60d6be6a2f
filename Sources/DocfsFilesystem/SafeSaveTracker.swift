import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What docfs remembers briefly to recognise editors' safe-saves (C3): which files were made
/// moments ago through the mount (a save's temporary file), and which names a document was
/// just renamed away from to a backup name (vim's and emacs's backup step). Both fade after a
/// while, so only a save in progress is taken for one.
///
/// Lock order: `state` is a leaf lock.
package final class SafeSaveTracker: Sendable {
    /// How long a new file counts as a save's temporary file, in seconds.
    static let freshness: Double = 300
    /// How long a name vacated by a rename waits for the new content, in seconds.
    static let vacancy: Double = 30

    /// A document renamed away from a name, possibly to make room for its new content.
    struct Vacated {
        /// The document; for a reference, the original it stands for.
        let item: ItemID
        /// A reference was renamed away (the save is meant for its original).
        let isReference: Bool
        let newDirectory: BackingKey
        let newName: FileName
        let time: Double
    }

    private struct Place: Hashable {
        let directory: BackingKey
        let name: FileName
    }

    private struct State {
        var fresh: [BackingKey: Double] = [:]
        /// The newest `capacity` created files, oldest first from `next`: the bound of `fresh`.
        var recent: [BackingKey?] = Array(repeating: nil, count: SafeSaveTracker.capacity)
        var next = 0
        var vacated: [Place: Vacated] = [:]
        /// Documents whose takeover by a safe-save's new file is under way, and since when.
        var takingOver: [ItemID: Double] = [:]
    }

    /// How long a takeover counts as under way at most (one create's work), in seconds.
    static let takeoverSpan: Double = 5

    /// How many new files (and vacated names) are remembered at most.
    static let capacity = 4096

    private let state = Mutex(State())

    /// The backing file `key` was just created through the mount.
    func noteCreated(_ key: BackingKey) {
        let now = Self.now()
        state.withLock { state in
            if let oldest = state.recent[state.next] { state.fresh[oldest] = nil }
            state.recent[state.next] = key
            state.next = (state.next + 1) % Self.capacity
            state.fresh[key] = now
        }
    }

    /// Whether the backing file `key` was made through the mount moments ago.
    func isFresh(_ key: BackingKey) -> Bool {
        let now = Self.now()
        return state.withLock { state in state.fresh[key].map { now - $0 < Self.freshness } ?? false }
    }

    /// A regular file `item` was renamed from `name` in `directory` to `newName` in `newDirectory`:
    /// remembered when that looks like a backup of it (same folder, a name that contains the
    /// old one: `doc~`, `.doc.bak`, `#doc#`), not for a file put in place (`x.lock` to `x`).
    func noteRenamedAway(item: ItemID, isReference: Bool = false, from directory: BackingKey, name: FileName,
                         to newDirectory: BackingKey, newName: FileName) {
        guard directory == newDirectory, Self.isBackupName(newName, of: name) else { return }
        let now = Self.now()
        state.withLock { state in
            if state.vacated.count >= Self.capacity { state.vacated = state.vacated.filter { now - $0.value.time < Self.vacancy } }
            if state.vacated.count >= Self.capacity { state.vacated.removeAll() }
            state.vacated[Place(directory: directory, name: name)] = Vacated(item: item, isReference: isReference, newDirectory: newDirectory,
                                                                            newName: newName, time: now)
        }
    }

    /// The document that left `name` in `directory` moments ago, if one did; asked once per
    /// create of that name.
    func takeVacated(directory: BackingKey, name: FileName) -> Vacated? {
        let now = Self.now()
        return state.withLock { state in
            guard let vacated = state.vacated.removeValue(forKey: Place(directory: directory, name: name)),
                  now - vacated.time < Self.vacancy else { return nil }
            return vacated
        }
    }

    /// The safe-save's new file takes over `item`: from when the renamed-aside file gets an
    /// id of its own until the new file's record is stitched (at its first close or fsync),
    /// the index has no record of the document, and the sync engine must not take it for gone.
    func beginTakeover(_ item: ItemID) {
        let now = Self.now()
        state.withLock { $0.takingOver[item] = now }
    }

    /// The takeover of `item` is over (its new file is recorded), or never began.
    func endTakeover(_ item: ItemID) {
        state.withLock { state in
            guard !state.takingOver.isEmpty else { return }
            state.takingOver[item] = nil
        }
    }

    /// Whether a safe-save's takeover of `item` is under way.
    package func isTakingOver(_ item: ItemID) -> Bool {
        let now = Self.now()
        return state.withLock { state in
            guard let since = state.takingOver[item] else { return false }
            if now - since < Self.takeoverSpan { return true }
            state.takingOver[item] = nil
            return false
        }
    }

    static func isBackupName(_ candidate: FileName, of name: FileName) -> Bool {
        let a = candidate.bytes, b = name.bytes
        guard a.count > b.count, !b.isEmpty else { return false }
        return (0...(a.count - b.count)).contains { a[$0..<($0 + b.count)].elementsEqual(b) }
    }

    static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
