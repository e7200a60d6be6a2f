/// Names as text, exactly (issue 21 §2). A Linux name is any bytes but `/` and NUL, while the
/// index, queries, bookmarks and the control protocol carry text; decoding names as UTF-8 would
/// turn every byte that is not UTF-8 into U+FFFD and make two names one. NameText maps bytes to
/// text one to one:
///
/// - valid UTF-8 stays as it is;
/// - each byte that is not part of valid UTF-8 (always 0x80–0xFF) becomes the character
///   U+10FD00 + byte (U+10FD80–U+10FDFF, in plane 16's private use area);
/// - a character of the reserved range U+10FD00–U+10FDFF that a name really holds is written
///   after U+10FD00, its escape.
///
/// So every name without those private characters (practically every name) reads as itself,
/// and `decode(encode(bytes)) == bytes` for all bytes. Paths are names joined by `/`, which is
/// never part of an undecodable sequence, so a path encodes name by name or at once alike.
/// What people and programs are shown is made from this text: `shown(_:style:)` quotes as `ls`
/// does, `reversibleJSON(_:)` writes the bytes as PEP 383 escapes.
public enum NameText {
    /// The escape, and the base of the characters standing for undecodable bytes.
    static let base: UInt32 = 0x10FD00

    private static func isReserved(_ value: UInt32) -> Bool { value & ~0xFF == base }

    /// The text of `bytes`.
    public static func encode<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let bytes = Array(bytes)
        // The common case, cheaply: ASCII and valid UTF-8 without reserved characters.
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        var scalars = String.UnicodeScalarView()
        var i = 0
        while i < bytes.count {
            if let (value, length) = scalar(in: bytes, at: i) {
                if isReserved(value) { scalars.append(Unicode.Scalar(base)!) }
                scalars.append(Unicode.Scalar(value)!)
                i += length
            } else {
                scalars.append(Unicode.Scalar(base + UInt32(bytes[i]))!)
                i += 1
            }
        }
        return String(scalars)
    }

    /// The bytes `text` stands for. Text that `encode` did not make (typed by someone) decodes
    /// as its UTF-8, but for the reserved characters.
    public static func decode(_ text: String) -> [UInt8] {
        // The common case, cheaply: no reserved character, so the text's UTF-8 is the bytes
        // (reserved characters take four bytes, the first 0xF4: only those need a look).
        if !text.utf8.contains(0xF4) || isPlain(text) { return Array(text.utf8) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var escaped = false
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if escaped || !isReserved(value) {
                UTF8.encode(scalar) { bytes.append($0) }
                escaped = false
            } else if value == base {
                escaped = true
            } else if value >= base + 0x80 {
                bytes.append(UInt8(value - base))
            } else {
                UTF8.encode(scalar) { bytes.append($0) }
            }
        }
        return bytes
    }

    /// The byte a character of `encode`'s text stands for, when it stands for one.
    public static func byte(standingFor scalar: Unicode.Scalar) -> UInt8? {
        scalar.value >= base + 0x80 && scalar.value <= base + 0xFF ? UInt8(scalar.value - base) : nil
    }

    /// Whether `scalar` is the escape that comes before a reserved character a name holds.
    public static func isEscape(_ scalar: Unicode.Scalar) -> Bool { scalar.value == base }

    /// Whether `text` stands for bytes that are valid UTF-8 and reads as itself.
    public static func isPlain(_ text: String) -> Bool {
        !text.unicodeScalars.contains { isReserved($0.value) }
    }

    /// The scalar a valid UTF-8 sequence at `i` encodes, and its length; nil when the bytes at
    /// `i` are not valid UTF-8 (Unicode's table 3-7: no overlongs, surrogates or values past
    /// U+10FFFF).
    static func scalar(in bytes: [UInt8], at i: Int) -> (UInt32, Int)? {
        let b0 = bytes[i]
        if b0 < 0x80 { return (UInt32(b0), 1) }
        let length: Int
        var low: UInt8 = 0x80, high: UInt8 = 0xBF
        switch b0 {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F
        case 0xF0: length = 4; low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F
        default: return nil
        }
        guard i + length <= bytes.count else { return nil }
        var value = UInt32(b0) & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07)
        for k in 1..<length {
            let b = bytes[i + k]
            let (lo, hi) = k == 1 ? (low, high) : (UInt8(0x80), UInt8(0xBF))
            guard b >= lo && b <= hi else { return nil }
            value = value << 6 | UInt32(b & 0x3F)
        }
        return (value, length)
    }
}
