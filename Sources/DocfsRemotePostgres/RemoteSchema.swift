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
        [
            // A commit in one round trip (it took eleven, each a wait on the server: a burst of
            // small saves went up at about 150 a second). What it does is `PostgresRemote.commit`'s
            // doc; it runs in the caller's statement, so in one transaction.
            """
            CREATE FUNCTION docfs.commit_version(
                p_operation text, p_item bigint, p_refuse_stale boolean, p_base bigint, p_number bigint, p_previous boolean,
                p_digests text[], p_container text, p_scope text, p_parent bigint, p_name text, p_kind text, p_manifest text,
                p_size bigint, p_mode bigint, p_modified double precision, p_attributes bytea, p_author_machine text,
                p_author_user text, p_deleted boolean, p_resolves boolean, p_container_name text, p_container_public boolean,
                p_thumbnail text, p_lengths bytea,
                OUT o_outcome text, OUT o_conflict boolean, OUT o_number bigint, OUT o_sequence bigint, OUT o_current bigint,
                OUT o_missing text[])
            LANGUAGE plpgsql AS $commit$
            DECLARE
                v_last bigint := 0;
            BEGIN
                SELECT 'done', o.conflict, o.number, o.sequence INTO o_outcome, o_conflict, o_number, o_sequence
                    FROM docfs.operations o WHERE o.operation = p_operation;
                IF FOUND THEN RETURN; END IF;
                SELECT array_agg(d) INTO o_missing FROM unnest(p_digests) AS d
                    WHERE NOT EXISTS (SELECT 1 FROM docfs.chunks c WHERE c.digest = d);
                IF o_missing IS NOT NULL THEN o_outcome := 'missing'; RETURN; END IF;
                INSERT INTO docfs.items (item, current_number, last_number) VALUES (p_item, 0, 0) ON CONFLICT (item) DO NOTHING;
                SELECT i.current_number, i.last_number INTO o_current, v_last FROM docfs.items i WHERE i.item = p_item FOR UPDATE;
                IF p_refuse_stale AND p_base <> o_current AND NOT p_previous THEN o_outcome := 'stale'; RETURN; END IF;
                UPDATE docfs.log_head h SET sequence = h.sequence + 1 WHERE h.id = 1 RETURNING h.sequence INTO o_sequence;
                o_number := greatest(v_last + 1, p_number);
                o_conflict := p_base <> o_current AND NOT p_previous;
                INSERT INTO docfs.versions (item, number, base, container, scope, parent, name, kind, manifest, size, mode, modified,
                    attributes, author_machine, author_user, conflict, deleted, sequence, resolves, container_name, container_public,
                    thumbnail, previous, lengths)
                VALUES (p_item, o_number, p_base, p_container, p_scope, p_parent, p_name, p_kind, p_manifest, p_size, p_mode,
                    p_modified, p_attributes, p_author_machine, p_author_user, o_conflict, p_deleted, o_sequence, p_resolves,
                    p_container_name, p_container_public, p_thumbnail, p_previous, p_lengths);
                UPDATE docfs.items i SET last_number = o_number,
                    current_number = CASE WHEN o_conflict OR p_previous THEN o_current ELSE o_number END WHERE i.item = p_item;
                INSERT INTO docfs.operations VALUES (p_operation, p_item, o_number, o_conflict, o_sequence);
                -- A wake-up only (DESIGN §9): machines read the log from their anchors.
                PERFORM pg_notify('docfs_changes', p_container || ':' || o_sequence);
                o_outcome := 'done';
            END
            $commit$
            """,
        ],
        [
            // A removed key keeps its row with no value, so a machine catching up on the
            // key-value stores' changes after its anchor hears of the removal (issue 24).
            "ALTER TABLE docfs.kv ALTER COLUMN value DROP NOT NULL",
            "CREATE INDEX kv_sequence ON docfs.kv (sequence)",
        ],
        [
            // Each store registers under a key of its own (DESIGN §9.0 identity): a space and a
            // name are one store's, never shared by two stores that asked for one name (stores
            // on one host all ask for the host's). Rows from before have none and are no
            // store's: their names stay taken, their spaces are never given again.
            "ALTER TABLE docfs.machines ADD COLUMN store text UNIQUE",
        ],
        [
            // The remote's tree is whole by construction (DESIGN §9.0, issue 49 §2): a version
            // becomes current only in a folder that is there, a folder is deleted only once
            // nothing is in it, and no folder goes inside itself; else nothing is committed
            // ('folder-gone' with the folder, 'folder-not-empty', 'cycle'); and a name is one
            // item's in its folder ('name-taken'). The index finds a folder's items, and a name
            // in it, among the versions.
            "CREATE INDEX versions_place ON docfs.versions (parent, name)",
            "CREATE INDEX versions_containers ON docfs.versions (container) WHERE kind = 'container'",
            """
            CREATE OR REPLACE FUNCTION docfs.commit_version(
                p_operation text, p_item bigint, p_refuse_stale boolean, p_base bigint, p_number bigint, p_previous boolean,
                p_digests text[], p_container text, p_scope text, p_parent bigint, p_name text, p_kind text, p_manifest text,
                p_size bigint, p_mode bigint, p_modified double precision, p_attributes bytea, p_author_machine text,
                p_author_user text, p_deleted boolean, p_resolves boolean, p_container_name text, p_container_public boolean,
                p_thumbnail text, p_lengths bytea,
                OUT o_outcome text, OUT o_conflict boolean, OUT o_number bigint, OUT o_sequence bigint, OUT o_current bigint,
                OUT o_missing text[])
            LANGUAGE plpgsql AS $commit$
            DECLARE
                v_last bigint := 0;
                v_container bigint;
            BEGIN
                SELECT 'done', o.conflict, o.number, o.sequence INTO o_outcome, o_conflict, o_number, o_sequence
                    FROM docfs.operations o WHERE o.operation = p_operation;
                IF FOUND THEN RETURN; END IF;
                SELECT array_agg(d) INTO o_missing FROM unnest(p_digests) AS d
                    WHERE NOT EXISTS (SELECT 1 FROM docfs.chunks c WHERE c.digest = d);
                IF o_missing IS NOT NULL THEN o_outcome := 'missing'; RETURN; END IF;
                INSERT INTO docfs.items (item, current_number, last_number) VALUES (p_item, 0, 0) ON CONFLICT (item) DO NOTHING;
                SELECT i.current_number, i.last_number INTO o_current, v_last FROM docfs.items i WHERE i.item = p_item FOR UPDATE;
                IF p_refuse_stale AND p_base <> o_current AND NOT p_previous THEN o_outcome := 'stale'; RETURN; END IF;
                IF p_base = o_current AND NOT p_previous THEN
                    -- Checked under the log's head, which every commit that moves a current
                    -- version holds to its end: what is read here stays true until this commits.
                    PERFORM 1 FROM docfs.log_head h WHERE h.id = 1 FOR UPDATE;
                    IF p_deleted THEN
                        IF p_kind = 'folder' AND EXISTS (
                            SELECT 1 FROM docfs.versions v JOIN docfs.items i ON i.item = v.item AND i.current_number = v.number
                            WHERE v.parent = p_item AND NOT v.deleted) THEN
                            o_outcome := 'folder-not-empty'; RETURN;
                        END IF;
                        -- A container's deletion (rare): its documents are found among all versions.
                        IF p_kind = 'container' AND EXISTS (
                            SELECT 1 FROM docfs.versions v JOIN docfs.items i ON i.item = v.item AND i.current_number = v.number
                            WHERE v.container = p_container AND v.kind <> 'container' AND NOT v.deleted) THEN
                            o_outcome := 'folder-not-empty'; RETURN;
                        END IF;
                    ELSIF p_kind <> 'container' THEN
                        -- A container whose item is deleted holds nothing.
                        SELECT v.item INTO v_container FROM docfs.versions v JOIN docfs.items i ON i.item = v.item AND i.current_number = v.number
                            WHERE v.kind = 'container' AND v.container = p_container AND v.deleted LIMIT 1;
                        IF FOUND THEN o_outcome := 'folder-gone'; o_current := v_container; RETURN; END IF;
                        IF p_kind <> 'container' AND EXISTS (
                            SELECT 1 FROM docfs.versions v JOIN docfs.items i ON i.item = v.item AND i.current_number = v.number
                            WHERE v.parent = p_parent AND v.name = p_name AND v.container = p_container AND v.scope = p_scope
                              AND NOT v.deleted AND v.item <> p_item) THEN
                            o_outcome := 'name-taken'; RETURN;
                        END IF;
                    END IF;
                    IF NOT p_deleted AND p_parent <> 0 THEN
                        IF NOT EXISTS (
                            SELECT 1 FROM docfs.items i JOIN docfs.versions v ON v.item = i.item AND v.number = i.current_number
                            WHERE i.item = p_parent AND NOT v.deleted AND v.kind IN ('folder', 'container')) THEN
                            o_outcome := 'folder-gone'; o_current := p_parent; RETURN;
                        END IF;
                        IF p_kind = 'folder' AND EXISTS (
                            WITH RECURSIVE above(item, steps) AS (
                                SELECT p_parent, 0
                                UNION ALL
                                SELECT v.parent, a.steps + 1 FROM above a
                                JOIN docfs.items i ON i.item = a.item
                                JOIN docfs.versions v ON v.item = i.item AND v.number = i.current_number
                                WHERE v.parent <> 0 AND a.steps < 10000)
                            SELECT 1 FROM above WHERE above.item = p_item) THEN
                            o_outcome := 'cycle'; RETURN;
                        END IF;
                    END IF;
                END IF;
                UPDATE docfs.log_head h SET sequence = h.sequence + 1 WHERE h.id = 1 RETURNING h.sequence INTO o_sequence;
                o_number := greatest(v_last + 1, p_number);
                o_conflict := p_base <> o_current AND NOT p_previous;
                INSERT INTO docfs.versions (item, number, base, container, scope, parent, name, kind, manifest, size, mode, modified,
                    attributes, author_machine, author_user, conflict, deleted, sequence, resolves, container_name, container_public,
                    thumbnail, previous, lengths)
                VALUES (p_item, o_number, p_base, p_container, p_scope, p_parent, p_name, p_kind, p_manifest, p_size, p_mode,
                    p_modified, p_attributes, p_author_machine, p_author_user, o_conflict, p_deleted, o_sequence, p_resolves,
                    p_container_name, p_container_public, p_thumbnail, p_previous, p_lengths);
                UPDATE docfs.items i SET last_number = o_number,
                    current_number = CASE WHEN o_conflict OR p_previous THEN o_current ELSE o_number END WHERE i.item = p_item;
                INSERT INTO docfs.operations VALUES (p_operation, p_item, o_number, o_conflict, o_sequence);
                -- A wake-up only (DESIGN §9): machines read the log from their anchors.
                PERFORM pg_notify('docfs_changes', p_container || ':' || o_sequence);
                o_outcome := 'done';
            END
            $commit$
            """,
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
