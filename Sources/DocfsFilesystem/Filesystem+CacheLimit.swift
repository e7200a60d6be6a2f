import DocfsCore
import DocfsIndex
import DocfsProvider

/// The cache limit of a store that downloads on demand (issue 23 §1): the content here — every
/// document's size, not counting promised ones — is kept under `sync.cacheLimit` by evicting
/// documents least recently used first (`ContentUse`). What `evict` refuses stays: pinned,
/// open, written, changed here and not yet on the remote, in conflict.
extension Filesystem {
    /// What one trim found and did.
    public struct CacheTrim: Sendable, Equatable {
        /// Bytes of content here before and after.
        public var usedBefore: Int64 = 0
        public var used: Int64 = 0
        /// The items evicted, in order.
        public var evicted: [ItemID] = []
        /// Items over the limit that could not go, with why.
        public var kept: [ItemID: String] = [:]
    }

    /// The records of every document whose content is here: files with their content (not
    /// promised), not references.
    static let contentHerePredicate = #"kind == "file" && status != "promised" && isExternal == false"#

    /// Evicts documents whose content is here, least recently used first, until what is here
    /// fits in `limit` bytes (or nothing more can go).
    public func trimContent(toFit limit: Int64) throws(DocfsError) -> CacheTrim {
        guard let stitcher else { throw DocfsError(.invalidArgument, "this mount keeps no index, so its content cannot be measured") }
        let predicate: QueryPredicate
        do { predicate = try PredicateParser().parse(Self.contentHerePredicate) } catch {
            throw DocfsError(.invalidArgument, "the cache's own query does not parse: \(error)")
        }
        // An item with several names (hard links) is counted once.
        var sizes: [UInt64: (size: Int64, modified: Double, evictable: Bool)] = [:]
        for record in try stitcher.index.records(matching: IndexQuery(predicate: predicate, scope: .all)) {
            sizes[UInt64(bitPattern: record.id)] = (record.size, record.modified,
                                                   record.status == IndexRecord.localStatus && !record.conflict)
        }
        var trim = CacheTrim()
        trim.usedBefore = sizes.values.reduce(0) { $0 + $1.size }
        trim.used = trim.usedBefore
        defer { shared.promises.use.save(keeping: Set(sizes.keys).subtracting(trim.evicted.map(\.rawValue))) }
        guard trim.used > limit else { return trim }
        let use = shared.promises.use
        let candidates = sizes.filter { $0.value.evictable && $0.value.size > 0 }
            .map { (item: $0.key, size: $0.value.size, used: use.lastUse(of: $0.key) ?? $0.value.modified) }
            .sorted { ($0.used, $0.item) < ($1.used, $1.item) }
        for candidate in candidates where trim.used > limit {
            let item = ItemID(rawValue: candidate.item)
            do {
                _ = try evict(item)  // promised now (or already: its record was behind)
                trim.used -= candidate.size
                trim.evicted.append(item)
            } catch {
                trim.kept[item] = error.message
            }
        }
        return trim
    }

    /// The record of `node` made again after its content came or went or it was pinned: where
    /// its content is changed, not the document (nothing goes to the remote).
    func recordContentPlace(_ node: Node) {
        RemoteApplication.$machine.withValue(RemoteApplication.ownBookkeeping) { stitcher?.recordFile(node) }
    }
}
