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
enum StoreRequest {
    /// Sends `request` to the daemon serving `layout` and answers its message; when no daemon
    /// serves the store, runs `locally` on a filesystem of the store instead (`purpose` names
    /// the lock's holder for whoever finds it busy).
    static func perform(_ request: ControlRequest, on layout: StoreLayout, purpose: String,
                        locally: (Filesystem) throws(DocfsError) -> String) throws(DocfsError) -> String {
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
        return try locally(filesystem)
    }
}
