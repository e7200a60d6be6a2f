import DocfsSync
import Testing

/// The races the remote's whole tree settles (`TreeProblem`, `SyncEngine+Tree`, issue 49 §2):
/// a folder removed on one machine while another puts a file in it comes back with that file,
/// whichever commits first; two folders moved into each other end with one inside the other
/// on every machine, never a cycle; nothing is lost, and every machine has one tree.
@Suite struct SyncTreeTests {
    typealias Machines = SyncEngineTests.Machines

    /// Every machine's tree is machine 0's, no item lost its folder, nothing waits.
    static func expectOneTree(_ machines: Machines, sourceLocation: SourceLocation = #_sourceLocation) {
        for store in machines.stores {
            #expect(store.tree() == machines[0].tree(), "\(store.author.machine): \(store.tree()) \(machines[0].tree())",
                    sourceLocation: sourceLocation)
            #expect(store.orphans().isEmpty && store.pending == 0 && store.parkedCount == 0, "\(store.author.machine)",
                    sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: RemoteUnderTest.allCases, [true, false])
    func aFolderRemovedWhileAnotherMachineFillsItComesBackWithWhatWasMade(_ kind: RemoteUnderTest, removalFirst: Bool) throws {
        let machines = try Machines(kind, count: 2)
        let (a, b) = (machines[0], machines[1])
        let folder = a.create("F", text: nil, kind: .folder)
        let old = a.create("old.txt", in: folder, text: "old")
        try machines.settle()
        a.deleteTree(folder)
        let made = b.create("new.txt", in: folder, text: "made while it was removed")
        if removalFirst {
            try machines.sync(0)
            try machines.sync(1)
        } else {
            try machines.sync(1)
            try machines.sync(0)
        }
        try machines.settle()
        // The folder is back everywhere with the file made in it; what was removed with it stays removed.
        for store in machines.stores {
            #expect(store.item(folder)?.kind == .folder && store.text(of: made) == "made while it was removed",
                    "\(store.author.machine): \(store.tree())")
            #expect(store.item(old) == nil, "\(store.author.machine)")
        }
        Self.expectOneTree(machines)
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func foldersMovedIntoEachOtherEndWithoutACycle(_ kind: RemoteUnderTest) throws {
        let machines = try Machines(kind, count: 2)
        let (a, b) = (machines[0], machines[1])
        let first = a.create("A", text: nil, kind: .folder), second = a.create("B", text: nil, kind: .folder)
        let inFirst = a.create("a.txt", in: first, text: "in A"), inSecond = a.create("b.txt", in: second, text: "in B")
        try machines.settle()
        a.rename(first, to: "A", in: second)
        b.rename(second, to: "B", in: first)
        try machines.sync(0)
        try machines.sync(1)
        try machines.settle()
        // The first move committed stands (A in B); B keeps the remote's place.
        for store in machines.stores {
            #expect(store.item(first)?.parent == second && store.item(second)?.parent == 0, "\(store.author.machine): \(store.tree())")
            #expect(store.text(of: inFirst) == "in A" && store.text(of: inSecond) == "in B")
        }
        Self.expectOneTree(machines)
    }

    @Test(arguments: RemoteUnderTest.allCases)
    func aFileMovedIntoAFolderRemovedElsewhereBringsItBack(_ kind: RemoteUnderTest) throws {
        let machines = try Machines(kind, count: 2)
        let (a, b) = (machines[0], machines[1])
        let outer = a.create("Outer", text: nil, kind: .folder)
        let inner = a.create("Inner", in: outer, text: nil, kind: .folder)
        let file = a.create("f.txt", text: "moved")
        try machines.settle()
        a.deleteTree(outer)
        try machines.sync(0)
        // b moves the file into the inner folder before it hears of the removal.
        b.rename(file, to: "f.txt", in: inner)
        try machines.settle()
        for store in machines.stores {
            #expect(store.item(file)?.parent == inner && store.item(inner)?.parent == outer && store.text(of: file) == "moved",
                    "\(store.author.machine): \(store.tree())")
        }
        Self.expectOneTree(machines)
    }
}
