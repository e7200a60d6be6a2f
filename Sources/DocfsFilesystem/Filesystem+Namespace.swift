import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Making, removing and renaming names.
extension Filesystem {
    public func makeDirectory(parent: NodeID, name: FileName, mode: mode_t, caller: Caller) throws(DocfsError) -> Entry {
        let directory = try nodes.node(parent)
        try refuseTakingContainerName(parent, name)
        return try changing([(directory.item, .write)], touching: .name(name, in: directory), by: caller) { () throws(DocfsError) in
            try changingName(name, in: directory) { mkdirat(directory.fd, name.cString, mode & 0o7777) }
            return try made(name, in: directory, caller: caller, mode: nil)
        }
    }

    /// mknod: regular files, fifos, sockets and (for root) device nodes.
    public func makeNode(parent: NodeID, name: FileName, mode: mode_t, device: dev_t, caller: Caller) throws(DocfsError) -> Entry {
        let directory = try nodes.node(parent)
        try refuseTakingContainerName(parent, name)
        return try changing([(directory.item, .write)], touching: .name(name, in: directory), by: caller) { () throws(DocfsError) in
            try changingName(name, in: directory) { mknodat(directory.fd, name.cString, mode, device) }
            return try made(name, in: directory, caller: caller, mode: mode)
        }
    }

    public func makeSymbolicLink(target: FileName, parent: NodeID, name: FileName, caller: Caller) throws(DocfsError) -> Entry {
        let directory = try nodes.node(parent)
        try refuseTakingContainerName(parent, name)
        try refuseEscapingLink(target, in: directory, name: name)
        return try changing([(directory.item, .write)], touching: .name(name, in: directory), by: caller) { () throws(DocfsError) in
            try changingName(name, in: directory) { symlinkat(target.cString, directory.fd, name.cString) }
            return try made(name, in: directory, caller: caller, mode: nil)
        }
    }

    /// Makes or removes `name` in `directory` with `call` (a system call answering 0, or -1 and
    /// errno), telling the store watcher first: the event may reach it before the call returns.
    private func changingName(_ name: FileName, in directory: Node, _ call: () -> Int32) throws(DocfsError) {
        ownChanges.changedName(name, in: directory.key)
        guard call() == 0 else {
            let e = Glibc.errno
            ownChanges.withdrawName(name, in: directory.key)
            throw DocfsError.system(e)
        }
    }

    /// What follows making `name` in `directory` (a folder, node or link): the caller owns it,
    /// the kernel gets its entry, and the record says it was created.
    private func made(_ name: FileName, in directory: Node, caller: Caller, mode: mode_t?) throws(DocfsError) -> (Entry, [ChangeRecord]) {
        try giveToCaller(in: directory, name: name, caller: caller, mode: mode)
        let made = try entry(in: directory, name: name)
        return (made, [.name(.created, name, in: directory, item: try nodes.node(made.node).item)])
    }

    /// A hard link: the new name reaches the same node.
    public func link(_ id: NodeID, newParent: NodeID, newName: FileName) throws(DocfsError) -> Entry {
        let node = try nodes.node(id)
        let directory = try nodes.node(newParent)
        try refuseTakingContainerName(newParent, newName)
        if node.isReference {
            throw DocfsError(.refused,
                             "\(newName): a reference cannot be hard-linked (link the original, or pick it again)")
        }
        let touched = TouchedPlaces(names: [(directory.key, newName)], files: [node.key])
        return try changing([(directory.item, .write), (node.item, .metadata)], touching: touched) { () throws(DocfsError) in
            // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; a daemon without it links through /proc.
            try changingName(newName, in: directory) {
                if linkat(node.fd, "", directory.fd, newName.cString, DOCFS_AT_EMPTY_PATH) == 0 { return 0 }
                guard errno == ENOENT || errno == EPERM else { return -1 }
                return linkat(AT_FDCWD, node.procPath, directory.fd, newName.cString, AT_SYMLINK_FOLLOW)
            }
            var st = stat()
            try check(fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
            nodes.reference(node)
            return (Entry(node: node.id, generation: generation, attributes: st), [.name(.created, newName, in: directory, item: node.item)])
        }
    }

    public func unlink(parent: NodeID, name: FileName) throws(DocfsError) {
        if let container = keyValueFolder(parent) { return try unlinkKeyValueFile(name, in: container) }
        let directory = try nodes.node(parent)
        try refuseControlArea(parent, name)
        try refuseChangingContainerFolder(parent, name)
        try changing(claims(writing: [directory], deleting: name, in: directory), touching: .name(name, in: directory)) { () throws(DocfsError) in
            let gone = knownNode(at: name, in: directory)
            let victim = gone?.type == S_IFREG ? gone : nil
            let wasReference = victim?.isReference ?? (reference(at: name, in: directory) != nil)
            try keepDeltasWhole(before: name, in: directory)
            try changingName(name, in: directory) { unlinkat(directory.fd, name.cString, 0) }
            gone?.found(at: nil)  // gone by docfs's hand: no writer raced for it
            var change = ChangeRecord.name(.deleted(wasReference: wasReference), name, in: directory, item: victim?.item)
            change.node = victim
            return ((), [change])
        }
    }

    public func removeDirectory(parent: NodeID, name: FileName) throws(DocfsError) {
        let directory = try nodes.node(parent)
        try refuseControlArea(parent, name)
        try refuseChangingContainerFolder(parent, name)
        try changing(claims(writing: [directory], deleting: name, in: directory), touching: .name(name, in: directory)) { () throws(DocfsError) in
            try changingName(name, in: directory) { unlinkat(directory.fd, name.cString, AT_REMOVEDIR) }
            return ((), [.name(.deleted(wasReference: false), name, in: directory, item: nil)])
        }
    }

    /// rename(2) and renameat2(2): `flags` may hold RENAME_NOREPLACE or RENAME_EXCHANGE. A
    /// rename that completes a safe-save is a replace (see Filesystem+SafeSave). Answers the
    /// nodes whose item ids changed (the kernel must forget their cached attributes).
    @discardableResult
    public func rename(parent: NodeID, name: FileName, newParent: NodeID, newName: FileName, flags: UInt32,
                       caller: Caller) throws(DocfsError) -> [NodeID] {
        if flags & ~(DOCFS_RENAME_NOREPLACE | DOCFS_RENAME_EXCHANGE) != 0 { throw DocfsError.system(EINVAL) }
        if let container = keyValueFolder(parent) {
            // Keys move only among the folder's files.
            guard newParent == parent else { throw DocfsError.system(EXDEV) }
            try renameKeyValueFile(name, to: newName, in: container, flags: flags)
            return []
        }
        if keyValueFolder(newParent) != nil { throw DocfsError.system(EXDEV) }
        let from = try nodes.node(parent)
        let to = try nodes.node(newParent)
        try refuseControlArea(parent, name)
        try refuseControlArea(newParent, newName)
        try refuseChangingContainerFolder(parent, name)
        try refuseChangingContainerFolder(newParent, newName)
        try refuseWorkingFileName(newName)
        // A save through a reference touches the original's place too (added when known).
        var touched = TouchedPlaces(names: [(folder: from.key, name: name), (folder: to.key, name: newName)])
        // A move claims both ends and both folders.
        var claims = self.claims(writing: [from, to], deleting: newName, in: to)
        if let moved = itemAt(name, in: from) { claims.append((moved, .move)) }
        return try changing(claims, touching: touched, by: caller) { () throws(DocfsError) in
            // Each side moves once (twice for an exchange); noted before, so the watcher
            // never sees the events first.
            let events = flags & DOCFS_RENAME_EXCHANGE != 0 ? 2 : 1
            ownChanges.changedName(name, in: from.key, events: events)
            ownChanges.changedName(newName, in: to.key, events: events)
            // Whatever the target name held leaves by docfs's hand (an exchange moves it).
            if flags & DOCFS_RENAME_EXCHANGE == 0 { knownNode(at: newName, in: to)?.found(at: nil) }
            let exchange = flags & DOCFS_RENAME_EXCHANGE != 0
            if !exchange, let original = reference(at: newName, in: to), reference(at: name, in: from) == nil {
                // A save onto a reference saves the original (in its own place). The kernel
                // moved the saved file's node to the reference's name: it must look again.
                // (A reference renamed over another just takes its name: references carry no
                // content to save.)
                let (retagged, saved) = try replaceOriginal(original, from: from, name: name, caller: caller)
                touched.names.append(saved)
                var forget = KernelInvalidations()
                forget.entries = [(to.id, newName)]
                invalidateAfterReply(forget)
                return (retagged, [])
            }
            if let retagged = try renameAsReplace(from: from, name: name, to: to, newName: newName, flags: flags, caller: caller) {
                return (retagged, [.name(.replaced(from: name, inFolder: from.fd, exchange: exchange), newName, in: to, item: nil)])
            }
            try check(docfs_renameat2(from.fd, name.cString, to.fd, newName.cString, flags))
            let moved = ChangeRecord.name(.moved(from: name, inFolder: from.fd, exchange: exchange), newName, in: to, item: itemAt(newName, in: to))
            noteMoved(to: newName, in: to)
            if flags & DOCFS_RENAME_EXCHANGE != 0 { noteMoved(to: name, in: from) }
            if flags & DOCFS_RENAME_EXCHANGE == 0, from.key == to.key, SafeSaveTracker.isBackupName(newName, of: name) {
                // Perhaps an editor's backup step: the new content may follow under the old name.
                if let original = reference(at: newName, in: to) {
                    safeSaves.noteRenamedAway(item: original, isReference: true, from: from.key, name: name, to: to.key, newName: newName)
                } else if let moved = replaceSide(in: to, name: newName) {
                    safeSaves.noteRenamedAway(item: moved.item, from: from.key, name: name, to: to.key, newName: newName)
                    close(moved.fd)
                }
            }
            return ([], [moved])
        }
    }

    /// The control area's name at the root is docfs's: it cannot be renamed, replaced or removed.
    private func refuseControlArea(_ parent: NodeID, _ name: FileName) throws(DocfsError) {
        if parent == rootID && name == ControlArea.name {
            throw DocfsError(.system(.resourceBusy), "\(ControlArea.name) at the root is docfs's control area")
        }
    }

    /// The kernel's node of the file now at `name` in `directory`, if it knows it, learns its place.
    private func noteMoved(to name: FileName, in directory: Node) {
        knownNode(at: name, in: directory)?.found(at: Node.Place(directory: directory.key, name: name))
    }

    /// The content `name` in `directory` holds is about to go (its last name): when the newest
    /// version kept of its document is a delta of it (an append session's), that version is
    /// made whole first, or it would go with it (C4). Nothing to do for most files: one look
    /// at the document's kept versions. Only a regular file is opened to be read.
    private func keepDeltasWhole(before name: FileName, in directory: Node) throws(DocfsError) {
        let path = openat(directory.fd, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard path >= 0 else { return }
        defer { close(path) }
        var st = stat()
        guard fstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_nlink == 1,
              let item = ItemAttributes.id(ofDescriptor: path) else { return }
        let fd = Glibc.open("/proc/self/fd/\(path)", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.errno("opening item \(item) to keep its versions whole before it goes") }
        defer { close(fd) }
        _ = try store.versions.materializeNewestPrefix(of: item, from: fd)
    }

    /// The kernel's node of the file or folder at `name` in `directory`, if it knows it.
    private func knownNode(at name: FileName, in directory: Node) -> Node? {
        var st = stat()
        guard fstatat(directory.fd, name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        return nodes.known(key: BackingKey(st))
    }

    /// Claims for changing the folders `directories` and removing (or replacing) what `name`
    /// in `directory` holds.
    func claims(writing directories: [Node], deleting name: FileName, in directory: Node) -> [(ItemID, ClaimIntent)] {
        var claims = directories.map { ($0.item, ClaimIntent.write) }
        if let victim = itemAt(name, in: directory) { claims.append((victim, .delete)) }
        return claims
    }

    /// The item `name` in `directory` holds, if any: the kernel's node for it, else the id the
    /// store keeps (none is given here: claiming reads only).
    func itemAt(_ name: FileName, in directory: Node) -> ItemID? {
        // Most names the kernel asks to change are ones it knows: one stat finds them.
        var known = stat()
        guard fstatat(directory.fd, name.cString, &known, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        if let node = nodes.known(key: BackingKey(known)) { return node.item }
        let fd = openat(directory.fd, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        if let known = nodes.known(key: BackingKey(st)) { return known.item }
        let type = st.st_mode & S_IFMT
        if type == S_IFREG || type == S_IFDIR, let id = identity.existingID(of: fd, st) { return id }
        return .derived(fromBackingInode: UInt64(st.st_ino))
    }

    /// The owner and group a new item of `caller`'s gets, as a local filesystem gives them: the
    /// caller, and the caller's group unless the folder is setgid (the store already gave the
    /// folder's group then: gid_t.max leaves it). Nil when the daemon's own ids already fit.
    func ownership(for caller: Caller, in directory: Node) throws(DocfsError) -> (uid: uid_t, gid: gid_t)? {
        try ownership(for: caller, inFolder: directory.fd)
    }

    /// The same, for the folder `folderFD` (any descriptor of it).
    func ownership(for caller: Caller, inFolder folderFD: Int32) throws(DocfsError) -> (uid: uid_t, gid: gid_t)? {
        let me = Caller.daemon
        if caller.uid == me.uid && caller.gid == me.gid { return nil }
        var parent = stat()
        try check(fstatat(folderFD, "", &parent, DOCFS_AT_EMPTY_PATH))
        let inheritsGroup = parent.st_mode & S_ISGID != 0
        if caller.uid == me.uid && inheritsGroup { return nil }
        return (caller.uid, inheritsGroup ? gid_t.max : caller.gid)
    }

    /// Gives the item just made at `name` to the caller, never following a symlink there; on
    /// failure the item is removed again, so a refused create leaves nothing behind.
    func giveToCaller(in directory: Node, name: FileName, caller: Caller, mode: mode_t?) throws(DocfsError) {
        do throws(DocfsError) {
            guard let (uid, gid) = try ownership(for: caller, in: directory) else { return }
            try check(fchownat(directory.fd, name.cString, uid, gid, AT_SYMLINK_NOFOLLOW))
            // chown clears set-id bits of files: put back those the caller asked for.
            if let mode, mode & (S_ISUID | S_ISGID) != 0, mode & S_IFMT == S_IFREG {
                let fd = openat(directory.fd, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
                guard fd >= 0 else { throw DocfsError.system(Glibc.errno) }
                defer { close(fd) }
                try check(chmod("/proc/self/fd/\(fd)", mode & 0o7777))
            }
        } catch {
            let isDirectory = mode == nil && (try? entryType(in: directory, name: name)) == S_IFDIR
            unlinkat(directory.fd, name.cString, isDirectory ? AT_REMOVEDIR : 0)
            throw error
        }
    }

    private func entryType(in directory: Node, name: FileName) throws(DocfsError) -> mode_t {
        var st = stat()
        try check(fstatat(directory.fd, name.cString, &st, AT_SYMLINK_NOFOLLOW))
        return st.st_mode & S_IFMT
    }
}
