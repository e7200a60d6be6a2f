import CLinux
import DocfsCore
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Who made a version, as far as docfs knows: the process that opened the item for writing.
public struct Author: Codable, Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var command: String

    public init(pid: Int32, uid: UInt32, command: String) {
        self.pid = pid
        self.uid = uid
        self.command = command
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

    public init(version: UInt64, kind: Kind, modified: Double, kept: Double, size: Int64, author: Author?) {
        self.version = version
        self.kind = kind
        self.modified = modified
        self.kept = kept
        self.size = size
        self.author = author
    }
}

/// The previous and conflict versions of items, kept by the local provider as plain files:
/// `STORE/versions/<item id>/<version>` holds the content and `<version>.json` its record.
/// Content arrives either as a copy (a write session in place) or as the superseded file itself,
/// linked in (a safe-save replace), so nobody ever sees a version half written: it appears under
/// its final name complete.
///
/// Lock order: `usage` is a leaf lock, never held across file operations.
public final class VersionStore: Sendable {
    public let directory: String
    public let policy: VersionPolicy
    /// Bytes the kept versions take, counted on first need.
    private let usage = Mutex<Int64?>(nil)

    public init(directory: String, policy: VersionPolicy) {
        self.directory = directory
        self.policy = policy
    }

    /// Removes what a daemon that died while keeping a version left half done (`.incoming-*`,
    /// records whose content never arrived, and versions linked from a file a replace never
    /// got to move away: still a second name of the current content, they are no version of
    /// it). Call before serving.
    public func removeLeftovers() {
        for name in Self.names(in: directory) {
            guard let item = ItemID(text: name) else { continue }
            let folder = itemDirectory(item)
            var entries = Self.names(in: folder)
            for entry in entries where entry.hasPrefix(".incoming-") || entry.hasSuffix(".json.tmp") {
                unlink(folder + "/" + entry)
            }
            for entry in entries where UInt64(entry) != nil {
                var st = stat()
                if lstat(folder + "/" + entry, &st) == 0 && st.st_nlink > 1 {
                    unlink(folder + "/" + entry)
                    entries.removeAll { $0 == entry }
                }
            }
            for entry in entries where entry.hasSuffix(".json") && !entries.contains(String(entry.dropLast(5))) {
                unlink(folder + "/" + entry)
            }
        }
    }

    func itemDirectory(_ item: ItemID) -> String { directory + "/" + item.description }

    public func contentPath(_ item: ItemID, _ version: UInt64) -> String { itemDirectory(item) + "/\(version)" }

    private func recordPath(_ item: ItemID, _ version: UInt64) -> String { contentPath(item, version) + ".json" }

    /// Keeps a copy of what `fd` (open for reading) holds as `record.version` of `item`.
    public func keepCopy(of fd: Int32, item: ItemID, record: VersionRecord) throws(DocfsError) {
        let incoming = try makeIncoming(item)
        let out = open(incoming, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw failure("cannot create \(incoming)") }
        var inOffset: off_t = 0
        var copied: Int64 = 0
        while copied < record.size {
            let n = docfs_copy_file_range(fd, &inOffset, out, nil, Int(min(record.size - copied, 1 << 30)), 0)
            if n < 0 {
                if errno == EINTR { continue }
                let error = failure("cannot copy version \(record.version) of item \(item) into \(incoming)")
                close(out)
                unlink(incoming)
                throw error
            }
            if n == 0 { break }  // the file shrank meanwhile: keep what there was
            copied += Int64(n)
        }
        close(out)
        var kept = record
        kept.size = copied
        try publish(incoming, item: item, record: kept)
        account(copied)
    }

    /// Keeps the file `fd` (an O_PATH descriptor) refers to, as it is, as `record.version` of
    /// `item`: a second name for the superseded file, so nothing is copied.
    public func keepFile(_ fd: Int32, item: ItemID, record: VersionRecord) throws(DocfsError) {
        let incoming = try makeIncoming(item)
        var r = linkat(fd, "", AT_FDCWD, incoming, DOCFS_AT_EMPTY_PATH)
        if r != 0 && (errno == ENOENT || errno == EPERM) {
            r = linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, incoming, AT_SYMLINK_FOLLOW)
        }
        guard r == 0 else { throw failure("cannot keep version \(record.version) of item \(item)") }
        try publish(incoming, item: item, record: record)
        account(record.size)
    }

    /// The kept versions of `item`, oldest first.
    public func versions(of item: ItemID) -> [VersionRecord] {
        let records = Self.names(in: itemDirectory(item)).compactMap { name -> VersionRecord? in
            guard name.hasSuffix(".json"), let version = UInt64(name.dropLast(5)) else { return nil }
            return try? readRecord(item, version)
        }
        return records.sorted { $0.version < $1.version }
    }

    /// Whether kept version `version` of `item` holds the same bytes as the file at `path`.
    public func sameContent(_ item: ItemID, version: UInt64, as path: String) -> Bool {
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

    public func remove(_ item: ItemID, version: UInt64) {
        unlink(recordPath(item, version))
        unlink(contentPath(item, version))
        rmdir(itemDirectory(item))  // only when it was the last
    }

    /// Drops the versions of `item` the policy no longer keeps (too many, too old), then the
    /// oldest of the whole store while they take more than the total allowed. Conflict
    /// versions stay until they are resolved.
    public func prune(_ item: ItemID, now: Double) {
        let previous = versions(of: item).filter { $0.kind == .previous }
        let tooMany = previous.count - policy.maximumCount
        for (index, record) in previous.enumerated()
        where index < tooMany || now - record.kept > policy.maximumAge {
            remove(item, version: record.version)
            account(-record.size)
        }
        if account(0) > policy.maximumTotalSize { pruneStore() }
    }

    /// Adds `delta` bytes to the usage (counting it first if need be) and answers the total.
    @discardableResult
    private func account(_ delta: Int64) -> Int64 {
        if let total = usage.withLock({ current -> Int64? in
            guard let value = current else { return nil }
            current = value + delta
            return value + delta
        }) { return total }
        let counted = allPrevious().reduce(0) { $0 + $1.record.size }
        return usage.withLock { current in
            current = counted
            return counted
        }
    }

    private func pruneStore() {
        var all = allPrevious().sorted { $0.record.kept < $1.record.kept }
        var total = all.reduce(0) { $0 + $1.record.size }
        // Down to 90%, so the next save does not prune again at once.
        let target = policy.maximumTotalSize / 10 * 9
        while total > target, !all.isEmpty {
            let oldest = all.removeFirst()
            remove(oldest.item, version: oldest.record.version)
            total -= oldest.record.size
        }
        usage.withLock { $0 = total }
    }

    private func allPrevious() -> [(item: ItemID, record: VersionRecord)] {
        Self.names(in: directory).compactMap { ItemID(text: $0) }.flatMap { item in
            versions(of: item).filter { $0.kind == .previous }.map { (item, $0) }
        }
    }

    /// The names in a folder of docfs's own (all ASCII); none when it does not exist.
    private static func names(in path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            names.append(withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            })
        }
        return names
    }

    private func readRecord(_ item: ItemID, _ version: UInt64) throws -> VersionRecord {
        guard let bytes = try StoreFiles.read(recordPath(item, version)) else { throw DocfsError(.system(.noSuchFileOrDirectory), "") }
        return try JSONDecoder().decode(VersionRecord.self, from: Data(bytes))
    }

    private func makeIncoming(_ item: ItemID) throws(DocfsError) -> String {
        let folder = itemDirectory(item)
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            if errno == ENOENT {
                try LocalStore.makeDirectory(directory)
                return try makeIncoming(item)
            }
            throw failure("cannot create \(folder)")
        }
        return folder + "/.incoming-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    }

    /// Gives the finished content its name, then records it: a version is listed only once
    /// its content is in place.
    private func publish(_ incoming: String, item: ItemID, record: VersionRecord) throws(DocfsError) {
        // Never over a version kept already: that one stays (it may be a file someone still
        // writes, kept by a replace).
        guard docfs_renameat2(AT_FDCWD, incoming, AT_FDCWD, contentPath(item, record.version), DOCFS_RENAME_NOREPLACE) == 0 else {
            let collision = errno == EEXIST
            let error = failure("cannot keep version \(record.version) of item \(item)")
            unlink(incoming)
            if collision { return }
            throw error
        }
        do {
            let json = try JSONEncoder().encode(record)
            try StoreFiles.replace(recordPath(item, record.version), with: Array(json), durable: false)
        } catch {
            unlink(contentPath(item, record.version))
            throw DocfsError(.storeUnavailable, "cannot record version \(record.version) of item \(item)", cause: error)
        }
    }

    private func failure(_ message: String) -> DocfsError {
        DocfsError(.storeUnavailable, message + ": is the disk full?", cause: DocfsError.errno("versions"))
    }
}
