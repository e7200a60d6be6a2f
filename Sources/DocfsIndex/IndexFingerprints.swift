/// What a reconciling walk compares the store with: for every entry, a hash of where it is and
/// a hash of its fingerprint (backing inode, size, modification and status-change times,
/// kind and item id). Any change to an item moves its status-change time, so an entry whose fingerprint
/// still matches needs no new record. 24 bytes an entry: a million entries take 24 MB.
public struct IndexFingerprints: Sendable {
    private struct Slot {
        var key: UInt64
        var print: UInt64
        var entry: Int64
        var id: Int64
    }

    private var slots: [Slot]
    private var seen: [Bool]

    init(_ rows: [(location: IndexLocation, print: UInt64, entry: Int64, id: Int64)]) {
        slots = rows.map { Slot(key: Self.key($0.location), print: $0.print, entry: $0.entry, id: $0.id) }
        slots.sort { $0.key < $1.key }
        seen = [Bool](repeating: false, count: slots.count)
    }

    public var count: Int { slots.count }

    /// What the index holds at a place: the entry's fingerprint and item id.
    public struct Found: Sendable {
        public var print: UInt64
        public var id: Int64
    }

    /// The entry at `location`, if the index holds one; it then counts as seen (not one to
    /// remove).
    public mutating func take(_ location: IndexLocation) -> Found? {
        let key = Self.key(location)
        var low = 0
        var high = slots.count
        while low < high {
            let middle = (low + high) / 2
            if slots[middle].key < key { low = middle + 1 } else { high = middle }
        }
        guard low < slots.count, slots[low].key == key else { return nil }
        seen[low] = true
        return Found(print: slots[low].print, id: slots[low].id)
    }

    /// Entries the walk did not find: their names are gone from the store.
    public var unseenEntries: [Int64] {
        zip(slots, seen).compactMap { $1 ? nil : $0.entry }
    }

    /// The fingerprint of a backing file in the state `record` was made from.
    public static func print(of record: IndexRecord) -> UInt64 {
        var hash = FNV1a()
        hash.add(record.backingInode)
        hash.add(UInt64(bitPattern: record.size))
        hash.add(record.modified.bitPattern)
        hash.add(record.statusChanged.bitPattern)
        hash.add(record.kind)
        hash.add(UInt64(bitPattern: record.id))
        return hash.value
    }

    static func key(_ location: IndexLocation) -> UInt64 {
        var hash = FNV1a()
        hash.add(location.container)
        hash.add(location.scope)
        hash.add(location.path)
        return hash.value
    }
}

/// 64-bit FNV-1a: the same in every process (Swift's Hasher is seeded per process).
private struct FNV1a {
    private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

    mutating func add(_ byte: UInt8) {
        value = (value ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
    }

    mutating func add(_ word: UInt64) {
        for shift in stride(from: 0, to: 64, by: 8) { add(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
    }

    mutating func add(_ text: String) {
        for byte in text.utf8 { add(byte) }
        add(UInt8(0))
    }
}
