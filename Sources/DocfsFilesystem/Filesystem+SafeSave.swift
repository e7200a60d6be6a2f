import CLinux
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Safe-saves keep identity (C3). Editors save by writing the new content into a new file and
/// putting it in the document's place: a rename over it (sed -i, python's os.replace, gedit,
/// LibreOffice), a RENAME_EXCHANGE, or renaming the document away to a backup name and creating
/// the new file under its name (vim, emacs). docfs treats each as one *replace* of the
/// document: the new file takes the document's item id and user attributes (those it did not
/// set itself) and the next version number, and the superseded file is kept as the previous
/// version (without copying when it leaves the namespace).
extension Filesystem {
    /// One backing file taking part in a replace.
    struct ReplaceSide {
        let fd: Int32  // O_PATH
        let st: stat
        let item: ItemID
    }

    /// Opens `name` in `directory` for a replace when it is a regular file with one link.
    func replaceSide(in directory: Node, name: FileName) -> ReplaceSide? {
        replaceSide(inDirectory: directory.fd, name: name)
    }

    func replaceSide(inDirectory directoryFD: Int32, name: FileName) -> ReplaceSide? {
        let fd = openat(directoryFD, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_nlink == 1 else {
            close(fd)
            return nil
        }
        let item = nodes.known(key: BackingKey(st))?.item ?? identity.item(of: fd, st)
        guard !item.isDerived else {
            close(fd)
            return nil
        }
        return ReplaceSide(fd: fd, st: st, item: item)
    }

    /// rename(2) over an existing file, or RENAME_EXCHANGE of two files, where one side is a
    /// file made moments ago through the mount: the rename, done as a replace. Nil when it is
    /// not a safe-save (the caller renames as usual); else the nodes whose item ids changed
    /// (and with them attributes), for the kernel to forget their attributes.
    func renameAsReplace(from: Node, name: FileName, to: Node, newName: FileName, flags: UInt32, caller: Caller) throws(DocfsError) -> [NodeID]? {
        guard flags & DOCFS_RENAME_NOREPLACE == 0, let source = replaceSide(in: from, name: name) else { return nil }
        defer { close(source.fd) }
        guard let target = replaceSide(in: to, name: newName) else { return nil }
        defer { close(target.fd) }
        guard source.item != target.item else { return nil }
        let exchange = flags & DOCFS_RENAME_EXCHANGE != 0
        let rename = { () throws(DocfsError) in
            try check(docfs_renameat2(from.fd, name.cString, to.fd, newName.cString, flags))
        }
        if safeSaves.isFresh(BackingKey(source.st)) {
            // The new content (source) goes where the document (target) was.
            return try replace(document: target, with: source, keepingOldAs: exchange ? source.item : nil, caller: caller, by: rename)
        }
        if exchange && safeSaves.isFresh(BackingKey(target.st)) {
            return try replace(document: source, with: target, keepingOldAs: target.item, caller: caller, by: rename)
        }
        return nil
    }

    /// A file created where a document was renamed away moments ago (vim's and emacs's backup
    /// step): the new file becomes the document, and the renamed file (the backup) a new item.
    /// Answers the id the new file takes, nil when this create is not such a save.
    func takeOverVacatedDocument(_ vacated: SafeSaveTracker.Vacated, createdIn directory: Node, name: FileName, newFile fd: Int32,
                                 caller: Caller) -> ItemID? {
        guard vacated.newDirectory == directory.key, !vacated.isReference else { return nil }
        guard let backup = replaceSide(in: directory, name: vacated.newName) else { return nil }
        defer { close(backup.fd) }
        guard backup.item == vacated.item else { return nil }
        // Ended by the create once the new file is recorded (or at once, if this fails).
        safeSaves.beginTakeover(vacated.item)
        do throws(DocfsError) {
            var st = stat()
            try check(fstat(fd, &st))
            let newSide = ReplaceSide(fd: fd, st: st, item: vacated.item)
            let backupItem = try identity.allocator.allocate()
            try keepAsPrevious(document: vacated.item, oldContent: backup, staysInPlace: true, caller: caller)
            try ItemAttributes.setID(backupItem, onDescriptor: backup.fd)
            try ItemAttributes.setVersion(1, onDescriptor: backup.fd)
            nodes.known(key: BackingKey(backup.st))?.retag(backupItem)
            deliver(.name(.attributes, vacated.newName, in: directory, item: backupItem))
            try carryOver(document: vacated.item, from: backup, to: newSide, caller: caller)
            return vacated.item
        } catch {
            safeSaves.endTakeover(vacated.item)
            return nil  // the create goes on as an ordinary one
        }
    }

    /// Makes `newContent` the content of `document`, by `perform` (the rename that puts it in
    /// place). With `keepingOldAs`, the superseded file stays in the namespace (an exchange) as
    /// that item; otherwise it leaves it, and lives on as the kept version.
    func replace(document: ReplaceSide, with newContent: ReplaceSide, keepingOldAs oldItem: ItemID?,
                         caller: Caller, by perform: () throws(DocfsError) -> Void) throws(DocfsError) -> [NodeID] {
        try keepAsPrevious(document: document.item, oldContent: document, staysInPlace: oldItem != nil, caller: caller)
        let version = max(ItemAttributes.version(ofDescriptor: document.fd), 1)
        do throws(DocfsError) {
            try carryOver(document: document.item, from: document, to: newContent, caller: caller)
            if let oldItem {
                try ItemAttributes.setID(oldItem, onDescriptor: document.fd)
                try ItemAttributes.setVersion(1, onDescriptor: document.fd)
            }
            try perform()
        } catch {
            // Undone: each file keeps the identity it had.
            reporting("give the new content of item \(document.item) its identity back after a failed replace") { () throws(DocfsError) in
                try ItemAttributes.setID(newContent.item, onDescriptor: newContent.fd)
                try ItemAttributes.setVersion(max(ItemAttributes.version(ofDescriptor: newContent.fd), 1), onDescriptor: newContent.fd)
            }
            reporting("give item \(document.item) its identity back after a failed replace") { () throws(DocfsError) in
                try ItemAttributes.setID(document.item, onDescriptor: document.fd)
                try ItemAttributes.setVersion(version, onDescriptor: document.fd)
            }
            store.versions.remove(document.item, version: version)
            throw error
        }
        var retagged: [NodeID] = []
        if let node = nodes.known(key: BackingKey(newContent.st)) {
            node.retag(document.item)
            retagged.append(node.id)
        }
        if let oldItem, let node = nodes.known(key: BackingKey(document.st)) {
            node.retag(oldItem)
            retagged.append(node.id)
        } else if oldItem == nil {
            nodes.known(key: BackingKey(document.st))?.markSuperseded()
        }
        return retagged
    }

    /// Keeps the file `oldContent` (the document's current content) as its previous version:
    /// the file itself when it leaves the namespace, a copy when it stays (as a backup or the
    /// other side of an exchange), so later changes to it do not reach the version.
    private func keepAsPrevious(document: ItemID, oldContent: ReplaceSide, staysInPlace: Bool, caller: Caller) throws(DocfsError) {
        let version = max(ItemAttributes.version(ofDescriptor: oldContent.fd), 1)
        sessions.keptElsewhere(document)
        let record = VersionRecord(version: version, kind: .previous, modified: WriteSessions.seconds(oldContent.st.st_mtim),
                                   kept: WriteSessions.now(), size: Int64(oldContent.st.st_size),
                                   author: sessions.author(of: document, version: version))
        if staysInPlace {
            let fd = Glibc.open("/proc/self/fd/\(oldContent.fd)", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw DocfsError.errno("opening item \(document) to keep version \(version)") }
            defer { close(fd) }
            try store.versions.keepCopy(of: fd, item: document, record: record)
        } else {
            try store.versions.keepFile(oldContent.fd, item: document, record: record)
        }
        store.versions.prune(document, now: WriteSessions.now())
    }

    /// Gives `newContent` the document's id, its next version number, and the user attributes
    /// of the old content that the new file does not have.
    private func carryOver(document: ItemID, from oldContent: ReplaceSide, to newContent: ReplaceSide, caller: Caller) throws(DocfsError) {
        let version = max(ItemAttributes.version(ofDescriptor: oldContent.fd), 1)
        for name in ExtendedAttributeCopy.userNames(of: oldContent.fd) where !name.hasPrefix(ExtendedAttributePolicy.docfsPrefix)
            || ExtendedAttributePolicy.userWritableDocfsNames.contains(name) {
            ExtendedAttributeCopy.copyIfMissing(name, from: oldContent.fd, to: newContent.fd)
        }
        let next = store.versions.nextSaveNumber(of: document, after: version)
        try ItemAttributes.setID(document, onDescriptor: newContent.fd)
        try ItemAttributes.setVersion(next, onDescriptor: newContent.fd)
        sessions.noteAuthor(of: document, version: next, caller: caller)
    }
}

/// Copying user attributes from one backing file to another (O_PATH descriptors).
package enum ExtendedAttributeCopy {
    package static func userNames(of fd: Int32) -> [String] {
        let path = "/proc/self/fd/\(fd)"
        var buffer = [CChar](repeating: 0, count: 65536)
        let n = docfs_listxattr(path, &buffer, buffer.count)
        guard n > 0 else { return [] }
        return buffer[0..<n].split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
            .filter { $0.hasPrefix("user.") }
    }

    /// Copies attribute `name` unless the target has it already.
    static func copyIfMissing(_ name: String, from source: Int32, to target: Int32) {
        var value = [UInt8](repeating: 0, count: ExtendedAttributePolicy.maximumValueSize)
        let n = value.withUnsafeMutableBytes { docfs_fd_getxattr(source, name, $0.baseAddress, $0.count) }
        guard n >= 0 else { return }
        _ = value.withUnsafeBytes { docfs_fd_setxattr(target, name, $0.baseAddress, n, DOCFS_XATTR_CREATE) }
    }
}
