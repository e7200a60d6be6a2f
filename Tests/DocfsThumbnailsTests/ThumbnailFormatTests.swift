import DocfsThumbnails
import Foundation
import Testing

/// The stored set format, PNG chunk handling and format sniffing.
@Suite struct ThumbnailFormatTests {
    @Test func aSetRoundTripsThroughItsFile() throws {
        let renditions: [ThumbnailSize: [UInt8]] = [.normal: [1, 2, 3], .attribute: Array(repeating: 7, count: 500)]
        let stamp = ContentStamp(inode: 42, size: 1000, version: 3)
        let bytes = ThumbnailFile.encode(origin: .user, stamp: stamp, width: 300, height: 200, renditions: renditions)
        let directory = "/tmp/docfs-tests/format-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = ThumbnailStore(directory: directory)
        try store.prepare()
        try store.write(bytes, as: .init(rawValue: 9), job: store.newJob())
        let current = try #require(store.current(.init(rawValue: 9), stamp: stamp))
        #expect(current.origin == .user && current.width == 300 && current.height == 200)
        #expect(store.rendition(.attribute, of: .init(rawValue: 9), stamp: stamp) == renditions[.attribute])
        #expect(store.rendition(.normal, of: .init(rawValue: 9), stamp: stamp) == renditions[.normal])
        #expect(store.rendition(.large, of: .init(rawValue: 9), stamp: stamp) == nil)
        var changed = stamp
        changed.size += 1
        #expect(store.current(.init(rawValue: 9), stamp: changed) == nil, "a set of other content is stale")
        #expect(store.items() == [.init(rawValue: 9)])
    }

    @Test func damagedSetsAreNotSets() {
        let good = ThumbnailFile.encode(origin: .generated, stamp: ContentStamp(inode: 1, size: 2, version: 4),
                                        width: 1, height: 1, renditions: [.normal: [9]])
        for cut in [0, 5, 20, good.count - 2] {
            let fd = memfd(Array(good[0..<cut]))
            defer { close(fd) }
            #expect(ThumbnailFile.read(fd) == nil || cut == good.count - 2)
        }
        let fd = memfd(Array("docfs-thumbnail 1\norigin sideways\nstamp 1 2 3\n\n".utf8))
        defer { close(fd) }
        #expect(ThumbnailFile.read(fd) == nil)
    }

    @Test func textChunksAreAddedWhereTheSpecWantsThem() throws {
        let png = TestImages.bytes("picture.png")
        let tagged = PNGChunks.addingText([("Thumb::URI", "picture.png"), ("Thumb::MTime", "1700000000")], to: png)
        #expect(PNGChunks.size(of: tagged)?.width == 800)
        let text = String(decoding: tagged, as: UTF8.self)
        #expect(text.contains("tEXtThumb::URI\u{0}picture.png"))
        let path = TestImages.directory + "/tagged.png"
        try Data(tagged).write(to: URL(fileURLWithPath: path))
        // libvips reads it back, text included, so the chunks' lengths and CRCs are right.
        let header = Process()
        header.executableURL = URL(fileURLWithPath: "/usr/bin/vipsheader")
        header.arguments = ["-a", path]
        let pipe = Pipe()
        header.standardOutput = pipe
        try header.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        header.waitUntilExit()
        #expect(header.terminationStatus == 0)
        #expect(output.contains("Thumb::MTime"))
    }

    @Test func signaturesAreToldByTheirFirstBytes() {
        #expect(ImageSignature.of(TestImages.bytes("photo.jpg")) == .jpeg)
        #expect(ImageSignature.of(TestImages.bytes("picture.png")) == .png)
        #expect(ImageSignature.of(TestImages.bytes("picture.webp")) == .webp)
        #expect(ImageSignature.of(TestImages.bytes("picture.gif")) == .gif)
        #expect(ImageSignature.of(TestImages.bytes("picture.tif")) == .tiff)
        #expect(ImageSignature.of(TestImages.bytes("document.pdf")) == .pdf)
        #expect(ImageSignature.of(Array("\0\0\0\u{18}ftypavif".utf8)) == .heif)
        #expect(ImageSignature.of(TestImages.bytes("not-an-image.jpg")) == nil)
        #expect(ImageSignature.of([]) == nil)
    }

    /// A descriptor reading `bytes` (a file unlinked at once).
    private func memfd(_ bytes: [UInt8]) -> Int32 {
        let path = "/tmp/docfs-tests/set-\(getpid())-\(UUID().uuidString)"
        FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let fd = open(path, O_RDONLY)
        unlink(path)
        return fd
    }
}
