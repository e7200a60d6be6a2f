import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// How a reference (DESIGN §8, open mode) lies in the store: an empty file at the reference's
/// own place in the app's container, carrying the original's item id twice — as
/// `user.docfs.reference` (what makes it a reference) and as `user.docfs.id` (so it lists
/// under the original's id, as it stands for it). The original itself stays where it is; a
/// reference finds it by id wherever it moves.
public enum ReferenceStub {
    /// The extended attribute naming the original's item id.
    public static let attribute = "user.docfs.reference"

    /// The original a file stands for, when it is a reference (an empty regular file with the
    /// attribute); nil otherwise. `st` are the file's attributes (a non-empty file is no
    /// reference, so most files cost no extra read).
    public static func target(ofDescriptor fd: Int32, _ st: stat) -> ItemID? {
        guard st.st_mode & S_IFMT == S_IFREG, st.st_size == 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 24)
        let n = buffer.withUnsafeMutableBytes { docfs_fd_getxattr(fd, attribute, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return ItemID(text: String(decoding: buffer[0..<n], as: UTF8.self))
    }

    /// Whether `name` in the folder `directoryFD` (whose attributes are `st`) is a reference.
    public static func isReference(_ name: FileName, in directoryFD: Int32, _ st: stat) -> Bool {
        guard st.st_mode & S_IFMT == S_IFREG, st.st_size == 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 24)
        return buffer.withUnsafeMutableBytes { docfs_at_getxattr(directoryFD, name.cString, attribute, $0.baseAddress, $0.count) } > 0
    }

    /// Makes a reference to `target` named `name` in the folder `directoryFD` (which must not
    /// hold that name).
    public static func make(in directoryFD: Int32, name: FileName, target: ItemID) throws(DocfsError) {
        let fd = openat(directoryFD, name.cString, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw DocfsError.errno("making the reference \(name)") }
        defer { close(fd) }
        do throws(DocfsError) {
            try mark(fd, target: target)
        } catch {
            unlinkat(directoryFD, name.cString, 0)
            throw error
        }
    }

    /// Makes the empty file `fd` a reference to `target`.
    public static func mark(_ fd: Int32, target: ItemID) throws(DocfsError) {
        let text = Array(target.description.utf8)
        for marker in [attribute, ItemAttributes.id] {
            let r = text.withUnsafeBytes { docfs_fd_setxattr(fd, marker, $0.baseAddress, $0.count, 0) }
            guard r == 0 else { throw DocfsError.errno("marking the reference") }
        }
    }
}
