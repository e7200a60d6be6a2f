#if canImport(Glibc)
import Glibc
#endif

/// How names are shown to people and programs: quoted as GNU `ls` quotes them, and written into
/// JSON so that their bytes can be had back.
extension NameText {
    /// GNU ls's quoting styles (`--quoting-style`, or the `QUOTING_STYLE` environment variable).
    public enum QuotingStyle: String, Sendable {
        /// The bytes as they are (ls's default when its output is no terminal).
        case literal
        /// Quoted for a POSIX shell where needed, bytes that are not printable as `$'\ooo'`
        /// (ls's default on a terminal).
        case shellEscape = "shell-escape"
        /// Backslash escapes, no quotes (`ls -b`).
        case escape
        /// A C string (`ls -Q`).
        case c

        /// The style `ls` would use: `QUOTING_STYLE` when it names one of these, else
        /// shell-escape on a terminal and literal elsewhere.
        public static func forStandardOutput() -> QuotingStyle {
            if let chosen = getenv("QUOTING_STYLE").map({ String(cString: $0) }) {
                if let style = QuotingStyle(rawValue: chosen) { return style }
                if chosen == "shell" || chosen == "shell-always" || chosen == "shell-escape-always" { return .shellEscape }
            }
            return isatty(STDOUT_FILENO) == 1 ? .shellEscape : .literal
        }
    }

    /// `text` (a name or path in NameText) as `style` shows it, as bytes to write.
    public static func shown(_ text: String, style: QuotingStyle) -> [UInt8] {
        let bytes = decode(text)
        switch style {
        case .literal: return bytes
        case .escape: return backslashed(bytes, quote: nil)
        case .c: return Array("\"".utf8) + backslashed(bytes, quote: UInt8(ascii: "\"")) + Array("\"".utf8)
        case .shellEscape: return shellEscaped(bytes)
        }
    }

    /// The runs of `bytes`: printable text (valid UTF-8 without control characters) or one
    /// byte that is not.
    private static func runs(_ bytes: [UInt8]) -> [(printable: Bool, bytes: ArraySlice<UInt8>)] {
        var result: [(Bool, ArraySlice<UInt8>)] = []
        var i = 0, start = 0
        func flush(_ end: Int) { if end > start { result.append((true, bytes[start..<end])) } }
        while i < bytes.count {
            if let (value, length) = scalar(in: bytes, at: i), !(value < 0x20 || value == 0x7F || (value >= 0x80 && value < 0xA0)) {
                i += length
                continue
            }
            flush(i)
            let length = scalar(in: bytes, at: i)?.1 ?? 1
            for k in i..<(i + length) { result.append((false, bytes[k...k])) }
            i += length
            start = i
        }
        flush(i)
        return result
    }

    private static let controlEscapes: [UInt8: String] = [7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r"]

    private static func escaped(_ byte: UInt8) -> [UInt8] {
        if let letter = controlEscapes[byte] { return Array(("\\" + letter).utf8) }
        let octal = String(byte, radix: 8)
        return Array(("\\" + String(repeating: "0", count: 3 - octal.count) + octal).utf8)
    }

    private static func backslashed(_ bytes: [UInt8], quote: UInt8?) -> [UInt8] {
        var out: [UInt8] = []
        for run in runs(bytes) {
            guard run.printable else {
                out += escaped(run.bytes.first!)
                continue
            }
            for byte in run.bytes {
                if byte == UInt8(ascii: "\\") || byte == quote { out.append(UInt8(ascii: "\\")) }
                if quote == nil && byte == UInt8(ascii: " ") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
        }
        return out
    }

    /// Bytes a POSIX shell takes literally outside quotes.
    private static func isShellSafe(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "%"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: "-"), UInt8(ascii: "."),
             UInt8(ascii: "/"), UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "_"): true
        default: byte >= 0x80  // printable UTF-8 beyond ASCII (runs sorts out the rest)
        }
    }

    private static func shellEscaped(_ bytes: [UInt8]) -> [UInt8] {
        let parts = runs(bytes)
        if !bytes.isEmpty && parts.allSatisfy({ $0.printable && $0.bytes.allSatisfy(isShellSafe) }) { return bytes }
        var out: [UInt8] = []
        for part in parts {
            if part.printable {
                out.append(UInt8(ascii: "'"))
                for byte in part.bytes {
                    if byte == UInt8(ascii: "'") { out += Array("'\\''".utf8) } else { out.append(byte) }
                }
                out.append(UInt8(ascii: "'"))
            } else {
                out += Array("$'".utf8) + escaped(part.bytes.first!) + [UInt8(ascii: "'")]
            }
        }
        return out.isEmpty ? Array("''".utf8) : out
    }

    /// JSON text (as a JSON encoder wrote it, holding names in NameText) with every byte a name
    /// holds that is not UTF-8 written as a PEP 383 escape, `\udc80`–`\udcff` (the lone low
    /// surrogate U+DC00 + byte), and reserved characters as themselves. Python reads the bytes
    /// back with `os.fsencode(json.loads(text)[...])`; no UTF-8 name holds a lone surrogate, so
    /// the escapes are never ambiguous. (Any string of the JSON holding a reserved character is
    /// read so, names or not.)
    public static func reversibleJSON(_ json: String) -> String {
        guard !isPlain(json) else { return json }
        var out = String.UnicodeScalarView()
        var escaped = false
        for scalar in json.unicodeScalars {
            let value = scalar.value
            if escaped || value & ~0xFF != base {
                out.append(scalar)
                escaped = false
            } else if value == base {
                escaped = true
            } else {
                let hex = String(0xDC00 + (value - base), radix: 16)
                out.append(contentsOf: ("\\u" + hex).unicodeScalars)
            }
        }
        return String(out)
    }
}
