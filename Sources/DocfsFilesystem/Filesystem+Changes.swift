import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Whose kernels must forget what a change touched, once its claims are let go.
package enum KernelAudience: Sendable {
    /// Every view but the one whose request made the change: its reply tells its own kernel.
    case otherViews
    /// Every view: no view's request made the change (a remote change applied here).
    case everyView
}

/// Why a change record may be delivered where it is (see `Filesystem.deliver`): every delivery
/// happens inside a scope that has said how the kernels learn of the change, so one that forgot
/// the other views' kernels fails the tests (a debug check) instead of leaving them stale.
enum DeliveryScope: Sendable {
    /// Inside `changing`: the scope tells the kernels what it touched after the claims go.
    case changing
    /// The change leaves nothing a kernel caches (a version number, a thumbnail, a session's
    /// end: extended attributes are not cached, a writer's close tells the kernels itself).
    case nothingCached
    /// The store watcher's batch: its effects tell every mount's kernel (`Daemon.watch`).
    case storeWatcher
    /// The container registry's change: the answer tells the view's kernel which names of
    /// the root to forget, and no other view shows the root (an app view shows its own
    /// container, which cannot be deleted while it is mounted).
    case containers

    @TaskLocal static var current: DeliveryScope?

    /// Runs `body` in `scope`. Only a debug build keeps the scope (for `deliver`'s check): a
    /// release build runs `body` as it is, nothing pushed on the write path.
    static func within<T, E: Error>(_ scope: DeliveryScope, _ body: () throws(E) -> T) throws(E) -> T {
        #if DEBUG
        var outcome: Result<T, E>?
        $current.withValue(scope) { outcome = Result { () throws(E) -> T in try body() } }
        return try outcome!.get()
        #else
        return try body()
        #endif
    }
}

/// The write path's one shape (issue 20 §4): `changing` claims, runs the backing operation,
/// hands each record of what it changed to every consumer, and tells the other views what to
/// drop from their kernel caches after the claims are let go.
extension Filesystem {
    /// Runs `operation` (the backing operation, answering its result and what it changed)
    /// under `claims`; its records (and those it delivers itself) go to every consumer before
    /// the claims are let go (S1: the index has them before the reply), and the kernels of
    /// `audience` drop `touched` afterwards, whether or not the operation succeeded (a failed
    /// one may have changed something first). `caller` is who the records say asked for it.
    package func changing<T>(_ claims: [(ItemID, ClaimIntent)], touching touched: @autoclosure () -> TouchedPlaces, by caller: Caller? = nil,
                     telling audience: KernelAudience = .otherViews,
                     _ operation: () throws(DocfsError) -> (T, [ChangeRecord])) throws(DocfsError) -> T {
        defer {
            let places = touched()  // read at the end: an operation may learn of more
            shared.changed(by: audience == .everyView ? nil : self, names: places.names, files: places.files)
        }
        return try DeliveryScope.within(.changing) { () throws(DocfsError) -> T in
            try coordinator.withClaims(claims) { () throws(DocfsError) -> T in
                let following = ownStatesFollowed(touched())
                defer { ownChanges.followed(following) }
                let (result, changes) = try operation()
                for var change in changes {
                    if change.caller == nil { change.caller = caller }
                    deliver(change)
                }
                return result
            }
        }
    }

    /// The folders whose names an operation touches, and the files it touches, that docfs's
    /// record of its own changes follows through it (see `OwnChanges.followed`): only those
    /// with a record, so most operations pay one lookup.
    private func ownStatesFollowed(_ touched: TouchedPlaces) -> [(node: Node, ctime: timespec)] {
        var keys = touched.names.map(\.folder) + touched.files
        if keys.count > 1 { keys = Array(Set(keys)) }
        let tracked = ownChanges.tracked(keys)
        if tracked.isEmpty { return [] }
        return ownChanges.statesBefore(tracked.compactMap { nodes.known(key: $0) })
    }

    /// A writer's close or fsync stitched `node` (the stitcher follows open writers, S1): the
    /// record goes to the other consumers, and the other views drop the file's cached
    /// attributes (close-to-open for the other mounts).
    func stitchedWriter(_ written: (node: Node, outlook: IndexRecordBuilder.ThumbnailOutlook)) {
        let node = written.node
        var change = ChangeRecord.file(.written, node)
        change.thumbnailOutlook = written.outlook
        DeliveryScope.within(.changing) { deliver(change) }
        shared.changed(by: self, files: [node.key])
    }

    /// Hands `change` to each consumer, in this order: the index (stitched now, before the
    /// reply), presenters (posted to their queue), thumbnails (queued to the thumbnailer). The
    /// kernels are the scope's to tell (`DeliveryScope`): inside `changing`, or a scope saying
    /// why they need not be.
    package func deliver(_ change: ChangeRecord) {
        assert(DeliveryScope.current != nil, "a change record (\(change.kind)) delivered outside changing(...): no kernel would be told")
        shared.stitch(change)
        presentersHear(change)
        thumbnailsFollow(change)
    }

    /// Delivers `change`, which leaves nothing a kernel caches (see `DeliveryScope.nothingCached`).
    package func deliverUncached(_ change: ChangeRecord) {
        DeliveryScope.within(.nothingCached) { deliver(change) }
    }

    /// Whether this view knows the folder `node` was last found in (presenters are told of the
    /// node's changes at that place).
    func knowsFolder(of node: Node) -> Bool {
        node.place.map { nodes.known(key: $0.directory) != nil } ?? false
    }

    /// The presenters' part of `change` (C6): what changed, at the place the user sees.
    private func presentersHear(_ change: ChangeRecord) {
        guard presenters.isListened else { return }
        guard let (folder, name) = change.place else {
            if case .versionCommitted(let version) = change.kind, let node = change.node {
                presentVersion(of: node, version: version)
            }
            return
        }
        switch change.kind {
        case .created, .createdOpen:
            present(.created, name, inFolder: folder, item: change.item)
        case let .moved(fromName, fromFolder, _):
            presentMove(fromName, inFolder: fromFolder, to: name, inFolder: folder, item: change.item)
        case let .movedOut(source, _, _):
            if let place = paths.place(of: folder) { presentMove(from: source, to: place.appending(name.description), item: change.item) }
        case .replaced:
            if let version = change.version {
                present(.version, name, inFolder: folder, item: change.item, version: version)
            } else if let document = replaceSide(inDirectory: folder, name: name) {
                present(.version, name, inFolder: folder, item: document.item, version: ItemAttributes.version(ofDescriptor: document.fd))
                close(document.fd)
            }
        case let .newVersion(version, conflict):
            present(conflict ? .conflict : .version, name, inFolder: folder, item: change.item, version: version)
        case .referenceBecameDocument:
            present(.changed, name, inFolder: folder, item: change.item)
        case .deleted:
            present(.deleted, name, inFolder: folder, item: change.item)
        case .uncoordinated(.name(let exists)):
            present(exists ? .changed : .deleted, name, inFolder: folder, uncoordinated: true)
        case .uncoordinated(.content):
            presentUncoordinatedContent(name, inFolder: folder)
        case .uncoordinated(.modified), .attributes, .modeChanged, .written, .versionCommitted, .rolledBack, .thumbnailsChanged,
             .container:
            break  // attributes and writes not yet closed are no news to presenters; versions are told by node
        }
    }

    /// The thumbnails' part of `change`: new content is queued for a look, a file's last name
    /// gone takes its thumbnails with it. Content another machine saved is not looked at: its
    /// thumbnail comes with it (a reader asking first has one made here).
    private func thumbnailsFollow(_ change: ChangeRecord) {
        switch change.kind {
        case .replaced, .newVersion:
            guard !RemoteApplication.isApplying else { break }
            if let (folder, name) = change.place { contentChanged(name, inFolder: folder) }
        case .written:
            if let (folder, name) = change.place {
                contentChanged(name, inFolder: folder)
            } else if let node = change.node {
                contentChanged(node, outlook: change.thumbnailOutlook)
            }
        case .deleted:
            if let node = change.node { removedLastName(of: node) }
        case .uncoordinated(.content):
            if let path = change.path { contentChanged(atBackingPath: path) }
        case .created, .createdOpen, .moved, .movedOut, .referenceBecameDocument, .attributes, .modeChanged, .versionCommitted,
             .rolledBack, .thumbnailsChanged, .uncoordinated(.name), .uncoordinated(.modified), .container:
            break  // no new content (a session's content is looked at when it is written)
        }
    }
}

extension ServedStore {
    /// The index's part of `change` (S1: stitched before the operation replies). Here rather
    /// than in a view: the index is the store's, and changes made with no view served (a
    /// thumbnail installed while the last one unmounts) still reach it.
    func stitch(_ change: ChangeRecord) {
        guard let stitcher else { return }
        let place = change.place
        switch change.kind {
        case .created, .newVersion:
            if let (folder, name) = place { stitcher.recordName(name, in: folder, item: change.item) }
        case let .moved(fromName, fromFolder, exchange):
            if let (folder, name) = place { stitcher.recordMove(fromName, in: fromFolder, to: name, in: folder, exchange: exchange) }
        case let .movedOut(_, fromName, fromFolder):
            guard let (folder, name) = place else { return }
            stitcher.removeName(fromName, in: fromFolder)
            stitcher.recordName(name, in: folder, item: change.item)
        case let .replaced(fromName, fromFolder, exchange):
            if let (folder, name) = place { stitcher.recordReplace(fromName, in: fromFolder, by: name, in: folder, exchange: exchange) }
        case .referenceBecameDocument:
            guard let (folder, name) = place else { return }
            stitcher.removeName(name, in: folder, wasReference: true)
            stitcher.recordName(name, in: folder, item: change.item)
        case .deleted(let wasReference):
            if let (folder, name) = place { stitcher.removeName(name, in: folder, wasReference: wasReference) }
        case .attributes, .rolledBack, .thumbnailsChanged:
            if let (folder, name) = place {
                stitcher.recordName(name, in: folder, item: change.item, namesChanged: false)
            } else if let node = change.node {
                stitcher.recordFile(node)
            }
        case .modeChanged:
            if let item = change.item { stitcher.sendUp(item) }
        case .uncoordinated(let what):
            guard let path = change.path else { return }
            let nameChanged = if case .name = what { true } else { false }
            stitcher.recordUncoordinated(path, nameChanged: nameChanged)
        case let .container(id, deleted):
            if deleted { stitcher.removeContainer(id) } else { stitcher.recordContainer(id, layout: store.layout) }
        case .createdOpen, .written, .versionCommitted:
            break  // the stitcher follows open writers: their closes are stitched as they happen
        }
    }

    /// A record of a change the store's shared parts made (a write session's end, a thumbnail
    /// installed): delivered through the view that knows the file's folder (presenters are told
    /// at the place it shows), or to the index alone while no view is served. No kernel caches
    /// what they change: a version number, a thumbnail (the writer's close told the kernels of
    /// the content).
    func deliver(_ change: ChangeRecord) {
        let views = servedViews()
        if let view = change.node.flatMap({ node in views.first { $0.knowsFolder(of: node) } }) ?? views.first {
            view.deliverUncached(change)
        } else {
            stitch(change)
        }
    }
}
