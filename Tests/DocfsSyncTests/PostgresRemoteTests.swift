import DocfsChunks
import DocfsRemotePostgres
import DocfsSync
import DocfsTestSupport
import Foundation
import Synchronization
import Testing

/// What only the PostgreSQL remote has to get right (issue 22 §1, §5, §6): a link that cannot
/// work says why in one line and changes nothing; the schema is docfs's and versioned; a commit
/// that takes long to commit is never skipped by a reader of the log.
@Suite struct PostgresRemoteTests {
    static func link(_ uri: String) throws(RemoteError) -> PostgresRemote {
        let location: PostgresLocation
        do { location = try PostgresLocation(uri, environment: [:], home: "/nonexistent") } catch {
            throw RemoteError(.refused, "\(error)")
        }
        return try PostgresRemote(location, machine: "test")
    }

    /// A new database on the shared server, its name, a remote linked to it, and the digest of
    /// the one chunk ("one") put there.
    static func remoteHoldingOneChunk(_ label: String) throws -> (ThrowawayPostgres, String, PostgresRemote, ChunkDigest) {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase(label)
        let name = String(uri.split(separator: "/").last!.split(separator: "?")[0])
        let remote = try link(uri)
        let bytes = Array("one".utf8)
        let digest = bytes.withUnsafeBytes { ChunkDigest(of: $0) }
        do { try remote.putChunk(digest, bytes: bytes) } catch {
            remote.close()
            throw error
        }
        return (server, name, remote, digest)
    }

    static func refusal(_ uri: String) -> RemoteError? {
        do {
            let remote = try link(uri)
            remote.close()
            return nil
        } catch {
            return error
        }
    }

    @Test func aWrongPasswordIsRefusedInWordsWithoutThePassword() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("password")
        let wrong = uri.replacingOccurrences(of: server.password, with: "hunter2")
        let error = try #require(Self.refusal(wrong))
        #expect(error.kind == .refused)
        #expect(error.message.contains("refused the login of user 'docfs_test'") && error.message.contains("~/.pgpass"))
        #expect(!error.message.contains("hunter2") && !error.message.contains(server.password))
        // Nothing was made in the database.
        #expect(try server.sql("SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'docfs'",
                               database: String(uri.split(separator: "/").last!.split(separator: "?")[0])) == "0\n")
    }

    @Test func anUnreachableServerAndAMissingDatabaseSayWhatToDo() throws {
        let server = try ThrowawayPostgres.shared()
        // A loopback port nothing listens on: refused at once, not after a long wait.
        let started = Date()
        let unreachable = try #require(Self.refusal("postgresql://docfs_test:x@127.0.0.1:1/db?sslmode=disable&connect_timeout=3"))
        #expect(unreachable.kind == .unreachable && unreachable.message.contains("cannot reach PostgreSQL at 127.0.0.1:1"))
        #expect(Date().timeIntervalSince(started) < 5)
        let missing = try #require(Self.refusal("postgresql://docfs_test:\(server.password)@127.0.0.1:\(server.port)/nosuchdb?sslmode=disable"))
        #expect(missing.kind == .refused && missing.message.contains("has no database 'nosuchdb'") && missing.message.contains("createdb"))
        // sslmode=require against a server without TLS.
        let tls = try #require(Self.refusal("postgresql://docfs_test:\(server.password)@127.0.0.1:\(server.port)/postgres?sslmode=require"))
        #expect(tls.kind == .refused && tls.message.contains("does not offer TLS"))
    }

    @Test func aDatabaseThatIsNotDocfssIsRefusedAndLeftAlone() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("foreign")
        let name = String(uri.split(separator: "/").last!.split(separator: "?")[0])
        try server.sql("CREATE TABLE invoices (id int); INSERT INTO invoices VALUES (1)", database: name)
        let error = try #require(Self.refusal(uri))
        #expect(error.kind == .refused && error.message.contains("tables that are not docfs's") && error.message.contains("empty database"))
        #expect(try server.sql("SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'docfs'", database: name) == "0\n")
        #expect(try server.sql("SELECT count(*) FROM invoices", database: name) == "1\n")
    }

    @Test func aSchemaNewerThanThisDocfsIsRefusedAndTheCurrentOneKept() throws {
        let server = try ThrowawayPostgres.shared()
        let uri = try server.makeDatabase("schema")
        let name = String(uri.split(separator: "/").last!.split(separator: "?")[0])
        let first = try Self.link(uri)
        first.close()
        #expect(try server.sql("SELECT value FROM docfs.meta WHERE key = 'schema_version'", database: name) == "11\n")
        // Linking again finds the schema current and changes nothing.
        let again = try Self.link(uri)
        let m = MachineRegistration(store: "store-m", name: "m")
        #expect(try again.join(m).space == 0 && again.join(m).space == 0)
        again.close()
        #expect(try server.sql("SELECT count(*) FROM docfs.machines", database: name) == "1\n")
        // A remote of schema 1 (before chunks knew when they were last used, before references travelled, before commits took one round trip, before key-value removals were kept, before commits kept the tree whole) is migrated.
        try server.sql("""
            ALTER TABLE docfs.chunks DROP COLUMN used;
            ALTER TABLE docfs.versions DROP COLUMN resolves, DROP COLUMN container_name, DROP COLUMN container_public,
                DROP COLUMN committed, DROP COLUMN thumbnail, DROP COLUMN previous, DROP COLUMN lengths;
            DROP FUNCTION docfs.commit_version;
            DROP INDEX docfs.kv_sequence;
            DROP INDEX docfs.versions_place;
            DROP INDEX docfs.versions_containers;
            ALTER TABLE docfs.machines DROP COLUMN store;
            ALTER TABLE docfs.kv ALTER COLUMN value SET NOT NULL;
            DELETE FROM docfs.meta WHERE key = 'log_horizon';
            UPDATE docfs.meta SET value = '1' WHERE key = 'schema_version'
            """, database: name)
        let older = try Self.link(uri)
        #expect(try older.sweepChunks(unusedFor: 0) == ChunkSweep(chunks: 0, bytes: 0))
        older.close()
        #expect(try server.sql("SELECT value FROM docfs.meta WHERE key = 'schema_version'", database: name) == "11\n")
        #expect(try server.sql("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'docfs' AND column_name IN ('used', 'resolves', 'previous', 'lengths', 'store')",
                               database: name) == "5\n")
        #expect(try server.sql("SELECT count(*) FROM information_schema.routines WHERE routine_schema = 'docfs' AND routine_name = 'commit_version'",
                               database: name) == "1\n")
        #expect(try server.sql("SELECT is_nullable FROM information_schema.columns WHERE table_schema = 'docfs' AND table_name = 'kv' AND column_name = 'value'",
                               database: name) == "YES\n")
        try server.sql("UPDATE docfs.meta SET value = '99' WHERE key = 'schema_version'", database: name)
        let error = try #require(Self.refusal(uri))
        #expect(error.kind == .refused && error.message.contains("version 99") && error.message.contains("update docfs"))
    }

    /// A daemon that starts offline makes its remote without reaching the server; the first call
    /// that reaches it prepares the schema; an unreachable server fails each call, not the start.
    @Test func aRemoteMadeWithoutConnectingConnectsOnFirstUse() throws {
        let server = try ThrowawayPostgres.shared()
        let offline = try PostgresRemote(PostgresLocation("postgresql://docfs_test:x@127.0.0.1:1/db?sslmode=disable"),
                                         machine: "m", connectingNow: false)
        #expect { try offline.changes(after: .start, limit: 1) } throws: { ($0 as? RemoteError)?.kind == .unreachable }
        offline.close()
        let uri = try server.makeDatabase("lazy")
        let name = String(uri.split(separator: "/").last!.split(separator: "?")[0])
        let lazy = try PostgresRemote(PostgresLocation(uri), machine: "m", connectingNow: false)
        defer { lazy.close() }
        #expect(try server.sql("SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'docfs'", database: name) == "0\n")
        #expect(try lazy.changes(after: .start, limit: 1).changes.isEmpty)
        #expect(try server.sql("SELECT value FROM docfs.meta WHERE key = 'schema_version'", database: name) == "11\n")
    }

    /// A commit whose transaction is slow to finish holds the log's head: a later commit waits
    /// for it and takes the next sequence, so a reader never sees a later change before an
    /// earlier one and never skips one (DESIGN §9).
    @Test func aLateCommitIsNeverSkippedByAReaderOfTheLog() throws {
        let (server, name, remote, digest) = try Self.remoteHoldingOneChunk("late")
        defer { remote.close() }
        let author = RemoteAuthor(machine: "a", user: "u")
        @Sendable func version(_ item: UInt64) -> RemoteVersion {
            RemoteVersion(item: item, container: "docfs.default", name: "f\(item)", kind: .file, base: 0,
                          manifest: [digest], size: 3, modified: 0, author: author)
        }
        _ = try remote.commit(version(1), operation: "one")
        let anchor = try remote.changes(after: .start, limit: 10).next
        // Another session's transaction holds the head for two seconds, as a slow commit would.
        let holder = Thread {
            _ = try? server.sql("BEGIN; SELECT sequence FROM docfs.log_head FOR UPDATE; SELECT pg_sleep(2); COMMIT;", database: name)
        }
        holder.start()
        Thread.sleep(forTimeInterval: 0.5)
        let committed = Mutex<RemoteCommitOutcome?>(nil)
        let second = version(2)
        let committer = Thread {
            let outcome = try? remote.commit(second, operation: "two")
            committed.withLock { $0 = outcome }
        }
        committer.start()
        Thread.sleep(forTimeInterval: 0.5)
        // The second commit waits; the reader sees nothing past its anchor yet.
        #expect(committed.withLock { $0 } == nil)
        #expect(try remote.changes(after: anchor, limit: 10).changes.isEmpty)
        let deadline = Date().addingTimeInterval(10)
        while committed.withLock({ $0 }) == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        let after = try remote.changes(after: anchor, limit: 10)
        #expect(after.changes.map(\.version.item) == [2] && after.changes.first?.sequence == anchor.sequence + 1)
    }

    /// Pages of the log and of the listing are long answers: the server ending the connection
    /// while one comes costs a retry, never the process (postgres-nio stops it when a many-row
    /// answer is cut while its rows wait for the reader, so pages come as one row of arrays).
    @Test func theServerEndingConnectionsDuringLongPagesCostsOnlyRetries() throws {
        let (server, name, remote, digest) = try Self.remoteHoldingOneChunk("pages")
        defer { remote.close() }
        let first = RemoteVersion(item: 1, container: "docfs.default", name: "f1", kind: .file, base: 0,
                                  manifest: Array(repeating: digest, count: 8), size: 24, modified: 1.5,
                                  author: RemoteAuthor(machine: "a", user: "u"))
        _ = try remote.commit(first, operation: "one")
        #expect(try remote.changes(after: .start, limit: 10).changes.map(\.sequence) == [1])
        // 4,000 more like it, made by the server (a commit apiece would take long).
        let count = 4000
        _ = try server.sql("""
            INSERT INTO docfs.versions SELECT (jsonb_populate_record(v, jsonb_build_object('item', g, 'sequence', g, 'name', 'f' || g))).*
                FROM docfs.versions v, generate_series(2, \(count)) g WHERE v.item = 1;
            INSERT INTO docfs.items SELECT g, 1, 1 FROM generate_series(2, \(count)) g;
            UPDATE docfs.log_head SET sequence = \(count);
            """, database: name)
        let whole = try remote.changes(after: .start, limit: count)
        #expect(whole.changes.map(\.version.item) == Array(1...UInt64(count)))
        #expect(whole.changes.allSatisfy { $0.version.manifest.count == 8 && $0.version.modified == 1.5 })
        #expect(try remote.listing(after: 0, limit: count).map(\.version.name) == whole.changes.map(\.version.name))
        // For 10 s the server ends every connection of the database again and again while pages
        // are read (a call cut short is tried again; one the client was not told of waits out
        // the remote's operation limit, so reads go on past the 10 s, bounded by that limit).
        let ended = Atomic<Int>(0)
        let ender = Thread {
            let stop = Date().addingTimeInterval(10)
            while Date() < stop {
                let answer = try? server.sql(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
                    database: name)
                ended.add(Int(answer?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0, ordering: .relaxed)
                usleep(50_000)
            }
        }
        ender.start()
        var (read, refused) = (0, 0)
        while !ender.isFinished {
            do {
                let page = try remote.changes(after: .start, limit: count)
                #expect(page.changes.count == count)
                let listing = try remote.listing(after: UInt64(count / 2), limit: count)
                #expect(listing.map(\.version.item) == Array(UInt64(count / 2 + 1)...UInt64(count)))
                read += 1
            } catch {
                refused += 1
            }
        }
        #expect(ended.load(ordering: .relaxed) > 0, "the server ended no connection (\(read) pages read, \(refused) calls failed)")
        #expect(try remote.changes(after: .start, limit: count).changes.map(\.version.item) == Array(1...UInt64(count)))
    }

    /// A call waiting on the server whose connection the server ends (an administrator's
    /// `pg_terminate_backend`, a server shutting down) is tried again on a new connection at
    /// once: it does not wait out the remote's 30 s operation limit.
    @Test func aCallWhoseConnectionTheServerEndsIsTriedAgainAtOnce() throws {
        let (server, name, remote, digest) = try Self.remoteHoldingOneChunk("ended")
        defer { remote.close() }
        // A transaction holds the chunks' table for 3 s: the fetch below waits on its lock.
        let holder = Thread {
            _ = try? server.sql("BEGIN; LOCK TABLE docfs.chunks IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(3); COMMIT;", database: name)
        }
        holder.start()
        let held = SyncLoopTests.waitFor(5) {
            (try? server.sql("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'chunks' AND l.mode = 'AccessExclusiveLock' AND l.granted",
                             database: name))?.hasPrefix("1") == true
        }
        #expect(held != nil, "the lock was never taken")
        let start = Date()
        let fetched = Mutex<(bytes: Result<[UInt8], RemoteError>, seconds: Double)?>(nil)
        let fetcher = Thread {
            let bytes = Result { () throws(RemoteError) in try remote.fetchChunk(digest) }
            fetched.withLock { $0 = (bytes, Date().timeIntervalSince(start)) }
        }
        fetcher.start()
        // The fetch's backend, waiting on the lock, is ended.
        let ended = SyncLoopTests.waitFor(5) {
            (try? server.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                             database: name))?.hasPrefix("1") == true
        }
        #expect(ended != nil, "no backend waited on the lock")
        #expect(SyncLoopTests.waitFor(20) { fetched.withLock { $0 } != nil } != nil, "the fetch did not end within 20 s")
        let outcome = try #require(fetched.withLock { $0 })
        #expect((try? outcome.bytes.get()) == Array("one".utf8), "the fetch failed instead of going again on a new connection: \(outcome.bytes)")
        #expect(outcome.seconds < 8, "the fetch took \(outcome.seconds) s (the lock was held 3 s)")
    }
}
