import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `docfs mount` and `docfs unmount` as a person uses them: background start, clean stops on
/// signals, no dead mount after a crash, and one-line errors that say what to do.
@Suite(.needsRootAndFUSE) struct CLITests {
    let docfs = MountFixture.binary

    /// Runs a command that must fail with a one-line `docfs: …` message containing `words`.
    private func expectFailure(_ command: String, saying words: String,
                               sourceLocation: SourceLocation = #_sourceLocation) throws {
        let result = try shell(command)
        #expect(result.status != 0, "\(command) succeeded", sourceLocation: sourceLocation)
        #expect(result.output.contains(words), "\(result.output)", sourceLocation: sourceLocation)
        #expect(result.output.hasPrefix("docfs: "), "\(result.output)", sourceLocation: sourceLocation)
        #expect(result.output.split(separator: "\n").count == 1, "\(result.output)", sourceLocation: sourceLocation)
    }

    @Test func backgroundMountAnswersAtOnceAndUnmountEndsTheDaemon() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let mounted = try shell("'\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)' && echo hi > '\(fixture.mountPoint)/f' && cat '\(fixture.mountPoint)/f'")
        #expect(mounted.status == 0, "\(mounted.output)")
        #expect(mounted.output == "hi\n")
        let options = try shell("findmnt -n -o FSTYPE,SOURCE '\(fixture.mountPoint)'")
        #expect(options.output.contains("fuse.docfs"))
        #expect(options.output.contains("docfs"))
        let pid = try String(contentsOfFile: fixture.store + "/daemon.lock", encoding: .utf8).split(separator: "\n").first.map(String.init) ?? ""
        // A record a killed daemon left behind, whose pid this daemon has been given since,
        // does not make the unmount think the daemon serves another mount.
        let gone = fixture.root + "/gone"
        let stale = "/run/docfs/" + gone.utf8.map { String($0, radix: 16) }.joined()
        try "\(pid)\n\(fixture.store)\nmount \(gone)\n".write(toFile: stale, atomically: true, encoding: .utf8)
        defer { unlink(stale) }
        let unmounted = try shell("'\(docfs)' unmount '\(fixture.mountPoint)'")
        #expect(unmounted.status == 0, "\(unmounted.output)")
        #expect(!MountFixture.isMounted(fixture.mountPoint))
        #expect(hasEnded(pid_t(pid) ?? 0), "daemon \(pid) still running after unmount")
        // The store is free again: it mounts a second time and keeps the file.
        let again = try shell("'\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)' && cat '\(fixture.mountPoint)/f' && '\(docfs)' unmount '\(fixture.mountPoint)'")
        #expect(again.status == 0 && again.output == "hi\n", "\(again.output)")
        // That mount's daemon removed the records of daemons that had ended, the planted one too.
        #expect(access(stale, F_OK) != 0)
    }

    /// The background daemon's log in the store is rotated past the store's `log.maximumMiB`
    /// (looked at every 10 s): the earlier part goes to daemon.log.1 and the daemon writes on
    /// in a new daemon.log.
    @Test func theDaemonsLogIsRotated() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        try FileManager.default.createDirectory(atPath: fixture.store, withIntermediateDirectories: true)
        try #"{"log": {"maximumMiB": 1}}"#.write(toFile: fixture.store + "/settings.json", atomically: false, encoding: .utf8)
        let mounted = try shell("'\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)'")
        #expect(mounted.status == 0, "\(mounted.output)")
        defer { _ = try? shell("'\(docfs)' unmount '\(fixture.mountPoint)'") }
        let log = fixture.store + "/logs/daemon.log"
        #expect(eventually(seconds: 5) { (try? String(contentsOfFile: log, encoding: .utf8))?.contains("serving") == true })
        // 1.5 MiB more, as a chatty day would add.
        let filler = open(log, O_WRONLY | O_APPEND)
        #expect(filler >= 0)
        let line = Array(String(repeating: "x", count: 1023).utf8) + [10]
        for _ in 0..<1536 { _ = line.withUnsafeBytes { Glibc.write(filler, $0.baseAddress, $0.count) } }
        close(filler)
        var st = stat()
        #expect(eventually(seconds: 30) { stat(log + ".1", &st) == 0 && st.st_size > 1 << 20 }, "no daemon.log.1")
        #expect(stat(log, &st) == 0 && st.st_size < 64 << 10, "the new log has \(st.st_size) bytes")
        // The daemon writes on in the new file (its note of the rotation is there) and serves on.
        #expect(eventually(seconds: 5) { (try? String(contentsOfFile: log, encoding: .utf8))?.contains("the log passed 1 MiB") == true })
        try write("from elsewhere\n", to: fixture.store + "/containers/docfs.default/Documents/note.txt")
        #expect(eventually(seconds: 20) {
            (try? String(contentsOfFile: fixture.mountPoint + "/note.txt", encoding: .utf8)) == "from elsewhere\n"
        })
        #expect((try? String(contentsOfFile: log + ".1", encoding: .utf8))?.contains("serving") == true)
        // A bad limit is refused when mounting, saying which setting.
        _ = try shell("'\(docfs)' unmount '\(fixture.mountPoint)'")
        try #"{"log": {"maximumMiB": 0}}"#.write(toFile: fixture.store + "/settings.json", atomically: false, encoding: .utf8)
        let refused = try shell("'\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)' 2>&1")
        #expect(refused.status == 1 && refused.output.contains("log.maximumMiB"), "\(refused.output)")
    }

    /// Connects to a store's control socket; -1 when it cannot.
    private func connectControl(_ fixture: MountFixture) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array((fixture.store + "/control.sock").utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { for (i, byte) in path.enumerated() { $0[i] = byte } }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return -1
        }
        return fd
    }

    /// Reads what the daemon answers on `fd` until it closes the connection.
    private func answer(on fd: Int32) -> String {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &chunk, chunk.count)
            guard n > 0 else { break }
            bytes += chunk[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The control socket answers each request on its own: clients that connect and say
    /// nothing hold up no CLI command, and are answered and let go after 10 s; a request in
    /// another protocol version is refused with what to do.
    @Test func aStuckClientHoldsUpNoCommand() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("x\n", to: fixture.path("doc"))
        let stuck = (0..<3).map { _ in connectControl(fixture) }
        defer { stuck.forEach { close($0) } }
        #expect(stuck.allSatisfy { $0 >= 0 })
        let start = Date()
        let status = try shell("timeout 20 '\(docfs)' status '\(fixture.path("doc"))'")  // 124 if it hangs
        #expect(status.status == 0 && status.output.contains("claims:"), "\(status.output)")
        #expect(Date().timeIntervalSince(start) < 5, "a command waited behind clients that said nothing")
        // Those get an answer once their time is up, and are let go.
        let reply = answer(on: stuck[0])
        #expect(reply.contains("\"ok\":false") && reply.contains("none within 10 s"), "\(reply)")
        #expect(Date().timeIntervalSince(start) < 30)
        // Another protocol version is told apart, not misread.
        let old = connectControl(fixture)
        #expect(old >= 0)
        defer { close(old) }
        let request = Array(#"{"kind":"claims","path":"","protocolVersion":1}"#.utf8) + [10]
        #expect(request.withUnsafeBytes { write(old, $0.baseAddress, $0.count) } == request.count)
        let refused = answer(on: old)
        #expect(refused.contains("\"ok\":false") && refused.contains("protocol 1") && refused.contains("mount again"), "\(refused)")
    }

    /// A daemon started from a shell (signals unblocked, as under systemd) and sent SIGTERM as
    /// soon as its mount is there unmounts and exits 0: no thread of it takes the signal's
    /// default action (which once ended it without unmounting).
    @Test func aDaemonStartedFromAShellUnmountsOnSIGTERM() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let script = """
        for i in 1 2 3 4 5; do
          '\(MountFixture.binary)' mount --foreground --store '\(fixture.store)' '\(fixture.mountPoint)' >> '\(fixture.daemonLog)' 2>&1 &
          pid=$!
          for k in $(seq 1 500); do grep -q " \(fixture.mountPoint) " /proc/mounts && break; sleep 0.01; done
          kill -TERM $pid; wait $pid; echo "exit $?"
          for k in $(seq 1 500); do grep -q " \(fixture.mountPoint) " /proc/mounts || break; sleep 0.01; done
        done
        """
        let run = try shell(script)
        #expect(run.output.split(separator: "\n").filter { $0.hasPrefix("exit ") } == Array(repeating: "exit 0", count: 5), "\(run.output)")
        #expect(!MountFixture.isMounted(fixture.mountPoint))
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func signalsUnmountCleanly(_ signal: Int32) throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, signal)
        #expect(waitForExit(daemon), "the daemon did not end after signal \(signal)")
        #expect(daemon.terminationStatus == 0)
        #expect(!MountFixture.isMounted(fixture.mountPoint))
    }

    @Test func aSignalWithFilesOpenDetachesAndFinishesWhenTheyClose() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let daemon = try #require(fixture.daemon)
        #expect(FileManager.default.createFile(atPath: fixture.path("open"), contents: Data("still here".utf8)))
        let fd = open(fixture.path("open"), O_RDONLY)
        #expect(fd >= 0)
        kill(daemon.processIdentifier, SIGTERM)
        // auto_unmount's helper unmounts once it sees the daemon gone: moments, longer under load.
        let deadline = Date().addingTimeInterval(20)
        while MountFixture.isMounted(fixture.mountPoint) && Date() < deadline { usleep(20_000) }
        #expect(!MountFixture.isMounted(fixture.mountPoint))
        usleep(200_000)
        #expect(daemon.isRunning, "the daemon quit while a file was still open")
        var buffer = [UInt8](repeating: 0, count: 32)
        #expect(pread(fd, &buffer, 32, 0) == 10)
        close(fd)
        #expect(waitForExit(daemon), "the daemon did not end once the file was closed")
        #expect(daemon.terminationStatus == 0)
    }

    /// Mount points named plainly and with bytes the mount table escapes (a space, a backslash).
    static let mountNames = ["mnt", "My Docs", #"back\slash"#]

    @Test(arguments: mountNames)
    func aSecondSignalForcesTheEnd(mountName: String) throws {
        let fixture = try MountFixture(mountName: mountName)
        defer { fixture.tearDown() }
        let daemon = try #require(fixture.daemon)
        #expect(FileManager.default.createFile(atPath: fixture.path("open"), contents: Data("x".utf8)))
        let fd = open(fixture.path("open"), O_RDONLY)
        defer { close(fd) }
        kill(daemon.processIdentifier, SIGTERM)
        usleep(300_000)
        kill(daemon.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(10)
        while daemon.isRunning && Date() < deadline { usleep(20_000) }
        #expect(!daemon.isRunning, "the daemon ignored a second SIGTERM")
    }

    @Test(arguments: mountNames)
    func aCrashedDaemonLeavesNoDeadMount(mountName: String) throws {
        let fixture = try MountFixture(mountName: mountName)
        defer { fixture.tearDown() }
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()
        // auto_unmount's helper unmounts once it sees the daemon gone: moments, longer under load.
        let deadline = Date().addingTimeInterval(20)
        while MountFixture.isMounted(fixture.mountPoint) && Date() < deadline { usleep(20_000) }
        #expect(!MountFixture.isMounted(fixture.mountPoint))
        try fixture.start()
        #expect(MountFixture.isMounted(fixture.mountPoint))
    }

    @Test func errorsSayWhatToDo() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let store = "--store '\(fixture.store)'"

        try expectFailure("'\(docfs)' mount \(store) '\(fixture.root)/nowhere'", saying: "does not exist: create it")

        _ = FileManager.default.createFile(atPath: fixture.mountPoint + "/x", contents: Data())
        try expectFailure("'\(docfs)' mount \(store) '\(fixture.mountPoint)'", saying: "is not empty")
        unlink(fixture.mountPoint + "/x")

        let file = fixture.root + "/a-file"
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        try expectFailure("'\(docfs)' mount --store '\(file)' '\(fixture.mountPoint)'", saying: "not a directory")

        try fixture.start()
        let second = fixture.root + "/second"
        mkdir(second, 0o755)
        // A second mount of a served store is served by the same daemon (C7); one that would
        // need a daemon of its own (--foreground) is refused, naming the daemon.
        try expectFailure("'\(docfs)' mount --foreground \(store) '\(second)'", saying: "served by daemon pid")
        let added = try shell("'\(docfs)' mount \(store) '\(second)' 2>&1")
        #expect(added.status == 0 && added.output.contains("mounted the user view at \(second)"), "\(added.output)")
        try write("seen twice\n", to: fixture.path("both.txt"))
        #expect((try? String(contentsOfFile: second + "/both.txt", encoding: .utf8)) == "seen twice\n")
        #expect(try shell("'\(docfs)' unmount '\(second)'").status == 0)
        #expect(MountFixture.isMounted(fixture.mountPoint) && !MountFixture.isMounted(second))
        try expectFailure("'\(docfs)' unmount '\(second)'", saying: "is not a docfs mount")
        try expectFailure("'\(docfs)' mount --store '\(fixture.root)/other' -o no_such_option '\(second)'",
                          saying: "mount options")
    }

    @Test func missingSystemSupportIsExplained() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let empty = fixture.root + "/empty"
        _ = FileManager.default.createFile(atPath: empty, contents: Data())
        let mount = "'\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)'"
        try expectFailure("unshare -m bash -c \"mount --bind '\(empty)' /dev/fuse && \(mount)\"", saying: "/dev/fuse is missing")
        try expectFailure("unshare -m bash -c \"mount --bind '\(empty)' /usr/bin/fusermount3 && \(mount)\"",
                          saying: "fusermount3 is not installed")
    }

    /// The exit statuses scripts rely on (docs/user-guide.md): 0 done, 1 the operation failed,
    /// 2 a wrong command line (ArgumentParser's own 64 is not used), 3 differences found by
    /// `index check` (QueryTests); `--version` names the version.
    @Test func exitStatusesTellFailuresFromMistakes() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let version = try shell("'\(docfs)' --version")
        #expect(version.status == 0)
        #expect(version.output.wholeMatch(of: /docfs \d+\.\d+\.\d+\n/) != nil, "\(version.output)")
        for wrong in ["frobnicate", "mount", "mount --no-such-option '\(fixture.mountPoint)'",
                      "versions '\(fixture.root)' --keep theirs", "query 'size >' --store '\(fixture.store)'"] {
            let result = try shell("'\(docfs)' \(wrong) 2>&1")
            #expect(result.status == 2, "\(wrong): \(result.status) \(result.output)")
            #expect(result.output.contains("Usage:") || result.output.contains("bad predicate"), "\(wrong): \(result.output)")
        }
        let failed = try shell("'\(docfs)' versions '\(fixture.root)/nowhere' 2>&1")
        #expect(failed.status == 1 && failed.output.hasPrefix("docfs: "), "\(failed.output)")
        let help = try shell("'\(docfs)' --help")
        #expect(help.status == 0 && help.output.contains("Exit status"), "\(help.output)")
    }

    @Test func helpReadsWell() throws {
        let top = try shell("'\(docfs)' --help")
        #expect(top.status == 0)
        #expect(top.output.contains("mount"))
        #expect(top.output.contains("unmount"))
        let mount = try shell("'\(docfs)' mount --help")
        #expect(mount.output.contains("--store"))
        #expect(mount.output.contains("--foreground"))
        #expect(!mount.output.contains("ready-fd"))
        // `versions` keeps what reads apart from what changes the document.
        let versions = try shell("'\(docfs)' versions --help").output
        let reading = try #require(versions.range(of: "READING:")), changing = try #require(versions.range(of: "CHANGING THE DOCUMENT:"))
        #expect(versions[reading.upperBound..<changing.lowerBound].contains("--show")
                && !versions[reading.upperBound..<changing.lowerBound].contains("--restore"), "\(versions)")
        #expect(versions[changing.upperBound...].contains("--restore") && versions[changing.upperBound...].contains("--resolve"), "\(versions)")
        // Each option says its default (and its values) once: the parser adds them to the text.
        for command in ["mount", "unmount", "status", "versions", "watch", "query", "index check", "index rebuild",
                        "bookmark create", "bookmark resolve", "container create", "container list", "pick", "move", "export"] {
            let help = try shell("'\(docfs)' \(command) --help").output
            var blocks: [String] = []
            for line in help.split(separator: "\n", omittingEmptySubsequences: false) {
                if line.hasPrefix("  -") || line.hasPrefix("  <") || blocks.isEmpty { blocks.append(String(line)) } else { blocks[blocks.count - 1] += " " + line }
            }
            for block in blocks {
                let defaults = block.matches(of: /\(default[ :]/).count, values = block.matches(of: /\(values:/).count
                #expect(defaults <= 1 && values <= 1, "docfs \(command) --help repeats itself: \(block)")
            }
        }
    }
}
