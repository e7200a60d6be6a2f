import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Plain (not JSON) output, with names shown as GNU `ls` shows them (issue 21 §2): on a
/// terminal quoted for the shell where needed (`'caf'$'\351'`), elsewhere as their bytes, or as
/// `QUOTING_STYLE` says (literal, shell-escape, escape, c). Names and paths in the text are
/// NameText (exact bytes), put into lines with `name(_:)`; `line(_:)` writes a line.
enum PlainOutput {
    static let style = NameText.QuotingStyle.forStandardOutput()

    /// A name or path as this output shows it.
    static func name(_ text: String) -> String {
        style == .literal ? text : String(decoding: NameText.shown(text, style: style), as: UTF8.self)
    }

    /// Writes `text` and a newline: in the literal style names are written as their bytes;
    /// in the others a byte no name was quoted for shows as an escape (`\351`).
    static func line(_ text: String) {
        var bytes: [UInt8]
        if style == .literal {
            bytes = NameText.decode(text)
        } else {
            bytes = Array((NameText.isPlain(text) ? text : withBytesEscaped(text)).utf8)
        }
        bytes.append(10)
        fflush(nil)  // what print() buffered goes first
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            written += n
        }
    }

    /// `text` with each byte that stands for no character as `\ooo`.
    private static func withBytesEscaped(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        var escaped = false
        for scalar in text.unicodeScalars {
            if !escaped, let byte = NameText.byte(standingFor: scalar) {
                let octal = String(byte, radix: 8)
                out.append(contentsOf: ("\\" + String(repeating: "0", count: 3 - octal.count) + octal).unicodeScalars)
            } else if !escaped && NameText.isEscape(scalar) {
                escaped = true
            } else {
                out.append(scalar)
                escaped = false
            }
        }
        return String(out)
    }
}
