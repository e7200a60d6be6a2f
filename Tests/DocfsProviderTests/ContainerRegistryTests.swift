@testable import DocfsProvider
import DocfsCore
import Foundation
import Testing

/// Containers in the store (issue 6 §1): created with a reverse-DNS id and a display name,
/// listed, renamed, deleted (a non-empty one only when forced); bad ids and names refused with
/// a reason; the default container never changes.
@Suite struct ContainerRegistryTests {
    private func store() throws -> LocalStore {
        try LocalStore(path: "/tmp/docfs-tests/containers-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    }

    private func message(_ body: () throws(DocfsError) -> Void) -> String? {
        do throws(DocfsError) {
            try body()
            return nil
        } catch {
            return error.message
        }
    }

    @Test func containersAreCreatedListedRenamedAndDeleted() throws {
        let store = try store()
        defer { try? FileManager.default.removeItem(atPath: store.layout.root) }
        let registry = ContainerRegistry(layout: store.layout)
        #expect(try registry.list().map(\.id) == ["docfs.default"])

        let notes = try ContainerID("com.example.Notes")
        let made = try registry.create(notes, name: "Notes", isPublic: true)
        #expect(made.name == "Notes" && made.isPublic && made.created > 0)
        try registry.create(ContainerID("org.example.pad"), name: "Pad", isPublic: false)
        var isFolder: ObjCBool = false
        for folder in ["", "/Documents", "/Data"] {
            #expect(FileManager.default.fileExists(atPath: store.layout.containerDirectory(notes) + folder, isDirectory: &isFolder) && isFolder.boolValue)
        }
        let listed = try registry.list()
        #expect(listed.map(\.id) == ["docfs.default", "com.example.Notes", "org.example.pad"])
        #expect(listed.map(\.name) == ["Documents", "Notes", "Pad"])
        #expect(listed.map(\.isPublic) == [false, true, false])

        // Renamed: the new name is kept (the record is read again from the store).
        try registry.rename(notes, to: "My Notes")
        #expect(try ContainerRegistry(layout: store.layout).record(of: notes)?.name == "My Notes")

        // A container holding documents is deleted only when forced.
        try Data("x".utf8).write(to: URL(fileURLWithPath: store.layout.documentsDirectory(notes) + "/note.txt"))
        #expect(message { () throws(DocfsError) in try registry.delete(notes, force: false) }?.contains("--force") == true)
        #expect(try registry.record(of: notes) != nil)
        try registry.delete(notes, force: true)
        #expect(try registry.record(of: notes) == nil)
        #expect(!FileManager.default.fileExists(atPath: store.layout.containerDirectory(notes)))
        // An empty one without.
        try registry.delete(ContainerID("org.example.pad"), force: false)
        #expect(try registry.list().map(\.id) == ["docfs.default"])
    }

    @Test func badIdsNamesAndChangesAreRefusedWithAReason() throws {
        let store = try store()
        defer { try? FileManager.default.removeItem(atPath: store.layout.root) }
        let registry = ContainerRegistry(layout: store.layout)
        for bad in ["Notes", "com..example", ".com.example", "com.example.", "com.-example", "com.exa_mple", "com.example/x", ""] {
            let why = message { () throws(DocfsError) in
                try registry.create(try ContainerID(bad), name: "Anything", isPublic: true)
            }
            #expect(why != nil, "'\(bad)' was taken")
        }
        let id = try ContainerID("com.example.Notes")
        for (bad, reason) in [("", "empty"), ("a/b", "'/'"), (".hidden", "'.'"), (".docfs", "'.'"), (" Notes", "space"),
                              ("Notes\n", "control"), (String(repeating: "n", count: 256), "255")] {
            let why = message { () throws(DocfsError) in try registry.create(id, name: bad, isPublic: true) }
            #expect(why?.contains(reason) == true, "'\(bad)': \(why ?? "taken")")
        }
        #expect(try registry.list().count == 1, "nothing was made by refused requests")

        try registry.create(id, name: "Notes", isPublic: true)
        #expect(message { () throws(DocfsError) in try registry.create(id, name: "Other", isPublic: true) }?.contains("exists") == true)
        let other = try ContainerID("com.example.Other")
        #expect(message { () throws(DocfsError) in try registry.create(other, name: "Notes", isPublic: true) }?.contains("named") == true)
        #expect(message { () throws(DocfsError) in try registry.create(other, name: "Documents", isPublic: true) }?.contains("named") == true)
        #expect(message { () throws(DocfsError) in try registry.rename(.userDefault, to: "Mine") }?.contains("default") == true)
        #expect(message { () throws(DocfsError) in try registry.delete(.userDefault, force: true) }?.contains("default") == true)
        #expect(message { () throws(DocfsError) in try registry.rename(other, to: "X") }?.contains("no container") == true)
        #expect(message { () throws(DocfsError) in try registry.delete(other, force: false) }?.contains("no container") == true)

        // A damaged record is reported, with what to do.
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: store.layout.containerDirectory(id) + "/container.json"))
        #expect(message { () throws(DocfsError) in _ = try registry.list() }?.contains("damaged") == true)
    }

    @Test func concurrentCreatesOfOneNameLeaveOneContainer() async throws {
        let store = try store()
        defer { try? FileManager.default.removeItem(atPath: store.layout.root) }
        let layout = store.layout
        let made = await withTaskGroup(of: Bool.self) { group in
            for n in 0..<8 {
                group.addTask {
                    (try? ContainerRegistry(layout: layout).create(ContainerID("com.example.c\(n)"), name: "Same", isPublic: true)) != nil
                }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(made == 1)
        #expect(try ContainerRegistry(layout: layout).list().filter { $0.name == "Same" }.count == 1)
    }
}
