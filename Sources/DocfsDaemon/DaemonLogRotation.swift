import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Rotates the background daemon's log: its standard output and error are `STORE/logs/
/// daemon.log` (see BackgroundLauncher); once that file is past the store's `LogPolicy` size it
/// becomes `daemon.log.1` (replacing the one before) and the daemon goes on in a new file.
/// Looked at when the daemon starts and every `interval` seconds after. A daemon whose output
/// goes elsewhere (a terminal under `--foreground`, a file the user chose) is left alone.
enum DaemonLogRotation {
    static let interval: Double = 10

    /// Starts looking after `path`, rotating past `limit` bytes; `log` is told of each rotation.
    static func start(path: String, limit: Int64, log: @escaping @Sendable (String) -> Void) {
        guard writesTo(path) else { return }
        if rotateIfPast(limit, path: path) { log("the log passed \(limit >> 20) MiB: the earlier part is in \(path).1") }
        DetachedThread.start {
            let tick = ThreadSemaphore()
            while true {
                tick.wait(seconds: interval)
                if rotateIfPast(limit, path: path) { log("the log passed \(limit >> 20) MiB: the earlier part is in \(path).1") }
            }
        }
    }

    /// Whether the daemon's standard error is the file at `path`.
    private static func writesTo(_ path: String) -> Bool {
        var output = stat(), file = stat()
        return fstat(2, &output) == 0 && stat(path, &file) == 0 && output.st_mode & S_IFMT == S_IFREG
            && output.st_dev == file.st_dev && output.st_ino == file.st_ino
    }

    /// Moves the log aside and points standard output and error at a new one when it is past
    /// `limit` bytes; answers whether it did. The new file is made beside and exchanged with the
    /// old one in one step, so `daemon.log` is never missing (a reader or `tail -F` always finds it).
    @discardableResult
    static func rotateIfPast(_ limit: Int64, path: String) -> Bool {
        var st = stat()
        guard fstat(2, &st) == 0, Int64(st.st_size) > limit, writesTo(path) else { return false }
        let beside = path + ".new"
        let fresh = open(beside, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o644)
        guard fresh >= 0 else { return false }
        defer { close(fresh) }
        guard docfs_renameat2(AT_FDCWD, beside, AT_FDCWD, path, UInt32(DOCFS_RENAME_EXCHANGE)) == 0 else {
            unlink(beside)
            return false  // the old file goes on taking the output
        }
        rename(beside, path + ".1")  // the old log, now at the name beside
        dup2(fresh, 1)
        dup2(fresh, 2)
        return true
    }
}
