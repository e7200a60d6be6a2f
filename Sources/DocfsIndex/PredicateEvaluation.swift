/// What a predicate means, record by record. `IndexQuery` compiles the same meaning to SQL,
/// calling `TextMatching` for the text operators so both agree byte for byte; `--watch` uses
/// this to sort changed records into added, changed and removed.
extension QueryPredicate {
    public func matches(_ record: IndexRecord) -> Bool {
        switch self {
        case .all: true
        case .and(let a, let b): a.matches(record) && b.matches(record)
        case .or(let a, let b): a.matches(record) || b.matches(record)
        case .not(let a): !a.matches(record)
        case .comparison(let c): c.matches(record)
        }
    }
}

extension Comparison {
    func matches(_ record: IndexRecord) -> Bool {
        switch (record.value(of: attribute), value) {
        case (.text(let text), .text(let wanted)):
            return TextMatching.test(text, op, wanted, caseInsensitive: caseInsensitive)
        case (.list(let words), .text(let wanted)):
            // A list matches when one of its words does; != when none equals the value.
            if op == .notEqual { return !words.contains { TextMatching.test($0, .equal, wanted, caseInsensitive: caseInsensitive) } }
            return words.contains { TextMatching.test($0, op, wanted, caseInsensitive: caseInsensitive) }
        case (.integer(let n), .integer(let wanted)):
            return Self.order(op, n < wanted, n == wanted)
        case (.bool(let b), .bool(let wanted)):
            return op == .equal ? b == wanted : b != wanted
        case (.date(let t), .date(let instant, let dayEnd)):
            guard let end = dayEnd else { return Self.order(op, t < instant, t == instant) }
            // A whole day: == is inside it, the orderings take its start or end.
            let inside = t >= instant && t < end
            switch op {
            case .equal: return inside
            case .notEqual: return !inside
            case .less: return t < instant
            case .lessOrEqual: return t < end
            case .greater: return t >= end
            case .greaterOrEqual: return t >= instant
            default: return false
            }
        default:
            return false  // the parser lets no other pairing through
        }
    }

    static func order(_ op: ComparisonOperator, _ less: Bool, _ equal: Bool) -> Bool {
        switch op {
        case .equal: equal
        case .notEqual: !equal
        case .less: less
        case .lessOrEqual: less || equal
        case .greater: !less && !equal
        case .greaterOrEqual: !less
        default: false
        }
    }
}

/// The text operators, on UTF-8 bytes as SQLite compares them (names are bytes on Linux), with
/// `[c]` folding case by Swift's `lowercased()` first.
public enum TextMatching {
    public static func test(_ text: String, _ op: ComparisonOperator, _ wanted: String, caseInsensitive: Bool) -> Bool {
        let a = Array((caseInsensitive ? text.lowercased() : text).utf8)
        let b = Array((caseInsensitive ? wanted.lowercased() : wanted).utf8)
        switch op {
        case .equal: return a == b
        case .notEqual: return a != b
        case .less: return a.lexicographicallyPrecedes(b)
        case .lessOrEqual: return !b.lexicographicallyPrecedes(a)
        case .greater: return b.lexicographicallyPrecedes(a)
        case .greaterOrEqual: return !a.lexicographicallyPrecedes(b)
        case .beginsWith: return a.starts(with: b)
        case .endsWith: return a.count >= b.count && Array(a[(a.count - b.count)...]) == b
        case .contains: return b.isEmpty || a.firstRange(of: b) != nil
        case .like:
            return like(Array((caseInsensitive ? text.lowercased() : text).unicodeScalars),
                        Array((caseInsensitive ? wanted.lowercased() : wanted).unicodeScalars))
        }
    }

    /// `*` matches any run of characters, `?` one character (a Unicode code point, as SQLite's
    /// GLOB counts them), `\*` and `\?` themselves.
    static func like(_ text: [Unicode.Scalar], _ pattern: [Unicode.Scalar]) -> Bool {
        var t = 0, p = 0
        var star = -1, mark = 0
        while t < text.count {
            if p < pattern.count {
                let c = pattern[p]
                if c == "\\" && p + 1 < pattern.count && (pattern[p + 1] == "*" || pattern[p + 1] == "?") {
                    if text[t] == pattern[p + 1] {
                        t += 1
                        p += 2
                        continue
                    }
                } else if c == "*" {
                    star = p
                    mark = t
                    p += 1
                    continue
                } else if c == "?" || c == text[t] {
                    t += 1
                    p += 1
                    continue
                }
            }
            guard star >= 0 else { return false }
            p = star + 1
            mark += 1
            t = mark
        }
        while p < pattern.count && pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }
}
