import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Big trees (issue 21 §3): the kernel keeps a node for every name it caches, and each node
/// holds a descriptor in the daemon; the daemon asks the kernel to forget the least recently
/// used past its limit, so walks of a tree many times bigger than its descriptor limit finish
/// without EMFILE. (`scripts/bench --only scale` walks a million items.)
@Suite(.needsRootAndFUSE) struct BigTreeTests {
    @Test func walksOfATreeBiggerThanTheDescriptorLimitFinish() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        fixture.stop()
        // 12,000 files in 120 folders and a git repository of 3,000 files, made in the store
        // (as a restore or a copy would), indexed with their ids.
        let folders = 120, perFolder = 100
        for f in 0..<folders {
            let folder = fixture.documents + "/tree/d\(f)"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            for i in 0..<perFolder {
                let fd = open(folder + "/f\(i).txt", O_CREAT | O_WRONLY, 0o644)
                _ = write(fd, "file \(i)\n", 7)
                close(fd)
            }
        }
        let repository = fixture.documents + "/repo"
        for f in 0..<30 {
            try FileManager.default.createDirectory(atPath: repository + "/src\(f)", withIntermediateDirectories: true)
            for i in 0..<100 { try write("int f\(i);\n", to: repository + "/src\(f)/f\(i).c") }
        }
        let git = try shell("git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init", in: repository)
        #expect(git.status == 0, "\(git.output)")
        let indexed = try runDocfs("index rebuild --store '\(fixture.store)'")
        #expect(indexed.status == 0, "\(indexed.output)")

        fixture.descriptorLimit = 1024
        try fixture.start()
        let pid = try #require(fixture.daemon).processIdentifier
        let found = try shell("find . | wc -l", in: fixture.mountPoint)
        #expect(found.status == 0 && !found.output.contains("Too many"), "\(found.output)")
        #expect(Int(found.output.trimmingCharacters(in: .whitespacesAndNewlines)).map { $0 > 15_000 } == true, "\(found.output)")
        let listed = try shell("ls -lR tree > /dev/null", in: fixture.mountPoint)
        #expect(listed.status == 0, "\(listed.output)")
        let used = try shell("du -s tree repo", in: fixture.mountPoint)
        #expect(used.status == 0, "\(used.output)")
        let status = try shell("git status --porcelain", in: fixture.mountPoint + "/repo")
        #expect(status.status == 0 && status.output.isEmpty, "git status: \(status.status) \(status.output)")
        // Every file reached by path, as a program walking the tree would.
        var missing = 0
        var st = stat()
        for f in stride(from: 0, to: folders, by: 7) {
            for i in 0..<perFolder where stat(fixture.path("tree/d\(f)/f\(i).txt"), &st) != 0 || st.st_size != 7 { missing += 1 }
        }
        #expect(missing == 0)
        // The daemon stays well inside its limit, and says nothing about descriptors.
        let descriptors = openDescriptors(pid)
        #expect(descriptors > 0 && descriptors < 1024, "\(descriptors) descriptors open")
        #expect(!fixture.log.contains("Too many open files"), "\(fixture.log.suffix(2000))")
        #expect(try shell("ls", in: fixture.mountPoint).output.contains("tree"))
    }
}
