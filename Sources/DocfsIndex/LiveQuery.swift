import DocfsCore

/// A query kept up to date (`docfs query --watch`, the live NSMetadataQuery of DESIGN §5 S3):
/// its first results, then, each time it is asked, what entered, changed in or left the result
/// set since — from the index's change sequence, so it works from any process while another
/// writes, and a name made and removed between two looks is not reported.
public struct LiveQuery {
    /// How a result changed.
    public enum Event: Equatable, Sendable {
        /// Now matches (new, or changed so it matches).
        case added(IndexRecord)
        /// Still matches, and its record changed (renames and moves included: an entry keeps
        /// its number when its name changes).
        case changed(IndexRecord)
        /// No longer matches, or is gone: the record as it was last reported, with the machine
        /// whose change removed it as its `remoteMachine` (empty for this one's; as last
        /// reported when the watcher fell so far behind that it read the results again).
        case removed(IndexRecord)

        public var record: IndexRecord {
            switch self {
            case .added(let r), .changed(let r), .removed(let r): r
            }
        }

        public var name: String {
            switch self {
            case .added: "added"
            case .changed: "changed"
            case .removed: "removed"
            }
        }
    }

    public let query: IndexQuery
    private let index: IndexDatabase
    /// The results as last reported, by entry.
    private var known: [Int64: IndexRecord] = [:]
    private var sequence: Int64
    /// The first results, in the query's order.
    public let initial: [IndexRecord]

    /// Reads the first results (`query`'s limit is not applied to a live query).
    public init(index: IndexDatabase, query: IndexQuery) throws(DocfsError) {
        var query = query
        query.limit = nil
        self.query = query
        self.index = index
        (initial, sequence) = try index.recordsAndSequence(matching: query)
        for record in initial { known[record.entry] = record }
    }

    /// What changed in the results since the last look: added, then changed, then removed,
    /// each by path.
    public mutating func poll() throws(DocfsError) -> [Event] {
        let changes = try index.changes(after: sequence)
        var now: [Int64: IndexRecord?] = [:]
        /// Which machine made each change (an entry's last), where the changes say.
        var madeBy: [Int64: String] = [:]
        if changes.complete {
            for record in changes.written {
                now[record.entry] = query.matches(record) ? record : nil
                madeBy[record.entry] = record.remoteMachine
            }
            for entry in changes.removed {
                now[entry] = .some(nil)
                madeBy[entry] = changes.removedBy[entry] ?? ""
            }
            sequence = changes.sequence
        } else {
            // Removals that old were pruned: compare with the whole result set again.
            let (records, latest) = try index.recordsAndSequence(matching: query)
            for entry in known.keys { now[entry] = .some(nil) }
            for record in records { now[record.entry] = record }
            sequence = latest
        }
        var events: [Event] = []
        for (entry, result) in now {
            switch (known[entry], result) {
            case (nil, let record?): events.append(.added(record))
            case (let old?, let record?) where !old.showsTheSame(as: record): events.append(.changed(record))
            case (var old?, nil):
                if let machine = madeBy[entry] { old.remoteMachine = machine }
                events.append(.removed(old))
            default: break
            }
            known[entry] = result
        }
        return events.sorted { a, b in
            let (x, y) = (Self.rank(a), Self.rank(b))
            return x != y ? x < y : a.record.path.utf8.lexicographicallyPrecedes(b.record.path.utf8)
        }
    }

    private static func rank(_ event: Event) -> Int {
        switch event {
        case .added: 0
        case .changed: 1
        case .removed: 2
        }
    }
}
