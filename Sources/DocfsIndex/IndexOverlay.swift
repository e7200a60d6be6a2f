/// The journal's frames that the database does not hold yet, laid over the database rows they
/// touch: what a reader in any process adds to its SQLite snapshot so it sees every stitched
/// change (`IndexJournal`). `apply` does in memory exactly what `IndexDatabase` does in SQL, so
/// a row reads the same before and after its frame is committed.
struct IndexOverlay {
    /// A row as the frames leave it, with the sequence that last wrote it.
    struct Row {
        var record: IndexRecord
        var sequence: Int64
    }

    /// A journal frame, decoded.
    struct Frame {
        var sequence: Int64
        var entryBase: Int64
        var changes: [IndexChange]
    }

    /// The database rows the frames may touch, by place: their places are answered from
    /// `rows` instead (where the frames may have moved, changed or removed them).
    private(set) var replaced: Set<IndexLocation> = []
    /// The replaced rows and those the frames made, as the frames leave them.
    private(set) var rows: [IndexLocation: Row] = [:]
    /// Entries the frames removed, with the sequence of each removal.
    private(set) var removals: [(sequence: Int64, entry: Int64)] = []
    /// The last frame's sequence (0 when there are none).
    private(set) var newestSequence: Int64 = 0

    var isEmpty: Bool { newestSequence == 0 }

    static let empty = IndexOverlay()

    private init() {}

    /// What the database must be asked for: the places the frames name, the folders whose
    /// contents they move or remove, and entries they remove by number.
    struct Reach {
        var places: Set<IndexLocation> = []
        var folders: Set<IndexLocation> = []
        var entries: Set<Int64> = []
    }

    static func reach(of frames: [Frame]) -> Reach {
        var reach = Reach()
        for frame in frames {
            for change in frame.changes {
                switch change {
                case .put(let record): reach.places.insert(record.location)
                case .touch(let location, _, _): reach.places.insert(location)
                case .remove(let location): reach.folders.insert(location)
                case .removeEntries(let entries): reach.entries.formUnion(entries)
                case .move(let from, let to), .exchange(let from, let to):
                    reach.folders.insert(from)
                    reach.folders.insert(to)
                }
            }
        }
        return reach
    }

    /// `base` (the database rows within the frames' reach) with `frames` applied in order.
    init(base: [Row], frames: [Frame]) {
        for row in base {
            replaced.insert(row.record.location)
            rows[row.record.location] = row
        }
        for frame in frames {
            var entries = frame.entryBase
            for change in frame.changes { apply(change, sequence: frame.sequence, entries: &entries) }
            newestSequence = max(newestSequence, frame.sequence)
        }
    }

    private mutating func apply(_ change: IndexChange, sequence: Int64, entries: inout Int64) {
        switch change {
        case .put(var record):
            entries += 1
            record.entry = rows[record.location]?.record.entry ?? entries
            rows[record.location] = Row(record: record, sequence: sequence)
        case .touch(let location, let modified, let statusChanged):
            guard var row = rows[location] else { return }
            row.record.modified = modified
            row.record.statusChanged = statusChanged
            row.sequence = sequence
            rows[location] = row
        case .remove(let location):
            for place in rows.keys where Self.isSelfOrUnder(place, location) {
                removals.append((sequence, rows.removeValue(forKey: place)!.record.entry))
            }
        case .removeEntries(let gone):
            let gone = Set(gone)
            for (place, row) in rows where gone.contains(row.record.entry) {
                rows.removeValue(forKey: place)
                removals.append((sequence, row.record.entry))
            }
        case .move(let from, let to):
            move(from, to, sequence: sequence)
        case .exchange(let a, let b):
            let aside = IndexLocation(container: a.container, scope: a.scope, path: "\u{1}exchange")
            move(a, aside, sequence: sequence)
            move(b, a, sequence: sequence)
            move(aside, b, sequence: sequence)
        }
    }

    private mutating func move(_ from: IndexLocation, _ to: IndexLocation, sequence: Int64) {
        let moving = rows.filter { Self.isSelfOrUnder($0.key, from) }
        for place in moving.keys { rows.removeValue(forKey: place) }
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
            rows[row.record.location] = row
        }
    }

    /// Whether `place` is `folder` or under it (as the SQL's `path > 'f/' AND path < 'f0'`).
    static func isSelfOrUnder(_ place: IndexLocation, _ folder: IndexLocation) -> Bool {
        guard place.container == folder.container, place.scope == folder.scope else { return false }
        if place.path == folder.path { return true }
        let prefix = folder.path.utf8.count
        return place.path.utf8.count > prefix + 1 && place.path.utf8.starts(with: folder.path.utf8)
            && place.path.utf8.dropFirst(prefix).first == UInt8(ascii: "/")
    }
}
