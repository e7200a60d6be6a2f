import DocfsCore
import DocfsFUSE
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// The kernel's table of mounts (/proc/self/mounts), to find docfs mounts: the daemon checks a
/// mount point is not one already, commands find the mount a path is on.
public enum MountTable {
    /// One line of the table.
    public struct Mount {
        public var source: String
        public var mountPoint: String
        public var type: String
        public var options: String
    }

    public static func entries() -> [Mount] {
        guard let file = fopen("/proc/self/mounts", "r") else { return [] }
        defer { fclose(file) }
        var result: [Mount] = []
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0 {
            let fields = String(cString: line!).split(separator: " ")
            guard fields.count >= 4 else { continue }
            result.append(Mount(source: MountInfoField.unescape(fields[0]), mountPoint: MountInfoField.unescape(fields[1]),
                                type: String(fields[2]), options: String(fields[3])))
        }
        return result
    }

    /// The docfs mount at `path`, if there is one.
    public static func entry(at path: String) -> Mount? {
        let target = canonical(path)
        return entries().last { $0.type == "fuse.docfs" && $0.mountPoint == target }
    }

    /// Where the store at `layout` is mounted by this user's daemon, if it is.
    public static func mountPoint(of layout: StoreLayout) -> String? {
        let store = canonical(layout.root)
        return entries().last { $0.type == "fuse.docfs" && MountRegistry.record(for: $0.mountPoint).map { canonical($0.store) } == store }?
            .mountPoint
    }

    /// Absolute path with symlinks resolved (or as given, when that fails: a dead mount).
    public static func canonical(_ path: String) -> String {
        if let resolved = realpath(FileName(path).cString, nil) {
            defer { free(resolved) }
            return FileName(cString: resolved).description
        }
        if path.hasPrefix("/") { return path }
        guard let cwd = getcwd(nil, 0) else { return path }
        defer { free(cwd) }
        return FileName(cString: cwd).description + "/" + path
    }
}
