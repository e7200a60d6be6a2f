import DocfsCore
import Foundation

/// What a store records of the remote it is linked to (issue 22 §1), in `STORE/remote.json`:
/// the connection URI without its password (libpq's `~/.pgpass` or `PGPASSWORD` supply it),
/// the name this machine commits under and the item id space the remote gave it. No file: the
/// store is not linked.
public struct RemoteLink: Codable, Sendable, Equatable {
    public var uri: String
    public var machine: String
    public var space: UInt64
    /// When the link was made (seconds since the epoch).
    public var linked: Double
    /// The user this machine's versions are made by on the remote (every machine lists them
    /// so): who linked the store; nil in a link made before it was recorded (then who serves it).
    public var user: String?

    public init(uri: String, machine: String, space: UInt64, linked: Double, user: String? = RemoteLink.currentUser) {
        self.uri = uri
        self.machine = machine
        self.space = space
        self.linked = linked
        self.user = user
    }

    /// The user versions made here are recorded by.
    public var maker: String { user ?? Self.currentUser }

    /// The user running this process: `USER`, else the user id.
    public static var currentUser: String {
        ProcessInfo.processInfo.environment["USER"] ?? String(getuid())
    }

    /// The store's link; nil when it has none.
    public static func load(_ layout: StoreLayout) throws(DocfsError) -> RemoteLink? {
        guard let bytes = try StoreFiles.read(layout.remoteFile) else { return nil }
        do {
            return try JSONDecoder().decode(RemoteLink.self, from: Data(bytes))
        } catch {
            throw DocfsError(.storeUnavailable, "\(layout.remoteFile) is damaged (\(error)): link the store again with docfs remote link, or remove the file to unlink it")
        }
    }

    public func save(_ layout: StoreLayout) throws(DocfsError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let bytes: Data
        do { bytes = try encoder.encode(self) } catch {
            throw DocfsError(.internalFailure, "cannot encode the remote link: \(error)")
        }
        try StoreFiles.replace(layout.remoteFile, with: Array(bytes) + [10])
    }

    public static func remove(_ layout: StoreLayout) throws(DocfsError) {
        if unlink(layout.remoteFile) != 0 && errno != ENOENT {
            throw DocfsError.errno("removing \(layout.remoteFile)")
        }
    }

    /// This machine's name as linking gives it by default: the host name.
    public static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "machine" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "machine" : name
    }
}
