import CLinux
import DocfsIndex
import Foundation
import DocfsTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Stitching (issue 4 §2, DESIGN §5 S1) through a real mount: after every operation returns,
/// with no sleep and no retry, the index read by another connection (as `docfs query` reads it)
/// says what the store holds: every name with its kind, size, id, modification time, tags and
/// version.
/// Then `docfs index check` finds no difference, and a rebuild of the same store writes the
/// same records (the property of §5: the index equals a fresh rebuild).
@Suite(.serialized, .needsRootAndFUSE) struct StitchingTests {
    /// What the index should say of a name, and what it does.
    struct Seen: Equatable, CustomStringConvertible {
        var kind: String
        var size: Int64
        var id: UInt64
        var modified: Double
        var tags: [String]
        /// A file's `user.docfs.version` as the mount shows it (0 for anything else).
        var version: Int64

        var description: String { "\(kind) size \(size) id \(id) modified \(modified) tags \(tags) version \(version)" }
    }

    /// The store's names as they are (the backing files; ids as the mount shows them).
    static func store(_ fixture: MountFixture) -> [String: Seen] {
        var result: [String: Seen] = [:]
        func walk(_ relative: String) {
            let backing = fixture.documents + relative
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: backing) else { return }
            for name in names {
                let path = relative + "/" + name
                var st = stat()
                guard lstat(fixture.documents + path, &st) == 0 else { continue }
                // Symbolic links carry no attributes: their id is derived from the backing inode.
                let id = (st.st_mode & S_IFMT) == S_IFLNK ? (1 << 62) | UInt64(st.st_ino) : itemID(fixture.mountPoint + path) ?? 0
                let type = st.st_mode & S_IFMT
                let kind = type == S_IFDIR ? "folder" : type == S_IFREG ? "file" : type == S_IFLNK ? "symlink" : "other"
                let tags = type == S_IFLNK ? nil : attribute(fixture.documents + path, "user.xdg.tags")
                let version = type == S_IFREG ? attribute(fixture.mountPoint + path, "user.docfs.version").flatMap { Int64($0) } ?? -1 : 0
                result[path] = Seen(kind: kind, size: type == S_IFREG ? Int64(st.st_size) : 0, id: id,
                                    modified: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9,
                                    tags: IndexRecord.tags(fromAttribute: tags ?? ""), version: version)
                if type == S_IFDIR { walk(path) }
            }
        }
        walk("")
        return result
    }

    static func indexed(_ index: IndexDatabase) throws -> [String: Seen] {
        var result: [String: Seen] = [:]
        for r in try index.allRecords() where r.container == "docfs.default" && r.scope == "documents" {
            result[r.path] = Seen(kind: r.kind, size: r.size, id: UInt64(bitPattern: r.id), modified: r.modified, tags: r.tags,
                                  version: r.version)
        }
        return result
    }

    /// Names the two disagree on, for the failure message.
    static func differences(_ a: [String: Seen], _ b: [String: Seen]) -> String {
        Set(a.keys).union(b.keys).sorted().compactMap { path in
            a[path] == b[path] ? nil : "\(path): store \(a[path].map(String.init(describing:)) ?? "none"), index \(b[path].map(String.init(describing:)) ?? "none")"
        }.joined(separator: "\n")
    }

    @Test func everyOperationIsInTheIndexWhenItReturns() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let index = try IndexDatabase(path: fixture.store + "/index/index.sqlite", readOnly: true)
        var rng = SplitMix(seed: 4)
        func pick<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[Int(rng.next() % UInt64(items.count))] }
        func number(_ bound: Int) -> Int { Int(rng.next() % UInt64(bound)) }
        let names = ["a.txt", "b.md", "c", "d.pdf", "e"]
        var checked = 0
        var kinds: [String: Int] = [:]
        for step in 0..<250 {
            let state = Self.store(fixture)
            let folders = [""] + state.filter { $0.value.kind == "folder" }.map(\.key).sorted()
            let files = state.filter { $0.value.kind == "file" }.map(\.key).sorted()
            let anything = state.keys.sorted()
            func fresh() -> String { (pick(folders) ?? "") + "/" + (pick(names) ?? "x") + String(number(3)) }
            func m(_ path: String) -> String { fixture.mountPoint + path }
            var done = ""
            switch number(15) {
            case 0, 1:
                let path = fresh()
                let fd = open(m(path), O_CREAT | O_WRONLY | O_TRUNC, 0o644)
                if fd >= 0 {
                    _ = write(fd, [UInt8](repeating: UInt8(65 + number(26)), count: number(5000)), number(5000))
                    close(fd)
                    done = "create \(path)"
                }
            case 2:
                guard let path = pick(files) else { continue }
                let fd = open(m(path), O_WRONLY | O_APPEND)
                if fd >= 0 { _ = write(fd, "more", 4); close(fd); done = "append \(path)" }
            case 3:
                guard let path = pick(anything) else { continue }
                let target = fresh()
                if rename(m(path), m(target)) == 0 { done = "rename \(path) \(target)" }
            case 4:
                guard let path = pick(files) else { continue }
                if unlink(m(path)) == 0 { done = "unlink \(path)" }
            case 5:
                let path = fresh()
                if mkdir(m(path), 0o755) == 0 { done = "mkdir \(path)" }
            case 6:
                guard let path = pick(folders.filter { !$0.isEmpty }) else { continue }
                if rmdir(m(path)) == 0 { done = "rmdir \(path)" }
            case 7:
                guard let path = pick(files) else { continue }
                let target = fresh()
                if link(m(path), m(target)) == 0 { done = "link \(path) \(target)" }
            case 8:
                let path = fresh()
                if symlink("a.txt0", m(path)) == 0 { done = "symlink \(path)" }
            case 9:
                guard let path = pick(anything.filter { state[$0]?.kind != "symlink" }) else { continue }
                let tags = pick(["work", "work, urgent", "home"]) ?? "work"
                if docfs_setxattr(m(path), "user.xdg.tags", tags, tags.utf8.count, 0) == 0 { done = "tag \(path)" }
            case 10:
                guard let path = pick(anything.filter { state[$0]?.tags.isEmpty == false }) else { continue }
                if docfs_removexattr(m(path), "user.xdg.tags") == 0 { done = "untag \(path)" }
            case 11:
                guard let path = pick(files) else { continue }
                if truncate(m(path), off_t(number(3000))) == 0 { done = "truncate \(path)" }
            case 12:
                guard let path = pick(anything.filter { state[$0]?.kind != "symlink" }) else { continue }
                var times = [timespec(tv_sec: 1_700_000_000 + number(1000), tv_nsec: 0), timespec(tv_sec: 1_600_000_000 + number(1000), tv_nsec: 0)]
                if utimensat(AT_FDCWD, m(path), &times, 0) == 0 { done = "touch \(path)" }
            case 13:
                // A safe-save: new content written aside, then renamed over the document.
                guard let path = pick(files) else { continue }
                let temporary = path + ".tmp"
                let fd = open(m(temporary), O_CREAT | O_WRONLY | O_TRUNC, 0o644)
                guard fd >= 0 else { continue }
                _ = write(fd, "saved", 5)
                close(fd)
                if rename(m(temporary), m(path)) == 0 { done = "save \(path)" }
            default:
                // Written and synced, still open: fsync alone stitches.
                guard let path = pick(files) else { continue }
                let fd = open(m(path), O_WRONLY)
                guard fd >= 0 else { continue }
                _ = pwrite(fd, "synced!", 7, off_t(number(100)))
                fsync(fd)
                let store = Self.store(fixture)
                let seen = try Self.indexed(index)
                #expect(store == seen, "step \(step), after fsync of \(path) (still open):\n\(Self.differences(store, seen))")
                // A close right after an fsync has nothing new to stitch; one after more
                // writes has (the check below sees both).
                if number(2) == 0 { _ = pwrite(fd, "and more after the sync", 23, off_t(number(4000))) }
                close(fd)
                done = "fsync \(path)"
            }
            guard !done.isEmpty else { continue }
            kinds[String(done.prefix { $0 != " " }), default: 0] += 1
            // No sleep, no retry: the operation has returned.
            let store = Self.store(fixture)
            let seen = try Self.indexed(index)
            #expect(store == seen, "step \(step), after \(done):\n\(Self.differences(store, seen))")
            if store != seen { break }
            checked += 1
        }
        #expect(checked > 150, "\(kinds)")
        #expect(kinds.count == 14, "every kind of operation ran: \(kinds)")

        // The daemon finds nothing to fix, and nor does a check of the store at rest.
        let served = try shell("'\(MountFixture.binary)' index check '\(fixture.mountPoint)'")
        #expect(served.status == 0, "\(served.output)")
        #expect(served.output.contains("index and store agree"))
        let stitched = try index.allRecords()
        fixture.stop()
        let atRest = try shell("'\(MountFixture.binary)' index check --store '\(fixture.store)'")
        #expect(atRest.status == 0, "\(atRest.output)")
        // A rebuild from scratch writes the same records.
        let rebuilt = try shell("'\(MountFixture.binary)' index rebuild --store '\(fixture.store)'")
        #expect(rebuilt.status == 0, "\(rebuilt.output)")
        let fresh = try index.allRecords()
        #expect(fresh.map(\.path) == stitched.map(\.path))
        for (a, b) in zip(stitched, fresh) {
            #expect(a.differences(from: b).isEmpty, "\(a.path): \(a.differences(from: b))")
        }
    }
}

extension StitchingTests {
    /// A file with several names (hard links): a close through one name re-records every name,
    /// each with the file's size, times and attributes, and the content type its own name
    /// gives (sniffed from the content where the name leaves it open); a `user.mime_type` set
    /// on the file is every name's type.
    @Test func everyNameOfAHardLinkedFileIsRecordedWithItsOwnType() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try write("# Title\n", to: fixture.path("a.md"))
        #expect(link(fixture.path("a.md"), fixture.path("b")) == 0)
        #expect(link(fixture.path("a.md"), fixture.path("c.pdf")) == 0)
        func records() throws -> [String: (size: Int64, type: String, version: Int64, tags: [String])] {
            var found: [String: (size: Int64, type: String, version: Int64, tags: [String])] = [:]
            for path in ["/a.md", "/b", "/c.pdf"] {
                let record = try #require(try indexedRecord(fixture, path), "\(path) is not in the index")
                found[path] = (record.size, record.contentType, record.version, record.tags)
            }
            return found
        }
        // Written through the name without a type: every name's record follows.
        let fd = open(fixture.path("b"), O_WRONLY | O_APPEND)
        #expect(fd >= 0)
        #expect(Glibc.write(fd, "more text\n", 10) == 10)
        close(fd)
        var seen = try records()
        #expect(seen["/a.md"]!.type == "text/markdown" && seen["/b"]!.type == "text/plain" && seen["/c.pdf"]!.type == "application/pdf",
                "\(seen)")
        #expect(Set(seen.values.map(\.size)) == [18] && Set(seen.values.map(\.version)).count == 1, "\(seen)")
        // Tags set through one name are the file's: every record carries them.
        #expect(docfs_setxattr(fixture.path("c.pdf"), "user.xdg.tags", "work", 4, 0) == 0)
        seen = try records()
        #expect(seen.values.allSatisfy { $0.tags == ["work"] }, "\(seen)")
        // A type chosen for the file is every name's.
        #expect(docfs_setxattr(fixture.path("a.md"), "user.mime_type", "text/x-note", 11, 0) == 0)
        let fd2 = open(fixture.path("a.md"), O_WRONLY | O_APPEND)
        #expect(fd2 >= 0)
        #expect(Glibc.write(fd2, "x", 1) == 1)
        close(fd2)
        seen = try records()
        #expect(seen.values.allSatisfy { $0.type == "text/x-note" && $0.size == 19 }, "\(seen)")
        let check = try shell("'\(MountFixture.binary)' index check '\(fixture.mountPoint)'")
        #expect(check.status == 0 && check.output.contains("index and store agree"), "\(check.output)")
    }
}

extension StitchingTests {
    /// A write session that wrote nothing (an open for writing, an fsync, a close) takes its
    /// version back at the release that follows the close (the kernel sends it without waiting),
    /// and the index follows: the session's own change record (a rollback) re-records the file.
    @Test func aSessionThatWroteNothingLeavesTheRecordAtTheFilesVersion() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("log.txt")
        try write("one\n", to: f)
        try write("two\n", to: f)
        let before = try #require(attribute(f, "user.docfs.version").flatMap { Int64($0) })
        #expect(try indexedRecord(fixture, "/log.txt")?.version == before)
        for _ in 0..<3 {
            let fd = open(f, O_WRONLY)
            #expect(fd >= 0)
            #expect(fsync(fd) == 0)
            #expect(close(fd) == 0)
            #expect(eventually(seconds: 5) {
                attribute(f, "user.docfs.version").flatMap { Int64($0) } == before
                    && (try? indexedRecord(fixture, "/log.txt"))??.version == before
            })
        }
        // One that writes moves both on.
        try write("three\n", to: f)
        let after = try #require(attribute(f, "user.docfs.version").flatMap { Int64($0) })
        #expect(after == before + 1)
        #expect(try indexedRecord(fixture, "/log.txt")?.version == after)
    }
}

/// The record of `path` (a name in the documents scope, like `/notes.txt`) as `docfs query`
/// reads it: from the index's journal and database, by another connection.
func indexedRecord(_ fixture: MountFixture, _ path: String) throws -> IndexRecord? {
    let index = try IndexDatabase(path: fixture.store + "/index/index.sqlite", readOnly: true)
    let byPath = QueryPredicate.comparison(Comparison(attribute: .path, op: .equal, value: .text(path)))
    return try index.records(matching: IndexQuery(predicate: byPath)).first
}
