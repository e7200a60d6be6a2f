import CLinux
import DocfsTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Downloads of promised files that fail (issue 23 §1, §2): a machine whose link is cut answers
/// a read EIO within the bound its settings give, says why, and reads the file whole once the
/// link is back; server connections terminated mid-download cost nothing but a retry; a daemon
/// killed mid-download leaves the file promised, and after a restart it reads byte-exact.
@Suite(.serialized) struct PromisedItemsFaultTests {
    typealias Machine = ManyMachinesTests.Machine

    static let bound = 3.0
    static let onDemand = #"{"sync": {"downloads": "onDemand", "downloadWaitSeconds": 3}}"#

    /// Writes `megabytes` of seeded bytes to a's `name`, links a and b (b on demand) to `uri`,
    /// and starts b; answers once b lists the file, promised.
    static func promised(_ name: String, megabytes: Int, on a: Machine, _ b: Machine, uri: String) throws {
        let content = PromisedItemsMountTests.bytes(megabytes << 20, seed: UInt64(megabytes))
        try Data(content).write(to: URL(fileURLWithPath: a.path(name)))
        #expect(try a.link(uri).status == 0)
        #expect(ManyMachinesTests.within(90) { (try? a.status())?["waiting"] as? Int == 0 } != nil)
        let linked = try b.link(uri)
        #expect(linked.status == 0, "\(linked.output)")
        try b.fixture.start()
        #expect(PromisedItemsMountTests.isPromised(b, name))
    }

    /// Starts `arguments` as a shell on a terminal would: no signal blocked or ignored (the
    /// test process blocks SIGINT, and Foundation's Process passes that on), output to
    /// /dev/null; answers its pid.
    static func spawnAsFromATerminal(_ arguments: [String]) throws -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        var pid: pid_t = 0
        var argv = arguments.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        let result = posix_spawn(&pid, arguments[0], &actions, &attributes, &argv, environ)
        guard result == 0 else { throw FixtureError("cannot start \(arguments[0]): \(String(cString: strerror(result)))") }
        return pid
    }

    static func readErrno(_ path: String, at offset: Int) -> Int32 {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        return pread(fd, &buffer, 4096, off_t(offset)) == 4096 ? 0 : errno
    }

    @Test func aReadWhileTheLinkIsCutFailsWithinTheBoundAndWorksOnceItIsBack() throws {
        let pair = try CuttablePair("cut", subnet: 60, settings: Self.onDemand)
        defer { pair.tearDown() }
        let (a, b, bSpace, uri) = (pair.a, pair.b, pair.bSpace, pair.uri)
        try Data(PromisedItemsMountTests.bytes(8 << 20, seed: 8)).write(to: URL(fileURLWithPath: a.path("other.bin")))
        try Self.promised("big.bin", megabytes: 128, on: a, b, uri: uri)
        #expect(PromisedItemsMountTests.isPromised(b, "other.bin"))
        // A first read starts the download; then b's cable is pulled.
        #expect(Self.readErrno(b.path("big.bin"), at: 0) == 0)
        try bSpace.cut()
        // A reader waiting for what cannot come gives up with Ctrl-C at once, not at the bound:
        // through the page cache (tail, like cat, leaves SIGINT fatal) and with O_DIRECT, whose
        // read the kernel interrupts (FUSE INTERRUPT; Python handles SIGINT, so only docfs's
        // answer ends the read early).
        let direct = "import os,mmap; fd=os.open('\(b.path("big.bin"))', os.O_RDONLY|os.O_DIRECT); os.preadv(fd, [mmap.mmap(-1, 4096)], \(110 << 20))"
        for (reader, arguments) in [("tail", ["/usr/bin/tail", "-c", "+\((120 << 20) + 1)", b.path("big.bin")]),
                                    ("an O_DIRECT read", ["/usr/bin/env", "python3", "-c", direct])] {
            let interrupted = try Self.spawnAsFromATerminal(arguments)
            usleep(300_000)
            let signalled = Date()
            kill(interrupted, SIGINT)
            var waitStatus: Int32 = 0
            while waitpid(interrupted, &waitStatus, WNOHANG) == 0 && Date().timeIntervalSince(signalled) < 10 { usleep(5_000) }
            let gaveUp = Date().timeIntervalSince(signalled)
            #expect(gaveUp < Self.bound / 2, "\(reader) ended \(gaveUp) s after Ctrl-C (wait status \(waitStatus))")
        }
        // Readers waiting hold no thread of the daemon: with twice as many waiting as it has
        // threads, a lookup is answered at once (when each held one, after 2.5 s: once they gave
        // up). They read a file whose download starts with them, so each waits the whole bound.
        let threads = min(16, max(4, 2 * sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        let readers = try (0..<(2 * threads)).map { i in
            try Self.spawnAsFromATerminal(["/bin/dd", "if=\(b.path("other.bin"))", "of=/dev/null", "bs=4096", "count=1",
                                           "skip=\(64 * i)", "status=none"])
        }
        usleep(500_000)
        var st = stat()
        let asked = Date()
        #expect(stat(b.path("nothing-here"), &st) != 0 && errno == ENOENT)
        let answered = Date().timeIntervalSince(asked)
        #expect(answered < Self.bound / 2, "the lookup was answered after \(answered) s")
        let stillWaiting = readers.filter { pid in
            var waitStatus: Int32 = 0
            return waitpid(pid, &waitStatus, WNOHANG) == 0
        }
        #expect(stillWaiting.count == readers.count, "\(readers.count - stillWaiting.count) of \(readers.count) readers gave up before the lookup was answered")
        for pid in readers {
            var waitStatus: Int32 = 0
            waitpid(pid, &waitStatus, 0)
        }
        let start = Date()
        let failed = Self.readErrno(b.path("big.bin"), at: 127 << 20)
        let waited = Date().timeIntervalSince(start)
        let status = attribute(b.path("big.bin"), "user.docfs.status") ?? ""
        try bSpace.restore()
        #expect(failed == EIO, "a read past what came down before the cut: \(String(cString: strerror(failed)))")
        #expect(waited < Self.bound + 3, "answered after \(waited) s")
        #expect(status.hasPrefix("download") , "\(status)")
        // Once the link is back the file reads whole, byte for byte.
        let whole = ManyMachinesTests.within(60) { (try? shell("cmp '\(b.path("big.bin"))' '\(a.path("big.bin"))'"))?.status == 0 }
        #expect(whole != nil, "\(b.fixture.log.suffix(1500))")
        #expect(ManyMachinesTests.within(60) { (try? shell("cmp '\(b.path("other.bin"))' '\(a.path("other.bin"))'"))?.status == 0 } != nil)
        #expect(ManyMachinesTests.within(30) { attribute(b.path("big.bin"), "user.docfs.status") == "current" } != nil)
    }

    @Test func serverConnectionsEndedMidDownloadCostOnlyARetry() throws {
        // The default bound (30 s): every fetch a terminated connection cut short is tried again.
        let (server, uri, a, b) = try PromisedItemsMountTests.pair("ended", settings: #"{"sync": {"downloads": "onDemand"}}"#)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        try Self.promised("big.bin", megabytes: 96, on: a, b, uri: uri)
        let reader = Process()
        reader.executableURL = URL(fileURLWithPath: "/usr/bin/cmp")
        reader.arguments = [b.path("big.bin"), a.path("big.bin")]
        try reader.run()
        var ended = 0
        for _ in 0..<10 where reader.isRunning {
            ended += Int((try? server.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
                                          database: uri.databaseName))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0
            usleep(100_000)
        }
        #expect(waitForExit(reader, seconds: 60))
        #expect(reader.terminationStatus == 0, "cmp of the promised file against a's: \(attribute(b.path("big.bin"), "user.docfs.status") ?? "") \(b.fixture.log.range(of: "Fatal error").map { String(b.fixture.log[$0.lowerBound...].prefix(1500)) } ?? String(b.fixture.log.suffix(1500)))")
        #expect(ended > 0, "no connection was ended while the file came down")
        #expect(ManyMachinesTests.within(30) { attribute(b.path("big.bin"), "user.docfs.status") == "current" } != nil)
    }

    @Test func aDaemonKilledMidDownloadLeavesTheFilePromisedAndItReadsWholeAfterARestart() throws {
        let (_, uri, a, b) = try PromisedItemsMountTests.pair("killed", settings: Self.onDemand)
        defer { a.fixture.tearDown(); b.fixture.tearDown() }
        try Self.promised("big.bin", megabytes: 96, on: a, b, uri: uri)
        #expect(Self.readErrno(b.path("big.bin"), at: 50 << 20) == 0)
        let daemon = try #require(b.fixture.daemon)
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()
        // What came down stays (its chunks noted once on disk); the rest comes after the restart.
        let store = b.fixture.store + "/containers/docfs.default/Documents/big.bin"
        let stillPromised = docfs_getxattr(store, "user.docfs.promised", nil, 0) >= 0
        #expect(try stillPromised || shell("cmp '\(store)' '\(a.path("big.bin"))'").status == 0)
        try b.fixture.restartAfterCrash()
        #expect(try shell("cmp '\(b.path("big.bin"))' '\(a.path("big.bin"))'").status == 0)
        #expect(ManyMachinesTests.within(30) { attribute(b.path("big.bin"), "user.docfs.status") == "current" } != nil)
    }

    /// Issue 23 §2: eviction under the limit with a pinned, an open and a modified file present.
    /// Five 2 MiB documents, a 7 MiB limit: the least recently used goes when a download passes
    /// the limit; with b's link cut, a document changed there and a new one pass it again, and
    /// nothing goes (pinned, open, unsent); `docfs query` and `docfs remote status` say so.
    @Test func theCacheLimitEvictsTheLeastRecentlyUsedAndKeepsPinnedOpenAndModifiedFiles() throws {
        let pair = try CuttablePair("cache", subnet: 100,
                                    settings: #"{"sync": {"downloads": "onDemand", "downloadWaitSeconds": 3, "cacheLimit": "7MiB"}}"#)
        defer { pair.tearDown() }
        let (a, b, bSpace, uri) = (pair.a, pair.b, pair.bSpace, pair.uri)
        let names = ["old.bin", "pinned.bin", "open.bin", "edited.bin"]
        for (i, name) in names.dropLast().enumerated() {
            try Data(PromisedItemsMountTests.bytes(2 << 20, seed: UInt64(40 + i))).write(to: URL(fileURLWithPath: a.path(name)))
        }
        try Self.promised("edited.bin", megabytes: 2, on: a, b, uri: uri)
        func query(_ status: String) throws -> Set<String> {
            let answer = try b.docfs("query 'kind == \"file\" && status == \"\(status)\"' --store '\(b.fixture.store)'")
            return Set(answer.output.split(separator: "\n").map { String($0.split(separator: "/").last ?? "") })
        }
        #expect(try query("promised") == Set(names))

        // 2 + 2 (pinned) + 2 (held open) + 2 = 8 MiB: the least recently used one goes.
        #expect(try shell("cat '\(b.path("old.bin"))' > /dev/null").status == 0)
        #expect(try b.docfs("pin '\(b.path("pinned.bin"))'").status == 0)
        let held = open(b.path("open.bin"), O_RDONLY)
        defer { close(held) }
        var buffer = [UInt8](repeating: 0, count: 2 << 20)
        #expect(read(held, &buffer, buffer.count) == buffer.count)
        #expect(try shell("cat '\(b.path("edited.bin"))' > /dev/null").status == 0)
        #expect(ManyMachinesTests.within(20) { Self.promisedNow(b, "old.bin") } != nil, "\(b.fixture.log.suffix(1500))")
        for name in ["pinned.bin", "open.bin", "edited.bin"] { #expect(!Self.promisedNow(b, name), "\(name)") }
        #expect(try query("promised") == ["old.bin"])
        #expect(try query("pinned") == ["pinned.bin"])
        #expect(try query("local") == ["open.bin", "edited.bin"])

        // Cut off, b changes edited.bin and makes a new document: 8 MiB again, and nothing can go.
        try bSpace.cut()
        #expect(try shell("printf 'changed on b' >> '\(b.path("edited.bin"))'").status == 0)
        try Data(PromisedItemsMountTests.bytes(2 << 20, seed: 49)).write(to: URL(fileURLWithPath: b.path("new.bin")))
        let over = ManyMachinesTests.within(40) {
            ((try? b.status())?["cacheUsed"] as? Int).map { $0 > 8 << 20 } == true
        }
        #expect(over != nil, "\(String(describing: try? b.status()))")
        usleep(1_500_000)  // a trim that ran after the measure
        for name in ["pinned.bin", "open.bin", "edited.bin", "new.bin"] { #expect(!Self.promisedNow(b, name), "\(name)") }
        let status = try b.docfs("remote status --store '\(b.fixture.store)'").output
        #expect(status.contains("of a cache limit of \(7 << 20) bytes"), "\(status)")
        try bSpace.restore()
        // Back online, the change goes up; the evicted one reads back whole.
        #expect(ManyMachinesTests.within(60) { (try? b.status())?["waiting"] as? Int == 0 } != nil)
        #expect(try shell("cmp '\(b.path("old.bin"))' '\(a.path("old.bin"))'").status == 0)
        #expect(ManyMachinesTests.within(30) { (try? String(contentsOfFile: a.path("edited.bin"), encoding: .isoLatin1))?.hasSuffix("changed on b") == true } != nil)
    }

    /// Whether b's `name` is promised, read from its store file (no read through the mount, which
    /// would count as a use).
    static func promisedNow(_ b: Machine, _ name: String) -> Bool {
        docfs_getxattr(b.fixture.store + "/containers/docfs.default/Documents/" + name, "user.docfs.promised", nil, 0) >= 0
    }
}

/// Machines a and b and their server, each in a network namespace of its own, so a test can
/// pull b's cable (`bSpace.cut()`): a started, b (with `settings`) linked by the test.
struct CuttablePair {
    typealias Machine = ManyMachinesTests.Machine
    let network: TestNetwork
    let bSpace: NetworkNamespace
    let server: ThrowawayPostgres
    let uri: String
    let a: Machine
    let b: Machine

    /// `offset`: where the namespaces' subnet lies from this process's, apart from other
    /// tests' (ManyMachinesFaultTests takes 20).
    init(_ label: String, subnet offset: Int, settings: String, aSettings: String? = nil) throws {
        let network = try TestNetwork(subnet: (Int(getpid() % 200) + offset) % 250 + 2)
        self.network = network
        var started: [() -> Void] = [{ network.remove() }]
        do {
            let (serverSpace, aSpace) = (try network.namespace("s"), try network.namespace("a"))
            bSpace = try network.namespace("b")
            let server = try ThrowawayPostgres.private(inNamespace: serverSpace.name, listeningOn: serverSpace.address)
            self.server = server
            started.append { try? server.stop() }
            uri = try server.makeDatabase(label, host: serverSpace.address)
            let a = try Machine("a", mounted: false, settings: aSettings)
            self.a = a
            started.append { a.fixture.tearDown() }
            let b = try Machine("b", mounted: false, settings: settings)
            self.b = b
            started.append { b.fixture.tearDown() }
            a.fixture.launcher = aSpace.launcher
            b.fixture.launcher = bSpace.launcher
            try a.fixture.start()
        } catch {
            for stop in started.reversed() { stop() }
            throw error
        }
    }

    func tearDown() {
        a.fixture.tearDown()
        b.fixture.tearDown()
        try? server.stop()
        network.remove()
    }
}
