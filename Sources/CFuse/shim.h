// The libfuse3 low-level API as Swift sees it. FUSE_USE_VERSION must be set here: a system
// library target has no cSettings. Macros and variadic helpers are wrapped as inline functions.
#ifndef DOCFS_CFUSE_SHIM_H
#define DOCFS_CFUSE_SHIM_H

#include <stddef.h>
#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/mount.h>
#include <string.h>
#include <stdlib.h>

/// One data buffer that reads `size` bytes from `fd` at `offset` (splice when the kernel allows).
static inline struct fuse_bufvec docfs_fd_bufvec(int fd, size_t size, off_t offset) {
    struct fuse_bufvec v = FUSE_BUFVEC_INIT(size);
    v.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    v.buf[0].fd = fd;
    v.buf[0].pos = offset;
    return v;
}

/// Copies an incoming write buffer into `fd` at `offset`; returns bytes written or -errno.
static inline ssize_t docfs_write_bufvec_to_fd(struct fuse_bufvec *in, int fd, off_t offset) {
    struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
    out.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    out.buf[0].fd = fd;
    out.buf[0].pos = offset;
    return fuse_buf_copy(&out, in, FUSE_BUF_SPLICE_NONBLOCK);
}

/// fuse_args built from argv (FUSE_ARGS_INIT is a macro).
static inline struct fuse_args docfs_fuse_args(int argc, char **argv) {
    struct fuse_args a = FUSE_ARGS_INIT(argc, argv);
    return a;
}

static inline int docfs_session_loop_mt(struct fuse_session *se, unsigned int max_idle_threads,
                                        unsigned int max_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(config, 0);
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    fuse_loop_cfg_set_max_threads(config, max_threads);
    int r = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return r;
}

static inline struct fuse_session *docfs_session_new(struct fuse_args *args,
                                                     const struct fuse_lowlevel_ops *ops,
                                                     void *userdata) {
    return fuse_session_new(args, ops, sizeof(struct fuse_lowlevel_ops), userdata);
}

static const unsigned int DOCFS_SET_ATTR_MODE = FUSE_SET_ATTR_MODE;
static const unsigned int DOCFS_SET_ATTR_UID = FUSE_SET_ATTR_UID;
static const unsigned int DOCFS_SET_ATTR_GID = FUSE_SET_ATTR_GID;
static const unsigned int DOCFS_SET_ATTR_SIZE = FUSE_SET_ATTR_SIZE;
static const unsigned int DOCFS_SET_ATTR_ATIME = FUSE_SET_ATTR_ATIME;
static const unsigned int DOCFS_SET_ATTR_MTIME = FUSE_SET_ATTR_MTIME;
static const unsigned int DOCFS_SET_ATTR_ATIME_NOW = FUSE_SET_ATTR_ATIME_NOW;
static const unsigned int DOCFS_SET_ATTR_MTIME_NOW = FUSE_SET_ATTR_MTIME_NOW;

static inline void docfs_fi_set_direct_io(struct fuse_file_info *fi, unsigned int v) { fi->direct_io = v; }
static inline void docfs_fi_set_keep_cache(struct fuse_file_info *fi, unsigned int v) { fi->keep_cache = v; }
static inline void docfs_fi_set_noflush(struct fuse_file_info *fi, unsigned int v) { fi->noflush = v; }

#endif
