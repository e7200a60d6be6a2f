#if canImport(Glibc)
import Glibc
#endif

/// A name in a folder (or a symlink's target) as the bytes the kernel gave. Linux names need
/// not be UTF-8; a String would replace the bytes it cannot decode, so two different names
/// could reach one file. docfs carries names as bytes, and as text in NameText, which keeps
/// every byte (`description` and `init(_:)` are each other's inverse).
public struct FileName: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The name NUL-terminated, kept in the form system calls take: it is passed on every
    /// lookup, create and listing, so it is made once, when the name arrives.
    public let cString: [CChar]

    public init(bytes: [UInt8]) { cString = bytes.map { CChar(bitPattern: $0) } + [0] }

    /// The name `text` (NameText) stands for.
    public init(_ text: String) { self.init(bytes: NameText.decode(text)) }

    public init(stringLiteral value: String) { self.init(value) }

    public init(cString: UnsafePointer<CChar>) {
        self.cString = Array(UnsafeBufferPointer(start: cString, count: strlen(cString) + 1))
    }

    /// The name's bytes, without the terminating NUL.
    public var bytes: [UInt8] { cString.dropLast().map { UInt8(bitPattern: $0) } }

    /// The name as text (NameText): itself when it is UTF-8, exact in any case. Shown to
    /// people through `NameText.shown(_:style:)`.
    public var description: String { NameText.encode(bytes) }
}
