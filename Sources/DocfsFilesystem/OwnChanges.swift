import CLinux
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What docfs changed in the store itself, so the store watcher can tell those changes from an
/// uncoordinated writer's (C5): names it created, removed or moved (each expected as one
/// event, for a few seconds), and files it has open for writing or last left with a known
/// modification time and size (a content change that shows another is someone else's; docfs's
/// own attribute changes move ctime, never these) and change time (an attribute change that
/// shows another is someone else's).
///
/// Lock order: `state` is a leaf lock.
final class OwnChanges: Sendable {
    struct Place: Hashable {
        let directory: BackingKey
        let name: FileName
    }

    private struct Activity {
        var writers = 0
        var mtime = timespec()
        var ctime = timespec()
        var size: Int64 = -1
        /// When docfs last touched the file (SafeSaveTracker.now()).
        var time: Double = 0
    }

    private struct State {
        var names: [Place: (count: Int, time: Double)] = [:]
        var files: [BackingKey: Activity] = [:]
        var handles: [UInt64: BackingKey] = [:]
        /// Sizes at which the records are next swept of what the watcher no longer needs.
        var nextNameSweep = OwnChanges.capacity
        var nextFileSweep = OwnChanges.capacity

        /// Whether a name event at `place` is one of docfs's own (and consumes its record).
        mutating func consumeName(_ place: Place, now: Double) -> Bool {
            guard let expected = names[place], now - expected.time < OwnChanges.expectation else { return false }
            names[place] = expected.count > 1 ? (expected.count - 1, expected.time) : nil
            return true
        }

        /// Whether a content change of the file in state `st` is docfs's own: written through
        /// an open handle, or unchanged since docfs last closed it.
        func isOwnContent(_ st: stat) -> Bool {
            guard let activity = files[BackingKey(st)] else { return false }
            return activity.writers > 0 || (activity.size == Int64(st.st_size)
                && activity.mtime.tv_sec == st.st_mtim.tv_sec && activity.mtime.tv_nsec == st.st_mtim.tv_nsec)
        }

        /// Whether an attribute change of the file in state `st` is docfs's own: made while
        /// docfs writes it, or none since docfs last changed or closed it.
        func isOwnAttributeChange(_ st: stat) -> Bool {
            guard let activity = files[BackingKey(st)] else { return false }
            return activity.writers > 0
                || (activity.ctime.tv_sec == st.st_ctim.tv_sec && activity.ctime.tv_nsec == st.st_ctim.tv_nsec)
        }

        mutating func addWriter(of key: BackingKey, now: Double) {
            files[key, default: Activity()].writers += 1
            files[key]!.time = now
        }

        mutating func record(_ st: stat, now: Double) {
            let key = BackingKey(st)
            files[key, default: Activity()].mtime = st.st_mtim
            files[key]!.ctime = st.st_ctim
            files[key]!.size = Int64(st.st_size)
            files[key]!.time = now
        }

        /// Drops records older than `expectation` once there are many; a burst of recent ones
        /// (the watcher may lag behind thousands of creates) is kept, and swept again only once
        /// it has doubled, so sweeping stays linear.
        mutating func sweep(now: Double) {
            if names.count >= nextNameSweep {
                names = names.filter { now - $0.value.time < OwnChanges.expectation }
                nextNameSweep = max(OwnChanges.capacity, names.count * 2)
            }
            if files.count >= nextFileSweep {
                files = files.filter { $0.value.writers > 0 || now - $0.value.time < OwnChanges.expectation }
                nextFileSweep = max(OwnChanges.capacity, files.count * 2)
            }
        }
    }

    /// How long a record of docfs's own change waits for the watcher, in seconds.
    static let expectation: Double = 30
    static let capacity = 8192

    private let state = Mutex(State())

    /// docfs changed `name` in `directory`: `events` watcher events will follow.
    func changedName(_ name: FileName, in directory: BackingKey, events: Int = 1) {
        let now = SafeSaveTracker.now()
        state.withLock { state in
            state.sweep(now: now)
            let place = Place(directory: directory, name: name)
            state.names[place] = ((state.names[place]?.count ?? 0) + events, now)
        }
    }

    /// A store watcher event to sort out: a name in a folder changed, or a file's content or
    /// attributes (its state as the watcher found it).
    enum Event {
        case name(FileName, in: BackingKey)
        case content(stat)
        case attributes(stat)
    }

    /// Which of a batch of watcher events are docfs's own, consuming the name records they
    /// match. One lock acquisition per `eventsPerLock` events: the watcher reports hundreds at
    /// once while docfs is busy, and taking the lock for each contends with every request.
    func areOwn(_ events: [Event]) -> [Bool] {
        let now = SafeSaveTracker.now()
        var own: [Bool] = []
        own.reserveCapacity(events.count)
        // In slices, so no request waits long for the lock behind a big batch.
        for start in stride(from: 0, to: events.count, by: Self.eventsPerLock) {
            state.withLock { state in
                for event in events[start..<min(start + Self.eventsPerLock, events.count)] {
                    switch event {
                    case let .name(name, directory): own.append(state.consumeName(Place(directory: directory, name: name), now: now))
                    case let .content(st): own.append(state.isOwnContent(st))
                    case let .attributes(st): own.append(state.isOwnAttributeChange(st))
                    }
                }
            }
        }
        return own
    }

    /// How many watcher events `areOwn` sorts out per lock acquisition.
    static let eventsPerLock = 128

    /// docfs is about to write the file `key` (before the open that may truncate it): until
    /// `attach` and `closingForWriting`, or `abandon`, its changes are docfs's.
    func willWrite(_ key: BackingKey) {
        let now = SafeSaveTracker.now()
        state.withLock { $0.addWriter(of: key, now: now) }
    }

    /// The open announced by `willWrite` gave `handle`.
    func attach(_ handle: UInt64, to key: BackingKey) {
        state.withLock { $0.handles[handle] = key }
    }

    /// The write announced by `willWrite` did not happen, or ended without a handle (a
    /// truncate by path); `st`, when given, is the file's state after it.
    func abandon(_ key: BackingKey, now st: stat? = nil) {
        let now = SafeSaveTracker.now()
        state.withLock { state in
            state.files[key, default: Activity()].writers -= 1
            state.files[key]!.time = now
            if let st { state.record(st, now: now) }
        }
    }

    /// docfs opened `handle` for writing the file `key` (a file it just made).
    func openedForWriting(_ handle: UInt64, file key: BackingKey) {
        let now = SafeSaveTracker.now()
        state.withLock { state in
            state.addWriter(of: key, now: now)
            state.handles[handle] = key
        }
    }

    /// The writing `handle` is being closed; `fd` still reaches the file, whose state now is
    /// docfs's last change to it.
    func closingForWriting(_ handle: UInt64, fd: Int32) {
        guard state.withLock({ $0.handles[handle] != nil }) else { return }
        var st = stat()
        let known = fstat(fd, &st) == 0
        let now = SafeSaveTracker.now()
        state.withLock { state in
            guard let key = state.handles.removeValue(forKey: handle), var activity = state.files[key] else { return }
            activity.writers -= 1
            activity.time = now
            if known {
                activity.mtime = st.st_mtim
                activity.ctime = st.st_ctim
                activity.size = Int64(st.st_size)
            }
            state.files[key] = activity
            state.sweep(now: now)
        }
    }

    /// docfs changed the file or folder the O_PATH descriptor `fd` names (see `changedFile(_:)`).
    func changedFile(at fd: Int32) {
        var st = stat()
        if fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 { changedFile(st) }
    }

    /// docfs changed the file or folder itself (a truncate, its times, mode, owner or extended
    /// attributes): `st` is its state now.
    func changedFile(_ st: stat) {
        let now = SafeSaveTracker.now()
        state.withLock { state in
            state.record(st, now: now)
            state.sweep(now: now)
        }
    }
}
