import DocfsProvider
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A docfs daemon serving a fresh store at a fresh mount point, for one test. `stop()` (call it
/// in a `defer`) unmounts and ends the daemon even when the test failed.
final class MountFixture: @unchecked Sendable {
    let root: String
    let store: String
    let mountPoint: String
    private(set) var daemon: Process?
    /// When set, the daemon runs with its open descriptors limited to this (soft and hard).
    var descriptorLimit: Int?
    /// A command the daemon is started through, which execs it (nsenter into a network
    /// namespace of its own: the process is the daemon).
    var launcher: [String] = []
    /// Environment variables the daemon gets besides the test's own.
    var daemonEnvironment: [String: String] = [:]
    /// App views mounted beside the user view (served by the same daemon).
    private(set) var appMountPoints: [String] = []

    static var binary: String {
        if let path = ProcessInfo.processInfo.environment["DOCFS_BIN"] { return path }
        let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = testBinary.deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("docfs").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return ".build/debug/docfs"
    }

    /// A new store and mount point under /tmp/docfs-tests; mounts unless `mount` is false.
    /// Mount options for every fixture: allow_other, plus DOCFS_TEST_OPTIONS (to run the whole
    /// suite with, say, the writeback cache).
    static var defaultOptions: [String] {
        let extra = ProcessInfo.processInfo.environment["DOCFS_TEST_OPTIONS"].map { $0.split(separator: ",").map(String.init) } ?? []
        return ["allow_other"] + extra
    }

    /// `mountName`: the mount point's name in the fixture's folder.
    init(options: [String] = MountFixture.defaultOptions, mount: Bool = true, mountName: String = "mnt") throws {
        Self.sweepOnce
        root = Self.parent + "/" + UUID().uuidString.prefix(8)
        store = root + "/store"
        mountPoint = root + "/" + mountName
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        chmod(root, 0o755)
        // Whose fixture it is: a later run removes it if this process dies before its tearDown.
        try? "\(getpid())\n".write(toFile: root + "/" + Self.ownerFile, atomically: false, encoding: .utf8)
        if mount { try startOrTearDown(options: options) }
    }

    /// A fixture whose store starts with `settings` as its settings.json, mounted.
    convenience init(settings: String, options: [String] = MountFixture.defaultOptions) throws {
        try self.init(options: options, mount: false)
        do {
            try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
            try settings.write(toFile: store + "/settings.json", atomically: false, encoding: .utf8)
        } catch {
            tearDown()
            throw error
        }
        try startOrTearDown(options: options)
    }

    /// Mounts; when that fails, nothing of the fixture stays (the caller has no fixture to
    /// tear down: its `defer` comes after the initializer).
    private func startOrTearDown(options: [String]) throws {
        do {
            try start(options: options)
        } catch {
            tearDown()
            throw error
        }
    }

    static let parent = "/tmp/docfs-tests"
    static let ownerFile = "owner"

    /// Fixtures whose test process died before tearing them down (killed by a timeout, say):
    /// their mounts, daemons and folders go, once per test process, before the first fixture.
    static let sweepOnce: Void = {
        let folders = (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? []
        for folder in folders {
            let root = parent + "/" + folder
            guard let text = try? String(contentsOfFile: root + "/" + ownerFile, encoding: .utf8),
                  let owner = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)),
                  owner != getpid(), kill(owner, 0) != 0 && errno == ESRCH else { continue }
            let mounts = (try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? ""
            for line in mounts.split(separator: "\n") {
                let fields = line.split(separator: " ")
                if fields.count > 2, fields[2] == "fuse.docfs", fields[1].hasPrefix(root + "/") {
                    _ = umount2(String(fields[1]), MNT_DETACH_VALUE)
                }
            }
            endDaemon(servingStoreAt: root + "/store")
            try? FileManager.default.removeItem(atPath: root)
        }
    }()

    /// Waits up to `seconds` for the daemon serving the store at `store` (whoever started it:
    /// this fixture, a `docfs mount` of the test) to end, then kills it: a daemon still ending
    /// writes into its store, which would come back after the fixture's folder is removed.
    static func endDaemon(servingStoreAt store: String, seconds: Double = 10) {
        let layout = StoreLayout(root: store)
        let deadline = Date().addingTimeInterval(seconds)
        while let holder = StoreLock.holder(of: layout) {
            guard Date() >= deadline else {
                usleep(20_000)
                continue
            }
            kill(holder.pid, SIGKILL)
            usleep(100_000)
            return
        }
    }

    /// Settings that keep every version, so "nothing lost" is not cut short by the policy.
    static let keepEveryVersion = #"{"versions": {"keep": 1000000, "maximumTotalMiB": 100000, "thinningWindowSeconds": 0}}"#

    /// Where the daemon's output goes.
    var daemonLog: String { root + "/daemon.log" }

    /// What the daemon has written to its log so far.
    var log: String { (try? String(contentsOfFile: daemonLog, encoding: .utf8)) ?? "" }

    /// The backing directory that the mount root shows.
    var documents: String { store + "/containers/docfs.default/Documents" }

    func path(_ relative: String) -> String { relative.isEmpty ? mountPoint : mountPoint + "/" + relative }

    /// Puts `data` at `relative` in the store itself, with the daemon stopped meanwhile (so
    /// the store watcher sees no writer), and answers its path on the mount: a document that
    /// was there before, so no thinning window runs from its creation (sessions within the
    /// window of a file created through the mount keep nothing).
    func placeInStore(_ relative: String, _ data: Data) throws -> String {
        let served = daemon != nil
        if served { stop() }
        try data.write(to: URL(fileURLWithPath: documents + "/" + relative))
        if served { try start() }
        return path(relative)
    }

    /// Starts the daemon in the foreground (as a child) and waits until the mount answers.
    func start(options: [String] = MountFixture.defaultOptions) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        var arguments = ["mount", "--foreground", "--store", store]
        if !options.isEmpty { arguments += ["-o", options.joined(separator: ",")] }
        process.arguments = arguments + [mountPoint]
        if !daemonEnvironment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(daemonEnvironment) { $1 }
        }
        if let descriptorLimit {  // prlimit execs docfs: the process is the daemon
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            process.arguments = ["--nofile=\(descriptorLimit):\(descriptorLimit)", "--", Self.binary] + process.arguments!
        }
        var launcher = launcher
        // DOCFS_TEST_LAUNCHER runs every daemon through a command that execs it, for finding
        // out what a failing test's daemon did (say, "strace -f -ff -k -e trace=close -o
        // /tmp/trace/d --"); ROOT in it is the fixture's folder.
        if launcher.isEmpty, let traced = ProcessInfo.processInfo.environment["DOCFS_TEST_LAUNCHER"] {
            launcher = traced.replacingOccurrences(of: "ROOT", with: root).split(separator: " ").map(String.init)
        }
        if let program = launcher.first {
            process.arguments = Array(launcher.dropFirst()) + [process.executableURL!.path] + process.arguments!
            process.executableURL = URL(fileURLWithPath: program)
        }
        _ = FileManager.default.createFile(atPath: daemonLog, contents: nil)
        let log = FileHandle(forWritingAtPath: daemonLog)
        log?.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        daemon = process
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if Self.isMounted(mountPoint) { return }
            if !process.isRunning { break }
            usleep(20_000)
        }
        throw FixtureError("docfs did not mount \(mountPoint) (daemon running: \(process.isRunning))")
    }

    /// After the daemon was killed: waits for its dead mount to go (auto_unmount; slower under
    /// load), then mounts again. Mounting while the dead mount is still there would "succeed" at
    /// once (the mount point shows as mounted) and leave the test reading a dead mount.
    func restartAfterCrash() throws {
        let deadline = Date().addingTimeInterval(20)
        while Self.isMounted(mountPoint) && Date() < deadline { usleep(20_000) }
        if Self.isMounted(mountPoint) { throw FixtureError("the killed daemon's mount is still there after 20 s") }
        try start()
    }

    /// Mounts the app view of container `id` (which must exist) through the serving daemon;
    /// answers its mount point.
    func mountApp(_ id: String, options: [String] = MountFixture.defaultOptions) throws -> String {
        let point = root + "/app-" + id
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: true)
        let mounted = try shell("'\(Self.binary)' mount --store '\(store)' --app \(id) -o \(options.joined(separator: ",")) '\(point)' 2>&1")
        appMountPoints.append(point)
        guard mounted.status == 0, Self.isMounted(point) else { throw FixtureError("cannot mount the app view of \(id): \(mounted.output)") }
        return point
    }

    /// Unmounts and waits for the daemon; safe to call more than once.
    func stop() {
        for point in appMountPoints where Self.isMounted(point) {
            if umount2(point, 0) != 0 { _ = umount2(point, MNT_DETACH_VALUE) }
        }
        appMountPoints = []
        if Self.isMounted(mountPoint) {
            if umount2(mountPoint, 0) != 0 { _ = umount2(mountPoint, MNT_DETACH_VALUE) }
        }
        if let daemon {
            let deadline = Date().addingTimeInterval(10)
            while daemon.isRunning && Date() < deadline { usleep(10_000) }
            if daemon.isRunning {
                kill(daemon.processIdentifier, SIGKILL)
                daemon.waitUntilExit()
            }
        }
        daemon = nil
        Self.endDaemon(servingStoreAt: store)
    }

    /// Stops and removes the fixture's directories.
    func tearDown() {
        stop()
        try? FileManager.default.removeItem(atPath: root)
    }

    static func isMounted(_ path: String) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8) else { return false }
        return text.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            // The table writes a space in a path as \040 (and tab, newline, backslash likewise).
            let shown = path.replacingOccurrences(of: "\\", with: "\\134").replacingOccurrences(of: " ", with: "\\040")
                .replacingOccurrences(of: "\t", with: "\\011").replacingOccurrences(of: "\n", with: "\\012")
            return fields.count > 2 && fields[1] == shown && fields[2] == "fuse.docfs"
        }
    }
}

let MNT_DETACH_VALUE: Int32 = 2

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs a shell command line; returns its exit status and output (stdout and stderr).
@discardableResult
func shell(_ command: String, in directory: String? = nil, environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/bash")
    process.arguments = ["-c", command]
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    var env = ProcessInfo.processInfo.environment
    env.merge(environment) { $1 }
    process.environment = env
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// Whether process `pid` is gone or has exited and waits to be reaped (a zombie: a daemon
/// started in the background is adopted by whoever reaps orphans, whenever it gets to it).
func hasEnded(_ pid: pid_t) -> Bool {
    if kill(pid, 0) != 0 && errno == ESRCH { return true }
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return true }
    let state = stat[stat.index(after: close)...].drop { $0 == " " }.first
    return state == "Z" || state == "X"
}

/// Waits up to `seconds` for `process` to end; a process still running then is killed (so a
/// hung daemon fails its test instead of stalling the suite). Answers whether it ended by itself.
@discardableResult
func waitForExit(_ process: Process, seconds: Double = 30) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning && Date() < deadline { usleep(10_000) }
    guard process.isRunning else { return true }
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
    return false
}

/// Runs the docfs command with `arguments` (shell words), its stderr with its stdout.
func runDocfs(_ arguments: String) throws -> (status: Int32, output: String) {
    try shell("'\(MountFixture.binary)' \(arguments) 2>&1")
}

/// errno of a system call that answered -1, or 0 when it worked.
func errnoOf(_ result: Int32) -> Int32 { result < 0 ? errno : 0 }
func errnoOf(_ result: Int) -> Int32 { result < 0 ? errno : 0 }

/// open(2) for tests, always close-on-exec. Tests run in parallel in one process and many of them
/// start shells; a descriptor one test holds open should not reach another test's child, whose
/// close of its copy (a FLUSH) would mark the first test's writer closed and make the version
/// counts it checks depend on timing. (aCopyOfTheDescriptorClosedByAChildDoesNotEndTheSession
/// opens with Glibc.open on purpose.)
func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
    Glibc.open(path, flags | O_CLOEXEC, mode)
}

extension Trait where Self == ConditionTrait {
    /// Mount tests need root (allow_other, passthrough, other users' files, unshare) and
    /// /dev/fuse: run without them, they are skipped and say so instead of failing on the first
    /// mount. CI runs as root, so it runs them all.
    static var needsRootAndFUSE: Self {
        .enabled(if: getuid() == 0 && access("/dev/fuse", R_OK | W_OK) == 0,
                 "mount tests need root and /dev/fuse: run them as root (CI does), e.g. sudo scripts/test")
    }
}

/// How many descriptors process `pid` has open (-1 when it cannot tell).
func openDescriptors(_ pid: pid_t) -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
}
