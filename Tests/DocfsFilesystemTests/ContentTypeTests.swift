import DocfsProvider
import Testing

/// Content types come from the system's shared-mime-info data through GIO: names (globs) and
/// first bytes (magic), with the UTI where one is well known.
@Suite struct ContentTypeTests {
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]

    @Test func namesAndMagicDecide() {
        #expect(ContentType.of(name: "notes.md", start: Array("# Title\n".utf8)) == ContentType(mime: "text/markdown"))
        #expect(ContentType.of(name: "notes.md", start: []).uti == "net.daringfireball.markdown")
        #expect(ContentType.of(name: "report.pdf", start: Array("%PDF-1.7\n".utf8)).mime == "application/pdf")
        #expect(ContentType.of(name: "picture", start: Self.png).mime == "image/png")  // magic, no extension
        #expect(ContentType.of(name: "picture.png", start: Self.png).uti == "public.png")
        #expect(ContentType.of(name: "a.txt", start: Array("hello\n".utf8)).mime == "text/plain")
        let unknown = ContentType.of(name: "blob", start: [0x00, 0xFF, 0x13, 0x37, 0x00, 0x01])
        #expect(unknown.mime == "application/octet-stream")
        #expect(unknown.uti == "public.data")
        #expect(ContentType(mime: "application/x-something-rare").uti == "")
    }
}
