import DocfsIndex
import Foundation
import DocfsTestSupport
import Testing

/// Random and mutated predicates (issue 4 §5): the parser never crashes, every failure is a
/// PredicateSyntaxError whose column lies within the predicate (or one past its end), and every
/// predicate it accepts evaluates.
@Suite struct PredicateFuzzTests {
    static let seeds = [
        "name LIKE \"*.md\" AND modified > -7d",
        "size >= 10MB OR (tags CONTAINS[c] \"work\" AND NOT conflict == true)",
        "contentType BEGINSWITH \"image/\" && hasThumbnail == false || version > 3",
        "path ENDSWITH[c] '/notes' AND created <= 2026-01-01T09:30:00Z",
        "!(id == 42) AND comment CONTAINS \"\\\"quoted\\\"\" AND scope != \"data\"",
        "modified == today OR modified == yesterday OR modified < -2w",
        "*",
    ]
    static let alphabet: [Character] = Array("abcdefghijklmnopqrstuvwxyzAZ0123456789 _-+.:*?()[]!=<>&|\"'\\\t#é😀")
    static let fragments = ["AND", "OR", "NOT", "(", ")", "==", "!=", "<=", ">=", "LIKE", "[c]", "[", "\"", "'",
                            "name", "size", "modified", "tags", "10MB", "-7d", "2026-02-29", "true", "\\", "*", " "]

    @Test func aHundredThousandRandomAndMutatedPredicates() {
        var rng = SplitMix(seed: 0xD0CF5)
        let parser = PredicateParser(now: Date(timeIntervalSince1970: 1_773_576_000), timeZone: TimeZone(identifier: "UTC")!)
        let record = IndexRecord(id: 42, name: "notes.md", path: "/work/notes.md", container: "docfs.default",
                                 containerName: "Documents", scope: "documents", kind: "file", size: 2048,
                                 created: 1_700_000_000, modified: 1_773_000_000, contentType: "text/markdown",
                                 version: 3, tags: ["work", "Draft"])
        var accepted = 0, rejected = 0
        for round in 0..<100_000 {
            let text: String
            switch round % 3 {
            case 0:  // random characters
                text = String((0..<rng.next(below: 40)).map { _ in Self.alphabet[rng.next(below: Self.alphabet.count)] })
            case 1:  // random fragments
                text = (0..<rng.next(below: 12)).map { _ in Self.fragments[rng.next(below: Self.fragments.count)] }.joined(separator: " ")
            default:  // a valid predicate, mutated
                var chars = Array(Self.seeds[rng.next(below: Self.seeds.count)])
                for _ in 0..<(1 + rng.next(below: 4)) {
                    let at = rng.next(below: chars.count + 1)
                    switch rng.next(below: 3) {
                    case 0: if at < chars.count { chars.remove(at: at) }
                    case 1: chars.insert(Self.alphabet[rng.next(below: Self.alphabet.count)], at: at)
                    default: chars.insert(contentsOf: Self.fragments[rng.next(below: Self.fragments.count)], at: at)
                    }
                }
                text = String(chars)
            }
            do {
                let predicate = try parser.parse(text)
                _ = predicate.matches(record)
                accepted += 1
            } catch {
                rejected += 1
                if error.column < 1 || error.column > text.count + 1 || error.message.isEmpty {
                    Issue.record("bad error for \(text.debugDescription): \(error)")
                }
            }
        }
        #expect(accepted + rejected == 100_000)
        #expect(accepted > 1000 && rejected > 1000, "accepted \(accepted), rejected \(rejected)")
    }
}
