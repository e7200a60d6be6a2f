// FUSE passthrough (Linux 6.9+): the kernel reads and writes an open file's backing file
// directly, without a round trip through docfs. libfuse 3.14 predates it, so docfs asks for it
// itself: a custom io patches the INIT reply (FUSE_PASSTHROUGH and max_stack_depth), backing
// files are registered with the FUSE_DEV_IOC_BACKING_* ioctls, and OPEN/CREATE replies that
// carry a backing id are built here. The same INIT patch asks for FUSE_HANDLE_KILLPRIV_V2 when
// the kernel offers it: docfs drops set-id bits itself, so the kernel stops asking for
// security.capability before every write. Part of the FUSE bridge: only DocfsFUSE imports it.
#ifndef DOCFS_PASSTHROUGH_H
#define DOCFS_PASSTHROUGH_H

#include <stdint.h>

struct fuse_session;
struct fuse_req;
struct fuse_entry_param;

/// Routes the mounted session's device traffic through docfs's io (same descriptor), so the
/// INIT reply can ask for passthrough and killpriv_v2. Returns 0 or -errno.
int docfs_install_io(struct fuse_session *se);
/// Whether the INIT reply should ask for passthrough (set before libfuse answers INIT).
void docfs_request_passthrough(int wanted);
/// Registers `fd` as a backing file; returns its id (> 0) or -errno.
int docfs_backing_open(struct fuse_session *se, int fd);
/// Unregisters a backing id; returns 0 or -errno.
int docfs_backing_close(struct fuse_session *se, int id);
/// FOPEN_NOFLUSH (Linux 5.15+): the kernel sends no FLUSH at the file's closes.
#define DOCFS_FOPEN_NOFLUSH (1u << 5)
/// OPEN reply with a backing id (passthrough when > 0).
int docfs_reply_open_backed(struct fuse_req *req, uint64_t fh, uint32_t open_flags, int32_t backing_id);
/// CREATE reply with a backing id (passthrough when > 0).
int docfs_reply_create_backed(struct fuse_req *req, const struct fuse_entry_param *e, uint64_t fh,
                              uint32_t open_flags, int32_t backing_id);

#endif
