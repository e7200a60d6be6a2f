/// Splits a predicate into tokens, each with the column it starts at.
struct PredicateLexer {
    enum Kind: Equatable {
        /// A name or keyword: letters, digits, `_` (starting with a letter or `_`).
        case word(String)
        /// A quoted string, escapes resolved.
        case string(String)
        /// A number-like literal: 42, 1.5GiB, 2026-01-01, 2026-01-01T09:30, -7d.
        case literal(String)
        /// An operator or punctuation: == != < <= > >= ( ) ! && || [c] *
        case symbol(String)
        case end
    }

    struct Token: Equatable {
        var kind: Kind
        var column: Int
    }

    static func tokens(of text: String) throws(PredicateSyntaxError) -> [Token] {
        let chars = Array(text)
        var tokens: [Token] = []
        var i = 0
        func fail(_ message: String, at index: Int) -> PredicateSyntaxError {
            PredicateSyntaxError(message, column: index + 1, predicate: text)
        }
        while i < chars.count {
            let c = chars[i]
            if c.isWhitespace {
                i += 1
                continue
            }
            let start = i
            if c == "\"" || c == "'" {
                var value = ""
                i += 1
                var closed = false
                while i < chars.count {
                    let d = chars[i]
                    if d == c {
                        closed = true
                        i += 1
                        break
                    }
                    if d == "\\" {
                        guard i + 1 < chars.count else { break }
                        let e = chars[i + 1]
                        switch e {
                        case "n": value.append("\n")
                        case "t": value.append("\t")
                        case "\\", "\"", "'": value.append(e)
                        default: throw fail("unknown escape \\\(e) in a string (use \\\\, \\\", \\', \\n or \\t)", at: i)
                        }
                        i += 2
                        continue
                    }
                    value.append(d)
                    i += 1
                }
                guard closed else { throw fail("this string is not closed: add a \(c) at its end", at: start) }
                tokens.append(Token(kind: .string(value), column: start + 1))
            } else if c.isLetter || c == "_" {
                while i < chars.count && (chars[i].isLetter || chars[i].isNumber || chars[i] == "_") { i += 1 }
                tokens.append(Token(kind: .word(String(chars[start..<i])), column: start + 1))
            } else if c.isASCIIDigit || ((c == "-" || c == "+") && i + 1 < chars.count && chars[i + 1].isASCIIDigit) {
                i += 1
                while i < chars.count && Self.continuesLiteral(chars[i]) { i += 1 }
                tokens.append(Token(kind: .literal(String(chars[start..<i])), column: start + 1))
            } else if c == "[" {
                guard let close = chars[i...].firstIndex(of: "]") else {
                    throw fail("[ opens an option that is not closed: write [c] to ignore case", at: start)
                }
                let option = String(chars[(i + 1)..<close]).lowercased()
                guard option == "c" else {
                    throw fail("unknown option [\(option)]: only [c] (ignore case) is supported", at: start)
                }
                tokens.append(Token(kind: .symbol("[c]"), column: start + 1))
                i = close + 1
            } else {
                let two = i + 1 < chars.count ? String(chars[i...(i + 1)]) : ""
                if ["==", "!=", "<=", ">=", "<>", "&&", "||", "=<", "=>"].contains(two) {
                    let normal = ["<>": "!=", "=<": "<=", "=>": ">="][two] ?? two
                    tokens.append(Token(kind: .symbol(normal), column: start + 1))
                    i += 2
                } else if "=<>()!*".contains(c) {
                    tokens.append(Token(kind: .symbol(c == "=" ? "==" : String(c)), column: start + 1))
                    i += 1
                } else {
                    throw fail("unexpected character \(c.debugDescription)", at: start)
                }
            }
        }
        tokens.append(Token(kind: .end, column: chars.count + 1))
        return tokens
    }

    private static func continuesLiteral(_ c: Character) -> Bool {
        c.isASCIIDigit || (c.isASCII && c.isLetter) || c == "." || c == ":" || c == "-" || c == "+"
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
