import Foundation
import Synchronization

/// The test process's own PostgreSQL server (scripts/throwaway-postgres): started at the first
/// test that needs it, stopped by the script's watchdog when this process ends, passed or
/// failed. Each test takes a database of its own, so tests run side by side; a test that
/// stops and starts its server (a restart during saves) makes one of its own (`private()`).
public final class ThrowawayPostgres: Sendable {
    public let folder: String
    public let port: Int
    public let password: String
    private let databases = Atomic<Int>(0)

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/throwaway-postgres").path

    private static let started = Mutex<Result<ThrowawayPostgres, ThrowawayPostgresError>?>(nil)

    /// The server, started on first use.
    public static func shared() throws -> ThrowawayPostgres {
        try started.withLock { started in
            if let started { return try started.get() }
            let result: Result<ThrowawayPostgres, ThrowawayPostgresError>
            do { result = .success(try ThrowawayPostgres()) } catch let error as ThrowawayPostgresError {
                result = .failure(error)
            } catch {
                result = .failure(ThrowawayPostgresError(description: "\(error)"))
            }
            started = result
            return try result.get()
        }
    }

    private init(listeningAlsoOn addresses: [String] = [], inNamespace namespace: String? = nil) throws {
        folder = try Self.run(["start", String(getpid())] + (addresses.isEmpty && namespace == nil ? [] : [addresses.joined(separator: ",")])
                              + (namespace.map { [$0] } ?? []))
            .trimmingCharacters(in: .whitespacesAndNewlines)
        port = Int(try String(contentsOfFile: folder + "/port", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        password = try String(contentsOfFile: folder + "/password", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A server of the caller's own (stopped with this process), listening on `addresses`
    /// too (each must be one of this machine's: the root side of a test's veth pair).
    public static func `private`(listeningAlsoOn addresses: [String] = []) throws -> ThrowawayPostgres {
        try ThrowawayPostgres(listeningAlsoOn: addresses)
    }

    /// A server of the caller's own running in the network namespace `namespace` (`ip netns`),
    /// listening on `address`, one of that namespace's: reached over the test's own network.
    public static func `private`(inNamespace namespace: String, listeningOn address: String) throws -> ThrowawayPostgres {
        try ThrowawayPostgres(listeningAlsoOn: [address], inNamespace: namespace)
    }

    /// Stops the server (as an administrator's restart or a crash would); `start` brings it
    /// back on the same port with the same data.
    public func stop() throws { try Self.run(["pause", folder]) }
    public func start() throws { try Self.run(["resume", folder]) }

    /// A new empty database; answers its URI with the password in it, reached at `host`.
    public func makeDatabase(_ label: String = "t", host: String = "127.0.0.1") throws -> String {
        let name = "\(label.lowercased().filter { $0.isLetter || $0.isNumber })_\(databases.wrappingAdd(1, ordering: .relaxed).newValue)"
        _ = try Self.run(["createdb", folder, name])
        return "postgresql://docfs_test:\(password)@\(host):\(port)/\(name)?sslmode=disable"
    }

    /// Runs SQL as the superuser on `database`; answers psql's output.
    @discardableResult
    public func sql(_ statement: String, database: String) throws -> String {
        try Self.run(["psql", folder, "-d", database, "-At", "-c", statement])
    }

    /// Runs the script with `arguments`; answers what it printed. Spawned and waited for
    /// directly: Foundation's Process did not always hear the script end (it left a zombie)
    /// once the script had started a server in the background.
    @discardableResult
    static func run(_ arguments: [String]) throws -> String {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("throwaway-postgres-\(UUID().uuidString)").path
        defer { unlink(output); unlink(output + ".err") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, output + ".err", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv = ([script] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, script, &actions, nil, argv, environ)
        guard spawned == 0 else { throw ThrowawayPostgresError(description: "cannot run \(script): errno \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else {
            let problems = (try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? ""
            throw ThrowawayPostgresError(description: "throwaway-postgres \(arguments.joined(separator: " ")): \(problems)")
        }
        return text
    }
}

public struct ThrowawayPostgresError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

extension String {
    /// The database name at the end of a test URI.
    public var databaseName: String { String(split(separator: "/").last!.split(separator: "?")[0]) }
}
