import CLinux
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Bookmarks through the mount (DESIGN §7): `user.docfs.bookmark` reads as a new token for the
/// item, signed with the store's key, naming where the item is now.
extension Filesystem {
    /// A bookmark token for `node`, made now.
    func bookmarkToken(of node: Node) throws(DocfsError) -> String {
        var st = stat()
        try check(fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
        guard let place = paths.place(of: node.fd, st) else {
            throw DocfsError.system(ENOENT)  // removed meanwhile: there is nothing to find again
        }
        let key = try store.bookmarkKey()
        let bookmark = Bookmark(item: node.item, container: place.container.rawValue, scope: place.scope.rawValue,
                                path: place.path, backing: st, storeID: key.storeID,
                                madeOn: try StoreInstance.bytes(store.layout))
        return BookmarkToken.encode(bookmark, key: key)
    }
}
