import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The modification times of the folders an applied change of another machine's puts a name
/// in or takes one from (and where its content is written beside its name first), kept across
/// the apply (DESIGN §9.0: receiving is not a change). A folder's time travels with its own
/// versions (the machine where names came and went sends it, `IndexStitcher`'s outbox), so the
/// machines that receive those names keep the time they have and take the sender's when its
/// folder's version comes: they end with the same time, not with the moment each received.
///
/// A folder someone else changed while the apply got ready (a user saved a file in it while
/// the content came down) keeps the time that change gave it: that is a change of the
/// folder's, which goes up, and keeps another machine's removal of the folder from taking the
/// new file with it.
package struct FolderTimes {
    private var saved: [(fd: Int32, key: BackingKey, modified: timespec, expected: timespec)] = []

    /// The times of `folders` now (each once).
    package init(of folders: [Int32]) {
        for fd in folders {
            var st = stat()
            guard fstat(fd, &st) == 0 else { continue }
            let key = BackingKey(st)
            guard !saved.contains(where: { $0.key == key }) else { continue }
            saved.append((fd, key, st.st_mtim, st.st_mtim))
        }
    }

    /// The folders' times now are the apply's own doing (its working file came in them).
    package mutating func expectNow() {
        for index in saved.indices {
            var st = stat()
            if fstat(saved[index].fd, &st) == 0 { saved[index].expected = st.st_mtim }
        }
    }

    /// Forgets the folders whose time moved since `expectNow` (or since they were taken): someone
    /// else changed them, and they keep that change. Called under the apply's claims.
    package mutating func keepOnlyUnchanged() {
        saved.removeAll { folder in
            var st = stat()
            return fstat(folder.fd, &st) != 0 || !Self.same(st.st_mtim, folder.expected)
        }
    }

    /// Sets each folder's modification time back where it was; answers the folders it moved.
    /// The folders' descriptors (`O_PATH` ones too) must still be open.
    package func restore() -> [Int32] {
        var moved: [Int32] = []
        for (fd, _, modified, _) in saved {
            var st = stat()
            guard fstat(fd, &st) == 0, !Self.same(st.st_mtim, modified) else { continue }
            var times = [timespec(tv_sec: 0, tv_nsec: DOCFS_UTIME_OMIT), modified]
            if utimensat(AT_FDCWD, "/proc/self/fd/\(fd)", &times, 0) == 0 { moved.append(fd) }
        }
        return moved
    }

    private static func same(_ a: timespec, _ b: timespec) -> Bool { a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec }
}
