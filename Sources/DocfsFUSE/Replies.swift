import CFuse
import DocfsCore
import DocfsFilesystem
#if canImport(Glibc)
import Glibc
#endif

/// Turning results into libfuse replies.
extension BridgeContext {
    /// Answers a failed request with the errno its error maps to (EIO, logged, for errors
    /// that are not DocfsErrors).
    func fail(_ req: fuse_req_t?, _ error: any Error, _ operation: StaticString) {
        fuse_reply_err(req, ErrnoBoundary.errno(for: error, operation: operation, logger: logger))
    }

    func entryParam(_ entry: Entry) -> fuse_entry_param {
        var param = fuse_entry_param()
        param.ino = fuse_ino_t(entry.node)
        param.generation = entry.generation
        param.attr = entry.attributes
        param.attr_timeout = entry.cacheable ? filesystem.cachePolicy.attributeTimeout : 0
        param.entry_timeout = entry.cacheable ? filesystem.cachePolicy.entryTimeout : 0
        return param
    }

    func replyEntry(_ req: fuse_req_t?, _ entry: Entry) {
        var param = entryParam(entry)
        if fuse_reply_entry(req, &param) != 0 {
            // The request was interrupted: the kernel did not take the lookup.
            filesystem.forget(entry.node, count: 1)
        }
    }

    /// Answers that `parent` has no such name. The kernel keeps the miss for the cache policy's
    /// time, but not in docfs's virtual folders, whose names come and go with no change the
    /// kernel is told of (a thumbnail made a moment later).
    func replyNegativeEntry(_ req: fuse_req_t?, in parent: fuse_ino_t) {
        var param = fuse_entry_param()
        param.ino = 0
        param.entry_timeout = filesystem.isCacheable(parent) ? filesystem.cachePolicy.negativeTimeout : 0
        fuse_reply_entry(req, &param)
    }

    func replyAttributes(_ req: fuse_req_t?, _ st: stat, of node: NodeID) {
        var st = st
        fuse_reply_attr(req, &st, filesystem.isCacheable(node) ? filesystem.cachePolicy.attributeTimeout : 0)
    }

    func replyValue(_ req: fuse_req_t?, _ value: AttributeValue) {
        switch value {
        case .size(let n):
            fuse_reply_xattr(req, n)
        case .bytes(let bytes):
            bytes.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
        }
    }

    /// An open for writing that docfs wants to serve itself (a rewrite of a big file saves
    /// only what it overwrites), of a file whose open files are all passed through and all
    /// closed already: waits a moment for their releases, which the kernel sends after
    /// close(2) returns, so that this open is not passed through too (the kernel takes no
    /// mix of the two on one file), which would make its session keep a whole copy. A file
    /// still open elsewhere is not waited for.
    func awaitReleasesBeforeRewrite(of node: NodeID, flags: Int32) {
        guard flags & O_ACCMODE != O_RDONLY, flags & (O_TRUNC | O_APPEND) == 0 else { return }
        guard passthrough.awaitsOnlyReleases(node), filesystem.rewriteKeepsADelta(node) else { return }
        _ = passthrough.awaitLastRelease(of: node, timeout: .milliseconds(250))
    }

    /// The backing id for an open `file` of `node`: nil when it is served through docfs.
    func acquireBacking(_ node: NodeID, _ file: OpenFile) throws(DocfsError) -> Int32? {
        let backing = try passthrough.acquire(node, handle: file.handle, eligible: file.mayPassThrough,
                                              withPathDescriptor: { (register) throws(DocfsError) in
                                                  try filesystem.withPathDescriptor(of: node, register)
                                              },
                                              openBacking: { () throws(DocfsError) in try filesystem.openBacking(node) })
        if backing != nil { filesystem.passedThrough(file.handle) }
        return backing
    }

    /// Gives back an open file's share of its node's backing file, then closes it.
    func release(_ handle: UInt64) {
        passthrough.release(handle)
        filesystem.release(handle)
    }

    func fileInfo(_ fi: UnsafeMutablePointer<fuse_file_info>?, _ file: OpenFile) {
        guard let fi else { return }
        fi.pointee.fh = file.handle
        docfs_fi_set_direct_io(fi, file.directIO ? 1 : 0)
        docfs_fi_set_keep_cache(fi, file.keepCache ? 1 : 0)
        docfs_fi_set_noflush(fi, file.needsFlush ? 0 : 1)
    }
}

/// The caller of a request, from the kernel's request context.
func caller(of req: fuse_req_t?) -> Caller {
    let ctx = fuse_req_ctx(req)!.pointee
    return Caller(uid: ctx.uid, gid: ctx.gid, pid: ctx.pid)
}

/// A name argument, as the bytes the kernel sent.
@inline(__always)
func fileName(_ name: UnsafePointer<CChar>?) -> FileName { FileName(cString: name!) }

/// An xattr name argument (xattr names are text).
@inline(__always)
func string(_ name: UnsafePointer<CChar>?) -> String { String(cString: name!) }
