import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Folders past the kernel's watch limit (issue 21 §4). inotify takes one watch per folder and
/// a user has `fs.inotify.max_user_watches` of them; a store with more folders (or other
/// programs of the same user holding watches) leaves some unwatched. Their changes must still be
/// seen: such folders are rescanned every `rescanInterval` seconds, what changed since the last
/// scan reported as the watcher's own changes would be, and each rescan tries to watch them
/// again (watches freed, or the limit raised). The cost grows with what is unwatched only.
extension StoreWatcher {
    /// What a rescan found in a folder: each name's inode, type, size and times.
    struct FolderScan {
        var folder: Folder
        var entries: [FileName: EntryState]
    }

    struct EntryState: Equatable {
        var inode: UInt64
        var mode: UInt32
        var size: Int64
        var modified: Int64, modifiedNanoseconds: Int64
        var changed: Int64, changedNanoseconds: Int64

        init(_ st: stat) {
            inode = UInt64(st.st_ino)
            mode = st.st_mode
            size = Int64(st.st_size)
            modified = Int64(st.st_mtim.tv_sec)
            modifiedNanoseconds = Int64(st.st_mtim.tv_nsec)
            changed = Int64(st.st_ctim.tv_sec)
            changedNanoseconds = Int64(st.st_ctim.tv_nsec)
        }

        var isDirectory: Bool { mode & S_IFMT == S_IFDIR }
    }

    /// Seconds between rescans of unwatched folders.
    public static let rescanInterval: Double = 2

    static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// The folder at `path` (open as `descriptor`) cannot be watched: it is scanned now (as
    /// empty when its names were not `announced` yet, so the first rescan reports them).
    func unwatch(_ path: String, _ folder: Folder, _ descriptor: Int32, announced: Bool) {
        if !limitReported {
            limitReported = true
            onUnwatched?("the kernel's limit on inotify watches (fs.inotify.max_user_watches) is reached: folders past it, such as \(path), are rescanned every \(Int(Self.rescanInterval)) s instead; raise the limit (sysctl fs.inotify.max_user_watches) to have them watched")
        }
        unwatched[path] = FolderScan(folder: folder, entries: announced ? Self.scan(descriptor) ?? [:] : [:])
        unwatchedCount.store(unwatched.count, ordering: .relaxed)
    }

    /// Folders at `path` and under it are gone from there.
    func forgetUnwatched(under path: String) {
        guard !unwatched.isEmpty else { return }
        for key in unwatched.keys where key == path || key.hasPrefix(path + "/") { unwatched[key] = nil }
        unwatchedCount.store(unwatched.count, ordering: .relaxed)
    }

    /// Each name in the folder `descriptor` with its state; nil when it cannot be read.
    static func scan(_ descriptor: Int32) -> [FileName: EntryState]? {
        let copy = openat(descriptor, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard copy >= 0, let dir = fdopendir(copy) else { return nil }
        defer { closedir(dir) }
        var entries: [FileName: EntryState] = [:]
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { FileName(cString: $0) }
            }
            if name == "." || name == ".." { continue }
            var st = stat()
            guard fstatat(dirfd(dir), name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            entries[name] = EntryState(st)
        }
        return entries
    }

    /// Looks at every unwatched folder again: the changes since the last look, as the watcher
    /// would have reported them. A folder that can be watched now is, after this last look.
    func rescanUnwatched() -> [Change] {
        var changes: [Change] = []
        for (path, previous) in unwatched.sorted(by: { $0.key < $1.key }) where unwatched[path] != nil {
            let descriptor = open(FileName(path).cString, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            var st = stat()
            guard descriptor >= 0, fstat(descriptor, &st) == 0,
                  Folder(device: UInt64(st.st_dev), inode: UInt64(st.st_ino)) == previous.folder,
                  let now = Self.scan(descriptor) else {
                // Gone or replaced: its parent reports the name.
                if descriptor >= 0 { close(descriptor) }
                forgetUnwatched(under: path)
                continue
            }
            defer { close(descriptor) }
            let watch = unwatched.count + folders.count <= maximumWatches
                ? inotify_add_watch(fd, "/proc/self/fd/\(descriptor)", Self.folderEvents) : -1
            for (name, state) in now {
                let child = path + "/" + name.description
                guard let before = previous.entries[name] else {
                    changes.append(.name(previous.folder, name, path: child))
                    if state.isDirectory { watchTree(child, announced: false) }
                    continue
                }
                if before.inode != state.inode || before.mode & S_IFMT != state.mode & S_IFMT {
                    changes.append(.name(previous.folder, name, path: child))
                    if before.isDirectory { forgetTree(child) }
                    if state.isDirectory { watchTree(child, announced: false) }
                } else if !state.isDirectory && (before.size != state.size || before.modified != state.modified
                                                 || before.modifiedNanoseconds != state.modifiedNanoseconds) {
                    changes.append(state.mode & S_IFMT == S_IFREG ? .content(path: child, folder: previous.folder, name: name)
                                                                  : .attributes(path: child))
                } else if before.changed != state.changed || before.changedNanoseconds != state.changedNanoseconds {
                    changes.append(.attributes(path: child))
                }
            }
            for (name, before) in previous.entries where now[name] == nil {
                let child = path + "/" + name.description
                changes.append(.name(previous.folder, name, path: child))
                if before.isDirectory { forgetTree(child) }
            }
            if watch >= 0 {
                folders[watch] = (path, previous.folder)
                unwatched[path] = nil
            } else if unwatched[path] != nil {
                unwatched[path]!.entries = now
            }
        }
        unwatchedCount.store(unwatched.count, ordering: .relaxed)
        return changes
    }
}
