#if canImport(Glibc)
import Glibc
#endif

/// Why a chunk operation failed, with the errno when a system call said why (ENOSPC on a full
/// disk): the layers above turn it into their own errors.
public struct ChunkError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var errno: Int32?

    public init(_ message: String, errno: Int32? = nil) {
        self.message = message
        self.errno = errno
    }

    public var description: String {
        guard let errno else { return message }
        return message + ": " + String(cString: strerror(errno))
    }
}
