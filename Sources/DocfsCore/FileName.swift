#if canImport(Glibc)
import Glibc
#endif

/// A name in a folder (or a symlink's target) as the bytes the kernel gave. Linux names need
/// not be UTF-8; a String would replace the bytes it cannot decode, so two different names
/// could reach one file. docfs carries names as bytes and decodes them only to show them.
public struct FileName: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The name's bytes, without a terminating NUL.
    public let bytes: [UInt8]

    public init(_ string: String) { bytes = Array(string.utf8) }

    public init(stringLiteral value: String) { self.init(value) }

    public init(bytes: [UInt8]) { self.bytes = bytes }

    public init(cString: UnsafePointer<CChar>) {
        bytes = UnsafeRawBufferPointer(start: cString, count: strlen(cString)).map { $0 }
    }

    /// The name NUL-terminated, to pass where a C string is asked for.
    public var cString: [CChar] { bytes.map { CChar(bitPattern: $0) } + [0] }

    /// Calls `body` with the name as a NUL-terminated C string.
    public func withCString<Result>(_ body: (UnsafePointer<CChar>) throws -> Result) rethrows -> Result {
        try (bytes + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }

    /// The name for people: undecodable bytes show as U+FFFD.
    public var description: String { String(decoding: bytes, as: UTF8.self) }
}
