/// A predicate that could not be parsed: what is wrong, and where (a 1-based column in the
/// predicate as typed), so the CLI can quote it and point at the spot.
public struct PredicateSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    /// 1-based column (in characters) of the offending token; one past the end when the
    /// predicate ended too soon.
    public var column: Int
    public var predicate: String

    public init(_ message: String, column: Int, predicate: String) {
        self.message = message
        self.column = column
        self.predicate = predicate
    }

    /// One line: the message with its column.
    public var description: String { "\(message) (column \(column))" }

    /// The message, the predicate quoted, and a caret under the offending column.
    public var pointed: String {
        let line = predicate.map { $0 == "\t" || $0 == "\n" || $0 == "\r" ? " " : $0 }
        return "\(description)\n  \(String(line))\n  \(String(repeating: " ", count: max(column - 1, 0)))^"
    }
}
