import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The one copy loop of kept versions: a range of one file into another, in the kernel where it
/// can (copy_file_range), by reading and writing where it cannot (the files are on different
/// file systems, or the file system has no such call).
enum FileCopy {
    /// Copies `range` of `source` to `target` at `shift` bytes further on (0: the same offsets),
    /// stopping early where `source` ends; answers the offset of `source` it reached. Throws
    /// the errno of the call that failed.
    static func range(_ range: Range<Int64>, from source: Int32, to target: Int32, shift: Int64 = 0) throws(DocfsError) -> Int64 {
        var inOffset = off_t(range.lowerBound), outOffset = off_t(range.lowerBound + shift)
        while Int64(inOffset) < range.upperBound {
            let n = docfs_copy_file_range(source, &inOffset, target, &outOffset, Int(min(range.upperBound - Int64(inOffset), 1 << 30)), 0)
            if n > 0 { continue }
            if n == 0 { break }
            if errno == EINTR { continue }
            guard errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS else { throw DocfsError.errno("copy_file_range") }
            return try byReading(Int64(inOffset)..<range.upperBound, from: source, to: target, shift: shift)
        }
        return Int64(inOffset)
    }

    private static func byReading(_ range: Range<Int64>, from source: Int32, to target: Int32, shift: Int64) throws(DocfsError) -> Int64 {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var at = range.lowerBound
        while at < range.upperBound {
            let n = buffer.withUnsafeMutableBytes { pread(source, $0.baseAddress, min($0.count, Int(range.upperBound - at)), off_t(at)) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw DocfsError.errno("pread") }
            if n == 0 { break }
            var done = 0
            while done < n {
                let m = buffer.withUnsafeBytes { pwrite(target, $0.baseAddress! + done, n - done, off_t(at + shift) + off_t(done)) }
                if m < 0 && errno == EINTR { continue }
                guard m > 0 else { throw DocfsError.errno("pwrite", m < 0 ? errno : EIO) }
                done += m
            }
            at += Int64(n)
        }
        return at
    }
}
