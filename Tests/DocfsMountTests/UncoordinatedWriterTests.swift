import CLinux
import DocfsIndex
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Uncoordinated writers (C5, issue 3 §5): changes made in the store behind the mount are
/// noticed by the store watcher, which makes the kernel forget what it cached. The mounts here
/// cache names and attributes for 60 s, so only the watcher can make the changes show in time.
@Suite(.needsRootAndFUSE) struct UncoordinatedWriterTests {
    static var options: [String] { MountFixture.defaultOptions + ["timeout=60"] }

    /// Makes the kernel let go of the names and inodes no one uses (as memory pressure would):
    /// under the writeback cache, what it owned of a file is then read from docfs again.
    static func dropKernelCaches() {
        sync()
        let fd = open("/proc/sys/vm/drop_caches", O_WRONLY)
        guard fd >= 0 else { return }
        _ = Glibc.write(fd, "2", 1)
        close(fd)
    }

    @Test func cachedAndOpenFilesNeverServeStaleContentOnceTheChangeIsSeen() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        let f = fixture.path("notes.txt")
        try write("old content\n", to: f)
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "old content\n")  // cached
        let reader = open(f, O_RDONLY)
        var readerOpen = true
        defer { if readerOpen { close(reader) } }
        var st = stat()
        #expect(stat(f, &st) == 0 && st.st_size == 12)

        // Another program rewrites the file in the store, in place.
        try write("new content, longer\n", to: fixture.documents + "/notes.txt")
        // The watcher records it as a new version once it has seen it.
        #expect(eventually(seconds: 20) { attribute(f, "user.docfs.version") == "2" })
        // With the kernel's writeback cache the kernel owns a file's size (FUSE's rule), so a
        // change of length made behind its back shows once the kernel lets the file go: every
        // descriptor closed and its inode dropped (semantics.md).
        if Self.options.contains("writeback") {
            close(reader)
            readerOpen = false
            Self.dropKernelCaches()
            #expect(eventually(seconds: 5) { stat(f, &st) == 0 && st.st_size == 20 })
            #expect(try String(contentsOfFile: f, encoding: .utf8) == "new content, longer\n")
            return
        }
        // From then on nothing stale: not the size, not the content, through a new open or the old one.
        // (The kernel is told to forget the file in the same batch, a moment after the version moved on.)
        #expect(eventually(seconds: 5) { stat(f, &st) == 0 && st.st_size == 20 })
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "new content, longer\n")
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = pread(reader, &buffer, 64, 0)
        #expect(String(decoding: buffer[0..<max(n, 0)], as: UTF8.self) == "new content, longer\n")
        let log = fixture.log
        #expect(log.contains("uncoordinated change to"))
    }

    /// Past the kernel's inotify limit (here the daemon's own bound, DOCFS_MAX_STORE_WATCHES, so
    /// other processes keep theirs), folders are rescanned instead of watched: the daemon logs
    /// it, `docfs status` says so, and changes made there behind the mount still show through
    /// it (names, content as a new version) and reach the index.
    @Test func foldersPastTheWatchLimitAreRescanned() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        fixture.stop()
        for folder in ["a", "b", "c", "d", "e", "f"] {
            try FileManager.default.createDirectory(atPath: fixture.documents + "/" + folder + "/deep", withIntermediateDirectories: true)
            try write("one\n", to: fixture.documents + "/" + folder + "/deep/doc.txt")
        }
        fixture.daemonEnvironment = ["DOCFS_MAX_STORE_WATCHES": "4"]
        try fixture.start(options: Self.options)
        #expect(eventually(seconds: 10) { fixture.log.contains("fs.inotify.max_user_watches") }, "\(fixture.log)")
        let status = try runDocfs("status '\(fixture.path("f/deep/doc.txt"))'")
        #expect(status.output.contains("folders past the inotify limit are rescanned"), "\(status.output)")
        // Looked at through the mount (cached for 60 s), then changed behind it.
        let doc = fixture.path("f/deep/doc.txt")
        #expect(try String(contentsOfFile: doc, encoding: .utf8) == "one\n")
        #expect(attribute(doc, "user.docfs.version") == "1")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: fixture.path("f/deep"))) == ["doc.txt"])
        try write("two, from elsewhere\n", to: fixture.documents + "/f/deep/doc.txt")
        try write("new\n", to: fixture.documents + "/f/deep/new.txt")
        #expect(eventually(seconds: 15) { attribute(doc, "user.docfs.version") == "2" })
        // Under the writeback cache the kernel owns the file's size: the longer content shows
        // once it lets the file go (as in cachedAndOpenFilesNeverServeStaleContentOnceTheChangeIsSeen).
        if Self.options.contains("writeback") { Self.dropKernelCaches() }
        #expect(eventually(seconds: 15) { (try? String(contentsOfFile: doc, encoding: .utf8)) == "two, from elsewhere\n" })
        #expect(eventually(seconds: 15) {
            (try? FileManager.default.contentsOfDirectory(atPath: fixture.path("f/deep")))?.sorted() == ["doc.txt", "new.txt"]
        })
        #expect(eventually(seconds: 15) {
            (try? runDocfs("query 'name == \"new.txt\"' --store '\(fixture.store)'"))?.output.contains("/f/deep/new.txt") == true
        })
        // A folder made behind the mount in an unwatched one, with a file in it.
        try FileManager.default.createDirectory(atPath: fixture.documents + "/f/deep/later", withIntermediateDirectories: true)
        try write("later\n", to: fixture.documents + "/f/deep/later/inside.txt")
        #expect(eventually(seconds: 15) {
            (try? runDocfs("query 'name == \"inside.txt\"' --store '\(fixture.store)'"))?.output.contains("/f/deep/later/inside.txt") == true
        })
        let check = try runDocfs("index check '\(fixture.mountPoint)'")
        #expect(check.status == 0, "\(check.output)")
    }

    @Test func namesChangedInTheStoreShowThroughTheMount() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        try write("v1\n", to: fixture.path("doc"))
        try write("gone soon\n", to: fixture.path("old"))
        var st = stat()
        #expect(stat(fixture.path("new"), &st) != 0)  // the kernel now caches "no such file"
        #expect(try String(contentsOfFile: fixture.path("doc"), encoding: .utf8) == "v1\n")
        #expect(stat(fixture.path("old"), &st) == 0)

        // A sync tool: creates a file, replaces one (temporary file + rename), deletes one.
        try write("fresh\n", to: fixture.documents + "/new")
        try write("v2 from elsewhere\n", to: fixture.documents + "/.doc.partial")
        #expect(rename(fixture.documents + "/.doc.partial", fixture.documents + "/doc") == 0)
        #expect(unlink(fixture.documents + "/old") == 0)

        #expect(eventually(seconds: 20) { (try? String(contentsOfFile: fixture.path("new"), encoding: .utf8)) == "fresh\n" })
        #expect(eventually(seconds: 20) { (try? String(contentsOfFile: fixture.path("doc"), encoding: .utf8)) == "v2 from elsewhere\n" })
        #expect(eventually(seconds: 20) { stat(fixture.path("old"), &st) != 0 && errno == ENOENT })
        // Seen once, never stale again.
        for _ in 0..<20 {
            #expect(try String(contentsOfFile: fixture.path("doc"), encoding: .utf8) == "v2 from elsewhere\n")
        }
    }

    /// Attribute-only changes in the store (mode, owner, times), writes not closed yet and
    /// truncate(2) by path: the kernel forgets the attributes it cached.
    @Test func attributeChangesAndUnclosedWritesInTheStoreShowThroughTheMount() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        let backing = fixture.documents + "/doc"
        try write("0123456789\n", to: f)
        mkdir(fixture.path("folder"), 0o755)
        var st = stat()
        #expect(stat(f, &st) == 0 && st.st_mode & 0o777 == 0o644)  // cached from here on

        #expect(chmod(backing, 0o600) == 0)
        #expect(eventually(seconds: 20) { stat(f, &st) == 0 && st.st_mode & 0o777 == 0o600 })
        #expect(chown(backing, 1234, 5678) == 0)
        #expect(eventually(seconds: 20) { stat(f, &st) == 0 && st.st_uid == 1234 && st.st_gid == 5678 })
        #expect(chmod(fixture.documents + "/folder", 0o700) == 0)
        #expect(eventually(seconds: 20) { stat(fixture.path("folder"), &st) == 0 && st.st_mode & 0o777 == 0o700 })
        #expect(chmod(fixture.documents, 0o750) == 0)  // the root: no watched folder above it
        #expect(eventually(seconds: 20) { stat(fixture.mountPoint, &st) == 0 && st.st_mode & 0o777 == 0o750 })

        // With the kernel's writeback cache the kernel owns a file's size and mtime (FUSE's
        // rule): changes of them behind its back show once it lets the file go (semantics.md).
        let writeback = Self.options.contains("writeback")
        var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, backing, &times, 0) == 0)
        if !writeback { #expect(eventually(seconds: 20) { stat(f, &st) == 0 && st.st_mtim.tv_sec == 1_000_000_000 }) }
        // truncate(2) by path: a write without a close.
        #expect(truncate(backing, 4) == 0)
        if !writeback { #expect(eventually(seconds: 20) { stat(f, &st) == 0 && st.st_size == 4 }) }
        // A writer still holding the file open: its writes show before it closes.
        let writer = Glibc.open(backing, O_WRONLY | O_APPEND | O_CLOEXEC)
        #expect(writer >= 0)
        #expect(Glibc.write(writer, "more", 4) == 4)
        if !writeback { #expect(eventually(seconds: 20) { stat(f, &st) == 0 && st.st_size == 8 }) }
        close(writer)
        if writeback {
            // Let go by the kernel, the file shows its size and content as the store has them.
            #expect(eventually(seconds: 20) { attribute(f, "user.docfs.version") == "2" })
            Self.dropKernelCaches()
            #expect(eventually(seconds: 5) { stat(f, &st) == 0 && st.st_size == 8 })
            #expect(try String(contentsOfFile: f, encoding: .utf8) == "0123more")
        }
        // None of it was docfs's own, nor taken for a new version but the writer's close.
        #expect(eventually(seconds: 20) { attribute(f, "user.docfs.version") == "2" })
    }

    /// Copies made in the store behind docfs's back (`cp -a` keeps extended attributes) carry
    /// the ids of what they copy: each gets an id of its own, the originals keep theirs, and no
    /// two files show one inode number (tar would store one as a hard link of the other).
    @Test func copiesMadeInTheStoreGetIdsOfTheirOwn() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        try write("report\n", to: fixture.path("report.txt"))
        #expect(mkdir(fixture.path("project"), 0o755) == 0)
        try write("a\n", to: fixture.path("project/a.txt"))
        let originals = ["report.txt", "project", "project/a.txt"]
        let ids = try originals.map { try #require(itemID(fixture.path($0))) }

        let copied = try shell("cp -a '\(fixture.documents)/report.txt' '\(fixture.documents)/copy.txt' && "
                               + "cp -a '\(fixture.documents)/project' '\(fixture.documents)/project 2'")
        #expect(copied.status == 0, "\(copied.output)")
        let copies = ["copy.txt", "project 2", "project 2/a.txt"]
        for (copy, original) in zip(copies, ids) {
            #expect(eventually(seconds: 20) { itemID(fixture.path(copy)).map { $0 != original } ?? false }, "\(copy)")
        }
        #expect(originals.map { itemID(fixture.path($0)) } == ids)
        // `cp -a` sets a folder's attributes after filling it, so the folder may have appeared
        // (and been looked at) before it carried the id it copies: that id is noticed when set.
        #expect(mkdir(fixture.documents + "/project 3", 0o755) == 0)
        #expect(eventually(seconds: 5) { itemID(fixture.path("project 3")).map { !ids.contains($0) } ?? false })
        usleep(300_000)
        let carried = "\(ids[1])"
        #expect(docfs_setxattr(fixture.documents + "/project 3", "user.docfs.id", carried, carried.utf8.count, 0) == 0)
        #expect(eventually(seconds: 20) { itemID(fixture.path("project 3")).map { $0 != ids[1] } ?? false })
        #expect(itemID(fixture.path("project")) == ids[1])
        // The id is read afresh; the inode number comes with attributes the kernel may still
        // hold for a moment, until the invalidation the retag sent reaches it (seen under load).
        var inodes = Set<UInt64>()
        #expect(eventually(seconds: 20) {
            inodes = Set((originals + copies).compactMap { name -> UInt64? in
                var st = stat()
                return stat(fixture.path(name), &st) == 0 ? UInt64(st.st_ino) : nil
            })
            return inodes.count == 6
        }, "\(inodes)")
        #expect(inodes.count == 6)
        let archive = try shell("tar cf - -C '\(fixture.mountPoint)' report.txt copy.txt project 'project 2' | tar tvf -")
        #expect(archive.status == 0 && !archive.output.contains("link to"), "\(archive.output)")
        #expect(try String(contentsOfFile: fixture.path("project 2/a.txt"), encoding: .utf8) == "a\n")
        #expect(fixture.log.contains("copy.txt is a copy of /report.txt"), "\(fixture.log)")
        let check = try runDocfs("index check --store '\(fixture.store)'")
        #expect(check.status == 0, "\(check.output)")
    }

    /// Copies made while no daemon watched the store are separated when one next starts (the
    /// file born first keeps the id), and by a rebuild without a daemon.
    @Test func copiesMadeWhileNothingWatchedAreSeparatedAtTheNextStart() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("report\n", to: fixture.path("report.txt"))
        let id = try #require(itemID(fixture.path("report.txt")))
        fixture.stop()
        let store = fixture.documents
        #expect(try shell("cp -a '\(store)/report.txt' '\(store)/copy.txt' && cp -a '\(store)/report.txt' '\(store)/second.txt'").status == 0)
        try fixture.start()
        #expect(itemID(fixture.path("report.txt")) == id)
        let copies = [itemID(fixture.path("copy.txt")), itemID(fixture.path("second.txt"))]
        #expect(!copies.contains(id) && !copies.contains(nil) && Set(copies).count == 2, "\(copies)")
        #expect(fixture.log.contains("2 copies given ids of their own"), "\(fixture.log)")
        let check = try runDocfs("index check --store '\(fixture.store)'")
        #expect(check.status == 0, "\(check.output)")

        fixture.stop()
        #expect(try shell("cp -a '\(store)/report.txt' '\(store)/third.txt'").status == 0)
        let rebuilt = try runDocfs("index rebuild --store '\(fixture.store)'")
        #expect(rebuilt.status == 0 && rebuilt.output.contains("1 copy given an id of its own"), "\(rebuilt.output)")
        let third = try shell("getfattr --absolute-names --only-values -n user.docfs.id '\(store)/third.txt'").output
        #expect(!third.isEmpty && third != "\(id)", "\(third)")
        #expect(try shell("getfattr --absolute-names --only-values -n user.docfs.id '\(store)/report.txt'").output == "\(id)")
    }

    /// A document put back into the store with its id (restored from a backup, the way rsync
    /// does: a temporary file with the attributes, renamed over the document; or after the
    /// document was deleted) keeps the id: no other file carries it.
    @Test func aDocumentRestoredWithItsIdKeepsIt() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        try write("first\n", to: fixture.path("report.txt"))
        let id = try #require(itemID(fixture.path("report.txt")))
        let backup = fixture.root + "/report.backup"
        #expect(try shell("cp -a '\(fixture.documents)/report.txt' '\(backup)'").status == 0)
        try write("second\n", to: fixture.path("report.txt"))

        let script = """
            import os, sys
            backup, target = sys.argv[1], sys.argv[2]
            temporary = os.path.join(os.path.dirname(target), ".report.txt.Xa9")
            with open(backup, "rb") as source, open(temporary, "wb") as out:
                out.write(source.read())
            os.setxattr(temporary, "user.docfs.id", os.getxattr(backup, "user.docfs.id"))
            os.rename(temporary, target)
            """
        let restored = try shell("python3 -c \"$SCRIPT\" '\(backup)' '\(fixture.documents)/report.txt'", environment: ["SCRIPT": script])
        #expect(restored.status == 0, "\(restored.output)")
        #expect(eventually(seconds: 20) { (try? String(contentsOfFile: fixture.path("report.txt"), encoding: .utf8)) == "first\n" })
        usleep(300_000)  // the watcher's batches after the rename
        #expect(itemID(fixture.path("report.txt")) == id)

        #expect(unlink(fixture.path("report.txt")) == 0)
        #expect(try shell("cp -a '\(backup)' '\(fixture.documents)/report.txt'").status == 0)
        #expect(eventually(seconds: 20) { access(fixture.path("report.txt"), F_OK) == 0 })
        usleep(300_000)
        #expect(itemID(fixture.path("report.txt")) == id)
        #expect(!fixture.log.contains("is a copy of"), "\(fixture.log)")
    }

    @Test func docfsOwnChangesAreNotTakenForSomeoneElses() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        let f = fixture.path("mine")
        try write("one\n", to: f)
        try write("two\n", to: f)
        let appended = try shell("for i in 1 2 3; do echo line $i >> '\(f)'; done")
        #expect(appended.status == 0)
        #expect(rename(f, fixture.path("mine2")) == 0)
        usleep(500_000)  // give the watcher time to see the events docfs itself caused
        #expect(attribute(fixture.path("mine2"), "user.docfs.version") == "5")
        let log = fixture.log
        #expect(!log.contains("uncoordinated change"), "\(log)")
    }

    /// Reading files docfs wrote before a remount is no change, though passthrough opens each
    /// backing file for writing (its close is an inotify event).
    @Test func readingAfterARemountIsNoChange() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        for name in ["a", "b", "sentinel"] { try write("\(name)\n", to: fixture.path(name)) }
        fixture.stop()
        try fixture.start(options: Self.options)
        for name in ["a", "b"] {
            #expect(try String(contentsOfFile: fixture.path(name), encoding: .utf8) == "\(name)\n")
            let appendOnly = open(fixture.path(name), O_WRONLY | O_APPEND)  // opened for writing, not written
            #expect(appendOnly >= 0)
            close(appendOnly)
        }
        // A change behind docfs's back: once the watcher reports it, it has read the rest.
        try "elsewhere\n".write(toFile: fixture.documents + "/sentinel", atomically: false, encoding: .utf8)
        #expect(eventually(seconds: 10) { fixture.log.contains("uncoordinated change to \(fixture.documents)/sentinel") })
        let uncoordinated = fixture.log.split(separator: "\n").filter { $0.contains("uncoordinated change") }
        #expect(uncoordinated.count == 1, "\(uncoordinated)")
        #expect(attribute(fixture.path("a"), "user.docfs.version") == "1")
        #expect(attribute(fixture.path("b"), "user.docfs.version") == "1")
    }

    /// More of docfs's own changes than its records hold at first (8192), then reads of all
    /// those files (a passthrough backing file is open for writing, so its close is an event):
    /// still none is taken for someone else's.
    @Test func aBurstOfDocfsOwnChangesIsNotTakenForSomeoneElses() throws {
        let fixture = try MountFixture(options: Self.options)
        defer { fixture.tearDown() }
        try write("mine\n", to: fixture.path("sentinel"))
        let burst = try shell("""
            python3 -c 'import os, sys
            for i in range(9000):
                fd = os.open(f"{sys.argv[1]}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
                os.write(fd, b"x" * 100)
                os.close(fd)
            for i in range(9000):
                with open(f"{sys.argv[1]}/f{i}", "rb") as f: f.read()' '\(fixture.mountPoint)'
            """)
        #expect(burst.status == 0, "\(burst.output)")
        // A change behind docfs's back: once the watcher reports it, it has read the burst.
        try "elsewhere\n".write(toFile: fixture.documents + "/sentinel", atomically: false, encoding: .utf8)
        #expect(eventually(seconds: 60) { fixture.log.contains("uncoordinated change to \(fixture.documents)/sentinel") })
        let uncoordinated = fixture.log.split(separator: "\n").filter { $0.contains("uncoordinated change") }
        #expect(uncoordinated.count == 1, "\(uncoordinated.prefix(5))")
        for i in stride(from: 0, to: 9000, by: 997) {
            #expect(attribute(fixture.path("f\(i)"), "user.docfs.version") == "1")
        }
    }
}

/// Whether `condition` holds within `seconds`.
func eventually(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// Races (C4, issue 3 §4): a write session through the mount and an uncoordinated writer in the
/// store. Neither content is lost.
@Suite(.needsRootAndFUSE) struct RaceTests {
    @Test func aReplaceInTheStoreDuringASessionBecomesAConflictVersion() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("report.txt")
        try write("base\n", to: f)
        let id = try #require(itemID(f))
        let fd = open(f, O_WRONLY | O_TRUNC)
        #expect(fd >= 0)
        #expect(Glibc.write(fd, "ours, ", 6) == 6)
        // A sync tool replaces the document in the store meanwhile.
        try write("theirs\n", to: fixture.documents + "/.report.txt.sync")
        #expect(rename(fixture.documents + "/.report.txt.sync", fixture.documents + "/report.txt") == 0)
        #expect(eventually(seconds: 20) {
            fixture.log.contains("both contents will be kept")
        })
        #expect(Glibc.write(fd, "saved last\n", 11) == 11)
        close(fd)

        // The session saved last: its content is current, under the document's id; theirs is kept.
        #expect(eventually(seconds: 20) { attribute(f, "user.docfs.conflict") == "1" })
        let current = try String(contentsOfFile: f, encoding: .utf8)
        #expect(current == "ours, saved last\n")
        #expect(itemID(f) == id)
        let versions = try versionsJSON(fixture, f)
        let conflict = try #require(versions.first { $0.kind == "conflict" })
        #expect(try kept(fixture, id, Int(conflict.version)) == "theirs\n")
        #expect(versions.first?.kind == "current" && versions.first!.version > conflict.version)
        let status = try shell("'\(MountFixture.binary)' status --json '\(f)'")
        #expect(status.output.contains("\"conflict\" : true"))
        // The put-back save is stitched before presenters hear of the conflict; the index says
        // what the file says.
        #expect(eventually(seconds: 10) { (try? indexedRecord(fixture, "/report.txt"))??.conflict == true })
        let record = try #require(try indexedRecord(fixture, "/report.txt"))
        #expect(record.version == Int64(attribute(f, "user.docfs.version") ?? "") && record.size == 17)
        #expect(UInt64(bitPattern: record.id) == id)

        // Resolved, keeping the current content: the conflict version goes, the flag too.
        let resolved = try shell("'\(MountFixture.binary)' versions '\(f)' --resolve")
        #expect(resolved.status == 0, "\(resolved.output)")
        #expect(attribute(f, "user.docfs.conflict") == nil)
        #expect(try versionsJSON(fixture, f).allSatisfy { $0.kind != "conflict" })
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "ours, saved last\n")
        #expect(try indexedRecord(fixture, "/report.txt")?.conflict == false)  // when resolve returns
    }

    /// The put-back is docfs's own change, made at the session's release: every other view's
    /// kernel is told by the put-back itself (and by the store watcher, which tells each mount
    /// of whatever it sees). Mounted with a 60 s cache, the user view, which looked the name up
    /// while it held the other writer's file, reads the saved content and the same file.
    @Test func aRacedSavePutBackIsSeenByEveryView() throws {
        let fixture = try MountFixture(options: UncoordinatedWriterTests.options)
        defer { fixture.tearDown() }
        #expect(try runDocfs("container create com.example.Notes --name Notes --public '\(fixture.mountPoint)'").status == 0)
        let app = try fixture.mountApp("com.example.Notes", options: UncoordinatedWriterTests.options)
        let written = app + "/Documents/report.txt"
        let seen = fixture.path("Notes/report.txt")
        try write("base\n", to: written)
        let fd = open(written, O_WRONLY | O_TRUNC)
        #expect(fd >= 0)
        #expect(Glibc.write(fd, "ours, ", 6) == 6)
        let backing = fixture.store + "/containers/com.example.Notes/Documents"
        try write("theirs\n", to: backing + "/.report.txt.sync")
        #expect(rename(backing + "/.report.txt.sync", backing + "/report.txt") == 0)
        #expect(eventually(seconds: 20) { fixture.log.contains("both contents will be kept") })
        // The user view looks the name up now: its kernel holds the other writer's file.
        #expect(eventually(seconds: 20) { ControlAreaTests.contents(seen) == "theirs\n" })
        #expect(Glibc.write(fd, "saved last\n", 11) == 11)
        close(fd)
        #expect(eventually(seconds: 20) { attribute(written, "user.docfs.conflict") == "1" })
        #expect(eventually(seconds: 10) { ControlAreaTests.contents(seen) == "ours, saved last\n" },
                "the user view still reads \(ControlAreaTests.contents(seen) ?? "nothing")")
        var inApp = stat(), inUser = stat()
        #expect(stat(written, &inApp) == 0 && stat(seen, &inUser) == 0 && inApp.st_ino == inUser.st_ino)
    }

    @Test func resolvingCanKeepTheOtherWritersContent() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        try write("base\n", to: f)
        let fd = open(f, O_WRONLY | O_APPEND)
        #expect(Glibc.write(fd, "ours\n", 5) == 5)
        try write("theirs\n", to: fixture.documents + "/doc.tmp")
        #expect(rename(fixture.documents + "/doc.tmp", fixture.documents + "/doc") == 0)
        #expect(eventually(seconds: 20) {
            fixture.log.contains("both contents will be kept")
        })
        close(fd)
        #expect(eventually(seconds: 20) { attribute(f, "user.docfs.conflict") == "1" })
        let conflict = try #require(try versionsJSON(fixture, f).first { $0.kind == "conflict" })
        let resolved = try shell("'\(MountFixture.binary)' versions '\(f)' --resolve --keep \(conflict.version)")
        #expect(resolved.status == 0, "\(resolved.output)")
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "theirs\n")
        #expect(attribute(f, "user.docfs.conflict") == nil)
        let record = try #require(try indexedRecord(fixture, "/doc"))  // when resolve returns
        #expect(!record.conflict && record.size == 7 && record.version == Int64(attribute(f, "user.docfs.version") ?? ""))
        let misuse = try shell("'\(MountFixture.binary)' versions '\(f)' --keep 1")
        #expect(misuse.status != 0 && misuse.output.contains("--keep goes with --resolve"))
    }

    @Test func aDeleteInTheStoreDuringASessionLosesNothing() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("notes")
        try write("base\n", to: f)
        let id = try #require(itemID(f))
        let fd = open(f, O_WRONLY | O_TRUNC)
        #expect(Glibc.write(fd, "still writing\n", 14) == 14)
        #expect(unlink(fixture.documents + "/notes") == 0)
        #expect(eventually(seconds: 20) {
            fixture.log.contains("both contents will be kept")
        })
        close(fd)
        #expect(eventually(seconds: 20) { (try? String(contentsOfFile: f, encoding: .utf8)) == "still writing\n" })
        #expect(itemID(f) == id)
        #expect(attribute(f, "user.docfs.conflict") == nil)  // nothing of theirs to keep
    }

    @Test func aSessionThatWroteNothingLetsTheOtherWriterStand() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("doc")
        try write("base\n", to: f)
        let fd = open(f, O_RDWR)
        try write("theirs\n", to: fixture.documents + "/doc.new")
        #expect(rename(fixture.documents + "/doc.new", fixture.documents + "/doc") == 0)
        #expect(eventually(seconds: 20) {
            fixture.log.contains("both contents will be kept")
        })
        close(fd)
        usleep(300_000)
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "theirs\n")
        #expect(attribute(f, "user.docfs.conflict") == nil)
        let record = try #require(try indexedRecord(fixture, "/doc"))  // when resolve returns
        #expect(!record.conflict && record.size == 7 && record.version == Int64(attribute(f, "user.docfs.version") ?? ""))
    }

    /// A child process that inherited the writer's descriptor closes its copy (a FLUSH): the
    /// parent still writes, so the session goes on and a replace in the store is still a race.
    @Test func aCopyOfTheDescriptorClosedByAChildDoesNotEndTheSession() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("log")
        try write("base\n", to: f)
        let id = try #require(itemID(f))
        let fd = Glibc.open(f, O_WRONLY | O_APPEND)  // not close-on-exec: the child below gets it
        #expect(fd >= 0)
        #expect(Glibc.write(fd, "ours\n", 5) == 5)
        #expect(try shell("true").status == 0)
        try write("theirs\n", to: fixture.documents + "/log.sync")
        #expect(rename(fixture.documents + "/log.sync", fixture.documents + "/log") == 0)
        #expect(eventually(seconds: 20) { fixture.log.contains("both contents will be kept") })
        #expect(Glibc.write(fd, "more\n", 5) == 5)
        close(fd)
        #expect(eventually(seconds: 20) { attribute(f, "user.docfs.conflict") == "1" })
        #expect(try String(contentsOfFile: f, encoding: .utf8) == "base\nours\nmore\n")
        #expect(itemID(f) == id)
        let conflict = try #require(try versionsJSON(fixture, f).first { $0.kind == "conflict" })
        #expect(try kept(fixture, id, Int(conflict.version)) == "theirs\n")
    }
}
