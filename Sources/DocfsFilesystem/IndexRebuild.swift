import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
import DocfsThumbnails
#if canImport(Glibc)
import Glibc
#endif

/// Makes the index agree with the store (DESIGN §5 S4) by walking every container's documents
/// and data scopes: a *rebuild* writes every record again; a *reconcile* (the daemon's start)
/// writes only the records whose fingerprint (inode, size, times, kind, id) no longer matches
/// the store. Either way records of names no longer there are removed, and items without an id
/// (made behind docfs's back, or whose id a killed daemon had not stored yet) get one: the id
/// their record shows when there is one, else a new one, as a lookup would give. A *check*
/// changes nothing: it lists every difference between the index and the store.
///
/// The walk holds one folder in memory at a time, and the index's fingerprints take 32 bytes an
/// entry, so a store of a million items is walked in well under 100 MB.
public enum IndexRebuild {
    public enum Mode: Sendable {
        case rebuild, reconcile, check
    }

    /// A difference `check` found.
    public struct Difference: Sendable, CustomStringConvertible {
        public enum Kind: Sendable, Equatable {
            /// The store has the name; the index has no record of it.
            case missing
            /// The index has a record of a name the store does not have.
            case stale
            /// Both have it; these attributes differ.
            case differs([IndexAttribute])
        }

        public var location: IndexLocation
        public var kind: Kind
        /// What the index says and what the store has, attribute by attribute.
        public var detail: String

        public var description: String {
            let place = location.container == ContainerID.userDefault.rawValue && location.scope == "documents"
                ? location.path : "\(location.container) (\(location.scope)) \(location.path)"
            switch kind {
            case .missing: return "missing from the index: \(place)"
            case .stale: return "in the index but not in the store: \(place)"
            case .differs: return "differs: \(place): \(detail)"
            }
        }
    }

    /// How a check finds an item's id without giving one: the id stored on it, or one the
    /// daemon gave it and has not stored yet.
    public typealias IDLookup = @Sendable (_ fd: Int32, _ st: stat) -> ItemID?

    public struct Summary: Sendable {
        /// Names found in the store.
        public var items = 0
        /// Records written (all of them for a rebuild; for a reconcile, those that changed).
        public var written = 0
        public var removed = 0
        /// Items that had no id and were given one.
        public var identified = 0
        /// Copies that carried another file's id and were given their own.
        public var separated = 0
        /// Files of a linked store written while no daemon served it, numbered as new saves.
        public var renumbered = 0

        /// What the walk did about copies, for its report ("" when there were none).
        public var separatedReport: String {
            switch separated {
            case 0: ""
            case 1: ", 1 copy given an id of its own"
            default: ", \(separated) copies given ids of their own"
            }
        }
        /// What a check found.
        public var differences: [Difference] = []
    }

    /// Runs the walk. `serialized` wraps the look at each folder and the write of its records
    /// (the daemon passes its stitching lock, so a record the walk writes is never older than
    /// one an operation wrote). `progress(done, total)` is called about 100 times (a rebuild
    /// counts the names first; a reconcile calls it not at all).
    public static func run(store: LocalStore, index: IndexDatabase, mode: Mode = .rebuild,
                           serialized: (() throws(DocfsError) -> Void) throws(DocfsError) -> Void = { body throws(DocfsError) in try body() },
                           pendingIDs: IDLookup? = nil, separatingCopies: Bool = false,
                           progress: ((Int, Int) -> Void)? = nil) throws(DocfsError) -> Summary {
        var walk = Walk(store: store, index: index, mode: mode, fingerprints: try index.fingerprints())
        // What changed while no daemon served a linked store goes up like any change (issue 49
        // §2: an edit made in the store folder while the daemon was stopped).
        walk.fillsOutbox = mode == .reconcile && (try? RemoteLink.load(store.layout)) != nil
        walk.pendingIDs = pendingIDs
        walk.total = progress == nil ? 0 : countNames(store.layout)
        walk.progress = progress
        let catalog = ContainerCatalog(registry: ContainerRegistry(layout: store.layout))
        for container in try containers(of: store.layout) {
            for (scope, root) in [("documents", store.layout.documentsDirectory(container)), ("data", store.layout.dataDirectory(container))] {
                let builder = IndexRecordBuilder(container: container, containerName: catalog.displayName(of: container), scope: scope,
                                                 thumbnails: ThumbnailStore(directory: store.layout.thumbnailsDirectory))
                var pending = [(root, "")]
                while let (directory, relative) = pending.popLast() {
                    var subfolders: [(String, String)] = []
                    try serialized { () throws(DocfsError) in
                        subfolders = try walk.visit(directory, relative: relative, builder: builder)
                    }
                    pending.append(contentsOf: subfolders.reversed())
                }
            }
        }
        try serialized { () throws(DocfsError) in
            let gone = walk.fingerprints.unseenEntries
            if mode == .check {
                for record in try index.records(entries: gone) {
                    walk.summary.differences.append(Difference(location: record.location, kind: .stale, detail: ""))
                }
            } else {
                // Only what is surely gone goes up as gone: a folder the walk could not open
                // (permissions, no descriptor left) leaves its records unseen, not removed.
                let goneItems = walk.fillsOutbox
                    ? try index.records(entries: gone).filter { Self.isSurelyGone($0, in: store.layout) }.compactMap(IndexStitcher.outboxItem) : []
                try index.apply([.removeEntries(gone)] + goneItems.map { .outbox(item: $0) }, built: true)
                walk.summary.removed = gone.count
            }
        }
        if separatingCopies && mode != .check {
            walk.summary.separated = try separateCopies(store: store, index: index, catalog: catalog)
        }
        progress?(walk.total, walk.total)
        return walk.summary
    }

    /// Whether nothing is at `record`'s place in the store (its folder is there and says so),
    /// rather than the place could not be looked at.
    static func isSurelyGone(_ record: IndexRecord, in layout: StoreLayout) -> Bool {
        guard let container = try? ContainerID(record.container), let scope = Scope(rawValue: record.scope),
              scope == .documents || scope == .data else { return false }
        let backing = layout.containersDirectory + "/" + StorePaths.relativeBacking(StorePlace(container: container, scope: scope, path: record.path))
        var st = stat()
        return lstat(FileName(backing).cString, &st) != 0 && errno == ENOENT
    }

    /// Gives copies made while no daemon watched the store (see Filesystem+Copies) ids of their
    /// own: of the files that carry one id, the one born first keeps it (a copy is younger than
    /// what it copies), and the others get new ids, their records with them. Only while no
    /// operation runs (the walk at a daemon's start, or a rebuild without a daemon): a replace
    /// in progress carries its document's id on the new content too. Answers how many files.
    private static func separateCopies(store: LocalStore, index: IndexDatabase, catalog: ContainerCatalog) throws(DocfsError) -> Int {
        var separated = 0
        for shared in try index.sharedIDs() {
            let id = ItemID(rawValue: UInt64(bitPattern: shared))
            let holders = Dictionary(grouping: try index.records(id: shared).filter { $0.scope != Scope.external.rawValue }, by: \.backingInode)
            let byAge = holders.values.sorted { ($0.map(\.created).min() ?? 0, $0[0].entry) < ($1.map(\.created).min() ?? 0, $1[0].entry) }
            for names in byAge.dropFirst() {
                var changes: [IndexChange] = []
                var fresh: ItemID? = nil
                for record in names {
                    guard let container = try? ContainerID(record.container), let scope = Scope(rawValue: record.scope),
                          let slash = record.path.lastIndex(of: "/") else { continue }
                    let scopeFolder = scope == .data ? store.layout.dataDirectory(container) : store.layout.documentsDirectory(container)
                    let folder = open(scopeFolder + record.path[..<slash], O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                    guard folder >= 0 else { continue }
                    defer { close(folder) }
                    let name = FileName(String(record.path[record.path.index(after: slash)...]))
                    let fd = openat(folder, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
                    guard fd >= 0 else { continue }
                    defer { close(fd) }
                    var st = stat()
                    guard fstat(fd, &st) == 0, UInt64(st.st_ino) == record.backingInode, ItemAttributes.id(ofDescriptor: fd) == id
                            || fresh != nil else { continue }
                    if fresh == nil {
                        fresh = try ItemAttributes.setID(try store.itemIDs.allocate(), onDescriptor: fd)
                        _ = docfs_removexattr("/proc/self/fd/\(fd)", ReferenceStub.attribute)
                        _ = fstat(fd, &st)
                        separated += 1
                    }
                    let builder = IndexRecordBuilder(container: container, containerName: catalog.displayName(of: container), scope: scope.rawValue,
                                                     thumbnails: ThumbnailStore(directory: store.layout.thumbnailsDirectory))
                    changes.append(.put(builder.record(item: fresh!, directoryFD: folder, name: name, path: record.path, st: st)))
                }
                try index.apply(changes)
            }
        }
        return separated
    }

    /// The walk's state as it goes from folder to folder.
    private struct Walk {
        let store: LocalStore
        let index: IndexDatabase
        let mode: Mode
        var fingerprints: IndexFingerprints
        var summary = Summary()
        var total = 0
        var progress: ((Int, Int) -> Void)?
        var pendingIDs: IDLookup?
        /// Whether each record written goes up too (a reconcile of a linked store).
        var fillsOutbox = false
        private var reported = 0

        init(store: LocalStore, index: IndexDatabase, mode: Mode, fingerprints: IndexFingerprints) {
            self.store = store
            self.index = index
            self.mode = mode
            self.fingerprints = fingerprints
        }

        /// Records the names in `directory` (at `relative` in its scope); answers its subfolders.
        mutating func visit(_ directory: String, relative: String, builder: IndexRecordBuilder) throws(DocfsError) -> [(String, String)] {
            let fd = open(FileName(directory).cString, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { return [] }  // gone meanwhile
            defer { close(fd) }
            var changes: [IndexChange] = []
            var subfolders: [(String, String)] = []
            for name in IndexRebuild.names(in: fd) {
                var st = stat()
                guard fstatat(fd, name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }  // gone meanwhile
                summary.items += 1
                let path = relative + "/" + name.description
                let location = builder.location(path, isReference: ReferenceStub.isReference(name, in: fd, st))
                let indexed = fingerprints.take(location)
                if st.st_mode & S_IFMT == S_IFDIR { subfolders.append((directory + "/" + name.description, path)) }
                if mode == .check {
                    try compare(name, in: fd, st, path: path, location: location, indexed: indexed != nil, builder: builder)
                    continue
                }
                let (id, assigned) = IndexRebuild.identity(of: name, in: fd, &st, indexed: indexed, allocator: store.itemIDs)
                if assigned { summary.identified += 1 }
                var record = builder.record(item: id, directoryFD: fd, name: name, path: path, st: st)
                if mode == .reconcile, let indexed, indexed.print == IndexFingerprints.print(of: record) { continue }
                if fillsOutbox, indexed != nil, try writtenWhileStopped(record, at: location) {
                    record = renumber(name, in: fd, record, builder: builder, path: path, st: st)
                }
                changes.append(.put(record))
                if fillsOutbox, let item = IndexStitcher.outboxItem(of: record) { changes.append(.outbox(item: item)) }
            }
            summary.written += changes.filter { if case .put = $0 { true } else { false } }.count
            try index.apply(changes)
            if let progress, total > 0, summary.items - reported >= max(total / 100, 1) {
                reported = summary.items
                progress(min(summary.items, total), total)
            }
            return subfolders
        }

        /// Whether the file `record` describes (its record changed since the index's) holds
        /// content written while no daemon served the store: another size or time under the
        /// number the index knows. In a linked store that number is the remote's, another
        /// content's on every other machine.
        private func writtenWhileStopped(_ record: IndexRecord, at location: IndexLocation) throws(DocfsError) -> Bool {
            guard record.kind == IndexRecord.fileKind, let before = try index.record(at: location), before.kind == record.kind,
                  before.version == record.version else { return false }
            return before.size != record.size || before.modified != record.modified
        }

        /// Numbers the file `name` in `directoryFD` as a new save, pending until the remote
        /// numbers it (`VersionNumber`), as the store watcher numbers a change made behind the
        /// mount while the daemon runs; answers its record again.
        private mutating func renumber(_ name: FileName, in directoryFD: Int32, _ record: IndexRecord, builder: IndexRecordBuilder,
                              path: String, st: stat) -> IndexRecord {
            let fd = openat(directoryFD, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { return record }  // gone meanwhile
            defer { close(fd) }
            let item = ItemID(rawValue: UInt64(bitPattern: record.id))
            let current = UInt64(max(record.version, 1))
            let next = store.versions.firstFreeNumber(of: item, above: VersionNumber.after(current, pending: true))
            // Not numbered (the store refused the attribute): it goes up under the number it had,
            // as before; the mount goes on.
            guard (try? ItemAttributes.setVersion(next, onDescriptor: fd)) != nil else { return record }
            summary.renumbered += 1
            return builder.record(item: item, file: fd, path: path, st: st)
        }

        /// A check of one name: its record as the store says it should be, against the index's.
        /// `path` is the name's path in its scope, `location` where its record is (a reference's
        /// is in the external scope).
        private mutating func compare(_ name: FileName, in directoryFD: Int32, _ st: stat, path: String, location: IndexLocation,
                                      indexed: Bool, builder: IndexRecordBuilder) throws(DocfsError) {
            guard indexed, let recorded = try index.record(at: location) else {
                summary.differences.append(Difference(location: location, kind: .missing, detail: ""))
                return
            }
            let fd = openat(directoryFD, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { return }  // gone meanwhile
            defer { close(fd) }
            let type = st.st_mode & S_IFMT
            let id = type == S_IFREG || type == S_IFDIR
                ? ItemAttributes.id(ofDescriptor: fd) ?? pendingIDs?(fd, st)
                : ItemID.derived(fromBackingInode: UInt64(st.st_ino))
            let expected = builder.record(item: id ?? ItemID(rawValue: 0), file: fd, path: path, st: st)
            let differing = recorded.differences(from: expected)
            guard !differing.isEmpty else { return }
            let detail = differing.map { attribute -> String in
                if attribute == .id && id == nil { return "id \(recorded.id) in the index, none on the item" }
                return "\(attribute.rawValue) \(recorded.describe(attribute)) in the index, \(expected.describe(attribute)) in the store"
            }.joined(separator: "; ")
            summary.differences.append(Difference(location: location, kind: .differs(differing), detail: detail))
        }
    }

    /// How many names the scopes hold (a quick walk of folder listings, for the progress bar).
    private static func countNames(_ layout: StoreLayout) -> Int {
        var count = 0
        var pending: [String] = []
        for container in (try? containers(of: layout)) ?? [] {
            pending += [layout.documentsDirectory(container), layout.dataDirectory(container)]
        }
        while let directory = pending.popLast() {
            guard let dir = opendir(FileName(directory).cString) else { continue }
            while let entry = readdir(dir) {
                let name = DirectoryHandle.entry(entry).name
                if isSkipped(name) { continue }
                count += 1
                if entry.pointee.d_type == UInt8(DT_DIR) { pending.append(directory + "/" + name.description) }
            }
            closedir(dir)
        }
        return count
    }

    /// The names in the open folder `fd`, but `.`, `..` and docfs's working files.
    static func names(in fd: Int32) -> [FileName] {
        let copy = dup(fd)
        guard copy >= 0, let dir = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            return []
        }
        defer { closedir(dir) }
        var names: [FileName] = []
        while let entry = readdir(dir) {
            let name = DirectoryHandle.entry(entry).name
            if !isSkipped(name) { names.append(name) }
        }
        return names
    }

    /// `.`, `..`, and working files of a restore or raced save in progress (not documents).
    static func isSkipped(_ name: FileName) -> Bool {
        let text = name.description
        return text == "." || text == ".." || WorkingFileNames.contains(name)
    }

    private static func containers(of layout: StoreLayout) throws(DocfsError) -> [ContainerID] {
        guard let dir = opendir(layout.containersDirectory) else { return [] }
        defer { closedir(dir) }
        var result: [ContainerID] = []
        while let entry = readdir(dir) {
            let name = DirectoryHandle.entry(entry).name.description
            if name == "." || name == ".." { continue }
            if let id = try? ContainerID(name) { result.append(id) }
        }
        return result.sorted { $0.rawValue < $1.rawValue }
    }

    /// The item's id, giving it one when it has none (files and folders; others have derived
    /// ids): the id its record shows, if the index has a record for it, else a new one. `st`
    /// is brought up to date when an id is written.
    private static func identity(of name: FileName, in directoryFD: Int32, _ st: inout stat,
                                 indexed: IndexFingerprints.Found?, allocator: ItemIDAllocator) -> (ItemID, assigned: Bool) {
        let type = st.st_mode & S_IFMT
        let derived = ItemID.derived(fromBackingInode: UInt64(st.st_ino))
        guard type == S_IFREG || type == S_IFDIR else { return (derived, false) }
        if let id = ItemAttributes.id(in: directoryFD, name: name) { return (id, false) }
        let fd = openat(directoryFD, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return (derived, false) }
        defer { close(fd) }
        let recorded = indexed.map { ItemID(rawValue: UInt64(bitPattern: $0.id)) }.flatMap { $0.isDerived ? nil : $0 }
        guard let fresh = recorded ?? (try? allocator.allocate()),
              let id = try? ItemAttributes.setID(fresh, onDescriptor: fd, onlyIfAbsent: true) else { return (derived, false) }
        _ = fstat(fd, &st)
        return (id, id == fresh)
    }
}
