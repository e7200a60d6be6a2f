import CLinux
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where files and folders are within the scope, found from their backing descriptors, for
/// the records the stitcher writes. A descriptor's /proc link names its file, but reading it
/// builds the whole backing path up to `/` — once the costliest part of stitching an unlink.
/// (A create's close needs neither: the stitcher opens the file at the name it was made with.)
/// A path found before is instead checked by looking it up from the scope's root (a few
/// components): it is the file's path exactly when it leads to the same inode. Folders, and
/// files with one name, are remembered (a file with several names may have been reached by
/// another).
///
/// Lock order: `known` is a leaf lock, held for a dictionary access only.
final class ScopePaths: Sendable {
    /// The backing path of the scope's root folder.
    let rootPath: String
    private let rootFD: Int32
    private let known = Mutex<[BackingKey: String]>([:])
    private static let remembered = 4096

    init(rootPath: String) {
        self.rootPath = rootPath
        rootFD = open(rootPath, DOCFS_O_PATH | O_DIRECTORY | O_CLOEXEC)
    }

    deinit {
        if rootFD >= 0 { close(rootFD) }
    }

    /// The path within the scope of the file or folder `fd` refers to ("" for the root); nil
    /// outside the scope, or when the name it was reached by has been removed.
    func path(of fd: Int32) -> String? {
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        return path(of: fd, st)
    }

    /// The same, for a descriptor whose attributes the caller has just read (`st`).
    func path(of fd: Int32, _ st: stat) -> String? {
        let key = BackingKey(st)
        if let path = known.withLock({ $0[key] }), leads(path, to: key) { return path }
        return read(fd, st)
    }

    /// The path the /proc link of `fd` (whose attributes are `st`) names.
    private func read(_ fd: Int32, _ st: stat) -> String? {
        guard let backing = backingPath(of: fd) else { return nil }
        // The kernel marks a removed name so (a name that really ends so is still there).
        if backing.hasSuffix(" (deleted)") && access(backing, F_OK) != 0 { return nil }
        guard let path = path(ofBacking: backing) else { return nil }
        remember(path, st)
        return path
    }

    /// Notes that `path` is where the file `st` describes is (found by the caller).
    func remember(_ path: String, _ st: stat) {
        guard st.st_mode & S_IFMT == S_IFDIR || st.st_nlink == 1 else { return }
        known.withLock { known in
            if known.count >= Self.remembered { known.removeAll(keepingCapacity: true) }
            known[BackingKey(st)] = path
        }
    }

    /// The path within the scope of a backing path; nil outside it.
    func path(ofBacking backing: String) -> String? {
        if backing == rootPath { return "" }
        guard backing.hasPrefix(rootPath), backing.utf8.dropFirst(rootPath.utf8.count).first == UInt8(ascii: "/") else { return nil }
        return String(backing.dropFirst(rootPath.count))
    }

    /// Whether `path` (within the scope) is the file `key` names.
    private func leads(_ path: String, to key: BackingKey) -> Bool {
        guard rootFD >= 0 else { return false }
        var st = stat()
        let found = path.isEmpty ? fstatat(rootFD, "", &st, DOCFS_AT_EMPTY_PATH)
                                 : fstatat(rootFD, String(path.dropFirst()), &st, AT_SYMLINK_NOFOLLOW)
        return found == 0 && BackingKey(st) == key
    }
}
