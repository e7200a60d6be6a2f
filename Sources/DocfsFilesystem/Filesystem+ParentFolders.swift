import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Finding a document's folder by its path in the view, and copying content whole: what the
/// operations the control socket asks for (restores, conflicts, picks) share.
extension Filesystem {
    /// Opens the folder holding `path` (relative to the mount root, no `..`; or `place`, when
    /// given) and names its last part.
    func openParent(of path: String, place: StorePlace? = nil) throws(DocfsError) -> (Int32, FileName) {
        if let place, let slash = place.path.lastIndex(of: "/") {
            let directory = paths.openPlace(StorePlace(container: place.container, scope: place.scope, path: String(place.path[..<slash])))
            guard directory >= 0 else { throw DocfsError(.system(.noSuchFileOrDirectory), "\(path) does not exist") }
            return (directory, FileName(String(place.path[place.path.index(after: slash)...])))
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let last = parts.last, !parts.contains(".."), !parts.contains(".") else {
            throw DocfsError(.invalidArgument, "\"\(path)\" does not name a document under the mount root")
        }
        let directory = openViewPath(parts.dropLast().joined(separator: "/"))
        guard directory >= 0 else { throw DocfsError(.system(.noSuchFileOrDirectory), "\(path) does not exist") }
        return (directory, FileName(last))
    }

    /// Copies the whole of `source` (a promised file downloaded first) into `target`.
    func copyAll(from source: Int32, to target: Int32) throws(DocfsError) {
        if isPromised(source) { try shared.promises.ensureWhole(source) }
        while true {
            let n = docfs_copy_file_range(source, nil, target, nil, 1 << 30, 0)
            if n < 0 {
                if errno == EINTR { continue }
                throw DocfsError.errno("copying the kept version")
            }
            if n == 0 { return }
        }
    }
}
