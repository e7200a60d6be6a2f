import DocfsCore
import DocfsFilesystem
import DocfsProvider

/// `docfs pick`, `docfs move` and `docfs export` (to a folder of the store) carried out: in the
/// daemon, or by `StoreRequest` on the store when no daemon serves it.
enum PickRequests {
    /// Carries a pick request out; answers what to print.
    static func apply(_ request: ControlRequest, filesystem: Filesystem, caller: Caller,
                      invalidate: (KernelInvalidations) -> Void) throws(DocfsError) -> String {
        guard let pick = request.pick, let number = request.item, let item = ItemID(text: String(number)) else {
            throw DocfsError(.invalidArgument, "which document, and where to?")
        }
        let folder = try pick.folder.place()
        let picked = try DocumentPicker(view: filesystem).pick(pick.mode, item: item, into: folder, caller: caller)
        invalidate(picked.invalidations)
        let local = Filesystem.localPath(picked.place)
        let shown = filesystem.shared.userView.path(of: picked.place) ?? local
        switch pick.mode {
        case .open: return "\(request.path) is open in \(folder.container) as \(local) (a reference to item \(item))"
        case .import: return "imported \(request.path) into \(folder.container) as \(local) (item \(picked.item), a copy)"
        case .move: return "moved \(request.path) to \(shown); a reference to it stays in its app's container"
        case .export: return "exported \(request.path) to \(shown) (item \(picked.item), a copy)"
        }
    }
}
