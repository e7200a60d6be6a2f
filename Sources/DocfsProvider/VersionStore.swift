import CLinux
import DocfsChunks
import DocfsCore
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Who made a version, as far as docfs knows: the process that opened the item for writing
/// (on the machine that saved it), and for a version that came from another machine linked to
/// the same remote, that machine and the user the remote says made it. A version made here has
/// no machine: it is this store's (`docfs versions` names the machine the store is linked as).
public struct Author: Codable, Sendable, Equatable {
    public var pid: Int32?
    public var uid: UInt32?
    public var command: String?
    /// The machine that made it, when another did.
    public var machine: String?
    /// The user there, as the remote records it.
    public var user: String?

    public init(pid: Int32, uid: UInt32, command: String) {
        self.pid = pid
        self.uid = uid
        self.command = command
    }

    /// A version made on `machine` by `user` (another machine linked to the same remote).
    public init(machine: String, user: String) {
        self.machine = machine
        self.user = user
    }
}

/// What docfs records about a kept version of an item's content.
public struct VersionRecord: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        /// Content a later save superseded.
        case previous
        /// Content that lost a race with another save (C4); kept until resolved.
        case conflict
    }

    public var version: UInt64
    public var kind: Kind
    /// When the content was last modified (seconds since 1970).
    public var modified: Double
    /// When docfs kept it.
    public var kept: Double
    public var size: Int64
    public var author: Author?
    /// Set for a version kept as a *delta*: its content is the first `size` bytes of the next
    /// newer previous version's content (or of the current file, when it is the newest) with
    /// the bytes saved in `<version>.saved`'s ranges laid over them (none for an append-only
    /// session: a prefix). See `VersionStore`.
    public var prefix: Bool?
    /// Set for a save of this machine's set aside (`VersionStore.detach`), and for versions
    /// kept from other machines beside the content: whole, and out of the chain deltas are
    /// made up from, whatever its number.
    public var detached: Bool?
    /// Set while a detached save (see `detached`) has not gone up yet as a version kept beside
    /// the current one (`RemoteVersion.previous`): every machine lists it once it has.
    public var unsent: Bool?
    /// Set by docfs before 2026-12 for a version kept from another machine under another number
    /// than the remote gave it (a save of this machine's held that one then; since saves are
    /// pending until the remote numbers them, none does): it takes the remote's number once that
    /// is free (`VersionStore.takeRemoteNumbers`). Read from stores made then; never written.
    public var remoteNumber: UInt64?
    /// For a delta, the bytes saved so far (filled in when listed, not stored).
    public var savedBytes: Int64?
    /// For a version kept as chunks, the bytes of the chunks no other version uses: what
    /// removing it frees (filled in when listed, not stored).
    public var ownChunkBytes: Int64?

    private enum CodingKeys: String, CodingKey {
        case version, kind, modified, kept, size, author, prefix, detached, unsent, remoteNumber
    }

    public init(version: UInt64, kind: Kind, modified: Double, kept: Double, size: Int64, author: Author?,
                prefix: Bool = false) {
        self.version = version
        self.kind = kind
        self.modified = modified
        self.kept = kept
        self.size = size
        self.author = author
        self.prefix = prefix ? true : nil
    }

    /// Whether the version is a delta of the next newer state (a prefix when nothing is saved).
    public var isPrefix: Bool { prefix == true }

    /// Whether it is in the chain deltas are made up from: a previous version not detached.
    public var isInChain: Bool { kind == .previous && detached != true }

    /// Whether the version's content is kept as chunks (known when listed).
    public var isChunked: Bool { ownChunkBytes != nil }

    /// The bytes the version takes in the store: a delta's saved bytes, the chunks only it
    /// uses, or a whole copy's size.
    public var storedSize: Int64 { ownChunkBytes ?? (isPrefix ? savedBytes ?? 0 : size) }
}

/// The previous and conflict versions of items, kept by the local provider:
/// `STORE/versions/<item id>/<version>.json` is a version's record, and its content is either
/// `<version>.chunks/` (a `ChunkManifest`: content-defined chunks of the store's `ChunkStore`,
/// each stored once however many versions share it), or the file `<version>` (content smaller
/// than a chunk, or a superseded file linked in by a safe-save replace until the background
/// settler cuts it into chunks), or, for a delta, nothing but saved ranges (below). Content
/// arrives complete under a temporary name and is renamed into place, so nobody ever sees a
/// version half written.
///
/// A version an append-only session superseded is kept as a *prefix*: a record alone, whose
/// content is the first `size` bytes of the next newer previous version of the item (or of the
/// current file, when it is the newest). The sessions between two previous versions of an item
/// only ever append to a prefix, because whoever is about to change the content otherwise makes
/// the newest prefix a copy first (`materializeNewestPrefix`), and pruning removes an item's
/// versions oldest first, so a prefix never loses what it points to.
///
/// Lock order: `usage` and `settling` are leaf locks, never held across file operations.
public final class VersionStore: Sendable {
    public let directory: String
    public let policy: VersionPolicy
    /// Where chunked versions' chunks live (by default `chunks` beside `directory`).
    public let chunks: ChunkStore
    /// Called with a promised file about to be kept (`keepFile`, `keepCopy`): it downloads the
    /// content first, so a version never holds what is not there yet (set by the filesystem).
    public let beforeKeeping = ThrowingCallback<Int32>()
    /// Called with the file of a version kept promised (`keepFile(_:item:record:promised:)`)
    /// about to be read: it downloads the content (set by the filesystem, which has the remote).
    public let beforeReading = ThrowingCallback<Int32>()
    /// Called with the item and promise number of a version kept promised that was removed:
    /// the record of its promise goes too (set by the filesystem).
    public let removedPromised = Callback<(ItemID, UInt64)>()
    /// Bytes the kept versions take, counted on first need.
    private let usage = Mutex<Int64?>(nil)
    /// Whole versions waiting to be cut into chunks, and whether the settler thread runs.
    let settling = Mutex<SettleQueue>(SettleQueue())
    let settleSignal = ThreadSemaphore()

    /// Whether new saves are *pending* (`VersionNumber`): the store is linked to a remote, which
    /// numbers them when they go up. Set by whoever serves the store.
    public let numbersPending = Atomic<Bool>(false)

    public init(directory: String, policy: VersionPolicy, chunks: ChunkStore? = nil) {
        self.directory = directory
        self.policy = policy
        let parent = directory.lastIndex(of: "/").map { String(directory[..<$0]) } ?? "."
        self.chunks = chunks ?? ChunkStore(directory: parent + "/chunks")
    }

    /// Removes what a daemon that died while keeping a version left half done (`.incoming-*`,
    /// records whose content never arrived, and versions linked from a file a replace never
    /// got to move away: still a second name of the current content, they are no version of
    /// it). Call before serving.
    public func removeLeftovers() {
        chunks.removeLeftovers()
        for name in Self.names(in: directory) {
            if name.hasPrefix(Self.scratchPrefix) { unlink(directory + "/" + name) }
            guard let item = ItemID(text: name) else { continue }
            let folder = itemDirectory(item)
            var entries = Self.names(in: folder)
            for entry in entries where entry.hasPrefix(".incoming-") || entry.hasSuffix(".json.tmp") {
                if unlink(folder + "/" + entry) != 0 && errno == EISDIR { ChunkManifest.remove(folder + "/" + entry, store: chunks) }
            }
            var whole: [UInt64] = []
            for entry in entries where UInt64(entry) != nil {
                var st = stat()
                guard lstat(folder + "/" + entry, &st) == 0 else { continue }
                // A second name of the current content, or a copy settled into chunks already.
                if st.st_nlink > 1 || entries.contains(entry + ".chunks") {
                    unlink(folder + "/" + entry)
                    entries.removeAll { $0 == entry }
                } else if st.st_size >= chunks.chunker.minimumSize {
                    whole.append(UInt64(entry)!)
                }
            }
            for entry in entries where entry.hasSuffix(".chunks") && !entries.contains(entry.dropLast(7) + ".json") {
                ChunkManifest.remove(folder + "/" + entry, store: chunks)
            }
            for entry in entries where entry.hasSuffix(".json") {
                let base = String(entry.dropLast(5))
                if entries.contains(base) || entries.contains(base + ".chunks") { continue }
                guard let version = UInt64(base), (try? readRecord(item, version))?.isPrefix == true else {
                    unlink(folder + "/" + entry)
                    continue
                }
            }
            // Whole versions of a chunk or more a daemon kept (or an older docfs) get cut into chunks.
            for version in whole where entries.contains(String(version) + ".json") { settleLater(item, version: version) }
        }
    }

    func itemDirectory(_ item: ItemID) -> String { directory + "/" + item.description }

    public func contentPath(_ item: ItemID, _ version: UInt64) -> String { itemDirectory(item) + "/\(version)" }

    func recordPath(_ item: ItemID, _ version: UInt64) -> String { contentPath(item, version) + ".json" }

    /// Keeps a copy of what `fd` (open for reading) holds as `record.version` of `item`: as
    /// chunks (only those not stored yet are written) unless it is smaller than a chunk.
    public func keepCopy(of fd: Int32, item: ItemID, record: VersionRecord) throws(DocfsError) {
        if PromisedContent.promisedNumber(fd) != nil { try beforeKeeping(fd) }
        if record.size >= Int64(chunks.chunker.minimumSize) { return try keepChunks(of: fd, item: item, record: record) }
        let incoming = try makeIncoming(item)
        let copied = try copy(fd, length: record.size, to: incoming, what: "version \(record.version) of item \(item)")
        var kept = record
        kept.size = copied
        if try publish(incoming, item: item, record: kept) { account(copied) }
    }

    /// Copies the first `length` bytes of `fd` (fewer if it is shorter) into a new file at
    /// `incoming`; answers how many. Removes the file when it fails.
    func copy(_ fd: Int32, length: Int64, to incoming: String, what: String) throws(DocfsError) -> Int64 {
        let out = open(incoming, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw failure("cannot create \(incoming)") }
        defer { close(out) }
        do {
            // The file may have shrunk meanwhile: what there was is kept.
            return try copyRange(0..<length, from: fd, to: out, failing: "cannot copy \(what) into \(incoming)")
        } catch {
            unlink(incoming)
            throw error
        }
    }

    /// Copies `range` of `source` to the same offsets of `target`, stopping early where
    /// `source` ends; answers the offset it reached. Fails with `message` (ENOSPC on a full disk).
    func copyRange(_ range: Range<Int64>, from source: Int32, to target: Int32,
                   failing message: @autoclosure () -> String) throws(DocfsError) -> Int64 {
        do {
            return try FileCopy.range(range, from: source, to: target)
        } catch {
            throw failure(message(), errno: error.systemErrno ?? EIO)
        }
    }

    /// Keeps the file `fd` (an O_PATH descriptor) refers to, as it is, as `record.version` of
    /// `item`: a second name for the superseded file, so nothing is copied. A promised file is
    /// downloaded first, unless `promised`: then it is kept promised, fetched when first read.
    public func keepFile(_ fd: Int32, item: ItemID, record: VersionRecord, promised: Bool = false) throws(DocfsError) {
        if !promised, PromisedContent.promisedNumber(fd) != nil { try beforeKeeping(fd) }
        let incoming = try makeIncoming(item)
        var r = linkat(fd, "", AT_FDCWD, incoming, DOCFS_AT_EMPTY_PATH)
        if r != 0 && (errno == ENOENT || errno == EPERM) {
            r = linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, incoming, AT_SYMLINK_FOLLOW)
        }
        guard r == 0 else { throw failure("cannot keep version \(record.version) of item \(item)") }
        if record.remoteNumber != nil { try mark(item, remoteNumbersMark(item), "as holding versions under another number than the remote's") }
        guard try publish(incoming, item: item, record: record) else { return }
        // A version kept promised takes no room until it is fetched (`fetchIfPromised` counts it then).
        account(promised ? 0 : record.storedSize)
        if promised { markPromised(item) } else { settleLater(item, version: record.version) }
    }

    /// Keeps `record` (the content a session is about to append to, or to change only through
    /// docfs) as a delta of the current content: only the record is written; the session saves
    /// what it is about to overwrite with `save(_:of:version:from:)`.
    public func keepPrefix(item: ItemID, record: VersionRecord) throws(DocfsError) {
        var kept = record
        kept.prefix = true
        _ = try makeItemDirectory(item)
        guard access(recordPath(item, record.version), F_OK) != 0 else { return }  // kept already
        try writeRecord(kept, of: item)
    }

    /// The first version number above `number` that no kept version of `item` has: what a
    /// new version takes (a conflict version another machine numbered may stand above the
    /// current one, DESIGN §9).
    public func firstFreeNumber(of item: ItemID, above number: UInt64) -> UInt64 {
        var next = number + 1
        // An item with no folder here has no kept version: one look instead of three.
        if access(itemDirectory(item), F_OK) != 0 && errno == ENOENT { return next }
        while isTaken(item, next) { next += 1 }
        return next
    }

    /// The number (or, linked, the pending key) a new save made on top of the content numbered
    /// `current` takes: the first one above it that no kept version of `item` holds.
    public func nextSaveNumber(of item: ItemID, after current: UInt64) -> UInt64 {
        firstFreeNumber(of: item, above: VersionNumber.after(current, pending: numbersPending.load(ordering: .relaxed)))
    }

    /// Kept version `key` of `item` (a pending save, `VersionNumber`) went up and the remote
    /// numbered it `number`: it takes that number (its record, content and saved ranges are
    /// renamed; it is no longer unsent). No version here holds a number the remote gives but
    /// the one it is: a holder is an error. Answers whether `key` was kept.
    @discardableResult
    public func takeNumber(_ item: ItemID, key: UInt64, number: UInt64) throws(DocfsError) -> Bool {
        guard key != number, var record = try? readRecord(item, key) else { return false }
        guard !isTaken(item, number) else {
            throw failure("version \(VersionNumber.shown(key)) of item \(item) cannot take number \(number): another version holds it", errno: EEXIST)
        }
        record.unsent = nil
        _ = try renumber(item, record, to: number)
        return true
    }

    /// Removes kept version `version` of `item` (the current content, `current`, holds the same
    /// bytes under its number now); the delta kept right below it in the chain, made up from
    /// it, is made whole first.
    public func removeRepeated(_ item: ItemID, version: UInt64, current: String) throws(DocfsError) {
        guard let record = try? readRecord(item, version) else { return }
        if record.isInChain, let below = versions(of: item).filter(\.isInChain).last(where: { $0.version < version }), below.isPrefix {
            try makeWhole(item, version: below.version, current: current)
        }
        remove(item, version: version)
    }

    /// Takes previous version `version` of `item` (a save made here that never went up and
    /// lost its race, or that another machine's content comes after) out of the chain deltas
    /// are made up from, *detached*: made whole first, so a version numbered above the current
    /// content never becomes what a later delta is made from. The previous version right below
    /// it, when a delta of it, is made whole first too. A pending save (`VersionNumber`) keeps
    /// its key; a numbered one (a store from before pending saves) moves past `minimum` and
    /// every number kept. `current`: the current content's path, for deltas made up from it.
    /// Answers the number it has then; nil when the number holds no previous version.
    /// `sendFrom`: a save kept at or after this time, in the chain, is marked to go up set aside
    /// (`unsent`); one kept from another machine, or from before the store was linked, is not.
    public func detach(_ item: ItemID, version: UInt64, past minimum: UInt64, current: String?,
                       sendFrom linked: Double = .infinity) throws(DocfsError) -> UInt64? {
        guard var record = try? readRecord(item, version), record.kind == .previous else { return nil }
        let ours = record.isInChain && (record.kept >= linked || VersionNumber.isPending(version))
        let kept = versions(of: item)
        let chain = kept.filter(\.isInChain)
        let source = current ?? "/nonexistent"
        if record.isInChain, let below = chain.last(where: { $0.version < version }), below.isPrefix {
            try makeWhole(item, version: below.version, current: source)
        }
        if record.isPrefix {
            try makeWhole(item, version: version, current: source)
            guard let whole = try? readRecord(item, version) else { return nil }
            record = whole
        }
        // A pending save keeps its key (no remote number can be held by it).
        let new = VersionNumber.isPending(version) ? version : max(minimum, kept.last?.version ?? 0) + 1
        record.version = new
        record.detached = true
        if ours { record.unsent = true }
        // The new record first, the old one last: a crash between leaves a record without
        // content, which the next start removes (`removeLeftovers`), never content without one.
        try writeRecord(record, of: item)
        if ours { try markUnsent(item) }
        guard new != version else { return new }
        for (from, to) in [(contentPath(item, version), contentPath(item, new)), (chunksPath(item, version), chunksPath(item, new))] {
            _ = docfs_renameat2(AT_FDCWD, from, AT_FDCWD, to, DOCFS_RENAME_NOREPLACE)
        }
        unlink(recordPath(item, version))
        settleLater(item, version: new)
        return new
    }

    /// Previous version `version` of `item`, a save made here that never went up, holds what the
    /// remote committed as conflict version `version` (this machine's save lost its race, and
    /// the document changed here again before the winner was taken): it *is* that conflict
    /// version, so it becomes one (made whole, out of the chain, never sent up again) instead of
    /// going up once more as a save. `current`: the current content's path, for deltas made up
    /// from it. Answers whether it changed.
    public func becomeConflict(_ item: ItemID, version: UInt64, current: String?) throws(DocfsError) -> Bool {
        guard var record = try? readRecord(item, version), record.kind == .previous else { return false }
        let source = current ?? "/nonexistent"
        if record.isInChain, let below = versions(of: item).filter(\.isInChain).last(where: { $0.version < version }), below.isPrefix {
            try makeWhole(item, version: below.version, current: source)
        }
        if record.isPrefix {
            try makeWhole(item, version: version, current: source)
            guard let whole = try? readRecord(item, version) else { return false }
            record = whole
        }
        record.kind = .conflict
        (record.detached, record.unsent) = (nil, nil)
        try writeRecord(record, of: item)
        return true
    }

    /// The numbers of `item`'s detached saves that have not gone up yet (`VersionRecord.unsent`),
    /// lowest first. An item with none has no mark: one look, not a read of every record.
    public func unsentDetached(of item: ItemID) -> [UInt64] {
        guard access(unsentMark(item), F_OK) == 0 else { return [] }
        let numbers = versions(of: item).filter { $0.unsent == true }.map(\.version)
        if numbers.isEmpty { unlink(unsentMark(item)) }
        return numbers
    }

    /// Marks `item` as having a detached save not gone up (made before its record says so).
    private func markUnsent(_ item: ItemID) throws(DocfsError) {
        try mark(item, unsentMark(item), "as not all gone up")
    }

    /// Makes the mark file `path` in `item`'s folder (which it makes first, if need be), so
    /// that a look for what it marks costs one access(2) for items without it.
    private func mark(_ item: ItemID, _ path: String, _ what: String) throws(DocfsError) {
        mkdir(itemDirectory(item), 0o700)
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("cannot mark item \(item)'s versions \(what)") }
        close(fd)
    }

    private func unsentMark(_ item: ItemID) -> String { itemDirectory(item) + "/.unsent" }

    private func remoteNumbersMark(_ item: ItemID) -> String { itemDirectory(item) + "/.remote-numbers" }

    /// Whether a version of `item` may be kept under another number than the remote's
    /// (`VersionRecord.remoteNumber`): one look.
    public func holdsRemoteNumbers(_ item: ItemID) -> Bool { access(remoteNumbersMark(item), F_OK) == 0 }

    /// Versions of `item` kept under another number than the remote gave them take the
    /// remote's where it is free now, unless `held` says something here is about to take it
    /// (the content's number, a write session's). Answers the numbers they took.
    @discardableResult
    public func takeRemoteNumbers(of item: ItemID, unless held: (UInt64) -> Bool) throws(DocfsError) -> [UInt64] {
        guard holdsRemoteNumbers(item) else { return [] }
        let waiting = versions(of: item).filter { $0.remoteNumber != nil }
        var taken: [UInt64] = []
        for var record in waiting {
            let number = record.remoteNumber!
            guard !isTaken(item, number), !held(number) else { continue }
            record.remoteNumber = nil
            taken.append(try renumber(item, record, to: number))
        }
        if waiting.count == taken.count { unlink(remoteNumbersMark(item)) }
        return taken
    }

    /// Moves version `record` (its record as it is to be written) of `item` to number `number`,
    /// which nothing holds. As `detach`: the new record first, the old one last.
    private func renumber(_ item: ItemID, _ record: VersionRecord, to number: UInt64) throws(DocfsError) -> UInt64 {
        let version = record.version
        var moved = record
        moved.version = number
        try writeRecord(moved, of: item)
        for (from, to) in [(contentPath(item, version), contentPath(item, number)), (chunksPath(item, version), chunksPath(item, number)),
                           (savedPath(item, version), savedPath(item, number))] {
            _ = docfs_renameat2(AT_FDCWD, from, AT_FDCWD, to, DOCFS_RENAME_NOREPLACE)
        }
        unlink(recordPath(item, version))
        settleLater(item, version: number)
        return number
    }

    /// The record of kept version `version` of `item`, if there is one.
    public func record(of item: ItemID, version: UInt64) -> VersionRecord? { try? readRecord(item, version) }

    /// Whether a kept version of `item` has the number `version`.
    public func isTaken(_ item: ItemID, _ version: UInt64) -> Bool {
        access(recordPath(item, version), F_OK) == 0 || access(contentPath(item, version), F_OK) == 0
            || access(chunksPath(item, version), F_OK) == 0
    }

    /// The kept versions of `item`, oldest first.
    public func versions(of item: ItemID) -> [VersionRecord] {
        let records = Self.names(in: itemDirectory(item)).compactMap { name -> VersionRecord? in
            guard name.hasSuffix(".json"), let version = UInt64(name.dropLast(5)),
                  var record = try? readRecord(item, version) else { return nil }
            if record.isPrefix { record.savedBytes = savedRanges(of: item, version: version).byteCount }
            if let own = ownChunkBytes(item, version) { record.ownChunkBytes = own }
            return record
        }
        return records.sorted { $0.version < $1.version }
    }

    /// Whether kept version `version` of `item` holds the same bytes as the file at `path`.
    public func sameContent(_ item: ItemID, version: UInt64, as path: String) -> Bool {
        if access(chunksPath(item, version), F_OK) == 0 {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            var st = stat()
            return fstat(fd, &st) == 0 && ChunkManifest.matches(chunksPath(item, version), fd: fd, length: Int64(st.st_size), chunker: chunks.chunker)
        }
        let a = open(contentPath(item, version), O_RDONLY | O_CLOEXEC)
        let b = open(path, O_RDONLY | O_CLOEXEC)
        defer {
            if a >= 0 { close(a) }
            if b >= 0 { close(b) }
        }
        guard a >= 0, b >= 0 else { return false }
        var left = [UInt8](repeating: 0, count: 1 << 16)
        var right = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = left.withUnsafeMutableBytes { read(a, $0.baseAddress, $0.count) }
            guard n >= 0 else { return false }
            var m = 0
            while m < n {  // read the same amount from the other
                let k = right.withUnsafeMutableBytes { read(b, $0.baseAddress! + m, n - m) }
                guard k > 0 else { return false }
                m += k
            }
            if n == 0 {
                let k = right.withUnsafeMutableBytes { read(b, $0.baseAddress, 1) }
                return k == 0
            }
            if left[0..<n] != right[0..<n] { return false }
        }
    }

    /// Removes a kept version, and the chunks only it used; the store's usage drops by what
    /// that freed.
    public func remove(_ item: ItemID, version: UInt64) {
        var freed: Int64 = 0
        let promise = promiseNumber(item, version: version)  // kept promised: nothing on disk to free
        if promise == nil, let record = try? readRecord(item, version), record.kind == .previous, !record.isPrefix {
            var st = stat()
            if stat(contentPath(item, version), &st) == 0 { freed += Int64(st.st_size) }
        } else if access(savedPath(item, version), F_OK) == 0 {
            freed += savedRanges(of: item, version: version).byteCount
        }
        unlink(recordPath(item, version))
        unlink(contentPath(item, version))
        unlink(savedPath(item, version))
        if let promise { removedPromised((item, promise)) }
        freed += ChunkManifest.remove(chunksPath(item, version), store: chunks)
        rmdir(itemDirectory(item))  // only when it was the last
        account(-freed)
    }

    /// Drops the versions of `item` the policy no longer keeps (too many, too old), then the
    /// oldest of the whole store while they take more than the total allowed. Conflict
    /// versions stay until they are resolved.
    public func prune(_ item: ItemID, now: Double) {
        // What a session's end usually finds: no more versions than kept, the oldest young
        // enough. One record read instead of every one the item has.
        let numbers = Self.names(in: itemDirectory(item)).compactMap { name in
            name.hasSuffix(".json") ? UInt64(name.dropLast(5)) : nil
        }
        if numbers.count <= policy.maximumCount, let oldest = numbers.min(),
           let record = try? readRecord(item, oldest), record.kind == .previous, now - record.kept <= policy.maximumAge {
            if account(0) > policy.maximumTotalSize { pruneStore() }
            return
        }
        let previous = versions(of: item).filter { $0.kind == .previous }
        let tooMany = previous.count - policy.maximumCount
        for (index, record) in previous.enumerated()
        where index < tooMany || now - record.kept > policy.maximumAge {
            remove(item, version: record.version)
        }
        if account(0) > policy.maximumTotalSize { pruneStore() }
    }

    /// Bytes all kept previous versions of the store take (counted on first need).
    public func storedSize() -> Int64 { account(0) }

    /// Adds `delta` bytes to the usage (counting it first if need be) and answers the total.
    @discardableResult
    func account(_ delta: Int64) -> Int64 {
        if let total = usage.withLock({ current -> Int64? in
            guard let value = current else { return nil }
            current = value + delta
            return value + delta
        }) { return total }
        // Chunks are counted once, however many versions share them.
        let counted = allPrevious().reduce(0) { total, kept in
            total + (kept.record.isChunked || isPromised(kept.item, version: kept.record.version) ? 0 : kept.record.storedSize)
        } + chunks.storedBytes()
        return usage.withLock { current in
            current = counted
            return counted
        }
    }

    private func pruneStore() {
        // Oldest first, and by version within an item: a prefix goes before what it points to.
        var all = allPrevious().sorted { ($0.record.kept, $0.record.version) < ($1.record.kept, $1.record.version) }
        // Down to 90%, so the next save does not prune again at once.
        let target = policy.maximumTotalSize / 10 * 9
        while account(0) > target, !all.isEmpty {
            let oldest = all.removeFirst()
            remove(oldest.item, version: oldest.record.version)
        }
    }

    private func allPrevious() -> [(item: ItemID, record: VersionRecord)] {
        Self.names(in: directory).compactMap { ItemID(text: $0) }.flatMap { item in
            versions(of: item).filter { $0.kind == .previous }.map { (item, $0) }
        }
    }

    /// The names in a folder of docfs's own (all ASCII); none when it does not exist.
    static func names(in path: String) -> [String] { ChunkStore.names(in: path) }

    func readRecord(_ item: ItemID, _ version: UInt64) throws -> VersionRecord {
        guard let bytes = try StoreFiles.read(recordPath(item, version)) else { throw DocfsError(.system(.noSuchFileOrDirectory), "") }
        return try JSONDecoder().decode(VersionRecord.self, from: Data(bytes))
    }

    func makeIncoming(_ item: ItemID) throws(DocfsError) -> String {
        try makeItemDirectory(item) + "/.incoming-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    }

    /// The folder of `item`'s versions, made if need be.
    private func makeItemDirectory(_ item: ItemID) throws(DocfsError) -> String {
        let folder = itemDirectory(item)
        // Looked up first: a mkdir of a folder that is there takes the versions folder's lock
        // exclusively, and every session of a versioned item would queue on it.
        if access(folder, F_OK) == 0 { return folder }
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            if errno == ENOENT {
                try LocalStore.makeDirectory(directory)
                return try makeItemDirectory(item)
            }
            throw failure("cannot create \(folder)")
        }
        return folder
    }

    /// Gives the finished content its name, then records it: a version is listed only once
    /// its content is in place.
    /// `incoming` is a file (the content itself) or, when `chunked`, a manifest folder.
    /// Answers whether it was published (false: the version was kept already, and `incoming`
    /// is gone).
    @discardableResult
    func publish(_ incoming: String, item: ItemID, record: VersionRecord, chunked: Bool = false) throws(DocfsError) -> Bool {
        let target = chunked ? chunksPath(item, record.version) : contentPath(item, record.version)
        let discard = { [chunks] in
            if chunked { ChunkManifest.remove(incoming, store: chunks) } else { unlink(incoming) }
        }
        // Never over a version kept already: that one stays (it may be a file someone still
        // writes, kept by a replace).
        let other = chunked ? contentPath(item, record.version) : chunksPath(item, record.version)
        guard access(other, F_OK) != 0 else {
            discard()
            return false
        }
        guard docfs_renameat2(AT_FDCWD, incoming, AT_FDCWD, target, DOCFS_RENAME_NOREPLACE) == 0 else {
            let collision = errno == EEXIST
            let error = failure("cannot keep version \(record.version) of item \(item)")
            discard()
            if collision { return false }
            throw error
        }
        do throws(DocfsError) {
            try writeRecord(record, of: item)
        } catch {
            if chunked { ChunkManifest.remove(target, store: chunks) } else { unlink(target) }
            throw error
        }
        return true
    }

    /// Writes `record` as the record of its version of `item`.
    func writeRecord(_ record: VersionRecord, of item: ItemID) throws(DocfsError) {
        do {
            try StoreFiles.replace(recordPath(item, record.version), with: Array(try JSONEncoder().encode(record)), durable: false)
        } catch {
            throw recordFailure(record.version, item, error)
        }
    }

    /// A scratch file in the version store's folder (made if need be, so on the same file
    /// system as the versions, which `keepFile` can link it into): content on its way to be
    /// kept or read. Answers its descriptor and path; the caller closes and unlinks it (one a
    /// daemon that died left goes at the next `removeLeftovers`).
    public func scratchFile(_ purpose: String) throws(DocfsError) -> (fd: Int32, path: String) {
        try LocalStore.makeDirectory(directory)
        var template = Array((directory + "/" + Self.scratchPrefix + purpose + "-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw failure("cannot make a scratch file for versions") }
        return (fd, String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    /// How the names of scratch files begin.
    static let scratchPrefix = ".scratch-"

    /// The error of a failed step of keeping a version, errno as it is now: a full disk (or
    /// quota) stays ENOSPC (EDQUOT), so the open that wanted the version fails with it.
    func failure(_ message: String, errno reason: Int32 = errno) -> DocfsError {
        let cause = DocfsError.errno("versions", reason)
        if reason == ENOSPC || reason == EDQUOT { return Self.full(message, reason, cause: cause) }
        return DocfsError(.storeUnavailable, message, cause: cause)
    }

    /// The same for a version's record, which `StoreFiles` failed to write (`error`).
    func recordFailure(_ version: UInt64, _ item: ItemID, _ error: any Error) -> DocfsError {
        let message = "cannot record version \(version) of item \(item)"
        var cause: (any Error)? = error
        while let current = cause as? DocfsError {
            if let e = current.systemErrno, e == ENOSPC || e == EDQUOT { return Self.full(message, e, cause: current) }
            cause = current.cause
        }
        return DocfsError(.storeUnavailable, message, cause: DocfsError(.internalFailure, String(describing: error)))
    }

    private static func full(_ message: String, _ errno: Int32, cause: DocfsError) -> DocfsError {
        var error = DocfsError.errno(message + ": the disk is full; free some space, or keep fewer versions "
                                     + "(versions.maximumTotalMiB in the store's settings.json)", errno)
        error.cause = cause
        return error
    }
}
