import CLinux
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Changes the store watcher is to look at again, posted from outside its thread. A content
/// change the watcher saw while docfs still had the file open for writing was taken for
/// docfs's own; when the last writer's close then shows another writer changed the file after
/// docfs's last write, the close posts the change here and the watcher sorts it out again,
/// in order with everything else it reports (one thread reports all store changes).
///
/// Lock order: `pending` is a leaf lock.
public final class StoreRechecks: Sendable {
    private let pending = Mutex<[StoreWatcher.Change]>([])
    /// An eventfd the watcher polls beside inotify; nonzero while changes are pending.
    let signal: Int32

    public init() {
        signal = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
    }

    deinit { if signal >= 0 { close(signal) } }

    /// Asks the watcher to look at `change` again.
    public func post(_ change: StoreWatcher.Change) {
        pending.withLock { $0.append(change) }
        var one: UInt64 = 1
        _ = write(signal, &one, MemoryLayout<UInt64>.size)
    }

    /// What was posted since the last call (clears the signal).
    func take() -> [StoreWatcher.Change] {
        var count: UInt64 = 0
        _ = read(signal, &count, MemoryLayout<UInt64>.size)
        return pending.withLock { pending in
            defer { pending.removeAll() }
            return pending
        }
    }
}
