import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Watches a folder tree of the store for changes, whoever makes them (inotify, one watch per
/// folder), so docfs notices what uncoordinated writers do there (C5): names appearing,
/// disappearing or moving, files closed after being written, files written and not closed yet
/// (or truncated by path), and attribute changes (mode, owner, times, extended attributes). A
/// file closed after being opened for writing but not written (docfs's own passthrough backing
/// files are open for writing even for readers) is no change. docfs's own changes are reported
/// too; telling them apart is the filesystem's business. Writes made only through a shared
/// mapping raise no inotify event: those show when the mount's cache times out.
public final class StoreWatcher: @unchecked Sendable {
    // Only the watching thread touches the fields below after `init`.

    /// A folder of the store, by identity.
    public struct Folder: Hashable, Sendable {
        public let device: UInt64
        public let inode: UInt64
    }

    public enum Change: Sendable {
        /// `name` in `folder` was created, deleted or moved in or out; `path` is where it is
        /// (or was).
        case name(Folder, FileName, path: String)
        /// The file at `path` was closed after being written.
        case content(path: String, folder: Folder, name: FileName)
        /// The file at `path` was written in this batch and not closed in it: still being
        /// written, or truncated by path (its close, if any, is a `content` change later).
        case modified(path: String)
        /// The attributes of the file or folder at `path` changed (mode, owner, times, links,
        /// extended attributes).
        case attributes(path: String)
        /// Events were lost (the kernel's queue overflowed): anything may have changed.
        case overflow

        /// The file a content or attribute change is about (nil for names and overflows).
        public var filePath: String? {
            switch self {
            case let .content(path, _, _), let .modified(path), let .attributes(path): path
            case .name, .overflow: nil
            }
        }
    }

    let fd: Int32
    /// Changes posted to be looked at again (see `StoreRechecks`).
    private let rechecks: StoreRechecks?
    let maximumWatches: Int
    let onUnwatched: (@Sendable (String) -> Void)?
    /// Folders the kernel would not watch (past fs.inotify.max_user_watches), by path, with
    /// what a rescan last found in them.
    var unwatched: [String: FolderScan] = [:]
    /// How many folders are in `unwatched` (read from any thread).
    public let unwatchedCount = Atomic<Int>(0)
    /// Whether `onUnwatched` was told.
    var limitReported = false
    var folders: [Int32: (path: String, folder: Folder)] = [:]
    private let root: String

    /// A file in a watched folder, as inotify names it.
    private struct WatchedName: Hashable {
        let watch: Int32
        let name: FileName
    }

    /// Files written (IN_MODIFY) since they were last closed: their next close is a change.
    private var written: Set<WatchedName> = []
    /// Files written in the batch being read and not closed in it.
    private var writtenInBatch: Set<WatchedName> = []
    /// Bound on `written` (a file written and never closed, a lost close): past it, forget all.
    private static let writtenCapacity = 65536

    static let folderEvents = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE
                                     | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

    /// Starts watching every folder under `root`; changes posted to `rechecks` are reported
    /// with the others. `maximumWatches` bounds the watches below the kernel's own limit (for
    /// trying what happens past it); `onUnwatched` hears, from the watcher's thread, the first
    /// time a folder cannot be watched.
    public init(root: String, rechecks: StoreRechecks? = nil, maximumWatches: Int = Int.max,
                onUnwatched: (@Sendable (String) -> Void)? = nil) throws(DocfsError) {
        self.rechecks = rechecks
        self.maximumWatches = maximumWatches
        self.onUnwatched = onUnwatched
        fd = inotify_init1(Int32(IN_CLOEXEC))
        guard fd >= 0 else {
            throw DocfsError(.missingSystemSupport, "cannot watch the store (inotify)", cause: DocfsError.errno("inotify_init1"))
        }
        self.root = root
        watchTree(root, removingLeftovers: true)
    }

    /// How long the watcher lets changes gather before reading them: one wake-up per batch
    /// rather than one per event while the store is busy (docfs's own writes make events too).
    /// 50 ms: sorting out events takes the own-changes lock that every CREATE and RELEASE takes
    /// too, and with 2 ms batches creating 10,000 files through the mount was measurably slower.
    /// A read that fills most of the buffer is followed at once by the next, so a busy store
    /// does not make the kernel's event queue overflow.
    public static let gatheringDelay: useconds_t = 50_000

    /// Reads changes and hands each batch to `handle`, until the watcher is closed.
    public func run(_ handle: ([Change]) -> Void) {
        let size = 64 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        var polled = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                      pollfd(fd: rechecks?.signal ?? -1, events: Int16(POLLIN), revents: 0)]
        var nextRescan = Self.monotonicSeconds() + Self.rescanInterval
        while true {
            // Folders past the watch limit are looked at every `rescanInterval` seconds.
            let wait = unwatched.isEmpty ? -1 : Int32(max(0, (nextRescan - Self.monotonicSeconds()) * 1000))
            polled[0].revents = 0
            polled[1].revents = 0
            guard poll(&polled, 2, wait) >= 0 || errno == EINTR else { return }
            if !unwatched.isEmpty && Self.monotonicSeconds() >= nextRescan {
                let found = rescanUnwatched()
                if !found.isEmpty { handle(found) }
                nextRescan = Self.monotonicSeconds() + Self.rescanInterval
            }
            if polled[1].revents & Int16(POLLIN) != 0, let again = rechecks?.take(), !again.isEmpty { handle(again) }
            guard polled[0].revents & Int16(POLLIN | POLLERR | POLLHUP | POLLNVAL) != 0 else { continue }
            let n = read(fd, buffer, size)
            if n < 0 {
                if errno == EINTR { continue }
                return
            }
            var changes: [Change] = []
            writtenInBatch.removeAll(keepingCapacity: true)
            var offset = 0
            while offset < n {
                let event = (buffer + offset).assumingMemoryBound(to: inotify_event.self).pointee
                let nameStart = (buffer + offset + MemoryLayout<inotify_event>.size).assumingMemoryBound(to: CChar.self)
                let name = event.len > 0 ? FileName(cString: nameStart) : FileName(bytes: [])
                offset += MemoryLayout<inotify_event>.size + Int(event.len)
                changes += interpret(event, name: name)
            }
            for file in writtenInBatch {
                if let (path, _) = folders[file.watch] { changes.append(.modified(path: path + "/" + file.name.description)) }
            }
            if !changes.isEmpty { handle(changes) }
            if n < size / 2 { usleep(Self.gatheringDelay) }
        }
    }

    private func interpret(_ event: inotify_event, name: FileName) -> [Change] {
        if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
            written.removeAll()
            writtenInBatch.removeAll()
            return [.overflow]
        }
        if event.mask & UInt32(IN_IGNORED) != 0 {
            folders[event.wd] = nil
            return []
        }
        guard let (path, folder) = folders[event.wd] else { return [] }
        if name.bytes.isEmpty {
            // An event of a watched folder itself: its parent's watch reports it by name, but
            // for the root, which has no watched parent.
            return event.mask & UInt32(IN_ATTRIB) != 0 && path == root ? [.attributes(path: path)] : []
        }
        // docfs's own working files (a copy or restore being made) are nobody's change.
        if WorkingFileNames.contains(name) { return [] }
        if event.mask & UInt32(IN_ATTRIB) != 0 {
            return [.attributes(path: path + "/" + name.description)]
        }
        if event.mask & UInt32(IN_MODIFY) != 0 {
            if written.count >= Self.writtenCapacity { written.removeAll() }
            written.insert(WatchedName(watch: event.wd, name: name))
            writtenInBatch.insert(WatchedName(watch: event.wd, name: name))
            return []
        }
        if event.mask & UInt32(IN_CLOSE_WRITE) != 0 {
            writtenInBatch.remove(WatchedName(watch: event.wd, name: name))
            guard written.remove(WatchedName(watch: event.wd, name: name)) != nil else { return [] }
            return [.content(path: path + "/" + name.description, folder: folder, name: name)]
        }
        if event.mask & UInt32(IN_ISDIR) != 0 {
            let child = path + "/" + name.description
            if event.mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 { watchTree(child, announced: false) }
            if event.mask & UInt32(IN_MOVED_FROM) != 0 { forgetTree(child) }
        }
        return [.name(folder, name, path: path + "/" + name.description)]
    }

    /// Watches `path` and every folder under it (folders made before the watch existed too).
    /// `announced`: whether the names in a folder that cannot be watched were already reported
    /// (false for a folder that just appeared: a rescan reports what it holds).
    /// `removingLeftovers`: the first walk, when no working file can be in use (later, a
    /// folder that just appeared may hold one docfs is writing: a remote change applied into a
    /// container made for it).
    func watchTree(_ path: String, announced: Bool = true, removingLeftovers: Bool = false) {
        // Watched through a descriptor, so the watch and the identity recorded for it are
        // surely of the same folder, even if it moves meanwhile.
        let folder = open(FileName(path).cString, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folder >= 0 else { return }
        defer { close(folder) }
        var st = stat()
        guard fstat(folder, &st) == 0 else { return }
        let identity = Folder(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
        let wd = folders.count < maximumWatches ? inotify_add_watch(fd, "/proc/self/fd/\(folder)", Self.folderEvents) : -1
        if wd >= 0 {
            folders[wd] = (path, identity)
        } else {
            let reason = folders.count >= maximumWatches ? ENOSPC : errno
            guard reason == ENOSPC || reason == ENOMEM else { return }
            // Past the kernel's limit (fs.inotify.max_user_watches): looked at by rescans.
            unwatch(path, identity, folder, announced: announced)
        }
        guard let dir = opendir(FileName(path).cString) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { FileName(cString: $0).description }
            }
            if entry.pointee.d_type == DT_REG && WorkingFileNames.contains(name) {
                if removingLeftovers { unlinkat(dirfd(dir), FileName(name).cString, 0) }
                continue
            }
            guard entry.pointee.d_type == DT_DIR else { continue }
            if name != "." && name != ".." {
                watchTree(path + "/" + name, announced: announced, removingLeftovers: removingLeftovers)
            }
        }
    }

    /// A folder moved away: its watches stay (they follow the folder) but their paths are
    /// stale; they are dropped, and the folder is watched again where it reappears.
    func forgetTree(_ path: String) {
        for (wd, entry) in folders where entry.path == path || entry.path.hasPrefix(path + "/") {
            inotify_rm_watch(fd, wd)
            folders[wd] = nil
        }
        forgetUnwatched(under: path)
    }
}
