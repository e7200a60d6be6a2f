import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A root daemon's mount without allow_other is reachable by root alone: the kernel's
/// permission checks are left off there (they would pass anyway), and the execute bits they
/// would check come from `access(2)` answered by the store, as on ext4.
@Suite(.needsRootAndFUSE) struct RootOnlyMountTests {
    static var options: [String] { MountFixture.defaultOptions.filter { $0 != "allow_other" } }

    @Test func rootGetsExt4AnswersWithoutTheKernelChecks() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        let mounts = try String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)
        let line = try #require(mounts.split(separator: "\n").first { $0.contains(" \(fixture.mountPoint) ") })
        #expect(!line.contains("default_permissions") && !line.contains("allow_other"))

        try expectSameAsPlainDirectory({ dir, r in
            let script = dir + "/script.sh"
            try? "#!/bin/sh\necho ran\n".write(toFile: script, atomically: false, encoding: .utf8)
            chmod(script, 0o644)
            r.call("access X_OK without x bits", access(script, X_OK))
            r.call("access R_OK|W_OK", access(script, R_OK | W_OK))
            r.note("exec without x bits", (try? shell("'\(script)'").status) ?? -1)
            chmod(script, 0o744)
            r.call("access X_OK with owner x", access(script, X_OK))
            r.note("exec with x bit", (try? shell("'\(script)'").output) ?? "")
            close(open(dir + "/locked", O_CREAT | O_WRONLY, 0o444))
            r.call("root opens a 0444 file for writing", errnoOf(open(dir + "/locked", O_WRONLY)))
            mkdir(dir + "/closed", 0)
            r.call("root enters a 000 folder", access(dir + "/closed", X_OK))
            r.call("root creates in a 000 folder", close(open(dir + "/closed/f", O_CREAT | O_WRONLY, 0o600)))
            mkdir(dir + "/sticky", 0o1777)
            close(open(dir + "/sticky/theirs", O_CREAT | O_WRONLY, 0o644))
            chown(dir + "/sticky/theirs", 65534, 65534)
            r.call("root unlinks in a sticky folder", unlink(dir + "/sticky/theirs"))
            r.call("chown", chown(dir + "/locked", 65534, 65534))
            r.call("chmod", chmod(dir + "/locked", 0o600))
        }, options: Self.options)
    }
}
