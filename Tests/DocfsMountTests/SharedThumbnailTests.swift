import CLinux
import Crypto
import DocfsThumbnails
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Thumbnails served as files (issue 5 §2): every folder answers for a freedesktop shared
/// thumbnail repository, `.sh_thumbnails/<size>/<md5 of the file name>.png`, with the text
/// chunks the spec requires, and `.docfs/thumbnails/<id>.png` holds the 1024-pixel one.
@Suite(.needsRootAndFUSE) struct SharedThumbnailTests {
    static func md5(_ text: String) -> String {
        Insecure.MD5.hash(data: Array(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The tEXt chunks of `png`, keyword to text.
    static func textChunks(_ png: [UInt8]) -> [String: String] {
        var chunks: [String: String] = [:]
        var offset = 8
        while offset + 8 <= png.count {
            let length = png[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            let type = String(decoding: png[offset + 4..<offset + 8], as: UTF8.self)
            guard offset + 12 + length <= png.count else { break }
            if type == "tEXt" {
                let data = Array(png[offset + 8..<offset + 8 + length])
                if let zero = data.firstIndex(of: 0) {
                    chunks[String(decoding: data[..<zero], as: UTF8.self)] = String(decoding: data[(zero + 1)...], as: UTF8.self)
                }
            }
            offset += 12 + length
        }
        return chunks
    }

    static func bytes(_ path: String) -> [UInt8]? { FileManager.default.contents(atPath: path).map { Array($0) } }

    /// The bytes of `path` once it reads (a big photo's xx-large rendition comes a moment after
    /// its attribute one); nil when it does not within `seconds`.
    static func eventually(_ path: String, within seconds: Double = 20) -> [UInt8]? {
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            if let bytes = bytes(path) { return bytes }
            usleep(20_000)
        } while Date() < deadline
        return nil
    }

    @Test func everyFolderServesASharedRepositoryAsTheSpecAsks() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        #expect(mkdir(fixture.path("pics"), 0o755) == 0)
        try ThumbnailTests.copy("photo.jpg", to: fixture.path("pics/photo.jpg"))
        try write("not an image\n", to: fixture.path("pics/notes.txt"))
        #expect(ThumbnailTests.thumbnail(fixture.path("pics/photo.jpg")) != nil)
        var image = stat()
        #expect(stat(fixture.path("pics/photo.jpg"), &image) == 0)

        let repository = fixture.path("pics/.sh_thumbnails")
        var st = stat()
        #expect(stat(repository, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR)
        #expect(try shell("ls -a '\(fixture.path("pics"))'").output == ".\n..\nnotes.txt\nphoto.jpg\n")
        #expect(try shell("ls '\(repository)'").output == "large\nnormal\nx-large\nxx-large\n")
        let hash = Self.md5("photo.jpg")
        for (size, pixels) in [("normal", 128), ("large", 256), ("x-large", 512), ("xx-large", 1024)] {
            let path = "\(repository)/\(size)/\(hash).png"
            let png = try #require(Self.eventually(path), "\(size) is missing")
            let dimensions = try #require(PNGChunks.size(of: png))
            #expect(max(dimensions.width, dimensions.height) <= pixels, "\(size): \(dimensions)")
            let text = Self.textChunks(png)
            #expect(text["Thumb::URI"] == "photo.jpg", "\(text)")
            #expect(text["Thumb::MTime"] == String(image.st_mtim.tv_sec), "\(text)")
            #expect(text["Thumb::Size"] == String(image.st_size))
            #expect(stat(path, &st) == 0 && st.st_size == png.count && st.st_mode & 0o222 == 0)
            // Listed: one name for each file with a thumbnail.
            #expect(try shell("ls '\(repository)/\(size)'").output == "\(hash).png\n")
            #expect(errnoOf(open(path, O_WRONLY)) == EROFS)
        }
        // Later drafts hash "./" and the escaped name; the URI then says so.
        let relative = try #require(Self.bytes("\(repository)/normal/\(Self.md5("./photo.jpg")).png"))
        #expect(Self.textChunks(relative)["Thumb::URI"] == "./photo.jpg")
        // No thumbnail, no file; no such size, no folder; nothing may be made there.
        #expect(errnoOf(stat("\(repository)/normal/\(Self.md5("notes.txt")).png", &st)) == ENOENT)
        #expect(errnoOf(stat("\(repository)/fail", &st)) == ENOENT)
        #expect(errnoOf(open("\(repository)/normal/x.png", O_CREAT | O_WRONLY, 0o644)) == EROFS)

        // New content: a new thumbnail, with the new mtime.
        try ThumbnailTests.copy("picture.png", to: fixture.path("pics/photo.jpg"))
        var changed = stat()
        #expect(stat(fixture.path("pics/photo.jpg"), &changed) == 0)
        let deadline = Date().addingTimeInterval(20)
        var served: [String: String] = [:]
        repeat {
            served = Self.bytes("\(repository)/large/\(hash).png").map(Self.textChunks) ?? [:]
            if served["Thumb::Size"] == String(changed.st_size) { break }
            usleep(50_000)
        } while Date() < deadline
        #expect(served["Thumb::MTime"] == String(changed.st_mtim.tv_sec) && served["Thumb::Size"] == String(changed.st_size))

        // A folder that holds a real .sh_thumbnails shows it as it is.
        #expect(mkdir(fixture.path("cd"), 0o755) == 0)
        try FileManager.default.createDirectory(atPath: fixture.documents + "/cd/.sh_thumbnails/normal", withIntermediateDirectories: true)
        try write("real\n", to: fixture.documents + "/cd/.sh_thumbnails/normal/own.png")
        #expect(ControlAreaTests.contents(fixture.path("cd/.sh_thumbnails/normal/own.png")) == "real\n")
        // The folder can be removed as any other (the repository is never listed).
        #expect(try shell("rm -r '\(fixture.path("pics"))'").status == 0)
    }

    @Test func theControlAreaHoldsEachItemsLargestThumbnail() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try ThumbnailTests.copy("photo.jpg", to: fixture.path("photo.jpg"))
        #expect(ThumbnailTests.thumbnail(fixture.path("photo.jpg")) != nil)
        let id = try #require(itemID(fixture.path("photo.jpg")))
        let png = try #require(Self.eventually(fixture.path(".docfs/thumbnails/\(id).png")))
        let dimensions = try #require(PNGChunks.size(of: png))
        #expect(max(dimensions.width, dimensions.height) <= 1024 && max(dimensions.width, dimensions.height) > 512)
        #expect(try shell("ls '\(fixture.path(".docfs/thumbnails"))'").output == "\(id).png\n")
        #expect(errnoOf(open(fixture.path(".docfs/thumbnails/\(id).png"), O_RDWR)) == EROFS)
        var st = stat()
        #expect(errnoOf(stat(fixture.path(".docfs/thumbnails/12345.png"), &st)) == ENOENT)
    }

    @Test func aThumbnailLookedForBeforeItIsMadeIsFoundOnceItIs() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try ThumbnailTests.copy("photo.jpg", to: fixture.path("first.jpg"))
        #expect(ThumbnailTests.thumbnail(fixture.path("first.jpg")) != nil)
        // With the worker frozen, a new photo has no thumbnail yet: every place misses.
        let worker = try ThumbnailTests.worker(of: fixture)
        #expect(kill(worker, SIGSTOP) == 0)
        let places: [String]
        do {
            defer { kill(worker, SIGCONT) }
            try ThumbnailTests.copy("photo.jpg", to: fixture.path("photo.jpg"))
            let id = try #require(itemID(fixture.path("photo.jpg")))
            places = [".docfs/thumbnails/\(id).png", ".sh_thumbnails/normal/\(Self.md5("photo.jpg")).png",
                      ".sh_thumbnails/xx-large/\(Self.md5("photo.jpg")).png"].map(fixture.path)
            var st = stat()
            for place in places { #expect(errnoOf(stat(place, &st)) == ENOENT, "\(place)") }
        }
        // The kernel keeps a miss for the mount's 10-second timeout elsewhere, but not here:
        // each is found as soon as it is made.
        for place in places { #expect(Self.eventually(place, within: 5) != nil, "\(place)") }
    }

    @Test func thumbnailsOfRemovedItemsGo() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        try ThumbnailTests.copy("photo.jpg", to: fixture.path("removed.jpg"))
        try ThumbnailTests.copy("photo.jpg", to: fixture.path("behind.jpg"))
        try ThumbnailTests.copy("photo.jpg", to: fixture.path("kept.jpg"))
        for name in ["removed.jpg", "behind.jpg", "kept.jpg"] { #expect(ThumbnailTests.thumbnail(fixture.path(name)) != nil) }
        let set = { (name: String) throws -> String in fixture.store + "/thumbnails/\(try #require(itemID(fixture.path(name)))).thumb" }
        let removed = try set("removed.jpg"), behind = try set("behind.jpg"), kept = try set("kept.jpg")
        #expect(FileManager.default.fileExists(atPath: removed))
        // Removed through the mount: its set goes with it.
        #expect(unlink(fixture.path("removed.jpg")) == 0)
        #expect(!FileManager.default.fileExists(atPath: removed))
        // Removed in the store while docfs was not serving it: gone after the next mount.
        fixture.stop()
        #expect(unlink(fixture.documents + "/behind.jpg") == 0)
        try fixture.start()
        let deadline = Date().addingTimeInterval(10)
        while FileManager.default.fileExists(atPath: behind) && Date() < deadline { usleep(20_000) }
        #expect(!FileManager.default.fileExists(atPath: behind))
        #expect(FileManager.default.fileExists(atPath: kept))
    }
}
