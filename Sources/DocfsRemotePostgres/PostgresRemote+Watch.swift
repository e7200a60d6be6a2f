import DocfsSync
import PostgresNIO
import Synchronization

extension PostgresRemote {
    /// Listens on the channel commits notify (`docfs_changes`) over a connection of its own,
    /// on the bridge's thread: each notification wakes the engine, and so does every
    /// (re)connection, since notifications sent while it was away are lost (the engine reads
    /// the log from its anchor, so nothing is). A lost connection (the server restarted, an
    /// administrator ended it) is made again after 1 s, doubling to 30 s.
    public func watchChanges(_ wake: @escaping @Sendable () -> Void) -> RemoteWatch {
        let listener = ListeningConnection()
        let task = bridge.start { [self] in
            var pause = 1.0
            while !Task.isCancelled {
                do {
                    let connection = try await connect()
                    guard listener.hold(connection) else { break }
                    try await connection.listen(on: "docfs_changes") { notifications in
                        wake()
                        pause = 1
                        for try await _ in notifications { wake() }
                    }
                } catch {
                    logger.debug("sync: the remote's watch lost its connection: \(error)")
                }
                listener.close()
                if Task.isCancelled { break }
                wake()
                try? await Task.sleep(for: .seconds(pause))
                pause = min(pause * 2, 30)
            }
        }
        let watch = RemoteWatch {
            listener.cancel()
            task.cancel()
        }
        watches.withLock { $0.append(watch) }
        return watch
    }
}

/// The connection a watch listens on, closed from another thread to end the listening.
///
/// Lock order: `state` is a leaf lock.
final class ListeningConnection: Sendable {
    private struct State {
        var connection: PostgresConnection?
        var cancelled = false
    }

    private let state = Mutex(State())

    /// Keeps `connection` as the one listening; false (and closes it) once cancelled.
    func hold(_ connection: PostgresConnection) -> Bool {
        let cancelled = state.withLock { state in
            if !state.cancelled { state.connection = connection }
            return state.cancelled
        }
        if cancelled { Self.close(connection) }
        return !cancelled
    }

    func close() {
        if let connection = state.withLock({ state in defer { state.connection = nil }; return state.connection }) {
            Self.close(connection)
        }
    }

    func cancel() {
        state.withLock { $0.cancelled = true }
        close()
    }

    private static func close(_ connection: PostgresConnection) {
        let closing: EventLoopFuture<Void> = connection.close()
        closing.whenComplete { _ in withExtendedLifetime(connection) {} }
    }
}
