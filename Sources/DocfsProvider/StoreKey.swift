import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The store's identity and secret (DESIGN §3, §7): a random store id, which every bookmark
/// names so a token from another store is told apart, and the key bookmarks are signed with.
/// Kept in `keys/bookmarks.key` (mode 0600 in a 0700 folder), made once, the first time a
/// store is opened; whoever can read it can make tokens for the store.
public struct StoreKey: Sendable, Equatable {
    public static let storeIDLength = 16
    public static let secretLength = 32

    public let storeID: [UInt8]
    public let secret: [UInt8]

    public init(storeID: [UInt8], secret: [UInt8]) {
        self.storeID = storeID
        self.secret = secret
    }

    /// A new random key.
    public static func random() -> StoreKey {
        var generator = SystemRandomNumberGenerator()
        return StoreKey(storeID: (0..<storeIDLength).map { _ in UInt8.random(in: 0...255, using: &generator) },
                        secret: (0..<secretLength).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// The store's key at `layout`, made when it has none yet (two processes making it at once
    /// agree on the first one written).
    public static func load(_ layout: StoreLayout) throws(DocfsError) -> StoreKey {
        if let key = try readKey(layout.bookmarkKeyFile) { return key }
        try LocalStore.makeDirectory(layout.keysDirectory)
        chmod(layout.keysDirectory, 0o700)
        let key = random()
        let incoming = layout.bookmarkKeyFile + ".\(getpid()).new"
        let fd = open(incoming, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw DocfsError(.storeUnavailable, "cannot create the store's key \(layout.bookmarkKeyFile)",
                             cause: DocfsError.errno("open"))
        }
        let bytes = key.bytes
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count && synced else {
            unlink(incoming)
            throw DocfsError(.storeUnavailable, "cannot write the store's key \(layout.bookmarkKeyFile)",
                             cause: DocfsError.errno("write"))
        }
        // link(2) refuses to replace: whoever links first made the store's key, and everyone
        // reads that one.
        let linked = link(incoming, layout.bookmarkKeyFile) == 0 || errno == EEXIST
        let cause = DocfsError.errno("link")
        unlink(incoming)
        guard linked, let key = try readKey(layout.bookmarkKeyFile) else {
            throw DocfsError(.storeUnavailable, "the store's key \(layout.bookmarkKeyFile) could not be made: check the store's permissions",
                             cause: cause)
        }
        return key
    }

    /// Makes `key` the store's key at `layout` (a remote's, shared by every linked machine),
    /// replacing the one there in one rename.
    public static func replace(_ layout: StoreLayout, with key: StoreKey) throws(DocfsError) {
        try LocalStore.makeDirectory(layout.keysDirectory)
        chmod(layout.keysDirectory, 0o700)
        let incoming = layout.bookmarkKeyFile + ".\(getpid()).new"
        let fd = open(incoming, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw DocfsError(.storeUnavailable, "cannot write the store's key \(layout.bookmarkKeyFile)", cause: DocfsError.errno("open"))
        }
        let bytes = key.bytes
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count && synced && rename(incoming, layout.bookmarkKeyFile) == 0 else {
            let cause = DocfsError.errno("write")
            unlink(incoming)
            throw DocfsError(.storeUnavailable, "cannot write the store's key \(layout.bookmarkKeyFile)", cause: cause)
        }
    }

    /// The key as it is kept: the store id, then the secret.
    public var bytes: [UInt8] { storeID + secret }

    /// A key kept as `bytes`; nil when they are not one.
    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.storeIDLength + Self.secretLength else { return nil }
        self.init(storeID: Array(bytes[0..<Self.storeIDLength]), secret: Array(bytes[Self.storeIDLength...]))
    }

    /// The store's key when it has one already.
    public static func existing(_ layout: StoreLayout) throws(DocfsError) -> StoreKey? {
        try readKey(layout.bookmarkKeyFile)
    }

    /// The key in `path`; nil when there is no such file.
    static func readKey(_ path: String) throws(DocfsError) -> StoreKey? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw DocfsError(.storeUnavailable,
                             "cannot read the store's key \(path): bookmarks are made and resolved by the store's owner",
                             cause: DocfsError.errno("open"))
        }
        defer { close(fd) }
        let length = storeIDLength + secretLength
        var bytes = [UInt8](repeating: 0, count: length + 1)
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n == length else {
            throw DocfsError(.storeUnavailable,
                             "the store's key \(path) is damaged (\(max(n, 0)) bytes, not \(length)): bookmarks made with it can no longer be checked; remove it to make a new one")
        }
        return StoreKey(storeID: Array(bytes[0..<storeIDLength]), secret: Array(bytes[storeIDLength..<length]))
    }

    /// The store id as 32 hex digits.
    public var storeIDText: String { storeID.map { String($0, radix: 16).leftPadded(to: 2) }.joined() }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
