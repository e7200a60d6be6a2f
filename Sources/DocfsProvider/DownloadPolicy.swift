import DocfsCore
import FoundationEssentials

/// What a linked store downloads (DESIGN §9.1, issue 23), from the store's `settings.json`
/// (`{"sync": {"downloads": "onDemand", "downloadWaitSeconds": 30}}`, every key optional):
/// with `onDemand`, a document another machine made is listed at once and *promised* (see
/// `PromisedContent`), its content fetched when read; with `everything`, every version is
/// downloaded as it arrives.
public struct DownloadPolicy: Sendable, Equatable {
    public enum Downloads: String, Sendable, Decodable {
        case onDemand, everything
    }

    public var downloads: Downloads
    /// Seconds a read of a promised file waits for its bytes before it fails (EIO).
    public var waitSeconds: Double

    public static let defaults = DownloadPolicy(downloads: .everything, waitSeconds: 30)

    public init(downloads: Downloads, waitSeconds: Double) {
        self.downloads = downloads
        self.waitSeconds = waitSeconds
    }

    private struct Settings: Decodable {
        struct Sync: Decodable {
            var downloads: Downloads?
            var downloadWaitSeconds: Double?
        }
        var sync: Sync?
    }

    /// The policy in `settings` (a settings.json file), or the defaults when there is none.
    public static func load(from settings: String) throws(DocfsError) -> DownloadPolicy {
        guard let file = try StoreSettingsFile.decode(Settings.self, from: settings) else { return defaults }
        var policy = defaults
        if let downloads = file.sync?.downloads { policy.downloads = downloads }
        if let seconds = file.sync?.downloadWaitSeconds { policy.waitSeconds = seconds }
        guard policy.waitSeconds > 0, policy.waitSeconds.isFinite else {
            throw DocfsError(.storeUnavailable, "\(settings): sync.downloadWaitSeconds must be a positive number of seconds")
        }
        return policy
    }
}
