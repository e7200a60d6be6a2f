import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Checks made before mounting, each failing with a message that says what to do: by `docfs
/// mount` before it starts a daemon, and by the daemon before it adds a mount it is asked for.
public enum Preflight {
    public static func checkFUSEDevice() throws(DocfsError) {
        var st = stat()
        guard stat("/dev/fuse", &st) == 0, st.st_mode & S_IFMT == S_IFCHR else {
            throw DocfsError(.missingSystemSupport,
                             "/dev/fuse is missing: load the module (modprobe fuse) or give the container the device (--device /dev/fuse)")
        }
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            throw DocfsError(.missingSystemSupport,
                             "/dev/fuse is not readable and writable by this user: add yourself to its group or run as root")
        }
    }

    public static func checkFusermount() throws(DocfsError) {
        guard findInPath("fusermount3") != nil else {
            throw DocfsError(.missingSystemSupport,
                             "fusermount3 is not installed: install the fuse3 package (apt-get install fuse3), or run scripts/setup")
        }
    }

    /// The mount point must be an existing, empty directory that is not already a mount of docfs.
    public static func checkMountPoint(_ path: String, allowNonEmpty: Bool) throws(DocfsError) {
        var st = stat()
        guard stat(path, &st) == 0 else {
            if errno == ENOTCONN {
                throw DocfsError(.badMountPoint,
                                 "\(path) is a dead mount (its daemon died): run `docfs unmount \(path)` first")
            }
            throw DocfsError(.badMountPoint, "mount point \(path) does not exist: create it with `mkdir -p \(path)`")
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            throw DocfsError(.badMountPoint, "mount point \(path) is not a directory: choose a directory")
        }
        if MountTable.entry(at: path) != nil {
            throw DocfsError(.badMountPoint, "\(path) is already a docfs mount: unmount it first (docfs unmount \(path))")
        }
        if !allowNonEmpty, !isEmptyDirectory(path) {
            throw DocfsError(.badMountPoint,
                             "mount point \(path) is not empty: choose an empty directory, or pass -o nonempty to hide its contents")
        }
    }

    /// The store opens (created on first use) and no other daemon serves it.
    public static func checkStore(_ path: String) throws(DocfsError) {
        let store = try LocalStore(path: path)
        if let holder = StoreLock.holder(of: store.layout) {
            throw DocfsError(.storeBusy,
                             "store \(store.layout.root) is already served by daemon pid \(holder.pid), mounted at \(holder.mountPoint): unmount it first (docfs unmount \(holder.mountPoint))")
        }
    }

    /// An app view's container exists (and is not the default one, which the user view shows).
    public static func checkContainer(_ id: ContainerID, in storePath: String) throws(DocfsError) {
        guard id != .userDefault else {
            throw DocfsError(.invalidArgument, "\(id) is the default container: mount without --app to see it")
        }
        let store = try LocalStore(path: storePath)
        guard try ContainerRegistry(layout: store.layout).record(of: id) != nil else {
            throw DocfsError(.invalidArgument, "there is no container \(id): create it first (docfs container create \(id) --name NAME)")
        }
    }

    static func isEmptyDirectory(_ path: String) -> Bool {
        guard let dir = opendir(path) else { return false }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { return false }
        }
        return true
    }

    static func findInPath(_ program: String) -> String? {
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") + ["/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
            let candidate = "\(directory)/\(program)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }
}
