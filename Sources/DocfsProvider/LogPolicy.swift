import DocfsCore
import FoundationEssentials

/// How big the background daemon's log (`STORE/logs/daemon.log`) may grow before it is rotated
/// to `daemon.log.1` (the one before that goes). Read from the store's `settings.json`
/// (`{"log": {"maximumMiB": 8}}`, optional): a daemon that runs for months must not fill the
/// user's store with its log.
public struct LogPolicy: Sendable, Equatable {
    /// Bytes past which the log is rotated.
    public var maximumSize: Int64

    public static let defaults = LogPolicy(maximumSize: 8 << 20)

    public init(maximumSize: Int64) {
        self.maximumSize = maximumSize
    }

    private struct Settings: Decodable {
        struct Log: Decodable {
            var maximumMiB: Int64?
        }
        var log: Log?
    }

    /// The policy in `settings` (a settings.json file), or the defaults when there is none.
    public static func load(from settings: String) throws(DocfsError) -> LogPolicy {
        guard let mib = try StoreSettingsFile.decode(Settings.self, from: settings)?.log?.maximumMiB else { return defaults }
        guard mib >= 1, mib <= 1 << 20 else {
            throw DocfsError(.storeUnavailable, "\(settings): log.maximumMiB must be between 1 and 1048576")
        }
        return LogPolicy(maximumSize: mib << 20)
    }
}
