import CLinux
import DocfsThumbnails
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Thumbnails through a real mount (issue 5 §2): images and PDFs written through the mount get
/// `user.docfs.thumbnail` within a bounded time, fitting 1024×1024 and 64 KiB, and the index
/// knows; damaged and hostile files get none and never stall the ones after them; a user's own
/// PNG is checked, kept until the content changes, and refused when it is not a usable PNG.
@Suite(.needsRootAndFUSE) struct ThumbnailTests {
    static let images: String = {
        let directory = "/tmp/docfs-tests/mount-images-\(getpid())"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../scripts/make-test-images").standardized.path
        _ = try? shell("bash '\(script)' '\(directory)'")
        return directory
    }()

    /// The thumbnail attribute of `path` once it is there (nil after `seconds`).
    static func thumbnail(_ path: String, within seconds: Double = 20) -> [UInt8]? {
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 65536)
        repeat {
            let n = docfs_getxattr(path, "user.docfs.thumbnail", &buffer, buffer.count)
            if n > 0 { return Array(buffer[0..<n]) }
            usleep(20_000)
        } while Date() < deadline
        return nil
    }

    /// The process id of the thumbnail worker of `fixture`'s daemon (started by a first thumbnail).
    static func worker(of fixture: MountFixture) throws -> pid_t {
        let daemon = try #require(fixture.daemon?.processIdentifier)
        let found = try shell("pgrep -P \(daemon) -f thumbnail-worker").output
        return try #require(pid_t(found.split(separator: "\n").first ?? ""), "no worker: \(found)")
    }

    static func copy(_ name: String, to path: String) throws {
        let status = try shell("cp '\(images)/\(name)' '\(path)'").status
        #expect(status == 0)
    }

    @Test func imagesAndPDFsGetThumbnailsThatFit() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        for name in ["photo.jpg", "picture.png", "document.pdf"] {
            try Self.copy(name, to: fixture.path(name))
        }
        for name in ["photo.jpg", "picture.png", "document.pdf"] {
            let png = try #require(Self.thumbnail(fixture.path(name)), "\(name) has no thumbnail")
            let size = try #require(PNGChunks.size(of: png), "\(name)'s thumbnail is not a PNG")
            #expect(size.width <= 1024 && size.height <= 1024)
            #expect(png.count <= 65536)
            // Listed by listxattr once it is there, so getfattr -d shows it.
            let listed = try shell("getfattr -d -m - --absolute-names '\(fixture.path(name))'").output
            #expect(listed.contains("user.docfs.thumbnail="), "\(listed)")
        }
        // The index knows which items have one.
        let query = try shell("'\(MountFixture.binary)' query 'hasThumbnail == true' --sort name '\(fixture.mountPoint)'")
        #expect(query.output.split(separator: "\n").filter { !$0.isEmpty }.map { String($0.split(separator: "/").last ?? "") }
                == ["document.pdf", "photo.jpg", "picture.png"], "\(query.output)")
        // Not an image: no thumbnail, no attribute listed, and nothing in the log about it.
        try Self.copy("not-an-image.jpg", to: fixture.path("text.jpg"))
        #expect(Self.thumbnail(fixture.path("text.jpg"), within: 1) == nil)
        #expect(errnoOf(docfs_getxattr(fixture.path("text.jpg"), "user.docfs.thumbnail", nil, 0)) == ENODATA)
        #expect(!fixture.log.contains("text.jpg"))
    }

    /// Writes `count` copies of `data` as img0000.jpg… in `folder`; the seconds it took.
    static func burst(_ data: Data, count: Int, in folder: String) throws -> Double {
        let start = Date()
        for i in 0..<count {
            try data.write(to: URL(fileURLWithPath: folder + "/" + String(format: "img%04d.jpg", i)))
        }
        return Date().timeIntervalSince(start)
    }

    @Test func aBurstOfImageWritesNeverWaitsForThumbnails() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.images + "/photo.jpg"))
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try Self.copy("photo.jpg", to: fixture.path("first.jpg"))
        #expect(Self.thumbnail(fixture.path("first.jpg")) != nil)
        // The worker is frozen: a write that waited for a thumbnail would wait out the worker's
        // 60-second limit, so the whole burst finishing in under 10 s shows none did.
        let worker = try Self.worker(of: fixture)
        #expect(kill(worker, SIGSTOP) == 0)
        let frozen: Double
        do {
            defer { kill(worker, SIGCONT) }
            frozen = try Self.burst(data, count: 200, in: fixture.mountPoint)
        }
        #expect(frozen < 10, "200 image writes took \(frozen) s with the thumbnail worker frozen")
        // The thumbnails follow once the worker runs (a new one, if the frozen one timed out).
        #expect(Self.thumbnail(fixture.path("img0199.jpg"), within: 120) != nil)

        // The same burst on a mount that makes no thumbnails, for comparison (scripts/bench
        // measures the difference; here it must be of the same order).
        let plain = try MountFixture(options: MountFixture.defaultOptions + ["nothumbnails"])
        defer { plain.tearDown() }
        let off = try Self.burst(data, count: 200, in: plain.mountPoint)
        #expect(frozen < off * 3 + 1, "with thumbnails \(frozen) s, without \(off) s")
    }

    @Test func onlyTheNewestVersionGetsAThumbnail() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        // What the last version's thumbnail is: the same content in another file.
        try Self.copy("picture.gif", to: fixture.path("reference.gif"))
        let newest = try #require(Self.thumbnail(fixture.path("reference.gif")))
        try Self.copy("photo.jpg", to: fixture.path("photo.jpg"))
        let photo = try #require(Self.thumbnail(fixture.path("photo.jpg")))
        // The worker is frozen while the first version's job is with it; two more versions
        // follow, each written over the last.
        let worker = try Self.worker(of: fixture)
        #expect(kill(worker, SIGSTOP) == 0)
        let doc = fixture.path("doc.img")
        do {
            defer { kill(worker, SIGCONT) }
            try Self.copy("photo.jpg", to: doc)
            usleep(200_000)  // the job is sent
            try Self.copy("picture.png", to: doc)
            try Self.copy("picture.gif", to: doc)
            #expect(Self.thumbnail(doc, within: 0.3) == nil)
        }
        // The first version's set is dropped, the second's job was replaced by the third's: the
        // first thumbnail the document ever shows is the newest content's.
        let first = try #require(Self.thumbnail(doc, within: 20))
        #expect(first == newest, "a thumbnail of an older version was shown")
        #expect(first != photo)
        #expect(Self.thumbnail(doc, within: 0) == newest)
    }

    @Test func damagedAndHostileImagesNeitherCrashNorStall() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try Self.copy("truncated.jpg", to: fixture.path("truncated.jpg"))
        try Self.copy("bomb.png", to: fixture.path("bomb.png"))
        try Self.copy("picture.webp", to: fixture.path("after.webp"))
        // The one queued after them comes in good time.
        #expect(Self.thumbnail(fixture.path("after.webp"), within: 15) != nil)
        #expect(Self.thumbnail(fixture.path("bomb.png"), within: 1) == nil)
        // A truncated JPEG may get a partial thumbnail or none; what matters is the daemon.
        _ = Self.thumbnail(fixture.path("truncated.jpg"), within: 1)
        #expect(fixture.daemon?.isRunning == true)
        #expect(try shell("cat '\(fixture.path("truncated.jpg"))' > /dev/null").status == 0)
    }

    @Test func aUsersOwnThumbnailIsCheckedAndKeptUntilTheContentChanges() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let f = fixture.path("report.odt")
        try "not an image".write(toFile: f, atomically: false, encoding: .utf8)
        let mine = try makeSmallPNG(in: fixture)
        #expect(errnoOf(docfs_setxattr(f, "user.docfs.thumbnail", mine, mine.count, DOCFS_XATTR_REPLACE)) == ENODATA)
        #expect(docfs_setxattr(f, "user.docfs.thumbnail", mine, mine.count, DOCFS_XATTR_CREATE) == 0)
        #expect(Self.thumbnail(f, within: 0) == mine ? true : false, "getfattr returns the PNG as set")
        #expect(errnoOf(docfs_setxattr(f, "user.docfs.thumbnail", mine, mine.count, DOCFS_XATTR_CREATE)) == EEXIST)
        // Not a PNG, a PNG too big, a PNG cut short: EINVAL, and the one set stays.
        let jpeg = Array(try Data(contentsOf: URL(fileURLWithPath: Self.images + "/photo.jpg")).prefix(60000))
        #expect(errnoOf(docfs_setxattr(f, "user.docfs.thumbnail", jpeg, jpeg.count, 0)) == EINVAL)
        let bomb = Array(try Data(contentsOf: URL(fileURLWithPath: Self.images + "/bomb.png")))
        #expect(errnoOf(docfs_setxattr(f, "user.docfs.thumbnail", bomb, bomb.count, 0)) == EINVAL)
        let cut = Array(mine.prefix(mine.count / 2))
        #expect(errnoOf(docfs_setxattr(f, "user.docfs.thumbnail", cut, cut.count, 0)) == EINVAL)
        #expect(Self.thumbnail(f, within: 0) == mine ? true : false)
        let query = try shell("'\(MountFixture.binary)' query 'hasThumbnail == true' '\(fixture.mountPoint)'")
        #expect(query.output.contains("report.odt"), "\(query.output)")
        // The content changes: the user's thumbnail goes (text has no generated one).
        try "changed, still not an image".write(toFile: f, atomically: false, encoding: .utf8)
        #expect(Self.thumbnail(f, within: 0.5) == nil)
        // Removing a user's thumbnail from an image brings back the generated one.
        try Self.copy("picture.png", to: fixture.path("picture.png"))
        let generated = try #require(Self.thumbnail(fixture.path("picture.png")))
        #expect(docfs_setxattr(fixture.path("picture.png"), "user.docfs.thumbnail", mine, mine.count, 0) == 0)
        #expect(Self.thumbnail(fixture.path("picture.png"), within: 0) == mine ? true : false)
        #expect(docfs_removexattr(fixture.path("picture.png"), "user.docfs.thumbnail") == 0)
        #expect(Self.thumbnail(fixture.path("picture.png")) == generated ? true : false)
    }

    /// A close whose stitch saw content that starts like no image, with no set stored, queues
    /// no look (issue 20: the stress row); one that replaces an image still removes its set,
    /// and an image written over such content still gets one. Names without an extension, so
    /// the stitch reads the first bytes.
    @Test func namelessContentLosesAndRegainsItsThumbnailAsItStopsAndStartsBeingAnImage() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let scan = fixture.path("scan")
        try Self.copy("picture.png", to: scan)
        let picture = try #require(Self.thumbnail(scan))
        var id = [UInt8](repeating: 0, count: 64)
        let n = docfs_getxattr(scan, "user.docfs.id", &id, id.count)
        let stored = fixture.store + "/thumbnails/\(String(decoding: id.prefix(max(n, 0)), as: UTF8.self)).thumb"
        #expect(access(stored, F_OK) == 0, "no set stored at \(stored)")
        try "plain words, no image".write(toFile: scan, atomically: false, encoding: .utf8)
        // The set of the image the file no longer holds is removed from the store (looked at
        // before any getxattr, which would ask for a look of its own).
        #expect(eventually(seconds: 10) { access(stored, F_OK) != 0 }, "\(stored) stayed")
        #expect(Self.thumbnail(scan, within: 0.5) == nil)
        var query = try shell("'\(MountFixture.binary)' query 'hasThumbnail == true' '\(fixture.mountPoint)'")
        #expect(!query.output.contains("scan"), "\(query.output)")
        try Self.copy("picture.png", to: scan)
        #expect(Self.thumbnail(scan) == picture)
        query = try shell("'\(MountFixture.binary)' query 'hasThumbnail == true' '\(fixture.mountPoint)'")
        #expect(query.output.contains("scan"), "\(query.output)")
        // Never an image: none, and nothing stored for it.
        let notes = fixture.path("notes")
        try "just text".write(toFile: notes, atomically: false, encoding: .utf8)
        try "more text".write(toFile: notes, atomically: false, encoding: .utf8)
        #expect(Self.thumbnail(notes, within: 0.5) == nil)
    }

    @Test func aMountWithoutThumbnailsMakesNone() throws {
        let fixture = try MountFixture(options: MountFixture.defaultOptions + ["nothumbnails"])
        defer { fixture.tearDown() }
        try Self.copy("picture.png", to: fixture.path("picture.png"))
        #expect(Self.thumbnail(fixture.path("picture.png"), within: 1) == nil)
        let png = Array(try Data(contentsOf: URL(fileURLWithPath: Self.images + "/picture.gif")).prefix(10))
        #expect(errnoOf(docfs_setxattr(fixture.path("picture.png"), "user.docfs.thumbnail", png, png.count, 0)) == EPERM)
    }

    /// A small PNG a user might set: the generated thumbnail of a GIF.
    private func makeSmallPNG(in fixture: MountFixture) throws -> [UInt8] {
        try Self.copy("picture.gif", to: fixture.path("icon.gif"))
        let png = try #require(Self.thumbnail(fixture.path("icon.gif")))
        unlink(fixture.path("icon.gif"))
        return png
    }
}
