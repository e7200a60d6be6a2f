#if canImport(Glibc)
import Glibc
#endif

/// One item's thumbnails as stored (`STORE/thumbnails/<item>.thumb`): a short text header saying
/// which content they were made from, by whom, and where each rendition's PNG lies, then the
/// PNGs. One file per item, replaced by a rename, so a reader sees one whole set or the last one.
///
///     docfs-thumbnail 1
///     origin generated
///     stamp 1234 5000 3              (backing inode, size, version)
///     image 1024 768
///     part normal 180 4000
///     …
///     (an empty line, then the PNGs)
///
/// A set of origin `none` records that the content has no thumbnail (not an image libvips
/// reads, or damaged), so it is not tried again until the content changes.
public struct ThumbnailFile: Sendable, Equatable {
    public enum Origin: String, Sendable, Codable {
        /// Made by the thumbnail worker from the content.
        case generated
        /// Set by a user (setfattr -n user.docfs.thumbnail): kept until the content changes.
        case user
        /// The content has no thumbnail.
        case none
    }

    public var origin: Origin
    public var stamp: ContentStamp
    /// The size of the largest rendition (xx-large).
    public var width: Int
    public var height: Int
    /// Where each rendition lies in the file: offset and length.
    public var parts: [ThumbnailSize: (offset: Int, length: Int)]

    public static func == (a: ThumbnailFile, b: ThumbnailFile) -> Bool {
        a.origin == b.origin && a.stamp == b.stamp && a.width == b.width && a.height == b.height
            && a.parts.mapValues { [$0.offset, $0.length] } == b.parts.mapValues { [$0.offset, $0.length] }
    }

    static let magic = "docfs-thumbnail 1"
    /// Headers are short; a reader looks at this many bytes for one.
    static let headerLimit = 1024

    /// The bytes of a set: the header, then `renditions` in the order of `ThumbnailSize.allCases`.
    public static func encode(origin: Origin, stamp: ContentStamp, width: Int, height: Int,
                              renditions: [ThumbnailSize: [UInt8]]) -> [UInt8] {
        let sizes = ThumbnailSize.allCases.filter { renditions[$0] != nil }
        func header(offset: Int) -> [UInt8] {
            var lines = [magic, "origin \(origin.rawValue)", "stamp \(stamp)", "image \(width) \(height)"]
            var position = offset
            for size in sizes {
                let length = renditions[size]!.count
                lines.append("part \(size.rawValue) \(position) \(length)")
                position += length
            }
            return Array((lines.joined(separator: "\n") + "\n\n").utf8)
        }
        // The offsets depend on the header's own length: settle it (it grows by a digit at most).
        var head = header(offset: 0)
        while true {
            let next = header(offset: head.count)
            if next.count == head.count { head = next; break }
            head = next
        }
        var bytes = head
        for size in sizes { bytes += renditions[size]! }
        return bytes
    }

    /// Reads the header of the set in `fd`; nil when it is not one.
    public static func read(_ fd: Int32) -> ThumbnailFile? {
        var buffer = [UInt8](repeating: 0, count: headerLimit)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, headerLimit, 0) }
        guard n > 0 else { return nil }
        return parse(Array(buffer[0..<n]))
    }

    static func parse(_ bytes: [UInt8]) -> ThumbnailFile? {
        guard let end = (0..<max(bytes.count - 1, 0)).first(where: { bytes[$0] == 10 && bytes[$0 + 1] == 10 }) else { return nil }
        let lines = String(decoding: bytes[0..<end], as: UTF8.self).split(separator: "\n")
        guard lines.first.map(String.init) == magic else { return nil }
        var origin: Origin?
        var stamp: ContentStamp?
        var width = 0
        var height = 0
        var parts: [ThumbnailSize: (offset: Int, length: Int)] = [:]
        for line in lines.dropFirst() {
            let words = line.split(separator: " ")
            switch words.first {
            case "origin": origin = words.count == 2 ? Origin(rawValue: String(words[1])) : nil
            case "stamp": stamp = ContentStamp(words: words.dropFirst())
            case "image":
                guard words.count == 3, let w = Int(words[1]), let h = Int(words[2]) else { return nil }
                (width, height) = (w, h)
            case "part":
                guard words.count == 4, let size = ThumbnailSize(rawValue: String(words[1])),
                      let offset = Int(words[2]), let length = Int(words[3]), offset > end, length > 0 else { return nil }
                parts[size] = (offset, length)
            default: return nil
            }
        }
        guard let origin, let stamp else { return nil }
        return ThumbnailFile(origin: origin, stamp: stamp, width: width, height: height, parts: parts)
    }

    /// The PNG of `size` from the set in `fd`; nil when the set has none or it cannot be read.
    public func rendition(_ size: ThumbnailSize, from fd: Int32) -> [UInt8]? {
        guard let (offset, length) = parts[size], length <= 64 << 20 else { return nil }
        var bytes = [UInt8](repeating: 0, count: length)
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, length, off_t(offset)) }
        return n == length ? bytes : nil
    }
}
