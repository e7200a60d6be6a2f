/// A sorted set of keys in short sorted runs, so an insert or a removal moves at most one run's
/// keys (and the list of runs), and a range is read from its first key on: what the overlay
/// needs to answer an indexed predicate from only the waiting rows the predicate reaches
/// (`IndexOverlay.candidates`), however many wait. The standard library has no ordered
/// collection, and a single sorted array would move every key on each insert.
struct SortedKeys<Key: Comparable & Sendable>: Sendable {
    /// Runs are split when they reach twice this length.
    static var runLength: Int { 128 }

    /// Non-empty sorted runs; every key of a run precedes every key of the next.
    private var runs: [[Key]] = []
    private(set) var count = 0

    /// The first run whose last key is not below `key` (`runs.count` when every key is).
    private func run(for key: Key) -> Int {
        var (low, high) = (0, runs.count)
        while low < high {
            let middle = (low + high) / 2
            if runs[middle][runs[middle].count - 1] < key { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The first position in `run` whose key is not below `key`.
    private static func position(of key: Key, in run: [Key]) -> Int {
        var (low, high) = (0, run.count)
        while low < high {
            let middle = (low + high) / 2
            if run[middle] < key { low = middle + 1 } else { high = middle }
        }
        return low
    }

    mutating func insert(_ key: Key) {
        guard !runs.isEmpty else {
            runs = [[key]]
            count = 1
            return
        }
        let r = min(run(for: key), runs.count - 1)
        let p = Self.position(of: key, in: runs[r])
        if p < runs[r].count && runs[r][p] == key { return }
        runs[r].insert(key, at: p)
        count += 1
        if runs[r].count >= 2 * Self.runLength {
            let upper = Array(runs[r][Self.runLength...])
            runs[r].removeSubrange(Self.runLength...)
            runs.insert(upper, at: r + 1)
        }
    }

    mutating func remove(_ key: Key) {
        let r = run(for: key)
        guard r < runs.count else { return }
        let p = Self.position(of: key, in: runs[r])
        guard p < runs[r].count && runs[r][p] == key else { return }
        runs[r].remove(at: p)
        count -= 1
        if runs[r].isEmpty { runs.remove(at: r) }
    }

    /// Calls `body` with each key from the first not below `lower`, in order, while it
    /// returns true.
    func forEach(from lower: Key, while body: (Key) -> Bool) {
        var r = run(for: lower)
        guard r < runs.count else { return }
        var p = Self.position(of: lower, in: runs[r])
        while r < runs.count {
            let run = runs[r]
            while p < run.count {
                guard body(run[p]) else { return }
                p += 1
            }
            r += 1
            p = 0
        }
    }
}
