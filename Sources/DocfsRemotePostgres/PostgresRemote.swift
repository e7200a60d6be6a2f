import DocfsChunks
import DocfsSync
import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import Synchronization

/// The `Remote` on a PostgreSQL database (DESIGN §9, issue 22): no docfs server, only tables
/// (`RemoteSchema`) and transactions. Calls block their caller and run on the bridge's own
/// thread (`BlockingBridge`), over connections of its own that it reconnects when one breaks;
/// serialization failures, deadlocks and a commit racing its own retry are tried again with
/// jitter; every other failure is a `RemoteError` in words.
///
/// Lock order: `idle` is a leaf lock, held only to take or give back a connection, never
/// across a query.
public final class PostgresRemote: Remote {
    public let location: PostgresLocation
    let machine: String
    let logger: Logger
    let bridge: BlockingBridge
    let idle = Mutex<[PostgresConnection]>([])
    let connectionNumbers = Atomic<Int>(0)
    let tls: PostgresConnection.Configuration.TLS
    /// Whether the schema was found current (each new connection checks until one has).
    let prepared = Atomic<Bool>(false)
    /// Watches of the log (`watchChanges`), cancelled when the remote closes.
    let watches = Mutex<[RemoteWatch]>([])

    /// Connects to `location` and prepares its schema (creating it in an empty database,
    /// migrating an older one). Throws a `RemoteError` that says what to do: a wrong password,
    /// an unreachable host, a database that is not docfs's, a schema newer than this docfs.
    /// `connectingNow: false` (a daemon starting offline) defers both to the first call that
    /// reaches the server.
    public init(_ location: PostgresLocation, machine: String, connectingNow: Bool = true,
                logger: Logger = Logger(label: "docfs.remote")) throws(RemoteError) {
        self.location = location
        self.machine = machine
        self.logger = logger
        self.bridge = BlockingBridge(name: "docfs-remote")
        do {
            self.tls = try Self.tls(for: location)
        } catch {
            bridge.stop()
            throw error
        }
        guard connectingNow else { return }
        do {
            try perform("link") { _ in }
        } catch {
            close()
            throw error
        }
    }

    /// Closes the connections and ends the bridge's thread.
    public func close() {
        for watch in watches.withLock({ watches in defer { watches.removeAll() }; return watches }) { watch.cancel() }
        let connections = idle.withLock { idle in
            defer { idle.removeAll() }
            return idle
        }
        for connection in connections {
            // The connection must outlive its closing (PostgresNIO checks): the callback holds it.
            let closing: EventLoopFuture<Void> = connection.close()
            closing.whenComplete { _ in withExtendedLifetime(connection) {} }
        }
        bridge.stop()
    }

    deinit { close() }

    // MARK: The change log

    public func changes(after anchor: RemoteAnchor, limit: Int) throws(RemoteError) -> (changes: [RemoteChange], next: RemoteAnchor) {
        guard limit > 0 else { throw RemoteError(.refused, "a page of changes holds at least one") }
        let logger = logger
        let (page, horizon) = try perform("read the change log") { connection in
            let horizon = try await Self.horizon(on: connection, logger: logger)
            let row = try await connection.query(VersionPage.query(
                from: "docfs.versions v WHERE v.sequence > \(Int64(bitPattern: anchor.sequence))", orderedBy: "sequence", limit: limit),
                logger: logger).collect().first
            return (row, horizon)
        }
        if Int64(bitPattern: anchor.sequence) < horizon {
            throw RemoteError(.pastRetention, "the remote's log no longer holds the changes after \(anchor.sequence): listing every item")
        }
        let changes = try VersionPage(page).changes
        return (changes, changes.last.map { RemoteAnchor(sequence: $0.sequence) } ?? anchor)
    }

    public func join(_ machine: MachineRegistration) throws(RemoteError) -> MachineJoin {
        let logger = logger
        let (space, name, reached) = try perform("register machine \(machine.name)", transaction: true) { connection in
            // The log's head serializes joins with each other and with commits.
            try await connection.query("SELECT sequence FROM docfs.log_head WHERE id = 1 FOR UPDATE", logger: logger)
            var registered: (space: Int64, name: String)?
            for try await row in try await connection.query(
                "UPDATE docfs.machines SET last_seen = now() WHERE store = \(machine.store) RETURNING space, name",
                logger: logger).decode((Int64, String).self) {
                registered = row
            }
            if registered == nil {
                var space: Int64 = 0
                for try await next in try await connection.query("""
                    SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM docfs.items) AND NOT EXISTS (SELECT 1 FROM docfs.machines WHERE space = 0)
                        THEN 0 ELSE COALESCE((SELECT max(space) FROM docfs.machines), 0) + 1 END
                    """, logger: logger).decode(Int64.self) {
                    space = next
                }
                let stem = MachineJoin.stem(of: machine.name)
                var taken = Set<String>()
                for try await name in try await connection.query(
                    "SELECT name FROM docfs.machines WHERE name = \(machine.name) OR name LIKE \(Self.likePattern(stem) + "-%")",
                    logger: logger).decode(String.self) {
                    taken.insert(name)
                }
                let name = MachineJoin.freeName(machine.name) { taken.contains($0) }
                try await connection.query(
                    "INSERT INTO docfs.machines (name, space, store) VALUES (\(name), \(space), \(machine.store))", logger: logger)
                registered = (space, name)
            }
            let (space, name) = registered ?? (0, machine.name)
            let ids = MachineJoin.ids(ofSpace: UInt64(space))
            let reached = try await connection.query(
                "SELECT max(item) FROM docfs.items WHERE item >= \(Int64(ids.lowerBound)) AND item < \(Int64(ids.upperBound))",
                logger: logger).collect().first?.decode(Int64?.self) ?? nil
            return (space, name, reached)
        }
        return MachineJoin(space: UInt64(space), name: name,
                           nextItem: reached.map { UInt64($0) + 1 } ?? MachineJoin.ids(ofSpace: UInt64(space)).lowerBound)
    }

    /// `text` as a LIKE pattern matching itself alone (its wildcards and escapes escaped).
    static func likePattern(_ text: String) -> String {
        var pattern = ""
        for character in text {
            if character == "%" || character == "_" || character == "\\" { pattern.append("\\") }
            pattern.append(character)
        }
        return pattern
    }

    public func currentVersion(of item: UInt64) throws(RemoteError) -> RemoteVersion? {
        let logger = logger
        let row = try perform("read item \(item)") { connection in
            try await connection.query(VersionPage.query(
                from: "docfs.versions v JOIN docfs.items i ON i.item = v.item AND i.current_number = v.number WHERE i.item = \(Int64(bitPattern: item))",
                orderedBy: "item", limit: 1), logger: logger).collect().first
        }
        return try VersionPage(row).entries.first?.version
    }

    public func versions(of item: UInt64, after number: UInt64, limit: Int) throws(RemoteError) -> [RemoteVersion] {
        let logger = logger
        let row = try perform("read the versions of item \(item)") { connection in
            try await connection.query(VersionPage.query(
                from: "docfs.versions v WHERE v.item = \(Int64(bitPattern: item)) AND v.number > \(Int64(bitPattern: number))",
                orderedBy: "number", limit: limit), logger: logger).collect().first
        }
        return try VersionPage(row).entries.map(\.version)
    }

    // MARK: Chunks

    public func missingChunks(_ digests: [ChunkDigest]) throws(RemoteError) -> [ChunkDigest] {
        guard !digests.isEmpty else { return [] }
        let logger = logger
        let hexes = digests.map(\.hex)
        let held = try perform("look for chunks") { connection in
            // Looking for a chunk marks it used: a sweep spares it until the commit names it.
            // One row, as every answer that can be long (see `VersionPage`).
            let found = try await connection.query("""
                WITH marked AS (UPDATE docfs.chunks SET used = now() WHERE digest = ANY(\(hexes)) RETURNING digest)
                SELECT array_agg(digest) FROM marked
                """, logger: logger).collect().first?.decode([String]?.self)
            return Set(found ?? [])
        }
        return digests.filter { !held.contains($0.hex) }
    }

    public func putChunk(_ digest: ChunkDigest, bytes: [UInt8]) throws(RemoteError) {
        guard bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else {
            throw RemoteError(.refused, "chunk \(digest): its bytes have another digest")
        }
        let logger = logger
        let buffer = ByteBuffer(bytes: bytes)
        try perform("put chunk \(digest)") { connection in
            try await connection.query("""
                INSERT INTO docfs.chunks (digest, bytes) VALUES (\(digest.hex), \(buffer))
                ON CONFLICT (digest) DO UPDATE SET used = now()
                """, logger: logger)
        }
    }

    /// One statement for the lot: the digests and bytes as two arrays, unnested.
    public func putChunks(_ chunks: [(digest: ChunkDigest, bytes: [UInt8])]) throws(RemoteError) {
        guard !chunks.isEmpty else { return }
        for (digest, bytes) in chunks where bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) != digest {
            throw RemoteError(.refused, "chunk \(digest): its bytes have another digest")
        }
        let logger = logger
        let digests = chunks.map(\.digest.hex)
        let buffers = chunks.map { ByteBuffer(bytes: $0.bytes) }
        try perform("put \(chunks.count) chunks") { connection in
            try await connection.query("""
                INSERT INTO docfs.chunks (digest, bytes) SELECT * FROM unnest(\(digests)::text[], \(buffers)::bytea[])
                ON CONFLICT (digest) DO UPDATE SET used = now()
                """, logger: logger)
        }
    }

    public func fetchChunk(_ digest: ChunkDigest) throws(RemoteError) -> [UInt8] {
        let logger = logger
        let found = try perform("fetch chunk \(digest)") { connection in
            try await connection.query("SELECT bytes FROM docfs.chunks WHERE digest = \(digest.hex)", logger: logger)
                .collect().first?.decode(ByteBuffer.self)
        }
        guard let found else { throw RemoteError(.notFound, "the remote holds no chunk \(digest)") }
        let bytes = Array(found.readableBytesView)
        guard bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else {
            throw RemoteError(.refused, "the remote's chunk \(digest) is damaged (its bytes have another digest)")
        }
        return bytes
    }

    /// One query for all of them, answered as one row (their bytes run together, and the
    /// digests and lengths found): postgres-nio stops the process when the server ends a
    /// connection while rows of a many-row answer wait for the reader (its row stream's
    /// `channelReadComplete` precondition), so large answers come as a single row. Each chunk
    /// is checked against its digest.
    public func fetchChunks(_ digests: [ChunkDigest]) throws(RemoteError) -> [[UInt8]] {
        guard digests.count > 1 else { return try digests.map { digest throws(RemoteError) in try fetchChunk(digest) } }
        let logger = logger
        let hexes = Array(Set(digests.map(\.hex)))
        let answer = try perform("fetch \(digests.count) chunks") { connection in
            try await connection.query("""
                SELECT string_agg(bytes, ''::bytea ORDER BY digest), array_agg(digest ORDER BY digest),
                    array_agg(octet_length(bytes) ORDER BY digest)
                FROM docfs.chunks WHERE digest = ANY(\(hexes))
                """, logger: logger).collect().first?.decode((ByteBuffer?, [String]?, [Int32]?).self)
        }
        var found: [String: ArraySlice<UInt8>] = [:]
        if case let (joined?, names?, lengths?)? = answer, names.count == lengths.count {
            let bytes = Array(joined.readableBytesView)
            var offset = 0
            for (name, length) in zip(names, lengths) {
                guard length >= 0, offset + Int(length) <= bytes.count else { break }
                found[name] = bytes[offset..<(offset + Int(length))]
                offset += Int(length)
            }
        }
        var chunks: [[UInt8]] = []
        chunks.reserveCapacity(digests.count)
        for digest in digests {
            // One the answer lacks is asked for alone: found, or truly not.
            guard let slice = found[digest.hex] else {
                chunks.append(try fetchChunk(digest))
                continue
            }
            let bytes = Array(slice)
            guard bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else {
                throw RemoteError(.refused, "the remote's chunk \(digest) is damaged (its bytes have another digest)")
            }
            chunks.append(bytes)
        }
        return chunks
    }

    /// The lengths from the stored size of each value (octet_length reads no TOASTed bytes).
    public func chunkLengths(_ digests: [ChunkDigest]) throws(RemoteError) -> [Int64] {
        guard !digests.isEmpty else { return [] }
        let logger = logger
        let hexes = digests.map(\.hex)
        // One row (see `fetchChunks`).
        let answer = try perform("look up chunk lengths") { connection in
            try await connection.query("""
                SELECT array_agg(digest), array_agg(octet_length(bytes)::int8) FROM docfs.chunks WHERE digest = ANY(\(hexes))
                """, logger: logger).collect().first?.decode(([String]?, [Int64]?).self)
        }
        var found: [String: Int64] = [:]
        if case let (names?, sizes?)? = answer { for (name, size) in zip(names, sizes) { found[name] = size } }
        var lengths: [Int64] = []
        lengths.reserveCapacity(digests.count)
        for digest in digests {
            guard let length = found[digest.hex] else { throw RemoteError(.notFound, "the remote holds no chunk \(digest)") }
            lengths.append(length)
        }
        return lengths
    }

    /// Chunks no version names (each manifest is its digests' hex run together) and unused
    /// for `seconds`, removed in one statement.
    public func sweepChunks(unusedFor seconds: Double) throws(RemoteError) -> ChunkSweep {
        let logger = logger
        let (count, bytes) = try perform("sweep unused chunks", limit: Self.sweepLimit) { connection in
            var found: (Int64, Int64) = (0, 0)
            for try await row in try await connection.query("""
                WITH named AS (
                    SELECT DISTINCT substr(v.manifest, g * 64 + 1, 64) AS digest
                    FROM docfs.versions v, generate_series(0, length(v.manifest) / 64 - 1) g
                    UNION SELECT thumbnail FROM docfs.versions WHERE thumbnail IS NOT NULL),
                swept AS (
                    DELETE FROM docfs.chunks c
                    WHERE c.used < now() - make_interval(secs => \(seconds))
                      AND NOT EXISTS (SELECT 1 FROM named n WHERE n.digest = c.digest)
                    RETURNING length(c.bytes) AS size)
                SELECT count(*), COALESCE(sum(size), 0)::bigint FROM swept
                """, logger: logger).decode((Int64, Int64).self) {
                found = row
            }
            return found
        }
        return ChunkSweep(chunks: Int(count), bytes: bytes)
    }

    // MARK: Commits

    /// Commits `proposal` in one call of `docfs.commit_version` (one round trip, one
    /// transaction): an operation already done answers what it did; chunks the remote does not
    /// hold refuse it (`missingChunks`); a proposal on another base than the current version
    /// is refused (`whenStale` `.refuse`) or kept as a conflict version; one that would break
    /// the tree is refused (`misplaced`, checked under the log's head); otherwise the version
    /// takes the log's next sequence (the one `log_head` row serializes the commits that take
    /// one, so sequences are taken in commit order) and the number after the item's last, and
    /// machines are woken.
    public func commit(_ proposal: RemoteVersion, operation: String, whenStale: StaleBase) throws(RemoteError) -> RemoteCommitOutcome {
        if let problem = proposal.problem { throw RemoteError(.refused, problem) }
        let digests = proposal.chunks ?? []
        let attributes: Data
        do { attributes = try JSONEncoder().encode(proposal.attributes) } catch {
            throw RemoteError(.refused, "the attributes of item \(proposal.item) cannot be encoded: \(error)")
        }
        let logger = logger
        let hexes = Array(Set(digests.map(\.hex)))
        let manifest = proposal.manifest.joined()
        let lengths = Self.encode(lengths: proposal.knownLengths)
        let item = Int64(bitPattern: proposal.item)
        let answer = try perform("commit item \(proposal.item)") { connection in
            try await connection.query("""
                SELECT * FROM docfs.commit_version(\(operation), \(item), \(whenStale == .refuse), \(Int64(bitPattern: proposal.base)),
                    \(Int64(bitPattern: proposal.askedNumber)), \(proposal.previous == true), \(hexes), \(proposal.container),
                    \(proposal.scope), \(Int64(bitPattern: proposal.parent)), \(proposal.name), \(proposal.kind.rawValue), \(manifest),
                    \(proposal.size), \(Int64(proposal.mode)), \(proposal.modified), \(attributes), \(proposal.author.machine),
                    \(proposal.author.user), \(proposal.deleted), \(proposal.resolves == true), \(proposal.containerName),
                    \(proposal.containerPublic), \(proposal.thumbnail), \(lengths))
                """, logger: logger).collect().first?.decode((String, Bool?, Int64?, Int64?, Int64?, [String]?).self)
        }
        guard let (kind, conflict, number, sequence, current, missing) = answer else {
            throw RemoteError(.refused, "the remote answered nothing to the commit of item \(proposal.item)")
        }
        switch kind {
        case "done":
            guard let conflict, let number, let sequence else { break }
            return Self.outcome(conflict: conflict, number: number, sequence: sequence)
        case "stale":
            guard let current else { break }
            return .stale(current: UInt64(bitPattern: current))
        case "folder-gone":
            guard let current else { break }
            return .misplaced(.folderGone(UInt64(bitPattern: current)))
        case "folder-not-empty":
            return .misplaced(.folderNotEmpty)
        case "cycle":
            return .misplaced(.cycle)
        case "name-taken":
            return .misplaced(.nameTaken)
        case "missing":
            let absent = Set(missing ?? [])
            let chunks = digests.filter { absent.contains($0.hex) }
            throw RemoteError(.missingChunks(chunks), "\(chunks.count) chunks of item \(proposal.item) are not on the remote yet")
        default:
            break
        }
        throw RemoteError(.refused, "the remote's answer to the commit of item \(proposal.item) makes no sense (\(kind)): is its docfs schema damaged?")
    }

    /// The next sequence of the log, in the caller's transaction. The one `log_head` row
    /// serializes the transactions that take one: sequences are taken in commit order.
    private static func nextSequence(on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        var sequence: Int64 = 0
        for try await next in try await connection.query(
            "UPDATE docfs.log_head SET sequence = sequence + 1 WHERE id = 1 RETURNING sequence", logger: logger).decode(Int64.self) {
            sequence = next
        }
        return sequence
    }

    private static func outcome(conflict: Bool, number: Int64, sequence: Int64) -> RemoteCommitOutcome {
        let (number, sequence) = (UInt64(bitPattern: number), UInt64(bitPattern: sequence))
        return conflict ? .conflict(version: number, sequence: sequence) : .current(version: number, sequence: sequence)
    }

    public func changeCount(after anchor: RemoteAnchor) throws(RemoteError) -> Int {
        let logger = logger
        let count = try perform("count the changes waiting") { connection in
            try await connection.query(
                "SELECT count(*) FROM docfs.versions WHERE sequence > \(Int64(bitPattern: anchor.sequence))", logger: logger)
                .collect().first?.decode(Int64.self) ?? 0
        }
        return Int(count)
    }

    /// Kept in `docfs.meta` as hex: whoever can read the database can make bookmarks for the
    /// store (and read its documents: the same trust).
    public func storeKey(proposing key: [UInt8]) throws(RemoteError) -> [UInt8] {
        let logger = logger
        let proposed = key.map { String(format: "%02x", $0) }.joined()
        let text = try perform("share the bookmark key", transaction: true) { connection in
            try await connection.query("""
                INSERT INTO docfs.meta VALUES ('store_key', \(proposed)) ON CONFLICT (key) DO NOTHING
                """, logger: logger)
            return try await connection.query("SELECT value FROM docfs.meta WHERE key = 'store_key'", logger: logger)
                .collect().first?.decode(String.self) ?? ""
        }
        var bytes: [UInt8] = []
        var rest = Substring(text)
        while rest.count >= 2, let byte = UInt8(rest.prefix(2), radix: 16) {
            bytes.append(byte)
            rest = rest.dropFirst(2)
        }
        guard rest.isEmpty, bytes.count == key.count else {
            throw RemoteError(.refused, "the remote's bookmark key is damaged: bookmarks cannot be shared; ask its administrator to remove docfs.meta's store_key")
        }
        return bytes
    }

    // MARK: Each container's key-value store

    public func value(forKey key: String, in container: String) throws(RemoteError) -> [UInt8]? {
        let logger = logger
        let found = try perform("read key \(key)") { connection in
            try await connection.query("SELECT value FROM docfs.kv WHERE container = \(container) AND key = \(key)", logger: logger)
                .collect().first?.decode(ByteBuffer?.self)
        }
        return found.map { Array($0.readableBytesView) }  // no row, or a removal's row with no value: nil
    }

    /// A removal keeps the key's row with no value (so machines catching up hear of it); the
    /// change wakes every machine as a commit does.
    @discardableResult
    public func setValue(_ value: [UInt8]?, forKey key: String, in container: String) throws(RemoteError) -> UInt64 {
        let logger = logger
        let buffer = value.map { ByteBuffer(bytes: $0) }
        let sequence = try perform("set key \(key)", transaction: true) { connection in
            let sequence = try await Self.nextSequence(on: connection, logger: logger)
            try await connection.query("""
                INSERT INTO docfs.kv VALUES (\(container), \(key), \(buffer), \(sequence))
                ON CONFLICT (container, key) DO UPDATE SET value = excluded.value, sequence = excluded.sequence
                """, logger: logger)
            try await connection.query("SELECT pg_notify('docfs_changes', \(container) || ':' || \(sequence))", logger: logger)
            return sequence
        }
        return UInt64(bitPattern: sequence)
    }

    public func keys(in container: String) throws(RemoteError) -> [String] {
        let logger = logger
        return try perform("list keys") { connection in
            try await connection.query("SELECT array_agg(key) FROM docfs.kv WHERE container = \(container) AND value IS NOT NULL", logger: logger)
                .collect().first?.decode([String]?.self) ?? []
        }.sorted()
    }

    public func keyValueChanges(after sequence: UInt64, limit: Int) throws(RemoteError) -> [KeyValueChange] {
        let logger = logger
        let after = Int64(bitPattern: sequence)
        let rows = try perform("read the key-value stores' changes") { connection in
            try await connection.query("""
                SELECT container, key, value, sequence FROM docfs.kv WHERE sequence > \(after) ORDER BY sequence LIMIT \(limit)
                """, logger: logger).collect()
        }
        return try rows.map { row throws(RemoteError) in
            do {
                let (container, key, value, sequence) = try row.decode((String, String, ByteBuffer?, Int64).self)
                return KeyValueChange(container: container, key: key, value: value.map { Array($0.readableBytesView) },
                                      sequence: UInt64(bitPattern: sequence))
            } catch {
                throw RemoteError(.refused, "a row of docfs.kv cannot be read (\(error)): the database is not one docfs wrote")
            }
        }
    }

    // MARK: Rows

    /// Chunk lengths as the `lengths` column keeps them: 4 bytes little-endian apiece.
    static func encode(lengths: [Int64]?) -> Data? {
        guard let lengths, lengths.allSatisfy({ $0 > 0 && $0 <= Int64(UInt32.max) }) else { return nil }
        var bytes = Data(capacity: lengths.count * 4)
        for length in lengths { withUnsafeBytes(of: UInt32(length).littleEndian) { bytes.append(contentsOf: $0) } }
        return bytes
    }

    /// The lengths `encode` kept; nil for a column of another length than whole entries.
    static func decodeLengths(_ bytes: Data) -> [Int64]? {
        guard bytes.count % 4 == 0 else { return nil }
        let raw = [UInt8](bytes)
        var lengths: [Int64] = []
        lengths.reserveCapacity(raw.count / 4)
        for i in stride(from: 0, to: raw.count, by: 4) {
            var length: UInt32 = 0
            for byte in raw[i..<(i + 4)].reversed() { length = length << 8 | UInt32(byte) }
            lengths.append(Int64(length))
        }
        return lengths
    }
}
