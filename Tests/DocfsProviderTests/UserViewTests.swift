@testable import DocfsProvider
import DocfsCore
import Foundation
import Testing

/// The user view's paths (issue 6 §1, DESIGN §2): the root is the default container's
/// documents, public containers are folders named by display name, and the user's own names
/// win a collision (the container then shows as `Name (id)`, or not at all).
@Suite struct UserViewTests {
    @Test func placesAndPathsCorrespond() throws {
        let store = try LocalStore(path: "/tmp/docfs-tests/userview-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(atPath: store.layout.root) }
        let registry = ContainerRegistry(layout: store.layout)
        let notes = try ContainerID("com.example.Notes")
        let secret = try ContainerID("com.example.Secret")
        try registry.create(notes, name: "Notes", isPublic: true)
        try registry.create(secret, name: "Secret", isPublic: false)
        let view = UserView(layout: store.layout, catalog: ContainerCatalog(registry: registry))

        #expect(view.containerFolders().map(\.name) == ["Notes"])
        #expect(view.path(of: StorePlace(container: .userDefault, scope: .documents, path: "")) == "/")
        #expect(view.path(of: StorePlace(container: .userDefault, scope: .documents, path: "/a/b")) == "/a/b")
        #expect(view.path(of: StorePlace(container: notes, scope: .documents, path: "/n.txt")) == "/Notes/n.txt")
        #expect(view.path(of: StorePlace(container: notes, scope: .data, path: "/n.txt")) == nil)
        #expect(view.path(of: StorePlace(container: secret, scope: .documents, path: "/s.txt")) == nil)
        #expect(view.place(of: "/Notes/n.txt") == StorePlace(container: notes, scope: .documents, path: "/n.txt"))
        #expect(view.place(of: "Notes") == StorePlace(container: notes, scope: .documents, path: ""))
        #expect(view.place(of: "/Secret/s.txt") == StorePlace(container: .userDefault, scope: .documents, path: "/Secret/s.txt"))
        #expect(view.place(of: "") == StorePlace(container: .userDefault, scope: .documents, path: ""))

        // The user's own "Notes" wins; the container shows qualified by its id.
        let documents = store.layout.documentsDirectory(.userDefault)
        try FileManager.default.createDirectory(atPath: documents + "/Notes", withIntermediateDirectories: false)
        #expect(view.containerFolders().map(\.name) == ["Notes (com.example.Notes)"])
        #expect(view.place(of: "/Notes/n.txt") == StorePlace(container: .userDefault, scope: .documents, path: "/Notes/n.txt"))
        #expect(view.place(of: "/Notes (com.example.Notes)/n.txt") == StorePlace(container: notes, scope: .documents, path: "/n.txt"))
        #expect(view.path(of: StorePlace(container: notes, scope: .documents, path: "/n.txt")) == "/Notes (com.example.Notes)/n.txt")
        // Both names taken: the container is not shown until one is freed.
        try FileManager.default.createDirectory(atPath: documents + "/Notes (com.example.Notes)", withIntermediateDirectories: false)
        #expect(view.containerFolders().isEmpty)
        #expect(view.path(of: StorePlace(container: notes, scope: .documents, path: "/n.txt")) == nil)
    }
}
