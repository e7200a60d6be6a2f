import DocfsChunks
import DocfsSync
import Testing

/// `docfs remote check`'s comparison (DESIGN §9.0 "Checked", issue 49 §4): machines in step
/// have no difference with the remote; each kind of difference (an item here only, an item
/// there only, another place, content, mode, attributes, version number) is said with the
/// item and both sides' values, on both remotes.
@Suite struct RemoteCheckTests {
    @Test(arguments: RemoteUnderTest.allCases)
    func machinesInStepAgreeAndEachDifferenceIsSaid(_ kind: RemoteUnderTest) throws {
        let remote = try kind.make()
        let (a, b) = (MemoryStore(machine: "a"), MemoryStore(machine: "b"))
        let (upA, upB) = (SyncEngine(store: a, remote: remote), SyncEngine(store: b, remote: remote))
        let folder = a.create("docs", kind: .folder)
        let file = a.create("x.txt", in: folder, text: "one")
        let other = a.create("y.txt", text: "why")
        try upA.syncOnce()
        try upB.syncOnce()
        #expect(try RemoteCheck.run(store: a, remote: remote) == [])
        #expect(try RemoteCheck.run(store: b, remote: remote) == [])

        // Changes on b that have not gone up: each is a difference, with both sides' values.
        b.write(file, "two")
        b.rename(folder, to: "papers")
        b.setAttribute(other, "user.xdg.tags", "work")
        let extra = b.create("new.txt", text: "new")
        var compared: [Int] = []
        let found = try RemoteCheck.run(store: b, remote: remote) { compared.append($0) }
        let byItem = Dictionary(grouping: found, by: \.item).mapValues { Set($0.map(\.field)) }
        #expect(byItem[file]?.contains(.content) == true && byItem[folder]?.contains(.place) == true, "\(found)")
        #expect(byItem[other] == [.attributes] && byItem[extra] == [.missingOnRemote], "\(found)")
        #expect(found.first { $0.item == folder && $0.field == .place }.map { $0.here?.contains("\"papers\"") == true && $0.remote?.contains("\"docs\"") == true } == true)
        #expect(found.first { $0.item == extra }?.path == "docfs.default/new.txt")
        #expect(compared.last == 4, "\(compared)")

        // Gone up and come down: in step again.
        try upB.syncOnce()
        try upA.syncOnce()
        #expect(try RemoteCheck.run(store: a, remote: remote) == [])
        #expect(try RemoteCheck.run(store: b, remote: remote) == [])

        // An item the remote has and a store does not (its deletion not gone up) is missing here.
        a.delete(extra)
        #expect(try RemoteCheck.run(store: a, remote: remote).map(\.field) == [.missingHere])
    }

    /// The comparison itself, field by field, with no store: what machines in step agree on.
    @Test func eachFieldIsComparedAndDeletedIsAbsent() {
        let digest = Array("x".utf8).withUnsafeBytes { ChunkDigest(of: $0) }
        let version = RemoteVersion(item: 9, container: "docfs.default", name: "x", kind: .file, base: 0, manifest: [digest],
                                    size: 1, modified: 100, author: RemoteAuthor(machine: "a", user: "u"))
        var numbered = version
        numbered.number = 3
        let local = LocalItem(numbered)
        #expect(RemoteCheck.differences(local: local, number: 3, remote: numbered) == [])
        #expect(RemoteCheck.differences(local: local, number: 2, remote: numbered).map(\.field) == [.number])
        var changed = local
        (changed.mode, changed.modified, changed.kind) = (0o600, 101, .symlink)
        #expect(RemoteCheck.differences(local: changed, number: nil, remote: numbered).map(\.field) == [.kind, .mode, .modified])
        var deleted = numbered
        deleted.deleted = true
        #expect(RemoteCheck.differences(local: nil, number: nil, remote: deleted) == [])
        #expect(RemoteCheck.differences(local: local, number: 3, remote: deleted).map(\.field) == [.missingOnRemote])
    }
}
