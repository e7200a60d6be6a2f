import DocfsCore
import Foundation

/// What a linked store downloads (DESIGN §9.1, issue 23), from the store's `settings.json`
/// (`{"sync": {"downloads": "onDemand", "downloadWaitSeconds": 30, "cacheLimit": "25%"}}`, every
/// key optional): with `onDemand`, a document another machine made is listed at once and
/// *promised* (see `PromisedContent`), its content fetched when read, and the content here is
/// kept under the cache limit by evicting what was used longest ago; with `everything`, every
/// version is downloaded as it arrives.
public struct DownloadPolicy: Sendable, Equatable {
    public enum Downloads: String, Sendable, Decodable {
        case onDemand, everything
    }

    public var downloads: Downloads
    /// Seconds a read of a promised file waits for its bytes before it fails (EIO).
    public var waitSeconds: Double

    /// How much downloaded content a store that downloads on demand keeps here.
    public var cacheLimit: CacheLimit

    /// The limit on the content kept here: `cacheLimit` in settings is a size (`20GB`,
    /// `512MiB`, a number of bytes), a share of the disk holding the store (`25%`), or `none`.
    public enum CacheLimit: Sendable, Equatable, Decodable {
        case none
        case bytes(Int64)
        case shareOfDisk(Double)

        public init(from decoder: any Decoder) throws {
            let value = try decoder.singleValueContainer()
            if let number = try? value.decode(Double.self) {
                guard number >= 0, number < 9.2e18 else { throw Self.invalid(decoder, "\(number)") }
                self = .bytes(Int64(number))
                return
            }
            let text = try value.decode(String.self).trimmingCharacters(in: .whitespaces)
            guard let limit = Self(text) else { throw Self.invalid(decoder, text) }
            self = limit
        }

        /// `none`, a share (`25%`) or a size; nil when `text` is none of them.
        public init?(_ text: String) {
            if text.lowercased() == "none" {
                self = .none
            } else if text.hasSuffix("%") {
                guard let percent = Double(text.dropLast().trimmingCharacters(in: .whitespaces)), percent > 0, percent <= 100 else { return nil }
                self = .shareOfDisk(percent / 100)
            } else {
                guard let bytes = SizeLiteral.bytes(text.replacingOccurrences(of: " ", with: "")) else { return nil }
                self = .bytes(bytes)
            }
        }

        private static func invalid(_ decoder: any Decoder, _ text: String) -> DecodingError {
            .dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription:
                "cacheLimit \(text) is neither a size (20GB, 512MiB, bytes), a share of the disk (25%) nor none"))
        }

        /// The limit in bytes for a store at `root`; nil: none.
        public func bytes(forStoreAt root: String) -> Int64? {
            switch self {
            case .none: return nil
            case .bytes(let bytes): return bytes
            case .shareOfDisk(let share):
                var disk = statvfs()
                guard statvfs(root, &disk) == 0 else { return nil }
                return Int64(Double(disk.f_blocks) * Double(disk.f_frsize) * share)
            }
        }
    }

    public static let defaults = DownloadPolicy(downloads: .onDemand, waitSeconds: 30, cacheLimit: .shareOfDisk(0.25))

    public init(downloads: Downloads, waitSeconds: Double, cacheLimit: CacheLimit = .shareOfDisk(0.25)) {
        self.downloads = downloads
        self.waitSeconds = waitSeconds
        self.cacheLimit = cacheLimit
    }

    private struct Settings: Decodable {
        struct Sync: Decodable {
            var downloads: Downloads?
            var downloadWaitSeconds: Double?
            var cacheLimit: CacheLimit?
        }
        var sync: Sync?
    }

    /// The policy in `settings` (a settings.json file), or the defaults when there is none.
    public static func load(from settings: String) throws(DocfsError) -> DownloadPolicy {
        guard let file = try StoreSettingsFile.decode(Settings.self, from: settings) else { return defaults }
        var policy = defaults
        if let downloads = file.sync?.downloads { policy.downloads = downloads }
        if let seconds = file.sync?.downloadWaitSeconds { policy.waitSeconds = seconds }
        if let limit = file.sync?.cacheLimit { policy.cacheLimit = limit }
        guard policy.waitSeconds > 0, policy.waitSeconds.isFinite else {
            throw DocfsError(.storeUnavailable, "\(settings): sync.downloadWaitSeconds must be a positive number of seconds")
        }
        return policy
    }
}
