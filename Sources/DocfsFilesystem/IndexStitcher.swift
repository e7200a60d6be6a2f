import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
import DocfsSync
import DocfsThumbnails
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Stitching (DESIGN §5 S1): operations that change an item write its index record before they
/// return to the caller, so a query run the moment a close, fsync, rename, unlink, mkdir, rmdir,
/// link, symlink, setattr or setxattr returns already sees the change. Changes the store watcher
/// finds (uncoordinated writers) are recorded the same way, within its batching delay.
///
/// Each call looks at the item's backing file and stitches what it found (one append to the
/// index's journal, `IndexDatabase.stitch`), so that the records follow the order in which the
/// store changed, the newer look always winning:
/// - A change of names (create, link, unlink, rename, replace, an uncoordinated change) is
///   looked at outside `namespace` and appended under it, moving `epoch` on; a rebuild's walk
///   (folder by folder) looks and appends under it.
/// - A file's new content or attributes (a close, fsync, setattr, setxattr: the stream a busy
///   mount makes) are looked at outside it too, under the file's own lock (`files`, so two
///   writers of one file closing at once append in the order they looked).
/// - Either look is made again under `namespace` when a change of names was appended since it
///   began (`epoch` moved): every look is as new as the changes of names appended before it.
///   Operations thus wait for each other's append, not their looks (the changes of one item are
///   ordered by its claims, which are held until the stitch is done).
///   A folder's times only move forward in the index (`touch`), whichever of two creates in it
///   appends first.
///
/// A failed index write does not fail the operation (the store changed; the index is derived
/// state): it is reported (`onFailure`), and the daemon's next start reconciles the index.
///
/// Lock order: a `files` lock, then `namespace`, both taken inside coordination claims and
/// outside the index's own locks (`IndexDatabase`'s commit and journal locks, SQLite's); no
/// other docfs lock is taken while they are held.
package final class IndexStitcher: Sendable {
    package let index: IndexDatabase
    private let identity: ItemIdentity
    /// Where records are: container, scope and path.
    private let paths: StorePaths
    /// The containers' display names, which records carry.
    private let containers: ContainerCatalog
    private let thumbnails: ThumbnailStore
    private let namespace = Mutex(())
    /// Whether the store is linked to a remote: each stitched change then also puts its items
    /// in the outbox, in the same append (issue 22 §0), except changes the sync engine applies.
    package let fillsOutbox = Atomic<Bool>(false)
    /// Told after a stitch put items in the outbox (the sync loop wakes).
    package let outboxFilled = Callback<Void>()
    /// Moved on by every change of names looked at under `namespace`.
    private let epoch = Atomic<UInt64>(0)
    /// Locks for files' looks, by backing inode (striped: unrelated files rarely share one).
    private let files: [FileLock] = (0..<64).map { _ in FileLock() }

    private final class FileLock: Sendable {
        let mutex = Mutex(())
    }
    private let failureSink = Callback<DocfsError>()
    /// Handles open for writing (or made by a create), the node each writes, and for a create
    /// the folder it was made in (whose modification time the create moved): their close and
    /// fsync record the file.
    private let writers = Mutex<[UInt64: Writer]>([:])
    /// Items an open for writing is under way on (counted, as several may be): from before
    /// its write session begins (which may truncate the file or stitch the session before)
    /// until its handle is among `writers`, so the sync engine never reads the file in between
    /// and sends what the open left half done. A leaf lock, like `writers`.
    private let opening = Mutex<[ItemID: Int]>([:])

    private struct Writer {
        var node: Node
        /// The handle's descriptor can read (O_RDWR): it serves the first bytes too.
        var readable: Bool
        /// Where a create made the file, under what name (the likely place of its record).
        var createdIn: (folder: Node, name: FileName)?
        /// Whether the folder's record is yet to take the create (the first close does that).
        var folderTouched: Bool
        /// The file's state when its record was last stitched (taken before the stitch read
        /// it): a close that finds the same state has nothing new to stitch (an fsync's stitch
        /// served it).
        var stitched: FileStamp? = nil
    }

    /// What a file's record follows: content and attribute changes move mtime or ctime, and
    /// a rename or link moves ctime.
    package struct FileStamp: Equatable {
        var modified: timespec
        var changed: timespec
        var size: Int64

        package init(_ st: stat) {
            modified = st.st_mtim
            changed = st.st_ctim
            size = Int64(st.st_size)
        }

        package static func == (a: FileStamp, b: FileStamp) -> Bool {
            a.size == b.size && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
                && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
        }
    }

    init(index: IndexDatabase, paths: StorePaths, containers: ContainerCatalog, identity: ItemIdentity, thumbnails: ThumbnailStore) {
        self.index = index
        self.paths = paths
        self.containers = containers
        self.thumbnails = thumbnails
        self.identity = identity
        index.startCommitting { [weak self] error in self?.report(error) }
    }

    /// The session is over: what waits in the journal is committed, and the background commit
    /// stops.
    func finish() {
        index.stopCommitting()
    }

    private func report(_ error: DocfsError) {
        failureSink(error)
    }

    /// Where failed index writes are reported.
    func onFailure(_ sink: @escaping @Sendable (DocfsError) -> Void) {
        failureSink.set(sink)
    }

    // MARK: - Writers

    /// `handle` (the backing descriptor, open for writing; `readable` when it can read too)
    /// writes `node` (made by it as `name` in `folder`): its close records the file.
    func opened(_ handle: UInt64, writing node: Node, readable: Bool, createdAs name: FileName? = nil, in folder: Node? = nil) {
        let created = name.flatMap { name in folder.map { (folder: $0, name: name) } }
        writers.withLock { $0[handle] = Writer(node: node, readable: readable, createdIn: created, folderTouched: created == nil) }
    }

    /// An open for writing of `item` begins: it counts as written until `openEnded`.
    func willOpen(_ item: ItemID) {
        opening.withLock { $0[item, default: 0] += 1 }
    }

    /// The open `willOpen` announced is over: its handle is among the writers (`opened`) or
    /// it failed. When nothing writes the item any more, those waiting for that are told.
    func openEnded(_ item: ItemID) {
        opening.withLock { opening in
            if let count = opening[item], count > 1 { opening[item] = count - 1 } else { opening[item] = nil }
        }
        if !isWritten(item) { writerReleased(item) }
    }

    /// The close (FLUSH) or fsync of `handle`: a writer's file is recorded (and, the first
    /// time, the folder a create made it in). The file it writes, if it is a writer.
    /// Answers nil when there was nothing new to stitch: the file is as its last stitch found it.
    @discardableResult
    func closed(_ handle: UInt64) -> (node: Node, outlook: IndexRecordBuilder.ThumbnailOutlook)? {
        var st = stat()
        let now = fstat(Int32(truncatingIfNeeded: handle), &st) == 0 ? FileStamp(st) : nil
        guard let writer = writers.withLock({ writers -> Writer? in
            guard let writer = writers[handle] else { return nil }
            if let now, writer.stitched == now, writer.folderTouched { return nil }
            writers[handle]?.folderTouched = true
            writers[handle]?.stitched = now
            return writer
        }) else { return nil }
        // The handle is open until its release, which the kernel sends only after this close:
        // its descriptor reaches the file's extended attributes without a walk of /proc links.
        let outlook = recordFile(writer.node, parent: writer.folderTouched ? nil : writer.createdIn?.folder, probably: writer.createdIn,
                                 through: (Int32(truncatingIfNeeded: handle), writer.readable))
        return (writer.node, outlook)
    }

    /// The last close of `handle`.
    func released(_ handle: UInt64) {
        guard let writer = writers.withLock({ $0.removeValue(forKey: handle) }) else { return }
        writerReleased(writer.node.item)
    }

    /// Told, from the releasing thread, the item a writer's handle wrote after its last close
    /// (the sync engine sends up what it put off while the file was open).
    package let writerReleased = Callback<ItemID>()

    /// Whether a handle open for writing (not released yet) writes `item`, or an open for
    /// writing of it is under way.
    package func isWritten(_ item: ItemID) -> Bool {
        opening.withLock { $0[item] != nil } || writers.withLock { writers in writers.values.contains { $0.node.item == item } }
    }

    // MARK: - Operations

    /// The file or folder `node` changed (content, attributes, extended attributes, version):
    /// its record, at the name it was reached by, and its other names' (hard links); `parent`
    /// is a folder whose record is to be made again too. Answers what the look saw of the
    /// file's thumbnail prospects (nothing pointless, unless it saw so). `handle`: an open
    /// descriptor of the file (not O_PATH; `readable` when it can read), where the caller has one.
    @discardableResult
    func recordFile(_ node: Node, parent: Node? = nil, probably place: (folder: Node, name: FileName)? = nil,
                    through handle: (fd: Int32, readable: Bool)? = nil) -> IndexRecordBuilder.ThumbnailOutlook {
        var outlook = IndexRecordBuilder.ThumbnailOutlook()
        // A superseded file is a kept version now, out of the namespace, though it still has
        // the document's id: the document's records are not its to write.
        if node.isSuperseded { return outlook }
        stitch(file: node.key) { () -> [IndexChange] in
            outlook = IndexRecordBuilder.ThumbnailOutlook()
            // Where a create made the file: the folder's path is found once, for both records.
            let hinted = place.flatMap { place in folderState(place.folder.fd).map { (place: place, folder: $0) } }
            let folder: [IndexChange]
            if let parent, let hinted, parent === hinted.place.folder {
                folder = touch(hinted.folder)
            } else {
                folder = parent.map { folderChanges($0.fd) } ?? []
            }
            // A file still under the name a create gave it is read there: opened for reading
            // (and checked to be the same inode), one descriptor serves its attributes, its
            // first bytes and its extended attributes, without walks of /proc links.
            if let hinted, let opened = IndexRecordBuilder.openForReading(hinted.place.name, in: hinted.place.folder.fd,
                                                                          expecting: node.key) {
                defer { close(opened.fd) }
                let place = hinted.folder.place.appending(hinted.place.name.description)
                paths.remember(place, opened.st)
                var basis = IndexRecordBuilder.Basis()
                let record = builder(place).record(item: node.item, file: node.fd, path: place.path, st: opened.st,
                                                   readable: opened.fd, birth: opened.birth, outlook: &outlook, basis: &basis)
                let others = opened.st.st_nlink > 1 ? siblings(of: node, except: place, st: opened.st, like: (record, basis)) : []
                return [.put(record)] + others + folder
            }
            var st = stat()
            guard fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { return [] }
            // The stat just read serves the path's check too.
            guard let place = paths.place(of: node.fd, st) else {
                // Reached through a name since removed: its other names (if any) take the change.
                guard st.st_nlink > 0 else { return folder }
                return siblings(of: node, except: nil, st: st) + folder
            }
            guard !place.isScopeRoot else { return folder }  // a scope's root has no record
            var basis = IndexRecordBuilder.Basis()
            let record = builder(place).record(item: node.item, file: node.fd, path: place.path, st: st,
                                               readable: handle.map { $0.readable ? $0.fd : -1 } ?? -1,
                                               attributes: handle?.fd ?? -1, outlook: &outlook, basis: &basis)
            let others = st.st_nlink > 1 && !node.isDirectory ? siblings(of: node, except: place, st: st, like: (record, basis)) : []
            return [.put(record)] + others + folder
        }
        return outlook
    }

    /// `name` in the folder `directoryFD` was made or linked, or took new content or
    /// attributes: its record, and the folder's when `namesChanged` (its modification time moved).
    func recordName(_ name: FileName, in directoryFD: Int32, item: ItemID? = nil, namesChanged: Bool = true) {
        stitch { () -> [IndexChange] in
            guard let record = record(of: name, in: directoryFD, item: item) else { return [] }
            return [.put(record)] + (namesChanged ? folderChanges(directoryFD) : [])
        }
    }

    /// `name` in the folder `directoryFD` left (unlink, rmdir), with whatever was under it.
    /// `name` in the folder `directoryFD` left (unlink, rmdir), with whatever was under it;
    /// `wasReference` when it was a reference (whose record is in the external scope).
    func removeName(_ name: FileName, in directoryFD: Int32, wasReference: Bool = false) {
        stitch { () -> [IndexChange] in
            guard let place = self.place(of: name, in: directoryFD) else { return [] }
            return [.remove(wasReference ? externalLocation(place) : location(place))] + folderChanges(directoryFD)
        }
    }

    /// A rename that happened: `name` in `from` is now `newName` in `to` (its entry moves, with
    /// everything under it; whatever `newName` held is gone), or the two traded places.
    func recordMove(_ name: FileName, in from: Int32, to newName: FileName, in to: Int32, exchange: Bool) {
        stitch { () -> [IndexChange] in
            guard let old = self.place(of: name, in: from), let new = self.place(of: newName, in: to) else {
                return []
            }
            // Renaming a name to itself, or to another name of the same file, changes nothing.
            var st = stat()
            if old == new || (!exchange && fstatat(from, name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0) { return [] }
            var changes: [IndexChange]
            if exchange {
                changes = [.exchange(location(old), location(new))]
                if let record = record(of: name, in: from) { changes.append(.put(record)) }
            } else {
                changes = [.remove(location(new))]
                var moved = stat()
                if fstatat(to, newName.cString, &moved, AT_SYMLINK_NOFOLLOW) == 0, ReferenceStub.isReference(newName, in: to, moved) {
                    changes.append(.remove(externalLocation(old)))  // a reference's record is put anew below
                } else {
                    changes.append(.move(from: location(old), to: location(new)))
                    // References in a moved folder move with it.
                    if moved.st_mode & S_IFMT == S_IFDIR { changes.append(.move(from: externalLocation(old), to: externalLocation(new))) }
                }
            }
            if let record = record(of: newName, in: to) { changes.append(.put(record)) }
            // What a folder holds moved with it: into another container, its records take that
            // container's name.
            if old.container != new.container {
                changes += recordsUnder(newName, in: to)
                if exchange { changes += recordsUnder(name, in: from) }
            }
            return changes + folderChanges(from) + folderChanges(to, unless: from)
        }
    }

    /// A rename that replaced a document with new content (a safe-save): the new content's
    /// name is gone, the document's name holds it (with the document's id, in the entry the
    /// document had). For an exchange, both names hold something new.
    func recordReplace(_ name: FileName, in from: Int32, by newName: FileName, in to: Int32, exchange: Bool) {
        stitch { () -> [IndexChange] in
            var changes: [IndexChange] = []
            if exchange {
                if let record = record(of: name, in: from) { changes.append(.put(record)) }
            } else if let old = self.place(of: name, in: from) {
                changes.append(.remove(location(old)))
            }
            if let record = record(of: newName, in: to) { changes.append(.put(record)) }
            return changes + folderChanges(from) + folderChanges(to, unless: from)
        }
    }

    /// Something changed at the backing path `path` behind docfs's back (the store watcher saw
    /// it): its record is made again, or removed when nothing is there. When a name came or
    /// went (`nameChanged`), its folder's record is made again too, and a folder that appeared
    /// is recorded with everything in it.
    func recordUncoordinated(_ path: String, nameChanged: Bool) {
        stitch { () -> [IndexChange] in
            guard let place = paths.place(ofBacking: path), !place.isScopeRoot else { return [] }
            let slash = path.lastIndex(of: "/")!
            let folder = open(String(path[..<slash]), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            let gone: [IndexChange] = [.remove(location(place)), .remove(externalLocation(place))]
            guard folder >= 0 else { return gone }
            defer { close(folder) }
            let parent = nameChanged ? folderChanges(folder) : []
            let name = FileName(String(path[path.index(after: slash)...]))
            guard let record = record(of: name, in: folder) else { return gone + parent }
            // A reference written into is a document now (and a reference made in the store
            // stands where a document was): the file's record in the other scope goes. (Only a
            // file's: removing a folder's location removes everything under it.)
            var changes: [IndexChange] = []
            if record.kind != IndexRecord.folderKind {
                changes.append(.remove(record.scope == Scope.external.rawValue ? location(place) : externalLocation(place)))
            }
            changes.append(.put(record))
            if nameChanged && record.kind == IndexRecord.folderKind { changes += recordsUnder(name, in: folder) }
            return changes + parent
        }
    }

    /// Runs a walk of the store (a rebuild while it is served) folder by folder under the
    /// stitching lock.
    func serialized(_ body: () throws(DocfsError) -> Void) throws(DocfsError) {
        try namespace.withLock { _ throws(DocfsError) in
            epoch.add(1, ordering: .sequentiallyConsistent)
            try body()
        }
    }

    // MARK: - Records

    /// A change of names: looked at outside `namespace` (a look may build records, reading
    /// files), appended under it, and looked at again there if another change of names was
    /// appended meanwhile, so that every look is as new as the changes of names before it.
    private func stitch(outbox: OutboxChoice = .byRecords, _ changes: () -> [IndexChange]) {
        let seen = epoch.load(ordering: .sequentiallyConsistent)
        let found = changes()
        do throws(DocfsError) {
            try namespace.withLock { _ throws(DocfsError) in
                let current = epoch.add(1, ordering: .sequentiallyConsistent).oldValue
                try index.stitch(withOutbox(current == seen ? found : changes(), outbox).markedWithTheirMachine())
            }
        } catch {
            report(error)
        }
        if fillsOutbox.load(ordering: .relaxed), !RemoteApplication.isApplying { outboxFilled(()) }
    }

    /// `changes` and, when the store is linked (and the change is not one the sync engine
    /// applies), an outbox entry for each item they reach: the item a record is put for, the
    /// one a removal, move or exchange finds at its place (looked up before the changes apply,
    /// under `namespace`). Items without ids of their own (derived ones) stay local, but for
    /// symbolic links (the sync engine gives them one). A reference's record carries its
    /// original's id: the reference goes as itself, under the id derived from its own file (as
    /// a link's), its original only by its own changes.
    private func withOutbox(_ changes: [IndexChange], _ choice: OutboxChoice = .byRecords) -> [IndexChange] {
        guard fillsOutbox.load(ordering: .relaxed), !RemoteApplication.isApplying else { return changes }
        var items: [Int64] = []
        var noted = Set<Int64>()
        var looked = changes
        var container: ContainerID?
        switch choice {
        case .none: return changes
        case .byRecords: break
        case .also(let records, let id):
            looked = records.map { .put($0) }
            container = id
        }
        func note(_ record: IndexRecord?) {
            guard let item = record.flatMap(Self.outboxItem), noted.insert(item).inserted else { return }
            items.append(item)
        }
        for change in looked {
            switch change {
            case .put(let record): note(record)
            case .remove(let location, _), .move(from: let location, to: _): note(try? index.record(at: location))
            case .exchange(let a, let b):
                note(try? index.record(at: a))
                note(try? index.record(at: b))
            // A folder a name came into or left has a new modification time, which travels
            // (DESIGN §9.0): it goes up too, once per round however many names came.
            case .touch(let location, _, _): note(try? index.record(at: location))
            case .removeEntries, .outbox: break
            }
        }
        // A container's item after what it holds: a deletion of what it held goes up first.
        if let container { items.append(Int64(bitPattern: ContainerItems.item(of: container))) }
        return changes + items.map { .outbox(item: $0) }
    }

    /// The item that goes up when the record `record` changes: its own, a reference's the one
    /// derived from its own file; none for items without ids of their own but symbolic links
    /// (the sync engine gives them one).
    static func outboxItem(of record: IndexRecord) -> Int64? {
        guard record.id > 0 else { return nil }
        let item = record.isExternal ? Int64(bitPattern: ItemID.derived(fromBackingInode: record.backingInode).rawValue) : record.id
        guard record.isExternal || !ItemID(rawValue: UInt64(bitPattern: record.id)).isDerived || record.kind == "symlink" else { return nil }
        return item
    }

    /// `item` changed in a way its record does not show (a file's mode): on a linked store it
    /// goes up, its record as it is.
    func sendUp(_ item: ItemID) {
        guard fillsOutbox.load(ordering: .relaxed), !RemoteApplication.isApplying else { return }
        stitch(outbox: .none) { [.outbox(item: Int64(bitPattern: item.rawValue))] }  // which wakes the sync loop
    }

    /// Which items a stitch puts in the outbox (on a linked store).
    enum OutboxChoice {
        /// Those its changes reach (the usual).
        case byRecords
        /// None.
        case none
        /// A container's item and those of `records` (a container's change, whose records'
        /// changes are no change of their items).
        case also([IndexRecord], containerItem: ContainerID)
    }

    /// A file's new content or attributes: looked at under the file's lock, appended under
    /// `namespace`, looked at again there if names changed meanwhile.
    private func stitch(file key: BackingKey, _ changes: () -> [IndexChange]) {
        files[Int(truncatingIfNeeded: key.inode % 64)].mutex.withLock { _ in
            let seen = epoch.load(ordering: .sequentiallyConsistent)
            let found = changes()
            do throws(DocfsError) {
                try namespace.withLock { _ throws(DocfsError) in
                    try index.stitch(withOutbox(epoch.load(ordering: .sequentiallyConsistent) == seen ? found : changes())
                        .markedWithTheirMachine())
                }
            } catch {
                report(error)
            }
        }
        if fillsOutbox.load(ordering: .relaxed), !RemoteApplication.isApplying { outboxFilled(()) }
    }

    /// The records of the file's other names (hard links) the index knows, made again: the
    /// content is theirs too, and with a name that settles no type, so may be its type.
    /// `primary`: the record just built for the name the change came through, which the
    /// others take over (but for their places and name-decided types) instead of reading the
    /// file again for each.
    private func siblings(of node: Node, except place: StorePlace?, st: stat,
                          like primary: (record: IndexRecord, basis: IndexRecordBuilder.Basis)? = nil) -> [IndexChange] {
        // The same id and the same backing inode: a file that replaced the document in a
        // safe-save has the id too, but is another inode.
        let known = (try? index.places(id: Int64(bitPattern: node.item.rawValue))) ?? []
        var start: [UInt8]? = nil  // read once, for the first name that leaves the type open
        return known.compactMap { known -> StorePlace? in
            guard known.backingInode == UInt64(st.st_ino), let container = try? ContainerID(known.location.container),
                  let scope = Scope(rawValue: known.location.scope), scope != .external else { return nil }
            let other = StorePlace(container: container, scope: scope, path: known.location.path)
            return other == place ? nil : other
        }.map { other -> IndexChange in
            guard let primary, !primary.record.isExternal else {
                return .put(builder(other).record(item: node.item, file: node.fd, path: other.path, st: st))
            }
            return .put(builder(other).record(sibling: primary.record, basis: primary.basis, path: other.path) {
                if start == nil { start = IndexRecordBuilder.start(ofFile: node.fd) }
                return start!
            })
        }
    }

    /// The folder `fd`'s new times (a name in it came or went); none for the scope's root, or
    /// `unless` it is the same folder as that one (already recorded).
    private func folderChanges(_ fd: Int32, unless other: Int32? = nil) -> [IndexChange] {
        guard let folder = folderState(fd) else { return [] }
        if let other {
            var b = stat()
            if fstat(other, &b) == 0 && BackingKey(b) == BackingKey(folder.st) { return [] }
        }
        return touch(folder)
    }

    /// A folder's attributes and its place; nil outside every scope.
    private func folderState(_ fd: Int32) -> (st: stat, place: StorePlace)? {
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0, let place = paths.place(of: fd, st) else { return nil }
        return (st, place)
    }

    /// The change that gives a folder its new times; none for a scope's root.
    private func touch(_ folder: (st: stat, place: StorePlace)) -> [IndexChange] {
        guard !folder.place.isScopeRoot else { return [] }
        return [.touch(location(folder.place), modified: Self.seconds(folder.st.st_mtim),
                       statusChanged: Self.seconds(folder.st.st_ctim))]
    }

    private static func seconds(_ t: timespec) -> Double { Double(t.tv_sec) + Double(t.tv_nsec) / 1e9 }

    /// The record of `name` in the folder `directoryFD` as it is now; nil when it is gone or
    /// outside the scope.
    private func record(of name: FileName, in directoryFD: Int32, item: ItemID? = nil) -> IndexRecord? {
        guard let place = self.place(of: name, in: directoryFD) else { return nil }
        let fd = openat(directoryFD, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return builder(place).record(item: item ?? identity.item(of: fd, st), file: fd, path: place.path, st: st)
    }

    /// The records of everything under the folder `name` in `directoryFD` (a folder moved
    /// into the store behind docfs's back, or into another container); none for a file.
    private func recordsUnder(_ name: FileName, in directoryFD: Int32) -> [IndexChange] {
        var changes: [IndexChange] = []
        let top = openat(directoryFD, name.cString, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard top >= 0 else { return [] }
        var pending = [top]
        while let fd = pending.popLast() {
            defer { close(fd) }
            for name in IndexRebuild.names(in: fd) {
                guard let record = record(of: name, in: fd) else { continue }
                changes.append(.put(record))
                if record.kind == IndexRecord.folderKind {
                    let sub = openat(fd, name.cString, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                    if sub >= 0 { pending.append(sub) }
                }
            }
        }
        return changes
    }

    /// Container `id` was deleted: its records go. On a linked store the container's item and
    /// every item it held go up as deleted (a deletion with `--force` deletes them everywhere).
    func removeContainer(_ id: ContainerID) {
        let held: [IndexRecord]
        if fillsOutbox.load(ordering: .relaxed), !RemoteApplication.isApplying {
            let inContainer = QueryPredicate.comparison(Comparison(attribute: .container, op: .equal, value: .text(id.rawValue)))
            do {
                held = try index.records(matching: IndexQuery(predicate: inContainer))
            } catch {
                report(DocfsError(.internalFailure, "the documents of container \(id.rawValue) could not be read to send their deletions up", cause: error))
                held = []
            }
        } else {
            held = []
        }
        stitch(outbox: .also(held, containerItem: id)) {
            Scope.allCases.map { .remove(IndexLocation(container: id.rawValue, scope: $0.rawValue, path: "")) }
        }
    }

    /// Every record of container `id` made again (its display name or visibility changed, or it
    /// was made). On a linked store its item goes up; its documents do not (only their records'
    /// container name changed, which travels with the container's item).
    func recordContainer(_ id: ContainerID, layout: StoreLayout) {
        for folder in [layout.documentsDirectory(id), layout.dataDirectory(id)] {
            let slash = folder.lastIndex(of: "/")!
            let parent = open(String(folder[..<slash]), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard parent >= 0 else { continue }
            defer { close(parent) }
            stitch(outbox: .none) { recordsUnder(FileName(String(folder[folder.index(after: slash)...])), in: parent) }
        }
        stitch(outbox: .also([], containerItem: id)) { [] }
    }

    // MARK: - Places

    /// The place of `name` in the folder `directoryFD`; nil outside every scope.
    func place(of name: FileName, in directoryFD: Int32) -> StorePlace? {
        paths.place(of: directoryFD).map { $0.appending(name.description) }
    }

    /// What makes the records of items at `place`.
    private func builder(_ place: StorePlace) -> IndexRecordBuilder {
        IndexRecordBuilder(container: place.container, containerName: containers.displayName(of: place.container),
                           scope: place.scope.rawValue, thumbnails: thumbnails)
    }

    /// Where the index keeps the record of `place`.
    private func location(_ place: StorePlace) -> IndexLocation {
        IndexLocation(container: place.container.rawValue, scope: place.scope.rawValue, path: place.path)
    }

    /// Where the index keeps the record of a reference at `place` (the external scope).
    private func externalLocation(_ place: StorePlace) -> IndexLocation {
        builder(place).location(place.path, isReference: true)
    }
}

extension [IndexChange] {
    /// The records and removals of a change the sync engine applies say which machine it came from.
    fileprivate func markedWithTheirMachine() -> [IndexChange] {
        guard let machine = RemoteApplication.otherMachine else { return self }
        return map { change in
            switch change {
            case .put(var record):
                record.remoteMachine = machine
                return .put(record)
            case .remove(let location, _):
                return .remove(location, machine: machine)
            default:
                return change
            }
        }
    }
}
