import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Versions whose content is still on the remote (issue 23): when another machine's version
/// replaces a promised document, the content it replaces is kept as a version without being
/// downloaded (`keepFile(_:item:record:promised:)`): the kept file stays promised (sparse,
/// marked, its promise recorded) and is fetched the first time the version is read (shown,
/// restored, or read under a delta), then cut into chunks like any other.
extension VersionStore {
    /// Whether version `version` of `item` is kept promised (its content not here yet).
    public func isPromised(_ item: ItemID, version: UInt64) -> Bool {
        promiseNumber(item, version: version) != nil
    }

    /// The number of the promise a version kept promised stands for; nil when it is here.
    func promiseNumber(_ item: ItemID, version: UInt64) -> UInt64? {
        let fd = open(contentPath(item, version), DOCFS_O_PATH | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return PromisedContent.promisedNumber(fd)
    }

    /// Fetches version `version` of `item` if it is kept promised (nothing when it is here).
    public func fetchIfPromised(_ item: ItemID, version: UInt64) throws(DocfsError) {
        let fd = open(contentPath(item, version), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }  // kept as chunks, a delta, or not kept: nothing promised
        defer { close(fd) }
        try fetchIfPromised(fd, item: item, version: version)
    }

    /// The version's file `fd` holds its content once this returns: fetched through
    /// `beforeReading` when promised. Fails, saying what to do, where nothing can fetch it
    /// (a command reading the store while no daemon serves it).
    func fetchIfPromised(_ fd: Int32, item: ItemID, version: UInt64) throws(DocfsError) {
        guard PromisedContent.promisedNumber(fd) != nil else { return }
        try beforeReading(fd)
        guard PromisedContent.promisedNumber(fd) == nil else {
            throw DocfsError(.storeUnavailable, "version \(version) of item \(item) is still on the remote (kept promised): "
                             + "mount the store, linked, and it is fetched when read")
        }
        var st = stat()
        if fstat(fd, &st) == 0 { account(Int64(st.st_size)) }  // on disk now (counted as none while promised)
        settleLater(item, version: version)
    }

    /// The folder naming each item that has (or had) versions kept promised: one empty file
    /// per item, so finding them costs what they are, never a walk of every version.
    var promisedMarks: String { directory + "/.promised" }

    func markPromised(_ item: ItemID) {
        mkdir(promisedMarks, 0o700)
        let fd = open(promisedMarks + "/\(item)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
    }

    /// Fetches every version kept promised before `cutoff` (seconds since 1970), through
    /// `beforeReading`; answers how many, and what failed (each tried again next time). An
    /// item none of whose versions is promised any more loses its mark.
    public func fetchAgingPromised(keptBefore cutoff: Double) -> (fetched: Int, problems: [String]) {
        var fetched = 0
        var problems: [String] = []
        for name in Self.names(in: promisedMarks) {
            guard let item = ItemID(text: name) else { continue }
            var left = 0
            for record in versions(of: item) where isPromised(item, version: record.version) {
                guard record.kept < cutoff else {
                    left += 1
                    continue
                }
                do {
                    try fetchIfPromised(item, version: record.version)
                    fetched += 1
                } catch {
                    problems.append("version \(record.version) of item \(item), kept promised, could not be fetched: \(error)")
                    left += 1
                }
            }
            if left == 0 { unlink(promisedMarks + "/" + name) }
        }
        return (fetched, problems)
    }
}
