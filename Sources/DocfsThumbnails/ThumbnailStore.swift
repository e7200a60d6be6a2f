import CLinux
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The store's thumbnails (`STORE/thumbnails/`): one `ThumbnailFile` per item, named by its id,
/// and the worker's files in the making (`.work-*`), which become an item's set by a rename.
/// Thumbnails are derived state: losing them costs only their making again.
public struct ThumbnailStore: Sendable {
    public let directory: String
    /// Items found to have no set, shared by the copies of this store value: most files never
    /// get one, and each close of a writer asks (the index records whether a file has one).
    private let absent = AbsentSets()

    /// Which items have no set, as last found, and a count of the sets installed since (an
    /// absence found before an install finished is not remembered after it).
    ///
    /// Lock order: `state` is a leaf lock; no file is touched while it is held.
    private final class AbsentSets: Sendable {
        let state = Mutex((items: Set<UInt64>(), installs: UInt64(0)))
        static let capacity = 1 << 16
    }

    public init(directory: String) {
        self.directory = directory
    }

    /// Makes the folder if needed and removes what a killed daemon left in the making.
    public func prepare() throws(DocfsError) {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw DocfsError(.storeUnavailable, "cannot make the thumbnail folder \(directory)", cause: DocfsError.errno("mkdir"))
        }
        guard let dir = opendir(directory) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name.hasPrefix(".work-") { unlink(directory + "/" + name) }
        }
    }

    public func path(of item: ItemID) -> String { "\(directory)/\(item.rawValue).thumb" }

    private static let jobs = Atomic<UInt64>(1)

    /// A number for a new job, unique in this process (it names the job's work files).
    public func newJob() -> UInt64 { Self.jobs.add(1, ordering: .relaxed).oldValue }

    /// Where a set for a job is written before it is installed.
    public func workPath(job: UInt64) -> String { "\(directory)/.work-\(getpid())-\(job)" }

    /// The set stored for `item` and a descriptor to read its renditions with (the caller
    /// closes it); nil when there is none or it is damaged.
    public func open(_ item: ItemID) -> (file: ThumbnailFile, fd: Int32)? {
        let fd = Glibc.open(path(of: item), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        guard let file = ThumbnailFile.read(fd) else {
            close(fd)
            return nil
        }
        return (file, fd)
    }

    /// Whether a set is stored for `item` at all (damaged or not current included: only a
    /// missing file says no), and the set when it reads whole.
    public func stored(_ item: ItemID) -> (exists: Bool, file: ThumbnailFile?) {
        let installs = absent.state.withLock { state -> UInt64? in state.items.contains(item.rawValue) ? nil : state.installs }
        guard let installs else { return (false, nil) }
        let fd = Glibc.open(path(of: item), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            guard errno == ENOENT else { return (true, nil) }
            absent.state.withLock { state in
                guard state.installs == installs else { return }
                if state.items.count >= AbsentSets.capacity { state.items.removeAll(keepingCapacity: true) }
                state.items.insert(item.rawValue)
            }
            return (false, nil)
        }
        defer { close(fd) }
        return (true, ThumbnailFile.read(fd))
    }

    /// The set stored for `item`, if it was made from the content `stamp` describes.
    public func current(_ item: ItemID, stamp: ContentStamp) -> ThumbnailFile? {
        guard let (file, fd) = open(item) else { return nil }
        close(fd)
        return file.stamp == stamp ? file : nil
    }

    /// The PNG of `size` for `item`, if its set was made from the content `stamp` describes.
    public func rendition(_ size: ThumbnailSize, of item: ItemID, stamp: ContentStamp) -> [UInt8]? {
        guard let (file, fd) = open(item) else { return nil }
        defer { close(fd) }
        guard file.stamp == stamp else { return nil }
        return file.rendition(size, from: fd)
    }

    /// Makes the set at `workPath` the item's.
    public func install(_ workPath: String, as item: ItemID) throws(DocfsError) {
        guard rename(workPath, path(of: item)) == 0 else {
            let error = DocfsError.errno("installing the thumbnail of item \(item)")
            unlink(workPath)
            throw error
        }
        // After the rename: a look that missed the set began before this count moved.
        absent.state.withLock { state in
            state.installs &+= 1
            state.items.remove(item.rawValue)
        }
    }

    /// Writes `bytes` as the item's set (through a work file and a rename).
    public func write(_ bytes: [UInt8], as item: ItemID, job: UInt64) throws(DocfsError) {
        let work = workPath(job: job)
        let fd = Glibc.open(work, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DocfsError.errno("writing a thumbnail of item \(item)") }
        let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard n == bytes.count else {
            unlink(work)
            throw DocfsError.errno("writing a thumbnail of item \(item)")
        }
        try install(work, as: item)
    }

    /// Forgets the item's set (whatever it was made from).
    public func remove(_ item: ItemID) {
        unlink(path(of: item))
    }

    /// The ids of the items that have a set stored (current or not).
    public func items() -> [ItemID] {
        guard let dir = opendir(directory) else { return [] }
        defer { closedir(dir) }
        var items: [ItemID] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name.hasSuffix(".thumb"), let item = ItemID(text: String(name.dropLast(6))) { items.append(item) }
        }
        return items
    }
}
