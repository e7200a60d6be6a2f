/// The formats thumbnails are made of (issue 5 §2), told by their first bytes: JPEG, PNG, WebP,
/// GIF, TIFF, HEIF/AVIF and PDF. Only files that start like one go to the thumbnail worker, so
/// text, archives and the like cost one small read and no decoder.
public enum ImageSignature: String, Sendable, CaseIterable {
    case jpeg, png, webp, gif, tiff, heif, pdf

    /// How many first bytes `of` looks at.
    public static let length = 32

    /// The format `start` (a file's first bytes) begins like; nil for anything else.
    public static func of(_ start: [UInt8]) -> ImageSignature? {
        func begins(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            start.count >= offset + prefix.count && Array(start[offset..<offset + prefix.count]) == prefix
        }
        if begins([0xFF, 0xD8, 0xFF]) { return .jpeg }
        if begins([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if begins(Array("RIFF".utf8)) && begins(Array("WEBP".utf8), at: 8) { return .webp }
        if begins(Array("GIF87a".utf8)) || begins(Array("GIF89a".utf8)) { return .gif }
        if begins([0x49, 0x49, 0x2A, 0x00]) || begins([0x4D, 0x4D, 0x00, 0x2A]) { return .tiff }
        if begins(Array("ftyp".utf8), at: 4), start.count >= 12 {
            let brand = String(decoding: start[8..<12], as: UTF8.self)
            if ["heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1", "avif", "avis"].contains(brand) { return .heif }
        }
        if begins(Array("%PDF-".utf8)) { return .pdf }
        return nil
    }

    /// The libvips loaders that read the format (class names, as `vips_foreign_find_load` answers).
    var loaders: [String] {
        switch self {
        case .jpeg: ["VipsForeignLoadJpegFile"]
        case .png: ["VipsForeignLoadPngFile", "VipsForeignLoadSpngFile"]
        case .webp: ["VipsForeignLoadWebpFile"]
        case .gif: ["VipsForeignLoadNsgifFile", "VipsForeignLoadGifFile"]
        case .tiff: ["VipsForeignLoadTiffFile"]
        case .heif: ["VipsForeignLoadHeifFile"]
        case .pdf: ["VipsForeignLoadPdfFile"]
        }
    }

    /// Most pixels a header may declare before the image is refused undecoded. JPEG decodes at
    /// 1/8 scale when shrinking, so it may declare more; a PDF page is rendered at the size
    /// asked, whatever it declares.
    var pixelLimit: Int {
        switch self {
        case .jpeg: 1 << 30
        case .pdf: Int.max
        default: 100_000_000
        }
    }
}
