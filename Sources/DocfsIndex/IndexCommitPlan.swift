/// The statements a batch of journal frames comes to: the frames' changes in order, less those
/// a later change in the same batch makes moot. A busy folder's record is then written once per
/// commit rather than once per name made in it, and a file's record once rather than at its
/// create and again at its close (issue 20 §0: the commit keeps up with the stream).
///
/// - A touch followed by another touch of the same place is folded into it (a touch takes the
///   larger times, so the later one can carry both).
/// - A put or touch followed by a put of the same place is dropped (a put writes the whole row);
///   the later put inserts, if the place has no row, with the entry number the first put would
///   have given it, as the overlay numbered it.
/// - An item's outbox entry after another of the same item is dropped (the sync engine sends
///   the item's state as it is when it gets to the first, once; the first keeps a folder made
///   before what is put in it ahead of those, though tar touches the folder again afterwards).
/// Only when nothing between them reaches the place: a remove, move or exchange ends what waits
/// at and under the places it names; a removal of entries by number (their places unknown)
/// ends everything waiting. Committed this way the database ends exactly as it would applying
/// every change (`IndexJournalTests` compares them step by step).
struct IndexCommitPlan {
    /// A change to apply, under the sequence of its frame; for a put, the entry number it
    /// inserts with.
    struct Step {
        var change: IndexChange
        var sequence: Int64
        var entry: Int64
    }

    /// The steps in order (the frames' sequence order).
    private(set) var steps: [Step] = []

    init(_ frames: [IndexOverlay.Frame]) {
        var planned: [Step?] = []
        /// Where the last put and touch of each place that may still be superseded are.
        var waiting: [IndexLocation: (put: Int?, touch: Int?)] = [:]
        /// For each folder, how many waiting places are under it.
        var under: [IndexLocation: Int] = [:]
        /// The items with an outbox entry in the batch.
        var outboxed: Set<Int64> = []

        func count(_ location: IndexLocation, _ delta: Int) {
            var path = Substring(location.path).unicodeScalars  // by scalars, as `IndexOverlay.link`
            while let slash = path.lastIndex(of: "/") {
                path = path[..<slash]
                let folder = IndexLocation(container: location.container, scope: location.scope, path: String(path))
                let n = (under[folder] ?? 0) + delta
                under[folder] = n > 0 ? n : nil
            }
        }
        func end(_ location: IndexLocation) {
            if under[location] != nil {
                waiting.removeAll()  // rare: a folder with waiting places under it moved or went
                under.removeAll()
            } else if waiting.removeValue(forKey: location) != nil {
                count(location, -1)
            }
        }

        for frame in frames {
            var entries = frame.entryBase
            for change in frame.changes {
                switch change {
                case .put(let record):
                    entries += 1
                    var entry = entries
                    let location = record.location
                    if let before = waiting[location] {
                        if let put = before.put {
                            entry = planned[put]!.entry
                            planned[put] = nil
                        }
                        if let touch = before.touch { planned[touch] = nil }
                    } else {
                        count(location, 1)
                    }
                    waiting[location] = (put: planned.count, touch: nil)
                    planned.append(Step(change: change, sequence: frame.sequence, entry: entry))
                case .touch(let location, var modified, var statusChanged):
                    if let touch = waiting[location]?.touch, case let .touch(_, earlierModified, earlierChanged) = planned[touch]!.change {
                        modified = max(modified, earlierModified)
                        statusChanged = max(statusChanged, earlierChanged)
                        planned[touch] = nil
                    }
                    if waiting[location] == nil { count(location, 1) }
                    waiting[location, default: (put: nil, touch: nil)].touch = planned.count
                    planned.append(Step(change: .touch(location, modified: modified, statusChanged: statusChanged),
                                        sequence: frame.sequence, entry: 0))
                case .remove(let location, _):
                    end(location)
                    planned.append(Step(change: change, sequence: frame.sequence, entry: 0))
                case .move(let from, let to):
                    end(from)
                    end(to)
                    planned.append(Step(change: change, sequence: frame.sequence, entry: 0))
                case .exchange(let a, let b):
                    end(a)
                    end(b)
                    planned.append(Step(change: change, sequence: frame.sequence, entry: 0))
                case .removeEntries:
                    waiting.removeAll()
                    under.removeAll()
                    planned.append(Step(change: change, sequence: frame.sequence, entry: 0))
                case .outbox(let item):
                    if outboxed.insert(item).inserted {
                        planned.append(Step(change: change, sequence: frame.sequence, entry: 0))
                    }
                }
            }
        }
        steps = planned.compactMap { $0 }
    }
}
