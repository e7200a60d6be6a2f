import SystemPackage

/// The one error type of docfs's layers: what went wrong (a code), in words a person can act on
/// (a message), and what caused it. It becomes an errno only at the FUSE bridge, and a line on
/// stderr only in the CLI.
public struct DocfsError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure this is; `.system` carries the errno a system call answered.
    public enum Code: Sendable, Equatable {
        /// A system call failed with this errno; the bridge answers the kernel with it as is.
        case system(Errno)
        /// A reserved or malformed name, value or token was given.
        case invalidArgument
        /// The caller may not do this to an item (a reserved docfs attribute, say): EPERM.
        case refused
        /// A grant the caller used does not cover this (a read-only or someone else's bookmark
        /// token): EACCES, logged.
        case denied
        /// A name that finds nothing, for a reason worth a log line (a bookmark token that is
        /// refused, an item that is gone): ENOENT.
        case notFound
        /// The store is in use by another daemon.
        case storeBusy
        /// The store cannot be opened or created.
        case storeUnavailable
        /// The mount point is unusable (missing, not a directory, not empty).
        case badMountPoint
        /// The machine lacks something docfs needs (/dev/fuse, fusermount3).
        case missingSystemSupport
        /// Anything not foreseen; the bridge logs it and answers EIO.
        case internalFailure
    }

    public var code: Code
    public var message: String
    public var cause: (any Error & Sendable)?

    public init(_ code: Code, _ message: String, cause: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    /// An error for a failed system call, taking errno as it is now.
    public static func errno(_ operation: @autoclosure () -> String, _ value: Int32 = Glibc.errno) -> DocfsError {
        DocfsError(.system(Errno(rawValue: value)), operation())
    }

    /// A failed system call with a known errno and no message worth building (the hot path).
    public static func system(_ errno: Int32) -> DocfsError {
        DocfsError(.system(Errno(rawValue: errno)), "")
    }

    /// The errno the kernel should see, or nil when the error is not a system one.
    public var systemErrno: Int32? {
        if case .system(let e) = code { return e.rawValue }
        return nil
    }

    public var description: String {
        var text = message
        if case .system(let e) = code {
            text = text.isEmpty ? "\(e)" : "\(text): \(e)"
        }
        if let cause { text += " (caused by: \(cause))" }
        return text
    }
}

#if canImport(Glibc)
import Glibc
#endif
