import DocfsCore
@testable import DocfsProvider
import Foundation
import Synchronization
import Testing
@testable import DocfsFilesystem
#if canImport(Glibc)
import Glibc
#endif

/// The filesystem logic driven in-process, without the kernel: lookup counting, readdirplus
/// accounting, content and errors.
@Suite struct FilesystemTests {
    let directory: String
    let filesystem: Filesystem

    init() throws {
        directory = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        filesystem = try Filesystem(store: LocalStore(path: directory))
    }

    private func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    @Test func lookupsAreCountedAndForgotten() throws {
        defer { cleanUp() }
        let (created, file) = try filesystem.create(parent: 1, name: "a", mode: 0o644, flags: O_RDWR, caller: .daemon)
        filesystem.release(file.handle)
        #expect(filesystem.lookupCount(of: created.node) == 1)
        let again = try filesystem.lookup(parent: 1, name: "a")
        #expect(again.node == created.node)
        #expect(filesystem.lookupCount(of: created.node) == 2)
        filesystem.forget(created.node, count: 1)
        #expect(filesystem.lookupCount(of: created.node) == 1)
        filesystem.forget(created.node, count: 1)
        #expect(filesystem.lookupCount(of: created.node) == 0)
        #expect(filesystem.knownNodeCount == 1)
        #expect(throws: DocfsError.self) { try filesystem.attributes(of: created.node) }
        // Known again after a forget: a new node id, never the old one.
        let later = try filesystem.lookup(parent: 1, name: "a")
        #expect(later.node != created.node)
    }

    @Test func hardLinksShareOneNode() throws {
        defer { cleanUp() }
        let (entry, file) = try filesystem.create(parent: 1, name: "x", mode: 0o600, flags: O_WRONLY, caller: .daemon)
        filesystem.release(file.handle)
        let linked = try filesystem.link(entry.node, newParent: 1, newName: "y")
        #expect(linked.node == entry.node)
        #expect(linked.attributes.st_nlink == 2)
        #expect(filesystem.lookupCount(of: entry.node) == 2)
    }

    @Test func readdirplusCountsOnlyWhatTheKernelTook() throws {
        defer { cleanUp() }
        for name: FileName in ["one", "two", "three"] {
            let (entry, file) = try filesystem.create(parent: 1, name: name, mode: 0o644, flags: O_WRONLY, caller: .daemon)
            filesystem.release(file.handle)
            filesystem.forget(entry.node, count: 1)
        }
        #expect(filesystem.knownNodeCount == 1)
        let handle = try filesystem.openDirectory(1)
        defer { filesystem.releaseDirectory(handle) }
        var taken: [FileName] = []
        var next: Int64 = 0
        try filesystem.readDirectoryPlus(handle, offset: 0) { item, entry in
            if taken.count == 3 { return false }  // "buffer full" after three entries
            taken.append(item.name)
            next = item.nextOffset
            if let entry { #expect(entry.attributes.st_mode & S_IFMT == S_IFREG) }
            return true
        }
        let files = taken.filter { $0 != "." && $0 != ".." }
        #expect(filesystem.knownNodeCount == 1 + files.count)
        var rest: [FileName] = []
        try filesystem.readDirectoryPlus(handle, offset: next) { item, _ in
            rest.append(item.name)
            return true
        }
        #expect(Set(taken + rest) == [".", "..", "one", "two", "three"])
        #expect(taken.count + rest.count == 5)
        #expect(filesystem.knownNodeCount == 4)
    }

    /// docfs's working files (a remote change being written in beside its document) are not
    /// listed or looked up through the mount: a node made for one would keep the id it was found
    /// with after the file was renamed over a document with another. Nobody can make one.
    @Test func workingFilesAreNeitherListedNorLookedUpNorMade() throws {
        defer { cleanUp() }
        let (_, file) = try filesystem.create(parent: 1, name: "doc", mode: 0o644, flags: O_WRONLY, caller: .daemon)
        filesystem.release(file.handle)
        let documents = StoreLayout(root: directory).documentsDirectory(.userDefault)
        for name in WorkingFileNames.prefixes.map({ $0 + "1f2e" }) {
            #expect(FileManager.default.createFile(atPath: documents + "/" + name, contents: Data("new content".utf8)))
        }
        let handle = try filesystem.openDirectory(1)
        defer { filesystem.releaseDirectory(handle) }
        var listed: [FileName] = []
        try filesystem.readDirectoryPlus(handle, offset: 0) { item, _ in
            listed.append(item.name)
            return true
        }
        #expect(Set(listed).subtracting([".", ".."]) == ["doc"])
        let plain = try filesystem.openDirectory(1)
        defer { filesystem.releaseDirectory(plain) }
        var names: [FileName] = []
        try filesystem.readDirectory(plain, offset: 0) { item in
            names.append(item.name)
            return true
        }
        #expect(Set(names).subtracting([".", ".."]) == ["doc"])
        for prefix in WorkingFileNames.prefixes {
            #expect(throws: DocfsError.self) { try filesystem.lookup(parent: 1, name: FileName(prefix + "1f2e")) }
            let refused = #expect(throws: DocfsError.self) {
                _ = try filesystem.create(parent: 1, name: FileName(prefix + "mine"), mode: 0o644, flags: O_WRONLY, caller: .daemon)
            }
            #expect(refused?.systemErrno == EPERM)
            #expect(throws: DocfsError.self) {
                try filesystem.rename(parent: 1, name: "doc", newParent: 1, newName: FileName(prefix + "mine"), flags: 0, caller: .daemon)
            }
            #expect(throws: DocfsError.self) { try filesystem.makeDirectory(parent: 1, name: FileName(prefix + "dir"), mode: 0o755, caller: .daemon) }
        }
        // A name that only begins like one is anyone's.
        let (_, other) = try filesystem.create(parent: 1, name: ".docfs-synced notes", mode: 0o644, flags: O_WRONLY, caller: .daemon)
        filesystem.release(other.handle)
        _ = try filesystem.lookup(parent: 1, name: ".docfs-synced notes")
        #expect(FileManager.default.fileExists(atPath: documents + "/doc"))
    }

    @Test func contentAndErrors() throws {
        defer { cleanUp() }
        let (_, file) = try filesystem.create(parent: 1, name: "doc", mode: 0o644, flags: O_RDWR, caller: .daemon)
        #expect(try filesystem.write(file.handle, bytes: Array("hello".utf8), offset: 0) == 5)
        #expect(try filesystem.read(file.handle, size: 10, offset: 1) == Array("ello".utf8))
        filesystem.release(file.handle)
        do {
            _ = try filesystem.lookup(parent: 1, name: "missing")
            Issue.record("lookup of a missing name succeeded")
        } catch {
            #expect(error.systemErrno == ENOENT)
        }
        do {
            _ = try filesystem.lookup(parent: 999, name: "doc")
            Issue.record("lookup in an unknown node succeeded")
        } catch {
            #expect(error.systemErrno == EBADF)
        }
        #expect(throws: DocfsError.self) {
            try filesystem.rename(parent: 1, name: "doc", newParent: 1, newName: "x", flags: 0x40, caller: .daemon)
        }
    }

    @Test func newItemsBelongToTheCaller() throws {
        defer { cleanUp() }
        let caller = Caller(uid: 1234, gid: 5678, pid: 1)
        let (file, handle) = try filesystem.create(parent: 1, name: "f", mode: 0o2755, flags: O_WRONLY, caller: caller)
        filesystem.release(handle.handle)
        let attributes = try filesystem.attributes(of: file.node)
        #expect(attributes.st_uid == 1234)
        #expect(attributes.st_gid == 5678)
        #expect(attributes.st_mode & 0o7777 == 0o2755)
        let folder = try filesystem.makeDirectory(parent: 1, name: "g", mode: 0o2775, caller: caller)
        #expect(folder.attributes.st_mode & S_ISGID == 0)  // mkdir ignores S_ISGID, as on ext4
        _ = try filesystem.setAttributes(of: folder.node, handle: nil, AttributeChanges(mode: 0o2775), caller: .daemon)
        let inside = try filesystem.makeDirectory(parent: folder.node, name: "h", mode: 0o755,
                                                  caller: Caller(uid: 42, gid: 42, pid: 1))
        #expect(inside.attributes.st_gid == 5678)  // setgid folder: its group, not the caller's
        #expect(inside.attributes.st_uid == 42)
        #expect(inside.attributes.st_mode & S_ISGID != 0)
    }

    /// A step that must not fail its operation but did (here: storing a new file's id, which
    /// an immutable file refuses) is reported to the daemon's log, naming what was not done,
    /// and the operation itself succeeds.
    @Test(.enabled(if: getuid() == 0, "needs root for chattr +i"))
    func problemsThatFailNoOperationAreReported() throws {
        defer { cleanUp() }
        let reported = Mutex<[String]>([])
        filesystem.shared.onProblem { problem in reported.withLock { $0.append(problem) } }
        let (_, handle) = try filesystem.create(parent: 1, name: "stuck", mode: 0o644, flags: O_WRONLY, caller: .daemon)
        let backing = directory + "/containers/docfs.default/Documents/stuck"
        #expect(FileManager.default.fileExists(atPath: backing))
        let immutable = Process()
        immutable.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        immutable.arguments = ["+i", backing]
        try immutable.run()
        immutable.waitUntilExit()
        #expect(immutable.terminationStatus == 0)
        defer {
            let undo = Process()
            undo.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
            undo.arguments = ["-i", backing]
            try? undo.run()
            undo.waitUntilExit()
        }
        filesystem.release(handle.handle)
        let problems = reported.withLock { $0 }
        #expect(problems.count == 1 && problems[0].hasPrefix("could not store the id given at create"), "\(problems)")
    }

    /// The watcher's events are sorted out in batches bigger than one lock holds: every name
    /// record is consumed exactly once, and content is docfs's own while it writes or while the
    /// file is as docfs left it.
    @Test func ownChangesAreSortedOutInBatches() throws {
        let own = OwnChanges()
        let folder = BackingKey(device: 1, inode: 2)
        let count = OwnChanges.eventsPerLock * 3 + 7
        for i in 0..<count { own.changedName(FileName("f\(i)"), in: folder) }
        own.changedName("twice", in: folder, events: 2)
        var events = (0..<count).map { OwnChanges.Event.name(FileName("f\($0)"), in: folder) }
        events += [.name("twice", in: folder), .name("twice", in: folder), .name("twice", in: folder), .name("never", in: folder)]
        let sorted = own.areOwn(events)
        #expect(sorted.count == events.count)
        #expect(sorted.prefix(count).allSatisfy { $0 })
        #expect(Array(sorted.suffix(4)) == [true, true, false, false])
        #expect(own.areOwn([.name("f0", in: folder)]) == [false])  // consumed

        var written = stat()
        written.st_dev = 1
        written.st_ino = 77
        written.st_size = 10
        written.st_mtim = timespec(tv_sec: 100, tv_nsec: 5)
        own.changedFile(written)
        var later = written
        later.st_mtim.tv_nsec = 6
        #expect(own.areOwn([.content(written, closed: nil), .content(later, closed: nil)]) == [true, false])
        own.willWrite(BackingKey(written))
        #expect(own.areOwn([.content(later, closed: nil)]) == [true])
    }

    @Test func anAttributeChangeIsOwnWhileDocfsWritesOrUntilTheChangeTimeMoves() throws {
        let own = OwnChanges()
        var file = stat()
        file.st_dev = 1
        file.st_ino = 78
        file.st_ctim = timespec(tv_sec: 200, tv_nsec: 1)
        #expect(own.areOwn([.attributes(file)]) == [false])  // never touched by docfs
        own.changedFile(file)
        var chmodded = file
        chmodded.st_ctim.tv_nsec = 2  // a chmod, a touch or an xattr behind docfs: ctime moves
        chmodded.st_mtim = file.st_mtim
        #expect(own.areOwn([.attributes(file), .attributes(chmodded)]) == [true, false])
        #expect(own.areOwn([.content(chmodded, closed: nil)]) == [true])  // the content itself is unchanged
        own.willWrite(BackingKey(file))
        #expect(own.areOwn([.attributes(chmodded)]) == [true])
    }

    /// Someone chmods a file in the store while docfs still has it open for writing (the
    /// writer closed it, its release has not come yet), or just before docfs's release sets
    /// the version of the save: either way the change is someone else's and the kernel forgets
    /// the attributes it cached. docfs's own changes around it stay its own.
    @Test func aChmodBehindTheMountWhileDocfsWritesIsSomeoneElses() throws {
        defer { cleanUp() }
        let (entry, path, _) = try documentSavedOnce()
        func forgotten() -> [NodeID] { filesystem.noticeStoreChanges([.attributes(path: path)]).invalidations.attributes }

        // Heard while the writer's release has not come.
        let writer = try filesystem.open(entry.node, flags: O_WRONLY, caller: .daemon)
        _ = try filesystem.write(writer.handle, bytes: Array("save 2".utf8), offset: 0)
        try filesystem.flush(writer.handle)
        #expect(chmod(path, 0o600) == 0)
        #expect(forgotten() == [entry.node])
        filesystem.release(writer.handle)  // sets the version: docfs's own change again
        #expect(forgotten().isEmpty)

        // Heard only after the release set the version (the change time is docfs's then).
        let second = try filesystem.open(entry.node, flags: O_WRONLY, caller: .daemon)
        _ = try filesystem.write(second.handle, bytes: Array("save 3".utf8), offset: 0)
        try filesystem.flush(second.handle)
        #expect(chown(path, 1234, 5678) == 0)
        filesystem.release(second.handle)
        #expect(forgotten() == [entry.node])
        #expect(forgotten().isEmpty)  // told once

        // docfs's own chmod, and a write after it, are docfs's.
        _ = try filesystem.setAttributes(of: entry.node, handle: nil, AttributeChanges(mode: 0o640), caller: .daemon)
        #expect(forgotten().isEmpty)
        let third = try filesystem.open(entry.node, flags: O_WRONLY, caller: .daemon)
        _ = try filesystem.write(third.handle, bytes: Array("save 4".utf8), offset: 0)
        try filesystem.flush(third.handle)
        filesystem.release(third.handle)
        #expect(forgotten().isEmpty)
        var st = stat()
        #expect(lstat(path, &st) == 0 && st.st_mode & 0o7777 == 0o640 && st.st_uid == 1234)
    }

    /// A document "doc" made and saved once through docfs: its entry, its backing path, and the
    /// watcher's change for a close of it.
    private func documentSavedOnce() throws -> (Entry, String, StoreWatcher.Change) {
        let (entry, created) = try filesystem.create(parent: 1, name: "doc", mode: 0o644, flags: O_WRONLY, caller: .daemon)
        _ = try filesystem.write(created.handle, bytes: Array("save 1".utf8), offset: 0)
        try filesystem.flush(created.handle)
        filesystem.release(created.handle)
        let documents = StoreLayout(root: directory).documentsDirectory(.userDefault)
        var folderState = stat()
        #expect(lstat(documents, &folderState) == 0)
        let folder = StoreWatcher.Folder(device: UInt64(folderState.st_dev), inode: UInt64(folderState.st_ino))
        return (entry, documents + "/doc", .content(path: documents + "/doc", folder: folder, name: "doc"))
    }

    /// The watcher samples a file's state before it judges whose change it was. A write through
    /// docfs that ends in between leaves a record newer than the sample: the change is still
    /// docfs's own, judged again by the file's state now. A write behind docfs's back is not.
    @Test func aStateSampledBeforeDocfsFinishedWritingIsStillItsOwnChange() throws {
        defer { cleanUp() }
        let (entry, path, closed) = try documentSavedOnce()

        let writer = try filesystem.open(entry.node, flags: O_WRONLY | O_TRUNC, caller: .daemon)
        var midWrite = stat()
        #expect(lstat(path, &midWrite) == 0 && midWrite.st_size == 0)
        _ = try filesystem.write(writer.handle, bytes: Array("save 2, longer".utf8), offset: 0)
        try filesystem.flush(writer.handle)
        filesystem.release(writer.handle)
        #expect(filesystem.sortOutOwnChanges([closed], sampled: [midWrite]).own == [true])

        let outside = open(path, O_WRONLY | O_APPEND)
        #expect(outside >= 0)
        #expect(Glibc.write(outside, "!", 1) == 1)
        close(outside)
        var afterOutside = stat()
        #expect(lstat(path, &afterOutside) == 0)
        #expect(filesystem.sortOutOwnChanges([closed], sampled: [afterOutside]).own == [false])
    }

    /// Between a writer's last close (FLUSH) and its release, another writer changes the file
    /// behind the mount and the watcher sees it while docfs still has the file open for
    /// writing (so it takes the change for docfs's). The release shows the file is not as
    /// docfs's writer left it: the watcher is asked to look again, and then judges the change
    /// someone else's. A writer that writes again after its FLUSH (a dup'd descriptor) leaves
    /// nothing to look at again.
    @Test func aChangeBehindTheMountBetweenAWritersCloseAndItsReleaseIsSeen() throws {
        defer { cleanUp() }
        let (entry, path, closed) = try documentSavedOnce()
        func writeBehind(_ text: String) {
            let outside = open(path, O_WRONLY | O_TRUNC)
            #expect(outside >= 0)
            #expect(Glibc.write(outside, text, text.utf8.count) == text.utf8.count)
            close(outside)
        }
        func state() -> stat {
            var st = stat()
            #expect(lstat(path, &st) == 0)
            return st
        }
        let rechecks = filesystem.shared.storeRechecks

        // Another writer between the FLUSH and the release, heard before the release.
        let writer = try filesystem.open(entry.node, flags: O_WRONLY, caller: .daemon)
        _ = try filesystem.write(writer.handle, bytes: Array("save 2".utf8), offset: 0)
        try filesystem.flush(writer.handle)
        usleep(10_000)  // so the other writer's mtime differs from docfs's at any clock granularity
        writeBehind("from elsewhere")
        #expect(filesystem.sortOutOwnChanges([closed], sampled: [state()]).own == [true])  // docfs still writes
        filesystem.release(writer.handle)
        let again = rechecks.take()
        #expect(again.count == 1 && again.first?.filePath == path, "\(again)")
        #expect(filesystem.sortOutOwnChanges(again, sampled: [state()]).own == [false])

        // The same, heard only after the release: nothing to look at again, and the change is
        // someone else's when the watcher gets to it.
        let second = try filesystem.open(entry.node, flags: O_WRONLY, caller: .daemon)
        _ = try filesystem.write(second.handle, bytes: Array("save 3".utf8), offset: 0)
        try filesystem.flush(second.handle)
        usleep(10_000)
        writeBehind("from elsewhere, again")
        filesystem.release(second.handle)
        #expect(rechecks.take().isEmpty)
        #expect(filesystem.sortOutOwnChanges([closed], sampled: [state()]).own == [false])

        // docfs's writer writes again after its FLUSH: all of it is docfs's.
        let third = try filesystem.open(entry.node, flags: O_WRONLY, caller: .daemon)
        _ = try filesystem.write(third.handle, bytes: Array("save 4".utf8), offset: 0)
        try filesystem.flush(third.handle)
        usleep(10_000)
        _ = try filesystem.write(third.handle, bytes: Array("save 4, more".utf8), offset: 0)
        #expect(filesystem.sortOutOwnChanges([closed], sampled: [state()]).own == [true])
        filesystem.release(third.handle)
        #expect(rechecks.take().isEmpty)
        #expect(filesystem.sortOutOwnChanges([closed], sampled: [state()]).own == [true])
    }
}
