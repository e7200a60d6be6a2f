import GRDB

/// A `docfs query`: a predicate, the scopes it looks in, an order and a limit, compiled to one
/// SQL statement with bound arguments (values never become SQL text).
public struct IndexQuery: Sendable, Equatable {
    public enum Scope: String, Sendable, CaseIterable {
        case documents, data, external, all
    }

    public struct SortKey: Sendable, Equatable {
        public var attribute: IndexAttribute
        public var descending: Bool

        public init(attribute: IndexAttribute, descending: Bool = false) {
            self.attribute = attribute
            self.descending = descending
        }

        /// A key as `--sort` takes it: an attribute (or an alias), optionally `:asc` or `:desc`.
        public init?(parsing text: String) {
            let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
            guard let attribute = IndexAttribute.named(parts.first ?? ""),
                  parts.count == 1 || ["asc", "desc"].contains(parts[1].lowercased()) else { return nil }
            self.init(attribute: attribute, descending: parts.count == 2 && parts[1].lowercased() == "desc")
        }

        /// As `init(parsing:)` reads it.
        public var text: String { attribute.rawValue + (descending ? ":desc" : "") }
    }

    public var predicate: QueryPredicate
    public var scope: Scope
    public var sort: [SortKey]
    public var limit: Int?

    public init(predicate: QueryPredicate, scope: Scope = .documents, sort: [SortKey] = [], limit: Int? = nil) {
        self.predicate = predicate
        self.scope = scope
        self.sort = sort
        self.limit = limit
    }

    /// Whether `record` is in the query's scope and matches its predicate.
    public func matches(_ record: IndexRecord) -> Bool {
        (scope == .all || record.scope == scope.rawValue) && predicate.matches(record)
    }

    /// Whether `a` comes before `b` in the query's order (what its ORDER BY clause says, as
    /// SQLite compares: text by its UTF-8 bytes, tags as their JSON text).
    public func areInOrder(_ a: IndexRecord, _ b: IndexRecord) -> Bool {
        // Text by its bytes, as SQLite compares: canonically equivalent spellings differ.
        for key in sort {
            let (x, y) = (a.value(of: key.attribute), b.value(of: key.attribute))
            if Self.less(x, y) { return !key.descending }
            if Self.less(y, x) { return key.descending }
        }
        if !a.path.hasSameBytes(as: b.path) { return a.path.bytesPrecede(b.path) }
        return a.entry < b.entry
    }

    /// Whether place `a` comes before `b` (by container, scope and path, as SQLite orders them).
    static func precedes(_ a: IndexLocation, _ b: IndexLocation) -> Bool {
        if !a.container.hasSameBytes(as: b.container) { return a.container.bytesPrecede(b.container) }
        if !a.scope.hasSameBytes(as: b.scope) { return a.scope.bytesPrecede(b.scope) }
        return a.path.bytesPrecede(b.path)
    }

    private static func less(_ x: RecordValue, _ y: RecordValue) -> Bool {
        switch (x, y) {
        case (.text(let a), .text(let b)): a.bytesPrecede(b)
        case (.integer(let a), .integer(let b)): a < b
        case (.date(let a), .date(let b)): a < b
        case (.bool(let a), .bool(let b)): !a && b
        case (.list(let a), .list(let b)): IndexDatabase.encodeTags(a).utf8.lexicographicallyPrecedes(IndexDatabase.encodeTags(b).utf8)
        default: false
        }
    }

    /// The WHERE clause and its arguments. A predicate on names alone (a pattern, say) is
    /// tested on the name index, a fifth of the table's size, and only the rows it selects
    /// are read whole.
    func whereClause() -> (sql: String, arguments: StatementArguments) {
        var arguments = StatementArguments()
        var sql = Self.sql(predicate, &arguments)
        if scope != .all {
            sql = "scope = ? AND (\(sql))"
            arguments = ([scope.rawValue] as StatementArguments) + arguments
        }
        if !predicate.attributes.isEmpty && predicate.attributes.isSubset(of: [.name, .path, .container, .scope]) {
            sql = "(container, scope, path) IN (SELECT container, scope, path FROM items INDEXED BY items_name WHERE \(sql))"
        }
        return (sql, arguments)
    }

    func orderClause() -> String {
        let keys = sort.map { "\($0.attribute.column)\($0.descending ? " DESC" : "")" }
        return (keys + ["path", "entry"]).joined(separator: ", ")
    }

    private static func sql(_ predicate: QueryPredicate, _ arguments: inout StatementArguments) -> String {
        switch predicate {
        case .all:
            return "1"
        case .and(let a, let b):
            return "(\(sql(a, &arguments)) AND \(sql(b, &arguments)))"
        case .or(let a, let b):
            return "(\(sql(a, &arguments)) OR \(sql(b, &arguments)))"
        case .not(let a):
            return "(NOT \(sql(a, &arguments)))"
        case .comparison(let c):
            return sql(c, &arguments)
        }
    }

    private static func sql(_ c: Comparison, _ arguments: inout StatementArguments) -> String {
        let column = c.attribute.column
        switch (c.attribute.valueKind, c.value) {
        case (.text, .text(let wanted)) where !c.caseInsensitive:
            // SQLite's own operators, which its indexes serve (an exact name is one lookup);
            // both compare UTF-8 bytes, as TextMatching does.
            switch c.op {
            case .like:
                arguments += [glob(fromPattern: wanted)]
                return "\(column) GLOB ?"
            case .beginsWith, .endsWith, .contains:
                let literal = globLiteral(wanted)
                arguments += [c.op == .beginsWith ? literal + "*" : c.op == .endsWith ? "*" + literal : "*" + literal + "*"]
                return "\(column) GLOB ?"
            default:
                arguments += [wanted]
                return "\(column) \(c.op.rawValue) ?"
            }
        case (.text, .text(let wanted)):
            arguments += [c.op.rawValue, wanted, c.caseInsensitive]
            return "\(IndexFunctions.match.name)(\(column), ?, ?, ?)"
        case (.list, .text(let wanted)):
            let op = c.op == .notEqual ? ComparisonOperator.equal : c.op
            arguments += [op.rawValue, wanted, c.caseInsensitive]
            let exists = "EXISTS (SELECT 1 FROM json_each(items.tags) WHERE \(IndexFunctions.match.name)(json_each.value, ?, ?, ?))"
            return c.op == .notEqual ? "(NOT \(exists))" : exists
        case (_, .integer(let n)):
            arguments += [n]
            return "\(column) \(c.op.rawValue) ?"
        case (_, .bool(let b)):
            arguments += [b]
            return "\(column) \(c.op == .equal ? "=" : "!=") ?"
        case (_, .date(let instant, nil)):
            arguments += [instant]
            return "\(column) \(c.op.rawValue) ?"
        case (_, .date(let start, .some(let end))):
            switch c.op {
            case .equal:
                arguments += [start, end]
                return "(\(column) >= ? AND \(column) < ?)"
            case .notEqual:
                arguments += [start, end]
                return "(\(column) < ? OR \(column) >= ?)"
            case .less, .greaterOrEqual:
                arguments += [start]
                return "\(column) \(c.op == .less ? "<" : ">=") ?"
            default:
                arguments += [end]
                return "\(column) \(c.op == .lessOrEqual ? "<" : ">=") ?"
            }
        default:
            return "0"  // the parser lets no other pairing through
        }
    }
}

/// A LIKE pattern (`*`, `?`, `\\*` and `\\?`) as a GLOB pattern: the same wildcards, every other
/// character literal (GLOB's `[` is written `[[]`).
private func glob(fromPattern pattern: String) -> String {
    var result = ""
    var scalars = pattern.unicodeScalars.makeIterator()
    while let c = scalars.next() {
        switch c {
        case "\\":
            // `\*` and `\?` are the characters themselves; any other backslash is one.
            var lookahead = scalars
            if let next = lookahead.next(), next == "*" || next == "?" {
                result += "[\(next)]"
                scalars = lookahead
            } else {
                result += "\\"
            }
        case "[": result += "[[]"
        default: result.unicodeScalars.append(c)
        }
    }
    return result
}

/// Text matched literally in a GLOB pattern.
private func globLiteral(_ text: String) -> String {
    var result = ""
    for c in text.unicodeScalars {
        switch c {
        case "*", "?", "[": result += "[\(c)]"
        default: result.unicodeScalars.append(c)
        }
    }
    return result
}

/// The SQL functions the index registers on every connection, so SQL and Swift share one
/// meaning of the text operators.
enum IndexFunctions {
    /// docfs_match(text, operator, value, ignoreCase)
    static let match = DatabaseFunction("docfs_match", argumentCount: 4, pure: true) { values in
        guard let text = String.fromDatabaseValue(values[0]), let opName = String.fromDatabaseValue(values[1]),
              let op = ComparisonOperator(rawValue: opName), let wanted = String.fromDatabaseValue(values[2]) else { return false }
        let ignoreCase = Bool.fromDatabaseValue(values[3]) ?? false
        return TextMatching.test(text, op, wanted, caseInsensitive: ignoreCase)
    }
}
