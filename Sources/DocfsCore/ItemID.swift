/// The persistent identity of an item (DESIGN §1): it survives renames, moves between folders,
/// safe-saves, remounts and daemon restarts: the document id, read as `user.docfs.id`. It is not
/// the inode number, which is the file's own (its backing file's) and follows POSIX.
///
/// Files and folders carry their id in the store (the `user.docfs.id` extended attribute of the
/// backing file), so it travels with them. Symbolic links and special files cannot carry user
/// attributes; they get an id *derived* from their backing inode, which is stable while the store
/// stays on its disk but is not kept across a copy of the store.
public struct ItemID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// Ids at or above this are derived from backing inodes; allocated ids stay below it.
    public static let derivedBase: UInt64 = 1 << 62

    /// How many ids one machine's space holds: stores linked to one remote give ids from
    /// spaces of their own (`space << 41` up), so no two items share one (DESIGN §9.0).
    public static let spaceSize: UInt64 = 1 << 41

    /// The id of an item that cannot carry one of its own.
    public static func derived(fromBackingInode inode: UInt64) -> ItemID {
        ItemID(rawValue: derivedBase | (inode & (derivedBase - 1)))
    }

    public var isDerived: Bool { rawValue >= Self.derivedBase }

    /// Parses the text form (decimal digits), as stored and as `user.docfs.id` shows it.
    public init?(text: some StringProtocol) {
        guard !text.isEmpty, text.utf8.count <= 20, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
              let value = UInt64(text), value > 0, value < Self.derivedBase else { return nil }
        rawValue = value
    }

    public var description: String { String(rawValue) }

    public static func < (a: ItemID, b: ItemID) -> Bool { a.rawValue < b.rawValue }
}
