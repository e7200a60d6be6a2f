import DocfsCore
import FoundationEssentials

/// How many previous versions a store keeps, and of what (issue 3 §4). Read from the store's
/// `settings.json` (`{"versions": {"keep": 32, "maximumAgeDays": 30, "maximumTotalMiB": 2048,
/// "maximumFileMiB": 64, "thinningWindowSeconds": 60}}`, every key optional); the defaults suit
/// documents.
public struct VersionPolicy: Sendable, Equatable {
    /// Previous versions kept per item; older ones are dropped first.
    public var maximumCount: Int
    /// Seconds a previous version is kept.
    public var maximumAge: Double
    /// Bytes all kept previous versions of the store may take; the oldest go first.
    public var maximumTotalSize: Int64
    /// Files larger than this are written in place without keeping what they held (copying a
    /// disk image on every open for writing would cost more than it saves).
    public var maximumFileSize: Int64
    /// Seconds after an item's content was last kept as a copy during which further write
    /// sessions keep nothing (thinning, as macOS does with document versions): a burst of saves
    /// costs one copy, and the state before the burst is kept. 0 keeps every session's
    /// predecessor. The newest state is the current file, never thinned away.
    public var thinningWindow: Double

    public static let defaults = VersionPolicy(maximumCount: 32, maximumAge: 30 * 86400, maximumTotalSize: 2 << 30,
                                               maximumFileSize: 64 << 20, thinningWindow: 60)

    public init(maximumCount: Int, maximumAge: Double, maximumTotalSize: Int64, maximumFileSize: Int64,
                thinningWindow: Double = 0) {
        self.maximumCount = maximumCount
        self.maximumAge = maximumAge
        self.maximumTotalSize = maximumTotalSize
        self.maximumFileSize = maximumFileSize
        self.thinningWindow = thinningWindow
    }

    private struct Settings: Decodable {
        struct Versions: Decodable {
            var keep: Int?
            var maximumAgeDays: Double?
            var maximumTotalMiB: Int64?
            var maximumFileMiB: Int64?
            var thinningWindowSeconds: Double?
        }
        var versions: Versions?
    }

    /// The policy in `settings` (a settings.json file), or the defaults when there is none.
    public static func load(from settings: String) throws(DocfsError) -> VersionPolicy {
        guard let file = try StoreSettingsFile.decode(Settings.self, from: settings) else { return defaults }
        let versions = file.versions
        var policy = defaults
        if let keep = versions?.keep { policy.maximumCount = keep }
        if let days = versions?.maximumAgeDays { policy.maximumAge = days * 86400 }
        if let mib = versions?.maximumTotalMiB { policy.maximumTotalSize = mib << 20 }
        if let mib = versions?.maximumFileMiB { policy.maximumFileSize = mib << 20 }
        if let seconds = versions?.thinningWindowSeconds { policy.thinningWindow = seconds }
        guard policy.maximumCount >= 0, policy.maximumAge >= 0, policy.maximumTotalSize >= 0, policy.maximumFileSize >= 0,
              policy.thinningWindow >= 0, policy.thinningWindow.isFinite else {
            throw DocfsError(.storeUnavailable, "\(settings): version limits cannot be negative")
        }
        return policy
    }
}
