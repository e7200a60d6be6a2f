import DocfsCore
import Foundation
import Testing

/// Names as bytes (issue 21 §2): NameText maps every byte string to text one to one, leaves
/// UTF-8 names as they are, and shows names as `ls` quotes them and as reversible JSON.
@Suite struct NameTextTests {
    static let latin1: [UInt8] = Array("caf".utf8) + [0xE9]                  // "café" in Latin-1
    static let invalid: [UInt8] = [0x61, 0xFF, 0xC3, 0x28, 0xED, 0xA0, 0x80]  // stray, bad pair, a surrogate
    static let control: [UInt8] = Array("a\tb\nc".utf8) + [0x1B]

    @Test func everyByteStringSurvivesTheRoundTrip() {
        var random = SystemRandomNumberGenerator()
        var samples: [[UInt8]] = [Self.latin1, Self.invalid, Self.control, [], Array("plain".utf8), Array("naïve 日本 🎉".utf8),
                                  Array("\u{10FD00}\u{10FD85}x\u{10FDFF}".utf8), [0xF4, 0x90, 0x80, 0x80], [0xC0, 0xAF], [0xF0, 0x9F]]
        for _ in 0..<2000 {
            samples.append((0..<Int.random(in: 0...12, using: &random)).map { _ in UInt8.random(in: 1...255, using: &random) })
        }
        var seen: [String: [UInt8]] = [:]
        for bytes in samples {
            let text = NameText.encode(bytes)
            #expect(NameText.decode(text) == bytes, "\(bytes)")
            #expect(FileName(text).bytes == bytes)
            #expect(FileName(bytes: bytes).description == text)
            if let other = seen[text] { #expect(other == bytes, "two names, one text: \(other) \(bytes)") }
            seen[text] = bytes
        }
        // UTF-8 names read as themselves; others never equal the U+FFFD form.
        #expect(NameText.encode(Array("naïve 日本 🎉".utf8)) == "naïve 日本 🎉")
        #expect(NameText.isPlain("naïve"))
        #expect(NameText.encode(Self.latin1) != "caf\u{FFFD}")
        #expect(!NameText.isPlain(NameText.encode(Self.latin1)))
        #expect(NameText.encode(Self.latin1) != NameText.encode(Array("caf".utf8) + [0xE8]))
    }

    @Test func namesAreShownAsLsQuotesThem() {
        func shown(_ bytes: [UInt8], _ style: NameText.QuotingStyle) -> String {
            String(decoding: NameText.shown(NameText.encode(bytes), style: style), as: UTF8.self)
        }
        #expect(NameText.shown(NameText.encode(Self.latin1), style: .literal) == Self.latin1)
        #expect(shown(Self.latin1, .shellEscape) == "'caf'$'\\351'")
        #expect(shown(Self.control, .shellEscape) == "'a'$'\\t''b'$'\\n''c'$'\\033'")
        #expect(shown(Array("plain-name.txt".utf8), .shellEscape) == "plain-name.txt")
        #expect(shown(Array("two words".utf8), .shellEscape) == "'two words'")
        #expect(shown(Array("it's".utf8), .shellEscape) == "'it'\\''s'")
        #expect(shown(Array("日本.txt".utf8), .shellEscape) == "日本.txt")
        #expect(shown(Self.latin1, .escape) == "caf\\351")
        #expect(shown(Array("a b\\".utf8), .escape) == "a\\ b\\\\")
        #expect(shown(Self.control, .c) == "\"a\\tb\\nc\\033\"")
    }

    @Test func jsonCarriesTheBytesAsPEP383Escapes() throws {
        struct Record: Codable { var path: String }
        let text = NameText.encode(Array("/dir/".utf8) + Self.latin1)
        let json = NameText.reversibleJSON(String(decoding: try JSONEncoder().encode(Record(path: text)), as: UTF8.self))
        #expect(json == #"{"path":"\/dir\/caf\udce9"}"#)
        let plain = NameText.reversibleJSON(#"{"path":"\/naïve"}"#)
        #expect(plain == #"{"path":"\/naïve"}"#)
        // A name really holding a reserved character keeps it, unescaped.
        let reserved = NameText.encode(Array("x\u{10FD85}".utf8))
        let kept = NameText.reversibleJSON(String(decoding: try JSONEncoder().encode(Record(path: reserved)), as: UTF8.self))
        #expect(kept == "{\"path\":\"x\u{10FD85}\"}")
    }
}
