import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider

/// `docfs versions FILE --restore V` and `--resolve [--keep V]`: through the daemon when the
/// store is served (the control socket), else on the store directly, holding its lock so no
/// daemon starts meanwhile.
enum DocumentChange {
    static func run(_ kind: ControlRequest.Kind, _ document: LocatedDocument, version: UInt64?) throws(DocfsError) -> String {
        // A document the user view does not show (an app's data, a private container) is named
        // by its place.
        let shown = try? document.pathUnderRoot()
        var request = ControlRequest(kind: kind, path: shown ?? document.path, item: document.item.rawValue, version: version)
        if shown == nil {
            let place = document.place
            request.place = PlaceRequest(place)
        }
        return try StoreRequest.perform(request, on: document.store, purpose: "docfs versions") { filesystem throws(DocfsError) in
            try apply(request, item: document.item, filesystem: filesystem, caller: .daemon) { _ in }
        }
    }

    /// Carries the request out (in the daemon, or here when no daemon serves the store).
    static func apply(_ request: ControlRequest, item: ItemID, filesystem: Filesystem, caller: Caller,
                      invalidate: (KernelInvalidations) -> Void) throws(DocfsError) -> String {
        switch request.kind {
        case .restore:
            guard let version = request.version else { throw DocfsError(.invalidArgument, "which version to restore?") }
            invalidate(try DocumentRestorer(view: filesystem).restore(path: request.path, place: try request.place?.place(), item: item, version: version, caller: caller))
            return "restored version \(version) of \(request.path)"
        case .resolve:
            invalidate(try DocumentRestorer(view: filesystem).resolveConflict(path: request.path, place: try request.place?.place(), item: item,
                                                      keep: request.version, caller: caller))
            return "resolved the conflict of \(request.path)" + (request.version.map { ", keeping version \($0)" } ?? "")
        case .watch, .claims, .author, .rebuildIndex, .checkIndex, .createContainer, .renameContainer, .deleteContainer, .mount, .pick,
             .bookmark, .resolveBookmark:
            throw DocfsError(.invalidArgument, "a \(request.kind.rawValue) request changes nothing")
        }
    }
}
