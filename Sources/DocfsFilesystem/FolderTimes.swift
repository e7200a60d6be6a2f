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
struct FolderTimes {
    private var saved: [(fd: Int32, key: BackingKey, modified: timespec)] = []

    /// The times of `folders` now (each once).
    init(of folders: [Int32]) {
        for fd in folders {
            var st = stat()
            guard fstat(fd, &st) == 0 else { continue }
            let key = BackingKey(st)
            guard !saved.contains(where: { $0.key == key }) else { continue }
            saved.append((fd, key, st.st_mtim))
        }
    }

    /// Sets each folder's modification time back where it was; answers the folders it moved.
    /// The folders' descriptors (`O_PATH` ones too) must still be open.
    func restore() -> [Int32] {
        var moved: [Int32] = []
        for (fd, _, modified) in saved {
            var st = stat()
            guard fstat(fd, &st) == 0, st.st_mtim.tv_sec != modified.tv_sec || st.st_mtim.tv_nsec != modified.tv_nsec else { continue }
            var times = [timespec(tv_sec: 0, tv_nsec: DOCFS_UTIME_OMIT), modified]
            if utimensat(AT_FDCWD, "/proc/self/fd/\(fd)", &times, 0) == 0 { moved.append(fd) }
        }
        return moved
    }
}
