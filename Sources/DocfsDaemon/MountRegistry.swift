#if canImport(Glibc)
import Glibc
#endif

/// Where running daemons note which mount point they serve, so `docfs unmount` can wait for the
/// right daemon to finish (and commands find the store a mount serves): /run/docfs for root,
/// $XDG_RUNTIME_DIR/docfs or /tmp/docfs-UID else. The daemon writes the records; commands read them.
public enum MountRegistry {
    /// What a daemon noted of one mount it serves.
    public struct Record {
        public var pid: pid_t
        public var store: String
        /// The container whose app view the mount shows; nil for the user view.
        public var app: String?
        /// The mount point (records of older daemons do not say).
        public var mountPoint: String? = nil
        /// The `-o` options that mount it the same way again (`docfs remote link` remounts a
        /// store it must merge unmounted); none said by older daemons.
        public var options: [String] = []
    }

    static var directory: String {
        if getuid() == 0 { return "/run/docfs" }
        if let runtime = getenv("XDG_RUNTIME_DIR") { return String(cString: runtime) + "/docfs" }
        return "/tmp/docfs-\(getuid())"
    }

    static func file(for mountPoint: String) -> String {
        let name = mountPoint.utf8.map { String($0, radix: 16) }.joined()
        return directory + "/" + String(name.prefix(240))
    }

    /// The directory, when it is a real directory of ours that nobody else can write.
    private static func ownDirectory() -> String? {
        mkdir(directory, 0o700)
        var st = stat()
        guard lstat(directory, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == getuid(),
              st.st_mode & 0o022 == 0 else { return nil }
        return directory
    }

    static func register(mountPoint: String, store: String, app: String? = nil, options: [String] = []) {
        guard let directory = ownDirectory() else { return }
        removeRecordsOfEndedDaemons(in: directory)
        let text = "\(getpid())\n\(store)\n" + (app.map { "app \($0)\n" } ?? "") + "mount \(mountPoint)\n"
            + options.map { "option \($0)\n" }.joined()
        let fd = open(file(for: mountPoint), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return }
        _ = text.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }

    static func unregister(mountPoint: String) {
        let path = file(for: mountPoint)
        if let record = record(for: mountPoint), record.pid == getpid() { unlink(path) }
    }

    /// The record of the mount at `mountPoint`, if a daemon of this user noted one.
    public static func record(for mountPoint: String) -> Record? {
        guard ownDirectory() != nil else { return nil }
        return read(file(for: mountPoint))
    }

    /// The mounts of the store at `store` (its root, canonical) that are mounted now.
    public static func mounts(ofStore store: String) -> [Record] {
        guard let directory = ownDirectory() else { return [] }
        return records(in: directory).map(\.record).filter { record in
            guard let mountPoint = record.mountPoint, !hasEnded(record.pid) else { return false }
            return MountTable.canonical(record.store) == store && MountTable.entry(at: mountPoint) != nil
        }
    }

    /// Whether daemon `pid` still serves a mount (it serves several views): a record of it
    /// names a mount point that is mounted. (Records a killed daemon left behind name mounts
    /// long gone, and their pid may have been given to another process since.)
    public static func serves(pid: pid_t) -> Bool {
        guard let directory = ownDirectory() else { return false }
        return records(in: directory).contains { _, record in
            guard record.pid == pid, let mountPoint = record.mountPoint else { return false }
            return MountTable.entry(at: mountPoint) != nil
        }
    }

    /// Removes the records of daemons that ended without removing them (killed).
    private static func removeRecordsOfEndedDaemons(in directory: String) {
        for (path, record) in records(in: directory) where hasEnded(record.pid) { unlink(path) }
    }

    /// The records in the registry's `directory`, with their files' paths.
    private static func records(in directory: String) -> [(path: String, record: Record)] {
        guard let dir = opendir(directory) else { return [] }
        defer { closedir(dir) }
        var found: [(path: String, record: Record)] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != ".", name != "..", let record = read(directory + "/" + name) { found.append((directory + "/" + name, record)) }
        }
        return found
    }

    /// Whether process `pid` is gone, or has exited and only waits to be reaped (a zombie holds
    /// no mounts, locks or files; whoever adopted the daemon reaps it when it gets to it).
    public static func hasEnded(_ pid: pid_t) -> Bool {
        if kill(pid, 0) != 0 && errno == ESRCH { return true }
        guard let file = fopen("/proc/\(pid)/stat", "r") else { return true }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        guard fgets(&line, 512, file) != nil else { return true }
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // "pid (comm) S ...": the state follows the last ')' (comm may hold any character).
        guard let close = text.lastIndex(of: ")") else { return false }
        let state = text[text.index(after: close)...].drop { $0 == " " }.first
        return state == "Z" || state == "X"
    }

    private static func read(_ path: String) -> Record? {
        guard let handle = fopen(path, "r") else { return nil }
        defer { fclose(handle) }
        var buffer = [CChar](repeating: 0, count: 8192)
        let n = fread(&buffer, 1, buffer.count - 1, handle)
        let lines = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self).split(separator: "\n")
        guard lines.count >= 2, let pid = pid_t(lines[0]) else { return nil }
        let app = lines.dropFirst(2).first { $0.hasPrefix("app ") }.map { String($0.dropFirst(4)) }
        let mountPoint = lines.dropFirst(2).first { $0.hasPrefix("mount ") }.map { String($0.dropFirst(6)) }
        let options = lines.dropFirst(2).filter { $0.hasPrefix("option ") }.map { String($0.dropFirst(7)) }
        return Record(pid: pid, store: String(lines[1]), app: app, mountPoint: mountPoint, options: options)
    }
}
