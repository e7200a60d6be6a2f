import DocfsSync
import Logging
import PostgresNIO

/// The log's retention on PostgreSQL (DESIGN §9): what a prune may remove, the horizon it
/// leaves (the highest sequence removed: an anchor below it lists every item again), and the
/// listing of every item's current version such a machine reads instead of the log.
extension PostgresRemote {
    public func head() throws(RemoteError) -> RemoteAnchor {
        let logger = logger
        let sequence = try perform("read the log's head") { connection in
            try await connection.query("SELECT sequence FROM docfs.log_head WHERE id = 1", logger: logger)
                .collect().first?.decode(Int64.self) ?? 0
        }
        return RemoteAnchor(sequence: UInt64(bitPattern: sequence))
    }

    public func listing(after item: UInt64, limit: Int) throws(RemoteError) -> [RemoteChange] {
        guard limit > 0 else { throw RemoteError(.refused, "a page of the listing holds at least one item") }
        let logger = logger
        let row = try perform("list every item") { connection in
            try await connection.query(VersionPage.query(
                from: "docfs.versions v JOIN docfs.items i ON i.item = v.item AND i.current_number = v.number WHERE v.item > \(Int64(bitPattern: item))",
                orderedBy: "item", limit: limit), logger: logger).collect().first
        }
        return try VersionPage(row).changes
    }

    /// One query: the current versions not deleted, grouped by bucket, each term made as
    /// `InStepDigest.term` makes it.
    public func inStepDigest(buckets: Int) throws(RemoteError) -> InStepDigest {
        guard buckets > 0 else { throw RemoteError(.refused, "a digest has at least one bucket") }
        let logger = logger
        let count = Int64(buckets)
        let rows = try perform("sum the current versions") { connection in
            try await connection.query("""
                SELECT ((i.item % \(count)) + \(count)) % \(count), count(*),
                       sum(('x' || substr(md5(i.item::text || ':' || i.current_number::text), 1, 8))::bit(32)::bigint & 2147483647)::bigint
                FROM docfs.items i JOIN docfs.versions v ON v.item = i.item AND v.number = i.current_number
                WHERE NOT v.deleted GROUP BY 1
                """, logger: logger).collect().map { try $0.decode((Int64, Int64, Int64).self) }
        }
        var digest = InStepDigest(buckets: buckets)
        for (bucket, items, sum) in rows where bucket >= 0 && bucket < count {
            digest.set(Int(bucket), InStepDigest.Bucket(count: items, sum: sum))
        }
        return digest
    }

    /// In one transaction, under the log's head (no commit interleaves): the versions to go
    /// are those a later version superseded before the cutoff (not when they were committed: a
    /// version current for a year and replaced today stays its whole retention, as machines
    /// that keep it promised fetch it from here), conflict versions only once a later version
    /// resolved them before it, and every version of an item deleted before it.
    public func prune(olderThan seconds: Double) throws(RemoteError) -> Int {
        let logger = logger
        let removed = try perform("prune the change log", transaction: true, limit: Self.sweepLimit) { connection in
            try await connection.query("SELECT sequence FROM docfs.log_head WHERE id = 1 FOR UPDATE", logger: logger)
            let cutoff = try await connection.query("""
                SELECT COALESCE(max(sequence), 0) FROM docfs.versions WHERE committed < now() - make_interval(secs => \(seconds))
                """, logger: logger).collect().first?.decode(Int64.self) ?? 0
            let (removed, highest) = try await connection.query("""
                WITH gone AS (
                    SELECT i.item FROM docfs.items i JOIN docfs.versions v ON v.item = i.item AND v.number = i.current_number
                    WHERE v.deleted AND v.sequence <= \(cutoff)),
                resolved AS (
                    SELECT item, max(number) AS number FROM docfs.versions WHERE resolves AND sequence <= \(cutoff) GROUP BY item),
                pruned AS (
                DELETE FROM docfs.versions v USING docfs.items i
                WHERE i.item = v.item AND (
                    v.item IN (SELECT item FROM gone)
                    OR (v.number <> i.current_number AND NOT v.conflict AND EXISTS (
                        SELECT 1 FROM docfs.versions w
                        WHERE w.item = v.item AND w.number > v.number AND NOT w.conflict AND w.sequence <= \(cutoff)))
                    OR (v.sequence <= \(cutoff) AND v.number <> i.current_number AND v.conflict
                        AND v.number < COALESCE((SELECT r.number FROM resolved r WHERE r.item = v.item), 0)))
                RETURNING v.sequence)
                SELECT count(*), max(sequence) FROM pruned
                """, logger: logger).collect().first?.decode((Int64, Int64?).self) ?? (Int64(0), nil)
            try await connection.query("""
                DELETE FROM docfs.items i WHERE NOT EXISTS (SELECT 1 FROM docfs.versions v WHERE v.item = i.item)
                """, logger: logger)
            try await connection.query("DELETE FROM docfs.operations WHERE sequence <= \(cutoff)", logger: logger)
            if let highest {
                try await connection.query("""
                    UPDATE docfs.meta SET value = greatest(value::bigint, \(highest))::text WHERE key = 'log_horizon'
                    """, logger: logger)
            }
            return Int(removed)
        }
        return removed
    }

    /// The highest sequence a prune removed (0: none).
    static func horizon(on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        let text = try await connection.query("SELECT value FROM docfs.meta WHERE key = 'log_horizon'", logger: logger)
            .collect().first?.decode(String.self)
        return text.flatMap { Int64($0) } ?? 0
    }
}
