import CLinux
import DocfsCore
@testable import DocfsFilesystem
import DocfsProvider
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The local store: layout on first use, the one-daemon lock, names it accepts.
@Suite struct StoreTests {
    @Test func firstUseCreatesTheLayout() throws {
        let path = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8) + "/nested/store"
        defer { try? FileManager.default.removeItem(atPath: String(path.dropLast("/nested/store".count))) }
        let store = try LocalStore(path: path)
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: store.layout.documentsDirectory(.userDefault), isDirectory: &isDirectory))
        #expect(isDirectory.boolValue)
        let marker = try String(contentsOfFile: store.layout.formatFile, encoding: .utf8)
        #expect(marker.contains("\"format\": 1"))
    }

    @Test func itemIdsAreNeverHandedOutTwice() throws {
        let path = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        var seen = Set<ItemID>()
        for _ in 0..<3 {
            // Each opening is a daemon start (or a crash and restart): the rest of a reserved
            // block is skipped, never reused.
            let store = try LocalStore(path: path)
            for _ in 0..<1500 { seen.insert(try store.itemIDs.allocate()) }
        }
        #expect(seen.count == 4500)
        #expect(seen.allSatisfy { !$0.isDerived && $0.rawValue >= ItemIDAllocator.firstID })
        let stored = try String(contentsOfFile: path + "/item-ids", encoding: .utf8)
        let next = try #require(UInt64(stored.dropFirst("next=".count).dropLast()))
        #expect(seen.allSatisfy { $0.rawValue < next })
    }

    /// A store linked to a remote gives ids from its machine's space (issue 22), across restarts.
    @Test func idsComeFromTheMachinesSpaceOnceItEntersOne() throws {
        let path = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let store = try LocalStore(path: path)
            let before = try store.itemIDs.allocate()
            #expect(before.rawValue < ItemIDAllocator.spaceSize)
            try store.itemIDs.enter(space: 3)
            #expect(try store.itemIDs.allocate().rawValue == 3 * ItemIDAllocator.spaceSize)
            try store.itemIDs.enter(space: 3)  // in the space already: ids go on
            #expect(try store.itemIDs.allocate().rawValue == 3 * ItemIDAllocator.spaceSize + 1)
            // Linked to another remote, as its first store (space 0): back in space 0, past what
            // the store gave there (the floor), never below it.
            try store.itemIDs.enter(space: 0, floor: before.rawValue + 1)
            #expect(try store.itemIDs.allocate().rawValue == before.rawValue + 1)
            try store.itemIDs.enter(space: 3, floor: 3 * ItemIDAllocator.spaceSize + 100)
            #expect(try store.itemIDs.allocate().rawValue == 3 * ItemIDAllocator.spaceSize + 100)
        }
        let reopened = try LocalStore(path: path)
        let next = try reopened.itemIDs.allocate().rawValue
        #expect(next > 3 * ItemIDAllocator.spaceSize + 100 && next < 4 * ItemIDAllocator.spaceSize)
        #expect(throws: DocfsError.self) { try reopened.itemIDs.enter(space: 1 << 21) }
    }

    @Test func aDamagedIdCounterIsReportedWithWhatToDo() throws {
        let path = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        _ = try LocalStore(path: path)
        try "next=banana\n".write(toFile: path + "/item-ids", atomically: false, encoding: .utf8)
        #expect {
            _ = try LocalStore(path: path)
        } throws: { error in
            let message = (error as? DocfsError)?.message ?? ""
            return message.contains("item-ids is damaged") && message.contains("next=N")
        }
    }

    @Test func itemIdTextIsStrict() {
        #expect(ItemID(text: "42")?.rawValue == 42)
        for bad in ["", "0", "-1", "4x", " 4", "99999999999999999999999", String(ItemID.derivedBase)] {
            #expect(ItemID(text: bad) == nil, "\(bad)")
        }
        #expect(ItemID.derived(fromBackingInode: 7).isDerived)
    }

    @Test func oneDaemonAtATime() throws {
        let path = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try LocalStore(path: path)
        #expect(StoreLock.holder(of: store.layout) == nil)
        let lock = try StoreLock(store: store, mountPoint: "/mnt/first")
        let holder = StoreLock.holder(of: store.layout)
        #expect(holder?.mountPoint == "/mnt/first")
        #expect(holder?.pid == getpid())
        do {
            _ = try StoreLock(store: store, mountPoint: "/mnt/second")
            Issue.record("a second lock was granted")
        } catch {
            #expect(error.code == .storeBusy)
            #expect(error.message.contains("/mnt/first"))
        }
        withExtendedLifetime(lock) {}
    }

    @Test func unreadableStoreIsReported() throws {
        let path = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        _ = FileManager.default.createFile(atPath: path, contents: Data("not a folder".utf8))
        do {
            _ = try LocalStore(path: path)
            Issue.record("a file was accepted as a store")
        } catch {
            #expect(error.code == .storeUnavailable)
            #expect(error.message.contains("not a directory"))
        }
    }

    @Test func defaultPathFollowsXDG() {
        #expect(LocalStore.defaultPath(environment: ["XDG_DATA_HOME": "/x/data", "HOME": "/home/u"]) == "/x/data/docfs")
        #expect(LocalStore.defaultPath(environment: ["HOME": "/home/u"]) == "/home/u/.local/share/docfs")
        #expect(LocalStore.defaultPath(environment: ["XDG_DATA_HOME": "relative", "HOME": "/home/u"]) == "/home/u/.local/share/docfs")
        #expect(LocalStore.defaultPath(environment: ["DOCFS_STORE": "/srv/s", "XDG_DATA_HOME": "/x"]) == "/srv/s")
    }

    @Test(arguments: ["", ".hidden", "a/b", "a..b", "space here", String(repeating: "x", count: 201)])
    func malformedContainerIDsAreRejected(_ raw: String) {
        #expect(throws: DocfsError.self) { try ContainerID(raw) }
    }

    @Test func wellFormedContainerID() throws {
        #expect(try ContainerID("com.example.Notes").rawValue == "com.example.Notes")
    }
}

/// A create and anyone else giving the new file an id (the store watcher judging a late event of
/// its name, a lookup through another folder) race between the file's making and its pending id's
/// registration: exactly one id wins, and the create's record carries it (before, the file kept
/// one id and the index another: StitchingTests under load).
@Suite struct ItemIdentityRaceTests {
    @Test func aCreateAdoptsAnIdGivenMeanwhileAndAReaderAdoptsAPendingOne() throws {
        let directory = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = ItemIdentity(allocator: try ItemIDAllocator(path: directory + "/item-ids"), ownChanges: OwnChanges())
        func made(_ name: String) throws -> (fd: Int32, path: Int32, st: stat) {
            let fd = open(directory + "/" + name, O_RDWR | O_CREAT | O_EXCL, 0o644)
            let path = open(directory + "/" + name, DOCFS_O_PATH)
            var st = stat()
            fstat(fd, &st)
            return (fd, path, st)
        }
        // Someone gave the file an id before the create registered its own: the create takes it.
        let first = try made("first")
        defer { close(first.fd); close(first.path) }
        let givenMeanwhile = identity.item(of: first.path, first.st)
        let created = try identity.assignNew(to: BackingKey(first.st), createdAs: UInt64(first.fd), fd: first.fd)
        #expect(created == givenMeanwhile && ItemAttributes.id(ofDescriptor: first.path) == givenMeanwhile)
        // The create registered first: a reader finds the pending id, writes none of its own.
        let second = try made("second")
        defer { close(second.fd); close(second.path) }
        let pending = try identity.assignNew(to: BackingKey(second.st), createdAs: UInt64(second.fd), fd: second.fd)
        #expect(identity.item(of: second.path, second.st) == pending)
        #expect(ItemAttributes.id(ofDescriptor: second.path) == nil)
        try identity.pending.store(createdAs: UInt64(second.fd), fd: second.fd)
        #expect(ItemAttributes.id(ofDescriptor: second.path) == pending)
    }
}
