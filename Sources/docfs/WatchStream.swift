import DocfsCoordination
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One `docfs watch` connection in the daemon: the changes under a path, as JSON lines, until
/// the client goes away. Presenters post from the operations' own threads; this queue takes
/// them at once and a thread of the connection's own writes them out.
enum WatchStream {
    static func serve(_ path: String, on connection: Int32, presenters: Presenters) {
        let queue = ChangeQueue()
        let token = presenters.subscribe { change in
            if change.concerns(path) { queue.push(change) }
        }
        defer {
            presenters.unsubscribe(token)
            close(connection)
        }
        let ready = ControlReply(ok: true, message: "watching \(path.isEmpty ? "the whole mount" : path)")
        guard let data = try? JSONEncoder().encode(ready), ControlLine.write(Array(data), to: connection) else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        while true {
            let changes = queue.take(waitingUpTo: 1)
            if changes.isEmpty {
                if clientLeft(connection) { return }
                continue
            }
            for change in changes {
                guard let line = try? encoder.encode(change), ControlLine.write(Array(line), to: connection) else { return }
            }
        }
    }

    /// Whether the client closed its end (nothing more will be read from it).
    private static func clientLeft(_ connection: Int32) -> Bool {
        var byte: UInt8 = 0
        let n = recv(connection, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }
}

/// Changes waiting to be written to one watcher.
///
/// Lock order: `changes` is a leaf lock.
final class ChangeQueue: @unchecked Sendable {
    // The semaphore is posted by pushers and waited on by the one writer thread.
    private var signal = sem_t()
    private let changes = Mutex<[PresentedChange]>([])

    init() { sem_init(&signal, 0, 0) }
    deinit { sem_destroy(&signal) }

    func push(_ change: PresentedChange) {
        changes.withLock { $0.append(change) }
        sem_post(&signal)
    }

    /// The changes queued so far, waiting up to `seconds` for the first.
    func take(waitingUpTo seconds: Int) -> [PresentedChange] {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_sec += seconds
        while sem_timedwait(&signal, &deadline) != 0 {
            if errno == ETIMEDOUT { break }
        }
        return changes.withLock { queued in
            defer { queued.removeAll() }
            return queued
        }
    }
}
