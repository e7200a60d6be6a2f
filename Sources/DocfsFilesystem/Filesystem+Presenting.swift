import CLinux
import DocfsCoordination
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Telling presenters (C6) what changed, with paths relative to the mount root. Paths are
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

    /// A file's new version, at the place the kernel last found it.
    func presentVersion(of node: Node, version: UInt64, kind: PresentedChange.Kind = .version) {
        guard presenters.isListened, let place = node.place, let folder = nodes.known(key: place.directory) else { return }
        present(kind, place.name, in: folder, item: node.item, version: version)
    }

    /// `name` in the folder `fd` relative to the mount root; nil outside it.
    func path(of name: FileName, in fd: Int32) -> String? {
        guard let folder = backingPath(of: fd), let root = backingPath(of: root.fd) else { return nil }
        let relative: String
        if folder == root {
            relative = ""
        } else if folder.hasPrefix(root + "/") {
            relative = String(folder.dropFirst(root.count + 1)) + "/"
        } else {
            return nil
        }
        return relative + name.description
    }
}
