import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider

/// `docfs versions FILE --restore V` and `--resolve [--keep V]` carried out: in the daemon when
/// the store is served, else by `StoreRequest` on the store directly, holding its lock so no
/// daemon starts meanwhile.
enum DocumentChange {
    /// Carries the request out (in the daemon, or in the `docfs` command when no daemon serves the store).
    static func apply(_ request: ControlRequest, item: ItemID, filesystem: Filesystem, caller: Caller,
                      invalidate: (KernelInvalidations) -> Void) throws(DocfsError) -> String {
        switch request.kind {
        case .restore:
            guard let version = request.version else { throw DocfsError(.invalidArgument, "which version to restore?") }
            invalidate(try DocumentRestorer(view: filesystem).restore(path: request.path, place: try request.place?.place(), item: item, version: version, caller: caller))
            return "restored version \(VersionNumber.shown(version)) of \(request.path)"
        case .resolve:
            invalidate(try DocumentRestorer(view: filesystem).resolveConflict(path: request.path, place: try request.place?.place(), item: item,
                                                      keep: request.version, caller: caller))
            return "resolved the conflict of \(request.path)" + (request.version.map { ", keeping version \(VersionNumber.shown($0))" } ?? "")
        case .watch, .claims, .author, .rebuildIndex, .checkIndex, .createContainer, .renameContainer, .deleteContainer, .mount, .pick,
             .bookmark, .resolveBookmark, .remoteLink, .remoteStatus, .remoteCheck, .remoteUnlink, .query, .download, .pin, .unpin, .evict, .keyValuesChanged:
            throw DocfsError(.invalidArgument, "a \(request.kind.rawValue) request changes nothing")
        }
    }
}
