import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Small files docfs keeps in the store (counters, version records): read whole, replaced
/// atomically (temporary file, fsync, rename), so a crash leaves the old or the new content.
public enum StoreFiles {
    /// The whole content of `path`, or nil when it does not exist.
    public static func read(_ path: String) throws(DocfsError) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw DocfsError(.storeUnavailable, "cannot read \(path)", cause: DocfsError.errno("open"))
        }
        defer { close(fd) }
        var bytes = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw DocfsError(.storeUnavailable, "cannot read \(path)", cause: DocfsError.errno("read"))
            }
            if n == 0 { return bytes }
            bytes += chunk[0..<n]
        }
    }

    /// Replaces `path` with `bytes`; when `durable`, the new content is on disk before this returns.
    public static func replace(_ path: String, with bytes: [UInt8], durable: Bool = true) throws(DocfsError) {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw DocfsError(.storeUnavailable, "cannot write \(temporary)", cause: DocfsError.errno("open"))
        }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                let failure = DocfsError.errno("write")
                close(fd)
                throw DocfsError(.storeUnavailable, "cannot write \(temporary): is the disk full?", cause: failure)
            }
            written += n
        }
        if durable && fsync(fd) != 0 {
            let failure = DocfsError.errno("fsync")
            close(fd)
            throw DocfsError(.storeUnavailable, "cannot write \(temporary) to disk", cause: failure)
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            throw DocfsError(.storeUnavailable, "cannot replace \(path)", cause: DocfsError.errno("rename"))
        }
    }
}
