import CLinux
import DocfsCore
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The daemon's side of a thumbnail worker process: starts it on first use (and again after
/// it died or was killed), passes it one request at a time with the content's descriptor, and
/// waits for the answer while the worker has used at most `timeLimit` seconds of CPU time on
/// it (and at most `wallLimit` seconds in all); a worker that takes longer is killed, so a
/// damaged or hostile file never stalls thumbnails for long, and a decoder crash never reaches
/// the daemon. CPU time, not time passed, is what counts first: on a busy machine the worker
/// may wait long for a CPU without being at fault, and its file must not be marked as having
/// no thumbnail for that.
///
/// Lock order: `worker` is held for a whole request, `onPartial` included, so it comes before
/// whatever that handler takes (the Thumbnailer's install takes a read claim and the index
/// stitcher's lock). Nothing that holds those waits for `worker`: the Thumbnailer's client
/// serves its one thread, and the client that checks a user's PNG (for setxattr) takes nothing
/// under it. It is never held across a reply to the kernel.
public final class ThumbnailWorkerClient: Sendable {
    /// Why the worker made no set.
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// The content has none (not an image libvips reads, damaged, too big).
        case noThumbnail(String)
        /// The worker took longer than the time limit and was killed.
        case timedOut(Double)
        /// The worker could not be started, or ended in the middle of a job.
        case workerFailed(String)

        public var description: String {
            switch self {
            case .noThumbnail(let why): why
            case .timedOut(let seconds): "the thumbnail worker took more than \(seconds) s and was stopped"
            case .workerFailed(let why): why
            }
        }
    }

    private struct Process {
        var pid: pid_t
        var socket: Int32
    }

    /// The command that runs a worker (`docfs thumbnail-worker`).
    public let command: [String]
    /// Most CPU seconds the worker may spend on one request.
    public let timeLimit: Double
    /// Most seconds one request may take, however little CPU time it used.
    public let wallLimit: Double
    private let worker = Mutex<Process?>(nil)
    private let startedWorkers = Atomic<Int>(0)

    public init(command: [String], timeLimit: Double = 10, wallLimit: Double? = nil) {
        self.command = command
        self.timeLimit = timeLimit
        self.wallLimit = wallLimit ?? timeLimit * 6
    }

    /// How many worker processes were started (a crashed or killed one is replaced).
    public var workersStarted: Int { startedWorkers.load(ordering: .relaxed) }

    /// Runs `request` on the content open at `content`; the worker's answer. A partial answer
    /// (see `ThumbnailRequest.earlyOutput`) goes to `onPartial` on the way; the time limit
    /// is for the whole request.
    public func run(_ request: ThumbnailRequest, content: Int32,
                    onPartial: (ThumbnailReply) -> Void = { _ in }) -> Result<ThumbnailReply, Failure> {
        worker.withLock { process -> Result<ThumbnailReply, Failure> in
            if process == nil {
                switch spawn() {
                case .success(let started): process = started
                case .failure(let failure): return .failure(failure)
                }
            }
            let result = exchange(request, content: content, with: process!, onPartial: onPartial)
            if case .failure = result {
                stop(process!)
                process = nil
            }
            return result
        }
    }

    /// Stops the worker (it is started again by the next request).
    public func shutDown() {
        worker.withLock { process in
            if let running = process { stop(running) }
            process = nil
        }
    }

    private func exchange(_ request: ThumbnailRequest, content: Int32, with process: Process,
                          onPartial: (ThumbnailReply) -> Void) -> Result<ThumbnailReply, Failure> {
        guard let message = try? JSONEncoder().encode(request) else { return .failure(.workerFailed("cannot encode the request")) }
        let sent = message.withUnsafeBytes { docfs_send_with_descriptor(process.socket, $0.baseAddress, $0.count, content) }
        guard sent == message.count else { return .failure(.workerFailed("the thumbnail worker is gone: \(String(cString: strerror(errno)))")) }
        let end = Self.now() + wallLimit
        let cpuAtStart = Self.cpuSeconds(of: process.pid)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let left = end - Self.now()
            guard left > 0, Self.cpuSeconds(of: process.pid) - cpuAtStart <= timeLimit else { return .failure(.timedOut(timeLimit)) }
            var poller = pollfd(fd: process.socket, events: Int16(POLLIN), revents: 0)
            // Woken at least every 100 ms to look at the CPU time used.
            let ready = poll(&poller, 1, Int32(min(left, 0.1) * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            var passed: Int32 = -1
            let n = buffer.withUnsafeMutableBytes { docfs_receive_with_descriptor(process.socket, $0.baseAddress, $0.count, &passed) }
            if passed >= 0 { close(passed) }
            guard n > 0 else { return .failure(.workerFailed(endOfWorker(process))) }
            guard let reply = try? JSONDecoder().decode(ThumbnailReply.self, from: Data(buffer[0..<n])) else {
                return .failure(.workerFailed("the thumbnail worker answered garbage"))
            }
            if reply.job != request.job { continue }  // a late answer to a job given up on
            if reply.partial {
                onPartial(reply)
                continue
            }
            return .success(reply)
        }
    }

    private static func now() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// The CPU time (user and system, all threads) process `pid` has used, from
    /// /proc/PID/stat; 0 when it cannot be read.
    static func cpuSeconds(of pid: pid_t) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = text.lastIndex(of: ")") else { return 0 }
        // After "pid (name)": state is field 3; utime and stime are fields 14 and 15.
        let fields = text[text.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// How the worker ended (it closed its socket).
    private func endOfWorker(_ process: Process) -> String {
        var status: Int32 = 0
        var waited: pid_t = 0
        for _ in 0..<100 {
            waited = waitpid(process.pid, &status, WNOHANG)
            if waited != 0 { break }
            usleep(1000)
        }
        guard waited == process.pid else { return "the thumbnail worker closed its socket" }
        let signal = status & 0x7F
        if signal != 0 { return "the thumbnail worker was ended by signal \(signal)" }
        return "the thumbnail worker exited with status \((status >> 8) & 0xFF)"
    }

    private func spawn() -> Result<Process, Failure> {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            return .failure(.workerFailed("cannot make a socket for the thumbnail worker: \(String(cString: strerror(errno)))"))
        }
        let argv = command.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var environment = ProcessInfo.processInfo.environment
        environment["MALLOC_ARENA_MAX"] = "2"  // the memory limit counts address space
        environment["VIPS_WARNING"] = "0"
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pair[1], 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)  // decoders' complaints are not the log's
        docfs_spawn_close_from(&actions, 3)
        var pid: pid_t = 0
        let r = posix_spawn(&pid, command[0], &actions, nil, argv, envp)
        close(pair[1])
        guard r == 0 else {
            close(pair[0])
            return .failure(.workerFailed("cannot start the thumbnail worker \(command[0]): \(String(cString: strerror(r)))"))
        }
        startedWorkers.add(1, ordering: .relaxed)
        return .success(Process(pid: pid, socket: pair[0]))
    }

    private func stop(_ process: Process) {
        kill(process.pid, SIGKILL)
        close(process.socket)
        var status: Int32 = 0
        while waitpid(process.pid, &status, 0) < 0 && errno == EINTR {}
    }

    deinit {
        worker.withLock { process in
            if let running = process { stop(running) }
        }
    }
}
