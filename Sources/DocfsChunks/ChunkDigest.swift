import Crypto

/// A chunk's name: the SHA-256 of its bytes. Two chunks with the same digest are the same
/// bytes, wherever (and on whichever machine) they were cut.
public struct ChunkDigest: Hashable, Sendable, CustomStringConvertible {
    /// The 64 lowercase hex digits of the digest.
    public let hex: String

    public init(of bytes: UnsafeRawBufferPointer) {
        hex = SHA256.hash(data: bytes).map { Self.hexDigits[Int($0 >> 4)] + Self.hexDigits[Int($0 & 15)] }.joined()
    }

    /// A digest written as text; nil unless it is 64 lowercase hex digits (so it is also safe
    /// as a file name).
    public init?(hex: some StringProtocol) {
        guard hex.utf8.count == 64, hex.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return nil }
        self.hex = String(hex)
    }

    public var description: String { hex }

    private static let hexDigits = (0..<16).map { String($0, radix: 16) }
}
