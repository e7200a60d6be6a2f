import DocfsSync
import Logging
import PostgresNIO

/// The remote's tables, under versioned migrations (issue 22 §1), in a schema of their own
/// (`docfs`) so a database can be told apart as docfs's. Each migration runs once, in a
/// transaction, under an advisory lock so two machines linking at once do not both migrate;
/// a remote whose schema is newer than this docfs knows is refused, an older one migrated.
///
/// The SQL is portable PostgreSQL (no extensions) so a replicated or compatible engine serves
/// too (DESIGN §9.2). The change log is `versions` ordered by `sequence`: every commit bumps the
/// one row of `log_head` in its own transaction, so commits take sequences in commit order and
/// a reader never sees a later sequence before an earlier one (DESIGN §9: no change is skipped
/// because a lower number committed late).
enum RemoteSchema {
    /// The schema version this docfs writes and reads.
    static let current = migrations.count

    /// A key for `pg_advisory_xact_lock` held while migrating ("docfs" in ASCII).
    static let migrationLock: Int64 = 0x646f_6366_73

    static let migrations: [[String]] = [
        [
            "CREATE SCHEMA docfs",
            "CREATE TABLE docfs.meta (key text PRIMARY KEY, value text NOT NULL)",
            "CREATE TABLE docfs.log_head (id integer PRIMARY KEY CHECK (id = 1), sequence bigint NOT NULL)",
            "INSERT INTO docfs.log_head VALUES (1, 0)",
            "CREATE TABLE docfs.chunks (digest text PRIMARY KEY, bytes bytea NOT NULL)",
            "CREATE TABLE docfs.items (item bigint PRIMARY KEY, current_number bigint NOT NULL, last_number bigint NOT NULL)",
            """
            CREATE TABLE docfs.versions (
                item bigint NOT NULL, number bigint NOT NULL, base bigint NOT NULL,
                container text NOT NULL, scope text NOT NULL, parent bigint NOT NULL, name text NOT NULL, kind text NOT NULL,
                manifest text NOT NULL, size bigint NOT NULL, mode bigint NOT NULL,
                modified double precision NOT NULL, attributes bytea NOT NULL,
                author_machine text NOT NULL, author_user text NOT NULL,
                conflict boolean NOT NULL, deleted boolean NOT NULL, sequence bigint NOT NULL UNIQUE,
                PRIMARY KEY (item, number))
            """,
            """
            CREATE TABLE docfs.operations (operation text PRIMARY KEY, item bigint NOT NULL, number bigint NOT NULL,
                conflict boolean NOT NULL, sequence bigint NOT NULL)
            """,
            """
            CREATE TABLE docfs.kv (container text NOT NULL, key text NOT NULL, value bytea NOT NULL,
                sequence bigint NOT NULL, PRIMARY KEY (container, key))
            """,
            """
            CREATE TABLE docfs.machines (name text PRIMARY KEY, space bigint NOT NULL UNIQUE,
                first_seen timestamptz NOT NULL DEFAULT now(), last_seen timestamptz NOT NULL DEFAULT now())
            """,
        ],
        [
            // When each chunk was last put or looked for: a sweep of unused chunks spares the
            // recent ones (an upload under way found them held and will name them).
            "ALTER TABLE docfs.chunks ADD COLUMN used timestamptz NOT NULL DEFAULT now()",
        ],
        [
            // A version that resolves its item's conflict (every machine drops the conflict
            // versions below it).
            "ALTER TABLE docfs.versions ADD COLUMN resolves boolean NOT NULL DEFAULT false",
            // The container's display name and visibility (a machine without it makes it).
            "ALTER TABLE docfs.versions ADD COLUMN container_name text, ADD COLUMN container_public boolean",
            // When each version committed (the log's retention prunes by it), and the highest
            // sequence a prune removed (an anchor below it lists every item again).
            "ALTER TABLE docfs.versions ADD COLUMN committed timestamptz NOT NULL DEFAULT now()",
            // The chunk of the content's thumbnail set, made by the machine that saved it.
            "ALTER TABLE docfs.versions ADD COLUMN thumbnail text",
            "INSERT INTO docfs.meta VALUES ('log_horizon', '0')",
        ],
        [
            // References travel (kind 'reference'): a docfs that does not know them refuses
            // the remote as newer than it rather than taking their versions for damaged ones.
            "COMMENT ON COLUMN docfs.versions.kind IS 'file, folder, symlink or reference'",
        ],
        [
            // Containers travel as items of their own (kind 'container'): likewise refused by a
            // docfs that does not know them.
            "COMMENT ON COLUMN docfs.versions.kind IS 'file, folder, symlink, reference or container'",
        ],
        [
            // A save kept beside the current version on every machine, never current (a save
            // that lost its number or its race before it went up): a docfs that does not know
            // such versions would take one for the current content, so it refuses the remote.
            "ALTER TABLE docfs.versions ADD COLUMN previous boolean NOT NULL DEFAULT false",
        ],
        [
            // Each chunk's length (4 bytes little-endian apiece), where the machine that saved
            // the version said: a promised file maps a read to its chunks without asking.
            "ALTER TABLE docfs.versions ADD COLUMN lengths bytea",
        ],
    ]

    /// Brings the database's docfs schema to `current`, creating it in a database with no
    /// tables; refuses a database holding other tables and a schema newer than `current`.
    static func prepare(_ connection: PostgresConnection, database: String, logger: Logger) async throws {
        try await connection.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger)
            let found = try await installedVersion(connection, logger: logger)
            let version: Int
            if let found {
                version = found
            } else {
                let others = try await connection.query("""
                    SELECT count(*) FROM information_schema.tables
                    WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
                    """, logger: logger).collect().first?.decode(Int64.self) ?? 0
                guard others == 0 else {
                    throw RemoteError(.refused, "the database '\(database)' holds \(others) tables that are not docfs's: link to an empty database (createdb docfs_store) or one another docfs store uses")
                }
                version = 0
            }
            guard version <= current else {
                throw RemoteError(.refused, "the remote's schema is version \(version) and this docfs knows only up to \(current): update docfs on this machine")
            }
            for number in version..<current {
                for statement in migrations[number] {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("""
                    INSERT INTO docfs.meta VALUES ('schema_version', \(String(number + 1)))
                    ON CONFLICT (key) DO UPDATE SET value = excluded.value
                    """, logger: logger)
                logger.info("remote schema migrated to version \(number + 1)")
            }
        }
    }

    /// The docfs schema version the database holds; nil when it holds none.
    static func installedVersion(_ connection: PostgresConnection, logger: Logger) async throws -> Int? {
        let exists = try await connection.query("SELECT to_regclass('docfs.meta') IS NOT NULL", logger: logger)
            .collect().first?.decode(Bool.self) ?? false
        guard exists else { return nil }
        let text = try await connection.query("SELECT value FROM docfs.meta WHERE key = 'schema_version'", logger: logger)
            .collect().first?.decode(String.self)
        guard let text, let version = Int(text) else {
            throw RemoteError(.refused, "the database's docfs schema has no readable version: it is damaged; link to another database")
        }
        return version
    }
}
