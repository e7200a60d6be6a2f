import Crypto

/// A short summary of which version of each item is current (DESIGN §9.0 "Checked", issue 49
/// §4): the items are split in `buckets` by id, and each bucket holds how many items it has
/// and a sum of one term per item, made from the item's id and current number. The remote
/// answers it for its current versions in one query (`Remote.inStepDigest`), a machine makes
/// it from the versions it last agreed on with the remote (its sync states): equal buckets
/// mean those items agree, a bucket that differs is listed again. A sum, not a chain of
/// hashes, so neither side needs its items in any order.
public struct InStepDigest: Sendable, Equatable {
    public struct Bucket: Sendable, Equatable {
        public var count: Int64 = 0
        /// The terms' sum (at most `count` × 2³¹: no overflow below 2³² items in a bucket).
        public var sum: Int64 = 0

        public init(count: Int64 = 0, sum: Int64 = 0) {
            self.count = count
            self.sum = sum
        }
    }

    /// How many buckets the daemon's check splits the items in.
    public static let defaultBuckets = 64

    public private(set) var buckets: [Bucket]

    public init(buckets: Int = Self.defaultBuckets) {
        precondition(buckets > 0, "a digest has at least one bucket")
        self.buckets = Array(repeating: Bucket(), count: buckets)
    }

    /// The bucket of `item`.
    public func bucket(of item: UInt64) -> Int { Int(item % UInt64(buckets.count)) }

    /// Counts `item`, current at `number` (deleted items are not counted).
    public mutating func add(item: UInt64, number: UInt64) {
        let index = bucket(of: item)
        buckets[index].count += 1
        buckets[index].sum += Int64(Self.term(item: item, number: number))
    }

    /// Takes back `add(item:number:)`.
    public mutating func remove(item: UInt64, number: UInt64) {
        let index = bucket(of: item)
        buckets[index].count -= 1
        buckets[index].sum -= Int64(Self.term(item: item, number: number))
    }

    /// Sets what the remote answered for bucket `index`.
    public mutating func set(_ index: Int, _ bucket: Bucket) {
        buckets[index] = bucket
    }

    /// The buckets that differ from `other`'s (of the same size).
    public func differingBuckets(from other: InStepDigest) -> Set<Int> {
        precondition(buckets.count == other.buckets.count, "digests of different sizes do not compare")
        return Set(buckets.indices.filter { buckets[$0] != other.buckets[$0] })
    }

    /// One item's term: the first 31 bits of the MD5 of "ID:NUMBER" (the id as a signed 64-bit
    /// decimal, as PostgreSQL spells a bigint), which SQL can make the same way
    /// (`('x' || substr(md5(...), 1, 8))::bit(32)::bigint & 2147483647`). Not for secrecy: a
    /// bucket's sum must only change when an item's current number does.
    public static func term(item: UInt64, number: UInt64) -> UInt32 {
        let text = "\(Int64(bitPattern: item)):\(Int64(bitPattern: number))"
        let digest = Array(Insecure.MD5.hash(data: Array(text.utf8)))
        let first = UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])
        return first & 0x7fff_ffff
    }
}

/// This machine's `InStepDigest` of its sync states, with the number each item counts at: kept
/// between the engine's checks, so a check of the changed items updates it for those alone
/// (`SyncAudit.Scope.changed`); a check of everything makes it again.
struct SyncedDigest: Sendable {
    var digest: InStepDigest
    var numbers: [UInt64: UInt64] = [:]

    init(buckets: Int) { digest = InStepDigest(buckets: buckets) }

    /// Counts `item` at `number` (nil: not at all, as a deleted or unknown item).
    mutating func set(_ item: UInt64, _ number: UInt64?) {
        if let old = numbers[item] { digest.remove(item: item, number: old) }
        numbers[item] = number
        if let number { digest.add(item: item, number: number) }
    }
}
