import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Thumbnail sets as they travel between linked machines (issue 22 §2: other machines never
/// render what one has): the set without this machine's stamp (the content's inode here means
/// nothing elsewhere), and a travelled set installed for the content it arrived with here.
extension ThumbnailStore {
    /// The item's set as it travels, if one made from the content `stamp` describes is stored
    /// (a set saying the content has none travels too: nobody tries again).
    public func portableSet(of item: ItemID, stamp: ContentStamp) -> [UInt8]? {
        guard let (file, fd) = open(item) else { return nil }
        defer { close(fd) }
        guard file.stamp == stamp else { return nil }
        var renditions: [ThumbnailSize: [UInt8]] = [:]
        for size in file.parts.keys {
            guard let png = file.rendition(size, from: fd) else { return nil }
            renditions[size] = png
        }
        return ThumbnailFile.encode(origin: file.origin, stamp: Self.travelling, width: file.width, height: file.height,
                                    renditions: renditions)
    }

    /// Installs a travelled set for the item's content here (`stamp`); false when `bytes` is
    /// not a set.
    @discardableResult
    public func installPortableSet(_ bytes: [UInt8], for item: ItemID, stamp: ContentStamp) throws(DocfsError) -> Bool {
        guard let file = ThumbnailFile.parse(Array(bytes.prefix(ThumbnailFile.headerLimit))) else { return false }
        var renditions: [ThumbnailSize: [UInt8]] = [:]
        for (size, part) in file.parts {
            guard part.offset >= 0, part.length > 0, part.offset + part.length <= bytes.count else { return false }
            renditions[size] = Array(bytes[part.offset..<(part.offset + part.length)])
        }
        let set = ThumbnailFile.encode(origin: file.origin, stamp: stamp, width: file.width, height: file.height, renditions: renditions)
        try write(set, as: item, job: newJob())
        return true
    }

    /// The stamp a travelling set carries: none of any machine's.
    static let travelling = ContentStamp(inode: 0, size: 0, version: 0)
}
