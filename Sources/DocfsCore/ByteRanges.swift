/// A set of byte ranges of a file, merged and in order: the bytes of a kept version a write
/// session saved before it overwrote them (see `VersionStore`'s deltas).
public struct ByteRanges: Sendable, Equatable {
    /// The ranges, in order, none overlapping or touching another.
    public private(set) var ranges: [Range<Int64>] = []

    public init() {}

    public init(_ ranges: [Range<Int64>]) {
        for range in ranges { insert(range) }
    }

    /// How many bytes the set covers.
    public var byteCount: Int64 { ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }

    public var isEmpty: Bool { ranges.isEmpty }

    /// The index of the first range that ends after `offset` (ranges.count when none does).
    private func firstEnding(after offset: Int64) -> Int {
        var low = 0, high = ranges.count
        while low < high {
            let middle = (low + high) / 2
            if ranges[middle].upperBound <= offset { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The parts of `range` the set does not cover, in order.
    public func missing(in range: Range<Int64>) -> [Range<Int64>] {
        guard !range.isEmpty else { return [] }
        var gaps: [Range<Int64>] = []
        var start = range.lowerBound
        var index = firstEnding(after: start)
        while start < range.upperBound {
            guard index < ranges.count, ranges[index].lowerBound < range.upperBound else {
                gaps.append(start..<range.upperBound)
                break
            }
            let covered = ranges[index]
            if covered.lowerBound > start { gaps.append(start..<covered.lowerBound) }
            start = max(start, covered.upperBound)
            index += 1
        }
        return gaps
    }

    /// Adds `range`, merging it with the ranges it overlaps or touches.
    public mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        var lower = range.lowerBound, upper = range.upperBound
        // The first range that ends at or after `lower` (touching counts).
        var first = firstEnding(after: lower)
        if first > 0 && ranges[first - 1].upperBound == lower { first -= 1 }
        var last = first
        while last < ranges.count && ranges[last].lowerBound <= upper {
            lower = min(lower, ranges[last].lowerBound)
            upper = max(upper, ranges[last].upperBound)
            last += 1
        }
        ranges.replaceSubrange(first..<last, with: [lower..<upper])
    }
}
