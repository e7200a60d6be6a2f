import DocfsIndex
import Foundation
import Testing

/// The predicate language of `docfs query` (issue 4 §3, §5): every operator, precedence,
/// units, dates, and malformed input with the column of the fault.
@Suite struct PredicateParserTests {
    /// 2026-03-15 12:00 UTC, parsed in UTC.
    static let now = Date(timeIntervalSince1970: 1_773_576_000)
    let parser = PredicateParser(now: PredicateParserTests.now, timeZone: TimeZone(identifier: "UTC")!)

    func comparison(_ text: String) throws -> Comparison {
        guard case .comparison(let c) = try parser.parse(text) else {
            Issue.record("\(text) did not parse to one comparison")
            throw PredicateSyntaxError("not a comparison", column: 0, predicate: text)
        }
        return c
    }

    func failure(_ text: String) -> PredicateSyntaxError? {
        do {
            _ = try parser.parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test func everyOperator() throws {
        let cases: [(String, ComparisonOperator)] = [
            ("name == \"a\"", .equal), ("name = \"a\"", .equal), ("name != \"a\"", .notEqual), ("name <> \"a\"", .notEqual),
            ("name < \"a\"", .less), ("name <= \"a\"", .lessOrEqual), ("name > \"a\"", .greater),
            ("name >= \"a\"", .greaterOrEqual), ("name LIKE \"a*\"", .like), ("name like \"a?\"", .like),
            ("name BEGINSWITH \"a\"", .beginsWith), ("name endswith \"a\"", .endsWith), ("name CONTAINS \"a\"", .contains),
        ]
        for (text, op) in cases {
            let c = try comparison(text)
            #expect(c.op == op, "\(text)")
            #expect(c.attribute == .name)
            #expect(c.value == .text(String(text.split(separator: "\"")[1])))
            #expect(!c.caseInsensitive)
        }
        #expect(try comparison("name CONTAINS[c] \"Report\"").caseInsensitive)
        #expect(try comparison("name ==[C] 'x'").caseInsensitive)
        #expect(try comparison("tags CONTAINS \"work\"").attribute == .tags)
    }

    @Test func precedenceIsNotThenAndThenOr() throws {
        let a = QueryPredicate.comparison(Comparison(attribute: .version, op: .equal, value: .integer(1)))
        let b = QueryPredicate.comparison(Comparison(attribute: .version, op: .equal, value: .integer(2)))
        let c = QueryPredicate.comparison(Comparison(attribute: .version, op: .equal, value: .integer(3)))
        #expect(try parser.parse("version == 1 OR version == 2 AND version == 3") == .or(a, .and(b, c)))
        #expect(try parser.parse("(version == 1 OR version == 2) AND version == 3") == .and(.or(a, b), c))
        #expect(try parser.parse("NOT version == 1 AND version == 2") == .and(.not(a), b))
        #expect(try parser.parse("NOT (version == 1 AND version == 2)") == .not(.and(a, b)))
        #expect(try parser.parse("version == 1 || version == 2 && !version == 3") == .or(a, .and(b, .not(c))))
        #expect(try parser.parse("version == 1 and version == 2 or version == 3") == .or(.and(a, b), c))
        #expect(try parser.parse("") == .all)
        #expect(try parser.parse("  * ") == .all)
    }

    @Test func sizesInDecimalAndBinaryUnits() throws {
        let sizes: [(String, Int64)] = [("10MB", 10_000_000), ("10mb", 10_000_000), ("2048", 2048), ("1.5GiB", 1_610_612_736),
                                        ("512KiB", 524_288), ("3k", 3000), ("1TB", 1_000_000_000_000), ("7B", 7), ("1.5kb", 1500)]
        for (text, bytes) in sizes {
            #expect(try comparison("size > \(text)").value == .integer(bytes), "\(text)")
        }
        for bad in ["10XB", "1.2.3MB", "99999999999TB"] {
            let error = try #require(failure("size > \(bad)"))
            #expect(error.column == 8, "\(bad)")
            #expect(error.message.contains("not a size"))
        }
    }

    @Test func datesAbsoluteRelativeAndNamed() throws {
        let day = 86400.0
        let midnight = 1_773_532_800.0  // 2026-03-15 00:00 UTC
        #expect(try comparison("modified > 2026-03-15").value == .date(midnight, day: midnight + day))
        #expect(try comparison("modified > '2026-03-15'").value == .date(midnight, day: midnight + day))
        #expect(try comparison("created < 2026-03-15T09:30").value == .date(midnight + 9.5 * 3600, day: nil))
        #expect(try comparison("created < 2026-03-15T09:30:15Z").value == .date(midnight + 9.5 * 3600 + 15, day: nil))
        #expect(try comparison("modified > -7d").value == .date(Self.now.timeIntervalSince1970 - 7 * day, day: nil))
        #expect(try comparison("modified > -3h").value == .date(Self.now.timeIntervalSince1970 - 3 * 3600, day: nil))
        #expect(try comparison("modified > -2w").value == .date(Self.now.timeIntervalSince1970 - 14 * day, day: nil))
        #expect(try comparison("modified < +30m").value == .date(Self.now.timeIntervalSince1970 + 1800, day: nil))
        #expect(try comparison("modified == today").value == .date(midnight, day: midnight + day))
        #expect(try comparison("modified == yesterday").value == .date(midnight - day, day: midnight))
        #expect(try comparison("modified <= now").value == .date(Self.now.timeIntervalSince1970, day: nil))
        for bad in ["2026-02-30", "2026-13-01", "2026-1-1", "-7x", "2026-03-15T25:00", "tomorrowish"] {
            let error = try #require(failure("modified > \(bad)"), "\(bad)")
            #expect(error.column == 12, "\(bad)")
        }
    }

    @Test func attributesByNameAndAlias() throws {
        #expect(try comparison("MIME == \"text/plain\"").attribute == .contentType)
        #expect(try comparison("mtime > -1d").attribute == .modified)
        #expect(try comparison("hasThumbnail == true").value == .bool(true))
        #expect(try comparison("isExternal != no").value == .bool(false))
        #expect(try comparison("id == 42").value == .integer(42))
        #expect(try comparison("comment == \"say \\\"hi\\\"\"").value == .text("say \"hi\""))
    }

    @Test func malformedPredicatesNameTheColumn() {
        let cases: [(String, Int, String)] = [
            ("name LIKE \"*.md\" AND modified >", 32, "ends where a value should be"),
            ("colour == \"red\"", 1, "unknown attribute colour"),
            ("name == \"unclosed", 9, "not closed"),
            ("(name == \"a\"", 13, "expected ) to close"),
            ("name == \"a\")", 12, "expected AND, OR"),
            ("name \"a\"", 6, "expected an operator"),
            ("size LIKE \"1*\"", 6, "compares strings"),
            ("size > \"big\"", 8, "expected a value"),
            ("hasThumbnail > true", 14, "use == or !="),
            ("size ==[c] 10", 8, "[c] ignores case"),
            ("name ==[d] \"a\"", 8, "only [c]"),
            ("name == \"a\" AND", 16, "expected an attribute name"),
            ("name == \"a\" # x", 13, "unexpected character"),
            ("tags > \"a\"", 6, "list of words"),
            ("version == -3", 12, "not a whole number"),
            ("name == \"\\q\"", 10, "unknown escape"),
        ]
        for (text, column, words) in cases {
            guard let error = failure(text) else {
                Issue.record("\(text) parsed")
                continue
            }
            #expect(error.column == column, "\(text): \(error)")
            #expect(error.message.contains(words), "\(text): \(error)")
            #expect(error.pointed.contains(text))
        }
    }

    @Test func deepNestingIsAnErrorNotACrash() {
        let deep = String(repeating: "(", count: 10_000) + "id == 1" + String(repeating: ")", count: 10_000)
        #expect(failure(deep)?.message.contains("nests too deeply") == true)
        let nots = String(repeating: "NOT ", count: 10_000) + "id == 1"
        #expect(failure(nots)?.message.contains("nests too deeply") == true)
    }
}
