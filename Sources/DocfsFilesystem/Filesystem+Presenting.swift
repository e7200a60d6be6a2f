import CLinux
import DocfsCoordination
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Telling presenters (C6) what changed, with paths relative to the user view's root. Paths are
/// worked out only while someone listens.
extension Filesystem {
    func present(_ kind: PresentedChange.Kind, _ name: FileName, in directory: Node, item: ItemID? = nil,
                 version: UInt64? = nil, uncoordinated: Bool = false) {
        guard presenters.isListened, let location = path(of: name, in: directory.fd) else { return }
        presenters.post(PresentedChange(kind, path: location, item: item, version: version, uncoordinated: uncoordinated))
    }

    func presentMove(_ name: FileName, in from: Node, to newName: FileName, in to: Node, item: ItemID?) {
        guard presenters.isListened, let old = path(of: name, in: from.fd), let new = path(of: newName, in: to.fd) else { return }
        presenters.post(PresentedChange(.moved, path: old, newPath: new, item: item))
    }

    /// A file's new version, at the place the kernel last found it; false when this view does
    /// not know that folder.
    @discardableResult
    func presentVersion(of node: Node, version: UInt64, kind: PresentedChange.Kind = .version) -> Bool {
        guard presenters.isListened else { return true }
        guard let place = node.place, let folder = nodes.known(key: place.directory) else { return false }
        present(kind, place.name, in: folder, item: node.item, version: version)
        return true
    }

    /// `name` in the folder `fd` as a path of the user view, relative to its root (presenters
    /// watch paths there); nil where the user view does not show it.
    func path(of name: FileName, in fd: Int32) -> String? {
        guard let folder = paths.place(of: fd), let path = userView.path(of: folder.appending(name.description)) else { return nil }
        return String(path.dropFirst())
    }
}
