import DocfsCore
import Foundation
import DocfsTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import DocfsProvider

/// Bookmark tokens (issue 5 §3, DESIGN §7): they carry every recorded value back unchanged, and
/// anything that is not a token this store made and nobody changed is refused with the reason.
@Suite struct BookmarkTokenTests {
    static let key = StoreKey(storeID: Array(0..<16), secret: Array(repeating: 7, count: 32))

    static func sample(scope: Bookmark.SecurityScope? = nil) -> Bookmark {
        Bookmark(storeID: key.storeID, item: ItemID(rawValue: 1042), container: "docfs.default", scope: "documents",
                 path: "/Reports/año 2026/q3 report.odt", backingInode: 9_876_543, contentModified: 1_763_900_000.123456789,
                 resourceType: .file, localizedName: "q3 report.odt", made: 1_763_900_100.5, securityScope: scope)
    }

    @Test func tokensCarryEveryValueBack() throws {
        for scope in [nil, Bookmark.SecurityScope(issuedTo: "com.example.Notes", readOnly: false),
                      Bookmark.SecurityScope(issuedTo: "uid:1000", readOnly: true)] {
          for madeOn in [nil, Array(UInt8(100)..<116)] {
            var bookmark = Self.sample(scope: scope)
            bookmark.madeOn = madeOn
            let token = BookmarkToken.encode(bookmark, key: Self.key)
            #expect(token.hasPrefix("docfs-bm1:"))
            #expect(token.utf8.allSatisfy { $0 > 32 && $0 < 127 }, "printable: \(token)")
            let back = try BookmarkToken.decode(token, key: Self.key)
            #expect(back.item == bookmark.item && back.path == bookmark.path && back.container == bookmark.container)
            #expect(back.securityScope == scope && back.resourceType == .file && back.localizedName == "q3 report.odt")
            #expect(abs(back.contentModified - bookmark.contentModified) < 1e-6 && abs(back.made - bookmark.made) < 1e-6)
            #expect(back.backingInode == bookmark.backingInode && back.storeID == bookmark.storeID && back.madeOn == madeOn)
          }
        }
        for type in Bookmark.ResourceType.allCases {
            var bookmark = Self.sample()
            bookmark.resourceType = type
            #expect(try BookmarkToken.decode(BookmarkToken.encode(bookmark, key: Self.key), key: Self.key).resourceType == type)
        }
    }

    /// Only the store a bookmark was made on judges it replaced by its backing inode (another
    /// machine's backing files are its own, issue 49 §1); one made before any link is this store's.
    @Test func onlyTheStoreABookmarkWasMadeOnSaysItWasReplaced() throws {
        let path = "/tmp/docfs-unit-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let layout = StoreLayout(root: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        var bookmark = Self.sample()
        #expect(bookmark.wasReplaced(byBackingInode: 1, in: layout) && !bookmark.wasReplaced(byBackingInode: 9_876_543, in: layout))
        _ = try StoreInstance.key(layout)
        bookmark.madeOn = StoreInstance.existingBytes(layout)
        #expect(bookmark.madeOn?.count == 16 && bookmark.wasReplaced(byBackingInode: 1, in: layout))
        bookmark.madeOn = Array(repeating: 9, count: 16)  // made on another machine
        #expect(!bookmark.wasReplaced(byBackingInode: 1, in: layout))
        #expect(try StoreInstance.key(layout) == StoreInstance.key(layout))
    }

    @Test func eachKindOfBadTokenIsRefusedWithItsReason() {
        let token = BookmarkToken.encode(Self.sample(), key: Self.key)
        func problem(_ text: String, key: StoreKey = Self.key) -> BookmarkTokenProblem? {
            do {
                _ = try BookmarkToken.decode(text, key: key)
                return nil
            } catch {
                return error
            }
        }
        #expect(problem("hello") == .notAToken)
        #expect(problem("") == .notAToken)
        #expect(problem("docfs-bm2:AAAA") == .unsupportedFormat)
        #expect(problem("docfs-bm1:AAAA") == .unsupportedFormat)  // format byte 0
        #expect(problem("docfs-bm1:not base64!") == .badEncoding)
        #expect(problem("docfs-bm1:A") == .badEncoding)  // no encoding is 1 mod 4 long
        #expect(problem(String(token.prefix(30))) == .truncated)
        let signed = Base64URL.decode(Array(token.utf8.dropFirst(10)))!
        #expect(problem("docfs-bm1:" + Base64URL.encode(signed.dropLast(3))) == .altered)  // the signature's end is gone
        #expect(problem("docfs-bm1:" + Base64URL.encode(Array(signed.prefix(40)))) == .truncated)
        #expect(problem(String(token.dropLast(1))) == .badEncoding)  // leftover bits that no encoder writes
        #expect(problem("docfs-bm1:" + String(repeating: "A", count: 20_000)) == .tooLong)
        // Another store's token, and one signed with a key guessed for this store's id.
        let foreign = StoreKey(storeID: Array(repeating: 1, count: 16), secret: Self.key.secret)
        #expect(problem(BookmarkToken.encode(Self.sample(), key: foreign)) == .foreignStore)
        let forger = StoreKey(storeID: Self.key.storeID, secret: Array(repeating: 8, count: 32))
        var forged = Self.sample()
        forged.path = "/secret.txt"
        #expect(problem(BookmarkToken.encode(forged, key: forger)) == .altered)
        // One changed character anywhere past the store id.
        var bytes = Array(token.utf8)
        bytes[60] = bytes[60] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(problem(String(decoding: bytes, as: UTF8.self)) == .altered)
        // Every refusal says what it is in words.
        for p in [BookmarkTokenProblem.notAToken, .unsupportedFormat, .badEncoding, .truncated, .tooLong, .foreignStore, .altered] {
            #expect(p.description.count > 20)
        }
    }

    @Test func aStoreKeyIsMadeOnceAndKeptPrivate() throws {
        let root = "/tmp/docfs-key-test-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let layout = StoreLayout(root: root)
        let first = try StoreKey.load(layout)
        let again = try StoreKey.load(layout)
        #expect(first == again && first.secret.count == 32 && first.storeIDText.count == 32)
        var st = stat()
        #expect(stat(layout.bookmarkKeyFile, &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(stat(layout.keysDirectory, &st) == 0 && st.st_mode & 0o777 == 0o700)
        // A damaged key file is reported, not taken for a new store.
        truncate(layout.bookmarkKeyFile, 10)
        #expect(throws: DocfsError.self) { try StoreKey.load(layout) }
    }

    @Test func base64URLRoundTripsEveryLength() {
        var rng = SplitMix(seed: 3)
        for length in 0..<200 {
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let text = Base64URL.encode(bytes)
            #expect(Base64URL.decode(Array(text.utf8)) == bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
        }
    }

    /// ≥ 1,000,000 random and mutated tokens: the decoder never crashes, and whatever it
    /// accepts is a token this key signed, carrying the sample's values.
    @Test func aMillionRandomAndMutatedTokensNeverCrashTheDecoder() {
        var rng = SplitMix(seed: 11)
        let originals = [Self.sample(), Self.sample(scope: .init(issuedTo: "com.example.Notes", readOnly: true))]
        let tokens = originals.map { Array(BookmarkToken.encode($0, key: Self.key).utf8) }
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/: \u{0}é".utf8)
        var refused = [String: Int]()
        var accepted = 0
        for round in 0..<1_000_000 {
            let pick = Int(rng.next() % 2)
            var bytes = tokens[pick]
            switch round % 8 {
            case 0:  // random text
                bytes = (0..<Int(rng.next() % 300)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            case 1:  // the prefix, then random base64url
                bytes = Array("docfs-bm1:".utf8) + (0..<Int(rng.next() % 300)).map { _ in alphabet[Int(rng.next() % 64)] }
            case 2:  // one character changed
                bytes[Int(rng.next() % UInt64(bytes.count))] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
            case 3:  // cut short
                bytes.removeSubrange(Int(rng.next() % UInt64(bytes.count))...)
            case 4:  // a character deleted or inserted
                let at = Int(rng.next() % UInt64(bytes.count))
                if rng.next() % 2 == 0 { bytes.remove(at: at) } else { bytes.insert(alphabet[Int(rng.next() % 64)], at: at) }
            case 5:  // several characters changed
                for _ in 0..<(1 + Int(rng.next() % 8)) {
                    bytes[Int(rng.next() % UInt64(bytes.count))] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                }
            case 6:  // pieces of the two tokens spliced
                let other = tokens[1 - pick]
                let cut = Int(rng.next() % UInt64(min(bytes.count, other.count)))
                bytes = Array(bytes[..<cut]) + Array(other[cut...])
            default:  // a block repeated or the token doubled
                bytes = rng.next() % 2 == 0 ? bytes + bytes : bytes + Array(bytes[10..<min(bytes.count, 10 + Int(rng.next() % 100))])
            }
            let text = String(decoding: bytes, as: UTF8.self)
            do {
                let bookmark = try BookmarkToken.decode(text, key: Self.key)
                accepted += 1
                // Only an unchanged token (a mutation that changed nothing, or a splice of the two
                // that gave one of them back) can pass.
                #expect(originals.contains(bookmark), "round \(round) accepted \(text)")
            } catch {
                refused[String(describing: error).prefix(20).description, default: 0] += 1
            }
        }
        #expect(refused.values.reduce(0, +) + accepted == 1_000_000)
        #expect(refused.count >= 6, "every kind of refusal came up: \(refused)")
    }
}
