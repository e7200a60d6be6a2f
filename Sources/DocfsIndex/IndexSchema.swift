import GRDB

/// The index's tables, as migrations: a store opened by a newer docfs gets the missing steps,
/// and an index from a schema this docfs does not know is rebuilt (`IndexDatabase`).
///
///     items     one row per item: the record's attributes (tags as a JSON array), and the
///               change sequence that last wrote it
///     removals  items removed from the index, with the sequence of their removal, so a
///               watcher in another process can tell removed from never seen
///     meta      the last change sequence handed out
enum IndexSchema {
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
        return migrator
    }
}
