/// A parsed `docfs query` predicate (DESIGN §5 S3): comparisons of record attributes with
/// values, combined with AND, OR and NOT. Values are already resolved (sizes in bytes, dates as
/// instants), so one predicate means the same in SQL (`IndexQuery`) and in Swift
/// (`matches(_:)`, used by `--watch`).
public indirect enum QueryPredicate: Sendable, Equatable {
    case and(QueryPredicate, QueryPredicate)
    case or(QueryPredicate, QueryPredicate)
    case not(QueryPredicate)
    case comparison(Comparison)
    /// Matches every record (an empty predicate, or `*`).
    case all
}

extension QueryPredicate {
    /// The attributes the predicate tests.
    var attributes: Set<IndexAttribute> {
        switch self {
        case .and(let a, let b), .or(let a, let b): a.attributes.union(b.attributes)
        case .not(let a): a.attributes
        case .comparison(let c): [c.attribute]
        case .all: []
        }
    }
}

/// One `attribute operator value` test.
public struct Comparison: Sendable, Equatable {
    public var attribute: IndexAttribute
    public var op: ComparisonOperator
    public var value: PredicateValue
    /// `[c]`: strings compared without regard to case.
    public var caseInsensitive: Bool

    public init(attribute: IndexAttribute, op: ComparisonOperator, value: PredicateValue, caseInsensitive: Bool = false) {
        self.attribute = attribute
        self.op = op
        self.value = value
        self.caseInsensitive = caseInsensitive
    }
}

/// The operators of the predicate language.
public enum ComparisonOperator: String, Sendable, CaseIterable {
    case equal = "=="
    case notEqual = "!="
    case less = "<"
    case lessOrEqual = "<="
    case greater = ">"
    case greaterOrEqual = ">="
    case like = "LIKE"
    case beginsWith = "BEGINSWITH"
    case endsWith = "ENDSWITH"
    case contains = "CONTAINS"

    /// Operators that only make sense on text.
    var isTextual: Bool { [.like, .beginsWith, .endsWith, .contains].contains(self) }
    var isOrdering: Bool { [.less, .lessOrEqual, .greater, .greaterOrEqual].contains(self) }
}

/// A resolved value on the right of a comparison.
public enum PredicateValue: Sendable, Equatable {
    case text(String)
    case integer(Int64)
    case bool(Bool)
    /// An instant (seconds since the epoch); `day` when the literal named a whole calendar day
    /// (`2026-01-01`), which `==` matches as a whole and the orderings take by its bounds.
    case date(Double, day: Double?)
}
