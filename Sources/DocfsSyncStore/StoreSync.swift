import CLinux
import DocfsChunks
import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import DocfsSync
import DocfsThumbnails
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A served store as the sync engine's local side (issue 22 §0): its outbox, sync states and
/// anchor are the index's (`IndexDatabase+Sync`), filled by the write path in the same append
/// as each change; an item is read from its backing file (content cut into chunks for the
/// remote, the parent folder's id, its user attributes). Applying remote
/// changes (`StoreSync+Apply`) goes through the coordinator like any write.
///
/// Lock order: `manifests` and `putOff` are leaf locks.
public final class StoreSync: SyncedStore {
    public let author: RemoteAuthor
    public let shared: ServedStore
    let index: IndexDatabase
    /// Where each chunk of the items last read lies in its file, so a chunk the remote lacks
    /// is read back without cutting the whole file again (the last few items only).
    private let manifests = Mutex<[(item: UInt64, chunks: [ChunkDigest: ChunkReference])]>([])
    /// Items the engine put off because a writer had them open (`putOffWhileWritten`).
    private let putOff = Mutex<Set<UInt64>>([])

    /// Attributes that are this machine's bookkeeping, not the item's: they do not travel.
    static let localAttributes: Set<String> = [
        ItemAttributes.id, ItemAttributes.version, ItemAttributes.bookmark, ItemAttributes.thumbnail,
        ItemAttributes.container, ItemAttributes.containerID, ItemAttributes.localPath, Filesystem.conflictAttribute,
        ReferenceStub.attribute, ItemAttributes.promised, Filesystem.pinnedAttribute,
    ]

    public init(serving shared: ServedStore, author: RemoteAuthor) throws(DocfsError) {
        guard let index = shared.stitcher?.index else {
            throw DocfsError(.invalidArgument, "a store served without its index cannot be linked to a remote")
        }
        self.shared = shared
        self.index = index
        self.author = author
    }

    /// Starts (or stops) putting every local change in the outbox.
    public func fillOutbox(_ on: Bool) {
        shared.stitcher?.fillsOutbox.store(on, ordering: .relaxed)
        shared.store.versions.numbersPending.store(on, ordering: .relaxed)
        if on {
            shared.stitcher?.writerReleased.set { [weak self] item in self?.writerReleased(item) }
            shared.conflictResolved.set { [weak self] item in self?.resolvedHere(item) }
        } else {
            shared.stitcher?.writerReleased.set { _ in }
            shared.conflictResolved.set { _ in }
        }
    }

    /// Where reads of promised files fetch their content (the remote the store is linked to;
    /// nil once it is unlinked or stopped).
    public func fetchPromisedContent(from remote: (any Remote)?) {
        shared.promises.connect(remote, inStep: { [weak self] item in (try? self?.syncState(of: item))??.version })
    }

    /// Bytes of promised files fetched so far (what reading them cost).
    public var promisedBytesFetched: Int64 { shared.promises.fetchedBytes.load(ordering: .relaxed) }

    /// Calls `wake` (from the thread that made the change, so briefly) after each local change
    /// that put items in the outbox.
    public func onOutboxFilled(_ wake: @escaping @Sendable () -> Void) {
        shared.stitcher?.outboxFilled.set { _ in wake() }
    }

    /// Every item the index knows in documents and data, and every reference: what linking a
    /// store with documents to a remote sends up.
    public func allItems() throws -> [UInt64] {
        let items = try index.allItemIDs().compactMap { id -> UInt64? in
            let local = UInt64(bitPattern: id)
            guard ItemID(rawValue: local).isDerived else { return local }
            // Of the items without ids of their own, symbolic links travel (under one given now).
            guard let place = try index.places(id: id).first, try index.record(at: place.location)?.kind == "symlink" else { return nil }
            return try remoteID(ofLocal: local)
        }
        let references = try index.referenceInodes().map { try remoteID(ofLocal: ItemID.derived(fromBackingInode: $0).rawValue) }
        return containerItems() + items + references
    }

    /// The ids the store's files and folders carry (symbolic links' and containers' aside):
    /// read only, none given.
    public func ownItemIDs() throws -> [UInt64] {
        try index.allItemIDs().map { UInt64(bitPattern: $0) }.filter { !ItemID(rawValue: $0).isDerived }
    }

    // MARK: Ids of symbolic links and references

    /// The id the item `local` here has on every machine: its own, but for a symbolic link or a
    /// reference, whose id here is derived from its own inode: the one recorded for it, given
    /// now if none is.
    func remoteID(ofLocal local: UInt64) throws -> UInt64 {
        guard ItemID(rawValue: local).isDerived else { return local }
        if let remote = try index.remoteLink(local: Int64(bitPattern: local)) { return UInt64(bitPattern: remote) }
        let remote = try shared.store.itemIDs.allocate().rawValue
        try index.setLink(local: Int64(bitPattern: local), remote: Int64(bitPattern: remote))
        return remote
    }

    /// The id here of the item every machine knows as `remote`.
    func localID(ofRemote remote: UInt64) throws -> UInt64 {
        try index.localLink(remote: Int64(bitPattern: remote)).map { UInt64(bitPattern: $0) } ?? remote
    }

    public func shownPath(of item: UInt64) -> String? {
        guard let local = try? localID(ofRemote: item),
              let place = try? index.places(id: Int64(bitPattern: local)).first?.location else { return nil }
        return Self.shown(place)
    }

    /// A place as a person reads it: its path in the user's documents, else with its container
    /// and scope before it.
    static func shown(_ place: IndexLocation) -> String {
        let documents = place.container == ContainerID.userDefault.rawValue && place.scope == Scope.documents.rawValue
        return documents ? place.path : "\(place.container)/\(place.scope)\(place.path)"
    }

    /// Special files (the remote keeps no such kind) and every name of a hard-linked file but
    /// the one it travels under (`place(of:)`'s).
    public func keptHereOnly(limit: Int) throws -> (found: [KeptHereOnly], count: Int) {
        let special = try index.specialFilePlaces(limit: limit)
        var found = special.places.map { KeptHereOnly(path: Self.shown($0), reason: .specialFile) }
        let linked = try index.hardLinkedIDs(limit: limit)
        for id in linked.ids where found.count < limit {
            let travelling = try place(of: UInt64(bitPattern: id))
            for (location, _) in try index.places(id: id) where found.count < limit {
                guard let container = try? ContainerID(location.container), let scope = Scope(rawValue: location.scope),
                      scope == .documents || scope == .data,
                      StorePlace(container: container, scope: scope, path: location.path) != travelling else { continue }
                found.append(KeptHereOnly(path: Self.shown(location), reason: .hardLink))
            }
        }
        return (found, special.count + linked.extraNames)
    }

    /// Puts `items` in the outbox (linking sends the store's items up).
    public func enqueue(_ items: [UInt64]) throws {
        try index.enqueueForUpload(items.map { Int64(bitPattern: $0) })
    }

    /// Forgets the outbox, every sync state and the anchor (the store was unlinked).
    public func forget() throws { try index.forgetSync() }

    /// How many outbox entries wait (for `docfs remote status`).
    public func waiting() throws -> Int { try index.outboxCount() }

    // MARK: The outbox

    public func pendingChanges(limit: Int) throws -> [OutboxEntry] {
        try index.outbox(limit: limit).map { OutboxEntry(sequence: UInt64($0.position), item: try remoteID(ofLocal: UInt64(bitPattern: $0.item))) }
    }

    public func requeue(_ item: UInt64) throws {
        try index.enqueueForUpload([Int64(bitPattern: try localID(ofRemote: item))])
    }

    public func acknowledge(_ entry: OutboxEntry) throws {
        try index.acknowledgeOutbox(Int64(entry.sequence))
    }

    // MARK: Items as they are here

    /// Where `item` is in the store: its first name in a container's documents or data.
    /// The index may hold more than one record for an item (a stale one a rename left for a
    /// moment, hard links): the place whose file is the item is taken, else the first.
    func place(of item: UInt64) throws -> StorePlace? {
        let local = try localID(ofRemote: item)
        if ItemID(rawValue: local).isDerived, let reference = try referencePlace(local) { return reference }
        var first: StorePlace?
        for (location, _) in try index.places(id: Int64(bitPattern: local)) {
            guard let container = try? ContainerID(location.container), let scope = Scope(rawValue: location.scope),
                  scope != .external else { continue }
            let place = StorePlace(container: container, scope: scope, path: location.path)
            if first == nil { first = place }
            guard !place.isScopeRoot else { continue }
            let fd = shared.paths.openPlace(place)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { continue }
            let found = st.st_mode & S_IFMT == S_IFLNK ? ItemID.derived(fromBackingInode: UInt64(st.st_ino))
                : ItemAttributes.id(ofDescriptor: fd)
            if found?.rawValue == local { return place }
        }
        return first
    }

    /// Where the reference whose own file's derived id is `local` is (its record, in the
    /// external scope, carries its original's id), when that file is there.
    private func referencePlace(_ local: UInt64) throws -> StorePlace? {
        let inode = local & (ItemID.derivedBase - 1)
        for record in try index.referenceRecords(backingInode: inode) {
            guard let place = Filesystem.ownPlace(ofReference: record) else { continue }
            let fd = shared.paths.openPlace(place)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var st = stat()
            if fstat(fd, &st) == 0, ItemID.derived(fromBackingInode: UInt64(st.st_ino)).rawValue == local { return place }
        }
        return nil
    }

    public func isGone(_ item: UInt64) throws -> Bool {
        if Self.isContainerItem(item) { return container(ofItem: item) == nil }
        return try place(of: item) == nil && !mayBeUnrecorded(item)
    }

    /// Whether the index may lack a record of `item` for a moment though it is not gone: a
    /// safe-save's new file is taking it over, or a writer has it open (a created file is
    /// recorded at its first close).
    private func mayBeUnrecorded(_ item: UInt64) -> Bool {
        guard let local = try? localID(ofRemote: item) else { return false }
        return shared.safeSaves.isTakingOver(ItemID(rawValue: local)) || shared.stitcher?.isWritten(ItemID(rawValue: local)) == true
    }

    public func current(_ item: UInt64) throws -> LocalItem? { try read(item, cut: nil) }

    /// `current` without reading the content: a file's size is its length (a promised one's,
    /// what it stands for), its manifest empty.
    public func observed(_ item: UInt64) throws -> LocalItem? { try read(item, cut: nil, content: false) }

    public func current(_ item: UInt64, cut: (_ batch: ChunkBatch) throws -> Void) throws -> LocalItem? {
        try withoutActuallyEscaping(cut) { cut in try read(item, cut: cut) }
    }

    /// The item as it is here; its content's chunks handed to `cut` as they are cut, if given.
    private func read(_ item: UInt64, cut: ((_ batch: ChunkBatch) throws -> Void)?, content: Bool = true) throws -> LocalItem? {
        if Self.isContainerItem(item) { return currentContainer(item) }
        guard let place = try place(of: item), !place.isScopeRoot else {
            // Between a safe-save's new file taking the document over and its record: not gone.
            if mayBeUnrecorded(item) { throw LocalItemUnsettled(item: item) }
            return nil
        }
        let fd = shared.paths.openPlace(place)
        // The index has the item there, the store has nothing: a rename or removal the index
        // has not caught up with. Not "gone" (a tombstone would delete it everywhere).
        guard fd >= 0 else { throw LocalItemUnsettled(item: item) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        let kind: RemoteItemKind
        switch st.st_mode & S_IFMT {
        case S_IFREG: kind = ReferenceStub.target(ofDescriptor: fd, st) == nil ? .file : .reference
        case S_IFDIR: kind = .folder
        case S_IFLNK: kind = .symlink
        default: return nil
        }
        // The index may be a moment behind a rename: another file there is not the item.
        if kind == .symlink || kind == .reference {
            guard ItemID.derived(fromBackingInode: UInt64(st.st_ino)).rawValue == (try localID(ofRemote: item)) else {
                throw LocalItemUnsettled(item: item)
            }
        } else if ItemAttributes.id(ofDescriptor: fd)?.rawValue != item {
            throw LocalItemUnsettled(item: item)
        }
        let slash = place.path.lastIndex(of: "/")!
        let parentPlace = StorePlace(container: place.container, scope: place.scope, path: String(place.path[..<slash]))
        var parent: UInt64 = 0
        if !parentPlace.isScopeRoot {
            let folder = shared.paths.openPlace(parentPlace)
            if folder >= 0 {
                parent = ItemAttributes.id(ofDescriptor: folder)?.rawValue ?? 0
                close(folder)
            }
        }
        var manifest: [ChunkDigest] = []
        var lengths: [Int64]?
        var size: Int64 = 0
        var number: UInt64?
        switch kind {
        case .file:
            // Read before the content; a save that numbers itself meanwhile changes the stamp.
            // A file with no number yet (made behind docfs's back) counts as version 1.
            number = max(ItemAttributes.version(ofDescriptor: fd), 1)
            if let promise = try promise(of: item, file: fd) {
                // Promised: its content is the remote's, whose chunks it holds already.
                (manifest, size, lengths) = (promise.manifest.compactMap { ChunkDigest(hex: $0) }, promise.size, promise.lengths)
            } else if !content {
                size = Int64(st.st_size)
            } else {
                (manifest, size, lengths) = try chunks(ofFileAt: fd, item: item, length: Int64(st.st_size), cut: cut)
            }
            // Read to go up: a writer that opened it meanwhile (an O_TRUNC open empties it
            // first) or any change during the read, and what was read is no state the file
            // was in. (The apply path's reads compare under the item's claim instead.)
            var after = stat()
            if cut != nil, fstat(fd, &after) != 0 || IndexStitcher.FileStamp(after) != IndexStitcher.FileStamp(st)
                || shared.stitcher?.isWritten(ItemID(rawValue: item)) == true {
                throw LocalItemBeingWritten(item: item)
            }
        case .symlink, .reference:
            let target = try Self.inlineContent(fd, st)
            guard content else {
                size = Int64(target.count)
                break
            }
            manifest = target.isEmpty ? [] : [target.withUnsafeBytes { ChunkDigest(of: $0) }]
            size = Int64(target.count)
            remember(item, [:], inline: target)
        case .folder, .container:
            break
        }
        var read = LocalItem(item: item, container: place.container.rawValue, scope: place.scope.rawValue, parent: parent,
                             name: String(place.path[place.path.index(after: slash)...]), kind: kind, manifest: manifest,
                             size: size, mode: UInt32(st.st_mode & 0o7777), modified: WriteSessions.seconds(st.st_mtim),
                             attributes: kind == .symlink || kind == .reference ? [:] : Self.userAttributes(fd), number: number)
        read.lengths = lengths
        return read
    }

    /// What the promised file `fd` stands for; nil when its content is here. A promised file
    /// whose record is gone is never read as content (its bytes are not): an error.
    /// One whose length is not the promise's was written behind the mount (while no daemon
    /// watched): what it holds is its content, no longer promised.
    private func promise(of item: UInt64, file fd: Int32) throws -> Promise? {
        guard shared.promises.isActive, let number = PromisedContent.promisedNumber(fd) else { return nil }
        guard let promise = try shared.promises.content.record(of: item, number: number) else {
            throw StoreSyncError("item \(item) is promised but the record of what it stands for is missing: it is not sent up")
        }
        var st = stat()
        if fstat(fd, &st) == 0, Int64(st.st_size) != promise.size {
            shared.promises.content.fulfilled(item, number: number, file: fd)
            return nil
        }
        return promise
    }

    public func thumbnailSet(of item: UInt64) -> [UInt8]? {
        guard let thumbnails = shared.thumbnailer?.store, let stamp = contentStamp(of: item) else { return nil }
        return thumbnails.portableSet(of: ItemID(rawValue: item), stamp: stamp)
    }

    /// The stamp of the item's content here (what its thumbnail set is made from).
    func contentStamp(of item: UInt64) -> ContentStamp? {
        guard let place = try? place(of: item) else { return nil }
        let fd = shared.paths.openPlace(place)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return nil }
        return ContentStamp(st, version: ItemAttributes.version(ofDescriptor: fd))
    }

    public func describeContainer(_ container: String) -> (name: String, isPublic: Bool)? {
        guard let id = try? ContainerID(container), id != .userDefault,
              let record = try? shared.containerFolders.catalog.registry.record(of: id) else { return nil }
        return (record.name, record.isPublic)
    }

    public func versionNumber(of item: UInt64) -> UInt64 {
        guard let place = try? place(of: item) else { return 0 }
        let fd = shared.paths.openPlace(place)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        return ItemAttributes.version(ofDescriptor: fd)
    }

    /// Under the item's write claim, and with its write session held still
    /// (`WriteSessions.takeNumber`), so no save here numbers itself meanwhile. An item gone here
    /// (saves made before its deletion go up before its tombstone) has only kept versions.
    public func takeNumber(_ item: UInt64, key: UInt64, given: UInt64) throws {
        let id = ItemID(rawValue: item)
        guard let view = shared.servedViews().first, let place = try place(of: item) else {
            try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) in
                _ = try shared.store.versions.takeNumber(id, key: key, number: given)
            }
            return
        }
        let document = try Located(place: place, paths: shared.paths)
        defer { document.close() }
        try view.coordinator.withClaims([(id, .write)]) { () throws(DocfsError) in
            let fd = openat(document.folder, document.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw DocfsError.errno("opening item \(item) to number its version") }
            defer { close(fd) }
            guard ItemAttributes.id(ofDescriptor: fd) == id else {
                _ = try shared.store.versions.takeNumber(id, key: key, number: given)
                return
            }
            guard let number = try shared.sessions.takeNumber(id, file: fd, key: key, given: given) else { return }
            shared.ownChanges.changedFile(at: fd)
            RemoteApplication.$machine.withValue(RemoteApplication.ownBookkeeping) {
                var change = ChangeRecord.name(.attributes, document.name, inFolder: document.folder, item: id)
                change.version = number
                view.deliverUncached(change)  // a version number: no kernel caches it
            }
        }
    }

    public func becameConflict(_ item: UInt64, key: UInt64, given: UInt64) throws -> Bool {
        let id = ItemID(rawValue: item)
        let versions = shared.store.versions
        guard versions.record(of: id, version: key)?.kind == .previous, let place = try place(of: item) else { return false }
        // Kept already from the log: the save is that version, and goes.
        let keptAlready = versions.isTaken(id, given)
        guard !keptAlready || versions.record(of: id, version: given)?.kind == .conflict else { return false }
        let document = try Located(place: place, paths: shared.paths)
        defer { document.close() }
        return try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) -> Bool in
            let fd = openat(document.folder, document.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0, ItemAttributes.id(ofDescriptor: fd) == id else {
                if fd >= 0 { close(fd) }
                return false
            }
            defer { close(fd) }
            if keptAlready {
                try versions.removeRepeated(id, version: key, current: "/proc/self/fd/\(fd)")
                return true
            }
            guard try versions.becomeConflict(id, version: key, current: "/proc/self/fd/\(fd)"),
                  try versions.takeNumber(id, key: key, number: given) else { return false }
            try flagConflict(on: fd, of: id, named: document, by: author.machine)
            return true
        }
    }

    /// Marks the item put off first, then looks for a writer, while a release removes its
    /// writer first, then looks for the mark: whichever comes second sees the other, so an
    /// item put off is always queued again.
    public func putOffWhileWritten(_ item: UInt64) -> Bool {
        guard let stitcher = shared.stitcher else { return false }
        putOff.withLock { _ = $0.insert(item) }
        if stitcher.isWritten(ItemID(rawValue: item)) { return true }
        putOff.withLock { _ = $0.remove(item) }
        return false
    }

    /// The conflict of `item` was resolved here: its sync state says so, and it goes up.
    private func resolvedHere(_ item: ItemID) {
        do {
            guard var state = try syncState(of: item.rawValue) else { return }  // never went up: nothing to tell
            state.resolvedHere = true
            try setSyncState(state, of: item.rawValue)
            try enqueue([item.rawValue])
            shared.stitcher?.outboxFilled(())
        } catch {
            shared.problemSink("sync: the resolution of item \(item)'s conflict could not be queued to go up (\(error)); resolve it again")
        }
    }

    /// A writer let go of `item`: if the engine put it off, it goes in the outbox again.
    private func writerReleased(_ item: ItemID) {
        guard let stitcher = shared.stitcher, !stitcher.isWritten(item),
              putOff.withLock({ $0.remove(item.rawValue) }) != nil else { return }
        do {
            try enqueue([item.rawValue])
            stitcher.outboxFilled(())
        } catch {
            shared.problemSink("sync: item \(item) could not be queued to go up after its writer closed (\(error)); its next save sends it")
        }
    }

    public func chunk(_ digest: ChunkDigest, of item: UInt64) throws -> [UInt8] {
        guard let reference = manifests.withLock({ $0.last(where: { $0.item == item })?.chunks[digest] }) else {
            throw StoreSyncError("item \(item) changed since it was read (chunk \(digest) is no longer in it)")
        }
        if reference.offset < 0 { return try inlineContent(of: item, digest: digest) }
        guard let place = try place(of: item) else { throw StoreSyncError("item \(item) is gone") }
        let path = shared.paths.openPlace(place)
        guard path >= 0 else { throw StoreSyncError("item \(item) is gone") }
        defer { close(path) }
        let fd = open("/proc/self/fd/\(path)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreSyncError("cannot read item \(item): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: Int(reference.length))
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, $0.count - done, off_t(reference.offset) + off_t(done)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw StoreSyncError("item \(item) changed since it was read (it is shorter)") }
            done += n
        }
        guard bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else {
            throw StoreSyncError("item \(item) changed since it was read (chunk \(digest) differs)")
        }
        return bytes
    }

    public func item(named name: String, in parent: UInt64, container: String, scope: String) throws -> UInt64? {
        guard let containerID = try? ContainerID(container), let scopeValue = Scope(rawValue: scope) else { return nil }
        let folder: StorePlace
        if parent == 0 {
            folder = StorePlace(container: containerID, scope: scopeValue, path: "")
        } else {
            guard let place = try place(of: parent) else { return nil }
            folder = place
        }
        let path = folder.path + "/" + name
        if let record = try index.record(at: IndexLocation(container: container, scope: scope, path: path)) {
            return try remoteID(ofLocal: UInt64(bitPattern: record.id))
        }
        // A reference there: its record is in the external scope.
        let external = IndexLocation(container: container, scope: Scope.external.rawValue, path: Filesystem.localPath(
            StorePlace(container: containerID, scope: scopeValue, path: path)))
        return try index.record(at: external).map { try remoteID(ofLocal: ItemID.derived(fromBackingInode: $0.backingInode).rawValue) }
    }

    // MARK: Sync states and the anchor

    public func syncState(of item: UInt64) throws -> ItemSyncState? {
        guard let bytes = try index.syncState(of: Int64(bitPattern: item)) else { return nil }
        return try JSONDecoder().decode(ItemSyncState.self, from: Data(bytes))
    }

    public func syncedItems() throws -> [UInt64] {
        try index.syncedItems().map { UInt64(bitPattern: $0) }
    }

    public func setSyncState(_ state: ItemSyncState?, of item: UInt64) throws {
        let place = state.flatMap { $0.version.deleted ? nil : Self.placeKey($0.version.container, $0.version.scope, $0.version.parent, $0.version.name) }
        try index.setSyncState(try state.map { Array(try JSONEncoder().encode($0)) }, of: Int64(bitPattern: item), place: place)
    }

    public func itemInStep(named name: String, in parent: UInt64, container: String, scope: String, other item: UInt64) throws -> UInt64? {
        try index.syncedItem(at: Self.placeKey(container, scope, parent, name), except: Int64(bitPattern: item)).map { UInt64(bitPattern: $0) }
    }

    static func placeKey(_ container: String, _ scope: String, _ parent: UInt64, _ name: String) -> String {
        "\(container)/\(scope)/\(parent)/\(name)"
    }

    public func anchor() throws -> RemoteAnchor {
        RemoteAnchor(sequence: UInt64(bitPattern: try index.syncAnchor()))
    }

    public func setAnchor(_ anchor: RemoteAnchor) throws {
        try index.setSyncAnchor(Int64(bitPattern: anchor.sequence))
    }

    public func fetchAgingPromisedVersions(keptBefore cutoff: Double) -> (fetched: Int, problems: [String]) {
        shared.store.versions.fetchAgingPromised(keptBefore: cutoff)
    }

    // MARK: Parked changes

    public func park(_ change: RemoteChange, problem: String) throws {
        try index.parkSyncChange(Int64(bitPattern: change.sequence), change: Array(try JSONEncoder().encode(change)), problem: problem)
    }

    public func parkedChanges() throws -> [(change: RemoteChange, problem: String)] {
        try index.parkedSyncChanges(limit: 1000).compactMap { row in
            guard let change = try? JSONDecoder().decode(RemoteChange.self, from: Data(row.change)) else { return nil }
            return (change, row.problem)
        }
    }

    public func unpark(_ change: RemoteChange) throws {
        try index.unparkSyncChange(Int64(bitPattern: change.sequence))
    }

    /// How many changes are parked, and why the oldest is (for `docfs remote status`).
    public func parkedSummary() -> (count: Int, problem: String?) {
        let count = (try? index.parkedSyncCount()) ?? 0
        return (count, count == 0 ? nil : (try? index.parkedSyncChanges(limit: 1))?.first?.problem)
    }

    // MARK: Reading

    /// How content is cut for the remote: finer than the version store's cut (256 KiB / 1 MiB /
    /// 4 MiB), so an edit of 1 MiB in a large file sends about 1 MiB (issue 22 §7), at the
    /// price of a longer manifest (64 hex digits per 64 KiB: 1 MB for a 1 GiB file).
    static let uploadChunker = ContentChunker(minimumSize: 16 << 10, averageSize: 64 << 10, maximumSize: 256 << 10)

    /// The file's content as chunks (`uploadChunker`'s cut points), remembered for `chunk`
    /// (unless it is not the item's file: `remembering` false), and handed to `cut` (if given)
    /// with their bytes in batches as they are cut.
    func chunks(ofFileAt path: Int32, item: UInt64, length: Int64, remembering: Bool = true,
                cut: ((_ batch: ChunkBatch) throws -> Void)?) throws -> ([ChunkDigest], Int64, [Int64]) {
        let fd = open("/proc/self/fd/\(path)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreSyncError("cannot read item \(item): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var manifest: [ChunkDigest] = []
        var lengths: [Int64] = []
        var references: [ChunkDigest: ChunkReference] = [:]
        var size: Int64 = 0
        var batch = ChunkBatch()
        // What `cut` threw: the cutting stops, and it is what this call throws.
        var cutFailure: (any Error)?
        do {
            try Self.uploadChunker.forEachChunk(of: fd, length: length) { offset, bytes throws(ChunkError) in
                let digest = ChunkDigest(of: bytes)
                manifest.append(digest)
                lengths.append(Int64(bytes.count))
                references[digest] = ChunkReference(offset: offset, length: Int64(bytes.count), digest: digest)
                size = offset + Int64(bytes.count)
                guard let cut else { return }
                batch.append(digest, Array(bytes))
                guard batch.isFull else { return }
                do {
                    try cut(batch)
                } catch {
                    cutFailure = error
                    throw ChunkError("stopped: \(error)")
                }
                batch = ChunkBatch()
            }
            if let cut, !batch.chunks.isEmpty { try cut(batch) }
        } catch {
            if let cutFailure { throw cutFailure }
            if error is ChunkError { throw StoreSyncError("cannot read item \(item): \(error)") }
            throw error
        }
        if remembering { remember(item, references) }
        return (manifest, size, lengths)
    }

    /// `inline`: the content of a link or reference (its target), read again by `inlineContent`.
    private func remember(_ item: UInt64, _ references: [ChunkDigest: ChunkReference], inline: [UInt8]? = nil) {
        var references = references
        if let inline, !inline.isEmpty {
            let digest = inline.withUnsafeBytes { ChunkDigest(of: $0) }
            references[digest] = ChunkReference(offset: -1, length: Int64(inline.count), digest: digest)
        }
        manifests.withLock { manifests in
            manifests.removeAll { $0.item == item }
            manifests.append((item, references))
            if manifests.count > 16 { manifests.removeFirst() }
        }
    }

    /// The one chunk of a link (its target) or a reference (its original's id), read again.
    private func inlineContent(of item: UInt64, digest: ChunkDigest) throws -> [UInt8] {
        guard let place = try place(of: item) else { throw StoreSyncError("item \(item) is gone") }
        let fd = shared.paths.openPlace(place)
        guard fd >= 0 else { throw StoreSyncError("item \(item) is gone") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw StoreSyncError("item \(item) is gone") }
        let target = try Self.inlineContent(fd, st)
        guard target.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else {
            throw StoreSyncError("the link or reference \(item) changed since it was read")
        }
        return target
    }

    /// The one chunk of the link or reference `fd` (whose attributes are `st`): a link's
    /// target, a reference's original's id as text.
    static func inlineContent(_ fd: Int32, _ st: stat) throws -> [UInt8] {
        try ReferenceStub.target(ofDescriptor: fd, st).map { Array($0.description.utf8) } ?? linkTarget(fd)
    }

    static func linkTarget(_ fd: Int32) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = buffer.withUnsafeMutableBufferPointer { readlinkat(fd, "", $0.baseAddress!, $0.count) }
        guard n >= 0 else { throw StoreSyncError("cannot read a link: \(String(cString: strerror(errno)))") }
        return Array(buffer[0..<n])
    }

    /// The `user.*` attributes that travel (tags, comments, an app's own), name to value.
    static func userAttributes(_ fd: Int32) -> [String: [UInt8]] {
        var attributes: [String: [UInt8]] = [:]
        for name in ExtendedAttributeCopy.userNames(of: fd) where !localAttributes.contains(name) {
            var value = [UInt8](repeating: 0, count: 64 << 10)
            let size = value.withUnsafeMutableBytes { docfs_fd_getxattr(fd, name, $0.baseAddress!, $0.count) }
            if size >= 0 { attributes[name] = Array(value[0..<size]) }
        }
        return attributes
    }
}

/// Why the store could not give the sync engine what it asked for, in words.
struct StoreSyncError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
