import GRDB

/// The index's tables, as migrations: an index made by an older docfs gets the missing steps
/// (and is rebuilt when a step leaves it empty), one from a schema this docfs does not know is
/// made anew (`IndexDatabase`).
///
///     items     one row (an *entry*, numbered) per name of an item, keyed by its place: the
///               record's attributes (tags as a JSON array), the change sequence that last
///               wrote it, and the backing file's inode and status-change time, which tell a
///               reconciling walk what changed
///     removals  entries removed from the index, with the sequence of their removal (and the
///               other machine whose change removed them), so a watcher in another process
///               can tell removed from never seen
///     meta      `built`: 1 once a whole rebuild has filled the index; `syncAnchor`: where the
///               sync engine is in the remote's log
///     outbox    what must go up to the remote (issue 22): an item per row, in order, written by
///               the commit of the journal frame that stitched the change (the same append)
///     syncItems each item's sync state (the remote version it was last in step with), as the
///               sync engine encodes it
///     syncParked changes of the remote's log that could not be applied here yet (a folder not
///               here, a name refused), with why, tried again later
///     syncLinks the id a symbolic link has on every machine, by the id derived from its inode
///               here
///
/// An item's row also says which machine its last change came from (`remoteMachine`, empty
/// for this one).
///
/// A step that only adds (an index on a column) keeps the rows: an index that has not run it is
/// migrated in place when opened for writing, without a rebuild.
enum IndexSchema {
    /// The newest migration that leaves the index empty: an index that has not run it is from
    /// an older docfs and needs a rebuild.
    static let newestRebuilding = "v2-entries"
    /// The newest migration of all.
    static let newest = "v8-removal-machine"

    static func migrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "items") { t in
                t.primaryKey("id", .integer)
                t.column("name", .text).notNull()
                t.column("path", .text).notNull()
                t.column("container", .text).notNull()
                t.column("containerName", .text).notNull()
                t.column("scope", .text).notNull()
                t.column("kind", .text).notNull()
                t.column("size", .integer).notNull()
                t.column("created", .double).notNull()
                t.column("modified", .double).notNull()
                t.column("contentType", .text).notNull()
                t.column("uti", .text).notNull()
                t.column("version", .integer).notNull()
                t.column("tags", .text).notNull()
                t.column("comment", .text).notNull()
                t.column("hasThumbnail", .boolean).notNull()
                t.column("isExternal", .boolean).notNull()
                t.column("originalPath", .text).notNull()
                t.column("localPath", .text).notNull()
                t.column("conflict", .boolean).notNull()
                t.column("downloadState", .text).notNull()
                t.column("uploadState", .text).notNull()
                t.column("sequence", .integer).notNull()
            }
            try db.create(index: "items_location", on: "items", columns: ["container", "scope", "path"])
            try db.create(index: "items_name", on: "items", columns: ["name"])
            try db.create(index: "items_modified", on: "items", columns: ["modified"])
            try db.create(index: "items_sequence", on: "items", columns: ["sequence"])
            try db.create(table: "removals") { t in
                t.primaryKey("id", .integer)
                t.column("sequence", .integer).notNull().indexed()
            }
            try db.create(table: "meta") { t in
                t.primaryKey("key", .text)
                t.column("value", .integer).notNull()
            }
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('sequence', 0)")
        }
        // One row per name rather than per item (hard links are several names of one item,
        // as a rebuild finds them), an entry number stable across renames, and fingerprints.
        // The old rows cannot be carried over: the index is marked for a rebuild.
        migrator.registerMigration(newestRebuilding) { db in
            try db.drop(table: "items")
            try db.drop(table: "removals")
            // Keyed by place, without a rowid: one B-tree holds the rows in path order. Every
            // write touches each index, so there are few: name (exact names and patterns), id
            // (an item's names), sequence (what changed, for watchers).
            try db.execute(sql: """
                CREATE TABLE items (
                    container TEXT NOT NULL, scope TEXT NOT NULL, path TEXT NOT NULL,
                    entry INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT NOT NULL, containerName TEXT NOT NULL,
                    kind TEXT NOT NULL, size INTEGER NOT NULL, created DOUBLE NOT NULL, modified DOUBLE NOT NULL,
                    contentType TEXT NOT NULL, uti TEXT NOT NULL, version INTEGER NOT NULL, tags TEXT NOT NULL,
                    comment TEXT NOT NULL, hasThumbnail BOOLEAN NOT NULL, isExternal BOOLEAN NOT NULL,
                    originalPath TEXT NOT NULL, localPath TEXT NOT NULL, conflict BOOLEAN NOT NULL,
                    downloadState TEXT NOT NULL, uploadState TEXT NOT NULL, sequence INTEGER NOT NULL,
                    backingInode INTEGER NOT NULL, statusChanged DOUBLE NOT NULL,
                    PRIMARY KEY (container, scope, path)
                ) WITHOUT ROWID
                """)
            try db.create(index: "items_name", on: "items", columns: ["name"])
            try db.create(index: "items_id", on: "items", columns: ["id"])
            try db.create(index: "items_sequence", on: "items", columns: ["sequence"])
            try db.execute(sql: "CREATE TABLE removals (sequence INTEGER NOT NULL, entry INTEGER NOT NULL, PRIMARY KEY (sequence, entry)) WITHOUT ROWID")
            try db.execute(sql: "DELETE FROM meta")
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('built', 0)")
        }
        // Date ranges (`modified > -7d AND modified < -5d`) read a range of an index instead of
        // every row (issue 20 §3: under 50 ms at a million items). The rows stay.
        migrator.registerMigration("v3-dates") { db in
            try db.create(index: "items_modified", on: "items", columns: ["modified"])
            try db.create(index: "items_created", on: "items", columns: ["created"])
        }
        // Many machines (issue 22): the durable outbox and each item's sync state.
        migrator.registerMigration("v4-sync") { db in
            try db.execute(sql: "CREATE TABLE outbox (position INTEGER PRIMARY KEY AUTOINCREMENT, item INTEGER NOT NULL, sequence INTEGER NOT NULL)")
            try db.execute(sql: "CREATE TABLE syncItems (item INTEGER PRIMARY KEY, state BLOB NOT NULL)")
        }
        // Changes of the remote's log this machine could not apply yet, tried again later.
        migrator.registerMigration("v5-sync-parked") { db in
            try db.execute(sql: "CREATE TABLE syncParked (sequence INTEGER PRIMARY KEY, change BLOB NOT NULL, problem TEXT NOT NULL)")
            // Symbolic links carry no id in the store (theirs is derived from the inode here):
            // the id they have on every machine, by the one they have here.
            try db.execute(sql: "CREATE TABLE syncLinks (local INTEGER PRIMARY KEY, remote INTEGER NOT NULL UNIQUE)")
            // Where each item in step is on the remote: which item a new one takes a name from.
            try db.execute(sql: "ALTER TABLE syncItems ADD COLUMN place TEXT")
            try db.execute(sql: "CREATE INDEX syncItems_place ON syncItems (place)")
        }
        // References travel (issue 22 §2) under an id of their own, derived here from their own
        // file's inode, as symbolic links do: their records found by it.
        migrator.registerMigration("v6-reference-inodes") { db in
            try db.execute(sql: "CREATE INDEX items_reference_inode ON items (backingInode) WHERE scope = 'external'")
        }
        // Which machine a record's last change came from (issue 22 §3), for `query --watch`.
        migrator.registerMigration("v7-remote-machine") { db in
            try db.execute(sql: "ALTER TABLE items ADD COLUMN remoteMachine TEXT NOT NULL DEFAULT ''")
        }
        // And which machine a removal came from, so `query --watch` says it of removals too.
        migrator.registerMigration(newest) { db in
            try db.execute(sql: "ALTER TABLE removals ADD COLUMN machine TEXT NOT NULL DEFAULT ''")
        }
        return migrator
    }
}
