import CLinux
import DocfsCore
import DocfsIndex
#if canImport(Glibc)
import Glibc
#endif

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

    /// The container whose key files `id` holds when it is an app view's `.docfs/kv`.
    func keyValueFolder(_ id: NodeID) -> ContainerID? {
        guard VirtualNodes.isVirtual(id), case .keyValues(let container)? = try? virtualNodes.node(id) else { return nil }
        return container
    }

    /// The container and key of `id` when it is a key file (`.docfs/kv/<key>`).
    func keyValueFile(_ id: NodeID) -> (ContainerID, String)? {
        guard VirtualNodes.isVirtual(id), case .keyValue(let container, let key)? = try? virtualNodes.node(id) else { return nil }
        return (container, key)
    }

    /// `.docfs/kv/<name>`: the key's file, when the key is set.
    func keyValueFileEntry(_ name: FileName, in container: ContainerID) throws(DocfsError) -> Entry {
        let key = name.description
        guard try shared.keyValues().entry(key, in: container) != nil else { throw DocfsError.system(ENOENT) }
        return try virtualEntry(.keyValue(name.bytes), .keyValue(container: container, key: key))
    }

    /// What `.docfs/kv/` lists: a file per key.
    func keyValueFileNames(in container: ContainerID) throws(DocfsError) -> [FileName] {
        try shared.keyValues().entries(in: container).map { FileName($0.key) }
    }

    /// A key file: a regular file of its owner's (the mount root's), as big as its value (or
    /// as what an open writer `handle` holds, whose key may have been renamed or removed since:
    /// then it has no link), changed when the value was set here.
    func keyValueFileAttributes(_ container: ContainerID, _ key: String, handle: UInt64?, like root: stat,
                                inode: NodeID) throws(DocfsError) -> stat {
        var st = root
        st.st_mode = S_IFREG | 0o600
        st.st_nlink = 1
        var changed = Double(root.st_mtim.tv_sec)
        if let handle, let writer = keyValueHandles.writer(handle) {
            var open = stat()
            try check(fstat(backingDescriptor(of: handle), &open))
            st.st_size = open.st_size
            if let key = writer.key, let entry = try shared.keyValues().entry(key, in: container) { changed = entry.changed } else { st.st_nlink = 0 }
        } else {
            guard let entry = try shared.keyValues().entry(key, in: container) else { throw DocfsError.system(ENOENT) }
            st.st_size = off_t(entry.value.bytes.count)
            changed = entry.changed
        }
        st.st_blocks = blkcnt_t((Int(st.st_size) + 511) / 512)
        let time = timespec(tv_sec: Int(changed), tv_nsec: Int((changed - changed.rounded(.down)) * 1e9))
        (st.st_mtim, st.st_ctim) = (time, time)
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
            writer.setDigest = KeyValueHandles.digest(entry.value.bytes)
            keyValueHandles.add(UInt64(fd), writer)
            if flags & O_TRUNC != 0 { keyValueHandles.changed(UInt64(fd), written: false) }
        }
        return OpenFile(handle: UInt64(fd), directIO: true, keepCache: false, mayPassThrough: false)
    }

    /// creat(2) in `.docfs/kv/`: the key is set (to empty text) at once, so it is listed and
    /// counted from now on; what is written is set at close.
    func createKeyValueFile(_ name: FileName, in container: ContainerID, flags: Int32) throws(DocfsError) -> (Entry, OpenFile) {
        let key = try Self.keyName(name)
        let exists = try shared.keyValues().entry(key, in: container) != nil
        if exists && flags & O_EXCL != 0 { throw DocfsError.system(EEXIST) }
        if !exists { try setKeyValue(key, to: .text(""), in: container) }
        let entry = try virtualEntry(.keyValue(name.bytes), .keyValue(container: container, key: key))
        do throws(DocfsError) {
            return (entry, try openKeyValueFile(container, key, flags: flags, inferringKind: !exists))
        } catch {
            virtualNodes.forget(entry.node, count: 1)
            throw error
        }
    }

    /// The key a file name in `.docfs/kv/` stands for: its bytes must make a key (UTF-8, up
    /// to 64 bytes: ENAMETOOLONG past that, EINVAL otherwise).
    static func keyName(_ name: FileName) throws(DocfsError) -> String {
        do {
            return try KeyValueLimits.check(key: name.bytes)
        } catch {
            throw DocfsError.errno(error.message, name.bytes.count > KeyValueLimits.keyBytes ? ENAMETOOLONG : EINVAL)
        }
    }

    /// close(2), the last close or fsync(2) of a key file opened for writing: what it holds
    /// becomes the key's value when it changed as `moment` asks (see `KeyValueHandles.Writer`).
    /// False for any other handle.
    func commitKeyValueFile(_ handle: UInt64, _ moment: KeyValueHandles.Commit) throws(DocfsError) -> Bool {
        guard let writer = keyValueHandles.writer(handle) else { return false }
        guard let key = writer.key else { return true }  // removed while open: written to nothing
        if writer.overflowed {
            throw DocfsError.errno("\(key) of \(writer.container) was not set: a write made it bigger than a key-value store holds (\(KeyValueLimits.totalBytes) bytes)", EFBIG)
        }
        switch moment {
        case .close: guard writer.wrote else { return true }
        case .fsync: guard writer.wrote || writer.truncated else { return true }
        case .lastClose: guard writer.changed else { return true }
        }
        let bytes = try keyValueContent(handle, key: key, in: writer.container)
        let digest = KeyValueHandles.digest(bytes)
        if moment == .lastClose && !writer.wrote && !writer.truncated && digest == writer.setDigest { return true }
        // The key's own kind now (a conversion while the file was open counts); a new key's
        // is found from what it holds.
        let current = try shared.keyValues().entry(key, in: writer.container)
        let value = try Self.keyValue(bytes, kind: writer.kind == nil ? nil : (current?.value.kind ?? writer.kind), key: key)
        if current?.value != value { try setKeyValue(key, to: value, in: writer.container) }
        keyValueHandles.committed(handle, digest: digest)
        return true
    }

    /// What the memory file of key file `handle` holds (at most what a store holds: EFBIG).
    private func keyValueContent(_ handle: UInt64, key: String, in container: ContainerID) throws(DocfsError) -> [UInt8] {
        let fd = backingDescriptor(of: handle)
        var st = stat()
        try check(fstat(fd, &st))
        guard st.st_size <= off_t(KeyValueLimits.totalBytes) else {
            throw DocfsError.errno("\(key) of \(container) would hold \(st.st_size) bytes, more than a key-value store holds (\(KeyValueLimits.totalBytes))", EFBIG)
        }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { throw DocfsError.errno("reading what was written to \(key)") }
        bytes.removeSubrange(n...)
        return bytes
    }

    /// The last close of a key file's handle: what it changed and did not set yet is (an
    /// O_TRUNC open closed without a write empties the key; a failure is logged: nobody waits
    /// for this close's answer), and the handle is forgotten (the descriptor is closed by the
    /// caller). False for any other handle.
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
        keyValueHandles.changed(handle, written: true)
        if offset < 0 || length > KeyValueLimits.totalBytes || Int(offset) > KeyValueLimits.totalBytes - length {
            keyValueHandles.overflowed(handle)
            throw DocfsError.errno("\(writer.key ?? "a removed key") of \(writer.container): a value holds at most \(KeyValueLimits.totalBytes) bytes", EFBIG)
        }
    }

    /// fallocate(2) of a key file: not supported (glibc's posix_fallocate then writes).
    func refuseKeyValueAllocation(_ handle: UInt64) throws(DocfsError) {
        if keyValueHandles.writer(handle) != nil { throw DocfsError.system(EOPNOTSUPP) }
    }

    /// unlink(2) in `.docfs/kv/`: the key is removed. Its open writers let go of it first, so
    /// a close racing the removal cannot bring the key back.
    func unlinkKeyValueFile(_ name: FileName, in container: ContainerID) throws(DocfsError) {
        let key = name.description
        let before = keyValueHandles.keys(in: container)
        keyValueHandles.moved(key, to: nil, in: container)
        let removed: Bool
        do throws(DocfsError) { removed = try shared.keyValues().remove(key, in: container) } catch {
            keyValueHandles.restore(before)
            throw error
        }
        guard removed else {
            keyValueHandles.restore(before)
            throw DocfsError.system(ENOENT)
        }
        shared.keyValuesWritten(())
    }

    /// rename(2) within `.docfs/kv/` (a program's write to a temporary name, then the rename):
    /// in one transaction the new key takes the old one's value (or what a writer of the old
    /// one holds and has not set yet: it is set now, read as the new key's kind when that
    /// was set) and the old one goes; open writers follow their file.
    func renameKeyValueFile(_ name: FileName, to newName: FileName, in container: ContainerID, flags: UInt32) throws(DocfsError) {
        let database = try shared.keyValues()
        let (key, newKey) = (name.description, try Self.keyName(newName))
        let target = try database.entry(newKey, in: container)
        if flags & DOCFS_RENAME_EXCHANGE != 0 {
            guard try database.exchange(key, newKey, in: container) else { throw DocfsError.system(ENOENT) }
            keyValueHandles.exchanged(key, newKey, in: container)
            shared.keyValuesWritten(())
            return
        }
        if target != nil && flags & DOCFS_RENAME_NOREPLACE != 0 { throw DocfsError.system(EEXIST) }
        if KeyValueHandles.same(key, newKey) { return }
        // The writer of the old key changed last holds what the program means to rename.
        let unset = keyValueHandles.writers(of: key, in: container).filter { $0.writer.wrote || $0.writer.truncated }
            .max { $0.writer.lastChange < $1.writer.lastChange }
        var value: KeyValue?
        var digest: Int?
        if let unset {
            let bytes = try keyValueContent(unset.handle, key: key, in: container)
            value = try Self.keyValue(bytes, kind: target?.value.kind ?? unset.writer.kind, key: newKey)
            digest = KeyValueHandles.digest(bytes)
        }
        let before = keyValueHandles.keys(in: container)
        keyValueHandles.moved(key, to: newKey, kind: target?.value.kind, in: container)
        let moved: Bool
        do throws(DocfsError) { moved = try database.move(key, to: newKey, value: value, in: container) } catch {
            keyValueHandles.restore(before)
            throw Self.quotaAsErrno(error)
        }
        guard moved else {
            keyValueHandles.restore(before)
            throw DocfsError.system(ENOENT)
        }
        if let unset, let digest { keyValueHandles.committed(unset.handle, digest: digest) }
        virtualNodes.renamed(.keyValue(name.bytes), to: .keyValue(newName.bytes), .keyValue(container: container, key: newKey))
        shared.keyValuesWritten(())
    }

    /// truncate(2) of a key file: through an open writer what it holds (set at its close),
    /// else the value itself (an O_TRUNC open reaches open, not here: libfuse asks the kernel
    /// for atomic O_TRUNC).
    func truncateKeyValueFile(_ container: ContainerID, _ key: String, handle: UInt64?, size: off_t) throws(DocfsError) {
        guard size >= 0 else { throw DocfsError.system(EINVAL) }
        if let handle, keyValueHandles.writer(handle) != nil {
            guard size <= off_t(KeyValueLimits.totalBytes) else { throw DocfsError.system(EFBIG) }
            try check(ftruncate(backingDescriptor(of: handle), size))
            keyValueHandles.changed(handle, written: false)
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
        } catch {
            throw Self.quotaAsErrno(error)
        }
        shared.keyValuesWritten(())
    }

    /// A quota violation as EDQUOT (with its reason and numbers); any other error as it is.
    private static func quotaAsErrno(_ error: DocfsError) -> DocfsError {
        guard error.cause is KeyValueQuotaViolation else { return error }
        var quota = DocfsError.errno(error.message, EDQUOT)
        quota.cause = error.cause
        return quota
    }
}
