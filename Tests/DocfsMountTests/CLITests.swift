import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `docfs mount` and `docfs unmount` as a person uses them: background start, clean stops on
/// signals, no dead mount after a crash, and one-line errors that say what to do.
@Suite struct CLITests {
    let docfs = MountFixture.binary

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
        let unmounted = try shell("'\(docfs)' unmount '\(fixture.mountPoint)'")
        #expect(unmounted.status == 0, "\(unmounted.output)")
        #expect(!MountFixture.isMounted(fixture.mountPoint))
        #expect(kill(pid_t(pid) ?? 0, 0) != 0, "daemon \(pid) still running after unmount")
        // The store is free again: it mounts a second time and keeps the file.
        let again = try shell("'\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)' && cat '\(fixture.mountPoint)/f' && '\(docfs)' unmount '\(fixture.mountPoint)'")
        #expect(again.status == 0 && again.output == "hi\n", "\(again.output)")
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func signalsUnmountCleanly(_ signal: Int32) throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, signal)
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
        #expect(!MountFixture.isMounted(fixture.mountPoint))
    }

    @Test func aCrashedDaemonLeavesNoDeadMount() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let daemon = try #require(fixture.daemon)
        kill(daemon.processIdentifier, SIGKILL)
        daemon.waitUntilExit()
        let deadline = Date().addingTimeInterval(5)
        while MountFixture.isMounted(fixture.mountPoint) && Date() < deadline { usleep(20_000) }
        #expect(!MountFixture.isMounted(fixture.mountPoint))
        try fixture.start()
        #expect(MountFixture.isMounted(fixture.mountPoint))
    }

    @Test func errorsSayWhatToDo() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let store = "--store '\(fixture.store)'"

        let missing = try shell("'\(docfs)' mount \(store) '\(fixture.root)/nowhere'")
        #expect(missing.status != 0)
        #expect(missing.output.contains("does not exist: create it"), "\(missing.output)")

        FileManager.default.createFile(atPath: fixture.mountPoint + "/x", contents: Data())
        let nonEmpty = try shell("'\(docfs)' mount \(store) '\(fixture.mountPoint)'")
        #expect(nonEmpty.status != 0)
        #expect(nonEmpty.output.contains("is not empty"), "\(nonEmpty.output)")
        unlink(fixture.mountPoint + "/x")

        let file = fixture.root + "/a-file"
        FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let badStore = try shell("'\(docfs)' mount --store '\(file)' '\(fixture.mountPoint)'")
        #expect(badStore.status != 0)
        #expect(badStore.output.contains("not a directory"), "\(badStore.output)")

        try fixture.start()
        let second = fixture.root + "/second"
        mkdir(second, 0o755)
        let busy = try shell("'\(docfs)' mount \(store) '\(second)'")
        #expect(busy.status != 0)
        #expect(busy.output.contains("already served by daemon pid"), "\(busy.output)")
        #expect(busy.output.contains(fixture.mountPoint))

        let notMounted = try shell("'\(docfs)' unmount '\(second)'")
        #expect(notMounted.status != 0)
        #expect(notMounted.output.contains("is not a docfs mount"), "\(notMounted.output)")

        let badOption = try shell("'\(docfs)' mount --store '\(fixture.root)/other' -o no_such_option '\(second)'")
        #expect(badOption.status != 0)
        #expect(badOption.output.contains("mount options"), "\(badOption.output)")

        for output in [missing.output, nonEmpty.output, badStore.output, busy.output, notMounted.output] {
            #expect(output.hasPrefix("docfs: "), "\(output)")
        }
    }

    @Test func missingSystemSupportIsExplained() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let empty = fixture.root + "/empty"
        FileManager.default.createFile(atPath: empty, contents: Data())
        let noDevice = try shell("unshare -m bash -c \"mount --bind '\(empty)' /dev/fuse && '\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)'\"")
        #expect(noDevice.status != 0)
        #expect(noDevice.output.contains("/dev/fuse is missing"), "\(noDevice.output)")
        let noHelper = try shell("unshare -m bash -c \"mount --bind '\(empty)' /usr/bin/fusermount3 && '\(docfs)' mount --store '\(fixture.store)' '\(fixture.mountPoint)'\"")
        #expect(noHelper.status != 0)
        #expect(noHelper.output.contains("fusermount3 is not installed"), "\(noHelper.output)")
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
    }
}
