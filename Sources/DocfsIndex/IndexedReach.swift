import Synchronization

/// The rows one comparison can match, said as a range of one of the keys SQLite's indexes
/// (and the overlay's, `IndexOverlay.candidates`) keep rows by: an exact name, a name's
/// beginning, a range of dates, an id. A comparison no index serves (a size, a name's ending,
/// a test without regard to case) reaches no range: every row must be tested. The range holds
/// every row the comparison matches and may hold more (`QueryPredicate.matches` decides).
enum IndexedReach: Equatable {
    case name(String)
    case nameBeginning(String)
    case modified(from: Double, through: Double)
    case created(from: Double, through: Double)
    case id(Int64)

    init?(_ c: Comparison) {
        switch (c.attribute, c.value) {
        case (.name, .text(let wanted)) where !c.caseInsensitive:
            switch c.op {
            case .equal: self = .name(wanted)
            case .beginsWith where !wanted.isEmpty: self = .nameBeginning(wanted)
            case .like:
                guard let prefix = Self.literalPrefix(ofPattern: wanted) else { return nil }
                self = prefix.exact ? .name(prefix.text) : .nameBeginning(prefix.text)
            default: return nil
            }
        case (.id, .integer(let n)) where c.op == .equal:
            self = .id(n)
        case (.modified, .date(let start, let day)), (.created, .date(let start, let day)):
            // As `IndexQuery`'s SQL: a whole day is `start ..< end`; taken inclusively here.
            let end = day ?? start
            let range: (Double, Double)
            switch c.op {
            case .equal: range = (start, end)
            case .less, .lessOrEqual: range = (-.infinity, end)
            case .greater, .greaterOrEqual: range = (start, .infinity)
            default: return nil
            }
            self = c.attribute == .modified ? .modified(from: range.0, through: range.1) : .created(from: range.0, through: range.1)
        default:
            return nil
        }
    }

    /// The literal text a LIKE pattern starts with (`\*` and `\?` are the characters), and
    /// whether that is the whole pattern; nil when it starts with a wildcard.
    static func literalPrefix(ofPattern pattern: String) -> (text: String, exact: Bool)? {
        var text = String.UnicodeScalarView()
        var scalars = pattern.unicodeScalars.makeIterator()
        while let c = scalars.next() {
            switch c {
            case "*", "?":
                return text.isEmpty ? nil : (String(text), false)
            case "\\":
                var lookahead = scalars
                if let next = lookahead.next(), next == "*" || next == "?" {
                    text.append(next)
                    scalars = lookahead
                } else {
                    text.append(c)
                }
            default:
                text.append(c)
            }
        }
        return (String(text), true)
    }
}

/// Text ordered and compared by its UTF-8 bytes, as SQLite's BINARY collation does (Swift's
/// own `String` comparison treats canonically equivalent spellings as equal).
struct ByteOrderedText: Comparable, Hashable, Sendable {
    var text: String

    init(_ text: String) { self.text = text }

    static func == (a: Self, b: Self) -> Bool { a.text.hasSameBytes(as: b.text) }
    static func < (a: Self, b: Self) -> Bool { a.text.bytesPrecede(b.text) }

    func hash(into hasher: inout Hasher) { IndexLocation.hash(text, into: &hasher) }
}

/// A held place under one of its row's values: the keys of the overlay's sorted indexes, in
/// the value's order, then the place's.
struct Placed<Value: Comparable & Sendable>: Comparable, Sendable {
    var value: Value
    var location: IndexLocation

    /// Before every place with a value not below `value`: where a range read starts.
    static func first(_ value: Value) -> Self {
        Placed(value: value, location: IndexLocation(container: "", scope: "", path: ""))
    }

    static func < (a: Self, b: Self) -> Bool {
        a.value != b.value ? a.value < b.value : IndexQuery.precedes(a.location, b.location)
    }
}

/// A count of steps, shared by every copy of the value that holds it (a read works on a copy
/// of the overlay).
final class StepCounter: Sendable {
    private let count = Atomic<Int>(0)

    var value: Int { count.load(ordering: .relaxed) }

    func add(_ n: Int = 1) { count.add(n, ordering: .relaxed) }
}
