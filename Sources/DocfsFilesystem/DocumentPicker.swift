import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// The four picker modes (DESIGN §8, issue 6 §3), each carried out under coordination:
/// - open: the app gets a reference to the original in its container (no copy);
/// - import: the app gets its own copy, with a new item id;
/// - move (move-to-service): the document leaves its app's container for a folder of the user
///   view, and a reference is left where it was;
/// - export (export-to-service): a copy goes to a folder of the user view; the source stays.
/// Copies appear whole (made under a working name, then renamed into place), and a move
/// never leaves its old name empty: the reference takes the document's place in one step.
/// Not a filesystem operation: the daemon's control socket asks for it, and it works through
/// the user view it is given.
public struct DocumentPicker: Sendable {
    /// The view whose nodes, claims and consumers a pick uses.
    let view: Filesystem

    public init(view: Filesystem) {
        self.view = view
    }

    /// Which of the four modes a pick is (the CLI's `pick --open|--import`, `move`, `export`).
    public enum Mode: String, Sendable, Codable, CaseIterable {
        case open, `import`, move, export
    }

    /// What a pick made: where, with what id, and what the kernel must forget.
    public struct Picked: Sendable {
        public var place: StorePlace
        public var item: ItemID
        public var invalidations = KernelInvalidations()
    }

    /// Carries out `mode` for document `item`, into the folder at `folder` (the app's folder for
    /// open and import, a folder of the user view for move and export).
    public func pick(_ mode: Mode, item: ItemID, into folder: StorePlace, caller: Caller) throws(DocfsError) -> Picked {
        try carryOut(mode, item: item, into: folder, caller: caller)
    }

    private func carryOut(_ mode: Mode, item: ItemID, into folder: StorePlace, caller: Caller) throws(DocfsError) -> Picked {
        guard let (source, document) = view.original(item) else {
            throw DocfsError(.invalidArgument, "item \(item) is not in the store (deleted?)")
        }
        guard document.type == S_IFREG else {
            throw DocfsError(.invalidArgument, "\(source.path) is a \(document.isDirectory ? "folder" : "special file"): only documents (files) can be picked")
        }
        guard folder.scope != .external, view.containerFolders.catalog.record(of: folder.container) != nil else {
            throw DocfsError(.invalidArgument, "there is no container \(folder.container) (docfs container list shows them)")
        }
        switch mode {
        case .open, .import:
            guard folder.container != .userDefault else {
                throw DocfsError(.invalidArgument, "pick into an app's container (--app ID), not the default one")
            }
            guard folder.container != source.container else {
                throw DocfsError(.invalidArgument, "\(source.path) is in \(folder.container) already")
            }
        case .move, .export:
            guard view.userView.path(of: folder) != nil else {
                throw DocfsError(.invalidArgument, "the destination is not in the user view: choose a folder of your own documents or of a public container")
            }
            if mode == .move {
                guard source.container != .userDefault else {
                    throw DocfsError(.invalidArgument, "\(source.path) is among your own documents already: move-to-service moves a document out of an app's container")
                }
                guard folder.container != source.container else {
                    throw DocfsError(.invalidArgument, "the destination is in \(source.container), the document's own container")
                }
            }
        }
        let into = view.paths.openPlace(folder)
        guard into >= 0 else { throw DocfsError(.system(.noSuchFileOrDirectory), "the folder \(Filesystem.localPath(folder)) of \(folder.container) does not exist") }
        defer { close(into) }
        var st = stat()
        guard fstat(into, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw DocfsError(.system(.notDirectory), "\(Filesystem.localPath(folder)) of \(folder.container) is not a folder")
        }
        let folderItem = view.identity.item(of: into, st)
        let name = FileName(String(source.path.split(separator: "/").last ?? "document"))
        switch mode {
        case .open:
            if let existing = view.existingReference(to: item, in: folder.container) { return Picked(place: existing, item: item) }
            var made = TouchedPlaces()  // for the other mounts to forget
            return try view.changing([(item, .read), (folderItem, .write)], touching: made) { () throws(DocfsError) in
                let free = Self.freeName(name, in: into)
                made.names.append((BackingKey(st), free))
                view.ownChanges.changedName(free, in: BackingKey(st))
                try ReferenceStub.make(in: into, name: free, target: item)
                return (Picked(place: folder.appending(free.description), item: item, invalidations: forget(free, in: st)),
                        [.name(.created, free, inFolder: into, item: item)])
            }
        case .import, .export:
            var made = TouchedPlaces()
            return try view.changing([(item, .read), (folderItem, .write)], touching: made) { () throws(DocfsError) in
                try copy(document, named: name, into: into, folder: folder, folderStat: st, caller: caller, made: &made)
            }
        case .move:
            return try moveOut(document, at: source, into: into, folder: folder, folderStat: st, folderItem: folderItem)
        }
    }

    /// A copy of `document` in `into` (at `folder`), under a free name like `name`, with a new
    /// item id and the user attributes it had; made under a working name and renamed into place.
    private func copy(_ document: Node, named name: FileName, into: Int32, folder: StorePlace, folderStat: stat,
                      caller: Caller, made: inout TouchedPlaces) throws(DocfsError) -> (Picked, [ChangeRecord]) {
        let source = Glibc.open(document.procPath, O_RDONLY | O_CLOEXEC)
        guard source >= 0 else { throw DocfsError.errno("reading \(name)") }
        defer { close(source) }
        let working = FileName(".docfs-pick-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let target = openat(into, working.cString, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard target >= 0 else { throw DocfsError.errno("making the copy of \(name)") }
        do throws(DocfsError) {
            defer { close(target) }
            try view.copyAll(from: source, to: target)
            var sourceStat = stat()
            if fstat(source, &sourceStat) == 0 { fchmod(target, sourceStat.st_mode & 0o777) }
            if let (uid, gid) = try view.ownership(for: caller, inFolder: into) {
                fchown(target, uid, gid)
            }
            for attribute in ExtendedAttributeCopy.userNames(of: document.fd) where !attribute.hasPrefix(ExtendedAttributePolicy.docfsPrefix)
                || ExtendedAttributePolicy.userWritableDocfsNames.contains(attribute) {
                ExtendedAttributeCopy.copyIfMissing(attribute, from: document.fd, to: target)
            }
            let item = try view.identity.allocator.allocate()
            try ItemAttributes.setID(item, onDescriptor: target)
            try ItemAttributes.setVersion(1, onDescriptor: target)
            try check(Glibc.fsync(target))
            let free = Self.freeName(name, in: into)
            made.names.append((BackingKey(folderStat), free))
            view.ownChanges.changedName(working, in: BackingKey(folderStat))
            view.ownChanges.changedName(free, in: BackingKey(folderStat))
            try check(docfs_renameat2(into, working.cString, into, free.cString, DOCFS_RENAME_NOREPLACE))
            // docfs's own copy: the record names no caller.
            return (Picked(place: folder.appending(free.description), item: item, invalidations: forget(free, in: folderStat)),
                    [.name(.created, free, inFolder: into, item: item)])
        } catch {
            unlinkat(into, working.cString, 0)
            throw error
        }
    }

    /// Move-to-service: the document goes to `into` and a reference takes its old name, in
    /// one step for anyone who looks (the reference is exchanged with the document, which then
    /// leaves under a working name).
    private func moveOut(_ document: Node, at source: StorePlace, into: Int32, folder: StorePlace, folderStat: stat,
                         folderItem: ItemID) throws(DocfsError) -> Picked {
        guard let slash = source.path.lastIndex(of: "/") else { throw DocfsError(.invalidArgument, "cannot move a container's root") }
        let from = view.paths.openPlace(StorePlace(container: source.container, scope: source.scope, path: String(source.path[..<slash])))
        guard from >= 0 else { throw DocfsError.errno("opening the document's folder") }
        defer { close(from) }
        var fromStat = stat()
        try check(fstat(from, &fromStat))
        let name = FileName(String(source.path[source.path.index(after: slash)...]))
        let claims: [(ItemID, ClaimIntent)] = [(document.item, .move), (view.identity.item(of: from, fromStat), .write), (folderItem, .write)]
        var made = TouchedPlaces(names: [(BackingKey(fromStat), name)])
        return try view.changing(claims, touching: made) { () throws(DocfsError) in
            let working = FileName(".docfs-pick-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
            let free = Self.freeName(name, in: into)
            made.names.append((BackingKey(folderStat), free))
            for (changed, folder) in [(working, fromStat), (name, fromStat), (free, folderStat)] {
                view.ownChanges.changedName(changed, in: BackingKey(folder), events: 2)
            }
            try ReferenceStub.make(in: from, name: working, target: document.item)
            do throws(DocfsError) {
                try check(docfs_renameat2(from, name.cString, from, working.cString, DOCFS_RENAME_EXCHANGE))
            } catch {
                unlinkat(from, working.cString, 0)
                throw error
            }
            do throws(DocfsError) {
                try check(docfs_renameat2(from, working.cString, into, free.cString, DOCFS_RENAME_NOREPLACE))
            } catch {
                // Put the document back where it was.
                if docfs_renameat2(from, name.cString, from, working.cString, DOCFS_RENAME_EXCHANGE) == 0 { unlinkat(from, working.cString, 0) }
                throw error
            }
            var invalidations = forget(free, in: folderStat)
            invalidations.add(forget(name, in: fromStat))
            return (Picked(place: folder.appending(free.description), item: document.item, invalidations: invalidations),
                    [.name(.movedOut(from: source, fromName: name, inFolder: from), free, inFolder: into, item: document.item),
                     .name(.created, name, inFolder: from, item: document.item)])  // the reference left behind
        }
    }

    /// What this view's kernel must forget when `name` appeared in (or changed in) the folder
    /// `folder`: the entry, if the kernel knows the folder.
    private func forget(_ name: FileName, in folder: stat) -> KernelInvalidations {
        var invalidations = KernelInvalidations()
        if let known = view.nodes.known(key: BackingKey(folder)) { invalidations.entries.append((known.id, name)) }
        return invalidations
    }

    /// `name`, or `name 2`, `name 3`… (before the extension) when it is taken in `folder`.
    public static func freeName(_ name: FileName, in folder: Int32) -> FileName {
        var st = stat()
        if fstatat(folder, name.cString, &st, AT_SYMLINK_NOFOLLOW) != 0 { return name }
        let text = name.description
        let dot = text.lastIndex(of: ".").flatMap { $0 == text.startIndex ? nil : $0 }
        let stem = dot.map { String(text[..<$0]) } ?? text
        let suffix = dot.map { String(text[$0...]) } ?? ""
        for number in 2... {
            let candidate = FileName("\(stem) \(number)\(suffix)")
            if fstatat(folder, candidate.cString, &st, AT_SYMLINK_NOFOLLOW) != 0 { return candidate }
        }
        return name
    }
}
