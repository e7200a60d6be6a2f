import CFuse
import CFusePassthrough
import DocfsCore
import DocfsFilesystem
#if canImport(Glibc)
import Glibc
#endif

/// The libfuse low-level operation table. Each callback converts its arguments, calls the
/// filesystem, and converts the answer into a reply; no filesystem logic lives here.
enum Operations {
    static func table() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.`init` = { userdata, conn in
            let ctx = BridgeContext.of(userdata: userdata)
            guard let conn else { return }
            // Read replies are spliced from the backing file to /dev/fuse (no copy through
            // docfs). Requests are not: splicing them costs a second syscall per request and
            // saves no copy, since the store's page cache copies from the pipe anyway.
            conn.pointee.want |= conn.pointee.capable & UInt32(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE)
            conn.pointee.want &= ~UInt32(FUSE_CAP_SPLICE_READ)
            // A spliced reply must fit a pipe, which grows to pipe-max-size (1 MiB) at most
            // without privileges; read requests are at most max_write long (max_pages), so keep
            // max_write one header page under it.
            conn.pointee.max_write = min(conn.pointee.max_write, UInt32(ctx.spliceableWriteSize))
            docfs_request_passthrough(ctx.passthrough.isEnabled ? 1 : 0)
            if ctx.writebackCache && conn.pointee.capable & UInt32(FUSE_CAP_WRITEBACK_CACHE) != 0 {
                conn.pointee.want |= UInt32(FUSE_CAP_WRITEBACK_CACHE)
            }
            ctx.logger.info("FUSE session started (protocol \(conn.pointee.proto_major).\(conn.pointee.proto_minor), capable \(String(conn.pointee.capable, radix: 16)), want \(String(conn.pointee.want, radix: 16)), max_write \(conn.pointee.max_write))")
        }
        ops.destroy = { userdata in
            BridgeContext.of(userdata: userdata).filesystem.forgetAll()
        }
        installNamespaceOperations(&ops)
        installFileOperations(&ops)
        installDirectoryOperations(&ops)
        installAttributeOperations(&ops)
        return ops
    }

    private static func installNamespaceOperations(_ ops: inout fuse_lowlevel_ops) {
        ops.lookup = { req, parent, name in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyEntry(req, try ctx.filesystem.lookup(parent: parent, name: fileName(name), caller: caller(of: req)))
            } catch let error as DocfsError where error.systemErrno == ENOENT {
                ctx.replyNegativeEntry(req, in: parent)
            } catch {
                ctx.fail(req, error, "lookup")
            }
        }
        ops.forget = { req, node, count in
            BridgeContext.of(req).filesystem.forget(node, count: count)
            fuse_reply_none(req)
        }
        ops.forget_multi = { req, count, forgets in
            let fs = BridgeContext.of(req).filesystem
            for i in 0..<count {
                let item = forgets![i]
                fs.forget(item.ino, count: item.nlookup)
            }
            fuse_reply_none(req)
        }
        ops.mkdir = { req, parent, name, mode in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyEntry(req, try ctx.filesystem.makeDirectory(parent: parent, name: fileName(name), mode: mode, caller: caller(of: req)))
            } catch { ctx.fail(req, error, "mkdir") }
        }
        ops.mknod = { req, parent, name, mode, device in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyEntry(req, try ctx.filesystem.makeNode(parent: parent, name: fileName(name), mode: mode, device: device, caller: caller(of: req)))
            } catch { ctx.fail(req, error, "mknod") }
        }
        ops.symlink = { req, target, parent, name in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyEntry(req, try ctx.filesystem.makeSymbolicLink(target: fileName(target), parent: parent, name: fileName(name), caller: caller(of: req)))
            } catch { ctx.fail(req, error, "symlink") }
        }
        ops.link = { req, node, newParent, newName in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyEntry(req, try ctx.filesystem.link(node, newParent: newParent, newName: fileName(newName)))
            } catch { ctx.fail(req, error, "link") }
        }
        ops.unlink = { req, parent, name in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.unlink(parent: parent, name: fileName(name))
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "unlink") }
        }
        ops.rmdir = { req, parent, name in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.removeDirectory(parent: parent, name: fileName(name))
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "rmdir") }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            let ctx = BridgeContext.of(req)
            do {
                let changed = try ctx.filesystem.rename(parent: parent, name: fileName(name), newParent: newParent,
                                                        newName: fileName(newName), flags: flags, caller: caller(of: req))
                ctx.kernel.forgetAttributes(of: changed)
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "rename") }
        }
        ops.readlink = { req, node in
            let ctx = BridgeContext.of(req)
            do {
                let target = try ctx.filesystem.readLink(node)
                fuse_reply_readlink(req, target.cString)
            } catch { ctx.fail(req, error, "readlink") }
        }
        // Sent only when the kernel does not check permissions itself (see
        // FUSEMount.Options.kernelChecksPermissions): answered by the store's own checks.
        ops.access = { req, node, mask in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.checkAccess(node, mask: mask)
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "access") }
        }
        ops.statfs = { req, _ in
            let ctx = BridgeContext.of(req)
            do {
                var sv = try ctx.filesystem.statistics()
                fuse_reply_statfs(req, &sv)
            } catch { ctx.fail(req, error, "statfs") }
        }
    }

    private static func installAttributeOperations(_ ops: inout fuse_lowlevel_ops) {
        ops.getattr = { req, node, fi in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyAttributes(req, try ctx.filesystem.attributes(of: node, handle: fi?.pointee.fh), of: node)
            } catch { ctx.fail(req, error, "getattr") }
        }
        ops.setattr = { req, node, attr, toSet, fi in
            let ctx = BridgeContext.of(req)
            do {
                let changes = Operations.attributeChanges(attr!.pointee, UInt32(bitPattern: toSet))
                ctx.replyAttributes(req, try ctx.filesystem.setAttributes(of: node, handle: fi?.pointee.fh, changes,
                                                                          caller: caller(of: req)), of: node)
            } catch { ctx.fail(req, error, "setattr") }
        }
        ops.getxattr = { req, node, name, size in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyValue(req, try ctx.filesystem.getExtendedAttribute(node, name: string(name), size: size))
            } catch { ctx.fail(req, error, "getxattr") }
        }
        ops.listxattr = { req, node, size in
            let ctx = BridgeContext.of(req)
            do {
                ctx.replyValue(req, try ctx.filesystem.listExtendedAttributes(node, size: size))
            } catch { ctx.fail(req, error, "listxattr") }
        }
        ops.setxattr = { req, node, name, value, size, flags in
            let ctx = BridgeContext.of(req)
            do {
                let bytes = size == 0 ? [] : Array(UnsafeRawBufferPointer(start: value, count: size))
                try ctx.filesystem.setExtendedAttribute(node, name: string(name), value: bytes, flags: flags)
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "setxattr") }
        }
        ops.removexattr = { req, node, name in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.removeExtendedAttribute(node, name: string(name))
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "removexattr") }
        }
    }

    /// FUSE_SET_ATTR_* bits and the attributes they select, as one AttributeChanges.
    static func attributeChanges(_ attr: stat, _ bits: UInt32) -> AttributeChanges {
        var changes = AttributeChanges()
        if bits & DOCFS_SET_ATTR_MODE != 0 { changes.mode = attr.st_mode }
        if bits & DOCFS_SET_ATTR_UID != 0 { changes.uid = attr.st_uid }
        if bits & DOCFS_SET_ATTR_GID != 0 { changes.gid = attr.st_gid }
        if bits & DOCFS_SET_ATTR_SIZE != 0 { changes.size = attr.st_size }
        if bits & DOCFS_SET_ATTR_ATIME_NOW != 0 {
            changes.accessTime = .now
        } else if bits & DOCFS_SET_ATTR_ATIME != 0 {
            changes.accessTime = .at(attr.st_atim)
        }
        if bits & DOCFS_SET_ATTR_MTIME_NOW != 0 {
            changes.modificationTime = .now
        } else if bits & DOCFS_SET_ATTR_MTIME != 0 {
            changes.modificationTime = .at(attr.st_mtim)
        }
        return changes
    }
}
