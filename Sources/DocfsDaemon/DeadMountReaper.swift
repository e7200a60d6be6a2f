import CLinux
import DocfsFUSE
#if canImport(Glibc)
import Glibc
#endif

/// Makes sure a daemon that is killed leaves no dead mount behind (issue 2 §2). libfuse's
/// auto_unmount helper (fusermount3 3.14) unmounts only when opening the mount point fails
/// with ENOTCONN; it looks as soon as the dying daemon's socket closes, which can be before
/// the kernel has finished aborting the connection: it then gets ECONNABORTED and leaves the
/// dead mount (seen in about one of eight crash tests). So the daemon also starts this reaper:
/// a small child in a session of its own that waits for the daemon's end (its pipe closes)
/// and then lazily unmounts the mount point while it holds a connection of the same number
/// that no daemon answers (ENOTCONN), so a daemon mounted there since is left alone. The
/// reaper is the `docfs reap-mount` command, which runs `waitAndReap`.
public enum DeadMountReaper {
    /// How long the reaper keeps trying after the daemon's end.
    /// (A daemon killed under heavy writes can take seconds to let go of its /dev/fuse
    /// descriptor, and the kernel aborts the connection only then.)
    static let patience: Int32 = 150  // tries, 100 ms apart

    /// Starts the reaper for this daemon's mount at `mountPoint` (connection `connection`).
    static func start(mountPoint: String, connection: Int) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let words: [String] = [Daemon.executablePath(), "reap-mount", mountPoint, String(connection)]
        let argv = words.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        docfs_spawn_close_from(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, DOCFS_POSIX_SPAWN_SETSID)
        var pid: pid_t = 0
        _ = posix_spawn(&pid, words[0], &actions, &attributes, argv, environ)
        close(fds[0])
        // fds[1] stays open, close-on-exec, until this process ends: that is the signal.
    }

    /// The reaper itself: waits for the end of its standard input, then unmounts.
    public static func waitAndReap(mountPoint: String, connection: Int) {
        for signal in [SIGINT, SIGTERM, SIGHUP] { Glibc.signal(signal, SIG_IGN) }
        _ = chdir("/")  // pin no folder while waiting
        var byte: UInt8 = 0
        while true {
            let n = read(0, &byte, 1)
            if n == 0 || (n < 0 && errno != EINTR) { break }
        }
        for _ in 0..<patience {
            guard FUSEMount.connectionNumber(of: mountPoint) == connection else { return }  // unmounted
            // Connection numbers are reused: only a mount that no daemon answers is this one. A
            // stat that succeeds may be the dying daemon's (its pipe can close before its
            // /dev/fuse descriptor, and the kernel answers from its cache until the abort), so
            // the reaper keeps looking rather than give up; a live mount is never detached.
            var st = stat()
            if stat(mountPoint, &st) != 0 && (errno == ENOTCONN || errno == ECONNABORTED) {
                _ = FUSEMount.detach(mountPoint)
            }
            usleep(100_000)
        }
    }
}
