import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// The write path's one shape (issue 20 §4): `changing` claims, runs the backing operation,
/// hands each record of what it changed to every consumer, and tells the other views what to
/// drop from their kernel caches after the claims are let go.
extension Filesystem {
    /// Runs `operation` (the backing operation, answering its result and what it changed)
    /// under `claims`; its records go to every consumer before the claims are let go (S1: the
    /// index has them before the reply), and the other views drop `touched` afterwards.
    /// `caller` is who the records say asked for the change.
    func changing<T>(_ claims: [(ItemID, ClaimIntent)], touching touched: @autoclosure () -> TouchedPlaces, by caller: Caller? = nil,
                     _ operation: () throws(DocfsError) -> (T, [ChangeRecord])) throws(DocfsError) -> T {
        defer {
            let places = touched()  // read at the end: an operation may learn of more
            shared.changed(by: self, names: places.names, files: places.files)
        }
        return try coordinator.withClaims(claims) { () throws(DocfsError) -> T in
            let (result, changes) = try operation()
            for var change in changes {
                if change.caller == nil { change.caller = caller }
                deliver(change)
            }
            return result
        }
    }

    /// A writer's close or fsync stitched `node` (the stitcher follows open writers, S1): the
    /// record goes to the other consumers, and the other views drop the file's cached
    /// attributes (close-to-open for the other mounts).
    func stitchedWriter(_ written: (node: Node, outlook: IndexRecordBuilder.ThumbnailOutlook)) {
        let node = written.node
        var change = ChangeRecord.file(.written, node)
        change.thumbnailOutlook = written.outlook
        deliver(change)
        shared.changed(by: self, files: [node.key])
    }

    /// Hands `change` to each consumer, in this order: the index (stitched now, before the
    /// reply), presenters (posted to their queue), thumbnails (queued to the thumbnailer).
    func deliver(_ change: ChangeRecord) {
        guard let folder = change.folder, let name = change.name else {
            guard let node = change.node else { return }
            switch change.kind {
            case .attributes: stitcher?.recordFile(node)
            case .written: contentChanged(node, outlook: change.thumbnailOutlook)
            default: break
            }
            return
        }
        switch change.kind {
        case .created:
            stitcher?.recordName(name, in: folder, item: change.item)
            present(.created, name, inFolder: folder, item: change.item)
        case .createdOpen:
            present(.created, name, inFolder: folder, item: change.item)
        case let .moved(fromName, fromFolder, exchange):
            stitcher?.recordMove(fromName, in: fromFolder, to: name, in: folder, exchange: exchange)
            presentMove(fromName, inFolder: fromFolder, to: name, inFolder: folder, item: change.item)
        case let .movedOut(source, fromName, fromFolder):
            stitcher?.removeName(fromName, in: fromFolder)
            stitcher?.recordName(name, in: folder, item: change.item)
            if let place = paths.place(of: folder) { presentMove(from: source, to: place.appending(name.description), item: change.item) }
        case let .replaced(fromName, fromFolder, exchange):
            stitcher?.recordReplace(fromName, in: fromFolder, by: name, in: folder, exchange: exchange)
            contentChanged(name, inFolder: folder)
            if let version = change.version {
                present(.version, name, inFolder: folder, item: change.item, version: version)
            } else if presenters.isListened, let document = replaceSide(inDirectory: folder, name: name) {
                present(.version, name, inFolder: folder, item: document.item, version: ItemAttributes.version(ofDescriptor: document.fd))
                close(document.fd)
            }
        case let .newVersion(version, conflict):
            stitcher?.recordName(name, in: folder, item: change.item)
            contentChanged(name, inFolder: folder)
            present(conflict ? .conflict : .version, name, inFolder: folder, item: change.item, version: version)
        case .referenceBecameDocument:
            stitcher?.removeName(name, in: folder, wasReference: true)
            stitcher?.recordName(name, in: folder, item: change.item)
            present(.changed, name, inFolder: folder, item: change.item)
        case .deleted(let wasReference):
            stitcher?.removeName(name, in: folder, wasReference: wasReference)
            present(.deleted, name, inFolder: folder, item: change.item)
            if let node = change.node { removedLastName(of: node) }  // its thumbnails go with its last name
        case .attributes:
            stitcher?.recordName(name, in: folder, item: change.item, namesChanged: false)
        case .written:
            contentChanged(name, inFolder: folder)
        }
    }
}
