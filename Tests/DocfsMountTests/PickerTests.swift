import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The picker modes and references (issue 6 §3, §4; DESIGN §8): open gives an app a
/// reference that reads and writes the original under coordination, wherever it moves, and
/// fails with ENOENT once it is deleted; import gives a copy with a new id; move leaves a
/// reference behind; export copies out. References carry the external-document attributes
/// and are the index's external scope.
@Suite(.needsRootAndFUSE) struct PickerTests {
    func contents(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    /// The user's report.txt, a private container Notes with its app view mounted.
    func setUp(_ fixture: MountFixture) throws -> String {
        try write("report v1\n", to: fixture.path("report.txt"))
        #expect(try runDocfs("container create com.example.Notes --name Notes '\(fixture.mountPoint)'").status == 0)
        return try fixture.mountApp("com.example.Notes")
    }

    @Test func openGivesAReferenceThatReadsAndWritesTheOriginal() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        let id = try #require(itemID(fixture.path("report.txt")))
        let opened = try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))'")
        #expect(opened.status == 0 && opened.output.contains("as /Documents/report.txt (a reference to item \(id))"), "\(opened.output)")
        let reference = app + "/Documents/report.txt"
        #expect(contents(reference) == "report v1\n")
        #expect(itemID(reference) == id)
        #expect(try directoryInodes(app + "/Documents")["report.txt"] == inode(reference))  // the reference's own number
        #expect(inode(reference) != inode(fixture.path("report.txt")))
        // Picking it again gives the same reference.
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))'").output.contains("/Documents/report.txt"))
        #expect((try? FileManager.default.contentsOfDirectory(atPath: app + "/Documents")) == ["report.txt"])

        // Writing it writes the original: a new version of the same item.
        try write("report v2\n", to: reference)
        #expect(contents(fixture.path("report.txt")) == "report v2\n")
        #expect(attribute(fixture.path("report.txt"), "user.docfs.version") == "2")
        // An editor's save onto the reference (a new file renamed over it) saves the original.
        try write("report v3\n", to: app + "/Documents/.report.txt.tmp")
        #expect(rename(app + "/Documents/.report.txt.tmp", reference) == 0)
        #expect(contents(fixture.path("report.txt")) == "report v3\n")
        #expect(itemID(fixture.path("report.txt")) == id)
        #expect(attribute(fixture.path("report.txt"), "user.docfs.version") == "3")
        #expect(try runDocfs("versions '\(fixture.path("report.txt"))'").output.contains("report") == false)  // a table, no error
        #expect(contents(reference) == "report v3\n")
        #expect(FileManager.default.fileExists(atPath: fixture.store + "/containers/com.example.Notes/Documents/report.txt"))

        // Renamed and moved, the original is still what the reference reaches.
        #expect(mkdir(fixture.path("archive"), 0o755) == 0)
        #expect(rename(fixture.path("report.txt"), fixture.path("archive/q3.txt")) == 0)
        #expect(contents(reference) == "report v3\n")
        #expect(attribute(reference, "user.docfs.original") == "/archive/q3.txt")
        try write("report v4\n", to: reference)
        #expect(contents(fixture.path("archive/q3.txt")) == "report v4\n")

        // The app reaches the original by id, and by the user's bookmark, through its reference.
        #expect(ControlAreaTests.link(app + "/.docfs/by-id/\(id)") == "../../Documents/report.txt")
        let token = try #require(attribute(fixture.path("archive/q3.txt"), "user.docfs.bookmark"))
        #expect(contents(app + "/.docfs/by-id/" + token) == "report v4\n")
        // A reference cannot be hard-linked.
        #expect(errnoOf(link(reference, app + "/Documents/again.txt")) == EPERM)

        // Deleted, the original is gone for the reference: ENOENT, and status says why.
        #expect(unlink(fixture.path("archive/q3.txt")) == 0)
        #expect(errnoOf(open(reference, O_RDONLY)) == ENOENT)
        let status = try runDocfs("status '\(reference)'").output
        #expect(status.contains("reference: its original (item \(id)) was deleted"), "\(status)")
        #expect(fixture.log.contains("the original of this reference (item \(id)) was deleted"))
        #expect(unlink(reference) == 0)  // and it can be removed
        #expect(try runDocfs("query --scope external '*' --store '\(fixture.store)'").output == "")
    }

    @Test func referencesCarryTheExternalDocumentAttributes() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        #expect(try runDocfs("container create com.example.Shared --name Shared --public '\(fixture.mountPoint)'").status == 0)
        try write("theirs\n", to: fixture.path("Shared/plan.txt"))
        #expect(mkdir(app + "/Documents/picked", 0o755) == 0)
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))' --into Documents/picked").status == 0)
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("Shared/plan.txt"))' --into Data").status == 0)
        let reference = app + "/Documents/picked/report.txt"
        #expect(attribute(reference, "user.docfs.external") == "1")
        #expect(attribute(reference, "user.docfs.container") == "Documents")
        #expect(attribute(reference, "user.docfs.original") == "/report.txt")
        #expect(attribute(reference, "user.docfs.local-path") == "/Documents/picked/report.txt")
        let other = app + "/Data/plan.txt"
        #expect(attribute(other, "user.docfs.container") == "Shared")
        #expect(attribute(other, "user.docfs.original") == "/Shared/plan.txt")
        #expect(attribute(other, "user.docfs.local-path") == "/Data/plan.txt")
        let listed = try shell("getfattr -d -m - --absolute-names '\(reference)'").output
        for name in ["user.docfs.external", "user.docfs.container", "user.docfs.original", "user.docfs.local-path", "user.docfs.id"] {
            #expect(listed.contains(name + "="), "\(name): \(listed)")
        }
        #expect(!listed.contains("user.docfs.reference"))
        // Not on the original, nor on the app's own files; nobody sets them.
        try write("mine\n", to: app + "/Documents/own.txt")
        for path in [fixture.path("report.txt"), app + "/Documents/own.txt"] {
            #expect(attribute(path, "user.docfs.external") == nil)
            #expect(attribute(path, "user.docfs.original") == nil)
            #expect(attribute(path, "user.docfs.local-path") == nil)
        }
        for name in ["user.docfs.external", "user.docfs.original", "user.docfs.local-path", "user.docfs.container"] {
            #expect(errnoOf(docfs_setxattr(reference, name, "x", 1, 0)) == EPERM, "\(name)")
        }
        // User attributes set through the reference are the original's.
        #expect(docfs_setxattr(reference, "user.xdg.comment", "seen", 4, 0) == 0)
        #expect(attribute(fixture.path("report.txt"), "user.xdg.comment") == "seen")

        // The external scope of the index: each reference, where its original is now.
        let listedRefs = try runDocfs("query --scope external '*' --sort path --store '\(fixture.store)'").output
        #expect(listedRefs == """
            com.example.Notes /Data/plan.txt -> /Shared/plan.txt (in Shared)
            com.example.Notes /Documents/picked/report.txt -> /report.txt (in Documents)

            """, "\(listedRefs)\nLOG: \(fixture.log)")
        #expect(rename(fixture.path("report.txt"), fixture.path("final.txt")) == 0)
        let json = try runDocfs("query --scope external 'name == \"report.txt\"' --json --store '\(fixture.store)'").output
        let records = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "\(json)")
        #expect(records.count == 1)
        #expect(records.first?["isExternal"] as? Bool == true)
        #expect(records.first?["originalPath"] as? String == "/final.txt")
        #expect(records.first?["originalContainerName"] as? String == "Documents")
        #expect(records.first?["localPath"] as? String == "/Documents/picked/report.txt")
        #expect(records.first?["scope"] as? String == "external")
        // The index agrees with the store, references included, and a rebuild keeps them.
        #expect(try runDocfs("index check --store '\(fixture.store)'").status == 0)
        #expect(try runDocfs("index rebuild --store '\(fixture.store)'").status == 0)
        #expect(try runDocfs("query --scope external '*' --store '\(fixture.store)'").output.split(separator: "\n").count == 2)
        // Renaming a reference moves its record; removing it removes it.
        #expect(rename(reference, app + "/Documents/picked/r.txt") == 0)
        #expect(try runDocfs("query --scope external 'name == \"r.txt\"' --store '\(fixture.store)'").output
                == "com.example.Notes /Documents/picked/r.txt -> /final.txt (in Documents)\n")
        #expect(try runDocfs("index check --store '\(fixture.store)'").status == 0)
    }

    @Test func importGivesTheAppItsOwnCopy() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        #expect(docfs_setxattr(fixture.path("report.txt"), "user.xdg.comment", "draft", 5, 0) == 0)
        let id = try #require(itemID(fixture.path("report.txt")))
        let imported = try runDocfs("pick --app com.example.Notes --import '\(fixture.path("report.txt"))'")
        #expect(imported.status == 0, "\(imported.output)")
        let copy = app + "/Documents/report.txt"
        #expect(contents(copy) == "report v1\n")
        let copyID = try #require(itemID(copy))
        #expect(copyID != id)
        #expect(attribute(copy, "user.xdg.comment") == "draft")
        #expect(attribute(copy, "user.docfs.version") == "1")
        #expect(attribute(copy, "user.docfs.external") == nil)
        #expect(imported.output.contains("item \(copyID), a copy"))
        // The copy is the app's: changing it leaves the original alone.
        try write("the app's own\n", to: copy)
        #expect(contents(fixture.path("report.txt")) == "report v1\n")
        // Imported again: another copy, under a free name.
        #expect(try runDocfs("pick --app com.example.Notes --import '\(fixture.path("report.txt"))'").output.contains("/Documents/report 2.txt"))
        #expect(contents(app + "/Documents/report 2.txt") == "report v1\n")
        let json = try runDocfs("query 'container == \"com.example.Notes\"' --json --store '\(fixture.store)'").output
        #expect(json.contains("\"id\" : \(copyID)"), "\(json)")
    }

    @Test func moveLeavesAReferenceAndExportCopiesOut() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        try write("the app's notes\n", to: app + "/Documents/notes.txt")
        let id = try #require(itemID(app + "/Documents/notes.txt"))
        #expect(mkdir(fixture.path("From apps"), 0o755) == 0)
        let moved = try runDocfs("move '\(app)/Documents/notes.txt' --to '\(fixture.path("From apps"))'")
        #expect(moved.status == 0 && moved.output.contains("to /From apps/notes.txt"), "\(moved.output)")
        // The document is the user's now, same item; the app reaches it through a reference.
        #expect(contents(fixture.path("From apps/notes.txt")) == "the app's notes\n")
        #expect(itemID(fixture.path("From apps/notes.txt")) == id)
        #expect(attribute(app + "/Documents/notes.txt", "user.docfs.external") == "1")
        #expect(attribute(app + "/Documents/notes.txt", "user.docfs.original") == "/From apps/notes.txt")
        try write("edited by the app\n", to: app + "/Documents/notes.txt")
        #expect(contents(fixture.path("From apps/notes.txt")) == "edited by the app\n")
        #expect(try runDocfs("query --scope external '*' --store '\(fixture.store)'").output
                == "com.example.Notes /Documents/notes.txt -> /From apps/notes.txt (in Documents)\n")
        #expect(try runDocfs("index check --store '\(fixture.store)'").status == 0)
        // Only an app's document can be moved out, and only into the user view.
        let own = try runDocfs("move '\(fixture.path("report.txt"))' --to '\(fixture.path("From apps"))'")
        #expect(own.status == 1 && own.output.contains("among your own documents already"), "\(own.output)")
        try write("data\n", to: app + "/Data/d.txt")
        let inward = try runDocfs("move '\(app)/Data/d.txt' --to '\(app)/Documents'")
        #expect(inward.status == 1 && inward.output.contains("not in the user view"), "\(inward.output)")

        // Export: a copy goes out, the source stays.
        let exported = try runDocfs("export '\(app)/Data/d.txt' --to '\(fixture.mountPoint)'")
        #expect(exported.status == 0 && exported.output.contains("to /d.txt"), "\(exported.output)")
        #expect(contents(fixture.path("d.txt")) == "data\n" && contents(app + "/Data/d.txt") == "data\n")
        #expect(itemID(fixture.path("d.txt")) != itemID(app + "/Data/d.txt"))
        let outside = fixture.root + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        #expect(try runDocfs("export '\(app)/Data/d.txt' --to '\(outside)'").output.contains("a plain copy"))
        #expect(contents(outside + "/d.txt") == "data\n")
    }

    @Test func aMoveNeverLeavesTheNameEmpty() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        let count = 20
        for n in 0..<count { try write("document \(n)\n", to: app + "/Documents/d\(n).txt") }
        // A reader opens every old name over and over while the documents move out: each
        // open finds the document or the reference that took its place, never nothing.
        let stop = ManagedAtomicFlag()
        let missing = ManagedCounter()
        let reader = Thread {
            while !stop.isSet {
                for n in 0..<count {
                    let fd = open(app + "/Documents/d\(n).txt", O_RDONLY)
                    if fd < 0 { missing.increment() } else { close(fd) }
                }
            }
        }
        reader.start()
        for n in 0..<count {
            #expect(try runDocfs("move '\(app)/Documents/d\(n).txt' --to '\(fixture.mountPoint)'").status == 0)
        }
        stop.set()
        while !reader.isFinished { usleep(1000) }
        #expect(missing.value == 0)
        for n in 0..<count {
            #expect(contents(app + "/Documents/d\(n).txt") == "document \(n)\n")
            #expect(contents(fixture.path("d\(n).txt")) == "document \(n)\n")
        }
    }

    /// vim (backupcopy=no) and emacs save by renaming the file to a backup name and writing it
    /// anew: through a reference that saves the original, the reference stays, and a backup
    /// that is kept is the app's own copy of what the original held before.
    @Test func vimSavesThroughAReferenceIntoTheOriginal() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)  // no thinning: each save kept
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        let original = fixture.path("report.txt")
        let id = try #require(itemID(original))
        #expect(try runDocfs("pick --app com.example.Notes --open '\(original)'").status == 0)
        let reference = app + "/Documents/report.txt"
        let vim = "vim -u NONE -N -n -es -c 'set backupskip= backupcopy=no"

        var result = try shell(vim + " writebackup nobackup' -c '%s/v1/v2/' -c 'wq' '\(reference)'")
        #expect(result.status == 0, "\(result.output)")
        #expect(contents(original) == "report v2\n")
        #expect(itemID(original) == id)
        #expect(attribute(original, "user.docfs.version") == "2")
        #expect(try versionsJSON(fixture, original).map(\.version) == [2, 1])
        #expect(attribute(reference, "user.docfs.external") == "1")
        #expect(itemID(reference) == id)
        #expect((try? FileManager.default.contentsOfDirectory(atPath: app + "/Documents")) == ["report.txt"])
        #expect((try? FileManager.default.contentsOfDirectory(atPath: fixture.mountPoint))?.filter { !$0.hasPrefix(".") } == ["report.txt"])

        result = try shell(vim + " backup' -c '%s/v2/v3/' -c 'wq' '\(reference)'")
        #expect(result.status == 0, "\(result.output)")
        #expect(contents(original) == "report v3\n")
        #expect(itemID(original) == id)
        #expect(contents(reference) == "report v3\n")
        let backup = app + "/Documents/report.txt~"
        #expect(contents(backup) == "report v2\n")
        let backupID = try #require(itemID(backup))
        #expect(backupID != id)
        #expect(try directoryInodes(app + "/Documents")["report.txt~"] == inode(backup))
        #expect(attribute(backup, "user.docfs.external") == nil)
        let external = try runDocfs("query --scope external '*' --store '\(fixture.store)'").output
        #expect(external.split(separator: "\n").count == 1 && external.contains("report.txt"), "\(external)")
        // The backup is a document of its own: changing it leaves the original alone.
        try write("scribbled\n", to: backup)
        #expect(contents(original) == "report v3\n")

        // A reference renamed over another takes its name; no original's content changes.
        try write("other\n", to: fixture.path("other.txt"))
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("other.txt"))' --into Data").status == 0)
        #expect(rename(app + "/Data/other.txt", reference) == 0)
        #expect(contents(reference) == "other\n")
        #expect(itemID(reference) == itemID(fixture.path("other.txt")))
        #expect(contents(original) == "report v3\n" && itemID(original) == id)
        #expect(contents(fixture.path("other.txt")) == "other\n")
        let references = try runDocfs("query --scope external '*' --store '\(fixture.store)'").output
        #expect(references.split(separator: "\n") == ["com.example.Notes /Documents/report.txt -> /other.txt (in Documents)"], "\(references)")
        let check = try runDocfs("index check --store '\(fixture.store)'")
        #expect(check.status == 0, "\(check.output)")
    }

    /// A reference's file written into in the store behind docfs's back is a document of the
    /// app's own from then on (an id of its own, no reference); the original is untouched.
    @Test func aReferenceWrittenIntoInTheStoreBecomesADocumentOfItsOwn() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        let id = try #require(itemID(fixture.path("report.txt")))
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))'").status == 0)
        let stub = fixture.store + "/containers/com.example.Notes/Documents/report.txt"
        #expect(try shell("echo scribbled >> '\(stub)'").status == 0)
        #expect(eventually(seconds: 20) { itemID(app + "/Documents/report.txt").map { $0 != id } ?? false })
        #expect(eventually(seconds: 20) { contents(app + "/Documents/report.txt") == "scribbled\n" })
        #expect(attribute(app + "/Documents/report.txt", "user.docfs.external") == nil)
        #expect(attribute(app + "/Documents/report.txt", "user.docfs.reference") == nil)
        #expect(contents(fixture.path("report.txt")) == "report v1\n")
        #expect(itemID(fixture.path("report.txt")) == id)
        #expect(try runDocfs("query --scope external '*' --store '\(fixture.store)'").output == "")

        // A change behind docfs's back to a folder holding a reference leaves its record be.
        #expect(mkdir(app + "/Documents/picked", 0o755) == 0)
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))' --into Documents/picked").status == 0)
        #expect(chmod(fixture.store + "/containers/com.example.Notes/Documents/picked", 0o700) == 0)
        var st = stat()
        #expect(eventually(seconds: 20) { stat(app + "/Documents/picked", &st) == 0 && st.st_mode & 0o777 == 0o700 })
        usleep(200_000)  // the watcher's batch is handled whole
        let references = try runDocfs("query --scope external '*' --store '\(fixture.store)'").output
        #expect(references == "com.example.Notes /Documents/picked/report.txt -> /report.txt (in Documents)\n", "\(references)")
    }

    @Test func editsThroughAReferenceNeverTearAReadInTheUserView() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let app = try setUp(fixture)
        func version(_ n: Int) -> String { String(repeating: "version \(n) of the report, a line of it\n", count: 2000) }
        try write(version(0), to: fixture.path("report.txt"))
        #expect(try runDocfs("pick --app com.example.Notes --open '\(fixture.path("report.txt"))'").status == 0)
        let stop = ManagedAtomicFlag()
        let torn = ManagedCounter()
        let reads = ManagedCounter()
        // The user view reads the whole document over and over…
        let reader = Thread {
            while !stop.isSet {
                guard let text = try? String(contentsOfFile: fixture.path("report.txt"), encoding: .utf8) else { continue }
                reads.increment()
                // One whole version: 2000 identical lines, each ended.
                let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
                if lines.count != 2001 || lines.last != "" || Set(lines.dropLast()).count != 1 { torn.increment() }
            }
        }
        reader.start()
        // …while the app saves new versions through its reference, as editors do.
        let saves = 60
        for n in 1...saves {
            let temporary = app + "/Documents/.report.txt.\(n)"
            try write(version(n), to: temporary)
            #expect(rename(temporary, app + "/Documents/report.txt") == 0)
        }
        stop.set()
        while !reader.isFinished { usleep(1000) }
        #expect(torn.value == 0)
        #expect(reads.value > 0)
        #expect(contents(fixture.path("report.txt")) == version(saves))
        // Version 1 was made by setUp, 2 by the rewrite above, then one per save.
        #expect(attribute(fixture.path("report.txt"), "user.docfs.version") == String(saves + 2))
    }

    @Test func pickingWithoutADaemonAndRefusals() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        _ = try setUp(fixture)
        #expect(mkdir(fixture.path("folder"), 0o755) == 0)
        for (arguments, says) in [
            ("pick --app com.example.Notes --open '\(fixture.path("folder"))'", "only documents"),
            ("pick --app com.example.Missing --open '\(fixture.path("report.txt"))'", "no container com.example.Missing"),
            ("pick --app com.example.Notes --open --import '\(fixture.path("report.txt"))'", "one of --open and --import"),
            ("pick --app com.example.Notes --open '\(fixture.path("report.txt"))' --into Elsewhere", "starting with Documents or Data"),
            ("pick --app com.example.Notes --open '\(fixture.path("report.txt"))' --into Documents/none", "does not exist"),
        ] {
            let refused = try runDocfs(arguments)
            #expect(refused.status != 0 && refused.output.contains(says), "\(arguments): \(refused.output)")
        }
        // With no daemon, the command works on the store itself, and the mount finds it after.
        for point in fixture.appMountPoints { _ = umount2(point, 0) }
        fixture.stop()
        let stored = fixture.documents + "/report.txt"
        let opened = try runDocfs("pick --app com.example.Notes --open '\(stored)'")
        #expect(opened.status == 0, "\(opened.output)")
        try fixture.start()
        let app = try fixture.mountApp("com.example.Notes")
        #expect(contents(app + "/Documents/report.txt") == "report v1\n")
        #expect(attribute(app + "/Documents/report.txt", "user.docfs.external") == "1")
    }
}

/// A flag threads set and read.
final class ManagedAtomicFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}

/// A counter threads add to.
final class ManagedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var value: Int { lock.withLock { count } }
    func increment() { lock.withLock { count += 1 } }
}
