import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Mount/: `mount -t fuse.docfs`, an /etc/fstab line, and the systemd unit template, each
/// driven for real.
@Suite(.serialized, .needsRootAndFUSE) struct SystemIntegrationTests {
    static let mountDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Mount").path
    static let installedHelper = "/sbin/mount.fuse.docfs"

    /// Puts Mount/mount.fuse.docfs where mount(8) looks for it, for the duration of `body`.
    private func withHelperInstalled(_ body: () throws -> Void) throws {
        let ours = try Data(contentsOf: URL(fileURLWithPath: Self.mountDirectory + "/mount.fuse.docfs"))
        let previous = FileManager.default.contents(atPath: Self.installedHelper)
        try ours.write(to: URL(fileURLWithPath: Self.installedHelper))
        chmod(Self.installedHelper, 0o755)
        defer {
            if let previous, previous != ours {
                try? previous.write(to: URL(fileURLWithPath: Self.installedHelper))
            } else if previous == nil {
                unlink(Self.installedHelper)
            }
        }
        try body()
    }

    @Test func mountTypeFuseDocfs() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        try withHelperInstalled {
            let env = ["DOCFS_BIN": MountFixture.binary]
            let mounted = try shell("mount -t fuse.docfs -o allow_other,noauto,nofail '\(fixture.store)' '\(fixture.mountPoint)'", environment: env)
            #expect(mounted.status == 0, "\(mounted.output)")
            #expect(MountFixture.isMounted(fixture.mountPoint))
            let options = try shell("findmnt -n -o OPTIONS '\(fixture.mountPoint)'")
            #expect(options.output.contains("allow_other"))
            #expect(FileManager.default.createFile(atPath: fixture.path("hello"), contents: Data("hi".utf8)))
            #expect(FileManager.default.fileExists(atPath: fixture.documents + "/hello"))
            // app=ID makes an app view, served by the same daemon.
            #expect(try shell("'\(MountFixture.binary)' container create com.example.Notes --name Notes --store '\(fixture.store)'").status == 0)
            let app = fixture.root + "/notes"
            try FileManager.default.createDirectory(atPath: app, withIntermediateDirectories: true)
            let appMounted = try shell("mount -t fuse.docfs -o app=com.example.Notes,nofail '\(fixture.store)' '\(app)' 2>&1", environment: env)
            #expect(appMounted.status == 0, "\(appMounted.output)")
            #expect((try? FileManager.default.contentsOfDirectory(atPath: app).sorted()) == ["Data", "Documents"])
            #expect(try shell("umount '\(app)'").status == 0)
            let unmounted = try shell("umount '\(fixture.mountPoint)'")
            #expect(unmounted.status == 0, "\(unmounted.output)")
            #expect(!MountFixture.isMounted(fixture.mountPoint))
        }
    }

    @Test func fstabLine() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        try withHelperInstalled {
            let fstab = fixture.root + "/fstab"
            let line = "\(fixture.store) \(fixture.mountPoint) fuse.docfs defaults,allow_other,nofail,x-systemd.automount,_netdev 0 0\n"
            try line.write(toFile: fstab, atomically: true, encoding: .utf8)
            let mounted = try shell("mount -T '\(fstab)' '\(fixture.mountPoint)'", environment: ["DOCFS_BIN": MountFixture.binary])
            #expect(mounted.status == 0, "\(mounted.output)")
            #expect(MountFixture.isMounted(fixture.mountPoint))
            let listed = try shell("ls -la '\(fixture.mountPoint)'")
            #expect(listed.status == 0)
            let unmounted = try shell("'\(MountFixture.binary)' unmount '\(fixture.mountPoint)'")
            #expect(unmounted.status == 0, "\(unmounted.output)")
            #expect(!MountFixture.isMounted(fixture.mountPoint))
        }
    }

    @Test func systemdUnitTemplate() throws {
        let fixture = try MountFixture(mount: false)
        defer { fixture.tearDown() }
        let escaped = try shell("systemd-escape --path '\(fixture.mountPoint)'").output
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!escaped.isEmpty)
        let template = try String(contentsOfFile: Self.mountDirectory + "/docfs@.service", encoding: .utf8)
            .replacingOccurrences(of: "/usr/local/bin/docfs", with: MountFixture.binary)
        let unit = fixture.root + "/docfs@\(escaped).service"
        try template.write(toFile: unit, atomically: true, encoding: .utf8)
        let verified = try shell("systemd-analyze verify '\(unit)'")
        #expect(verified.status == 0, "\(verified.output)")
        #expect(!verified.output.contains(unit.split(separator: "/").last!), "\(verified.output)")

        // Run the unit's commands as systemd would, with its specifiers expanded.
        func command(_ key: String) -> String {
            let line = template.split(separator: "\n").first { $0.hasPrefix(key + "=") } ?? ""
            return String(line.dropFirst(key.count + 1))
                .replacingOccurrences(of: "%f", with: fixture.mountPoint)
        }
        #expect(try shell(command("ExecStartPre")).status == 0)
        let service = Process()
        service.executableURL = URL(fileURLWithPath: "/bin/sh")
        service.arguments = ["-c", "exec " + command("ExecStart")]
        service.standardError = FileHandle(forWritingAtPath: "/dev/null")
        service.environment = ["DOCFS_STORE": fixture.store, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"]
        try service.run()
        let deadline = Date().addingTimeInterval(20)
        while !MountFixture.isMounted(fixture.mountPoint) && Date() < deadline && service.isRunning { usleep(20_000) }
        #expect(MountFixture.isMounted(fixture.mountPoint))
        let stop = try shell(command("ExecStop"))
        #expect(stop.status == 0, "\(stop.output)")
        service.waitUntilExit()
        #expect(service.terminationStatus == 0)
        #expect(!MountFixture.isMounted(fixture.mountPoint))
    }
}
