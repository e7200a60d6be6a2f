/// The stitched changes the database does not hold yet, kept as the places they reached and
/// what those places hold now: what a reader lays over its SQLite snapshot so it sees every
/// stitched change (`IndexJournal`). `apply` does in memory exactly what `IndexDatabase` does in
/// SQL, so a row reads the same before and after its frame is committed.
///
/// It is incremental, so its cost follows the work and not the number of changes waiting
/// (issue 20 §0): a frame is applied once, when it is stitched, loading from the database only
/// the rows it reaches that the overlay does not hold yet (`Base`); a lookup is a dictionary
/// read; a commit drops what it made durable (`prune`), oldest first, in time proportional to
/// what it committed. The daemon keeps one for its whole life; a reader in another process
/// makes one from the frames after its snapshot.
///
/// A place the overlay *holds* is answered from it, present or absent; any other place reads as
/// the database says. Held places are linked to their folders (`links`), so a folder's removal
/// or move visits only what is under it.
struct IndexOverlay: Sendable {
    /// A row as the frames leave it, with the sequence that last wrote it.
    struct Row: Sendable {
        var record: IndexRecord
        var sequence: Int64
    }

    /// A journal frame, decoded.
    struct Frame: Sendable {
        var sequence: Int64
        var entryBase: Int64
        var changes: [IndexChange]
    }

    /// Where the database's rows come from when a change reaches a place the overlay does not
    /// hold: a snapshot that holds every frame the overlay has dropped.
    protocol Base {
        func row(at location: IndexLocation) throws -> Row?
        /// The entry number of the row at `location`, if there is one (a put needs no more).
        func entry(at location: IndexLocation) throws -> Int64?
        /// The rows strictly under the folder at `location`.
        func rows(under location: IndexLocation) throws -> [Row]
        func rows(entries: [Int64]) throws -> [Row]
    }

    /// What the overlay says of a place.
    enum Lookup {
        /// Not held: the database answers.
        case notHeld
        case absent
        case present(Row)
    }

    private struct Place: Sendable {
        var row: Row?
        /// The sequence of the frame that last reached the place: it is dropped once that
        /// frame is committed.
        var reachedBy: Int64
    }

    private var places: [IndexLocation: Place] = [:]
    /// For each folder location, the names under it that lead to held places, with how many
    /// held places each leads to.
    private var links: [IndexLocation: [ByteOrderedText: Int]] = [:]
    private var byID: [Int64: Set<IndexLocation>] = [:]
    /// References' places by their own files' inodes (a reference's id is its original's).
    private var byReferenceInode: [UInt64: Set<IndexLocation>] = [:]
    private var byEntry: [Int64: IndexLocation] = [:]
    /// Present rows by name and by dates, in the order SQLite's indexes keep them: an indexed
    /// predicate reads only the waiting rows it reaches (`candidates`).
    private var byName = SortedKeys<Placed<ByteOrderedText>>()
    private var byModified = SortedKeys<Placed<Double>>()
    private var byCreated = SortedKeys<Placed<Double>>()
    /// Places in the order frames reached them, for `prune`.
    private var reached = FIFO<(sequence: Int64, location: IndexLocation)>()
    /// Entries the frames removed, with the sequence of each removal and the other machine
    /// whose change it was (empty for this one's), oldest first.
    private var removed = FIFO<Removal>()
    /// The last frame's sequence (0 when none was applied).
    private(set) var newestSequence: Int64 = 0
    /// Frames up to this sequence were dropped (committed): a snapshot older than that lacks them.
    private(set) var prunedThrough: Int64 = 0
    /// Places visited by `apply`, `prune` and `candidates`, for tests that bound the cost of a
    /// read (shared by copies, so a read of a copy counts too).
    private let counter = StepCounter()
    var steps: Int { counter.value }

    /// The entry numbers of places whose frames were committed (`prune`), as the database holds
    /// them, when the overlay lives as long as its writer (the daemon's): a put at such a place
    /// (a file closed again) then reads nothing from the database. They stay exact, since every
    /// change to a place passes through `places` (a remove or move holds every row under it
    /// first) and `prune` writes what it drops here. Bounded: emptied when full.
    private var committedEntries: [IndexLocation: Int64]? = nil
    static let committedEntriesKept = 1 << 15

    /// Changes reached the database without passing through the overlay (`IndexDatabase.apply`):
    /// the entry numbers remembered may be stale.
    mutating func forgetCommittedEntries() {
        if committedEntries != nil { committedEntries = [:] }
    }

    /// `remembersCommittedEntries`: see `committedEntries` (for the writer's own overlay).
    init(remembersCommittedEntries: Bool = false) {
        if remembersCommittedEntries { committedEntries = [:] }
    }

    /// Whether the overlay holds nothing (every frame applied is committed, or none was).
    var isEmpty: Bool { places.isEmpty && removed.isEmpty }

    /// How many places it holds (it hides at most that many database rows).
    var heldCount: Int { places.count }

    // MARK: - Reading

    func lookup(_ location: IndexLocation) -> Lookup {
        guard let place = places[location] else { return .notHeld }
        return place.row.map(Lookup.present) ?? .absent
    }

    func holds(_ location: IndexLocation) -> Bool { places[location] != nil }

    /// The held places (present or absent).
    var heldLocationList: [IndexLocation] { Array(places.keys) }

    /// Every present row.
    var rows: [Row] { places.values.compactMap(\.row) }

    func rows(id: Int64) -> [Row] {
        (byID[id] ?? []).compactMap { places[$0]?.row }
    }

    /// The references whose own file is the inode `backingInode`.
    func referenceRows(backingInode: UInt64) -> [Row] {
        (byReferenceInode[backingInode] ?? []).compactMap { places[$0]?.row }
    }

    func rows(entries: Set<Int64>) -> [Row] {
        entries.compactMap { byEntry[$0].flatMap { places[$0]?.row } }
    }

    /// Entries removed after `sequence`, oldest first: read from the newest back, so a watcher
    /// asking often reads only what is new to it.
    func removals(after sequence: Int64) -> [Removal] {
        var found: [Removal] = []
        for removal in removed.elements.reversed() {
            guard removal.sequence > sequence else { break }
            counter.add()
            found.append(removal)
        }
        return found.reversed()
    }

    /// The present rows written by frames after `sequence` (in no order): read from the newest
    /// frame back, so the cost follows what is new to the asker, not what waits.
    func rows(writtenAfter sequence: Int64) -> [Row] {
        var seen = Set<IndexLocation>()
        var found: [Row] = []
        for reach in reached.elements.reversed() {
            guard reach.sequence > sequence else { break }
            counter.add()
            guard seen.insert(reach.location).inserted, let row = places[reach.location]?.row, row.sequence > sequence else { continue }
            found.append(row)
        }
        return found
    }

    /// The present rows that may match `predicate` (a superset of those that do): when it
    /// narrows on keys the overlay indexes (names, dates, ids; `IndexedReach`), only the rows
    /// those ranges reach are read, however many wait; otherwise every row.
    func rows(mayMatch predicate: QueryPredicate) -> [Row] {
        guard Self.isIndexed(predicate) else {
            counter.add(places.count)
            return rows
        }
        // The narrowest of a conjunction's ranges, found by reading each up to a budget that
        // grows fourfold: the cost follows the smallest range, not the largest.
        var budget = 64
        while true {
            if case .found(let found) = candidates(predicate, atMost: budget) {
                return found.compactMap { places[$0]?.row }
            }
            budget = budget >= places.count ? Int.max : budget * 4
        }
    }

    /// Whether some index narrows `predicate`: a comparison with a range, a conjunction with one
    /// such term, a disjunction of such terms.
    private static func isIndexed(_ predicate: QueryPredicate) -> Bool {
        switch predicate {
        case .all, .not: false
        case .comparison(let c): IndexedReach(c) != nil
        case .and(let a, let b): isIndexed(a) || isIndexed(b)
        case .or(let a, let b): isIndexed(a) && isIndexed(b)
        }
    }

    private enum Candidates {
        case found(Set<IndexLocation>)
        /// More than the budget.
        case tooMany
    }

    /// The held places an indexed `predicate`'s ranges reach, if they are at most `budget`.
    private func candidates(_ predicate: QueryPredicate, atMost budget: Int) -> Candidates {
        switch predicate {
        case .comparison(let c):
            return places(reached: IndexedReach(c)!, atMost: budget)
        case .or(let a, let b):
            guard case .found(let x) = candidates(a, atMost: budget), case .found(let y) = candidates(b, atMost: budget) else { return .tooMany }
            let both = x.union(y)
            return both.count <= budget ? .found(both) : .tooMany
        case .and:
            for term in Self.indexedTerms(of: predicate) {
                let found: Candidates
                switch term {
                case .reach(let reach): found = places(reached: reach, atMost: budget)
                case .term(let p): found = candidates(p, atMost: budget)
                }
                if case .found = found { return found }
            }
            return .tooMany
        case .all, .not:
            return .tooMany  // not reached: `isIndexed` said no
        }
    }

    private enum IndexedTerm {
        case reach(IndexedReach)
        case term(QueryPredicate)
    }

    /// The terms of a conjunction an index narrows, with the ranges of one date attribute
    /// joined into one (`modified >= a AND modified < b`).
    private static func indexedTerms(of predicate: QueryPredicate) -> [IndexedTerm] {
        var terms: [IndexedTerm] = []
        var modified: (Double, Double)? = nil
        var created: (Double, Double)? = nil
        func join(_ range: inout (Double, Double)?, _ from: Double, _ through: Double) {
            range = range.map { (max($0.0, from), min($0.1, through)) } ?? (from, through)
        }
        func visit(_ p: QueryPredicate) {
            switch p {
            case .and(let a, let b):
                visit(a)
                visit(b)
            case .comparison(let c):
                switch IndexedReach(c) {
                case .modified(let from, let through): join(&modified, from, through)
                case .created(let from, let through): join(&created, from, through)
                case .some(let reach): terms.append(.reach(reach))
                case nil: break
                }
            default:
                if isIndexed(p) { terms.append(.term(p)) }
            }
        }
        visit(predicate)
        if let (from, through) = modified { terms.append(.reach(.modified(from: from, through: through))) }
        if let (from, through) = created { terms.append(.reach(.created(from: from, through: through))) }
        return terms
    }

    /// The held places `reach` reaches, if they are at most `budget`.
    private func places(reached reach: IndexedReach, atMost budget: Int) -> Candidates {
        var found = Set<IndexLocation>()
        var over = false
        func collect<Value>(_ keys: SortedKeys<Placed<Value>>, from lower: Value, while inRange: (Value) -> Bool) {
            keys.forEach(from: .first(lower)) { key in
                counter.add()
                guard inRange(key.value) else { return false }
                guard found.count < budget else {
                    over = true
                    return false
                }
                found.insert(key.location)
                return true
            }
        }
        switch reach {
        case .name(let name):
            let wanted = ByteOrderedText(name)
            collect(byName, from: wanted) { $0 == wanted }
        case .nameBeginning(let prefix):
            collect(byName, from: ByteOrderedText(prefix)) { $0.text.utf8.starts(with: prefix.utf8) }
        case .modified(let from, let through):
            if from <= through { collect(byModified, from: from) { $0 <= through } }
        case .created(let from, let through):
            if from <= through { collect(byCreated, from: from) { $0 <= through } }
        case .id(let id):
            counter.add()
            found = byID[id] ?? []
            over = found.count > budget
        }
        return over ? .tooMany : .found(found)
    }

    // MARK: - Applying

    /// Applies `frame`, loading from `base` the rows it reaches that are not held.
    mutating func apply(_ frame: Frame, base: some Base) throws {
        var entries = frame.entryBase
        for change in frame.changes { try apply(change, sequence: frame.sequence, entries: &entries, base) }
        newestSequence = max(newestSequence, frame.sequence)
    }

    private mutating func apply(_ change: IndexChange, sequence: Int64, entries: inout Int64, _ base: some Base) throws {
        switch change {
        case .put(var record):
            entries += 1
            let location = record.location
            // The row there keeps its entry number; the rest of it is replaced, so a place not
            // held needs only its number read.
            counter.add()
            if let place = places[location] {
                record.entry = place.row?.record.entry ?? entries
            } else if let known = committedEntries?[location] {
                record.entry = known
            } else {
                record.entry = try base.entry(at: location) ?? entries
            }
            set(location, Row(record: record, sequence: sequence), sequence: sequence)
        case .touch(let location, let modified, let statusChanged):
            try hold(location, sequence: sequence, base)
            guard var row = places[location]?.row else { return }
            row.record.modified = max(row.record.modified, modified)
            row.record.statusChanged = max(row.record.statusChanged, statusChanged)
            row.sequence = sequence
            set(location, row, sequence: sequence)
        case .remove(let location, let machine):
            for (place, row) in try subtree(location, sequence: sequence, base) {
                removed.append(Removal(sequence: sequence, entry: row.record.entry, machine: machine))
                set(place, nil, sequence: sequence)
            }
        case .removeEntries(let gone):
            let unheld = gone.filter { byEntry[$0] == nil }
            if !unheld.isEmpty {
                for row in try base.rows(entries: unheld) where places[row.record.location] == nil {
                    counter.add()
                    set(row.record.location, row, sequence: sequence)
                }
            }
            for entry in gone {
                guard let place = byEntry[entry] else { continue }
                removed.append(Removal(sequence: sequence, entry: entry, machine: ""))
                set(place, nil, sequence: sequence)
            }
        case .move(let from, let to):
            try move(from, to, sequence: sequence, base)
        case .exchange(let a, let b):
            let aside = IndexLocation(container: a.container, scope: a.scope, path: "\u{1}exchange")
            try move(a, aside, sequence: sequence, base)
            try move(b, a, sequence: sequence, base)
            try move(aside, b, sequence: sequence, base)
        case .outbox:
            break  // no record changes
        }
    }

    private mutating func move(_ from: IndexLocation, _ to: IndexLocation, sequence: Int64, _ base: some Base) throws {
        let moving = try subtree(from, sequence: sequence, base)
        // What the destination held is taken over (the SQL's update would fail on it; a
        // rename removes it first).
        _ = try subtree(to, sequence: sequence, base)
        for (place, _) in moving { set(place, nil, sequence: sequence) }
        let depth = from.path.unicodeScalars.count
        for (place, var row) in moving {
            row.record.container = to.container
            row.record.scope = to.scope
            if place.path == from.path {
                row.record.path = to.path
                row.record.name = to.name
            } else {
                row.record.path = to.path + String(String.UnicodeScalarView(place.path.unicodeScalars.dropFirst(depth)))
            }
            row.sequence = sequence
            set(row.record.location, row, sequence: sequence)
        }
    }

    /// The present rows at and under `location`, after holding every database row there.
    private mutating func subtree(_ location: IndexLocation, sequence: Int64, _ base: some Base) throws -> [(IndexLocation, Row)] {
        try hold(location, sequence: sequence, base)
        for row in try base.rows(under: location) where places[row.record.location] == nil {
            counter.add()
            set(row.record.location, row, sequence: sequence)
        }
        var found: [(IndexLocation, Row)] = []
        var folders = [location]
        if let row = places[location]?.row { found.append((location, row)) }
        while let folder = folders.popLast() {
            for name in (links[folder] ?? [:]).keys {
                counter.add()
                let child = IndexLocation(container: folder.container, scope: folder.scope, path: folder.path + "/" + name.text)
                if let row = places[child]?.row { found.append((child, row)) }
                if links[child] != nil { folders.append(child) }
            }
        }
        return found
    }

    /// Makes `location` held, with the database's row there (if any).
    private mutating func hold(_ location: IndexLocation, sequence: Int64, _ base: some Base) throws {
        counter.add()
        guard places[location] == nil else { return }
        set(location, try base.row(at: location), sequence: sequence)
    }

    /// Sets what `location` holds, reached by the frame `sequence`.
    private mutating func set(_ location: IndexLocation, _ row: Row?, sequence: Int64) {
        let old = places.updateValue(Place(row: row, reachedBy: sequence), forKey: location)
        if old == nil {
            link(location, by: 1)
        }
        if let old = old?.row { unindex(old.record, at: location) }
        if let row { index(row.record, at: location) }
        if old?.reachedBy != sequence { reached.append((sequence, location)) }
    }

    private mutating func index(_ record: IndexRecord, at location: IndexLocation) {
        byID[record.id, default: []].insert(location)
        byEntry[record.entry] = location
        if record.isExternal { byReferenceInode[record.backingInode, default: []].insert(location) }
        byName.insert(Placed(value: ByteOrderedText(record.name), location: location))
        if !record.modified.isNaN { byModified.insert(Placed(value: record.modified, location: location)) }
        if !record.created.isNaN { byCreated.insert(Placed(value: record.created, location: location)) }
    }

    private mutating func unindex(_ record: IndexRecord, at location: IndexLocation) {
        byName.remove(Placed(value: ByteOrderedText(record.name), location: location))
        byModified.remove(Placed(value: record.modified, location: location))
        byCreated.remove(Placed(value: record.created, location: location))
        if byID[record.id]?.remove(location) != nil, byID[record.id]!.isEmpty { byID[record.id] = nil }
        if byEntry[record.entry] == location { byEntry[record.entry] = nil }
        if record.isExternal, byReferenceInode[record.backingInode]?.remove(location) != nil,
           byReferenceInode[record.backingInode]!.isEmpty {
            byReferenceInode[record.backingInode] = nil
        }
    }

    /// Counts a held place in (or out of) the links of each folder above it.
    private mutating func link(_ location: IndexLocation, by delta: Int) {
        // By scalars: a name may start with a combining mark, which a `Character` would join
        // to the slash before it.
        var path = Substring(location.path).unicodeScalars
        while let slash = path.lastIndex(of: "/") {
            let name = ByteOrderedText(String(path[path.index(after: slash)...]))
            path = path[..<slash]
            let folder = IndexLocation(container: location.container, scope: location.scope, path: String(path))
            let count = (links[folder]?[name] ?? 0) + delta
            if count > 0 {
                links[folder, default: [:]][name] = count
            } else {
                links[folder]?[name] = nil
                if links[folder]?.isEmpty == true { links[folder] = nil }
            }
        }
    }

    // MARK: - Dropping what is committed

    /// Frames up to `sequence` are in the database: the places only they reached, and their
    /// removals, are dropped.
    mutating func prune(through sequence: Int64) {
        prunedThrough = max(prunedThrough, sequence)
        while let first = reached.first, first.sequence <= sequence {
            reached.removeFirst()
            counter.add()
            guard let place = places[first.location], place.reachedBy == first.sequence else { continue }
            places[first.location] = nil
            if committedEntries != nil {
                if committedEntries!.count >= Self.committedEntriesKept { committedEntries!.removeAll(keepingCapacity: true) }
                committedEntries![first.location] = place.row?.record.entry
            }
            if let row = place.row { unindex(row.record, at: first.location) }
            link(first.location, by: -1)
        }
        while let first = removed.first, first.sequence <= sequence { removed.removeFirst() }
    }

    /// Whether `place` is `folder` or under it (as the SQL's `path > 'f/' AND path < 'f0'`).
    static func isSelfOrUnder(_ place: IndexLocation, _ folder: IndexLocation) -> Bool {
        guard place.container.hasSameBytes(as: folder.container), place.scope.hasSameBytes(as: folder.scope) else { return false }
        if place.path.hasSameBytes(as: folder.path) { return true }
        let prefix = folder.path.utf8.count
        return place.path.utf8.count > prefix + 1 && place.path.utf8.starts(with: folder.path.utf8)
            && place.path.utf8.dropFirst(prefix).first == UInt8(ascii: "/")
    }
}

/// A first-in first-out queue whose `removeFirst` costs the same however long it is (the
/// standard library's array shifts every element).
struct FIFO<Element> {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }
    var first: Element? { isEmpty ? nil : storage[head] }
    var elements: ArraySlice<Element> { storage[head...] }

    mutating func append(_ element: Element) { storage.append(element) }

    mutating func removeFirst() {
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 1024 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
    }
}

extension FIFO: Sendable where Element: Sendable {}
