import DocfsCore
import DocfsFilesystem
import DocfsProvider

/// `docfs container create|rename|delete` carried out: in the daemon (its mounts show the
/// change at once), or by `StoreRequest` on the store when no daemon serves it.
enum ContainerRequests {
    /// Carries a container request out, telling the kernel what to forget.
    static func apply(_ request: ControlRequest, filesystem: Filesystem,
                      invalidate: (KernelInvalidations) -> Void) throws(DocfsError) -> String {
        guard let change = request.container else { throw DocfsError(.invalidArgument, "which container?") }
        let id = try ContainerID(change.id)
        switch request.kind {
        case .createContainer:
            let (record, invalidations) = try ContainerAdministration(view: filesystem).create(id, name: change.name ?? "", isPublic: change.isPublic ?? false)
            invalidate(invalidations)
            return created(record)
        case .renameContainer:
            invalidate(try ContainerAdministration(view: filesystem).rename(id, to: change.name ?? ""))
            return "renamed \(id) to \(change.name ?? "")"
        case .deleteContainer:
            invalidate(try ContainerAdministration(view: filesystem).delete(id, force: change.force ?? false))
            return "deleted \(id)"
        default:
            throw DocfsError(.invalidArgument, "a \(request.kind.rawValue) request changes no container")
        }
    }

    private static func created(_ record: ContainerRecord) -> String {
        "created \(record.id) (\(record.name), \(record.isPublic ? "public" : "private"))"
    }
}
