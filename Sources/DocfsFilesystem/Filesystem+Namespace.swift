import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Making, removing and renaming names.
extension Filesystem {
    public func makeDirectory(parent: NodeID, name: String, mode: mode_t, caller: Caller) throws(DocfsError) -> Entry {
        let directory = try nodes.node(parent)
        try check(mkdirat(directory.fd, name, mode & 0o7777))
        try giveToCaller(in: directory, name: name, caller: caller, mode: nil)
        return try entry(in: directory, name: name)
    }

    /// mknod: regular files, fifos, sockets and (for root) device nodes.
    public func makeNode(parent: NodeID, name: String, mode: mode_t, device: dev_t, caller: Caller) throws(DocfsError) -> Entry {
        let directory = try nodes.node(parent)
        try check(mknodat(directory.fd, name, mode, device))
        try giveToCaller(in: directory, name: name, caller: caller, mode: mode)
        return try entry(in: directory, name: name)
    }

    public func makeSymbolicLink(target: String, parent: NodeID, name: String, caller: Caller) throws(DocfsError) -> Entry {
        let directory = try nodes.node(parent)
        try check(symlinkat(target, directory.fd, name))
        try giveToCaller(in: directory, name: name, caller: caller, mode: nil)
        return try entry(in: directory, name: name)
    }

    /// A hard link: the new name reaches the same node.
    public func link(_ id: NodeID, newParent: NodeID, newName: String) throws(DocfsError) -> Entry {
        let node = try nodes.node(id)
        let directory = try nodes.node(newParent)
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; a daemon without it links through /proc.
        if linkat(node.fd, "", directory.fd, newName, DOCFS_AT_EMPTY_PATH) != 0 {
            guard errno == ENOENT || errno == EPERM else { throw DocfsError.system(errno) }
            try check(linkat(AT_FDCWD, node.procPath, directory.fd, newName, AT_SYMLINK_FOLLOW))
        }
        var st = stat()
        try check(fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
        nodes.reference(node)
        return Entry(node: node.id, generation: generation, attributes: st)
    }

    public func unlink(parent: NodeID, name: String) throws(DocfsError) {
        let directory = try nodes.node(parent)
        try check(unlinkat(directory.fd, name, 0))
    }

    public func removeDirectory(parent: NodeID, name: String) throws(DocfsError) {
        let directory = try nodes.node(parent)
        try check(unlinkat(directory.fd, name, AT_REMOVEDIR))
    }

    /// rename(2) and renameat2(2): `flags` may hold RENAME_NOREPLACE or RENAME_EXCHANGE.
    public func rename(parent: NodeID, name: String, newParent: NodeID, newName: String, flags: UInt32) throws(DocfsError) {
        if flags & ~(DOCFS_RENAME_NOREPLACE | DOCFS_RENAME_EXCHANGE) != 0 { throw DocfsError.system(EINVAL) }
        let from = try nodes.node(parent)
        let to = try nodes.node(newParent)
        try check(docfs_renameat2(from.fd, name, to.fd, newName, flags))
    }

    /// Makes a new item belong to the caller, as a local filesystem would when the caller
    /// creates it: owner is the caller, group is the caller's unless the folder is setgid (the
    /// store already gave the folder's group then). chown clears set-id bits, so `mode` puts
    /// them back on files created with them.
    func giveToCaller(in directory: Node, name: String, caller: Caller, mode: mode_t?) throws(DocfsError) {
        let me = Caller.daemon
        if caller.uid == me.uid && caller.gid == me.gid { return }  // already the store's owner
        var parent = stat()
        try check(fstatat(directory.fd, "", &parent, DOCFS_AT_EMPTY_PATH))
        let inheritsGroup = parent.st_mode & S_ISGID != 0
        let gid = inheritsGroup ? gid_t.max : caller.gid
        if caller.uid == me.uid && (inheritsGroup || caller.gid == me.gid) { return }
        try check(fchownat(directory.fd, name, caller.uid, gid, AT_SYMLINK_NOFOLLOW))
        if let mode, mode & (S_ISUID | S_ISGID) != 0, mode & S_IFMT == S_IFREG {
            try check(fchmodat(directory.fd, name, mode & 0o7777, 0))
        }
    }
}
