import CVips

/// What docfs reads and writes of a PNG without decoding it: the signature, the size its
/// header (IHDR) declares, and text chunks (tEXt) added after the header, as the freedesktop
/// thumbnail spec asks of a thumbnail (`Thumb::URI`, `Thumb::MTime`).
public enum PNGChunks {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// The width and height `png`'s header declares; nil when it does not start as a PNG does
    /// (signature, then a well-formed IHDR chunk).
    public static func size(of png: [UInt8]) -> (width: Int, height: Int)? {
        guard png.count >= 33, Array(png[0..<8]) == signature, integer(png, at: 8) == 13,
              Array(png[12..<16]) == Array("IHDR".utf8), crc(png[12..<29]) == UInt32(integer(png, at: 29)) else { return nil }
        let width = integer(png, at: 16)
        let height = integer(png, at: 20)
        guard width > 0, height > 0 else { return nil }
        return (width, height)
    }

    /// `png` with a tEXt chunk for each of `entries` (keyword, Latin-1 text) after its header.
    /// `png` must have a header (see `size(of:)`).
    public static func addingText(_ entries: [(String, String)], to png: [UInt8]) -> [UInt8] {
        var chunks: [UInt8] = []
        for (keyword, text) in entries {
            let data = Array("tEXt".utf8) + latin1(keyword) + [0] + latin1(text)
            chunks += bigEndian(UInt32(data.count - 4)) + data + bigEndian(crc(data[...]))
        }
        let afterHeader = 33
        return Array(png[0..<afterHeader]) + chunks + Array(png[afterHeader...])
    }

    private static func latin1(_ text: String) -> [UInt8] {
        text.unicodeScalars.map { $0.value < 256 ? UInt8($0.value) : UInt8(ascii: "?") }
    }

    private static func integer(_ bytes: [UInt8], at offset: Int) -> Int {
        bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    private static func crc(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        let bytes = Array(bytes)
        return UInt32(bytes.withUnsafeBufferPointer { docfs_crc32(0, $0.baseAddress, UInt32($0.count)) })
    }
}
