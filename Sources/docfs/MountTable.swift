import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// The kernel's table of mounts (/proc/self/mounts), to find docfs mounts.
enum MountTable {
    struct Mount {
        var source: String
        var mountPoint: String
        var type: String
        var options: String
    }

    static func entries() -> [Mount] {
        guard let file = fopen("/proc/self/mounts", "r") else { return [] }
        defer { fclose(file) }
        var result: [Mount] = []
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0 {
            let fields = String(cString: line!).split(separator: " ")
            guard fields.count >= 4 else { continue }
            result.append(Mount(source: unescape(fields[0]), mountPoint: unescape(fields[1]),
                                type: String(fields[2]), options: String(fields[3])))
        }
        return result
    }

    /// The docfs mount at `path`, if there is one.
    static func entry(at path: String) -> Mount? {
        let target = canonical(path)
        return entries().last { $0.type == "fuse.docfs" && $0.mountPoint == target }
    }

    /// Where the store at `layout` is mounted by this user's daemon, if it is.
    static func mountPoint(of layout: StoreLayout) -> String? {
        let store = canonical(layout.root)
        return entries().last { $0.type == "fuse.docfs" && MountRegistry.record(for: $0.mountPoint).map { canonical($0.store) } == store }?
            .mountPoint
    }

    /// Absolute path with symlinks resolved (or as given, when that fails: a dead mount).
    static func canonical(_ path: String) -> String {
        if let resolved = realpath(path, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        if path.hasPrefix("/") { return path }
        guard let cwd = getcwd(nil, 0) else { return path }
        defer { free(cwd) }
        return String(cString: cwd) + "/" + path
    }

    /// /proc/mounts writes space, tab, newline and backslash as octal escapes.
    private static func unescape(_ field: Substring) -> String {
        guard field.contains("\\") else { return String(field) }
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "\\"), utf8.count >= 3,
               let value = UInt8(String(decoding: utf8.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
