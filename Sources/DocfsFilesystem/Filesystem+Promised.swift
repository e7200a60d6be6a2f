import CLinux
import DocfsCore
import DocfsProvider
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
    /// disk (a promised file's wait for them; EIO when they do not come in time, EINTR when
    /// `wait` says the reader was interrupted).
    @inline(__always)
    public func prepareRead(_ handle: UInt64, offset: off_t, size: Int, wait: ContentWait? = nil) throws(DocfsError) {
        guard Self.mayWaitForContent(handle) else { return }
        try shared.promises.ensure(backingDescriptor(of: handle), offset: Int64(offset), length: Int64(size), wait: wait)
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
