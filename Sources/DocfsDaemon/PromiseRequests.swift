import DocfsCore
import DocfsFilesystem

/// `docfs download`, `docfs pin [--unpin]` and `docfs evict` of one file, carried out by the
/// daemon serving its store (which holds the remote's connection and the file's claims).
enum PromiseRequests {
    static func apply(_ request: ControlRequest, item: ItemID, filesystem: Filesystem) throws(DocfsError) -> ControlReply {
        var reply = ControlReply(ok: true, message: "")
        switch request.kind {
        case .download:
            if let version = request.version {
                // A kept version of the document still on the remote (`docfs versions --show`).
                try filesystem.shared.store.versions.fetchIfPromised(item, version: version)
                reply.message = "fetched version \(version)"
                return reply
            }
            let size = try filesystem.download(item)
            reply.message = "downloaded"
            reply.progress = [Int(size)]
        case .pin:
            try filesystem.pin(item, true)
            reply.message = "pinned"
        case .unpin:
            try filesystem.pin(item, false)
            reply.message = "unpinned"
        case .evict:
            let freed = try filesystem.evict(item)
            reply.message = freed > 0 ? "evicted" : "promised already"
            reply.progress = [Int(freed)]
        default:
            throw DocfsError(.invalidArgument, "a \(request.kind.rawValue) request is no promised item's")
        }
        return reply
    }
}
