import CLinux
import DocfsCore
import DocfsProvider
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What docfs changed in the store itself, so the store watcher can tell those changes from an
/// uncoordinated writer's (C5): names it created, removed or moved (each expected as one
/// event, for a few seconds), and files it has open for writing or last left with a known
/// modification time and size (a content change that shows another is someone else's; docfs's
/// own attribute changes move ctime, never these) and change time (an attribute change that
/// shows another is someone else's), and the permission bits and owner docfs last gave it or
/// found (docfs's writes and extended attributes never change those: a file showing others
/// was chmodded or chowned by someone else, even while docfs writes it or when docfs's next
/// change of it came before the watcher looked).
///
/// While docfs has a file open for writing, every change of it looks like docfs's. Between a
/// writer's last close(2) (FLUSH) and its release another writer may still change the file
/// behind the mount: for a handle whose writes docfs serves (not passed through to the
/// kernel), the release compares the file with its state at the last FLUSH, and a change that
/// docfs did not write is someone else's (the watcher is asked to look at it again if it
/// already took it for docfs's).
///
/// Lock order: `state` is a leaf lock.
package final class OwnChanges: Sendable {
    struct Place: Hashable {
        let directory: BackingKey
        let name: FileName
    }

    /// A file's permission bits and owner: what only chmod and chown change.
    private struct Permissions: Equatable {
        let mode: mode_t
        let uid: uid_t
        let gid: gid_t

        init(_ st: stat) {
            mode = st.st_mode & 0o7777
            uid = st.st_uid
            gid = st.st_gid
        }
    }

    private struct Activity {
        var writers = 0
        /// The permissions docfs last gave the file or found it with (nil: not known); kept
        /// as they are by docfs's writes and extended attributes (see `record`).
        var permissions: Permissions?
        var mtime = timespec()
        var ctime = timespec()
        var size: Int64 = -1
        /// When docfs last touched the file (SafeSaveTracker.now()).
        var time: Double = 0
        /// A close by another writer the watcher saw while docfs was writing (taken for
        /// docfs's own then): looked at again if the last writer's release shows it was not.
        var heard: StoreWatcher.Change?
        /// Whether `mtime` and `size` are the file as docfs's writers left it: recorded at a
        /// FLUSH, with no write through docfs since.
        var settled = false
        /// Writers passed through to the kernel: while there are any, docfs does not see
        /// every write, and a change after a FLUSH may be theirs.
        var unseenWriters = 0
    }

    private struct State {
        var names: [Place: (count: Int, time: Double)] = [:]
        var files: [BackingKey: Activity] = [:]
        var handles: [UInt64: BackingKey] = [:]
        /// Writer handles passed through to the kernel (see `Activity.unseenWriters`).
        var unseen: Set<UInt64> = []
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
        /// an open handle, or unchanged since docfs last closed it. `closed`: the watcher's
        /// change, when it is a close (kept to be looked at again, see `Activity.heard`).
        mutating func isOwnContent(_ st: stat, closed: StoreWatcher.Change?) -> Bool {
            let key = BackingKey(st)
            guard let activity = files[key] else { return false }
            if activity.writers > 0 {
                if let closed { files[key]!.heard = closed }
                return true
            }
            return activity.size == Int64(st.st_size)
                && activity.mtime.tv_sec == st.st_mtim.tv_sec && activity.mtime.tv_nsec == st.st_mtim.tv_nsec
        }

        /// Whether an attribute change of the file in state `st` is docfs's own: made while
        /// docfs writes it, or none since docfs last changed or closed it.
        /// Permissions other than docfs's record are someone else's, whatever else happened.
        func isOwnAttributeChange(_ st: stat) -> Bool {
            guard let activity = files[BackingKey(st)] else { return false }
            if let known = activity.permissions, known != Permissions(st) { return false }
            return activity.writers > 0
                || (activity.ctime.tv_sec == st.st_ctim.tv_sec && activity.ctime.tv_nsec == st.st_ctim.tv_nsec)
        }

        mutating func addWriter(of key: BackingKey, now: Double) {
            files[key, default: Activity()].writers += 1
            files[key]!.time = now
        }

        /// docfs changed the file, or knows it as it is now (`st`): its permissions included
        /// (a chmod or chown of docfs's), or only when not known yet (`permissionsToo` false: a
        /// write or an extended attribute, which may come just after someone else's chmod that
        /// the watcher has not judged yet).
        mutating func record(_ st: stat, now: Double, permissionsToo: Bool = true) {
            let key = BackingKey(st)
            if permissionsToo || files[key]?.permissions == nil { files[key, default: Activity()].permissions = Permissions(st) }
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
    package func changedName(_ name: FileName, in directory: BackingKey, events: Int = 1) {
        let now = SafeSaveTracker.now()
        state.withLock { state in
            state.sweep(now: now)
            let place = Place(directory: directory, name: name)
            state.names[place] = ((state.names[place]?.count ?? 0) + events, now)
        }
    }

    /// The change announced by `changedName` did not happen (the call failed): its event is
    /// not to be waited for.
    func withdrawName(_ name: FileName, in directory: BackingKey) {
        state.withLock { state in
            let place = Place(directory: directory, name: name)
            guard let expected = state.names[place] else { return }
            state.names[place] = expected.count > 1 ? (expected.count - 1, expected.time) : nil
        }
    }

    /// A store watcher event to sort out: a name in a folder changed, or a file's content or
    /// attributes (its state as the watcher found it).
    enum Event {
        case name(FileName, in: BackingKey)
        /// `closed`: the watcher's change when it is a close.
        case content(stat, closed: StoreWatcher.Change?)
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
                    case let .content(st, closed): own.append(state.isOwnContent(st, closed: closed))
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

    /// docfs opened `handle` for writing the file it just made, in state `st`.
    func openedForWriting(_ handle: UInt64, file st: stat) {
        let now = SafeSaveTracker.now()
        let key = BackingKey(st)
        state.withLock { state in
            state.addWriter(of: key, now: now)
            state.files[key]!.permissions = Permissions(st)
            state.handles[handle] = key
        }
    }

    /// The writer `handle` was passed through to the kernel: docfs does not see its writes.
    func passedThrough(_ handle: UInt64) {
        state.withLock { state in
            guard let key = state.handles[handle], state.unseen.insert(handle).inserted else { return }
            state.files[key]?.unseenWriters += 1
        }
    }

    /// A descriptor of the writer `handle` was closed (FLUSH); `fd` reaches its file, which is
    /// as docfs's writers left it (unless a writer docfs does not see is open).
    func flushed(_ handle: UInt64, fd: Int32) {
        guard state.withLock({ state in state.handles[handle].map { state.files[$0]?.unseenWriters == 0 } ?? false }) else { return }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return }
        state.withLock { state in
            guard let key = state.handles[handle], state.files[key] != nil else { return }
            state.record(st, now: SafeSaveTracker.now(), permissionsToo: false)
            state.files[key]!.settled = true
        }
    }

    /// docfs is about to write through `handle` (a write docfs serves).
    func willWrite(through handle: UInt64) {
        state.withLock { state in
            guard let key = state.handles[handle], state.files[key]?.settled == true else { return }
            state.files[key]!.settled = false
        }
    }

    /// The writing `handle` is being closed; `fd` still reaches the file, whose state now is
    /// docfs's last change to it, unless it was settled (see `Activity.settled`) and changed
    /// since: then another writer changed it behind the mount, and the file as docfs left it
    /// is the settled state. Answers a change for the watcher to look at again: one it took
    /// for docfs's while the file was open for writing, when it was not.
    func closingForWriting(_ handle: UInt64, fd: Int32) -> StoreWatcher.Change? {
        guard state.withLock({ $0.handles[handle] != nil }) else { return nil }
        var st = stat()
        let known = fstat(fd, &st) == 0
        let now = SafeSaveTracker.now()
        return state.withLock { state -> StoreWatcher.Change? in
            guard let key = state.handles.removeValue(forKey: handle), var activity = state.files[key] else { return nil }
            let unseen = state.unseen.remove(handle) != nil
            activity.writers -= 1
            activity.time = now
            let changedBehind = known && activity.settled && activity.unseenWriters == 0
                && (activity.size != Int64(st.st_size) || activity.mtime.tv_sec != st.st_mtim.tv_sec
                    || activity.mtime.tv_nsec != st.st_mtim.tv_nsec)
            if unseen { activity.unseenWriters -= 1 }
            if known {
                activity.ctime = st.st_ctim
                if !changedBehind {
                    activity.mtime = st.st_mtim
                    activity.size = Int64(st.st_size)
                }
            }
            var recheck: StoreWatcher.Change?
            if activity.writers == 0 {
                if changedBehind { recheck = activity.heard }
                activity.heard = nil
                activity.settled = false
            }
            state.files[key] = activity
            state.sweep(now: now)
            return recheck
        }
    }

    /// docfs changed the attributes (extended attributes included) of the file the O_PATH
    /// descriptor `fd` names, not its content: what its writers left stays the content docfs
    /// knows (see `closingForWriting`).
    func changedAttributes(at fd: Int32) {
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { return }
        let now = SafeSaveTracker.now()
        state.withLock { state in
            let key = BackingKey(st)
            guard state.files[key] != nil else { return state.record(st, now: now, permissionsToo: false) }
            state.files[key]!.ctime = st.st_ctim
            state.files[key]!.time = now
        }
    }

    /// The permissions of the file in state `st` (now) are known: docfs changed them and
    /// nothing else of it (set-id bits dropped by a write), or the watcher judged their change
    /// someone else's (docfs's next changes of the file are its own again).
    func knowPermissions(_ st: stat) {
        state.withLock { state in
            let key = BackingKey(st)
            guard state.files[key] != nil else { return }
            state.files[key]!.permissions = Permissions(st)
        }
    }

    /// Of `keys`, those whose record is docfs's last change to them: the files and folders an
    /// operation is about to touch whose change time it will move as a side effect (a name
    /// made or removed in a folder, a hard link made to a file).
    func tracked(_ keys: [BackingKey]) -> [BackingKey] {
        state.withLock { state in keys.filter { state.files[$0] != nil } }
    }

    /// The change times of `nodes` (tracked files and folders) before an operation of docfs's:
    /// those equal to docfs's record, so that record is still current.
    func statesBefore(_ nodes: [Node]) -> [(node: Node, ctime: timespec)] {
        let states = nodes.compactMap { node -> (Node, stat)? in
            var st = stat()
            return fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? (node, st) : nil
        }
        return state.withLock { state in
            states.compactMap { node, st in
                guard let activity = state.files[BackingKey(st)], Self.same(activity.ctime, st.st_ctim) else { return nil }
                return (node, st.st_ctim)
            }
        }
    }

    /// After the operation: each file or folder whose record was current before it (`before`)
    /// and still is, takes its change time now. An attribute change docfs made before the
    /// operation is then not judged, by the state the operation left, as someone else's (a
    /// folder's id given at mkdir, then a file made in it). Another writer's change in between
    /// moved the time past the record and stays someone else's.
    func followed(_ before: [(node: Node, ctime: timespec)]) {
        let now = SafeSaveTracker.now()
        for (node, ctime) in before {
            var st = stat()
            guard fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            state.withLock { state in
                let key = BackingKey(st)
                guard let activity = state.files[key], Self.same(activity.ctime, ctime) else { return }
                state.files[key]!.ctime = st.st_ctim
                state.files[key]!.time = now
            }
        }
    }

    private static func same(_ a: timespec, _ b: timespec) -> Bool { a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec }

    /// docfs changed the file or folder the O_PATH descriptor `fd` names (see `changedFile(_:)`).
    package func changedFile(at fd: Int32, permissionsToo: Bool = true) {
        var st = stat()
        if fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 { changedFile(st, permissionsToo: permissionsToo) }
    }

    /// docfs changed the file or folder itself (a truncate, its times, mode, owner or extended
    /// attributes): `st` is its state now. `permissionsToo` false: docfs changed neither mode
    /// nor owner, so the permissions it knows stay (see `State.record`).
    package func changedFile(_ st: stat, permissionsToo: Bool = true) {
        let now = SafeSaveTracker.now()
        state.withLock { state in
            state.record(st, now: now, permissionsToo: permissionsToo)
            state.sweep(now: now)
        }
    }
}
