import Crypto

/// How a file is named in a freedesktop shared thumbnail repository: `.sh_thumbnails/<size>/`
/// holds `<md5 of the file's URI>.png` for the files of the folder it sits in, where the URI is
/// relative to the folder. Spec 0.8 takes the file-name part of the URI; readers in use hash
/// the plain file name, later drafts `./` and the escaped name. A file answers to each of
/// these (one for a plain ASCII name), and its thumbnail says the URI it was asked by.
public enum SharedThumbnailNames {
    /// The repository folder's name.
    public static let repository = ".sh_thumbnails"

    /// One name a file is known by in a repository.
    public struct Key: Hashable, Sendable {
        /// `<32 hex digits>.png`
        public var fileName: String
        /// What `Thumb::URI` says.
        public var uri: String
    }

    /// The names the file `name` (its bytes) is known by; the first is the one listed.
    public static func keys(of name: [UInt8]) -> [Key] {
        let escaped = escape(name)
        var keys = [Key(fileName: thumbnailName(hashing: name), uri: escaped)]
        if Array(escaped.utf8) != name { keys.append(Key(fileName: thumbnailName(hashing: Array(escaped.utf8)), uri: escaped)) }
        let relative = "./" + escaped
        keys.append(Key(fileName: thumbnailName(hashing: Array(relative.utf8)), uri: relative))
        return keys
    }

    /// Whether `name` could be a thumbnail's name at all (32 lowercase hex digits, `.png`).
    public static func isThumbnailName(_ name: [UInt8]) -> Bool {
        name.count == 36 && name.suffix(4).elementsEqual(".png".utf8)
            && name.prefix(32).allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    static func thumbnailName(hashing bytes: [UInt8]) -> String {
        Insecure.MD5.hash(data: bytes).map { hex($0) }.joined() + ".png"
    }

    /// A file name as a URI path segment: bytes outside the characters a segment may hold
    /// unescaped (RFC 3986 pchar) become %XX.
    public static func escape(_ name: [UInt8]) -> String {
        var out = ""
        for byte in name {
            if isUnreserved(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "%" + hex(byte).uppercased()
            }
        }
        return out
    }

    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            Array("-._~!$&'()*+,;=:@".utf8).contains(byte)
        }
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef".unicodeScalars)
        return String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 15)])
    }
}
