import CLinux
import DocfsCore
import DocfsProvider
import DocfsSync
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Promised files through the filesystem (DESIGN §9.1, issue 23): reads wait for their range,
/// opens for writing and truncates for the whole content, and nothing the kernel is told makes
/// a promised file look sparse or empty (`st_blocks`, SEEK_DATA/SEEK_HOLE), so tar, cp, rsync
/// and du treat it as the file it will be.
extension Filesystem {
    /// Set in the handle of a promised file open for reading (above any descriptor number,
    /// which is the handle's low 32 bits): its reads first wait for their bytes
    /// (`prepareRead`), a test of one bit for every other read.
    static let promisedHandleBit: UInt64 = 1 << 40

    /// Whether the store file `fd` is promised, in a store that may have any (one getxattr,
    /// only then).
    func isPromised(_ fd: Int32) -> Bool {
        shared.promises.isActive && PromisedContent.promisedNumber(fd) != nil
    }

    /// A promised file's blocks as if its content were here (the backing file is sparse until
    /// it is): `tar --sparse` archives a file with no blocks as a hole, `cp --sparse=auto` and
    /// `du` trust them. Its change time stays as first seen while it downloads
    /// (`PromisedDownloads.steadyChangeTime`).
    func reportPromised(_ st: inout stat, fd: Int32) {
        guard shared.promises.isActive, st.st_mode & S_IFMT == S_IFREG else { return }
        let promised = Int64(st.st_blocks) * 512 < Int64(st.st_size) && PromisedContent.promisedNumber(fd) != nil
        if promised { st.st_blocks = blkcnt_t((Int64(st.st_size) + 511) / 512) }
        shared.promises.steadyChangeTime(&st, promised: promised)
    }

    /// Whether a read through `handle` may wait for content (a promised file's).
    @inline(__always)
    public static func mayWaitForContent(_ handle: UInt64) -> Bool { handle & promisedHandleBit != 0 }

    /// Before a read of `size` bytes at `offset` through `handle` is answered: they are on
    /// disk (a promised file's wait for them on this thread; EIO when they do not come in time).
    @inline(__always)
    public func prepareRead(_ handle: UInt64, offset: off_t, size: Int) throws(DocfsError) {
        guard Self.mayWaitForContent(handle) else { return }
        try shared.promises.ensure(backingDescriptor(of: handle), offset: Int64(offset), length: Int64(size))
    }

    /// Starts `read` through `handle` (a handle `mayWaitForContent`): answered once its bytes
    /// are on disk, or with the error that ended its wait; no thread waits meanwhile.
    public func beginRead(_ read: PendingRead, through handle: UInt64) {
        shared.promises.begin(read, fd: backingDescriptor(of: handle))
    }

    /// Before `node` is changed in place (an open for writing, a truncate): a promised file's
    /// whole content is downloaded first.
    func fulfilBeforeChanging(_ node: Node) throws(DocfsError) {
        guard node.type == S_IFREG, isPromised(node.fd) else { return }
        try shared.promises.ensureWhole(node.fd)
    }

    /// SEEK_DATA and SEEK_HOLE of a promised file: all data, no hole but the end.
    func promisedSeek(_ handle: UInt64, offset: off_t, whence: Int32) throws(DocfsError) -> off_t? {
        guard handle & Self.promisedHandleBit != 0, whence == DOCFS_SEEK_DATA || whence == DOCFS_SEEK_HOLE else { return nil }
        let fd = backingDescriptor(of: handle)
        guard PromisedContent.promisedNumber(fd) != nil else { return nil }
        var st = stat()
        try check(fstat(fd, &st))
        guard offset >= 0, offset < st.st_size else { throw DocfsError.system(ENXIO) }
        return whence == DOCFS_SEEK_DATA ? offset : st.st_size
    }
}

/// `docfs download`, `docfs pin` and `docfs evict` (DESIGN §9.1, issue 23 §1): a promised
/// file fetched now; a file kept here for good (pinned: downloaded, never evicted); a file whose
/// content the remote holds made promised again, its disk space given back — never one that is
/// pinned, open, changed here and not gone up, or in conflict.
extension Filesystem {
    /// Marks a file pinned (`user.docfs.pinned` on its backing file; it does not travel).
    package static let pinnedAttribute = "user.docfs.pinned"

    static func isPinned(_ fd: Int32) -> Bool { docfs_fd_getxattr(fd, pinnedAttribute, nil, 0) >= 0 }

    /// Downloads the document `item` whole, if it is promised; answers its size.
    public func download(_ item: ItemID) throws(DocfsError) -> Int64 {
        let node = try locate(item).node
        guard node.type == S_IFREG else { throw DocfsError(.invalidArgument, "item \(item) is not a file: only files are downloaded") }
        try shared.promises.ensureWhole(node.fd)
        var st = stat()
        try check(fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH))
        return Int64(st.st_size)
    }

    /// Pins (or unpins) the document `item`: pinned, it is downloaded now and never evicted.
    public func pin(_ item: ItemID, _ pinned: Bool) throws(DocfsError) {
        let node = try locate(item).node
        guard node.type == S_IFREG else { throw DocfsError(.invalidArgument, "item \(item) is not a file: only files are pinned") }
        try coordinator.withClaims([(item, .metadata)]) { () throws(DocfsError) in
            let path = "/proc/self/fd/\(node.fd)"
            if pinned {
                try check(docfs_setxattr(path, Self.pinnedAttribute, "1", 1, 0))
            } else if docfs_removexattr(path, Self.pinnedAttribute) != 0 && errno != ENODATA {
                throw DocfsError.errno("unpinning item \(item)")
            }
            ownChanges.changedAttributes(at: node.fd)
        }
        recordContentPlace(node)
        if pinned {
            try shared.promises.ensureWhole(node.fd)
            shared.promises.use.used(item.rawValue)
        }
    }

    /// Makes the document `item` promised again (its content given back to the disk), when
    /// its content here is the remote's current one and nothing here needs it: not pinned,
    /// not open, not written, in step with the remote and not in conflict. Answers the bytes
    /// given back (0 when it was promised already).
    public func evict(_ item: ItemID) throws(DocfsError) -> Int64 {
        let node = try locate(item).node
        guard node.type == S_IFREG, !node.isReference else { throw DocfsError(.invalidArgument, "item \(item) is not a file: only files are evicted") }
        guard let stitcher, stitcher.fillsOutbox.load(ordering: .relaxed) else {
            throw DocfsError(.invalidArgument, "the store is not linked to a remote: its files have nowhere to come back from")
        }
        let freed = try coordinator.withClaims([(item, .write)]) { () throws(DocfsError) -> Int64 in
            if PromisedContent.promisedNumber(node.fd) != nil { return 0 }
            if Self.isPinned(node.fd) { throw DocfsError(.refused, "it is pinned (docfs pin --unpin lets it go)") }
            if stitcher.isWritten(item) || isOpen(node) { throw DocfsError(.refused, "it is open: close it first") }
            guard syncStatus(of: node) == "current",
                  let state = (try? stitcher.index.syncState(of: Int64(bitPattern: item.rawValue))).flatMap({ $0 })
                    .flatMap({ try? JSONDecoder().decode(ItemSyncState.self, from: Data($0)) }) else {
                throw DocfsError(.refused, "its content here is not yet on the remote (see docfs remote status)")
            }
            var st = stat()
            try check(fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH))
            let number = ItemAttributes.version(ofDescriptor: node.fd)
            guard state.version.kind == .file, !state.version.deleted, Int64(st.st_size) == state.version.size,
                  max(number, 1) == state.number else {
                throw DocfsError(.refused, "its content here is not the remote's current one")
            }
            let freed = Int64(st.st_blocks) * 512
            // A kept version made up from the current content (a delta) becomes whole first: the
            // content it reads from is about to go.
            let readable = Glibc.open(node.procPath, O_RDONLY | O_CLOEXEC)
            guard readable >= 0 else { throw DocfsError.errno("reading item \(item) to evict it") }
            defer { close(readable) }
            try store.versions.materializeNewestPrefix(of: item, from: readable)
            ownChanges.willWrite(node.key)
            let writer = Glibc.open(node.procPath, O_WRONLY | O_CLOEXEC)
            guard writer >= 0 else {
                ownChanges.abandon(node.key)
                throw DocfsError.errno("opening item \(item) to evict it")
            }
            defer {
                var after = stat()
                let known = fstat(writer, &after) == 0
                close(writer)
                ownChanges.abandon(node.key, now: known ? after : nil)
            }
            // Recorded and marked first: a crash between leaves a promised file whose chunks are
            // all noted missing, fetched again when read.
            try shared.promises.promise(Promise(item: item.rawValue, number: max(number, 1), size: Int64(st.st_size),
                                                modified: WriteSessions.seconds(st.st_mtim), manifest: state.version.manifest,
                                                lengths: state.version.knownLengths),
                                        file: writer)
            if st.st_size > 0 {
                try check(docfs_fallocate(writer, DOCFS_FALLOC_FL_PUNCH_HOLE | DOCFS_FALLOC_FL_KEEP_SIZE, 0, st.st_size))
            }
            var times = [timespec(tv_sec: 0, tv_nsec: DOCFS_UTIME_OMIT), st.st_mtim]
            _ = futimens(writer, &times)
            return freed
        }
        if freed > 0 { recordContentPlace(node) }
        return freed
    }

    /// Whether this daemon holds the backing file of `node` open (any open handle is one of its
    /// descriptors, mmap'd files too): one look at each descriptor, for an explicit eviction.
    func isOpen(_ node: Node) -> Bool { Self.holdsOpen(node.key, except: node.fd) }

    /// Whether this daemon holds the file `key` open through any view (`except`: a descriptor
    /// of its own that does not count); `O_PATH` descriptors never count.
    package static func holdsOpen(_ key: BackingKey, except skipped: Int32 = -1) -> Bool {
        guard let folder = opendir("/proc/self/fd") else { return true }
        defer { closedir(folder) }
        while let entry = readdir(folder) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            guard let fd = Int32(name), fd != skipped, fd != dirfd(folder) else { continue }
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, flags & DOCFS_O_PATH == 0 else { continue }
            var st = stat()
            if fstat(fd, &st) == 0, BackingKey(st) == key { return true }
        }
        return false
    }
}
