#if canImport(Glibc)
import Glibc
#endif

/// Text compared by its UTF-8 bytes, as SQLite's BINARY collation compares it: Swift's `==` takes
/// two spellings of one name (NFC and NFD) for one, and its byte-by-byte sequence algorithms are
/// slow on paths compared in every dictionary lookup of the overlay; these compare the storage.
extension String {
    func hasSameBytes(as other: String) -> Bool {
        let (x, y) = (utf8, other.utf8)
        guard x.count == y.count else { return false }
        let compared = x.withContiguousStorageIfAvailable { a in
            y.withContiguousStorageIfAvailable { b in a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
        }
        return (compared ?? nil) ?? x.elementsEqual(y)
    }

    /// Whether the bytes of `self` sort before those of `other`.
    func bytesPrecede(_ other: String) -> Bool {
        let (x, y) = (utf8, other.utf8)
        let compared = x.withContiguousStorageIfAvailable { a in
            y.withContiguousStorageIfAvailable { b -> Bool in
                let common = min(a.count, b.count)
                let order = common == 0 ? 0 : memcmp(a.baseAddress!, b.baseAddress!, common)
                return order != 0 ? order < 0 : a.count < b.count
            }
        }
        return (compared ?? nil) ?? x.lexicographicallyPrecedes(y)
    }
}
