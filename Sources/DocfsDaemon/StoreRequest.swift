import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// How a command that changes a store reaches it (C7): through the daemon serving it (its
/// control socket), or, when none does, on the store itself, holding the store's lock so no
/// daemon starts meanwhile, with the changes stitched into the index as the daemon would.
public enum StoreRequest {
    /// Sends `request` to the daemon serving `layout` and answers its message; when no daemon
    /// serves the store, carries it out here on a filesystem of the store instead, as the
    /// daemon would (`purpose` names the lock's holder for whoever finds it busy). For the
    /// requests that change the store: a restore or a conflict resolved, a pick, a container
    /// made, renamed or deleted.
    public static func perform(_ request: ControlRequest, on layout: StoreLayout, purpose: String) throws(DocfsError) -> String {
        if access(layout.formatFile, F_OK) == 0, StoreLock.holder(of: layout) != nil {
            let reply = try ControlClient.send(request, to: layout)
            guard reply.ok else { throw DocfsError(.invalidArgument, reply.message) }
            return reply.message
        }
        let store = try LocalStore(path: layout.root)
        let lock = try StoreLock(store: store, mountPoint: "(\(purpose))")
        defer { withExtendedLifetime(lock) {} }
        // The index is kept up to date when it is usable; otherwise the next mount reconciles it.
        let index = try? IndexDatabase.open(path: store.layout.indexFile)
        let filesystem = try Filesystem(store: store, index: index?.1 == .ready ? index?.0 : nil)
        defer { filesystem.forgetAll() }
        return try applyHere(request, filesystem: filesystem)
    }

    /// Carries `request` out on `filesystem`, for docfs itself (no mount's kernel to tell).
    private static func applyHere(_ request: ControlRequest, filesystem: Filesystem) throws(DocfsError) -> String {
        switch request.kind {
        case .restore, .resolve:
            guard let number = request.item else { throw DocfsError(.invalidArgument, "which document?") }
            return try DocumentChange.apply(request, item: ItemID(rawValue: number), filesystem: filesystem, caller: .daemon) { _ in }
        case .pick:
            return try PickRequests.apply(request, filesystem: filesystem, caller: .daemon) { _ in }
        case .createContainer, .renameContainer, .deleteContainer:
            return try ContainerRequests.apply(request, filesystem: filesystem) { _ in }
        case .watch, .claims, .author, .rebuildIndex, .checkIndex, .mount, .bookmark, .resolveBookmark,
             .remoteLink, .remoteStatus, .remoteCheck, .remoteUnlink, .query, .download, .pin, .unpin, .evict, .keyValuesChanged:
            throw DocfsError(.invalidArgument, "a \(request.kind.rawValue) request needs the daemon serving the store")
        }
    }
}
