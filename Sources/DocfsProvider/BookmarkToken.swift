import Crypto
import DocfsCore

/// Bookmark tokens (DESIGN §7): a `Bookmark` as printable text, `docfs-bm1:` then the record
/// and its HMAC-SHA256 under the store's key, in unpadded base64url. Every token is signed, so
/// no field of one can be changed, and one made by another store or by hand is told apart.
/// Decoding never trusts a length it has not checked: a token is read field by field within
/// bounds, and anything else is a `BookmarkTokenProblem`.
public enum BookmarkToken {
    public static let prefix = "docfs-bm1:"
    static let format: UInt8 = 1
    static let macLength = 32
    /// No field of a token is longer (a path in the store is at most PATH_MAX).
    static let longestText = 4096
    /// No token is longer (it fits an extended attribute value with room to spare).
    public static let longestToken = 16384

    /// The token for `bookmark`, signed with `key` (it names the key's store, whatever
    /// `bookmark.storeID` says).
    public static func encode(_ bookmark: Bookmark, key: StoreKey) -> String {
        var writer = ByteWriter()
        writer.byte(format)
        writer.bytes(key.storeID)
        writer.integer(bookmark.item.rawValue)
        writer.byte(bookmark.resourceType.rawValue)
        writer.integer(UInt64(bitPattern: Int64((bookmark.contentModified * 1e9).rounded())))
        writer.integer(UInt64(bitPattern: Int64((bookmark.made * 1e9).rounded())))
        writer.integer(bookmark.backingInode)
        writer.text(bookmark.container)
        writer.text(bookmark.scope)
        writer.text(bookmark.path)
        writer.text(bookmark.localizedName)
        // Flags: 1 a security scope follows, 2 it is read-only, 4 the store it was made on follows.
        let madeOn = bookmark.madeOn.flatMap { $0.count == StoreKey.storeIDLength ? $0 : nil }
        let scopeFlags: UInt8 = bookmark.securityScope.map { $0.readOnly ? 3 : 1 } ?? 0
        writer.byte(scopeFlags | (madeOn != nil ? 4 : 0))
        if let scope = bookmark.securityScope { writer.text(scope.issuedTo) }
        if let madeOn { writer.bytes(madeOn) }
        let mac = HMAC<SHA256>.authenticationCode(for: writer.output, using: SymmetricKey(data: key.secret))
        return prefix + Base64URL.encode(writer.output + Array(mac))
    }

    /// The bookmark `token` carries, when it is one this store (`key`) made and nobody changed.
    public static func decode(_ token: String, key: StoreKey) throws(BookmarkTokenProblem) -> Bookmark {
        guard token.utf8.count <= longestToken else { throw .tooLong }
        guard token.hasPrefix(prefix) else {
            throw token.hasPrefix("docfs-bm") ? .unsupportedFormat : .notAToken
        }
        guard let bytes = Base64URL.decode(token.utf8.dropFirst(prefix.utf8.count)) else { throw .badEncoding }
        var reader = ByteReader(bytes)
        guard let format = reader.byte() else { throw .truncated }
        guard format == Self.format else { throw .unsupportedFormat }
        guard let storeID = reader.bytes(StoreKey.storeIDLength) else { throw .truncated }
        // A token of another store cannot be checked here: say so rather than "altered".
        guard storeID == key.storeID else { throw .foreignStore }
        guard bytes.count >= macLength + 1 + StoreKey.storeIDLength else { throw .truncated }
        let signed = bytes[0..<(bytes.count - macLength)]
        let mac = bytes[(bytes.count - macLength)...]
        guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: signed, using: SymmetricKey(data: key.secret)) else {
            throw .altered
        }
        // Signed by this store's key: the fields were written by `encode`, but are still read
        // within bounds.
        reader = ByteReader(Array(signed))
        _ = reader.byte()
        _ = reader.bytes(StoreKey.storeIDLength)
        guard let item = reader.integer(), let kind = reader.byte(), let modified = reader.integer(),
              let made = reader.integer(), let inode = reader.integer(), let container = reader.text(),
              let scope = reader.text(), let path = reader.text(), let name = reader.text(), let flags = reader.byte() else {
            throw .truncated
        }
        guard let resourceType = Bookmark.ResourceType(rawValue: kind), item != 0 else { throw .altered }
        var securityScope: Bookmark.SecurityScope?
        if flags & 1 != 0 {
            guard let issuedTo = reader.text() else { throw .truncated }
            securityScope = Bookmark.SecurityScope(issuedTo: issuedTo, readOnly: flags & 2 != 0)
        }
        var madeOn: [UInt8]?
        if flags & 4 != 0 {
            guard let store = reader.bytes(StoreKey.storeIDLength) else { throw .truncated }
            madeOn = store
        }
        guard reader.isAtEnd else { throw .altered }
        return Bookmark(storeID: storeID, item: ItemID(rawValue: item), container: container, scope: scope, path: path,
                        backingInode: inode, contentModified: Double(Int64(bitPattern: modified)) / 1e9,
                        resourceType: resourceType, localizedName: name, made: Double(Int64(bitPattern: made)) / 1e9,
                        securityScope: securityScope, madeOn: madeOn)
    }
}

/// Why a token was refused, in words that say what to do.
public enum BookmarkTokenProblem: Error, Sendable, Equatable, CustomStringConvertible {
    case notAToken, unsupportedFormat, badEncoding, truncated, tooLong, foreignStore, altered

    public var description: String {
        switch self {
        case .notAToken: "not a docfs bookmark (a token starts with \(BookmarkToken.prefix))"
        case .unsupportedFormat: "a docfs bookmark of a format this docfs does not read: make it again with this docfs"
        case .badEncoding: "the bookmark is damaged (it holds characters a token never has): copy it whole, as docfs printed it"
        case .truncated: "the bookmark is cut short: copy it whole, as docfs printed it"
        case .tooLong: "too long to be a docfs bookmark"
        case .foreignStore: "the bookmark was made by another store: resolve it against the store it came from"
        case .altered: "the bookmark was altered or forged (its signature does not match): refused"
        }
    }
}

/// Unpadded base64url (RFC 4648 §5), strict: any other character, or a length no encoding
/// has, is refused.
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out += [alphabet[Int(n >> 18)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)], alphabet[Int(n & 63)]]
            i += 3
        }
        let rest = bytes.count - i
        if rest == 1 {
            let n = UInt32(bytes[i]) << 16
            out += [alphabet[Int(n >> 18)], alphabet[Int(n >> 12 & 63)]]
        } else if rest == 2 {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            out += [alphabet[Int(n >> 18)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        guard text.count % 4 != 1 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(text.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for c in text {
            let v = values[Int(c)]
            guard v != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero (one encoding per byte string).
        guard accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}

/// Writes a token's fields: integers little-endian, texts as a 16-bit length then UTF-8.
struct ByteWriter {
    var output: [UInt8] = []

    mutating func byte(_ value: UInt8) { output.append(value) }
    mutating func bytes(_ value: [UInt8]) { output += value }
    mutating func integer(_ value: UInt64) {
        for shift in stride(from: 0, to: 64, by: 8) { output.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }
    mutating func text(_ value: String) {
        let utf8 = Array(value.utf8.prefix(BookmarkToken.longestText))
        output += [UInt8(utf8.count & 0xFF), UInt8(utf8.count >> 8)]
        output += utf8
    }
}

/// Reads what `ByteWriter` wrote; nil whenever a field would run past the end.
struct ByteReader {
    private let input: [UInt8]
    private var offset = 0

    init(_ input: [UInt8]) { self.input = input }

    var isAtEnd: Bool { offset == input.count }

    mutating func byte() -> UInt8? {
        guard offset < input.count else { return nil }
        defer { offset += 1 }
        return input[offset]
    }

    mutating func bytes(_ count: Int) -> [UInt8]? {
        guard count >= 0, input.count - offset >= count else { return nil }
        defer { offset += count }
        return Array(input[offset..<(offset + count)])
    }

    mutating func integer() -> UInt64? {
        guard let bytes = bytes(8) else { return nil }
        return bytes.reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }

    mutating func text() -> String? {
        guard let low = byte(), let high = byte() else { return nil }
        let count = Int(low) | Int(high) << 8
        guard count <= BookmarkToken.longestText, let bytes = bytes(count) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }
}
