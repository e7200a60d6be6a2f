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
        let fd = open(contentPath(item, version), DOCFS_O_PATH | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return PromisedContent.promisedNumber(fd) != nil
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
        settleLater(item, version: version)
    }
}
