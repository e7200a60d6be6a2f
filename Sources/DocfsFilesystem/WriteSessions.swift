import CLinux
import DocfsCore
import DocfsProvider
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Write sessions (issue 3 §1): a session on a file runs from its first open for writing (or a
/// truncate) to the last close of all its writers, and a session that changed the content
/// makes exactly one new version. When it begins, the content it is about to supersede is kept
/// as the previous version, and the file's `user.docfs.version` moves to the new number at once,
/// so whoever looks after a write has returned sees the version that write belongs to. A session
/// that changed nothing is rolled back: no version, nothing kept.
///
/// Files created through the mount start at version 1 and their creating open is not a
/// session (there is nothing to supersede). A file that has no version yet (made behind docfs's
/// back) counts as version 1.
///
/// A close (FLUSH) does not end a session: the handle may live on in another process (a child
/// that inherited it closes its copy at exec; the parent goes on writing). But a new writer
/// arriving when every writer of a changed file has been closed at least once starts a new
/// session, so a save that closes and reopens at once makes two versions, not one, although
/// the kernel sends the first handle's release later. Presenters hear of a session's version at
/// that close, before close(2) returns, so they see it before whatever the writer does next.
///
/// What a session keeps of the content it supersedes costs about what it changes (issue 20 §1;
/// `VersionStore` describes copies and deltas):
/// - a session that only appends (its writers opened the file O_APPEND, without O_TRUNC) keeps
///   a delta with nothing saved (a prefix): a record, nothing copied;
/// - a rewrite of a file of `deltaThreshold` or more whose writers docfs serves (`sees`) keeps a
///   delta and saves into it what each write is about to overwrite (`willChange`);
/// - a session starting within the policy's thinning window of the last version kept of the
///   item keeps nothing (a burst of saves costs one version, the state before the burst),
///   though a rewrite docfs sees goes on saving into that version if it is a delta, and one it
///   does not see keeps a copy then (which the delta reads from); in a linked store only a
///   pending save (not gone up) is thinned, as every machine keeps a version gone up;
/// - any other session keeps a copy; one of a file over the policy's size limit nothing.
/// Before anything docfs does not see reaches bytes the newest delta relies on (a passed-through
/// writer, an O_TRUNC open, a truncate by path), that delta is made whole first.
///
/// Lock order: `state` is a leaf lock; the content copy and xattr writes of a session that starts
/// or ends happen outside it, while new writers of the same file wait for them (`busy`).
package final class WriteSessions: Sendable {
    private struct Session {
        let item: ItemID
        /// The content's number when the session began (what it kept is numbered so).
        var base: UInt64
        /// The version the session makes: the first number above the base no kept version has.
        /// Both move up when the remote numbers an earlier save higher (`renumber`).
        var number: UInt64
        let baseSize: Int64
        let baseModified: timespec
        var writers: Int
        /// How the base content was kept as a version (a rollback removes it).
        var kept: Kept
        /// The item's newest previous version is a delta of the content (`VersionStore`): the
        /// session kept it, or was thinned after one. What would change the bytes it relies
        /// on saves them first (`sees`) or makes it a whole copy first.
        var guardsPrefix: Bool
        /// Every writer of the session is served through docfs (no passthrough), so docfs sees
        /// each write before it lands: the delta saves what a write overwrites.
        var sees: Bool
        /// Bytes were saved for the delta during the session (it wrote below the old end).
        var savedAny = false
        /// An uncoordinated writer replaced or removed the file meanwhile (C4).
        var raced = false
        /// Writer handles closed at least once (FLUSH), until their writer leaves (`end`).
        var closedHandles: Set<UInt64> = []
        /// Presenters were told of the session's version (at the close that left every writer
        /// closed, before close(2) returned).
        var announced = false

        /// Every writer has been closed at least once: a new writer begins a new session.
        var allWritersClosed: Bool { !raced && closedHandles.count >= writers }
    }

    private struct State {
        var sessions: [BackingKey: Session] = [:]
        /// Files (backing inodes) whose session is being started or ended: new writers wait for it.
        var busy = BusyFiles()
        /// Open handles that write, and the node they write (held: the kernel may forget the
        /// node before the release of its last handle arrives).
        var writerHandles: [UInt64: Node] = [:]
        /// Who made the current version of recently written items (bounded).
        var authors: [ItemID: (version: UInt64, author: Author)] = [:]
        /// Whether `authors` changed since `takeAuthorsIfChanged` last took them.
        var authorsChanged = false
        /// When items' content was last kept by a session, and the delta it is, if it is one
        /// (for thinning, and for saving into it; bounded). Only this daemon's sessions keep
        /// deltas, so the newest previous version of an item listed here is a delta exactly
        /// when its entry says so.
        var lastKept: [ItemID: LastKept] = [:]

        /// Notes when `item`'s burst began (`lastKept` stays bounded).
        mutating func noteKept(_ item: ItemID, _ entry: LastKept) {
            if lastKept.count > 65536 { lastKept.removeAll(keepingCapacity: true) }
            lastKept[item] = entry
        }
    }

    struct LastKept {
        var time: Double
        var delta: Delta?
    }

    /// A delta version and the ranges it has saved.
    struct Delta {
        let version: UInt64
        let size: Int64
        var saved: ByteRanges
    }

    /// Files this size or larger keep a delta rather than a copy when a session's writes all go
    /// through docfs; smaller ones are copied, which costs less than serving their I/O.
    static let deltaThreshold: Int64 = 1 << 20

    /// How a session kept the content it supersedes.
    enum Kept {
        case nothing
        case copy
        /// A record saying the content is the new content with the bytes the session saves
        /// before overwriting them (nothing for a session that appends: a prefix).
        case prefix
    }

    private let state = Mutex(State())
    private let versions: VersionStore
    /// Told of each session's end as a change record: a version committed, or a session
    /// rolled back (it changed nothing: the version went back).
    private let changeSink = Callback<ChangeRecord>()

    func onChange(_ sink: @escaping @Sendable (ChangeRecord) -> Void) {
        changeSink.set(sink)
    }

    /// Told of failures that failed no writer (the daemon logs them).
    private let problemSink = Callback<String>()

    func onProblem(_ sink: @escaping @Sendable (String) -> Void) {
        problemSink.set(sink)
    }

    private func committed(_ node: Node, _ session: Session) {
        changeSink(.file(.versionCommitted(session.number), node))
    }

    init(versions: VersionStore) {
        self.versions = versions
    }

    /// `key`'s session is done starting or ending: the writers waiting for that go on.
    private func notBusy(_ key: BackingKey) {
        for writer in state.withLock({ $0.busy.remove(key) }) { writer.signal() }
    }

    /// A writer of `node` arrives (an open for writing or a truncate, before it touches the
    /// content). Starts the session if it is the first, or a new one if every writer of the
    /// current session has been closed and the file changed. `appending`: the writer can only
    /// append (O_APPEND without O_TRUNC). `canSee`: the writer can be served through docfs, which
    /// then sees its every write (an open; not a truncate by path). Answers whether the writer
    /// must be served through docfs (its session saves what writes overwrite); if the open ends
    /// up passed through to the kernel anyway, call `lostSight`.
    @discardableResult
    func begin(_ node: Node, caller: Caller, appending: Bool = false, canSee: Bool = false) throws(DocfsError) -> Bool {
        guard node.type == S_IFREG, !node.item.isDerived, !node.isSuperseded else { return false }
        enum Arrival { case joined(sees: Bool), start, rollOver, wait(ThreadSemaphore), copyPrefix }
        while true {
            let arrival = state.withLock { state -> Arrival in
                if state.busy.contains(node.key) { return .wait(state.busy.waiter(for: node.key)) }
                guard let session = state.sessions[node.key] else {
                    state.busy.insert(node.key)
                    return .start
                }
                if session.allWritersClosed {
                    state.busy.insert(node.key)
                    return .rollOver
                }
                if session.guardsPrefix && !appending && !(session.sees && canSee) {
                    state.busy.insert(node.key)
                    return .copyPrefix
                }
                state.sessions[node.key]!.writers += 1
                return .joined(sees: session.sees)
            }
            switch arrival {
            case .joined(let sees): return sees
            case .start: return try start(node, caller: caller, appending: appending, canSee: canSee)
            case .rollOver: return try rollOver(node, caller: caller, appending: appending, canSee: canSee)
            case .copyPrefix:
                try copyPrefix(node, joining: true)
                return false
            case .wait(let done): done.wait()  // a session is starting or ending: wait for it
            }
        }
    }

    /// The writer `handle`, which `begin` wanted served through docfs, is passed through to
    /// the kernel after all (its file was open that way already): its session no longer sees
    /// every write, so the delta it guards becomes a whole copy now, before any write.
    func lostSight(_ handle: UInt64) throws(DocfsError) {
        while true {
            let outcome = state.withLock { state -> (node: Node?, wait: ThreadSemaphore?) in
                guard let node = state.writerHandles[handle] else { return (nil, nil) }
                if state.busy.contains(node.key) { return (nil, state.busy.waiter(for: node.key)) }
                guard let session = state.sessions[node.key], session.sees else { return (nil, nil) }
                state.busy.insert(node.key)
                return (node, nil)
            }
            if let node = outcome.node { return try copyPrefix(node, joining: false) }
            guard let done = outcome.wait else { return }
            done.wait()
        }
    }

    /// A write, fallocate or truncate through docfs is about to change `length` bytes of
    /// `handle`'s file from `offset` on. When its session guards a delta whose bytes this
    /// would change, a session that sees every write saves them into the delta first; any
    /// other makes the delta a whole copy first. `writtenBack`: the write comes from the
    /// kernel's writeback cache, which writes whole pages: a write from within the page holding
    /// a prefix's end rewrites the bytes before it as the kernel read them (an append's page),
    /// so only one starting below that page counts (writers that may write anywhere copied the
    /// prefix when they opened).
    func willChange(_ handle: UInt64, from offset: Int64, length: Int64, writtenBack: Bool = false) throws(DocfsError) {
        enum Step { case none, wait(ThreadSemaphore), copy(Node), save(Node, UInt64, [Range<Int64>]) }
        let end = length > Int64.max - offset ? Int64.max : offset + length
        while true {
            let step = state.withLock { state -> Step in
                guard let node = state.writerHandles[handle] else { return .none }
                guard let session = state.sessions[node.key], session.guardsPrefix else { return .none }
                if state.busy.contains(node.key) { return .wait(state.busy.waiter(for: node.key)) }
                if session.sees, let delta = state.lastKept[session.item]?.delta {
                    let missing = delta.saved.missing(in: offset..<max(offset, min(end, delta.size)))
                    guard !missing.isEmpty else { return .none }
                    state.busy.insert(node.key)
                    return .save(node, delta.version, missing)
                }
                guard offset < (writtenBack ? session.baseSize & ~Int64(Self.pageSize - 1) : session.baseSize) else { return .none }
                state.busy.insert(node.key)
                return .copy(node)
            }
            switch step {
            case .none: return
            case .wait(let done): done.wait()
            case .copy(let node): return try copyPrefix(node, joining: false)
            case .save(let node, let version, let ranges):
                defer { notBusy(node.key) }
                try save(ranges, of: node, version: version)
                state.withLock { state in
                    for range in ranges { state.lastKept[node.item]?.delta?.saved.insert(range) }
                    state.sessions[node.key]?.savedAny = true
                }
                return
            }
        }
    }

    /// Saves `ranges` of `node`'s content into its delta `version`.
    private func save(_ ranges: [Range<Int64>], of node: Node, version: UInt64) throws(DocfsError) {
        let fd = open("/proc/self/fd/\(node.fd)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.errno("opening item \(node.item) to keep version \(version)") }
        defer { close(fd) }
        try versions.save(ranges, of: node.item, version: version, from: fd)
    }

    /// Gives the prefix `node`'s session kept its own copy (the node is busy); the session then
    /// holds a copy, and a `joining` writer joins it.
    private func copyPrefix(_ node: Node, joining: Bool) throws(DocfsError) {
        defer { notBusy(node.key) }
        try copyNewestPrefix(of: node)
        state.withLock { state in
            state.sessions[node.key]!.guardsPrefix = false
            state.sessions[node.key]!.sees = false
            if state.sessions[node.key]!.kept == .prefix { state.sessions[node.key]!.kept = .copy }
            if joining { state.sessions[node.key]!.writers += 1 }
        }
    }

    private func copyNewestPrefix(of node: Node) throws(DocfsError) {
        let fd = open("/proc/self/fd/\(node.fd)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.errno("opening item \(node.item) to keep a version") }
        defer { close(fd) }
        try versions.materializeNewestPrefix(of: node.item, from: fd)
        state.withLock { state in
            if state.lastKept[node.item] != nil { state.lastKept[node.item]!.delta = nil }
        }
    }

    /// A writer arrives after every writer of the session was closed: a changed file commits
    /// the session and starts the next, which the still-open handles (released later) belong
    /// to; an unchanged file just gains the writer.
    private func rollOver(_ node: Node, caller: Caller, appending: Bool, canSee: Bool) throws(DocfsError) -> Bool {
        let session = state.withLock { $0.sessions[node.key]! }
        guard changed(node, since: session) else {
            if session.guardsPrefix && !appending && !(session.sees && canSee) {
                try copyPrefix(node, joining: true)
                return false
            }
            state.withLock { state in state.sessions[node.key]!.writers += 1 }
            notBusy(node.key)
            return session.sees
        }
        if session.kept != .nothing { versions.prune(session.item, now: Self.now()) }
        if !session.announced { committed(node, session) }
        // Its handles still open carry on in the next session: if docfs did not see them,
        // it does not see that session's writes either.
        return try start(node, caller: caller, appending: appending, canSee: canSee && (session.sees || session.writers == 0))
    }

    /// Registers `handle` as a writer of `node` (call after `begin` once the open succeeded).
    func attach(_ handle: UInt64, to node: Node) {
        guard node.type == S_IFREG, !node.item.isDerived else { return }
        state.withLock { $0.writerHandles[handle] = node }
    }

    /// The writer `handle` is closing: the node it wrote, to `end` once the handle is closed.
    /// Call before the handle's descriptor is closed (its number is the key).
    func detach(_ handle: UInt64) -> Node? {
        state.withLock { $0.writerHandles.removeValue(forKey: handle) }
    }

    /// A descriptor of the writer `handle` was closed (FLUSH, which close(2) waits for, unlike
    /// the release that follows it). The session goes on until the release (the handle may
    /// still be open elsewhere); noted so that a writer arriving next starts a new session.
    func flushed(_ handle: UInt64) {
        let closing = state.withLock { state -> (Node, Session)? in
            guard let node = state.writerHandles[handle], state.sessions[node.key] != nil else { return nil }
            state.sessions[node.key]!.closedHandles.insert(handle)
            let session = state.sessions[node.key]!
            return session.allWritersClosed && !session.announced ? (node, session) : nil
        }
        guard let (node, session) = closing, changed(node, since: session) else { return }
        let announce = state.withLock { state -> Bool in
            guard let current = state.sessions[node.key], current.base == session.base, current.allWritersClosed,
                  !current.announced else { return false }
            state.sessions[node.key]!.announced = true
            return true
        }
        if announce { committed(node, session) }
    }

    /// An uncoordinated writer changed the name `place`: sessions writing the file that was
    /// there are marked raced. Answers how many.
    func markRaced(at place: Node.Place) -> Int {
        state.withLock { state in
            var count = 0
            for (id, session) in state.sessions where !session.raced {
                guard let node = state.writerHandles.values.first(where: { $0.key == id }), node.place == place else { continue }
                state.sessions[id]!.raced = true
                count += 1
            }
            return count
        }
    }

    /// A writer leaves: a closed handle, a failed open, a truncate by path. The last one ends
    /// the session; answers the node when that session was raced and changed the file.
    @discardableResult
    func end(_ node: Node, handle: UInt64? = nil) -> Node? {
        guard node.type == S_IFREG, !node.item.isDerived else { return nil }
        guard let session = leave(node, handle: handle) else { return nil }
        defer { notBusy(node.key) }
        if changed(node, since: session) {
            if session.kept != .nothing { versions.prune(session.item, now: Self.now()) }
            if !session.announced { committed(node, session) }
            return session.raced ? node : nil
        }
        // Nothing written: as if the session never was (a racing writer's content simply wins).
        do throws(DocfsError) {
            try ItemAttributes.setVersion(session.base, onDescriptor: node.fd)
        } catch {
            problemSink("could not take the version of item \(node.item) back to \(session.base) after a session that wrote nothing: \(error)")
        }
        if session.kept != .nothing {
            versions.remove(session.item, version: session.base)
            state.withLock { _ = $0.lastKept.removeValue(forKey: session.item) }
        }
        changeSink(.file(.rolledBack, node))
        return nil
    }

    /// One writer of `node` leaves its session: the session when it was the last (the node is
    /// then busy until the caller is done with it).
    private func leave(_ node: Node, handle: UInt64?) -> Session? {
        while true {
            let outcome = state.withLock { state -> (wait: ThreadSemaphore?, last: Session?) in
                if state.busy.contains(node.key) { return (state.busy.waiter(for: node.key), nil) }  // a session is starting
                guard var session = state.sessions[node.key] else { return (nil, nil) }
                session.writers -= 1
                if let handle { session.closedHandles.remove(handle) }
                if session.writers > 0 {
                    state.sessions[node.key] = session
                    return (nil, nil)
                }
                state.sessions[node.key] = nil
                state.busy.insert(node.key)
                return (nil, session)
            }
            guard let done = outcome.wait else { return outcome.last }
            done.wait()
        }
    }

    /// Whether the session changed the file. Size and mtime tell most changes; mtime ticks
    /// coarsely, so when they look the same the content is compared with the kept copy (a
    /// session that kept a prefix only appended: the same size is the same content).
    private func changed(_ node: Node, since session: Session) -> Bool {
        var st = stat()
        guard fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0 else { return true }
        if Int64(st.st_size) != session.baseSize || st.st_mtim.tv_sec != session.baseModified.tv_sec
            || st.st_mtim.tv_nsec != session.baseModified.tv_nsec { return true }
        if session.savedAny { return true }  // it wrote below the old end (perhaps the same bytes)
        guard session.kept == .copy else { return false }
        return !versions.sameContent(session.item, version: session.base, as: "/proc/self/fd/\(node.fd)")
    }

    /// A version of `item` was kept by other means (a replace, a raced save put back): the
    /// delta sessions thinned since kept is no longer its newest previous version, so nothing
    /// may be saved into it any more; the next session keeps afresh.
    func keptElsewhere(_ item: ItemID) {
        state.withLock { _ = $0.lastKept.removeValue(forKey: item) }
    }

    /// `item` was just created through the mount: its creation starts a burst, as a kept
    /// version would. The state before the burst is no file, so sessions within the thinning
    /// window keep nothing, and a file written a few times right after it is made (a build's
    /// output, a download, a log rotated in) costs no copy.
    func created(_ item: ItemID) {
        guard versions.policy.thinningWindow > 0 else { return }
        let now = Self.now()
        state.withLock { $0.noteKept(item, LastKept(time: now, delta: nil)) }
    }

    /// Whether an open session of `item` relies on its kept versions staying as they are until
    /// it ends: its newest previous version is a delta of the current content (the session
    /// saves into it, or its writers append to what it points at), or `version` is what the
    /// session kept when it began (a session that writes nothing takes it back).
    func reliesOnKept(_ item: ItemID, version: UInt64) -> Bool {
        state.withLock { state in
            state.sessions.values.contains { $0.item == item && ($0.guardsPrefix || ($0.base == version && $0.kept != .nothing)) }
        }
    }

    /// Whether a write session of `item` holds `number`: the content it began from, or the
    /// version it makes.
    package func holdsNumber(_ item: ItemID, _ number: UInt64) -> Bool {
        state.withLock { state in
            state.sessions.values.contains { $0.item == item && ($0.base == number || $0.number == number) }
        }
    }

    /// The item's save `key` (pending, `VersionNumber`) went up, and the remote numbered it
    /// `given`: the file `fd` takes it when `key` is its content's (a kept version the content
    /// repeats, holding `given`, goes), else kept version `key` does; sessions, the newest delta
    /// and the maker follow. The file is held busy meanwhile (no session starts, ends or saves
    /// into its delta). Answers the file's number when it took `given`, nil when the number
    /// went to a kept version (or to nothing: `key` is neither).
    package func takeNumber(_ item: ItemID, file fd: Int32, key: UInt64, given: UInt64) throws(DocfsError) -> UInt64? {
        guard key != given else { return nil }
        var st = stat()
        try check(fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH))
        let busyKey = BackingKey(st)
        while let done = state.withLock({ state -> ThreadSemaphore? in
            if state.busy.contains(busyKey) { return state.busy.waiter(for: busyKey) }
            state.busy.insert(busyKey)
            return nil
        }) {
            done.wait()
        }
        defer { notBusy(busyKey) }
        let current = max(ItemAttributes.version(ofDescriptor: fd), 1)  // none yet counts as 1, as for a session
        let ofFile = current == key
        if ofFile {
            if versions.isTaken(item, given) {
                // Only a version the file's content repeats gives way (the engine wrote the
                // version last in step again); one holding other bytes (a store's records from
                // before pending saves) is never removed: the number stays unchanged here.
                let path = "/proc/self/fd/\(fd)"
                if versions.record(of: item, version: given)?.isPrefix == true {
                    try versions.makeWhole(item, version: given, current: path)  // a delta's file holds only its saved ranges
                }
                // A version kept promised came from the remote under that number: it is that content.
                guard versions.isPromised(item, version: given) || versions.sameContent(item, version: given, as: path) else {
                    problemSink("item \(item): version \(given) is kept here with other content than the file's (a record from before saves were pending); the file keeps \(VersionNumber.shown(key)) and both are kept")
                    return nil
                }
                try versions.removeRepeated(item, version: given, current: path)
            }
            try ItemAttributes.setVersion(given, onDescriptor: fd)
        } else {
            guard try versions.takeNumber(item, key: key, number: given) else { return nil }
        }
        state.withLock { state in
            for (sessionKey, session) in state.sessions where session.item == item {
                if session.base == key { state.sessions[sessionKey]!.base = given }
                if session.number == key { state.sessions[sessionKey]!.number = given }
            }
            if let delta = state.lastKept[item]?.delta, delta.version == key {
                state.lastKept[item]!.delta = Delta(version: given, size: delta.size, saved: delta.saved)
            }
            if let known = state.authors[item], known.version == key {
                state.authors[item] = (given, known.author)
                state.authorsChanged = true
            }
        }
        return ofFile ? given : nil
    }

    /// Records who made `version` of `item` (a replace, which is no session).
    func noteAuthor(of item: ItemID, version: UInt64, caller: Caller) {
        let author = Author(pid: caller.pid, uid: caller.uid, command: Self.command(of: caller.pid))
        state.withLock { state in
            if state.authors.count > 65536 { state.authors.removeAll(keepingCapacity: true) }
            state.authors[item] = (version, author)
            state.authorsChanged = true
        }
    }

    /// Records who made `version` of `item`, applied from the remote: another machine (`author`),
    /// or this one (nil: a maker known for that version stays, another is forgotten).
    package func noteMaker(of item: ItemID, version: UInt64, _ author: Author?) {
        state.withLock { state in
            if let author {
                if state.authors.count > 65536 { state.authors.removeAll(keepingCapacity: true) }
                state.authors[item] = (version, author)
            } else if let known = state.authors[item], known.version != version {
                state.authors.removeValue(forKey: item)
            } else {
                return
            }
            state.authorsChanged = true
        }
    }

    /// Every maker known, when they changed since the last call (nil otherwise).
    func takeAuthorsIfChanged() -> [VersionMakers.Entry]? {
        state.withLock { state in
            guard state.authorsChanged else { return nil }
            state.authorsChanged = false
            return state.authors.map { VersionMakers.Entry(item: $0.key.rawValue, version: $0.value.version, author: $0.value.author) }
        }
    }

    /// Makers a previous daemon saved (those this one knows already win).
    func restoreAuthors(_ entries: [VersionMakers.Entry]) {
        state.withLock { state in
            for entry in entries.prefix(65536) where state.authors[ItemID(rawValue: entry.item)] == nil {
                state.authors[ItemID(rawValue: entry.item)] = (entry.version, entry.author)
            }
        }
    }

    /// The version `item`'s current content was made by, and who made it, if this daemon saw it.
    package func author(of item: ItemID, version: UInt64) -> Author? {
        state.withLock { state in
            guard let known = state.authors[item], known.version == version else { return nil }
            return known.author
        }
    }

    private func start(_ node: Node, caller: Caller, appending: Bool, canSee: Bool) throws(DocfsError) -> Bool {
        var session: Session? = nil
        defer {
            let waiting = state.withLock { state -> [ThreadSemaphore] in
                let waiting = state.busy.remove(node.key)
                guard var session else { return waiting }
                if let previous = state.sessions[node.key] {  // rolled over: its open writers carry on in this one
                    session.writers += previous.writers
                    session.closedHandles = previous.closedHandles
                }
                state.sessions[node.key] = session
                return waiting
            }
            for writer in waiting { writer.signal() }
        }
        // One readable descriptor of the content serves the session's bookkeeping (attributes,
        // version, the copy kept): the node's own is O_PATH, whose extended attributes the
        // kernel reaches only by walking its /proc link again for each call.
        let content = open(node.procPath, O_RDONLY | O_CLOEXEC)
        defer { if content >= 0 { close(content) } }
        let fd = content >= 0 ? content : node.fd
        var st = stat()
        try check(fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH))
        let base = max(ItemAttributes.version(ofDescriptor: fd), 1)
        let (kept, guardsPrefix, sees) = try keep(node, content: content >= 0 ? content : nil, base: base, st,
                                                  appending: appending, canSee: canSee)
        let number = versions.nextSaveNumber(of: node.item, after: base)
        do throws(DocfsError) {
            try ItemAttributes.setVersion(number, onDescriptor: fd)
        } catch {
            if kept != .nothing { versions.remove(node.item, version: base) }
            throw error
        }
        noteAuthor(of: node.item, version: number, caller: caller)
        session = Session(item: node.item, base: base, number: number, baseSize: Int64(st.st_size), baseModified: st.st_mtim,
                          writers: 1, kept: kept, guardsPrefix: guardsPrefix, sees: sees)
        return sees
    }

    /// Keeps the content a session starting on `node` supersedes (`base`, whose attributes are
    /// `st`), as the session's kind and the policy say (see the type's comment); whether the
    /// item's newest previous version is then a delta of the content; and whether the session
    /// is to see every write (its writers served through docfs) and save into that delta.
    /// `content`: a readable descriptor of the file, when the caller has one.
    private func keep(_ node: Node, content: Int32?, base: UInt64, _ st: stat, appending: Bool, canSee: Bool) throws(DocfsError) -> (Kept, Bool, Bool) {
        let size = Int64(st.st_size)
        let now = Self.now()
        guard size > 0 else { return (.nothing, false, false) }
        guard size <= versions.policy.maximumFileSize else {
            if !appending { try copyNewestPrefix(of: node) }
            return (.nothing, appending, false)  // an append to a file that outgrew the limit may follow a prefix
        }
        // In a linked store a numbered base went up: every machine keeps it once a save with
        // other content follows (`VersionList.kept`), so it is never thinned here; only saves
        // that have not gone up (pending) thin among themselves.
        let thinnable = !versions.numbersPending.load(ordering: .relaxed) || VersionNumber.isPending(base)
        let recent = !thinnable ? nil : state.withLock { state in
            state.lastKept[node.item].flatMap { now - $0.time < versions.policy.thinningWindow && now >= $0.time ? $0 : nil }
        }
        // A rewrite of a file this big saves what it overwrites rather than copying the file.
        let seeing = canSee && !appending && size >= Self.deltaThreshold
        // Thinned: an append leaves whatever was kept as it was; a copy kept last needs nothing
        // of this content; a delta kept last takes what a seeing session overwrites.
        if let recent {
            if recent.delta == nil { return (.nothing, false, false) }
            if appending { return (.nothing, true, false) }
            if seeing { return (.nothing, true, true) }
        }
        let record = VersionRecord(version: base, kind: .previous, modified: Self.seconds(st.st_mtim), kept: now,
                                   size: size, author: self.author(of: node.item, version: base))
        if appending || seeing {
            try versions.keepPrefix(item: node.item, record: record)
        } else {
            let fd = content ?? open(node.procPath, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw DocfsError.errno("opening item \(node.item) to keep version \(base)") }
            defer { if content == nil { close(fd) } }
            try versions.keepCopy(of: fd, item: node.item, record: record)
        }
        let delta = appending || seeing ? Delta(version: base, size: size, saved: ByteRanges()) : nil
        state.withLock { $0.noteKept(node.item, LastKept(time: now, delta: delta)) }
        return delta != nil ? (.prefix, true, seeing) : (.copy, false, false)
    }

    /// The command name of a process (/proc/PID/comm), empty when it is gone.
    static func command(of pid: pid_t) -> String {
        guard pid > 0 else { return "" }
        let now = Self.monotonic()
        if let known = recentCommands.withLock({ $0[pid] }), now - known.seen < 1 { return known.command }
        let fd = open("/proc/\(pid)/comm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var line = [UInt8](repeating: 0, count: 64)
        let n = line.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        let command = String(decoding: line.prefix(max(n, 0)).prefix { $0 != 10 }, as: UTF8.self)
        recentCommands.withLock { recent in
            if recent.count >= 4096 { recent.removeAll(keepingCapacity: true) }
            recent[pid] = (command, now)
        }
        return command
    }

    /// Commands of processes seen in the last second, by pid: a process that opens many files
    /// has /proc read once a second, not per open (a pid is not reused that soon; a command
    /// renamed meanwhile shows a second late).
    private static let recentCommands = Mutex<[pid_t: (command: String, seen: Double)]>([:])

    private static func monotonic() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    /// The kernel's page size, the unit its writeback cache writes.
    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    package static func seconds(_ t: timespec) -> Double { Double(t.tv_sec) + Double(t.tv_nsec) / 1e9 }

    package static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        return seconds(t)
    }
}
