import CLinux
import DocfsDaemon
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Starts the daemon in the background: this same program with `--foreground --ready-fd N`,
/// in a session of its own, stdin from /dev/null and output to the store's log. Waits for the
/// daemon's word on the pipe, then for the mount point to answer.
enum BackgroundLauncher {
    static func launch(storePath: String, mountPoint: String) -> Int32 {
        var pipeFds: [Int32] = [0, 0]
        guard pipe(&pipeFds) == 0 else {
            printError("docfs: cannot create a pipe: \(String(cString: strerror(errno)))\n")
            return 1
        }
        let (readEnd, writeEnd) = (pipeFds[0], pipeFds[1])
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        let childReadyFd: Int32 = 3
        let logPath = StoreLayout(root: storePath).daemonLog
        let logDirectory = StoreLayout(root: storePath).logsDirectory

        var arguments = Array(CommandLine.arguments.dropFirst())
        if let index = arguments.firstIndex(of: "mount") {
            arguments.insert(contentsOf: ["--foreground", "--ready-fd", "\(childReadyFd)"], at: index + 1)
        }
        let executable = Daemon.executablePath()
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if access(logDirectory, W_OK) == 0 {
            posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, childReadyFd)
        docfs_spawn_close_from(&actions, childReadyFd + 1)  // the daemon keeps no stray descriptors
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, DOCFS_POSIX_SPAWN_SETSID)

        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        close(writeEnd)
        guard spawned == 0 else {
            printError("docfs: cannot start the daemon (\(executable)): \(String(cString: strerror(spawned)))\n")
            return 1
        }
        let answer = readLine(readEnd)
        close(readEnd)
        if answer == "ok" {
            var st = stat()
            _ = stat(mountPoint, &st)  // returns once the daemon answers
            return 0
        }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        if let message = answer, message.hasPrefix("error: ") {
            printError("docfs: \(message.dropFirst(7))\n")
        } else {
            printError("docfs: the daemon exited before mounting: see \(logPath)\n")
        }
        return 1
    }

    private static func readLine(_ fd: Int32) -> String? {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 || byte == UInt8(ascii: "\n") { break }
            bytes.append(byte)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }
}
