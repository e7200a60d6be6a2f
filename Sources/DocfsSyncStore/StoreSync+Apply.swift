import CLinux
import DocfsChunks
import DocfsCoordination
import DocfsCore
import DocfsFilesystem
import DocfsProvider
import DocfsSync
import DocfsThumbnails
#if canImport(Glibc)
import Glibc
#endif

/// Applying remote changes to a served store (issue 22 §3), the one coordinated path for
/// changes docfs makes itself: new content is written beside the target (a `WorkingFile`, so
/// the store watcher knows it as docfs's own) before any claim is taken, then, under the
/// item's replace claim and its folders' write claims, the item is checked to be what the
/// engine expects (else nothing happens: the change here goes up first), renamed into place
/// (readers see the old content or the new, never a mix), stitched and told to presenters
/// (its record delivered inside the claims, so no coordinated reader sees it unindexed), and
/// after the claims every view's kernel forgets the names. The content it replaces is kept
/// as a version (a conflict version when it lost a race). None of it enters the outbox.
extension StoreSync {
    public func apply(_ version: RemoteVersion, placedAs name: String, expecting expected: ApplyExpectation,
                      keepingHereAsConflict: UInt64?, fetch: (ChunkDigest) throws -> [UInt8]) throws -> ApplyOutcome {
        if version.kind == .container { return try applyContainer(version, expecting: expected) }
        guard let view = shared.servedViews().first else {
            throw StoreSyncError("the store has no view to apply remote changes through")
        }
        // Never under a writer: what it has written may still be in the kernel's cache (-o
        // writeback), unseen here. The change waits (parked) until the file is closed.
        if let stitcher = shared.stitcher, stitcher.isWritten(ItemID(rawValue: try localID(ofRemote: version.item))) {
            throw StoreSyncError("item \(version.item) is open for writing here: the remote change waits until it is closed")
        }
        let here = try current(version.item)
        guard expected.isMet(by: here) else { return .changedHere }
        let old = try here.flatMap { _ in try place(of: version.item) }.map { try Located(place: $0, paths: shared.paths) }
        defer { old?.close() }
        if version.deleted {
            guard let old else { return .applied }
            let outcome = try remove(version, at: old, expecting: expected, view: view)
            if outcome == .applied && (here?.kind == .symlink || here?.kind == .reference) {
                try index.forgetLink(remote: Int64(bitPattern: version.item))
            }
            return outcome
        }
        try makeContainerIfMissing(for: version, view: view)
        let target = try Located(folderOf: version, named: name, sync: self)
        defer { target.close() }
        // Taken before the working file's name comes, set back once the change is made.
        var times = FolderTimes(of: [target.folder] + (old.map { [$0.folder] } ?? []))
        // New content, written beside the target before any claim.
        var working: WorkingFile?
        // A document new here arrives promised when the store downloads on demand (issue 23):
        // its real size, no content yet; so does a new version of one promised here still.
        let promising = version.kind == .file && (here == nil || (old.map(isPromised) ?? false)) && version.size > 0
            && !version.conflict && shared.downloadPolicy.downloads == .onDemand
        if version.kind == .file && (here?.kind != .file || here?.manifest != version.chunks) {
            working = try WorkingFile(prefix: ".docfs-sync-", in: target.folder, replacing: target.name,
                                      mode: mode_t(version.mode), ownChanges: shared.ownChanges,
                                      purpose: "apply version \(version.number) of item \(version.item) into")
            if promising {
                guard ftruncate(working!.fd, off_t(version.size)) == 0 else {
                    throw StoreSyncError("making item \(version.item) promised failed: \(String(cString: strerror(errno)))")
                }
            } else {
                try Self.write(version, to: working!.fd, fetch: fetch)
            }
        }
        // A link's new target: a link made beside, renamed into place like a file's content; a
        // reference the same way.
        var link: FileName?
        if version.kind == .symlink && (here?.kind != .symlink || here?.manifest != version.chunks) {
            link = try makeLink(version, beside: target, fetch: fetch)
        } else if version.kind == .reference && (here?.kind != .reference || here?.manifest != version.chunks) {
            link = try makeReference(version, beside: target, fetch: fetch)
        }
        defer {
            if let working {
                working.close()
                unlinkat(target.folder, working.name.cString, 0)  // gone already when it was renamed into place
            }
            if let link { unlinkat(target.folder, link.cString, 0) }
        }
        times.expectNow()
        var claims: [(ItemID, ClaimIntent)] = [(ItemID(rawValue: try localID(ofRemote: version.item)), .replace)]
        if let folder = ItemAttributes.id(ofDescriptor: target.folder) { claims.append((folder, .write)) }
        if let old, let folder = ItemAttributes.id(ofDescriptor: old.folder), !claims.contains(where: { $0.0 == folder }) {
            claims.append((folder, .write))
        }
        // Every view's kernel forgets the names the item had and has (no view made the change).
        var names = [(folder: target.folderKey, name: target.name)]
        if let old { names.append((old.folderKey, old.name)) }
        let outcome = try RemoteApplication.$machine.withValue(version.author.machine) { () throws -> ApplyOutcome in
            try view.changing(claims, touching: TouchedPlaces(names: names), telling: .everyView) { () throws(DocfsError) in
                do {
                    guard expected.isMet(by: try current(version.item)) else { return (.changedHere, []) }
                } catch {
                    throw DocfsError(.internalFailure, "reading item \(version.item) before applying a remote version failed")
                }
                times.keepOnlyUnchanged()
                if let working {
                    try replaceContent(version, with: working, at: target, old: old, keepingOldAsConflict: keepingHereAsConflict,
                                       promising: promising, view: view)
                } else if let link {
                    try placeLink(version, made: link, at: target, old: old, oldWasReference: here?.kind == .reference, view: view)
                } else if old == nil {
                    try makeFolder(version, at: target, view: view)
                } else {
                    try moveAndDescribe(version, from: old!, to: target, view: view)
                }
                keepTimes(times, view: view)
                return (.applied, [])
            }
        }
        if outcome == .applied, version.kind == .file, let digest = version.thumbnail.flatMap({ ChunkDigest(hex: $0) }) {
            installThumbnail(digest, of: version, view: view, fetch: fetch)
        }
        return outcome
    }

    /// Sets the folders an apply changed back to the times they had (`FolderTimes`) and records
    /// them so, inside the apply's claims (its change, not this machine's: nothing goes up); the
    /// store watcher knows the change as docfs's.
    private func keepTimes(_ times: FolderTimes, view: Filesystem) {
        for fd in times.restore() {
            shared.ownChanges.changedFile(at: fd)
            guard let item = ItemAttributes.id(ofDescriptor: fd), let place = shared.paths.place(of: fd), !place.isScopeRoot,
                  let located = try? Located(place: place, paths: shared.paths) else { continue }
            defer { located.close() }
            view.deliver(.name(.attributes, located.name, inFolder: located.folder, item: item))
        }
    }

    public func moveAside(_ item: UInt64, to name: String) throws {
        guard let view = shared.servedViews().first, let place = try place(of: item) else { return }
        let old = try Located(place: place, paths: shared.paths)
        defer { old.close() }
        var claims: [(ItemID, ClaimIntent)] = [(ItemID(rawValue: item), .metadata)]
        if let folder = ItemAttributes.id(ofDescriptor: old.folder) { claims.append((folder, .write)) }
        let newName = FileName(name)
        let touched = TouchedPlaces(names: [(old.folderKey, old.name), (old.folderKey, newName)])
        try view.changing(claims, touching: touched, telling: .everyView) { () throws(DocfsError) in
            shared.ownChanges.changedName(old.name, in: old.folderKey)
            shared.ownChanges.changedName(newName, in: old.folderKey)
            try check(docfs_renameat2(old.folder, old.name.cString, old.folder, newName.cString, UInt32(DOCFS_RENAME_NOREPLACE)))
            // A local change: it goes up like a rename through the mount.
            return ((), [.name(.moved(from: old.name, inFolder: old.folder, exchange: false), newName, inFolder: old.folder,
                               item: ItemID(rawValue: item))])
        }
    }

    public func keepConflict(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        try keep(version, as: .conflict, fetch: fetch)
    }

    public func keepPrevious(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        try keep(version, as: .previous, fetch: fetch)
    }

    public func keepAside(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        try keep(version, as: .previous, fetch: fetch)
    }

    /// Keeps another machine's `version` of an item here as a kept version of `kind`, beside
    /// the content here (which stays).
    /// The document moved meanwhile (its content is fetched before the claim): looked for
    /// again, a few times. On a store that downloads on demand the version is kept promised
    /// (issue 23: nothing fetched until it is read), unless a version kept here holds its
    /// number (which needs its content to tell whether they are one).
    private func keep(_ version: RemoteVersion, as kind: VersionRecord.Kind,
                      fetch: (ChunkDigest) throws -> [UInt8]) throws {
        let promising = keepsRemoteVersionsPromised && version.size > 0
        for _ in 0..<Self.keepAttempts {
            switch try keepBeside(version, as: kind, promising: promising, fetch: fetch) {
            case .kept: return
            case .moved: continue
            }
        }
        throw StoreSyncError("item \(version.item) kept moving while its version \(version.number) was kept: it is kept at the next look")
    }

    static let keepAttempts = 4

    /// Whether versions from the remote are kept here promised (the store downloads on demand).
    private var keepsRemoteVersionsPromised: Bool {
        shared.downloadPolicy.downloads == .onDemand && shared.promises.isActive
    }

    /// What a try of `keepBeside` came to.
    private enum KeepOutcome {
        case kept
        /// The document moved before the claim: looked for again.
        case moved
    }

    /// `keep`, beside the document where it is now.
    private func keepBeside(_ version: RemoteVersion, as kind: VersionRecord.Kind, promising: Bool,
                            fetch: (ChunkDigest) throws -> [UInt8]) throws -> KeepOutcome {
        guard version.kind == .file else { return .kept }
        let item = ItemID(rawValue: version.item)
        let versions = shared.store.versions
        // Kept already under the remote's number, which no save here holds (`VersionNumber`):
        // nothing to fetch.
        if versions.isTaken(item, version.number) { return .kept }
        guard let place = try place(of: version.item) else {
            try keepWhileGone(version, as: kind, fetch: fetch)
            return .kept
        }
        let document = try Located(place: place, paths: shared.paths)
        defer { document.close() }
        let working = try WorkingFile(prefix: ".docfs-sync-", in: document.folder, replacing: document.name,
                                      mode: mode_t(version.mode), ownChanges: shared.ownChanges,
                                      purpose: "keep \(kind == .conflict ? "conflict " : "")version \(version.number) of item \(version.item) in")
        defer {
            working.close()
            unlinkat(document.folder, working.name.cString, 0)
        }
        if promising {
            // Its real size, no content: the promise (under the remote's number, which no other
            // promise of the item has: no version here holds it) says what to fetch when read.
            guard ftruncate(working.fd, off_t(version.size)) == 0 else {
                throw StoreSyncError("keeping version \(version.number) of item \(version.item) promised failed: \(String(cString: strerror(errno)))")
            }
            _ = try ItemAttributes.setID(item, onDescriptor: working.fd)
            try ItemAttributes.setVersion(version.number, onDescriptor: working.fd)
        } else {
            try Self.write(version, to: working.fd, fetch: fetch)
        }
        return try shared.coordinator.withClaims([(item, .metadata)]) { () throws(DocfsError) -> KeepOutcome in
            let fd = openat(document.folder, document.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            // Moved (or removed) since it was looked up: looked for again (no move runs under the claim).
            if fd < 0 && errno == ENOENT { return .moved }
            guard fd >= 0 else { throw DocfsError.errno("opening item \(version.item) to keep its version \(version.number)") }
            defer { close(fd) }
            // Another file took its name meanwhile.
            if let found = ItemAttributes.id(ofDescriptor: fd), found != item { return .moved }
            // Under the remote's number, which no save here holds (`VersionNumber`): a version
            // kept here with it, or the content here numbered so, is that version already.
            try takeRemoteNumbers(of: item, content: fd)  // a store from before kept some under other numbers
            let here = ItemAttributes.version(ofDescriptor: fd)
            let number = version.number
            if versions.isTaken(item, number) || here == number { return .kept }
            var record = VersionRecord(version: number, kind: kind, modified: version.modified,
                                       kept: WriteSessions.now(), size: version.size, author: maker(of: version))
            // Out of the chain deltas are made up from: a delta kept here below it is made up from
            // the content that followed it here, not from this one.
            if kind == .previous { record.detached = true }
            if promising {
                try shared.promises.promise(Self.promise(of: version, as: version.number), file: working.fd)
            }
            try versions.keepFile(working.fd, item: item, record: record, promised: promising)
            guard kind == .conflict else { return .kept }
            try flagConflict(on: fd, of: item, named: document, by: version.author.machine)
            return .kept
        }
    }

    /// Saves made here that never went up (pending, `VersionNumber`) leave the chain of
    /// previous versions before another machine's version takes the place they came before
    /// (the content `current` is about to be replaced or renumbered): each is made whole and
    /// goes up beside the current version (`setAside`, `unsentAside`).
    private func setPendingSavesAside(of item: ItemID, current: Int32) throws(DocfsError) {
        let versions = shared.store.versions
        let pending = versions.versions(of: item).filter { $0.isInChain && VersionNumber.isPending($0.version) }
        for save in pending.reversed() {
            if current >= 0 {
                _ = try versions.detach(item, version: save.version, past: 0, current: "/proc/self/fd/\(current)")
            } else {
                // No content here to make a delta up from: one that is a delta stays in the chain.
                _ = try? versions.detach(item, version: save.version, past: 0, current: nil)
            }
        }
        if !pending.isEmpty { try? requeue(item.rawValue) }
    }

    /// Flags the document `fd` (at `document`) as having a conflict version kept, and tells
    /// presenters (the document's content stays; its record is made again).
    func flagConflict(on fd: Int32, of item: ItemID, named document: Located, by machine: String) throws(DocfsError) {
        try check(docfs_fd_setxattr(fd, Filesystem.conflictAttribute, "1", 1, 0))
        RemoteApplication.$machine.withValue(machine) {
            shared.servedViews().first?.deliverUncached(.name(.newVersion(ItemAttributes.version(ofDescriptor: fd), conflict: true),
                                                              document.name, inFolder: document.folder, item: item))
        }
    }

    /// `keep` for an item gone here (a deletion taken at once, which an edit may yet bring
    /// back): the content is written to a scratch file of the version store (there is no
    /// document folder to write beside) and kept under the remote's number, when no version
    /// kept here holds it (no save here can: those made before the deletion went up before it).
    private func keepWhileGone(_ version: RemoteVersion, as kind: VersionRecord.Kind,
                               fetch: (ChunkDigest) throws -> [UInt8]) throws {
        let item = ItemID(rawValue: version.item)
        let versions = shared.store.versions
        let (fd, path) = try versions.scratchFile("keep-\(version.item)-\(version.number)")
        defer {
            close(fd)
            unlink(path)
        }
        try Self.write(version, to: fd, fetch: fetch)
        try shared.coordinator.withClaims([(item, .metadata)]) { () throws(DocfsError) in
            try takeRemoteNumbers(of: item, content: nil)
            // Kept already: no save here holds a remote's number (`VersionNumber`).
            if versions.isTaken(item, version.number) { return }
            var record = VersionRecord(version: version.number, kind: kind, modified: version.modified,
                                       kept: WriteSessions.now(), size: version.size, author: maker(of: version))
            if kind == .previous { record.detached = true }
            try versions.keepFile(fd, item: item, record: record)
        }
    }

    /// The thumbnail set the saving machine made goes in for the content here (none is rendered
    /// here then), under the item's write claim with the record that says so (a reader of the
    /// thumbnail waits for both). A failure costs only a rendering here: it is reported, not thrown.
    private func installThumbnail(_ digest: ChunkDigest, of version: RemoteVersion, view: Filesystem,
                                  fetch: (ChunkDigest) throws -> [UInt8]) {
        let thumbnails = shared.thumbnailStore
        let item = ItemID(rawValue: version.item)
        do {
            if shared.thumbnailer == nil { mkdir(shared.store.layout.thumbnailsDirectory, 0o700) }  // made by `prepare` when served
            let bytes = try fetch(digest)
            guard bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else { throw StoreSyncError("its chunk came damaged") }
            guard let place = try place(of: version.item) else { return }
            let document = try Located(place: place, paths: shared.paths)
            defer { document.close() }
            try view.coordinator.withClaims([(item, .write)]) { () throws(DocfsError) in
                let fd = openat(document.folder, document.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
                guard fd >= 0 else { throw DocfsError.errno("opening item \(item) for its thumbnail") }
                defer { close(fd) }
                var st = stat()
                guard fstat(fd, &st) == 0, ItemAttributes.id(ofDescriptor: fd) == item else { return }
                let stamp = ContentStamp(st, version: ItemAttributes.version(ofDescriptor: fd))
                guard try thumbnails.installPortableSet(bytes, for: item, stamp: stamp) else { return }
                RemoteApplication.$machine.withValue(version.author.machine) {
                    view.deliverUncached(.name(.attributes, document.name, inFolder: document.folder, item: item))  // hasThumbnail
                }
            }
        } catch {
            shared.problemSink("sync: the thumbnail of item \(item) that came with version \(version.number) could not be kept (\(error)); it is made here")
        }
    }

    public func resolveConflicts(of item: UInt64, before number: UInt64) throws {
        guard let view = shared.servedViews().first, let place = try place(of: item) else { return }
        let document = try Located(place: place, paths: shared.paths)
        defer { document.close() }
        let id = ItemID(rawValue: item)
        let versions = shared.store.versions
        try view.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) in
            let conflicts = versions.versions(of: id).filter { $0.kind == .conflict }
            for record in conflicts where record.version < number { versions.remove(id, version: record.version) }
            guard !conflicts.contains(where: { $0.version >= number }) else { return }  // a newer conflict stays
            let fd = openat(document.folder, document.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw DocfsError.errno("opening item \(item) to clear its conflict") }
            defer { close(fd) }
            guard ItemAttributes.id(ofDescriptor: fd) == id else { return }
            if docfs_removexattr("/proc/self/fd/\(fd)", Filesystem.conflictAttribute) != 0 && errno != ENODATA {
                throw DocfsError.errno("clearing \(Filesystem.conflictAttribute)")
            }
            shared.ownChanges.changedFile(at: fd)
            RemoteApplication.$machine.withValue(RemoteApplication.ownBookkeeping) {
                view.deliverUncached(.name(.attributes, document.name, inFolder: document.folder, item: id))
            }
        }
    }

    // MARK: Steps

    /// Writes `version`'s content, chunk by chunk, to `fd`, and checks its length.
    static func write(_ version: RemoteVersion, to fd: Int32, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        var offset: off_t = 0
        for digest in version.chunks ?? [] {
            let bytes = try fetch(digest)
            guard bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else {
                throw StoreSyncError("chunk \(digest) of item \(version.item) came damaged from the remote")
            }
            var done = 0
            while done < bytes.count {
                let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, offset + off_t(done)) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw StoreSyncError("writing item \(version.item) failed: \(String(cString: strerror(errno)))") }
                done += n
            }
            offset += off_t(bytes.count)
        }
        guard Int64(offset) == version.size else {
            throw StoreSyncError("version \(version.number) of item \(version.item) should hold \(version.size) bytes but its chunks hold \(offset)")
        }
        guard fsync(fd) == 0 else { throw StoreSyncError("writing item \(version.item) failed: \(String(cString: strerror(errno)))") }
    }

    /// Sets what a version says of an item beside its content: mode, user attributes (those
    /// that travel: others here are left alone), modification time.
    static func describe(_ fd: Int32, as version: RemoteVersion) throws(DocfsError) {
        let path = "/proc/self/fd/\(fd)"
        for name in Self.userAttributes(fd).keys where version.attributes[name] == nil {
            _ = docfs_removexattr(path, name)
        }
        for (name, value) in version.attributes {
            try check(value.withUnsafeBytes { docfs_setxattr(path, name, $0.baseAddress, $0.count, 0) })
        }
        var times = [Glibc.timespec(tv_sec: 0, tv_nsec: DOCFS_UTIME_OMIT), Self.timespec(version.modified)]
        try check(utimensat(AT_FDCWD, path, &times, 0))
    }

    /// Puts the new content in place. The old is kept as a version: a previous one under its
    /// number here, or a conflict version under the number the remote gave it. The new takes
    /// the remote's number, unless a version kept here has it (a save made here offline).
    private func replaceContent(_ version: RemoteVersion, with working: WorkingFile, at target: Located, old: Located?,
                                keepingOldAsConflict conflict: UInt64?, promising: Bool, view: Filesystem) throws(DocfsError) {
        let item = ItemID(rawValue: version.item)
        let oldFD = old.map { openat($0.folder, $0.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC) } ?? -1
        defer { if oldFD >= 0 { close(oldFD) } }
        var oldStat = stat()
        let replacing = oldFD >= 0 && fstat(oldFD, &oldStat) == 0 && oldStat.st_mode & S_IFMT == S_IFREG
        let versions = shared.store.versions
        // A version kept under another number than the remote's (it waited for a save here to
        // go up) takes its own now, if free: else it could hold the number the winner takes.
        try takeRemoteNumbers(of: item, content: replacing ? oldFD : nil)
        var oldVersion = replacing ? max(ItemAttributes.version(ofDescriptor: oldFD), 1) : 0
        // (Gone here, the item comes back: saves made before its deletion go up so too.)
        try setPendingSavesAside(of: item, current: replacing ? oldFD : -1)
        // The content here pending, yet taken over without a race: it repeats the version last in
        // step (the apply found it so), and is kept under that number, once.
        var repeatsKept = false
        if replacing && conflict == nil && VersionNumber.isPending(oldVersion), let synced = (try? syncState(of: version.item))?.number {
            oldVersion = synced
            repeatsKept = versions.isTaken(item, synced)
        }
        // Kept as a conflict version, the content it replaces leaves the chain of previous
        // versions, whose newest may be a delta of it (an append session's): that one is made
        // whole from it first, or it would be read from the new content.
        if replacing && (conflict != nil || repeatsKept) {
            let readable = open("/proc/self/fd/\(oldFD)", O_RDONLY | O_CLOEXEC)
            guard readable >= 0 else { throw DocfsError.errno("reading item \(version.item) to keep it as a conflict version") }
            defer { close(readable) }
            try versions.materializeNewestPrefix(of: item, from: readable)
        }
        // The winner's number and ours as a conflict version are the remote's.
        let current = replacing ? "/proc/self/fd/\(oldFD)" : nil
        // A number taken still (a version kept here has it) would drop the content it replaces.
        let wanted = conflict ?? oldVersion
        let keptAs = versions.isTaken(item, wanted) ? versions.firstFreeNumber(of: item, above: wanted) : wanted
        // Kept already: an earlier try kept our content as this conflict version when the item
        // changed here again before the winner could be taken (the remote commits one conflict
        // version for a content from a base, and the apply checked the content here is it).
        let keptBefore = conflict.map { versions.record(of: item, version: $0)?.kind == .conflict } ?? false
        if replacing && (keptBefore || repeatsKept) {
            view.nodes.known(key: BackingKey(oldStat))?.markSuperseded()
        } else if replacing {
            // The content it replaces stays recoverable (C4): a previous version, or a conflict
            // version when it lost the race on the remote. Promised still, it is kept promised
            // (fetched when the version is read), as long as its promise is on record.
            let record = VersionRecord(version: keptAs, kind: conflict != nil ? .conflict : .previous,
                                       modified: WriteSessions.seconds(oldStat.st_mtim), kept: WriteSessions.now(),
                                       size: Int64(oldStat.st_size), author: shared.sessions.author(of: item, version: oldVersion))
            let promised = conflict == nil && keepsPromised(oldFD)
            try shared.store.versions.keepFile(oldFD, item: item, record: record, promised: promised)
            view.nodes.known(key: BackingKey(oldStat))?.markSuperseded()
        }
        let lowest = conflict != nil || VersionNumber.isPending(oldVersion) ? version.number : max(version.number, oldVersion + 1)
        // A version kept here under the remote's number is that version (the remote gives a
        // number once; no pending save holds one): the content takes the number, and the kept
        // copy goes (a version of a document deleted here, say, that the remote brings back).
        var newVersion = lowest
        if versions.isTaken(item, lowest) {
            if versions.sameContent(item, version: lowest, as: "/proc/self/fd/\(working.fd)") {
                try versions.removeRepeated(item, version: lowest, current: current ?? "/nonexistent")
            } else {
                newVersion = versions.firstFreeNumber(of: item, above: lowest)
                shared.problemSink("sync: item \(item) keeps a version \(lowest) here that is not the remote's; the remote's takes \(newVersion) here")
            }
        }
        try check(fchmod(working.fd, mode_t(version.mode & 0o7777)))
        _ = try ItemAttributes.setID(item, onDescriptor: working.fd)
        try ItemAttributes.setVersion(newVersion, onDescriptor: working.fd)
        shared.sessions.noteMaker(of: item, version: newVersion, maker(of: version))
        if conflict != nil { try check(docfs_fd_setxattr(working.fd, Filesystem.conflictAttribute, "1", 1, 0)) }
        try Self.describe(working.fd, as: version)
        if promising {
            try shared.promises.promise(Self.promise(of: version, as: newVersion), file: working.fd)
        }
        let samePlace = old.map { $0.folderKey == target.folderKey && $0.name == target.name } ?? false
        try check(docfs_renameat2(target.folder, working.name.cString, target.folder, target.name.cString,
                                  samePlace ? 0 : UInt32(DOCFS_RENAME_NOREPLACE)))
        if let old, !samePlace {
            shared.ownChanges.changedName(old.name, in: old.folderKey)
            unlinkat(old.folder, old.name.cString, 0)
            view.deliver(.name(.deleted(wasReference: false), old.name, inFolder: old.folder, item: item))
        }
        if replacing && samePlace {
            var change = ChangeRecord.name(.newVersion(newVersion, conflict: conflict != nil), target.name,
                                           inFolder: target.folder, item: item)
            change.version = newVersion
            view.deliver(change)
        } else {
            view.deliver(.name(.created, target.name, inFolder: target.folder, item: item))
        }
    }

    /// Who made `version`, as a version kept here records it: the machine and user the remote
    /// names, or nobody for one of this machine's own (`docfs versions` names this one then).
    func maker(of version: RemoteVersion) -> Author? {
        version.author.machine == author.machine ? nil : Author(machine: version.author.machine, user: version.author.user)
    }

    /// What a file standing for `version` (promised under `number`) fetches when read.
    static func promise(of version: RemoteVersion, as number: UInt64) -> Promise {
        Promise(item: version.item, number: number, size: version.size, modified: version.modified,
                manifest: version.manifest, lengths: version.knownLengths)
    }

    /// Whether the document at `place` is promised (its content not downloaded yet).
    private func isPromised(_ place: Located) -> Bool { promiseNumber(of: place) != nil }

    /// The number of the promise the file at `place` stands for; nil when its content is here.
    private func promiseNumber(of place: Located) -> UInt64? {
        guard shared.promises.isActive else { return nil }
        let fd = openat(place.folder, place.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return PromisedContent.promisedNumber(fd)
    }

    /// Whether the promised file `fd`, about to be replaced, can be kept as a version still
    /// promised: its promise is on record, and written durably now (a lost record of a kept
    /// version could not be made again from the version the item is in step with).
    private func keepsPromised(_ fd: Int32) -> Bool {
        guard shared.promises.isActive, let number = PromisedContent.promisedNumber(fd),
              let item = ItemAttributes.id(ofDescriptor: fd),
              let promise = try? shared.promises.content.record(of: item.rawValue, number: number) else { return false }
        return (try? shared.promises.content.update(promise)) != nil
    }

    /// Versions of `item` kept here under another number than the remote gave them (one of
    /// this machine's held it) take the remote's where it is free now: not the number of the
    /// content here (`content`, when the item is here), nor one a write session of it holds.
    /// Call under the item's claim.
    func takeRemoteNumbers(of item: ItemID, content: Int32?) throws(DocfsError) {
        let here = content.map { ItemAttributes.version(ofDescriptor: $0) }
        try shared.store.versions.takeRemoteNumbers(of: item) { number in
            number == here || shared.sessions.holdsNumber(item, number)
        }
    }

    /// After the engine settled `item` (a save of this machine's went up, or another's was
    /// applied): a number held here may have been let go, which a version kept under another
    /// number than the remote's takes now (`takeRemoteNumbers`).
    public func takeRemoteNumbers(of item: UInt64) throws {
        let id = ItemID(rawValue: item)
        guard shared.store.versions.holdsRemoteNumbers(id) else { return }
        try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) in
            guard let place = try? place(of: item) else { return try takeRemoteNumbers(of: id, content: nil) }
            let fd = shared.paths.openPlace(place)
            guard fd >= 0 else { throw DocfsError.errno("opening item \(item) to number its kept versions") }
            defer { close(fd) }
            try takeRemoteNumbers(of: id, content: fd)
        }
    }

    private func makeFolder(_ version: RemoteVersion, at target: Located, view: Filesystem) throws(DocfsError) {
        shared.ownChanges.changedName(target.name, in: target.folderKey)
        try check(mkdirat(target.folder, target.name.cString, mode_t(version.mode & 0o7777)))
        let fd = openat(target.folder, target.name.cString, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.errno("opening the folder made for item \(version.item)") }
        defer { close(fd) }
        _ = try ItemAttributes.setID(ItemID(rawValue: version.item), onDescriptor: fd)
        try Self.describe(fd, as: version)
        shared.ownChanges.changedFile(at: fd)  // as `moveAndDescribe`'s
        view.deliver(.name(.created, target.name, inFolder: target.folder, item: ItemID(rawValue: version.item)))
    }

    /// Makes a symbolic link to `version`'s target beside `target`, under a working name;
    /// answers the name.
    private func makeLink(_ version: RemoteVersion, beside target: Located, fetch: (ChunkDigest) throws -> [UInt8]) throws -> FileName {
        var bytes: [UInt8] = []
        for digest in version.chunks ?? [] { bytes += try fetch(digest) }
        guard bytes.count == version.size, !bytes.isEmpty, !bytes.contains(0) else {
            throw StoreSyncError("version \(version.number) of item \(version.item) is not a link's target")
        }
        let name = FileName(".docfs-sync-" + String(UInt64.random(in: 0...UInt64.max), radix: 16))
        shared.ownChanges.changedName(name, in: target.folderKey, events: 2)  // created, moved away
        shared.ownChanges.changedName(target.name, in: target.folderKey)
        try check((bytes + [0]).withUnsafeBufferPointer { pointer in
            pointer.withMemoryRebound(to: CChar.self) { symlinkat($0.baseAddress!, target.folder, name.cString) }
        })
        var times = [Self.timespec(version.modified), Self.timespec(version.modified)]
        try check(utimensat(target.folder, name.cString, &times, AT_SYMLINK_NOFOLLOW))
        return name
    }

    /// Makes a reference (an empty file naming its original, `ReferenceStub`) to `version`'s
    /// original beside `target`, under a working name; answers the name. The original need not
    /// be here yet: the reference lists, and opens once it has come.
    private func makeReference(_ version: RemoteVersion, beside target: Located, fetch: (ChunkDigest) throws -> [UInt8]) throws -> FileName {
        var bytes: [UInt8] = []
        for digest in version.chunks ?? [] { bytes += try fetch(digest) }
        guard bytes.count == version.size, let original = ItemID(text: String(decoding: bytes, as: UTF8.self)) else {
            throw StoreSyncError("version \(version.number) of item \(version.item) does not name a reference's original")
        }
        let working = try WorkingFile(prefix: ".docfs-sync-", in: target.folder, replacing: target.name, mode: mode_t(version.mode),
                                      ownChanges: shared.ownChanges, purpose: "make the reference \(version.item) in")
        defer { working.close() }
        do {
            try ReferenceStub.mark(working.fd, target: original)
            var times = [Self.timespec(version.modified), Self.timespec(version.modified)]
            try check(futimens(working.fd, &times))
        } catch {
            unlinkat(target.folder, working.name.cString, 0)
            throw error
        }
        return working.name
    }

    /// Renames the link or reference made beside into place (over the old one there, or
    /// moving it). Either is known here by the id derived from its inode, linked to its id on
    /// every machine.
    private func placeLink(_ version: RemoteVersion, made link: FileName, at target: Located, old: Located?,
                           oldWasReference: Bool, view: Filesystem) throws(DocfsError) {
        let samePlace = old.map { $0.folderKey == target.folderKey && $0.name == target.name } ?? false
        try check(docfs_renameat2(target.folder, link.cString, target.folder, target.name.cString,
                                  samePlace ? 0 : UInt32(DOCFS_RENAME_NOREPLACE)))
        if let old, !samePlace {
            shared.ownChanges.changedName(old.name, in: old.folderKey)
            unlinkat(old.folder, old.name.cString, 0)
            view.deliver(.name(.deleted(wasReference: oldWasReference), old.name, inFolder: old.folder, item: ItemID(rawValue: version.item)))
        }
        let fd = openat(target.folder, target.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.errno("opening the link or reference made for item \(version.item)") }
        defer { close(fd) }
        var st = stat()
        try check(fstat(fd, &st))
        let here = ItemID.derived(fromBackingInode: UInt64(st.st_ino))
        try index.setLink(local: Int64(bitPattern: here.rawValue), remote: Int64(bitPattern: version.item))
        // A reference's changes are told under its original's id (its record carries it).
        view.deliver(.name(.created, target.name, inFolder: target.folder, item: ReferenceStub.target(ofDescriptor: fd, st) ?? here))
    }

    private func moveAndDescribe(_ version: RemoteVersion, from old: Located, to target: Located, view: Filesystem) throws(DocfsError) {
        let item = ItemID(rawValue: version.item)
        if version.kind == .symlink || version.kind == .reference {
            // A link or reference has no attributes of its own: only its place and time travel.
            let moved = old.folderKey != target.folderKey || old.name != target.name
            if moved {
                shared.ownChanges.changedName(old.name, in: old.folderKey)
                shared.ownChanges.changedName(target.name, in: target.folderKey)
                try check(docfs_renameat2(old.folder, old.name.cString, target.folder, target.name.cString, UInt32(DOCFS_RENAME_NOREPLACE)))
            }
            var times = [Self.timespec(version.modified), Self.timespec(version.modified)]
            try check(utimensat(target.folder, target.name.cString, &times, AT_SYMLINK_NOFOLLOW))
            let fd = openat(target.folder, target.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw DocfsError.errno("opening item \(version.item) after moving it") }
            defer { close(fd) }
            var st = stat()
            try check(fstat(fd, &st))
            shared.ownChanges.changedFile(st)  // its new times are no writer's behind docfs's back
            let here = ReferenceStub.target(ofDescriptor: fd, st) ?? ItemID.derived(fromBackingInode: UInt64(st.st_ino))
            view.deliver(.name(moved ? .moved(from: old.name, inFolder: old.folder, exchange: false) : .attributes, target.name,
                               inFolder: target.folder, item: here))
            return
        }
        let moved = old.folderKey != target.folderKey || old.name != target.name
        if moved {
            shared.ownChanges.changedName(old.name, in: old.folderKey)
            shared.ownChanges.changedName(target.name, in: target.folderKey)
            try check(docfs_renameat2(old.folder, old.name.cString, target.folder, target.name.cString, UInt32(DOCFS_RENAME_NOREPLACE)))
        }
        let fd = openat(target.folder, target.name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.errno("opening item \(version.item) to apply its attributes") }
        defer { close(fd) }
        try check(chmod("/proc/self/fd/\(fd)", mode_t(version.mode & 0o7777)))
        try Self.describe(fd, as: version)
        // The same content under the remote's newer number (a rename, attributes, a resolution):
        // one number for the current version on every machine.
        // A pending save here holding the content (a merge of ours committed, or a save that
        // wrote the version last in step again) is that version now.
        let here = ItemAttributes.version(ofDescriptor: fd)
        if version.kind == .file && VersionNumber.isPending(here) {
            let versions = shared.store.versions
            try setPendingSavesAside(of: item, current: fd)
            if versions.isTaken(item, version.number) {
                try versions.removeRepeated(item, version: version.number, current: "/proc/self/fd/\(fd)")
            }
            try ItemAttributes.setVersion(version.number, onDescriptor: fd)
            shared.sessions.noteMaker(of: item, version: version.number, maker(of: version))
        } else if version.kind == .file && here < version.number && !shared.store.versions.isTaken(item, version.number) {
            try ItemAttributes.setVersion(version.number, onDescriptor: fd)
            shared.sessions.noteMaker(of: item, version: version.number, maker(of: version))
        }
        // The attributes just set where the file stands are docfs's: the store watcher would
        // otherwise take them for a change behind its back, made here, and record the file
        // again as this machine's (`query --watch` said a's rename was b's own).
        shared.ownChanges.changedFile(at: fd)
        if moved {
            view.deliver(.name(.moved(from: old.name, inFolder: old.folder, exchange: false), target.name,
                               inFolder: target.folder, item: item))
        }
        view.deliver(.name(.attributes, target.name, inFolder: target.folder, item: item))
    }

    private func remove(_ version: RemoteVersion, at old: Located, expecting expected: ApplyExpectation,
                        view: Filesystem) throws -> ApplyOutcome {
        let item = ItemID(rawValue: version.item)
        var claims: [(ItemID, ClaimIntent)] = [(item, .replace)]
        if let folder = ItemAttributes.id(ofDescriptor: old.folder) { claims.append((folder, .write)) }
        return try RemoteApplication.$machine.withValue(version.author.machine) { () throws -> ApplyOutcome in
            try view.changing(claims, touching: TouchedPlaces(names: [(old.folderKey, old.name)]), telling: .everyView) { () throws(DocfsError) in
                guard (try? expected.isMet(by: current(version.item))) == true else { return (.changedHere, []) }
                // A folder the remote removed holds nothing there (`TreeProblem.folderNotEmpty`):
                // one that holds something here holds what was made or moved in here since, and
                // stays (what is in it goes up, and brings it back everywhere).
                guard !Self.holdsAnything(old) else { return (.changedHere, []) }
                let wasReference = ReferenceStub.isReference(old.name, in: old.folder, Self.attributes(of: old))
                let promise = promiseNumber(of: old)
                // A promised file open here reads on after its removal, as any file does (POSIX):
                // its whole content comes down now, and its record goes once it is here.
                let readOn = promise != nil && Self.isOpen(old)
                if readOn { downloadBeforeRemoval(old) }
                shared.ownChanges.changedName(old.name, in: old.folderKey)
                let times = FolderTimes(of: [old.folder])
                try Self.removeTree(old.name, in: old.folder)
                keepTimes(times, view: view)
                if let promise, !readOn { shared.promises.content.forget(version.item, number: promise) }  // its record goes with it
                return (.applied, [.name(.deleted(wasReference: wasReference), old.name, inFolder: old.folder, item: item)])
            }
        }
    }

    /// Whether the file at `place` is open through a mount of this daemon's (one look at its
    /// descriptors, made only for a promised file being removed).
    private static func isOpen(_ place: Located) -> Bool {
        var st = stat()
        return fstatat(place.folder, place.name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0 && Filesystem.holdsOpen(BackingKey(st))
    }

    /// Starts the whole download of the promised file at `place` (not waited for): readers
    /// holding it open read on once it is removed; the download's end drops its record.
    private func downloadBeforeRemoval(_ place: Located) {
        let fd = openat(place.folder, place.name.cString, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let item = ItemAttributes.id(ofDescriptor: fd)?.rawValue ?? 0
        let problems = shared.problemSink
        shared.promises.begin(PendingRead(whole: { error in
            if let error { problems("sync: item \(item), removed by another machine while open here, could not be downloaded for its readers: \(error)") }
        }), fd: fd)
    }

    /// Whether `place` is a folder with something in it.
    private static func holdsAnything(_ place: Located) -> Bool {
        let fd = openat(place.folder, place.name.cString, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return false }
        guard let listing = fdopendir(fd) else {
            close(fd)
            return false
        }
        defer { closedir(listing) }
        while let entry = readdir(listing) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name != [46] && name != [46, 46] { return true }
        }
        return false
    }

    /// The attributes of what is at `place` now (none read: zeroes).
    private static func attributes(of place: Located) -> stat {
        var st = stat()
        if fstatat(place.folder, place.name.cString, &st, AT_SYMLINK_NOFOLLOW) != 0 { st = stat() }
        return st
    }

    /// Removes `name` in `folder`, with everything under it when it is a folder.
    static func removeTree(_ name: FileName, in folder: Int32) throws(DocfsError) {
        if unlinkat(folder, name.cString, 0) == 0 { return }
        guard errno == EISDIR || errno == EPERM else { throw DocfsError.errno("removing \(name)") }
        let fd = openat(folder, name.cString, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.errno("opening \(name) to remove it") }
        guard let listing = fdopendir(dup(fd)) else {
            close(fd)
            throw DocfsError.errno("listing \(name) to remove it")
        }
        var children: [FileName] = []
        while let entry = readdir(listing) {
            let child = withUnsafeBytes(of: entry.pointee.d_name) { FileName(bytes: Array($0.prefix { $0 != 0 })) }
            if child != "." && child != ".." { children.append(child) }
        }
        closedir(listing)
        defer { close(fd) }
        for child in children { try removeTree(child, in: fd) }
        try check(unlinkat(folder, name.cString, AT_REMOVEDIR))
    }

    static func timespec(_ seconds: Double) -> Glibc.timespec { Glibc.timespec(seconds: seconds) }
}

/// A place in the store, opened: its folder's descriptor and its name there.
struct Located {
    let folder: Int32
    let folderKey: BackingKey
    let name: FileName

    /// The place `place` is (its folder must be here).
    init(place: StorePlace, paths: StorePaths) throws(DocfsError) {
        let slash = place.path.lastIndex(of: "/")!
        let parent = StorePlace(container: place.container, scope: place.scope, path: String(place.path[..<slash]))
        try self.init(folder: paths.openPlace(parent), name: FileName(String(place.path[place.path.index(after: slash)...])),
                      what: "\(parent)")
    }

    /// Where `version` goes: in its parent folder (the scope's top for 0), under `name`.
    init(folderOf version: RemoteVersion, named name: String, sync: StoreSync) throws {
        guard let container = try? ContainerID(version.container), let scope = Scope(rawValue: version.scope), scope != .external else {
            throw StoreSyncError("item \(version.item) is in \(version.container) (\(version.scope)), which this store cannot hold")
        }
        let folder: StorePlace
        if version.parent == 0 {
            folder = StorePlace(container: container, scope: scope, path: "")
        } else {
            guard let parent = try sync.place(of: version.parent) else {
                throw StoreSyncError("item \(version.item) goes in folder \(version.parent), which is not on this machine yet")
            }
            folder = parent
        }
        try self.init(folder: sync.shared.paths.openPlace(folder), name: FileName(name), what: "\(folder)")
    }

    private init(folder: Int32, name: FileName, what: String) throws(DocfsError) {
        guard folder >= 0 else { throw DocfsError(.system(.noSuchFileOrDirectory), "the folder \(what) is not in the store") }
        var st = stat()
        guard fstat(folder, &st) == 0 else {
            Self.closeDescriptor(folder)
            throw DocfsError.errno("reading the folder \(what)")
        }
        self.folder = folder
        self.folderKey = BackingKey(st)
        self.name = name
    }

    func close() { Self.closeDescriptor(folder) }

    private static func closeDescriptor(_ fd: Int32) { _ = Glibc.close(fd) }
}
