import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Hands out item ids that are never used twice in a store, across restarts and crashes. The
/// next free id is kept in `STORE/item-ids`; ids are reserved from it a block at a time (one
/// small durable write per block), so a crash skips at most the rest of a block and never
/// gives an id out again.
///
/// Lock order: `state` is a leaf lock; it is held across the durable write of a new block.
public final class ItemIDAllocator: Sendable {
    /// The first id a new store hands out (lower numbers stay free for special uses).
    public static let firstID: UInt64 = 16
    static let blockSize: UInt64 = 65536

    private struct State {
        var next: UInt64
        var reservedEnd: UInt64
    }

    private let path: String
    private let state: Mutex<State>

    public init(path: String) throws(DocfsError) {
        self.path = path
        var next = Self.firstID
        if let bytes = try StoreFiles.read(path) {
            let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: "\n ")
            guard let value = UInt64(text.replacingPrefix("next=", with: "")), value >= Self.firstID,
                  value < ItemID.derivedBase else {
                throw DocfsError(.storeUnavailable,
                                 "\(path) is damaged (\"\(text.prefix(40))\"): restore it from a backup, or write next=N with N above every user.docfs.id in the store")
            }
            next = value
        }
        state = Mutex(State(next: next, reservedEnd: next))
    }

    public static let spaceSize = ItemID.spaceSize

    /// Moves to id space `space`, at `floor` or past it (no id below `floor` is given again:
    /// the remote's or this store's items reach up to it): ids go on where they are when they
    /// are in the space already, else from the space's first past `floor`. Durable before it
    /// returns, so a store linked while served gives its next id from the space at once.
    public func enter(space: UInt64, floor: UInt64 = 0) throws(DocfsError) {
        guard space < ItemID.derivedBase / Self.spaceSize else {
            throw DocfsError(.invalidArgument, "id space \(space) is past the last one (\(ItemID.derivedBase / Self.spaceSize - 1))")
        }
        try state.withLock { (state: inout State) throws(DocfsError) in
            let first = max(space * Self.spaceSize, Self.firstID), end = (space + 1) * Self.spaceSize
            let within = state.next >= first && state.next < end
            let next = max(within ? state.next : first, floor)
            guard next < end else {
                throw DocfsError(.invalidArgument, "id space \(space) is used up (its ids reach \(floor)): link this store to another database")
            }
            guard next != state.next else { return }
            try StoreFiles.replace(path, with: Array("next=\(next)\n".utf8))
            state.next = next
            state.reservedEnd = next
        }
    }

    /// A fresh id.
    public func allocate() throws(DocfsError) -> ItemID {
        try state.withLock { (state: inout State) throws(DocfsError) -> ItemID in
            if state.next == state.reservedEnd {
                let end = state.reservedEnd + Self.blockSize
                try StoreFiles.replace(path, with: Array("next=\(end)\n".utf8))
                state.reservedEnd = end
            }
            defer { state.next += 1 }
            return ItemID(rawValue: state.next)
        }
    }
}

extension String {
    func trimmingCharacters(in characters: String) -> String {
        let set = Set(characters)
        var slice = Substring(self)
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }

    func replacingPrefix(_ prefix: String, with replacement: String) -> String {
        hasPrefix(prefix) ? replacement + dropFirst(prefix.count) : self
    }
}
