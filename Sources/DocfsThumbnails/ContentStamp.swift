#if canImport(Glibc)
import Glibc
#endif

/// Which content of a file a thumbnail was made from: its backing inode, size and version
/// number (`user.docfs.version`, which every write session, replace and change noticed behind
/// docfs moves on). A thumbnail whose stamp differs from the file's is stale (the content
/// changed, or another file took the item's place) and is not served. The modification time is
/// no part of it: `touch` changes no content, and under the writeback cache the kernel sets it
/// again whenever it writes its cached times back.
public struct ContentStamp: Sendable, Hashable, Codable, CustomStringConvertible {
    public var inode: UInt64
    public var size: Int64
    public var version: UInt64

    public init(inode: UInt64, size: Int64, version: UInt64) {
        self.inode = inode
        self.size = size
        self.version = version
    }

    /// The stamp of a file whose attributes are `st` and whose stored version is `version`
    /// (0 when it has none: a file docfs never versioned counts as version 1).
    public init(_ st: stat, version: UInt64) {
        self.init(inode: UInt64(st.st_ino), size: Int64(st.st_size), version: max(version, 1))
    }

    public var description: String { "\(inode) \(size) \(version)" }

    init?(words: ArraySlice<Substring>) {
        let numbers = words.compactMap { UInt64($0) }
        guard numbers.count == 3, numbers[1] <= UInt64(Int64.max) else { return nil }
        self.init(inode: numbers[0], size: Int64(numbers[1]), version: numbers[2])
    }
}
