import CFuse
import CFusePassthrough
import DocfsCore
import DocfsFilesystem
#if canImport(Glibc)
import Glibc
#endif

extension Operations {
    static func installFileOperations(_ ops: inout fuse_lowlevel_ops) {
        ops.create = { req, parent, name, mode, fi in
            let ctx = BridgeContext.of(req)
            do {
                let (entry, file) = try ctx.filesystem.create(parent: parent, name: fileName(name), mode: mode,
                                                              flags: fi!.pointee.flags, caller: caller(of: req))
                var param = ctx.entryParam(entry)
                let replied: Int32
                let backing: Int32?
                do {
                    backing = try ctx.acquireBacking(entry.node, file)
                } catch {
                    ctx.filesystem.forget(entry.node, count: 1)
                    ctx.filesystem.release(file.handle)
                    throw error
                }
                if let backing {
                    replied = docfs_reply_create_backed(req, &param, file.handle, 0, backing)
                } else {
                    ctx.fileInfo(fi, file)
                    replied = fuse_reply_create(req, &param, fi)
                }
                if replied != 0 {
                    ctx.filesystem.forget(entry.node, count: 1)
                    ctx.release(file.handle)
                }
            } catch { ctx.fail(req, error, "create") }
        }
        ops.open = { req, node, fi in
            let ctx = BridgeContext.of(req)
            ctx.awaitReleasesBeforeRewrite(of: node, flags: fi!.pointee.flags)
            do {
                let file = try ctx.filesystem.open(node, flags: fi!.pointee.flags, caller: caller(of: req))
                let replied: Int32
                let backing: Int32?
                do {
                    backing = try ctx.acquireBacking(node, file)
                } catch {
                    ctx.filesystem.release(file.handle)
                    throw error
                }
                if file.needsSight && backing != nil {
                    do {
                        try ctx.filesystem.lostSight(file.handle)
                    } catch {
                        ctx.release(file.handle)
                        throw error
                    }
                }
                if let backing {
                    replied = docfs_reply_open_backed(req, file.handle, file.needsFlush ? 0 : DOCFS_FOPEN_NOFLUSH, backing)
                } else {
                    ctx.fileInfo(fi, file)
                    replied = fuse_reply_open(req, fi)
                }
                if replied != 0 { ctx.release(file.handle) }
            } catch { ctx.fail(req, error, "open") }
        }
        ops.read = { req, _, size, offset, fi in
            let ctx = BridgeContext.of(req)
            let handle = fi!.pointee.fh
            if Filesystem.mayWaitForContent(handle) { return ctx.readWhenPresent(req!, handle: handle, size: size, offset: offset) }
            var data = docfs_fd_bufvec(ctx.filesystem.backingDescriptor(of: fi!.pointee.fh), size, offset)
            fuse_reply_data(req, &data, FUSE_BUF_SPLICE_MOVE)
        }
        ops.write_buf = { req, _, input, offset, fi in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.prepareWrite(fi!.pointee.fh, at: offset, length: fuse_buf_size(input), caller: caller(of: req))
            } catch {
                return ctx.fail(req, error, "write")
            }
            let n = docfs_write_bufvec_to_fd(input, ctx.filesystem.backingDescriptor(of: fi!.pointee.fh), offset)
            if n < 0 {
                fuse_reply_err(req, Int32(-n))
            } else {
                fuse_reply_write(req, n)
            }
        }
        ops.flush = { req, _, fi in
            let ctx = BridgeContext.of(req)
            ctx.passthrough.flushed(fi!.pointee.fh)
            do {
                try ctx.filesystem.flush(fi!.pointee.fh)
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "flush") }
        }
        ops.release = { req, _, fi in
            BridgeContext.of(req).release(fi!.pointee.fh)
            fuse_reply_err(req, 0)
        }
        ops.fsync = { req, _, dataOnly, fi in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.fsync(fi!.pointee.fh, dataOnly: dataOnly != 0)
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "fsync") }
        }
        ops.fallocate = { req, _, mode, offset, length, fi in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.allocate(fi!.pointee.fh, mode: mode, offset: offset, length: length, caller: caller(of: req))
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "fallocate") }
        }
        ops.lseek = { req, _, offset, whence, fi in
            let ctx = BridgeContext.of(req)
            do {
                fuse_reply_lseek(req, try ctx.filesystem.seek(fi!.pointee.fh, offset: offset, whence: whence))
            } catch { ctx.fail(req, error, "lseek") }
        }
        ops.copy_file_range = { req, _, inOffset, inFile, _, outOffset, outFile, length, flags in
            let ctx = BridgeContext.of(req)
            do {
                let n = try ctx.filesystem.copyRange(from: inFile!.pointee.fh, at: inOffset, to: outFile!.pointee.fh,
                                                     at: outOffset, length: length, flags: UInt32(flags),
                                                     caller: caller(of: req))
                fuse_reply_write(req, n)
            } catch { ctx.fail(req, error, "copy_file_range") }
        }
    }

    static func installDirectoryOperations(_ ops: inout fuse_lowlevel_ops) {
        ops.opendir = { req, node, fi in
            let ctx = BridgeContext.of(req)
            do {
                fi!.pointee.fh = try ctx.filesystem.openDirectory(node)
                if fuse_reply_open(req, fi) != 0 { ctx.filesystem.releaseDirectory(fi!.pointee.fh) }
            } catch { ctx.fail(req, error, "opendir") }
        }
        ops.releasedir = { req, _, fi in
            BridgeContext.of(req).filesystem.releaseDirectory(fi!.pointee.fh)
            fuse_reply_err(req, 0)
        }
        ops.fsyncdir = { req, _, dataOnly, fi in
            let ctx = BridgeContext.of(req)
            do {
                try ctx.filesystem.syncDirectory(fi!.pointee.fh, dataOnly: dataOnly != 0)
                fuse_reply_err(req, 0)
            } catch { ctx.fail(req, error, "fsyncdir") }
        }
        ops.readdir = { req, _, size, offset, fi in
            let ctx = BridgeContext.of(req)
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            var used = 0
            do {
                try ctx.filesystem.readDirectory(fi!.pointee.fh, offset: Int64(offset)) { item in
                    var st = stat()
                    st.st_ino = ino_t(item.inode)
                    st.st_mode = mode_t(item.type) << 12
                    let n = fuse_add_direntry(req, buffer + used, size - used, item.name.cString, &st, off_t(item.nextOffset))
                    if n > size - used { return false }
                    used += n
                    return true
                }
                fuse_reply_buf(req, buffer, used)
            } catch {
                if used > 0 { fuse_reply_buf(req, buffer, used) } else { ctx.fail(req, error, "readdir") }
            }
        }
        ops.readdirplus = { req, _, size, offset, fi in
            let ctx = BridgeContext.of(req)
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            var used = 0
            var counted: [NodeID] = []  // lookups the entries in the buffer hold
            do {
                try ctx.filesystem.readDirectoryPlus(fi!.pointee.fh, offset: Int64(offset)) { item, entry in
                    var param = fuse_entry_param()
                    if let entry {
                        param = ctx.entryParam(entry)
                    } else {
                        param.attr.st_ino = ino_t(item.inode)
                        param.attr.st_mode = mode_t(item.type) << 12
                    }
                    let n = fuse_add_direntry_plus(req, buffer + used, size - used, item.name.cString, &param, off_t(item.nextOffset))
                    if n > size - used { return false }
                    used += n
                    if let entry { counted.append(entry.node) }
                    return true
                }
            } catch {
                if used == 0 {
                    ctx.fail(req, error, "readdirplus")
                    return
                }
            }
            if fuse_reply_buf(req, buffer, used) != 0 {
                // Interrupted: the kernel took none of these lookups.
                for node in counted { ctx.filesystem.forget(node, count: 1) }
            }
        }
    }
}
