import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// flock and POSIX record locks between processes, and ext4's permission rules for other users
/// (the mount uses default_permissions and allow_other).
@Suite(.needsRootAndFUSE) struct LockAndPermissionTests {
    @Test func flockAndRecordLocksExcludeOtherProcesses() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("locked")
        close(open(f, O_CREAT | O_WRONLY, 0o644))
        // One process holds the lock for a while; a second cannot take it, then can.
        let held = try shell("flock -x '\(f)' sleep 1.5 & sleep 0.4; flock -n -x '\(f)' true; echo busy=$?; wait; flock -n -x '\(f)' true; echo free=$?")
        #expect(held.output.contains("busy=1"), "\(held.output)")
        #expect(held.output.contains("free=0"), "\(held.output)")
        let script = """
        import fcntl, os, subprocess, sys, time
        path = sys.argv[1]
        fd = os.open(path, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        probe = "import fcntl,os,sys\\nfd=os.open(sys.argv[1],os.O_RDWR)\\n" \\
                "try:\\n fcntl.lockf(fd, fcntl.LOCK_EX|fcntl.LOCK_NB, 10, 0); print('got')\\n" \\
                "except OSError as e: print('refused', e.errno)\\n" \\
                "fcntl.lockf(fd, fcntl.LOCK_EX|fcntl.LOCK_NB, 10, 20); print('other range ok')"
        print(subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True).stdout)
        """
        let records = try shell("python3 -c '\(script.replacingOccurrences(of: "'", with: "'\\''"))' '\(f)'")
        #expect(records.output.contains("refused 11"), "\(records.output)")
        #expect(records.output.contains("other range ok"), "\(records.output)")
    }

    /// Runs the same script as an unprivileged user on ext4 and on docfs; the answers match.
    @Test func otherUsersMeetExt4PermissionRules() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let plain = fixture.root + "/plain"
        mkdir(plain, 0o755)
        let setup = """
        cd "$1"
        mkdir private shared sticky sgid
        chmod 700 private; chmod 777 shared; chmod 1777 sticky
        chgrp 100 sgid; chmod 2777 sgid
        echo secret > private/file
        echo root > sticky/roots; chmod 666 sticky/roots
        echo ro > readonly; chmod 644 readonly
        """
        let asNobody = """
        cd "$1"
        r() { "$@" 2>/dev/null && echo "ok: $*" || echo "denied: $*"; }
        r cat private/file
        r ls private
        r touch private/new
        r sh -c 'echo x >> readonly'
        r touch shared/mine
        stat -c 'shared/mine %U %G %a' shared/mine
        r touch sticky/mine
        r rm -f sticky/roots
        r mv sticky/roots sticky/renamed
        r sh -c 'echo x > sticky/roots'
        r rm -f sticky/mine
        r mkdir sgid/d
        r touch sgid/f
        stat -c 'sgid/d %U %G %a' sgid/d
        stat -c 'sgid/f %U %G %a' sgid/f
        r chmod 600 readonly
        r chown nobody shared/mine
        r chmod 4755 shared/mine
        stat -c 'shared/mine %a' shared/mine
        r touch -d 2001-01-01 readonly
        r touch -d 2001-01-01 shared/mine
        """
        let outputs = try Self.run(asNobody, after: setup, in: [plain, fixture.mountPoint])
        #expect(outputs[0] == outputs[1])
        #expect(outputs[1].contains("denied: cat private/file"))
        #expect(outputs[1].contains("shared/mine nobody nogroup"))
        #expect(outputs[1].contains("sgid/f nobody users"))
    }

    /// Writes, truncates, O_TRUNC opens, fallocate and copy_file_range by a user without
    /// CAP_FSETID drop set-id bits as on ext4 (set-user-id always; set-group-id with
    /// group-execute or when the writer is not in the group); root's writes keep them.
    @Test func writesDropSetIDBitsAsOnExt4() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let plain = fixture.root + "/plain"
        mkdir(plain, 0o755)
        let setup = """
        cd "$1"
        echo source > src; chmod 644 src
        for op in append truncate otrunc fallocate copy root; do
          for mode in 4755 2775 2765 6775 0755; do
            echo data > $op-$mode; chown nobody:users $op-$mode; chmod $mode $op-$mode
          done
          echo data > $op-2765-own-group; chown nobody:nogroup $op-2765-own-group; chmod 2765 $op-2765-own-group
        done
        """
        let asNobody = """
        cd "$1"
        for f in append-*; do sh -c "echo more >> $f"; done
        for f in truncate-*; do truncate -s 2 $f; done
        for f in otrunc-*; do sh -c ": > $f"; done
        for f in fallocate-*; do fallocate -l 8192 $f; done
        for f in copy-*; do python3 -c "import os, sys; s = os.open('src', os.O_RDONLY); d = os.open(sys.argv[1], os.O_WRONLY); os.copy_file_range(s, d, 6, 0, 0)" $f; done
        """
        let report = "for f in root-*; do echo more >> $f; done; stat -c '%n %a %s' *-* | sort"
        let outputs = try Self.run(asNobody, after: setup, in: [plain, fixture.mountPoint], thenAsRoot: report)
        #expect(outputs[0] == outputs[1], "plain folder:\n\(outputs[0])\ndocfs:\n\(outputs[1])")
        #expect(outputs[1].contains("append-4755 755 "))
        #expect(outputs[1].contains("otrunc-2775 775 0"))
        #expect(outputs[1].contains("root-6775 6775 "))
    }

    /// Runs `setup` as root, `script` as user nobody (no groups) and `report` as root, each in
    /// a shell with the folder as $1, in each of `folders`; answers what `script` and `report`
    /// printed in each.
    static func run(_ script: String, after setup: String, in folders: [String], thenAsRoot report: String = "") throws -> [String] {
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        return try folders.map { folder in
            let prepared = try shell("bash -c \(quoted(setup)) _ '\(folder)'")
            #expect(prepared.status == 0, "\(prepared.output)")
            let run = try shell("setpriv --reuid=65534 --regid=65534 --clear-groups bash -c \(quoted(script)) _ '\(folder)'")
            let reported = try shell("bash -c \(quoted("cd \"$1\"\n" + report)) _ '\(folder)'")
            return run.output + reported.output
        }
    }
}
