import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsSync
import DocfsSyncStore
import DocfsTestSupport
import Foundation
import Testing

/// The containers' key-value stores kept in step across machines (issue 24, DESIGN §9.3), on
/// each remote: the server's order decides (last writer wins, never a clock), removals
/// travel, a write made here while another machine's comes down is not lost to it, and every
/// machine ends with the remote's values.
@Suite struct KeyValueSyncTests {
    static let reader = try! ContainerID("com.example.Reader")

    /// A machine: its own key-value database, and the engine that keeps it in step.
    struct Machine {
        let database: KeyValueDatabase
        let sync: KeyValueSync

        init(_ directory: String, remote: any Remote) throws {
            database = try KeyValueDatabase(path: directory + "/keyvalues.sqlite")
            sync = KeyValueSync(store: StoreKeyValues(database: database), remote: remote)
        }

        func values(_ container: ContainerID = KeyValueSyncTests.reader) throws -> [String: KeyValue] {
            Dictionary(uniqueKeysWithValues: try database.entries(in: container).map { ($0.key, $0.value) })
        }
    }

    static func machines(_ count: Int, remote: any Remote) throws -> ([Machine], cleanUp: () -> Void) {
        let directory = "/dev/shm/docfs-kv-sync-\(UUID().uuidString)"
        let machines = try (0..<count).map { try Machine(directory + "/\($0)", remote: remote) }
        return (machines, { try? FileManager.default.removeItem(atPath: directory) })
    }

    /// The remote's values of a container, as a machine reads them.
    static func remoteValues(_ remote: any Remote, _ container: ContainerID = reader) throws -> [String: KeyValue] {
        var values: [String: KeyValue] = [:]
        for key in try remote.keys(in: container.rawValue) {
            values[key] = try KeyValue(portable: try #require(try remote.value(forKey: key, in: container.rawValue)))
        }
        return values
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func concurrentWritesOfOneKeyOnThreeMachinesConvergeOnTheServersLast(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let (machines, cleanUp) = try Self.machines(3, remote: remote)
        defer { cleanUp() }
        // Each sets the page while offline; b's write reaches the server last.
        for (index, machine) in machines.enumerated() { try machine.database.set("page", to: .number(Double(10 + index)), in: Self.reader) }
        _ = try machines[0].sync.syncOnce()
        _ = try machines[2].sync.syncOnce()
        let last = try machines[1].sync.syncOnce()
        #expect(last.sent == 1)
        for _ in 0..<2 { for machine in machines { _ = try machine.sync.syncOnce() } }
        for (index, machine) in machines.enumerated() { #expect(try machine.values() == ["page": .number(11)], "machine \(index)") }
        #expect(try Self.remoteValues(remote) == ["page": .number(11)])
        // A removal travels; a key another machine sets after it comes back on every machine.
        #expect(try machines[2].database.remove("page", in: Self.reader))
        _ = try machines[2].sync.syncOnce()
        let heard = try machines[0].sync.syncOnce()
        #expect(heard.changed == [Self.reader.rawValue: ["page"]])
        #expect(try machines[0].values().isEmpty)
        try machines[0].database.set("theme", to: .text("dark"), in: Self.reader)
        for _ in 0..<2 { for machine in machines { _ = try machine.sync.syncOnce() } }
        for machine in machines { #expect(try machine.values() == ["theme": .text("dark")]) }
    }

    /// A write made here before another machine's write of the key comes down is sent after
    /// it, so it is the later one in the server's order and wins everywhere; an older change
    /// read late never replaces a newer value here.
    @Test func aWriteWaitingHereIsNotLostToAnEarlierOneFromTheRemote() throws {
        let remote = InMemoryRemote()
        let (machines, cleanUp) = try Self.machines(2, remote: remote)
        defer { cleanUp() }
        let (a, b) = (machines[0], machines[1])
        try a.database.set("theme", to: .text("light"), in: Self.reader)
        _ = try a.sync.syncOnce()
        try b.database.set("theme", to: .text("dark"), in: Self.reader)
        _ = try b.sync.syncOnce()  // sends dark (later), then reads light (earlier): keeps dark
        #expect(try b.values() == ["theme": .text("dark")])
        _ = try a.sync.syncOnce()
        #expect(try a.values() == ["theme": .text("dark")])
        // A write waiting to go up when another machine's change of the key is read (written
        // between a round's sending and its reading) is not replaced by it: it goes up next.
        try a.database.set("theme", to: .text("sepia"), in: Self.reader)
        #expect(try !a.database.takeRemote("theme", in: Self.reader.rawValue, value: .text("theirs"), sequence: 1_000))
        #expect(try a.values() == ["theme": .text("sepia")])
        _ = try a.sync.syncOnce()
        _ = try b.sync.syncOnce()
        #expect(try b.values() == ["theme": .text("sepia")])
        // A removal here that went up is not undone by an older set read after it.
        try a.database.set("font", to: .text("serif"), in: Self.reader)
        _ = try a.sync.syncOnce()
        #expect(try b.database.remove("theme", in: Self.reader))
        _ = try b.sync.syncOnce()
        #expect(try b.values() == ["font": .text("serif")])
        #expect(try Self.remoteValues(remote) == ["font": .text("serif")])
    }

    /// Watchers hear why keys changed: the first values from the remote as the initial sync,
    /// later ones as server changes; a write made here is not told back, and a value another
    /// machine's write replaced here is.
    @Test func changesFromTheRemoteAreNoticedWithTheirReason() throws {
        let remote = InMemoryRemote()
        let (machines, cleanUp) = try Self.machines(2, remote: remote)
        defer { cleanUp() }
        let (a, b) = (machines[0], machines[1])
        try a.database.set("page", to: .number(1), in: Self.reader)
        try a.database.set("theme", to: .text("dark"), in: Self.reader)
        _ = try a.sync.syncOnce()
        #expect(try a.database.notices(of: Self.reader.rawValue, after: 0).isEmpty)
        _ = try b.sync.syncOnce()
        let first = try b.database.notices(of: Self.reader.rawValue, after: 0)
        #expect(first.map(\.reason) == [.initialSync] && first.first.map { Set($0.keys) } == ["page", "theme"], "\(first)")
        try b.database.set("page", to: .number(2), in: Self.reader)
        _ = try b.sync.syncOnce()
        _ = try a.sync.syncOnce()
        let told = try a.database.notices(of: Self.reader.rawValue, after: 0)
        #expect(told.map(\.reason) == [.serverChange] && told.map(\.keys) == [["page"]], "\(told)")
        #expect(try b.database.notices(of: Self.reader.rawValue, after: first.last?.id ?? 0).isEmpty)
    }

    /// Linked to another remote (unlinked, then linked again: the model's account change),
    /// the store takes that remote's values over those it had in step with the first, and its
    /// watchers hear so (`account-change`); keys the new remote lacks go up to it; a write made
    /// here after the unlink still wins. Later changes are server changes again, and a second
    /// link of a store that never synced is an initial sync, not an account change.
    @Test(arguments: RemoteUnderTest.allCases)
    func linkingToAnotherRemoteTakesItsValuesAsAnAccountChange(_ kind: RemoteUnderTest) throws {
        let (first, second) = (try kind.make(), try kind.make())
        let (machines, cleanUp) = try Self.machines(1, remote: first)
        defer { cleanUp() }
        let here = machines[0].database
        for (key, value) in [("theme", KeyValue.text("dark")), ("page", .number(7)), ("font", .text("serif")), ("gone", .bool(true))] {
            try here.set(key, to: value, in: Self.reader)
        }
        _ = try machines[0].sync.syncOnce()
        #expect(try here.remove("gone", in: Self.reader))
        _ = try machines[0].sync.syncOnce()
        let (others, cleanUpOthers) = try Self.machines(1, remote: second)
        defer { cleanUpOthers() }
        let other = others[0]
        try other.database.set("theme", to: .text("light"), in: Self.reader)
        try other.database.set("volume", to: .number(3), in: Self.reader)
        _ = try other.sync.syncOnce()

        try here.forgetRemote()  // docfs remote unlink
        try here.set("font", to: .text("mono"), in: Self.reader)
        let mark = try here.lastNotice()
        let linked = KeyValueSync(store: StoreKeyValues(database: here), remote: second)
        let joined = try linked.syncOnce()
        let expected: [String: KeyValue] = ["theme": .text("light"), "volume": .number(3), "page": .number(7), "font": .text("mono")]
        #expect(try machines[0].values() == expected)
        #expect(joined.sent == 2, "the write after the unlink, then the page the new remote lacked")
        let told = try here.notices(of: Self.reader.rawValue, after: mark)
        #expect(told.map(\.reason) == [.accountChange] && told.first.map { Set($0.keys) } == ["theme", "volume"], "\(told)")
        #expect(try Self.remoteValues(second) == expected)
        _ = try other.sync.syncOnce()
        #expect(try other.values() == expected)
        #expect(try linked.syncOnce().sent == 0)

        try other.database.set("volume", to: .number(4), in: Self.reader)
        _ = try other.sync.syncOnce()
        let afterJoin = try here.lastNotice()
        _ = try linked.syncOnce()
        let later = try here.notices(of: Self.reader.rawValue, after: afterJoin)
        #expect(later.map(\.reason) == [.serverChange] && later.map(\.keys) == [["volume"]], "\(later)")

        // A store unlinked before it ever synced joins its next remote as an initial sync.
        let (fresh, cleanUpFresh) = try Self.machines(1, remote: second)
        defer { cleanUpFresh() }
        try fresh[0].database.forgetRemote()
        _ = try fresh[0].sync.syncOnce()
        #expect(try fresh[0].database.notices(of: Self.reader.rawValue, after: 0).map(\.reason) == [.initialSync])
        #expect(try fresh[0].values() == ["theme": .text("light"), "volume": .number(4), "page": .number(7), "font": .text("mono")])
    }

    /// A value on the remote that is not one docfs wrote, or a key no docfs would write, is
    /// skipped and said, never taken, and the changes after it still come down.
    @Test func aDamagedValueFromTheRemoteIsSkippedAndSaid() throws {
        let remote = InMemoryRemote()
        let (machines, cleanUp) = try Self.machines(1, remote: remote)
        defer { cleanUp() }
        try remote.setValue(Array("no kind here".utf8), forKey: "bad", in: Self.reader.rawValue)
        try remote.setValue(KeyValue.text("a key with a slash").portable, forKey: "a/b", in: Self.reader.rawValue)
        try remote.setValue(KeyValue.number(4).portable, forKey: "good", in: Self.reader.rawValue)
        let outcome = try machines[0].sync.syncOnce()
        #expect(outcome.problems.count == 2 && outcome.problems[0].contains("key bad") && outcome.problems[1].contains(#"key "a/b""#),
                "\(outcome.problems)")
        #expect(try machines[0].values() == ["good": .number(4)])
    }

    /// Random sets and removals of a few keys on three machines, with rounds in between in a
    /// random order, end with every machine holding what the remote holds.
    @Test(arguments: 0..<20)
    func randomWritesAndRoundsConverge(seed: UInt64) throws {
        let remote = InMemoryRemote()
        let (machines, cleanUp) = try Self.machines(3, remote: remote)
        defer { cleanUp() }
        var random = SplitMix(seed: seed)
        for _ in 0..<60 {
            let machine = machines[random.next(below: 3)]
            let key = "k\(random.next(below: 4))"
            switch random.next(below: 5) {
            case 0...1: try machine.database.set(key, to: .number(Double(random.next(below: 1000))), in: Self.reader)
            case 2: _ = try machine.database.remove(key, in: Self.reader)
            default: _ = try machine.sync.syncOnce()
            }
        }
        for _ in 0..<2 { for machine in machines { _ = try machine.sync.syncOnce() } }
        let expected = try Self.remoteValues(remote)
        for (index, machine) in machines.enumerated() { #expect(try machine.values() == expected, "seed \(seed), machine \(index)") }
    }
}
