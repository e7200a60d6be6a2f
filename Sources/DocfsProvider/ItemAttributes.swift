import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The docfs attributes a file or folder carries in the store, as extended attributes of its
/// backing file, so they travel with it (renames, moves, backups that keep xattrs). They are
/// the ones users read through the mount (DESIGN §6); docfs alone writes them.
public enum ItemAttributes {
    /// The persistent item id, in decimal.
    public static let id = "user.docfs.id"
    /// The current version number, in decimal; `p1`, `p2`, … while it is a save not gone up
    /// yet to the remote the store is linked to (`VersionNumber`).
    public static let version = "user.docfs.version"
    /// A bookmark token for the item (made when read; see `BookmarkToken`).
    public static let bookmark = "user.docfs.bookmark"
    /// The item's thumbnail, a PNG (made when read; see `ThumbnailStore`).
    public static let thumbnail = "user.docfs.thumbnail"
    /// Sync state with a remote (DESIGN §6, §9.1); absent when the store is not linked.
    public static let status = "user.docfs.status"
    /// On a container's folder: the container's display name (on a reference: the name of the
    /// container that holds the original).
    public static let container = "user.docfs.container"
    /// On a promised file (DESIGN §9.1): the remote version number whose content it stands
    /// for, not on disk yet (see `PromisedContent`). This machine's bookkeeping: never travels.
    public static let promised = "user.docfs.promised"
    /// On a container's folder: the container's id.
    public static let containerID = "user.docfs.container-id"
    /// On a reference: 1.
    public static let external = "user.docfs.external"
    /// On a reference: where the original is, as a path of the user view.
    public static let original = "user.docfs.original"
    /// On a reference: its own path in its container (`/Documents/report.odt`).
    public static let localPath = "user.docfs.local-path"

    /// The id stored on the file an O_PATH descriptor refers to; nil when it has none.
    public static func id(ofDescriptor fd: Int32) -> ItemID? {
        readNumber(fd: fd, name: id).flatMap { $0 > 0 && $0 < ItemID.derivedBase ? ItemID(rawValue: $0) : nil }
    }

    /// The id stored on `name` in the directory `directoryFD`, without following a symlink.
    public static func id(in directoryFD: Int32, name: FileName) -> ItemID? {
        var buffer = [UInt8](repeating: 0, count: 24)
        let n = buffer.withUnsafeMutableBytes { docfs_at_getxattr(directoryFD, name.cString, id, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return ItemID(text: String(decoding: buffer[0..<n], as: UTF8.self))
    }

    /// The version stored on the file; 0 when it has none (content docfs never saw committed).
    /// The number (or pending key, `VersionNumber`) of the file's content; 0 when it has none.
    public static func version(ofDescriptor fd: Int32) -> UInt64 {
        var buffer = [UInt8](repeating: 0, count: 24)
        let n = buffer.withUnsafeMutableBytes { docfs_fd_getxattr(fd, version, $0.baseAddress, $0.count) }
        guard n > 0, n <= 20 else { return 0 }
        return VersionNumber.parse(String(decoding: buffer[0..<n], as: UTF8.self)) ?? 0
    }

    /// Stores `id` on the file. With `onlyIfAbsent`, an id already there is kept (and returned):
    /// two lookups racing to name a new file agree on one id.
    @discardableResult
    public static func setID(_ item: ItemID, onDescriptor fd: Int32, onlyIfAbsent: Bool = false) throws(DocfsError) -> ItemID {
        let text = Array(item.description.utf8)
        let r = text.withUnsafeBytes {
            docfs_fd_setxattr(fd, id, $0.baseAddress, $0.count, onlyIfAbsent ? DOCFS_XATTR_CREATE : 0)
        }
        if r != 0 {
            if onlyIfAbsent && errno == EEXIST, let existing = self.id(ofDescriptor: fd) { return existing }
            throw DocfsError.errno("storing \(id)")
        }
        return item
    }

    /// Stores the content's number as people read it: `7`, or `p2` for a pending save.
    public static func setVersion(_ value: UInt64, onDescriptor fd: Int32) throws(DocfsError) {
        let text = Array(VersionNumber.shown(value).utf8)
        let r = text.withUnsafeBytes { docfs_fd_setxattr(fd, version, $0.baseAddress, $0.count, 0) }
        if r != 0 { throw DocfsError.errno("storing \(version)") }
    }

    private static func readNumber(fd: Int32, name: String) -> UInt64? {
        var buffer = [UInt8](repeating: 0, count: 24)
        let n = buffer.withUnsafeMutableBytes { docfs_fd_getxattr(fd, name, $0.baseAddress, $0.count) }
        guard n > 0, n <= 20, buffer[0..<n].allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return UInt64(String(decoding: buffer[0..<n], as: UTF8.self))
    }
}
