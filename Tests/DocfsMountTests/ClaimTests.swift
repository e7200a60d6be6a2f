import CLinux
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// One arbiter (C1, issue 3 §2) seen through a real mount: requests from processes on the
/// mount, restores by the CLI through the control socket and the store watcher all take their
/// claims from the daemon's one coordinator. Contended claims wait and are granted, operations
/// that fail leave none behind, and an idle daemon holds none.
@Suite(.needsRootAndFUSE) struct ClaimTests {
    struct Status: Decodable {
        struct Claims: Decodable {
            var itemClaimed: Bool
            var claimedItems: Int
            var granted: Int
            var waited: Int
        }
        var item: UInt64
        var version: UInt64?
        var claims: Claims?
    }

    static func status(_ path: String) throws -> Status {
        let result = try shell("'\(MountFixture.binary)' status --json '\(path)'")
        guard result.status == 0 else { throw FixtureError("docfs status failed: \(result.output)") }
        return try JSONDecoder().decode(Status.self, from: Data(result.output.utf8))
    }

    @Test func everyActorTakesClaimsAndNoneIsLeftBehind() throws {
        let fixture = try MountFixture(settings: MountFixture.keepEveryVersion)
        defer { fixture.tearDown() }
        let document = fixture.path("doc")
        // Version 1 is large, so each restore holds its replace claim long enough to be contended.
        try write(String(repeating: "A", count: 2 << 20), to: document)
        try write("B\n", to: document)
        let id = try #require(itemID(document))
        mkdir(fixture.path("full"), 0o755)
        mkdir(fixture.path("full/inside"), 0o755)
        mkdir(fixture.path("empty"), 0o755)
        let before = try #require(try Self.status(document).claims)

        let restores = Atomic(0), failedRestores = Atomic(0), unexpectedErrors = Atomic(0)
        let actors = ActorThreads()
        // A writer through the mount: each open for writing claims the document.
        actors.start { round in
            if (try? write("writer \(round)\n", to: document)) == nil { unexpectedErrors.add(1, ordering: .relaxed) }
        }
        // Metadata changes through the mount.
        actors.start { round in
            let value = Array("\(round)".utf8)
            if docfs_setxattr(document, "user.round", value, value.count, 0) != 0 { unexpectedErrors.add(1, ordering: .relaxed) }
            if chmod(document, round % 2 == 0 ? 0o644 : 0o600) != 0 { unexpectedErrors.add(1, ordering: .relaxed) }
        }
        // Operations that fail under their claims: each must give its claims back.
        actors.start { _ in
            let failures = [
                errnoOf(rename(fixture.path("empty"), fixture.path("full"))) == ENOTEMPTY,
                errnoOf(rename(document, fixture.path("missing/doc"))) == ENOENT,
                errnoOf(open(document, O_WRONLY | O_CREAT | O_EXCL, 0o644)) == EEXIST,
                errnoOf(unlink(fixture.path("nothing-here"))) == ENOENT,
                errnoOf(rmdir(fixture.path("full"))) == ENOTEMPTY,
            ]
            if failures.contains(false) { unexpectedErrors.add(1, ordering: .relaxed) }
        }
        // A writer in the store behind the mount: the watcher claims what it finds.
        actors.start { round in
            try? "outside \(round)\n".write(toFile: fixture.documents + "/outside-\(round % 8)", atomically: round % 2 == 0,
                                            encoding: .utf8)
        }
        // The CLI restores version 1 through the daemon.
        actors.start { _ in
            let result = try? shell("'\(MountFixture.binary)' versions '\(document)' --restore 1")
            if result?.status == 0 { restores.add(1, ordering: .relaxed) } else { failedRestores.add(1, ordering: .relaxed) }
        }
        usleep(2_500_000)
        // No claim deadlocks or starves an actor: each finishes its round.
        #expect(actors.stop(within: 60))

        #expect(restores.load(ordering: .relaxed) > 0)
        #expect(failedRestores.load(ordering: .relaxed) == 0)
        #expect(unexpectedErrors.load(ordering: .relaxed) == 0)
        // Once the watcher has caught up, the daemon holds no claim at all.
        var after: Status.Claims?
        #expect(eventually(seconds: 10) {
            after = (try? Self.status(document))?.claims
            return after?.claimedItems == 0
        })
        let claims = try #require(after)
        #expect(!claims.itemClaimed)
        #expect(claims.granted > before.granted + 100)
        #expect(claims.waited > before.waited, "restores and writers contended for the document")
        // The document kept its identity through it all, and a claim on it is granted at once.
        #expect(itemID(document) == id)
        try write("after\n", to: document)
        #expect(try String(contentsOfFile: document, encoding: .utf8) == "after\n")
        let restored = try shell("'\(MountFixture.binary)' versions '\(document)' --restore 1")
        #expect(restored.status == 0, "\(restored.output)")
        #expect(FileManager.default.contents(atPath: document)?.count == 2 << 20)
    }

    @Test func statusShowsClaimsOnlyWhileADaemonServesTheStore() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let document = fixture.path("doc")
        try write("text\n", to: document)
        let text = try shell("'\(MountFixture.binary)' status '\(document)'")
        #expect(text.status == 0)
        #expect(text.output.contains("claims:    none on this item; the daemon holds 0"), "\(text.output)")
        fixture.stop()
        let offline = try Self.status(fixture.documents + "/doc")
        #expect(offline.claims == nil)
    }
}
