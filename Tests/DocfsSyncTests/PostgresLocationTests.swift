import DocfsRemotePostgres
import Foundation
import Testing

/// Connection URIs, `PG*` variables and `~/.pgpass` read as libpq reads them (issue 22 §1), and
/// the password never in what a store records or a message shows.
@Suite struct PostgresLocationTests {
    @Test func aFullURIIsReadAsLibpqReadsIt() throws {
        let location = try PostgresLocation("postgresql://alice:s%40cret@db.example.com:6543/notes?sslmode=require&connect_timeout=4",
                                            environment: [:], home: "/nonexistent")
        #expect(location.servers == [.init(host: "db.example.com", port: 6543)])
        #expect(location.user == "alice" && location.password == "s@cret" && location.database == "notes")
        #expect(location.tlsMode == .require && location.connectTimeout == 4)
        #expect(location.uri == "postgresql://alice@db.example.com:6543/notes?sslmode=require")
        #expect(!location.uri.contains("cret") && !location.description.contains("cret"))
    }

    @Test func whatTheURILeavesOutComesFromTheEnvironment() throws {
        let environment = ["PGHOST": "/tmp/sockets", "PGPORT": "7777", "PGUSER": "bob", "PGDATABASE": "docs",
                           "PGPASSWORD": "pw", "PGSSLMODE": "disable"]
        let location = try PostgresLocation("postgresql://", environment: environment, home: "/nonexistent")
        #expect(location.servers == [.init(host: "/tmp/sockets", port: 7777)] && location.servers[0].isSocketFolder)
        #expect(location.servers[0].socketPath == "/tmp/sockets/.s.PGSQL.7777")
        #expect(location.user == "bob" && location.database == "docs" && location.password == "pw" && location.tlsMode == .disable)
        // The URI wins over the environment; the user names the database when nothing else does.
        let named = try PostgresLocation("postgres://carol@h/", environment: ["PGUSER": "bob"], home: "/nonexistent")
        #expect(named.user == "carol" && named.database == "carol" && named.servers == [.init(host: "h", port: 5432)])
        #expect(named.tlsMode == .prefer && named.password == nil)
        let bare = try PostgresLocation("postgresql:///db", environment: [:], home: "/nonexistent", osUser: "dave")
        #expect(bare.user == "dave" && bare.servers[0].host == "/var/run/postgresql")
    }

    @Test func severalHostsIPv6AndSocketParameters() throws {
        let several = try PostgresLocation("postgresql://u@h1:5433,h2,[::1]:6000/db", environment: [:], home: "/nonexistent")
        #expect(several.servers == [.init(host: "h1", port: 5433), .init(host: "h2", port: 5432), .init(host: "::1", port: 6000)])
        #expect(several.uri == "postgresql://u@h1:5433,h2:5432,[::1]:6000/db")
        let socket = try PostgresLocation("postgresql://u@/db?host=%2Frun%2Fpg&port=5444", environment: [:], home: "/nonexistent")
        #expect(socket.servers == [.init(host: "/run/pg", port: 5444)])
        #expect(try PostgresLocation(socket.uri, environment: [:], home: "/nonexistent") == socket)
    }

    @Test func thePasswordFileIsReadAsLibpqReadsIt() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("pgpass-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        let file = home + "/.pgpass"
        try """
            # comments are skipped
            other.example.com:5432:*:alice:not-this-one
            db.example.com:5432:notes:alice:first\\:part\\\\x
            *:*:*:alice:fallback
            localhost:5432:*:bob:socket-password
            """.write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        let exact = try PostgresLocation("postgresql://alice@db.example.com/notes", environment: [:], home: home)
        #expect(exact.password == "first:part\\x")
        let wildcard = try PostgresLocation("postgresql://alice@elsewhere/db", environment: [:], home: home)
        #expect(wildcard.password == "fallback")
        let socket = try PostgresLocation("postgresql://bob@/db", environment: [:], home: home)
        #expect(socket.password == "socket-password")
        // PGPASSWORD comes before the file; the URI's own password before both.
        #expect(try PostgresLocation("postgresql://alice@elsewhere/db", environment: ["PGPASSWORD": "env"], home: home).password == "env")
        #expect(try PostgresLocation("postgresql://alice:uri@elsewhere/db", environment: ["PGPASSWORD": "env"], home: home).password == "uri")
        // A file others may read is ignored, as libpq ignores it.
        chmod(file, 0o644)
        #expect(try PostgresLocation("postgresql://alice@elsewhere/db", environment: [:], home: home).password == nil)
        // PGPASSFILE names another file.
        chmod(file, 0o600)
        try FileManager.default.moveItem(atPath: file, toPath: home + "/elsewhere")
        #expect(try PostgresLocation("postgresql://alice@elsewhere/db", environment: ["PGPASSFILE": home + "/elsewhere"], home: home).password == "fallback")
    }

    @Test(arguments: [
        ("mysql://u@h/db", "not a PostgreSQL URI"),
        ("postgresql://u:hunter2@h:99999/db", "not a port number"),
        ("postgresql://u:hunter2@h:port/db", "not a port number"),
        ("postgresql://u@h/db?sslmode=sometimes", "sslmode"),
        ("postgresql://u@h/db?colour=blue", "'colour' is not one docfs knows"),
        ("postgresql://u@h/db?sslmode", "has no value"),
        ("postgresql://u@h/d%zzb", "broken %-escape"),
        ("postgresql://u@[::1/db", "does not close"),
    ])
    func badURIsAreRefusedInWordsWithoutThePassword(_ uri: String, _ reason: String) {
        #expect {
            try PostgresLocation(uri, environment: [:], home: "/nonexistent")
        } throws: { error in
            let text = "\(error)"
            return text.contains(reason) && !text.contains("hunter2")
        }
    }
}

extension PostgresLocationTests {
    /// A URI's password is kept where libpq looks (~/.pgpass, mode 0600), replacing an older
    /// line for the same server, database and user and leaving the others.
    @Test func aURIsPasswordIsKeptInThePasswordFile() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("pgpass-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        try "other:5432:*:bob:theirs\ndb.example.com:5433:notes:alice:old\n".write(toFile: home + "/.pgpass", atomically: true, encoding: .utf8)
        chmod(home + "/.pgpass", 0o600)
        let location = try PostgresLocation("postgresql://alice:new%3Apass@db.example.com:5433/notes", environment: [:], home: home)
        #expect(try location.rememberPassword(home: home) == home + "/.pgpass")
        let text = try String(contentsOfFile: home + "/.pgpass", encoding: .utf8)
        #expect(text == "other:5432:*:bob:theirs\ndb.example.com:5433:notes:alice:new\\:pass\n")
        let attributes = try FileManager.default.attributesOfItem(atPath: home + "/.pgpass")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        // Read back without the URI's password: the file gives it.
        #expect(try PostgresLocation("postgresql://alice@db.example.com:5433/notes", environment: [:], home: home).password == "new:pass")
        #expect(try location.rememberPassword(home: home) == nil)
    }
}
