import CLinux
import DocfsCoordination
import DocfsCore
import DocfsIndex
import DocfsProvider
import DocfsThumbnails
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What every view of a served store shares (DESIGN §4 C7: one daemon serves a store, and a
/// second mount of it — an app view beside the user view — is served by that same daemon):
/// the one coordinator, the write sessions, item identity, the index stitcher, presenters,
/// thumbnails and the containers. Each view (`Filesystem`) keeps its own nodes (the node ids
/// one kernel mount knows); whatever concerns a file rather than a mount lives here, keyed by
/// backing inode or item id, so two views of one file share one session and one version.
///
/// Lock order: `views` is a leaf lock, held for a copy of the list only; `makersSaving` is
/// held across one save of versions/makers.json (file writes only, no other lock taken).
public final class ServedStore: Sendable {
    public let store: LocalStore
    /// Generation of every node the daemon hands out; node ids are never reused within it.
    public let generation: UInt64
    let identity: ItemIdentity
    package let sessions: WriteSessions
    package let safeSaves = SafeSaveTracker()
    package let ownChanges = OwnChanges()
    /// Changes the store watcher is to look at again (see `OwnChanges`).
    public let storeRechecks: StoreRechecks
    /// The arbiter every operation that changes an item claims it from (C1).
    public let coordinator = Coordinator()
    /// Whoever wants to hear about changes (C6).
    public let presenters = Presenters()
    /// Writes index records as operations change items (S1); nil when serving without an index.
    package let stitcher: IndexStitcher?
    /// Where items are in the store (for index records and bookmarks).
    package let paths: StorePaths
    /// The containers, and each one's documents folder by backing inode.
    package let containerFolders: ContainerFolders
    /// How paths in the user view and places in the store correspond.
    public let userView: UserView
    /// Makes thumbnails in the background; nil when the store is served without them.
    package let thumbnailer: Thumbnailer?
    /// The store's thumbnail sets: those the thumbnailer makes, and those that come with
    /// other machines' versions (installed by a `docfs remote link` with no thumbnailer too).
    package let thumbnailStore: ThumbnailStore
    /// Content of promised files, fetched as it is read (issue 23).
    public let promises: PromisedDownloads
    /// Whether documents other machines make arrive promised (`DownloadPolicy`).
    public let downloadPolicy: DownloadPolicy
    /// Checks thumbnails users set (a worker of its own, so a setxattr never waits behind
    /// the background's jobs).
    let userThumbnailWorker: ThumbnailWorkerClient?
    /// Where problems that failed no operation go (see `Filesystem.reporting`).
    package let problemSink = Callback<String>()
    /// Told, after the claims, of an item whose conflict was resolved here (`docfs versions
    /// --resolve`): a linked store sends the resolution to every machine.
    package let conflictResolved = Callback<ItemID>()
    /// The views being served, weakly (a view leaves when it is unmounted).
    private let views = Mutex<[WeakView]>([])
    /// The containers' key-value stores, opened when an app view's key files are first used.
    /// Lock order: taken alone.
    private let keyValueStores = Mutex<KeyValueDatabase?>(nil)
    /// Told after a write through an app view's key files (`.docfs/kv/`): a linked store's
    /// sync sends it.
    public let keyValuesWritten = Callback<Void>()
    /// One save of who made the current versions at a time (the periodic save and the one at
    /// the end write the same file), the newest list last.
    private let makersSaving = Mutex(())

    /// The containers' key-value stores (`STORE/kv/keyvalues.sqlite`).
    func keyValues() throws(DocfsError) -> KeyValueDatabase {
        if let open = keyValueStores.withLock({ $0 }) { return open }
        let made = try KeyValueDatabase(path: store.layout.keyValuesFile)  // opened outside the lock
        return keyValueStores.withLock { open in
            if open == nil { open = made }
            return open!
        }
    }

    private struct WeakView {
        weak var view: Filesystem?
    }

    /// Serves `store`, stitching records into `index` (the store's index, reconciled with the
    /// store) when one is given, and making thumbnails with worker processes `thumbnailWorker`
    /// starts (`docfs thumbnail-worker`) when it is given; `storeRechecks` goes to the store's
    /// watcher.
    public init(store: LocalStore, index: IndexDatabase? = nil, thumbnailWorker: [String]? = nil,
                storeRechecks: StoreRechecks = StoreRechecks()) throws(DocfsError) {
        self.store = store
        self.storeRechecks = storeRechecks
        identity = ItemIdentity(allocator: store.itemIDs, ownChanges: ownChanges)
        sessions = WriteSessions(versions: store.versions)
        // Linked: saves are pending until the remote numbers them (`VersionNumber`).
        let linked: RemoteLink?? = try? RemoteLink.load(store.layout)
        store.versions.numbersPending.store(linked??.uri != nil, ordering: .relaxed)
        sessions.restoreAuthors(VersionMakers.load(store.layout))
        downloadPolicy = try DownloadPolicy.load(from: store.layout.settingsFile)
        promises = PromisedDownloads(content: PromisedContent(directory: store.layout.promisedDirectory),
                                     use: ContentUse(file: store.layout.contentUseFile), ownChanges: ownChanges, waitLimit: downloadPolicy.waitSeconds,
                                     makesPromises: downloadPolicy.downloads == .onDemand)
        // A version kept of a promised file holds its content, downloaded first.
        store.versions.beforeKeeping.set { [promises] fd throws(DocfsError) in try promises.ensureWhole(fd) }
        // A version kept promised is fetched when it is first read.
        store.versions.beforeReading.set { [promises] fd throws(DocfsError) in try promises.ensureWhole(fd) }
        store.versions.removedPromised.set { [promises] item, number in promises.content.forget(item.rawValue, number: number) }
        paths = StorePaths(containersPath: try Self.containersPath(of: store))
        let catalog = ContainerCatalog(registry: ContainerRegistry(layout: store.layout))
        containerFolders = ContainerFolders(catalog: catalog, layout: store.layout)
        userView = UserView(layout: store.layout, catalog: catalog)
        let thumbnails = ThumbnailStore(directory: store.layout.thumbnailsDirectory)
        thumbnailStore = thumbnails
        if let index {
            stitcher = IndexStitcher(index: index, paths: paths, containers: catalog, identity: identity,
                                     thumbnails: thumbnails)
        } else {
            stitcher = nil
        }
        if let thumbnailWorker {
            try thumbnails.prepare()
            thumbnailer = Thumbnailer(store: thumbnails, worker: ThumbnailWorkerClient(command: thumbnailWorker),
                                      coordinator: coordinator)
            userThumbnailWorker = ThumbnailWorkerClient(command: thumbnailWorker)
            if let index { DetachedThread.start { Filesystem.pruneThumbnails(thumbnails, keepingItemsOf: index) } }
        } else {
            thumbnailer = nil
            userThumbnailWorker = nil
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        generation = UInt64(now.tv_sec)
        // The shared parts' changes are records like the operations' (issue 20 §4). Weakly:
        // a download or a thumbnail on a thread of its own may end after the store is closed.
        sessions.onChange { [weak self] change in self?.deliver(change) }
        thumbnailer?.onChange { [weak self] change in self?.deliver(change) }
        promises.fulfilled.set { [weak self] item in self?.contentArrived(ItemID(rawValue: item)) }
    }

    /// The download of `item` finished: its record says its content is here.
    private func contentArrived(_ item: ItemID) {
        guard let view = servedViews().first, let node = try? view.locate(item).node else { return }
        view.recordContentPlace(node)
    }

    /// The backing path of the store's containers folder, as the kernel names it (symbolic
    /// links on the way resolved), so descriptors' /proc links can be compared with it.
    private static func containersPath(of store: LocalStore) throws(DocfsError) -> String {
        let fd = try store.openDirectory(store.layout.containersDirectory)
        defer { close(fd) }
        guard let path = backingPath(of: fd) else {
            throw DocfsError(.storeUnavailable, "cannot tell where the containers directory is", cause: DocfsError.errno("readlink"))
        }
        return path
    }

    // MARK: - Views

    func viewStarted(_ view: Filesystem) {
        views.withLock { $0.append(WeakView(view: view)) }
    }

    /// `view` is done (unmounted); the last view's end finishes the shared work: what waits
    /// in the index's journal is committed, the thumbnail workers stop.
    func viewEnded(_ view: Filesystem) {
        let last = views.withLock { views -> Bool in
            guard views.contains(where: { $0.view === view }) else { return false }  // ended before
            views.removeAll { $0.view == nil || $0.view === view }
            return views.isEmpty
        }
        if last { finish() }
    }

    /// The views served now.
    public func servedViews() -> [Filesystem] {
        views.withLock { $0.compactMap(\.view) }
    }

    /// `origin` changed these names (folder, name) and files: every other view's kernel is told
    /// to forget what it knows of them, now (to those mounts the change came from outside);
    /// every view's, when no view made the change (`origin` nil: a remote change). Called
    /// after the change's claims are released: a kernel may wait for a folder lock that one of
    /// its own requests holds while waiting for a claim.
    func changed(by origin: Filesystem?, names: [(folder: BackingKey, name: FileName)] = [], files: [BackingKey] = []) {
        let others = views.withLock { views in
            origin == nil || views.count > 1 ? views.compactMap(\.view).filter { $0 !== origin } : []
        }
        for view in others {
            let invalidations = view.invalidations(names: names, files: files)
            if !invalidations.entries.isEmpty || !invalidations.inodes.isEmpty { view.invalidate(invalidations) }
        }
    }

    private func finish() {
        saveMakers()
        identity.pending.storeAll()
        thumbnailer?.stop()
        userThumbnailWorker?.shutDown()
        stitcher?.finish()
    }

    /// Where thumbnail problems are reported (a worker that crashed or ran out of time).
    public func onThumbnailProblem(_ sink: @escaping @Sendable (String) -> Void) {
        thumbnailer?.onProblem(sink)
    }

    /// Writes who made the current versions to the store, when that changed (see
    /// `VersionMakers`); the daemon calls this every few seconds.
    public func saveMakers() {
        makersSaving.withLock { _ in
            guard let entries = sessions.takeAuthorsIfChanged() else { return }
            do throws(DocfsError) {
                try VersionMakers.save(entries, to: store.layout)
            } catch {
                problemSink("could not save who made the current versions (docfs versions will not name them after a restart): \(error)")
            }
        }
    }

    /// Who made version `version` of `item` (its current content), if this daemon saw it made.
    public func author(of item: ItemID, version: UInt64) -> Author? {
        sessions.author(of: item, version: version)
    }

    /// Where failed index writes are reported (the operations themselves succeed).
    public func onIndexFailure(_ sink: @escaping @Sendable (DocfsError) -> Void) {
        stitcher?.onFailure(sink)
    }
}
