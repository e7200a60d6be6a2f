import DocfsCore
import DocfsFilesystem
import DocfsProvider

/// `docfs versions FILE --restore V`: through the daemon when the store is served (the
/// control socket), else on the store directly, holding its lock so no daemon starts meanwhile.
enum Restore {
    static func run(_ document: LocatedDocument, version: UInt64) throws(DocfsError) -> String {
        let path = try document.pathUnderRoot()
        if StoreLock.holder(of: document.store) != nil {
            let request = ControlRequest(kind: .restore, path: path, item: document.item.rawValue, version: version)
            let reply = try ControlClient.send(request, to: document.store)
            guard reply.ok else { throw DocfsError(.invalidArgument, reply.message) }
            return reply.message
        }
        let store = try LocalStore(path: document.store.root)
        let lock = try StoreLock(store: store, mountPoint: "(docfs versions --restore)")
        defer { withExtendedLifetime(lock) {} }
        let filesystem = try Filesystem(store: store)
        _ = try filesystem.restore(path: path, item: document.item, version: version, caller: .daemon)
        return "restored version \(version) of \(path)"
    }
}
