import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The kernel's lookups are counted exactly: every node it learns of holds one backing
/// descriptor in the daemon, and when the kernel forgets them (forget, forget_multi) the
/// descriptors are released. Counted from outside through /proc/PID/fd.
@Suite(.needsRootAndFUSE) struct LookupCountingTests {
    @Test func forgottenNodesReleaseTheirDescriptors() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let pid = try #require(fixture.daemon).processIdentifier
        let before = openDescriptors(pid)
        mkdir(fixture.path("many"), 0o755)
        for i in 0..<300 {
            close(open(fixture.path("many/f\(i)"), O_CREAT | O_WRONLY, 0o644))
        }
        // Listing (readdirplus) and stat make the kernel look every file up.
        _ = try FileManager.default.contentsOfDirectory(atPath: fixture.path("many"))
        var st = stat()
        for i in 0..<300 { stat(fixture.path("many/f\(i)"), &st) }
        let known = openDescriptors(pid)
        #expect(known >= 300, "the daemon holds \(known) descriptors after 300 files were looked up")
        // Dropping the kernel's dentry and inode caches sends forgets for all of them.
        sync()
        let control = open("/proc/sys/vm/drop_caches", O_WRONLY)
        #expect(control >= 0)
        #expect(write(control, "2\n", 2) == 2)
        close(control)
        let deadline = Date().addingTimeInterval(10)
        while openDescriptors(pid) > before + 5 && Date() < deadline { usleep(50_000) }
        let after = openDescriptors(pid)
        #expect(after <= before + 5, "descriptors: \(before) at first, \(known) after lookups, \(after) after forgets")
        // The files are still all there, found again by fresh lookups.
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.path("many")).count == 300)
    }
}
