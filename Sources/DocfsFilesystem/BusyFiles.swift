import DocfsCore

/// Files whose write session is being started or ended outside the sessions' lock (a version
/// kept, a session committed), and the writers waiting for that to finish: each sleeps on a
/// semaphore of its own, signalled when the file stops being busy, instead of polling.
/// Kept inside `WriteSessions`'s state, under its lock; waiters wait and are signalled outside it.
struct BusyFiles {
    private var waiting: [BackingKey: [ThreadSemaphore]] = [:]

    func contains(_ key: BackingKey) -> Bool { waiting[key] != nil }

    /// `key` is busy now (it was not).
    mutating func insert(_ key: BackingKey) {
        waiting[key] = []
    }

    /// A semaphore signalled once `key` is no longer busy (wait on it outside the lock, then
    /// look again: another writer may have made it busy since).
    mutating func waiter(for key: BackingKey) -> ThreadSemaphore {
        let semaphore = ThreadSemaphore()
        waiting[key, default: []].append(semaphore)
        return semaphore
    }

    /// `key` is no longer busy: the semaphores of the writers waiting for it, to signal outside
    /// the lock.
    mutating func remove(_ key: BackingKey) -> [ThreadSemaphore] {
        waiting.removeValue(forKey: key) ?? []
    }
}
