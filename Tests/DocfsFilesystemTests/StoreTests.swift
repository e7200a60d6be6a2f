import DocfsCore
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
            try store.itemIDs.enter(space: 0)  // space 0 changes nothing
            #expect(try store.itemIDs.allocate().rawValue == 3 * ItemIDAllocator.spaceSize + 1)
        }
        let reopened = try LocalStore(path: path)
        let next = try reopened.itemIDs.allocate().rawValue
        #expect(next > 3 * ItemIDAllocator.spaceSize + 1 && next < 4 * ItemIDAllocator.spaceSize)
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
