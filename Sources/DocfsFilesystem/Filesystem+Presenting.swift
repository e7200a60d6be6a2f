import CLinux
import DocfsCoordination
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Telling presenters (C6) what changed, by place, with the path the user view shows it at ("" for
/// places it does not show: an app view's watcher says them with paths of its own). Places are
/// worked out only while someone listens.
extension Filesystem {
    func present(_ kind: PresentedChange.Kind, _ name: FileName, in directory: Node, item: ItemID? = nil,
                 version: UInt64? = nil, uncoordinated: Bool = false) {
        present(kind, name, inFolder: directory.fd, item: item, version: version, uncoordinated: uncoordinated)
    }

    /// `change`, marked as another machine's when the sync engine is applying it.
    func fromItsMachine(_ change: PresentedChange) -> PresentedChange {
        guard let machine = RemoteApplication.otherMachine else { return change }
        var marked = change
        marked.origin = "remote"
        marked.machine = machine
        return marked
    }

    /// The same, for `name` in the folder `fd`.
    func present(_ kind: PresentedChange.Kind, _ name: FileName, inFolder fd: Int32, item: ItemID? = nil,
                 version: UInt64? = nil, uncoordinated: Bool = false) {
        guard presenters.isListened, let place = place(of: name, in: fd) else { return }
        presenters.post(fromItsMachine(PresentedChange(kind, path: userPath(place), item: item, version: version,
                                                       uncoordinated: uncoordinated, place: place)))
    }

    /// A move of `name` in the folder `from` to `newName` in the folder `to` (descriptors).
    func presentMove(_ name: FileName, inFolder from: Int32, to newName: FileName, inFolder to: Int32, item: ItemID?) {
        guard presenters.isListened, let old = place(of: name, in: from), let new = place(of: newName, in: to) else { return }
        presentMove(from: old, to: new, item: item)
    }

    /// A move between two places (the picker's move out of a container).
    func presentMove(from old: StorePlace, to new: StorePlace, item: ItemID?) {
        guard presenters.isListened else { return }
        presenters.post(fromItsMachine(PresentedChange(.moved, path: userPath(old), newPath: userPath(new), item: item,
                                                       place: old, newPlace: new)))
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

    /// The place of `name` in the folder `fd`; nil outside every scope.
    private func place(of name: FileName, in fd: Int32) -> StorePlace? {
        paths.place(of: fd)?.appending(name.description)
    }

    /// `place` as a path of the user view relative to its root; "" where it does not show it.
    private func userPath(_ place: StorePlace) -> String {
        userView.path(of: place).map { String($0.dropFirst()) } ?? ""
    }
}
