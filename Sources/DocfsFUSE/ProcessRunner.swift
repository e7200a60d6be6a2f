import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// Runs a helper program (fusermount3) and waits for it; nil when it could not be started.
public enum ProcessRunner {
    @discardableResult
    public static func run(_ program: String, _ arguments: [String]) -> Int32? {
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let r = posix_spawnp(&pid, program, nil, nil, argv, environ)
        guard r == 0 else { return nil }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : nil
    }
}
