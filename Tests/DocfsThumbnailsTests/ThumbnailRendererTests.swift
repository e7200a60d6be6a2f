@testable import DocfsThumbnails
import Foundation
import Testing

/// The renderer, in-process: every format issue 5 names gets a set whose renditions fit their
/// sizes, the attribute one 64 KiB; damaged and hostile files get none, quickly. One render at
/// a time, as the worker process renders: libvips' vector code (liborc) crashed the tests'
/// process when test cases rendered on several threads at once.
@Suite(.serialized) struct ThumbnailRendererTests {
    init() { #expect(ThumbnailRenderer.start()) }

    @Test(arguments: ["photo.jpg", "picture.png", "picture.webp", "picture.gif", "picture.tif", "document.pdf"])
    func everyFormatGetsRenditionsThatFit(_ name: String) throws {
        let set = try ThumbnailRenderer.render(path: TestImages.path(name))
        #expect(max(set.width, set.height) <= 1024)
        for size in ThumbnailSize.allCases {
            let png = try #require(set.pngs[size], "\(name) has no \(size) rendition")
            let declared = try #require(PNGChunks.size(of: png))
            #expect(max(declared.width, declared.height) <= size.pixels, "\(name) \(size)")
        }
        let attribute = try #require(set.pngs[.attribute])
        #expect(attribute.count <= ThumbnailSize.attributeLimit)
        // A photograph's attribute rendition is far bigger than an icon.
        if name == "photo.jpg" {
            let declared = try #require(PNGChunks.size(of: attribute))
            #expect(max(declared.width, declared.height) >= 256)
        }
    }

    @Test func aBigJPEGsAttributeRenditionComesFirst() throws {
        // 1600×1200: 1/2 scale decodes fit 512, a full one 1024.
        var early: [ThumbnailRenderer.Renditions] = []
        let set = try ThumbnailRenderer.render(path: TestImages.path("photo.jpg")) { early.append($0) }
        let first = try #require(early.first)
        #expect(early.count == 1)
        #expect(Set(first.pngs.keys) == [.attribute, .normal])
        #expect(Set(set.pngs.keys) == Set(ThumbnailSize.allCases))
        #expect(set.pngs[.attribute] == first.pngs[.attribute] && set.pngs[.normal] == first.pngs[.normal])
        #expect(max(set.width, set.height) == 1024)
        let xxLarge = try #require(PNGChunks.size(of: set.pngs[.xxLarge]!))
        #expect(max(xxLarge.width, xxLarge.height) == 1024)
        // A PDF page is drawn small first too.
        var page: ThumbnailRenderer.Renditions?
        let document = try ThumbnailRenderer.render(path: TestImages.path("document.pdf")) { page = $0 }
        #expect(page.map { Set($0.pngs.keys) } == [.attribute, .normal])
        #expect(max(document.width, document.height) == 1024)
        // Other formats are made in one go.
        for name in ["picture.png", "picture.webp", "picture.tif"] {
            var called = false
            _ = try ThumbnailRenderer.render(path: TestImages.path(name)) { _ in called = true }
            #expect(!called, "\(name)")
        }
    }

    @Test func aPDFPageIsRenderedAtTheLargestSize() throws {
        let set = try ThumbnailRenderer.render(path: TestImages.path("document.pdf"))
        #expect(max(set.width, set.height) == 1024)
    }

    @Test func aLargeJPEGDecodesAtAFractionOfItsSize() {
        #expect(ThumbnailRenderer.largestSide(width: 4000, height: 3000, signature: .jpeg) == 1000)
        #expect(ThumbnailRenderer.largestSide(width: 4000, height: 3000, signature: .png) == 1024)
        #expect(ThumbnailRenderer.largestSide(width: 800, height: 600, signature: .jpeg) == 1024)
        #expect(ThumbnailRenderer.largestSide(width: 4000, height: 3000, signature: .jpeg, fitting: 512) == 500)
    }

    @Test func hostileAndForeignFilesGetNoneQuickly() {
        let started = Date()
        for name in ["bomb.png", "not-an-image.jpg"] {
            #expect(throws: ThumbnailRenderer.Problem.self, "\(name)") { try ThumbnailRenderer.render(path: TestImages.path(name)) }
        }
        #expect(Date().timeIntervalSince(started) < 5)
    }

    @Test func aTruncatedJPEGNeverCrashes() {
        // libvips fills in what is missing, or refuses it: either is fine; crashing is not.
        if let set = try? ThumbnailRenderer.render(path: TestImages.path("truncated.jpg")) {
            #expect((set.pngs[.attribute]?.count ?? 0) <= ThumbnailSize.attributeLimit)
        }
    }

    @Test func aUserImageIsKeptByteForByte() throws {
        let png = try #require(try ThumbnailRenderer.render(path: TestImages.path("picture.png")).pngs[.normal])
        let path = TestImages.directory + "/user.png"
        try Data(png).write(to: URL(fileURLWithPath: path))
        let set = try ThumbnailRenderer.renderUserImage(path: path, png: png)
        #expect(set.pngs[.attribute] == png)
        #expect(set.pngs[.xxLarge] == png)
        #expect(set.pngs[.normal] != nil)
    }

    @Test func userImagesThatAreNotWholePNGsWithinTheSizeAreRefused() throws {
        let photo = TestImages.bytes("photo.jpg")
        #expect(throws: ThumbnailRenderer.Problem.self) { try ThumbnailRenderer.renderUserImage(path: TestImages.path("photo.jpg"), png: photo) }
        // The full-size PNG (1600×1200) is too big to be a thumbnail.
        let big = try ThumbnailRenderer.render(path: TestImages.path("picture.png"))
        _ = big
        let large = TestImages.bytes("picture.png")
        #expect(PNGChunks.size(of: large)?.width == 800)
        // A PNG cut short decodes only partly.
        let cut = Array(large[0..<(large.count / 2)])
        let path = TestImages.directory + "/cut.png"
        try Data(cut).write(to: URL(fileURLWithPath: path))
        #expect(throws: ThumbnailRenderer.Problem.self) { try ThumbnailRenderer.renderUserImage(path: path, png: cut) }
        #expect(throws: ThumbnailRenderer.Problem.self) { try ThumbnailRenderer.renderUserImage(path: TestImages.path("bomb.png"), png: TestImages.bytes("bomb.png")) }
    }
}
