import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Uncoordinated writers (C5): changes the store watcher saw that docfs did not make. The
/// kernel is told to forget what it cached of them (entries of changed names; attributes and
/// pages of changed files), and a file changed behind docfs's back counts as a new version of
/// its item (its previous content was overwritten where it lay: it cannot be kept).
extension Filesystem {
    /// What the daemon should do after `noticeStoreChanges`: tell the kernel, and log.
    public struct StoreChangeEffects: Sendable {
        public var invalidations = KernelInvalidations()
        public var notices: [String] = []
    }

    public func noticeStoreChanges(_ changes: [StoreWatcher.Change]) -> StoreChangeEffects {
        DeliveryScope.within(.storeWatcher) { noticeStoreChangesDelivering(changes) }
    }

    private func noticeStoreChangesDelivering(_ changes: [StoreWatcher.Change]) -> StoreChangeEffects {
        var effects = StoreChangeEffects()
        // The files whose content changed, as they are now (found before any lock is taken),
        // and which of the changes are docfs's own, sorted out in one go. A file closed twice in
        // one batch is looked at once, at its last close: its state now is one change however
        // many writers made it (the first close, judged by the later state, would count twice).
        // Likewise a file's attribute changes and writes without a close, each looked at once
        // (a file closed in the batch needs no look at its writes), one lstat per path.
        let (own, states) = sortOutOwnChanges(changes, sampled: Self.statesToSortOut(changes))
        for ((change, st), isOwn) in zip(zip(changes, states), own) {
            switch change {
            case .overflow:
                effects.invalidations.inodes += nodes.allIDs()
                effects.notices.append("the store watcher lost events: the kernel forgets every cached attribute and page")
            case let .name(folder, name, path):
                if isOwn { continue }
                separateCopies(atBackingPath: path, andContents: true, into: &effects)
                let key = BackingKey(device: folder.device, inode: folder.inode)
                if let parent = nodes.known(key: key) {
                    effects.invalidations.entries.append((parent.id, name))
                    var st = stat()
                    let exists = fstatat(parent.fd, name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0
                    deliver(.uncoordinated(.name(exists: exists), at: path, name: name, inFolder: parent.fd))
                } else {
                    deliver(.uncoordinated(.name(exists: true), at: path))
                }
                if sessions.markRaced(at: Node.Place(directory: key, name: name)) > 0 {
                    effects.notices.append("an uncoordinated writer changed \(name) while it was being written through the mount: both contents will be kept")
                }
            case let .content(path, folder, name):
                guard let st, !isOwn else { continue }
                separateCopies(atBackingPath: path, andContents: false, into: &effects)
                noticeContentChange(path, st, folder: folder, name: name, into: &effects)
            case let .modified(path):
                // Not a version yet (that is the close): the kernel forgets size and pages.
                guard let st, !isOwn else { continue }
                deliver(.uncoordinated(.modified, at: path))
                guard let node = nodes.known(key: BackingKey(st)) else { continue }
                effects.invalidations.inodes.append(node.id)
            case let .attributes(path):
                guard let st, !isOwn else { continue }
                // `cp -a` gives a folder its attributes (the id it copies too) after filling it:
                // when the folder appeared it carried no id yet.
                separateCopies(atBackingPath: path, andContents: false, into: &effects)
                ownChanges.knowPermissions(st)
                deliver(.uncoordinated(.modified, at: path))
                guard let node = nodes.known(key: BackingKey(st)) else { continue }
                effects.invalidations.attributes.append(node.id)
            }
        }
        return effects
    }

    /// Which of `changes` are docfs's own, and the file states they were judged by. A state
    /// is sampled before the judgment, and docfs may finish a write in between: its record then
    /// shows a newer state than the sample, and its own change would look like someone else's.
    /// So a file judged foreign is looked at again, and when it changed since it was sampled it
    /// is judged again by its state now; only a change whose file stayed as sampled is foreign.
    func sortOutOwnChanges(_ changes: [StoreWatcher.Change], sampled: [stat?]) -> (own: [Bool], states: [stat?]) {
        var states = sampled
        var own = [Bool](repeating: false, count: changes.count)
        func event(_ index: Int) -> OwnChanges.Event? {
            switch changes[index] {
            case .overflow: return nil
            case let .name(folder, name, _): return .name(name, in: BackingKey(device: folder.device, inode: folder.inode))
            case .content: return states[index].map { .content($0, closed: changes[index]) }
            case .modified: return states[index].map { .content($0, closed: nil) }
            case .attributes: return states[index].map { .attributes($0) }
            }
        }
        var judging = changes.indices.filter { event($0) != nil }
        for round in 1...Self.judgingRounds {
            let verdicts = ownChanges.areOwn(judging.map { event($0)! })
            var again: [Int] = []
            for (index, isOwn) in zip(judging, verdicts) {
                own[index] = isOwn
                guard !isOwn, round < Self.judgingRounds, let path = changes[index].filePath, let sample = states[index] else { continue }
                var now = stat()
                guard lstat(FileName(path).cString, &now) == 0, now.st_mode & S_IFMT == sample.st_mode & S_IFMT,
                      Self.changedSince(sample, now) else { continue }
                states[index] = now
                again.append(index)
            }
            if again.isEmpty { break }
            judging = again
        }
        return (own, states)
    }

    /// How many times a file that keeps changing is judged (a writer still at work).
    static let judgingRounds = 3

    private static func changedSince(_ a: stat, _ b: stat) -> Bool {
        a.st_ino != b.st_ino || a.st_size != b.st_size || a.st_mtim.tv_sec != b.st_mtim.tv_sec
            || a.st_mtim.tv_nsec != b.st_mtim.tv_nsec || a.st_ctim.tv_sec != b.st_ctim.tv_sec
            || a.st_ctim.tv_nsec != b.st_ctim.tv_nsec
    }

    /// The state of each file a change of the batch needs sorting out (nil for the others): the
    /// last close of a regular file, the first attribute change of a path, and the first write
    /// of a path that is not closed in the batch. One lstat per path.
    private static func statesToSortOut(_ changes: [StoreWatcher.Change]) -> [stat?] {
        var lastClose: [String: Int] = [:]
        var firstAttributeChange: [String: Int] = [:]
        var firstWrite: [String: Int] = [:]
        for (index, change) in changes.enumerated() {
            switch change {
            case let .content(path, _, _): lastClose[path] = index
            case let .attributes(path): if firstAttributeChange[path] == nil { firstAttributeChange[path] = index }
            case let .modified(path): if firstWrite[path] == nil { firstWrite[path] = index }
            case .name, .overflow: break
            }
        }
        var found: [String: stat?] = [:]
        func state(_ path: String) -> stat? {
            if let known = found[path] { return known }
            var st = stat()
            let result: stat? = lstat(FileName(path).cString, &st) == 0 ? st : nil
            found[path] = result
            return result
        }
        return changes.enumerated().map { index, change -> stat? in
            switch change {
            case let .content(path, _, _):
                guard lastClose[path] == index, let st = state(path), st.st_mode & S_IFMT == S_IFREG else { return nil }
                return st
            case let .attributes(path):
                return firstAttributeChange[path] == index ? state(path) : nil
            case let .modified(path):
                guard firstWrite[path] == index, lastClose[path] == nil, let st = state(path),
                      st.st_mode & S_IFMT == S_IFREG else { return nil }
                return st
            case .name, .overflow: return nil
            }
        }
    }

    /// The file at `path` (now in state `st`) was written by someone other than docfs: the
    /// kernel forgets it, its version moves on, and the record goes to every consumer.
    private func noticeContentChange(_ path: String, _ st: stat, folder: StoreWatcher.Folder, name: FileName,
                                     into effects: inout StoreChangeEffects) {
        if let node = nodes.known(key: BackingKey(st)) { effects.invalidations.inodes.append(node.id) }
        if let notice = recordUncoordinatedVersion(path) { effects.notices.append(notice) }
        let parent = nodes.known(key: BackingKey(device: folder.device, inode: folder.inode))
        deliver(.uncoordinated(.content, at: path, name: parent == nil ? nil : name, inFolder: parent?.fd))
    }

    /// Tells presenters that `name` in the folder `folder` (a descriptor) was written behind
    /// docfs's back: a new version of its item, or a change of a file docfs never gave an id.
    func presentUncoordinatedContent(_ name: FileName, inFolder folder: Int32) {
        let fd = openat(folder, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var st = stat()
        if fstat(fd, &st) == 0, let item = identity.existingID(of: fd, st) {
            present(.version, name, inFolder: folder, item: item,
                    version: max(ItemAttributes.version(ofDescriptor: fd), 1), uncoordinated: true)
        } else {
            present(.changed, name, inFolder: folder, uncoordinated: true)
        }
    }

    /// The file at `path` was written behind docfs's back: its version number moves on.
    private func recordUncoordinatedVersion(_ path: String) -> String? {
        let fd = Glibc.open(FileName(path).cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, let item = identity.existingID(of: fd, st) else { return nil }  // new: it gets an id when looked up
        return reporting("move the version of \(path) on after an uncoordinated change") { () throws(DocfsError) in
            try coordinator.withClaims([(item, .write)]) { () throws(DocfsError) -> String in
                // A promised file written behind the mount holds what was written: no longer the
                // remote's content, and no download writes over it (issue 49 reproduction 3).
                if shared.promises.isActive, let number = PromisedContent.promisedNumber(fd) {
                    shared.promises.content.fulfilled(item.rawValue, number: number, file: fd)
                }
                let version = store.versions.nextSaveNumber(of: item, after: max(ItemAttributes.version(ofDescriptor: fd), 1))
                try ItemAttributes.setVersion(version, onDescriptor: fd)
                if fstat(fd, &st) == 0 { ownChanges.changedFile(st, permissionsToo: false) }
                return "uncoordinated change to \(path) (item \(item)): now version \(version)"
            }
        }
    }
}

extension Filesystem {
    /// What this view's kernel must forget of `changes`, whoever made them: the names that
    /// came or went in folders it knows, the files it knows that were written or changed. (A
    /// daemon serving several views tells each of the changes made through the others.)
    public func invalidations(seeing changes: [StoreWatcher.Change]) -> KernelInvalidations {
        var invalidations = KernelInvalidations()
        for change in changes {
            switch change {
            case .overflow:
                invalidations.inodes += nodes.allIDs()
            case let .name(folder, name, _):
                if let parent = nodes.known(key: BackingKey(device: folder.device, inode: folder.inode)) {
                    invalidations.entries.append((parent.id, name))
                }
            case let .content(path, _, _), let .modified(path):
                var st = stat()
                if lstat(FileName(path).cString, &st) == 0, let node = nodes.known(key: BackingKey(st)) { invalidations.inodes.append(node.id) }
            case let .attributes(path):
                var st = stat()
                if lstat(FileName(path).cString, &st) == 0, let node = nodes.known(key: BackingKey(st)) { invalidations.attributes.append(node.id) }
            }
        }
        return invalidations
    }
}

extension Filesystem {
    /// What this view's kernel must forget of names and files another view changed.
    func invalidations(names: [(folder: BackingKey, name: FileName)], files: [BackingKey]) -> KernelInvalidations {
        var invalidations = KernelInvalidations()
        for (folder, name) in names {
            if let parent = nodes.known(key: folder) { invalidations.entries.append((parent.id, name)) }
        }
        for file in files {
            guard let node = nodes.known(key: file) else { continue }
            invalidations.inodes.append(node.id)
            // The kernel owns the sizes of files under the writeback cache: the file is given a
            // fresh inode, found at its name by the next lookup.
            if cachePolicy.writebackCache && node.type == S_IFREG, let place = node.place,
               let parent = nodes.known(key: place.directory) {
                nodes.detach(key: file)
                invalidations.entries.append((parent.id, place.name))
            }
        }
        return invalidations
    }
}
