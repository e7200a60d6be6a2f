import CLinux
import DocfsCore
import DocfsIndex
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The open key files of a view (`.docfs/kv/<key>` opened for writing): which key each
/// handle (a memory file holding the content being written) sets when it is closed, and as
/// what kind of value. Lock order: `open` is a leaf lock.
final class KeyValueHandles: Sendable {
    struct Writer: Sendable {
        let container: ContainerID
        /// The key set at close: it follows a rename of the file while open (a program that
        /// renames its temporary file before closing it); nil once the file was removed.
        var key: String?
        /// The kind the content is read as at close; nil: text when it is UTF-8, else data
        /// (a key made through its file).
        let kind: String?
        /// A write would have made the value bigger than a store holds: the close sets nothing
        /// (a value is set whole or not at all) and fails as that write did.
        var overflowed = false
        /// Written since the last commit: a close sets the value then.
        var wrote = false
        /// Truncated (an O_TRUNC open, truncate(2)) since the last commit and not written:
        /// set only at the last close or an fsync. A shell's `>` closes its first descriptor
        /// before it writes (dup2, close), and the key must not be seen empty meanwhile.
        var truncated = false
    }

    /// When a key file's content is set: each close(2) of what was written, the last close and
    /// fsync(2) of anything changed.
    enum Commit { case close, lastClose, fsync }

    private let open = Mutex<[UInt64: Writer]>([:])
    /// How many are open: a write through any other handle checks this alone.
    private let count = Atomic<Int>(0)

    func add(_ handle: UInt64, _ writer: Writer) {
        open.withLock { $0[handle] = writer }
        count.add(1, ordering: .relaxed)
    }

    func writer(_ handle: UInt64) -> Writer? {
        guard count.load(ordering: .relaxed) > 0 else { return nil }
        return open.withLock { $0[handle] }
    }

    /// The file of `key` was renamed to `newKey` (nil: removed): its open writers follow it;
    /// the writers of the key it replaced no longer set anything.
    func moved(_ key: String, to newKey: String?, in container: ContainerID) {
        guard count.load(ordering: .relaxed) > 0 else { return }
        open.withLock { open in
            for (handle, writer) in open where writer.container == container {
                if writer.key == newKey { open[handle]!.key = nil }
                if writer.key == key { open[handle]!.key = newKey }
            }
        }
    }

    /// The handles open for writing `key`.
    func writers(of key: String, in container: ContainerID) -> [UInt64] {
        guard count.load(ordering: .relaxed) > 0 else { return [] }
        return open.withLock { open in open.filter { $0.value.container == container && $0.value.key == key }.map(\.key) }
    }

    /// A write through `handle` was refused as too big.
    func overflowed(_ handle: UInt64) {
        open.withLock { $0[handle]?.overflowed = true }
    }

    /// `handle` was written (or truncated) since the last commit.
    func changed(_ handle: UInt64, written: Bool) {
        open.withLock { open in
            if written { open[handle]?.wrote = true } else { open[handle]?.truncated = true }
        }
    }

    /// What `handle` changed is set: the next commit needs new changes.
    func committed(_ handle: UInt64) {
        open.withLock { open in
            open[handle]?.wrote = false
            open[handle]?.truncated = false
        }
    }

    /// The files of `key` and `other` were exchanged: their open writers follow them.
    func exchanged(_ key: String, _ other: String, in container: ContainerID) {
        guard count.load(ordering: .relaxed) > 0 else { return }
        open.withLock { open in
            for (handle, writer) in open where writer.container == container {
                if writer.key == key { open[handle]!.key = other } else if writer.key == other { open[handle]!.key = key }
            }
        }
    }

    func remove(_ handle: UInt64) -> Writer? {
        guard count.load(ordering: .relaxed) > 0 else { return nil }
        let removed = open.withLock { $0.removeValue(forKey: handle) }
        if removed != nil { count.subtract(1, ordering: .relaxed) }
        return removed
    }
}

/// An app's key-value store as files (issue 24, DESIGN §9.3): in an app view, `.docfs/kv/`
/// holds one file per key of the app's own container, so a program in any language reads,
/// writes, makes and removes its settings with plain file calls (and hears other machines'
/// changes through `docfs kv watch`). A file's content is its value's bytes (text as UTF-8, a
/// number in decimal, `true`/`false`, JSON compact, data as it is); `user.docfs.kind` tells the
/// kind, and set, converts the value. What is written is set when the file is closed (or
/// fsynced), in one transaction held to the limits: close(2) answers EDQUOT past one, EINVAL
/// for content that is not a value of the key's kind, and nothing changes then. The user view
/// has no such folder (`docfs kv --app` reaches any app's store).
extension Filesystem {
    /// The extended attribute that tells (and, set, converts) a key file's kind of value.
    static let keyValueKindAttribute = "user.docfs.kind"

    /// `.docfs/kv/<name>`: the key's file, when the key is set.
    func keyValueFileEntry(_ name: FileName, in container: ContainerID) throws(DocfsError) -> Entry {
        let key = name.description
        guard try shared.keyValues().entry(key, in: container) != nil else { throw DocfsError.system(ENOENT) }
        return try virtualEntry(.keyValue(key), .keyValue(container: container, key: key))
    }

    /// What `.docfs/kv/` lists: a file per key.
    func keyValueFileNames(in container: ContainerID) throws(DocfsError) -> [FileName] {
        try shared.keyValues().entries(in: container).map { FileName($0.key) }
    }

    /// A key file: a regular file of its owner's (the mount root's), as big as its value (or
    /// as what an open `handle` holds), changed when the value was set here.
    func keyValueFileAttributes(_ container: ContainerID, _ key: String, handle: UInt64?, like root: stat,
                                inode: NodeID) throws(DocfsError) -> stat {
        guard let entry = try shared.keyValues().entry(key, in: container) else { throw DocfsError.system(ENOENT) }
        var st = root
        st.st_mode = S_IFREG | 0o600
        st.st_nlink = 1
        st.st_size = off_t(entry.value.bytes.count)
        if let handle, keyValueHandles.writer(handle) != nil {
            var open = stat()
            if fstat(backingDescriptor(of: handle), &open) == 0 { st.st_size = open.st_size }
        }
        st.st_blocks = blkcnt_t((Int(st.st_size) + 511) / 512)
        let changed = timespec(tv_sec: Int(entry.changed), tv_nsec: Int((entry.changed - entry.changed.rounded(.down)) * 1e9))
        (st.st_mtim, st.st_ctim) = (changed, changed)
        st.st_ino = ino_t(inode)
        return st
    }

    /// open(2) of a key file: its value in a memory file; opened for writing, the handle sets
    /// the key when it is closed.
    func openKeyValueFile(_ container: ContainerID, _ key: String, flags: Int32, inferringKind: Bool = false) throws(DocfsError) -> OpenFile {
        guard let entry = try shared.keyValues().entry(key, in: container) else { throw DocfsError.system(ENOENT) }
        let writes = flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0
        let fd = try Self.memoryFile(holding: flags & O_TRUNC != 0 ? [] : entry.value.bytes, name: "docfs-kv")
        if writes {
            var writer = KeyValueHandles.Writer(container: container, key: key, kind: inferringKind ? nil : entry.value.kind)
            writer.truncated = flags & O_TRUNC != 0
            keyValueHandles.add(UInt64(fd), writer)
        }
        return OpenFile(handle: UInt64(fd), directIO: true, keepCache: false, mayPassThrough: false)
    }

    /// creat(2) in `.docfs/kv/`: the key is set (to empty text) at once, so it is listed and
    /// counted from now on; what is written is set at close.
    func createKeyValueFile(_ name: FileName, in container: ContainerID, flags: Int32) throws(DocfsError) -> (Entry, OpenFile) {
        let key = name.description
        do throws(DocfsError) { _ = try KeyValueLimits.check(key: Array(key.utf8)) } catch {
            throw DocfsError.errno(error.message, key.utf8.count > KeyValueLimits.keyBytes ? ENAMETOOLONG : EINVAL)
        }
        let exists = try shared.keyValues().entry(key, in: container) != nil
        if exists && flags & O_EXCL != 0 { throw DocfsError.system(EEXIST) }
        if !exists { try setKeyValue(key, to: .text(""), in: container) }
        let entry = try virtualEntry(.keyValue(key), .keyValue(container: container, key: key))
        do throws(DocfsError) {
            return (entry, try openKeyValueFile(container, key, flags: flags, inferringKind: !exists))
        } catch {
            virtualNodes.forget(entry.node, count: 1)
            throw error
        }
    }

    /// close(2) or fsync(2) of a key file opened for writing: its content becomes the key's
    /// value, when it changed as `moment` asks (see `KeyValueHandles.Writer`). False for any
    /// other handle.
    func commitKeyValueFile(_ handle: UInt64, _ moment: KeyValueHandles.Commit) throws(DocfsError) -> Bool {
        guard let writer = keyValueHandles.writer(handle) else { return false }
        guard let key = writer.key else { return true }  // removed while open: written to nothing
        guard writer.wrote || (writer.truncated && moment != .close) || writer.overflowed else { return true }
        if writer.overflowed {
            throw DocfsError.errno("\(key) of \(writer.container) was not set: a write made it bigger than a key-value store holds (\(KeyValueLimits.totalBytes) bytes)", EFBIG)
        }
        let fd = backingDescriptor(of: handle)
        var st = stat()
        try check(fstat(fd, &st))
        guard st.st_size <= off_t(KeyValueLimits.totalBytes) else {
            throw DocfsError.errno("\(key) of \(writer.container) would hold \(st.st_size) bytes, more than a key-value store holds (\(KeyValueLimits.totalBytes))", EFBIG)
        }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { throw DocfsError.errno("reading what was written to \(key)") }
        bytes.removeSubrange(n...)
        let value = try Self.keyValue(bytes, kind: writer.kind, key: key)
        if try shared.keyValues().entry(key, in: writer.container)?.value != value {
            try setKeyValue(key, to: value, in: writer.container)
        }
        keyValueHandles.committed(handle)
        return true
    }

    /// The last close of a key file's handle: what changed and was not set yet is (an O_TRUNC
    /// open closed without a write empties the key; a failure is logged: nobody waits for this
    /// close's answer), and the handle is forgotten (the descriptor is closed by the caller).
    /// False for any other handle.
    func releaseKeyValueFile(_ handle: UInt64) -> Bool {
        guard keyValueHandles.writer(handle) != nil else { return false }
        reporting("set the key of key file handle \(handle) at its last close") { () throws(DocfsError) in
            _ = try commitKeyValueFile(handle, .lastClose)
        }
        return keyValueHandles.remove(handle) != nil
    }

    /// Before a write of `length` bytes at `offset` through a key file's handle: a value may
    /// not outgrow what a whole store holds (EFBIG), so an app cannot fill the daemon's memory.
    @inline(__always)
    func checkKeyValueWrite(_ handle: UInt64, at offset: off_t, length: Int) throws(DocfsError) {
        guard let writer = keyValueHandles.writer(handle) else { return }
        keyValueHandles.changed(handle, written: length > 0)
        if Int(offset) + length > KeyValueLimits.totalBytes {
            keyValueHandles.overflowed(handle)
            throw DocfsError.errno("\(writer.key ?? "a removed key") of \(writer.container): a value holds at most \(KeyValueLimits.totalBytes) bytes", EFBIG)
        }
    }

    /// unlink(2) in `.docfs/kv/`: the key is removed.
    func unlinkKeyValueFile(_ name: FileName, in container: ContainerID) throws(DocfsError) {
        guard try shared.keyValues().remove(name.description, in: container) else { throw DocfsError.system(ENOENT) }
        keyValueHandles.moved(name.description, to: nil, in: container)
        shared.keyValuesWritten(())
    }

    /// rename(2) within `.docfs/kv/` (a program's write to a temporary name, then the rename):
    /// the new key takes the old one's value, and the old one goes.
    func renameKeyValueFile(_ name: FileName, to newName: FileName, in container: ContainerID, flags: UInt32) throws(DocfsError) {
        let database = try shared.keyValues()
        guard let entry = try database.entry(name.description, in: container) else { throw DocfsError.system(ENOENT) }
        let target = try database.entry(newName.description, in: container)
        if flags & DOCFS_RENAME_EXCHANGE != 0 {
            guard let target else { throw DocfsError.system(ENOENT) }
            try setKeyValue(newName.description, to: entry.value, in: container)
            try setKeyValue(name.description, to: target.value, in: container)
            keyValueHandles.exchanged(name.description, newName.description, in: container)
            return
        }
        if target != nil && flags & DOCFS_RENAME_NOREPLACE != 0 { throw DocfsError.system(EEXIST) }
        if name == newName { return }
        do throws(DocfsError) { _ = try KeyValueLimits.check(key: Array(newName.description.utf8)) } catch {
            throw DocfsError.errno(error.message, EINVAL)
        }
        // Removed first, so a store at its limit can still rename.
        try database.remove(name.description, in: container)
        do throws(DocfsError) {
            try setKeyValue(newName.description, to: entry.value, in: container)
        } catch {
            try? database.set(name.description, to: entry.value, in: container)
            throw error
        }
        keyValueHandles.moved(name.description, to: newName.description, in: container)
    }

    /// truncate(2) of a key file: through an open handle (or while it is open for writing: the
    /// kernel truncates an O_TRUNC open by path, after the open) what the handle holds, to be
    /// set at its close (so the value is never seen empty meanwhile); else the value itself.
    func truncateKeyValueFile(_ container: ContainerID, _ key: String, handle: UInt64?, size: off_t) throws(DocfsError) {
        let open = handle.map { keyValueHandles.writer($0) != nil ? [$0] : [] } ?? keyValueHandles.writers(of: key, in: container)
        if !open.isEmpty {
            for handle in open {
                try checkKeyValueWrite(handle, at: size, length: 0)
                try check(ftruncate(backingDescriptor(of: handle), size))
            }
            return
        }
        guard let entry = try shared.keyValues().entry(key, in: container) else { throw DocfsError.system(ENOENT) }
        guard size <= off_t(KeyValueLimits.totalBytes) else { throw DocfsError.system(EFBIG) }
        var bytes = entry.value.bytes
        if Int(size) < bytes.count { bytes.removeSubrange(Int(size)...) } else { bytes += [UInt8](repeating: 0, count: Int(size) - bytes.count) }
        try setKeyValue(key, to: try Self.keyValue(bytes, kind: entry.value.kind, key: key), in: container)
    }

    /// `user.docfs.kind` of a key file.
    func keyValueKind(_ container: ContainerID, _ key: String) throws(DocfsError) -> String {
        guard let entry = try shared.keyValues().entry(key, in: container) else { throw DocfsError.system(ENOENT) }
        return entry.value.kind
    }

    /// Sets `user.docfs.kind` of a key file: the value's bytes read as that kind (EINVAL when
    /// they are not one).
    func convertKeyValue(_ container: ContainerID, _ key: String, to kind: [UInt8]) throws(DocfsError) {
        guard let entry = try shared.keyValues().entry(key, in: container) else { throw DocfsError.system(ENOENT) }
        let value = try Self.keyValue(entry.value.bytes, kind: String(decoding: kind, as: UTF8.self), key: key)
        if value != entry.value { try setKeyValue(key, to: value, in: container) }
    }

    /// The value `bytes` written to a key's file stand for, as `kind` (nil: text when they are
    /// UTF-8, else data). A number, boolean or JSON may end in white space (`echo 12 >`).
    static func keyValue(_ bytes: [UInt8], kind: String?, key: String) throws(DocfsError) -> KeyValue {
        guard let kind else { return String(validating: bytes, as: UTF8.self).map(KeyValue.text) ?? .data(bytes) }
        var read = bytes
        if kind == "number" || kind == "bool" || kind == "json" {
            while let last = read.last, [0x20, 0x09, 0x0A, 0x0D].contains(last) { read.removeLast() }
        }
        do {
            return try KeyValue(kind: kind, bytes: read)
        } catch {
            throw DocfsError.errno("\(key) holds a \(kind): \(error.message) (set user.docfs.kind to change its kind)", EINVAL)
        }
    }

    /// Sets `key` through the key-value database: past a limit EDQUOT, with the reason and
    /// numbers; a linked store's sync is told.
    private func setKeyValue(_ key: String, to value: KeyValue, in container: ContainerID) throws(DocfsError) {
        do throws(DocfsError) {
            try shared.keyValues().set(key, to: value, in: container)
        } catch where error.cause is KeyValueQuotaViolation {
            var quota = DocfsError.errno(error.message, EDQUOT)
            quota.cause = error.cause
            throw quota
        }
        shared.keyValuesWritten(())
    }
}
