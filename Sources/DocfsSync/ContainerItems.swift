import DocfsChunks
import DocfsCore

/// The item a container travels as (issue 22 §2): the same on every machine, made from its id
/// alone, in a range no store's id space reaches, so it never meets a document's id.
public enum ContainerItems {
    /// Set in every container's item, above every id space.
    public static let bit: UInt64 = 1 << 61

    /// The item container `id` travels as.
    public static func item(of id: ContainerID) -> UInt64 {
        let digest = Array(id.rawValue.utf8).withUnsafeBytes { ChunkDigest(of: $0) }
        let low = digest.hex.prefix(16).reduce(UInt64(0)) { $0 << 4 | UInt64($1.hexDigitValue ?? 0) }
        return bit | (low & ((1 << 41) - 1))
    }

    /// Whether `item` is a container's.
    public static func isContainer(_ item: UInt64) -> Bool { item >> 41 == bit >> 41 }
}
