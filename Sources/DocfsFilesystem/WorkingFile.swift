import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// A file docfs writes beside a document and then renames over it (a restore, a raced save put
/// back): its name starts with `prefix` (a restart removes leftovers, see StoreWatcher), and
/// its creation, writes and move are noted as docfs's own, so the store watcher does not take
/// them for someone else's.
package struct WorkingFile {
    package let name: FileName
    package let fd: Int32
    private let ownChanges: OwnChanges

    /// Creates it in the folder `directory`, for replacing `target` there.
    package init(prefix: String, in directory: Int32, replacing target: FileName, mode: mode_t, ownChanges: OwnChanges,
         purpose: @autoclosure () -> String) throws(DocfsError) {
        var folder = stat()
        try check(fstat(directory, &folder))
        name = FileName(prefix + String(UInt64.random(in: 0...UInt64.max), radix: 16))
        ownChanges.changedName(name, in: BackingKey(folder), events: 2)  // created, moved away
        ownChanges.changedName(target, in: BackingKey(folder))
        fd = openat(directory, name.cString, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0o7777)
        guard fd >= 0 else { throw DocfsError.errno("creating a file to \(purpose())") }
        self.ownChanges = ownChanges
        var created = stat()
        if fstat(fd, &created) == 0 { ownChanges.openedForWriting(UInt64(fd), file: created) }
    }

    package func close() {
        _ = ownChanges.closingForWriting(UInt64(fd), fd: fd)
        _ = Glibc.close(fd)
    }
}
