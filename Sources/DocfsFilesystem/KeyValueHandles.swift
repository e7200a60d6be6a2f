import DocfsCore
import Synchronization

/// The key files of a view open for writing (`.docfs/kv/<key>`): which key each handle (a
/// memory file holding the content being written) sets, as what kind of value, and what it
/// changed since it last set it. Keys are compared as bytes (two spellings of one accented
/// name are two keys, as they are two file names). Lock order: `open` is a leaf lock.
final class KeyValueHandles: Sendable {
    struct Writer: Sendable {
        let container: ContainerID
        /// The key set at close: it follows a rename of the file while open (a program that
        /// renames its temporary file before closing it); nil once the file was removed.
        var key: String?
        /// The kind the content is read as (the key's own, when it was set); nil: text when
        /// it is UTF-8, else data (a key made through its file).
        var kind: String?
        /// A write would have made the value bigger than a store holds: nothing is set from
        /// this handle again (a value is set whole or not at all), and its closes fail so.
        var overflowed = false
        /// Written since the last commit: a close sets the value then.
        var wrote = false
        /// Truncated (an O_TRUNC open, ftruncate) since the last commit: set only at the last
        /// close or an fsync. A shell's `>` closes its first descriptor before it writes (dup2,
        /// close), and the key must not be seen empty meanwhile.
        var truncated = false
        /// Changed at all since it was opened: the last close sets what it holds unless that
        /// is what it set last (`setDigest`), so a write that raced a close's commit (FLUSH is
        /// not ordered with writes through other descriptors) is set then.
        var changed = false
        /// What the handle set last (a hash of the bytes and their count).
        var setDigest: Int?
        /// Orders changes: a rename takes the content of the writer changed last.
        var lastChange: UInt64 = 0
    }

    /// When a key file's content is set: each close(2) of what was written, the last close and
    /// fsync(2) of anything changed.
    enum Commit { case close, lastClose, fsync }

    private struct State {
        var writers: [UInt64: Writer] = [:]
        var changes: UInt64 = 0
    }

    private let open = Mutex(State())
    /// How many are open: a write through any other handle checks this alone.
    private let count = Atomic<Int>(0)

    static func same(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case let (a?, b?): a.utf8.elementsEqual(b.utf8)
        case (nil, nil): true
        default: false
        }
    }

    static func digest(_ bytes: [UInt8]) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        return hasher.finalize()
    }

    func add(_ handle: UInt64, _ writer: Writer) {
        open.withLock { $0.writers[handle] = writer }
        count.add(1, ordering: .relaxed)
    }

    func writer(_ handle: UInt64) -> Writer? {
        guard count.load(ordering: .relaxed) > 0 else { return nil }
        return open.withLock { $0.writers[handle] }
    }

    /// The handles open for writing `key`, with their state.
    func writers(of key: String, in container: ContainerID) -> [(handle: UInt64, writer: Writer)] {
        guard count.load(ordering: .relaxed) > 0 else { return [] }
        return open.withLock { state in
            state.writers.filter { $0.value.container == container && Self.same($0.value.key, key) }.map { ($0.key, $0.value) }
        }
    }

    /// Every writer's key in `container`, to put back with `restore` when a rename or removal
    /// the writers were moved for fails.
    func keys(in container: ContainerID) -> [UInt64: String?] {
        guard count.load(ordering: .relaxed) > 0 else { return [:] }
        return open.withLock { state in state.writers.filter { $0.value.container == container }.mapValues(\.key) }
    }

    func restore(_ keys: [UInt64: String?]) {
        open.withLock { state in
            for (handle, key) in keys { state.writers[handle]?.key = key }
        }
    }

    /// The file of `key` is renamed to `newKey` (nil: removed): its open writers follow it,
    /// reading what they hold as `kind` when given (the kind of the key they now set); the
    /// writers of the key it replaces no longer set anything.
    func moved(_ key: String, to newKey: String?, kind: String? = nil, in container: ContainerID) {
        guard count.load(ordering: .relaxed) > 0 else { return }
        open.withLock { state in
            for (handle, writer) in state.writers where writer.container == container {
                if newKey != nil && Self.same(writer.key, newKey) && !Self.same(key, newKey) { state.writers[handle]!.key = nil }
                if Self.same(writer.key, key) {
                    state.writers[handle]!.key = newKey
                    if let kind { state.writers[handle]!.kind = kind }
                }
            }
        }
    }

    /// The files of `key` and `other` were exchanged: their open writers follow them.
    func exchanged(_ key: String, _ other: String, in container: ContainerID) {
        guard count.load(ordering: .relaxed) > 0 else { return }
        open.withLock { state in
            for (handle, writer) in state.writers where writer.container == container {
                if Self.same(writer.key, key) {
                    state.writers[handle]!.key = other
                } else if Self.same(writer.key, other) {
                    state.writers[handle]!.key = key
                }
            }
        }
    }

    /// A write through `handle` was refused as too big.
    func overflowed(_ handle: UInt64) {
        open.withLock { $0.writers[handle]?.overflowed = true }
    }

    /// `handle` was written (or truncated) since the last commit.
    func changed(_ handle: UInt64, written: Bool) {
        open.withLock { state in
            guard state.writers[handle] != nil else { return }
            state.changes += 1
            state.writers[handle]!.changed = true
            state.writers[handle]!.lastChange = state.changes
            if written { state.writers[handle]!.wrote = true } else { state.writers[handle]!.truncated = true }
        }
    }

    /// `handle` set bytes of `digest`: its next commit needs new changes.
    func committed(_ handle: UInt64, digest: Int) {
        open.withLock { state in
            state.writers[handle]?.wrote = false
            state.writers[handle]?.truncated = false
            state.writers[handle]?.setDigest = digest
        }
    }

    func remove(_ handle: UInt64) -> Writer? {
        guard count.load(ordering: .relaxed) > 0 else { return nil }
        let removed = open.withLock { $0.writers.removeValue(forKey: handle) }
        if removed != nil { count.subtract(1, ordering: .relaxed) }
        return removed
    }
}
