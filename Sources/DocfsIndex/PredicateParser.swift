import Foundation
import DocfsCore

/// Parses the predicate language of `docfs query` (issue 4 §3), modelled on NSPredicate:
///
///     predicate  := or
///     or         := and (("OR" | "||") and)*
///     and        := not (("AND" | "&&") not)*
///     not        := ("NOT" | "!") not | "(" predicate ")" | comparison | "*"
///     comparison := attribute operator ["[c]"] value
///
/// Keywords and attribute names ignore case. Values are checked against the attribute's kind
/// here, so every error carries the column of the token at fault.
public struct PredicateParser: Sendable {
    /// Resolves relative dates (`-7d`, `today`) and local times.
    public var now: Date
    public var timeZone: TimeZone

    public init(now: Date = Date(), timeZone: TimeZone = .current) {
        self.now = now
        self.timeZone = timeZone
    }

    public func parse(_ text: String) throws(PredicateSyntaxError) -> QueryPredicate {
        var state = State(tokens: try PredicateLexer.tokens(of: text), text: text, dates: DateLiterals(now: now, timeZone: timeZone))
        if case .end = state.peek.kind { return .all }
        let predicate = try state.or()
        guard case .end = state.peek.kind else {
            throw state.error("expected AND, OR or the end of the predicate, found \(state.describe(state.peek))", at: state.peek)
        }
        return predicate
    }

    private struct State {
        let tokens: [PredicateLexer.Token]
        let text: String
        let dates: DateLiterals
        var position = 0
        var depth = 0
        var comparisons = 0

        /// Bounds that keep evaluation and SQLite (whose expression depth stops at 1,000) safe.
        static let maximumDepth = 100
        static let maximumComparisons = 256

        var peek: PredicateLexer.Token { tokens[position] }

        mutating func next() -> PredicateLexer.Token {
            defer { if position < tokens.count - 1 { position += 1 } }
            return tokens[position]
        }

        func error(_ message: String, at token: PredicateLexer.Token) -> PredicateSyntaxError {
            PredicateSyntaxError(message, column: token.column, predicate: text)
        }

        func describe(_ token: PredicateLexer.Token) -> String {
            switch token.kind {
            case .word(let w): "\(w)"
            case .string(let s): "the string \"\(s)\""
            case .literal(let l): "\(l)"
            case .symbol(let s): "\(s)"
            case .end: "the end of the predicate"
            }
        }

        func isKeyword(_ token: PredicateLexer.Token, _ words: String...) -> Bool {
            if case .word(let w) = token.kind { return words.contains(w.uppercased()) }
            if case .symbol(let s) = token.kind { return words.contains(s) }
            return false
        }

        mutating func or() throws(PredicateSyntaxError) -> QueryPredicate {
            var left = try and()
            while isKeyword(peek, "OR", "||") {
                _ = next()
                left = .or(left, try and())
            }
            return left
        }

        mutating func and() throws(PredicateSyntaxError) -> QueryPredicate {
            var left = try not()
            while isKeyword(peek, "AND", "&&") {
                _ = next()
                left = .and(left, try not())
            }
            return left
        }

        mutating func not() throws(PredicateSyntaxError) -> QueryPredicate {
            depth += 1
            defer { depth -= 1 }
            guard depth <= Self.maximumDepth else {
                throw error("the predicate nests too deeply (more than \(Self.maximumDepth) levels)", at: peek)
            }
            let token = peek
            if isKeyword(token, "NOT", "!") {
                _ = next()
                return .not(try not())
            }
            if case .symbol("(") = token.kind {
                _ = next()
                let inner = try or()
                guard case .symbol(")") = peek.kind else {
                    throw error("expected ) to close the ( at column \(token.column), found \(describe(peek))", at: peek)
                }
                _ = next()
                return inner
            }
            if case .symbol("*") = token.kind {
                _ = next()
                return .all
            }
            return .comparison(try comparison())
        }

        mutating func comparison() throws(PredicateSyntaxError) -> Comparison {
            comparisons += 1
            guard comparisons <= Self.maximumComparisons else {
                throw error("the predicate has more than \(Self.maximumComparisons) comparisons", at: peek)
            }
            let nameToken = next()
            guard case .word(let word) = nameToken.kind else {
                throw error("expected an attribute name (like name, size or modified), found \(describe(nameToken))", at: nameToken)
            }
            guard let attribute = IndexAttribute.named(word) else {
                let known = IndexAttribute.allCases.map(\.rawValue).joined(separator: ", ")
                throw error("unknown attribute \(word): known are \(known)", at: nameToken)
            }
            let opToken = next()
            guard let op = Self.comparisonOperator(opToken) else {
                throw error("expected an operator after \(word) (==, !=, <, <=, >, >=, LIKE, BEGINSWITH, ENDSWITH, CONTAINS), found \(describe(opToken))", at: opToken)
            }
            var caseInsensitive = false
            if case .symbol("[c]") = peek.kind {
                let option = next()
                guard attribute.valueKind == .text || attribute.valueKind == .list else {
                    throw error("[c] ignores case in strings; \(attribute.rawValue) is not a string", at: option)
                }
                caseInsensitive = true
            }
            switch attribute.valueKind {
            case .text:
                break
            case .list:
                if op.isOrdering { throw error("\(attribute.rawValue) is a list of words: use CONTAINS, LIKE, BEGINSWITH, ENDSWITH, == or !=", at: opToken) }
            case .bool:
                if op != .equal && op != .notEqual { throw error("\(attribute.rawValue) is true or false: use == or !=", at: opToken) }
            case .integer, .size, .date:
                if op.isTextual { throw error("\(op.rawValue) compares strings; \(attribute.rawValue) takes ==, !=, <, <=, > or >=", at: opToken) }
            }
            let valueToken = next()
            let value = try self.value(for: attribute, from: valueToken)
            return Comparison(attribute: attribute, op: op, value: value, caseInsensitive: caseInsensitive)
        }

        static func comparisonOperator(_ token: PredicateLexer.Token) -> ComparisonOperator? {
            switch token.kind {
            case .symbol(let s): return ComparisonOperator(rawValue: s)
            case .word(let w): return ComparisonOperator(rawValue: w.uppercased()).flatMap { $0.isTextual ? $0 : nil }
            default: return nil
            }
        }

        func value(for attribute: IndexAttribute, from token: PredicateLexer.Token) throws(PredicateSyntaxError) -> PredicateValue {
            let wanted = "\(attribute.rawValue) takes \(attribute.example)"
            switch (attribute.valueKind, token.kind) {
            case (.text, .string(let s)), (.list, .string(let s)):
                return .text(s)
            case (.integer, .literal(let l)):
                guard let n = Int64(l), n >= 0 else { throw error("\(l) is not a whole number: \(wanted)", at: token) }
                return .integer(n)
            case (.size, .literal(let l)):
                guard let bytes = SizeLiteral.bytes(l) else { throw error("\(l) is not a size: \(wanted)", at: token) }
                return .integer(bytes)
            case (.date, .literal(let l)), (.date, .string(let l)):
                guard let date = dates.resolve(l) else { throw error("\(l) is not a date: \(wanted)", at: token) }
                return date
            case (.date, .word(let w)):
                guard let date = dates.resolve(w) else { throw error("\(w) is not a date: \(wanted)", at: token) }
                return date
            case (.bool, .word(let w)):
                switch w.lowercased() {
                case "true", "yes": return .bool(true)
                case "false", "no": return .bool(false)
                default: throw error("\(w) is not true or false: \(wanted)", at: token)
                }
            case (_, .end):
                throw error("the predicate ends where a value should be: \(wanted)", at: token)
            default:
                throw error("expected a value, found \(describe(token)): \(wanted)", at: token)
            }
        }
    }
}

/// Dates: `2026-01-01` (that whole local day), `2026-01-01T09:30[:15]` (local time, or UTC
/// with a trailing Z), `-7d` / `+2h` (weeks w, days d, hours h, minutes m, seconds s from now),
/// `now`, `today`, `yesterday`.
struct DateLiterals {
    let now: Date
    let timeZone: TimeZone

    private var calendar: Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return calendar
    }

    func resolve(_ text: String) -> PredicateValue? {
        switch text.lowercased() {
        case "now": return .date(now.timeIntervalSince1970, day: nil)
        case "today": return day(containing: now)
        case "yesterday": return calendar.date(byAdding: .day, value: -1, to: calendar.startOfDay(for: now)).flatMap(day(containing:))
        default: break
        }
        if let first = text.first, first == "-" || first == "+" { return relative(text) }
        return absolute(text)
    }

    private func day(containing date: Date) -> PredicateValue? {
        let start = calendar.startOfDay(for: date)
        guard let end = calendar.date(byAdding: .day, value: 1, to: start) else { return nil }
        return .date(start.timeIntervalSince1970, day: end.timeIntervalSince1970)
    }

    private func relative(_ text: String) -> PredicateValue? {
        let sign: Double = text.first == "-" ? -1 : 1
        let body = text.dropFirst()
        guard let unit = body.last, let count = Double(body.dropLast()), count >= 0 else { return nil }
        let seconds: Double
        switch unit.lowercased() {
        case "s": seconds = 1
        case "m": seconds = 60
        case "h": seconds = 3600
        case "d": seconds = 86400
        case "w": seconds = 604800
        default: return nil
        }
        let offset = sign * count * seconds
        guard offset.isFinite, abs(offset) < 1e13 else { return nil }
        return .date(now.timeIntervalSince1970 + offset, day: nil)
    }

    private func absolute(_ text: String) -> PredicateValue? {
        var rest = Substring(text)
        var utc = false
        if rest.hasSuffix("Z") || rest.hasSuffix("z") {
            utc = true
            rest = rest.dropLast()
        }
        let parts = rest.split(separator: "T", maxSplits: 1, omittingEmptySubsequences: false)
        let ymd = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard ymd.count == 3, ymd[0].count == 4, ymd[1].count == 2, ymd[2].count == 2,
              let year = Int(ymd[0]), let month = Int(ymd[1]), let dayOfMonth = Int(ymd[2]) else { return nil }
        var components = DateComponents(year: year, month: month, day: dayOfMonth)
        var wholeDay = true
        if parts.count == 2 {
            wholeDay = false
            let hms = parts[1].split(separator: ":", omittingEmptySubsequences: false)
            guard hms.count == 2 || hms.count == 3, hms.allSatisfy({ $0.count == 2 }),
                  let hour = Int(hms[0]), let minute = Int(hms[1]) else { return nil }
            components.hour = hour
            components.minute = minute
            components.second = hms.count == 3 ? Int(hms[2]) : 0
            guard components.second != nil, hour < 24, minute < 60, components.second! < 60 else { return nil }
        } else if utc {
            return nil
        }
        var zoned = calendar
        if utc { zoned.timeZone = TimeZone(identifier: "UTC")! }
        guard (1...12).contains(month), (1...31).contains(dayOfMonth), let date = zoned.date(from: components),
              zoned.component(.day, from: date) == dayOfMonth else { return nil }
        if wholeDay { return day(containing: date) }
        return .date(date.timeIntervalSince1970, day: nil)
    }
}
