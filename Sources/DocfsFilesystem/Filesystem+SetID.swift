import CLinux
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The kernel's rule for set-id bits on writes: when someone without CAP_FSETID (any caller
/// but root) writes to, truncates, allocates in or copies into a regular file, its set-user-id
/// bit goes, and its set-group-id bit too when group-execute is set or the caller is not in the
/// file's group. docfs writes as its own user, so the store would keep them; and docfs asks
/// the kernel for FUSE_HANDLE_KILLPRIV_V2 (which spares every write a round trip for
/// security.capability), leaving the rule to docfs. So docfs applies it for the caller, and
/// never hands a file with such bits to the kernel for passthrough, so every write to one
/// comes through here.
extension Filesystem {
    /// Whether a write may drop set-id bits of a file with `mode`, for some caller: files with
    /// such bits are served through docfs, never by passthrough.
    public static func hasSetIDBits(_ mode: mode_t) -> Bool { mode & (S_ISUID | S_ISGID) != 0 }

    /// The bits of the file `st` describes that a write by `caller` removes.
    static func setIDBitsDropped(from st: stat, by caller: Caller) -> mode_t {
        guard caller.uid != 0, st.st_mode & S_IFMT == S_IFREG else { return 0 }
        var bits: mode_t = 0
        if st.st_mode & S_ISUID != 0 { bits |= S_ISUID }
        if st.st_mode & S_ISGID != 0 && (st.st_mode & S_IXGRP != 0 || !caller.isMember(ofGroup: st.st_gid)) {
            bits |= S_ISGID
        }
        return bits
    }

    /// Drops the set-id bits a write by `caller` to the open file `handle` drops.
    func dropSetIDBitsBeforeWrite(_ handle: UInt64, caller: Caller) throws(DocfsError) {
        guard caller.uid != 0 else { return }
        try dropSetIDBits(ofOpen: backingDescriptor(of: handle), for: caller)
    }

    func dropSetIDBits(ofOpen fd: Int32, for caller: Caller) throws(DocfsError) {
        var st = stat()
        try check(fstat(fd, &st))
        let bits = Self.setIDBitsDropped(from: st, by: caller)
        guard bits != 0 else { return }
        try check(fchmod(fd, st.st_mode & 0o7777 & ~bits))
        st.st_mode &= ~bits
        ownChanges.knowPermissions(st)
    }

    /// The same for a file reached by its node (a truncate by path).
    func dropSetIDBits(of node: Node, for caller: Caller) throws(DocfsError) {
        guard caller.uid != 0, node.type == S_IFREG else { return }
        var st = stat()
        try check(fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH))
        let bits = Self.setIDBitsDropped(from: st, by: caller)
        guard bits != 0 else { return }
        try check(chmod(node.procPath, st.st_mode & 0o7777 & ~bits))
        st.st_mode &= ~bits
        ownChanges.knowPermissions(st)
    }
}

extension Caller {
    /// Whether the calling process is in group `gid` (primary or supplementary), as
    /// /proc/PID/status says; only asked in the rare case of a set-group-id file without
    /// group-execute.
    func isMember(ofGroup gid: gid_t) -> Bool {
        if gid == self.gid { return true }
        guard let file = fopen("/proc/\(pid)/status", "r") else { return false }
        defer { fclose(file) }
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let text = String(cString: line)
            guard text.hasPrefix("Groups:") else { continue }
            return text.dropFirst("Groups:".count).split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
                .contains { gid_t($0) == gid }
        }
        return false
    }
}
