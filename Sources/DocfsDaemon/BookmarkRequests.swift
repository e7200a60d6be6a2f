import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Bookmarks made and resolved by the daemon for a user who cannot read the store's key (issue
/// 21 §4): when root serves another user's store, the key and the index are root's, and that
/// user's `docfs bookmark create|resolve` asks the daemon, which signs or checks the token with
/// the key and answers from its index. A bookmark is made only of a file the caller may read.
enum BookmarkRequests {
    /// The token for the document at `place` (item `item`), asked for by `caller`.
    static func create(_ request: ControlRequest, store: LocalStore, caller: Caller) throws(DocfsError) -> String {
        guard let wanted = request.place, let number = request.item else {
            throw DocfsError(.invalidArgument, "a bookmark request names the document's place and item")
        }
        let place = try wanted.place()
        let path = store.layout.containerDirectory(place.container) + (place.scope == .data ? "/Data" : "/Documents") + place.path
        let fd = open(FileName(path).cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError(.system(.noSuchFileOrDirectory), "\(place.path) is not in the store") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw DocfsError.errno("looking at \(place.path)") }
        guard mayRead(st, caller) else {
            throw DocfsError(.system(.permissionDenied), "\(place.path): uid \(caller.uid) may not read it, so may not bookmark it")
        }
        guard let item = ItemAttributes.id(ofDescriptor: fd), item.rawValue == number else {
            throw DocfsError(.invalidArgument, "\(place.path) is no longer item \(number): look it up again")
        }
        let key = try store.bookmarkKey()
        let scope = request.bookmarkScope.map { Bookmark.SecurityScope(issuedTo: $0.issuedTo ?? "uid:\(caller.uid)", readOnly: $0.readOnly) }
        let bookmark = Bookmark(item: item, container: place.container.rawValue, scope: place.scope.rawValue, path: place.path,
                                backing: st, storeID: key.storeID, securityScope: scope,
                                madeOn: try StoreInstance.bytes(store.layout))
        return BookmarkToken.encode(bookmark, key: key)
    }

    /// Where the item `request.token` names is now.
    static func resolve(_ request: ControlRequest, store: LocalStore, index: IndexDatabase?,
                        mountPoint: String?) throws(DocfsError) -> BookmarkResolution.Report {
        guard let token = request.token else { throw DocfsError(.invalidArgument, "a resolve request carries the token") }
        guard let index else { throw DocfsError(.storeUnavailable, "the daemon serves this store without an index: run docfs index rebuild") }
        let bookmark: Bookmark
        do throws(BookmarkTokenProblem) {
            bookmark = try BookmarkToken.decode(token, key: try keyOrProblem(store))
        } catch {
            throw DocfsError(.invalidArgument, error.description)
        }
        return try BookmarkResolution.find(bookmark, index: index, store: store.layout, mountPoint: mountPoint).report
    }

    private static func keyOrProblem(_ store: LocalStore) throws(BookmarkTokenProblem) -> StoreKey {
        guard let key = try? store.bookmarkKey() else { throw .foreignStore }
        return key
    }

    /// Whether `caller` may read the file in state `st` (owner, group with supplementary groups,
    /// others; root may read anything).
    static func mayRead(_ st: stat, _ caller: Caller) -> Bool {
        if caller.uid == 0 { return true }
        if st.st_uid == caller.uid { return st.st_mode & 0o400 != 0 }
        if st.st_gid == caller.gid || groups(of: caller.pid).contains(st.st_gid) { return st.st_mode & 0o040 != 0 }
        return st.st_mode & 0o004 != 0
    }

    /// The supplementary groups of process `pid` (from /proc/PID/status).
    private static func groups(of pid: pid_t) -> [gid_t] {
        guard let file = fopen("/proc/\(pid)/status", "r") else { return [] }
        defer { fclose(file) }
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let text = String(cString: line)
            guard text.hasPrefix("Groups:") else { continue }
            return text.dropFirst("Groups:".count).split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).compactMap { gid_t($0) }
        }
        return []
    }
}
