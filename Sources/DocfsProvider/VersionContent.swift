import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// A kept version's content as the store holds it, to read in order: one file (a whole copy,
/// or a delta made up), or the chunk files of a version kept as chunks, read where they lie
/// so that showing or restoring a version needs no room for a second copy.
public final class VersionContent: Sendable {
    /// A piece of the content: a file already open (closed with the content) or a path.
    public enum Part: Sendable {
        case open(fd: Int32, length: Int64)
        case path(String, length: Int64)

        var length: Int64 {
            switch self {
            case .open(_, let length), .path(_, let length): length
            }
        }
    }

    public let parts: [Part]
    /// What the content is, for errors.
    let what: String

    init(parts: [Part], what: String) {
        self.parts = parts
        self.what = what
    }

    deinit {
        for case .open(let fd, _) in parts { close(fd) }
    }

    public var length: Int64 { parts.reduce(0) { $0 + $1.length } }

    /// Copies the content into `target` (a regular file) from offset 0; answers how much.
    @discardableResult
    public func copy(to target: Int32) throws(DocfsError) -> Int64 {
        try each { (fd, length, offset) throws(DocfsError) in
            let reached: Int64
            do throws(DocfsError) {
                reached = try FileCopy.range(0..<length, from: fd, to: target, shift: offset)
            } catch {
                throw failure(error.systemErrno ?? EIO)
            }
            guard reached == length else { throw failure(EIO) }  // a part shorter than its length
        }
    }

    /// Writes the content to `target` (any file: a pipe, a terminal) at its position.
    @discardableResult
    public func send(to target: Int32) throws(DocfsError) -> Int64 {
        try each { (fd, length, _) throws(DocfsError) in
            var inOffset: off_t = 0
            while Int64(inOffset) < length {
                let n = sendfile(target, fd, &inOffset, Int(min(length - Int64(inOffset), 1 << 30)))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw failure(n < 0 ? errno : EIO) }
            }
        }
    }

    /// Each part, open, with its length and its offset in the content; answers the length.
    private func each(_ body: (Int32, Int64, Int64) throws(DocfsError) -> Void) throws(DocfsError) -> Int64 {
        var offset: Int64 = 0
        for part in parts {
            switch part {
            case .open(let fd, let length):
                try body(fd, length, offset)
            case .path(let path, let length):
                let fd = open(path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { throw failure(errno) }
                defer { close(fd) }
                var st = stat()
                guard fstat(fd, &st) == 0, Int64(st.st_size) == length else { throw failure(EIO) }
                try body(fd, length, offset)
            }
            offset += part.length
        }
        return offset
    }

    private func failure(_ reason: Int32) -> DocfsError {
        DocfsError(.storeUnavailable, "cannot read \(what)", cause: DocfsError.errno("versions", reason))
    }
}
