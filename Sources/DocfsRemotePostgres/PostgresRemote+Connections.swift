import DocfsSync
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

extension PostgresRemote {
    /// Runs `body` on a connection (in a transaction when asked) on the bridge's thread, and
    /// answers its result. Serialization failures, deadlocks and a commit racing its own retry
    /// are tried again after a jittered pause; a connection found broken is dropped and the
    /// call tried once more on a new one (the server restarted while it sat idle).
    @discardableResult
    func perform<Value: Sendable>(_ what: String, transaction: Bool = false, limit: Duration = operationLimit,
                                  _ body: @escaping @Sendable (PostgresConnection) async throws -> Value) throws(RemoteError) -> Value {
        var attempt = 0
        while true {
            attempt += 1
            do {
                // The connection the operation runs on: closed when it takes too long.
                let leased = Mutex<PostgresConnection?>(nil)
                return try bridge.run(within: limit, gaveUp: { [bridge] in
                    guard let connection = leased.withLock({ $0 }) else { return }
                    bridge.start { try? await connection.close() }
                }) { [self] in
                    let connection = try await lease()
                    leased.withLock { $0 = connection }
                    do {
                        let value: Value
                        if transaction {
                            value = try await connection.withTransaction(logger: logger) { connection in try await body(connection) }
                        } else {
                            value = try await body(connection)
                        }
                        giveBack(connection)
                        return value
                    } catch {
                        // A connection the server ended (its FATAL message comes before the
                        // socket closes, so it does not look closed yet) is never leased again:
                        // the retry on a new connection took it back once and failed too.
                        if Self.failure(error, doing: what, at: location).retry == .onNewConnection {
                            try? await connection.close()
                        } else {
                            giveBack(connection)
                        }
                        throw error
                    }
                }
            } catch {
                let failure = Self.failure(error, doing: what, at: location)
                switch failure.retry {
                case .no:
                    throw failure.error
                case .afterPause where attempt < 10:
                    usleep(UInt32.random(in: 1_000...(20_000 * UInt32(attempt))))
                case .onNewConnection where attempt < 2:
                    continue
                default:
                    throw failure.error
                }
            }
        }
    }

    /// How long one operation may take on its connection before the connection is taken for
    /// dead and closed (a server that stopped or restarted under a request, a cable pulled: the
    /// client would wait for an answer that never comes; the sync loop tries again later). The
    /// log's pruning and the chunks' sweep, whose statements go over whole tables, get longer.
    static let operationLimit: Duration = .seconds(30)
    static let sweepLimit: Duration = .seconds(1800)

    /// An idle connection, else a new one to the first server that answers.
    private func lease() async throws -> PostgresConnection {
        while let connection = takeIdle() {
            if !connection.isClosed { return connection }
        }
        return try await connect()
    }

    /// A new connection to the first of the location's servers that answers.
    func connect() async throws -> PostgresConnection {
        var lastError: (any Error)?
        for server in location.servers {
            var configuration: PostgresConnection.Configuration
            if server.isSocketFolder {
                configuration = .init(unixSocketPath: server.socketPath, username: location.user,
                                      password: location.password, database: location.database)
            } else {
                configuration = .init(host: server.host, port: server.port, username: location.user,
                                      password: location.password, database: location.database, tls: tls)
            }
            configuration.options.connectTimeout = .milliseconds(Int64(location.connectTimeout * 1000))
            configuration.options.additionalStartupParameters = [("application_name", "docfs \(machine)")]
            let connection: PostgresConnection
            do {
                let number = connectionNumbers.wrappingAdd(1, ordering: .relaxed).newValue
                connection = try await PostgresConnection.connect(configuration: configuration, id: number, logger: logger)
            } catch {
                lastError = error
                continue
            }
            if !prepared.load(ordering: .acquiring) {
                do {
                    try await RemoteSchema.prepare(connection, database: location.database, logger: logger)
                    prepared.store(true, ordering: .releasing)
                } catch {
                    try? await connection.close()
                    throw error
                }
            }
            return connection
        }
        throw lastError ?? RemoteError(.refused, "the URI names no server")
    }

    private func takeIdle() -> PostgresConnection? {
        idle.withLock { $0.popLast() }
    }

    private func giveBack(_ connection: PostgresConnection) {
        guard !connection.isClosed else { return }
        idle.withLock { $0.append(connection) }
    }

    enum Retry { case no, afterPause, onNewConnection }

    /// What went wrong, in words a user can act on, and whether trying again may help.
    static func failure(_ error: any Error, doing what: String, at location: PostgresLocation) -> (error: RemoteError, retry: Retry) {
        let place = location.servers.map { $0.isSocketFolder ? $0.socketPath : "\($0.host):\($0.port)" }.joined(separator: ", ")
        if let error = error as? RemoteError { return (error, .no) }
        if error is BlockingBridge.TimedOut {
            return (RemoteError(.unreachable, "PostgreSQL at \(place) did not answer in time while docfs tried to \(what); docfs tries again on a new connection"), .no)
        }
        if let error = error as? PostgresTransactionError {
            if let inner = error.closureError ?? error.beginError ?? error.commitError {
                return failure(inner, doing: what, at: location)
            }
        }
        if let error = error as? PSQLError {
            if let state = error.serverInfo?[.sqlState] {
                let message = error.serverInfo?[.message] ?? "\(error.code)"
                switch state {
                case "40001", "40P01", "23505":
                    return (RemoteError(.unreachable, "PostgreSQL: \(message)"), .afterPause)
                case "28P01", "28000":
                    return (RemoteError(.refused, "PostgreSQL at \(place) refused the login of user '\(location.user)' (\(message)): check the password in ~/.pgpass or PGPASSWORD, and pg_hba.conf"), .no)
                case "3D000":
                    return (RemoteError(.refused, "PostgreSQL at \(place) has no database '\(location.database)': create it (createdb \(location.database)) or fix the URI"), .no)
                case "42501":
                    return (RemoteError(.refused, "PostgreSQL refused to \(what): user '\(location.user)' lacks the privilege (\(message)); grant it or use the database's owner"), .no)
                case let state where state.hasPrefix("57P") || state.hasPrefix("08"):
                    return (RemoteError(.unreachable, "PostgreSQL at \(place) went away while docfs tried to \(what) (\(message)); docfs tries again"), .onNewConnection)
                default:
                    return (RemoteError(.refused, "PostgreSQL refused to \(what): \(message)"), .no)
                }
            }
            switch error.code {
            case .authMechanismRequiresPassword:
                return (RemoteError(.refused, "PostgreSQL at \(place) asks user '\(location.user)' for a password: put it in ~/.pgpass (host:port:database:user:password, mode 0600) or PGPASSWORD"), .no)
            case .sslUnsupported:
                return (RemoteError(.refused, "PostgreSQL at \(place) does not offer TLS, which sslmode=\(location.tlsMode.rawValue) requires: enable ssl on the server or lower sslmode"), .no)
            case .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .connectionError:
                let reason = error.underlying.map { "\($0)" } ?? "\(error.code)"
                return (RemoteError(.unreachable, "cannot reach PostgreSQL at \(place) to \(what) (\(reason)); docfs tries again"), .onNewConnection)
            default:
                return (RemoteError(.unreachable, "PostgreSQL at \(place) failed to \(what): \(error.code)"), .no)
            }
        }
        return (RemoteError(.unreachable, "cannot reach PostgreSQL at \(place) to \(what) (\(error)): check that it runs and the URI; docfs tries again"), .no)
    }

    /// The TLS a connection asks for, as libpq's `sslmode` says: `prefer` and `require` encrypt
    /// without checking the certificate (unless `sslrootcert` names roots, then `require`
    /// checks as `verify-ca`), `verify-ca` checks it against the roots, `verify-full` also checks
    /// the host name.
    static func tls(for location: PostgresLocation) throws(RemoteError) -> PostgresConnection.Configuration.TLS {
        if location.tlsMode == .disable { return .disable }
        var configuration = TLSConfiguration.makeClientConfiguration()
        let home = ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()
        let defaultRoots = "\(home)/.postgresql/root.crt"
        let roots = location.rootCertificate ?? (FileManager.default.fileExists(atPath: defaultRoots) ? defaultRoots : nil)
        switch location.tlsMode {
        case .disable, .allow, .prefer:
            configuration.certificateVerification = .none
        case .require:
            configuration.certificateVerification = roots == nil ? .none : .noHostnameVerification
        case .verifyCA:
            configuration.certificateVerification = .noHostnameVerification
        case .verifyFull:
            configuration.certificateVerification = .fullVerification
        }
        if let roots, configuration.certificateVerification != .none {
            configuration.trustRoots = .file(roots)
        }
        do {
            let context = try NIOSSLContext(configuration: configuration)
            switch location.tlsMode {
            case .allow, .prefer: return .prefer(context)
            default: return .require(context)
            }
        } catch {
            throw RemoteError(.refused, "cannot set up TLS for sslmode=\(location.tlsMode.rawValue)\(roots.map { " with roots \($0)" } ?? ""): \(error)")
        }
    }
}
