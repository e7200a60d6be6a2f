import DocfsCoordination
import DocfsCore

/// The write path's one shape (issue 20 §4): `changing` claims, runs the backing operation,
/// hands each record of what it changed to every consumer, and tells the other views what to
/// drop from their kernel caches after the claims are let go.
extension Filesystem {
    /// Runs `operation` (the backing operation, answering its result and what it changed)
    /// under `claims`; its records go to every consumer before the claims are let go (S1: the
    /// index has them before the reply), and the other views drop `touched` afterwards.
    func changing<T>(_ claims: [(ItemID, ClaimIntent)], touching touched: TouchedPlaces,
                     _ operation: () throws(DocfsError) -> (T, [ChangeRecord])) throws(DocfsError) -> T {
        defer { shared.changed(by: self, names: touched.names, files: touched.files) }
        return try coordinator.withClaims(claims) { () throws(DocfsError) -> T in
            let (result, changes) = try operation()
            for change in changes { deliver(change) }
            return result
        }
    }

    /// A writer's close or fsync stitched `node` (the stitcher follows open writers, S1): the
    /// record goes to the other consumers, and the other views drop the file's cached
    /// attributes (close-to-open for the other mounts).
    func stitchedWriter(_ node: Node) {
        deliver(.file(.written, node))
        shared.changed(by: self, files: [node.key])
    }

    /// Hands `change` to each consumer, in this order: the index (stitched now, before the
    /// reply), presenters (posted to their queue), thumbnails (queued to the thumbnailer).
    func deliver(_ change: ChangeRecord) {
        switch change.kind {
        case .created:
            if let folder = change.folder, let name = change.name {
                stitcher?.recordName(name, in: folder.fd, item: change.item)
                present(.created, name, in: folder, item: change.item)
            }
        case .createdOpen:
            if let folder = change.folder, let name = change.name { present(.created, name, in: folder, item: change.item) }
        case .deleted(let wasReference):
            if let folder = change.folder, let name = change.name {
                stitcher?.removeName(name, in: folder.fd, wasReference: wasReference)
                present(.deleted, name, in: folder, item: change.item)
            }
            if let node = change.node { removedLastName(of: node) }  // its thumbnails go with its last name
        case .attributes:
            if let node = change.node { stitcher?.recordFile(node) }
        case .written:
            if let node = change.node { contentChanged(node) }
        }
    }
}
