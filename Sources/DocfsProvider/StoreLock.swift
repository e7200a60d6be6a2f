import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The claim a daemon holds on the store it serves: an exclusive flock on `daemon.lock`, with
/// the daemon's pid and mount point written inside so a second mount can say who serves it.
/// The kernel drops the flock when the daemon dies, so a crash never leaves the store locked.
public final class StoreLock: Sendable {
    /// Who holds a store: read from the lock file.
    public struct Holder: Sendable, Equatable {
        public var pid: Int32
        public var mountPoint: String
    }

    private let fd: Int32

    /// Takes the lock or throws `.storeBusy` naming the daemon that holds it.
    public init(store: LocalStore, mountPoint: String) throws(DocfsError) {
        let path = store.layout.lockFile
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw DocfsError(.storeUnavailable, "cannot open \(path)", cause: DocfsError.errno("open"))
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = Self.readHolder(fd: fd)
            close(fd)
            let who = holder.map { "daemon pid \($0.pid), mounted at \($0.mountPoint)" } ?? "another daemon"
            throw DocfsError(.storeBusy,
                             "store \(store.layout.root) is already served by \(who): unmount it first (docfs unmount)")
        }
        ftruncate(fd, 0)
        let text = "\(getpid())\n\(mountPoint)\n"
        _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
        self.fd = fd
    }

    /// The daemon serving the store at `store`, if any (nil when the lock is free).
    public static func holder(of layout: StoreLayout) -> Holder? {
        let fd = open(layout.lockFile, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return nil
        }
        return readHolder(fd: fd)
    }

    private static func readHolder(fd: Int32) -> Holder? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = pread(fd, &buffer, buffer.count, 0)
        guard n > 0 else { return nil }
        let lines = String(decoding: buffer[0..<n], as: UTF8.self).split(separator: "\n")
        guard lines.count >= 2, let pid = Int32(lines[0]) else { return nil }
        return Holder(pid: pid, mountPoint: String(lines[1]))
    }

    deinit {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
