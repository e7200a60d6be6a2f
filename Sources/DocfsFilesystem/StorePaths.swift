import CLinux
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where files and folders are in the store (container, scope and path: `StorePlace`, its path
/// in NameText, so names that are not UTF-8 are exact), found
/// from their backing descriptors, for the records the stitcher writes and the bookmarks a
/// mount hands out. A descriptor's /proc link names its file, but reading it builds the whole
/// backing path up to `/` — once the costliest part of stitching an unlink. (A create's close
/// needs neither: the stitcher opens the file at the name it was made with.) A place found
/// before is instead checked by looking it up from the containers folder (a few components):
/// it is the file's place exactly when it leads to the same inode. Folders, and files with one
/// name, are remembered (a file with several names may have been reached by another).
///
/// Lock order: `known` is a leaf lock, held for a dictionary access only.
public final class StorePaths: Sendable {
    /// The backing path of the store's containers folder.
    let containersPath: String
    private let containersFD: Int32
    private let known = Mutex<[BackingKey: StorePlace]>([:])
    private static let remembered = 4096
    /// The folder of each scope inside a container's folder.
    static let scopeFolders: [(name: String, scope: Scope)] = [("Documents", .documents), ("Data", .data)]
    /// The same, by folder name.
    public static let scopeFolderNames: [String: Scope] = ["Documents": .documents, "Data": .data]

    init(containersPath: String) {
        self.containersPath = containersPath
        containersFD = open(FileName(containersPath).cString, DOCFS_O_PATH | O_DIRECTORY | O_CLOEXEC)
    }

    deinit {
        if containersFD >= 0 { close(containersFD) }
    }

    /// The place of the file or folder `fd` refers to; nil outside every scope, or when the
    /// name it was reached by has been removed.
    package func place(of fd: Int32) -> StorePlace? {
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        return place(of: fd, st)
    }

    /// The same, for a descriptor whose attributes the caller has just read (`st`).
    func place(of fd: Int32, _ st: stat) -> StorePlace? {
        let key = BackingKey(st)
        if let place = known.withLock({ $0[key] }), leads(place, to: key) { return place }
        return read(fd, st)
    }

    /// The place the /proc link of `fd` (whose attributes are `st`) names.
    private func read(_ fd: Int32, _ st: stat) -> StorePlace? {
        guard let backing = backingPath(of: fd) else { return nil }
        // The kernel marks a removed name so (a name that really ends so is still there).
        if backing.hasSuffix(" (deleted)") && access(FileName(backing).cString, F_OK) != 0 { return nil }
        guard let place = place(ofBacking: backing) else { return nil }
        remember(place, st)
        return place
    }

    /// Notes that `place` is where the file `st` describes is (found by the caller).
    func remember(_ place: StorePlace, _ st: stat) {
        guard st.st_mode & S_IFMT == S_IFDIR || st.st_nlink == 1 else { return }
        known.withLock { known in
            if known.count >= Self.remembered { known.removeAll(keepingCapacity: true) }
            known[BackingKey(st)] = place
        }
    }

    /// The place of a backing path; nil outside every scope.
    func place(ofBacking backing: String) -> StorePlace? {
        guard backing.hasPrefix(containersPath),
              backing.utf8.dropFirst(containersPath.utf8.count).first == UInt8(ascii: "/") else { return nil }
        let parts = backing.dropFirst(containersPath.count + 1).split(separator: "/", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, let container = try? ContainerID(String(parts[0])),
              let scope = Self.scopeFolders.first(where: { $0.name == parts[1] })?.scope else { return nil }
        return StorePlace(container: container, scope: scope, path: parts.count == 3 ? "/" + parts[2] : "")
    }

    /// The backing path of `place`, relative to the containers folder.
    static func relativeBacking(_ place: StorePlace) -> String {
        let folder = scopeFolders.first { $0.scope == place.scope }?.name ?? "Documents"
        return place.container.rawValue + "/" + folder + place.path
    }

    /// Opens `place` (O_PATH, never following a symbolic link on the way); -1 with errno set
    /// when nothing is there.
    package func openPlace(_ place: StorePlace) -> Int32 {
        var fd = dup(containersFD)
        guard fd >= 0 else { return -1 }
        for component in Self.relativeBacking(place).split(separator: "/") where !component.isEmpty {
            let next = openat(fd, FileName(String(component)).cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            let failure = errno
            close(fd)
            guard next >= 0 else {
                errno = failure
                return -1
            }
            fd = next
        }
        return fd
    }

    /// Whether `place` is the file `key` names.
    private func leads(_ place: StorePlace, to key: BackingKey) -> Bool {
        guard containersFD >= 0 else { return false }
        var st = stat()
        let found = fstatat(containersFD, FileName(Self.relativeBacking(place)).cString, &st, AT_SYMLINK_NOFOLLOW)
        return found == 0 && BackingKey(st) == key
    }
}
