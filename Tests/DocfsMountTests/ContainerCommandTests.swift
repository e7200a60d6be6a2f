import Foundation
import Testing

/// `docfs container` (issue 6 §1) on a served store, named by --store or by its mount point:
/// create, list (text and JSON), rename and delete, with the refusals exiting 1 and saying why.
@Suite(.needsRootAndFUSE) struct ContainerCommandTests {
    @Test func containersAreManagedFromTheCommandLine() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let docfs = "'\(MountFixture.binary)'"
        let store = "--store '\(fixture.store)'"
        let made = try shell("\(docfs) container create com.example.Notes --name Notes --public \(store) 2>&1")
        #expect(made.status == 0 && made.output == "created com.example.Notes (Notes, public)\n", "\(made.output)")
        #expect(try shell("\(docfs) container create org.example.pad --name 'Scratch pad' '\(fixture.mountPoint)'").status == 0)
        let listed = try shell("\(docfs) container list \(store)")
        #expect(listed.output == """
            docfs.default      default  Documents
            com.example.Notes  public   Notes
            org.example.pad    private  Scratch pad

            """, "\(listed.output)")
        #expect(FileManager.default.fileExists(atPath: fixture.store + "/containers/com.example.Notes/Documents"))

        #expect(try shell("\(docfs) container rename com.example.Notes 'My Notes' \(store)").status == 0)
        let json = try shell("\(docfs) container list --json \(store)")
        let records = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [[String: Any]])
        #expect(records.map { $0["name"] as? String } == ["Documents", "My Notes", "Scratch pad"])
        #expect(records.map { $0["isPublic"] as? Bool } == [false, true, false])

        // Refusals: exit 1 and one line that says what to do.
        try "a note\n".write(toFile: fixture.store + "/containers/com.example.Notes/Documents/n.txt", atomically: false, encoding: .utf8)
        for (command, says) in [("create Notes --name X", "reverse-DNS"), ("create com.example.X --name 'Scratch pad'", "named"),
                                ("create com.example.Y --name a/b", "'/'"), ("rename docfs.default Mine", "default"),
                                ("delete com.example.Notes", "--force"), ("delete com.example.None", "no container")] {
            let refused = try shell("\(docfs) container \(command) \(store) 2>&1")
            #expect(refused.status == 1 && refused.output.contains(says), "\(command): \(refused.output)")
        }
        #expect(try shell("\(docfs) container delete com.example.Notes --force \(store)").status == 0)
        #expect(try shell("\(docfs) container delete org.example.pad \(store)").status == 0)
        #expect(try shell("\(docfs) container list \(store)").output == "docfs.default  default  Documents\n")
        #expect(!FileManager.default.fileExists(atPath: fixture.store + "/containers/com.example.Notes"))
        let nowhere = try shell("\(docfs) container list --store /nonexistent/store 2>&1")
        #expect(nowhere.status == 1 && nowhere.output.contains("not a docfs store"))
    }
}
