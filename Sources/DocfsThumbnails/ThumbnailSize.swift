/// The renditions a thumbnail set holds: the freedesktop sizes (the longest side at most 128,
/// 256, 512 or 1024 pixels) and the one `user.docfs.thumbnail` returns, which fits 1024×1024
/// and 64 KiB (DESIGN §6).
public enum ThumbnailSize: String, Sendable, CaseIterable, Codable {
    case normal, large, xLarge = "x-large", xxLarge = "xx-large", attribute

    /// The freedesktop sizes, as folder names of a shared thumbnail repository (`.sh_thumbnails/large`).
    public static let freedesktop: [ThumbnailSize] = [.normal, .large, .xLarge, .xxLarge]

    /// The most pixels of the longest side.
    public var pixels: Int {
        switch self {
        case .normal: 128
        case .large: 256
        case .xLarge: 512
        case .xxLarge, .attribute: 1024
        }
    }

    /// The largest value of an extended attribute the kernel passes (64 KiB).
    public static let attributeLimit = 65536
}
