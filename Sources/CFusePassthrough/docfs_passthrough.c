// FUSE passthrough (Linux 6.9+) and FUSE_HANDLE_KILLPRIV_V2 for libfuse 3.14, which predates
// them: see docfs_passthrough.h.
// Kernel structures follow the FUSE protocol 7.40; written here, not taken from newer headers.
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include "docfs_passthrough.h"

/* The FUSE protocol as of 7.40, written out here so that neither older nor newer system headers
   change what is sent. */
#define DOCFS_FUSE_WRITEBACK_CACHE (1u << 16)
#define DOCFS_FUSE_HANDLE_KILLPRIV_V2 (1u << 28)
#define DOCFS_FUSE_INIT_EXT (1u << 30)
#define DOCFS_FUSE_DEV_IOC_MAGIC 229
#define DOCFS_FUSE_INIT_OPCODE 26

struct docfs_in_header {
    uint32_t len;
    uint32_t opcode;
    uint64_t unique;
    uint64_t nodeid;
    uint32_t uid, gid, pid;
    uint16_t total_extlen;
    uint16_t padding;
};

struct docfs_init_in {
    uint32_t major;
    uint32_t minor;
    uint32_t max_readahead;
    uint32_t flags;
};

struct docfs_out_header {
    uint32_t len;
    int32_t error;
    uint64_t unique;
};

struct docfs_init_out {
    uint32_t major;
    uint32_t minor;
    uint32_t max_readahead;
    uint32_t flags;
    uint16_t max_background;
    uint16_t congestion_threshold;
    uint32_t max_write;
    uint32_t time_gran;
    uint16_t max_pages;
    uint16_t map_alignment;
    uint32_t flags2;
    uint32_t max_stack_depth;
    uint32_t unused[6];
};

struct docfs_attr {
    uint64_t ino, size, blocks, atime, mtime, ctime;
    uint32_t atimensec, mtimensec, ctimensec, mode, nlink, uid, gid, rdev, blksize, flags;
};

struct docfs_entry_out {
    uint64_t nodeid, generation, entry_valid, attr_valid;
    uint32_t entry_valid_nsec, attr_valid_nsec;
    struct docfs_attr attr;
};

struct docfs_open_out {
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};

_Static_assert(sizeof(struct docfs_in_header) == 40, "fuse_in_header");
_Static_assert(offsetof(struct docfs_init_in, flags) == 12, "fuse_init_in.flags");
_Static_assert(sizeof(struct docfs_out_header) == 16, "fuse_out_header");
_Static_assert(sizeof(struct docfs_init_out) == 64, "fuse_init_out");
_Static_assert(offsetof(struct docfs_init_out, flags2) == 32, "fuse_init_out.flags2");
_Static_assert(offsetof(struct docfs_init_out, max_stack_depth) == 36, "fuse_init_out.max_stack_depth");
_Static_assert(sizeof(struct docfs_attr) == 88, "fuse_attr");
_Static_assert(sizeof(struct docfs_entry_out) == 128, "fuse_entry_out");
_Static_assert(sizeof(struct docfs_open_out) == 16, "fuse_open_out");

#define DOCFS_FUSE_PASSTHROUGH_FLAGS2 (1u << 5)  /* FUSE_PASSTHROUGH is bit 37 of the flags */
#define DOCFS_FOPEN_PASSTHROUGH (1u << 7)
#define DOCFS_MAX_STACK_DEPTH 2                  /* FILESYSTEM_MAX_STACK_DEPTH */

struct docfs_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define DOCFS_FUSE_DEV_IOC_BACKING_OPEN _IOW(DOCFS_FUSE_DEV_IOC_MAGIC, 1, struct docfs_backing_map)
#define DOCFS_FUSE_DEV_IOC_BACKING_CLOSE _IOW(DOCFS_FUSE_DEV_IOC_MAGIC, 2, uint32_t)

/// Set by the init callback before libfuse answers INIT: whether to ask for passthrough.
static int docfs_passthrough_wanted;

/// The INIT exchange of each mounted session (a daemon serves several: the user view and app
/// views), by the session's /dev/fuse descriptor: the flags the kernel offered (libfuse 3.14
/// does not know them all) and whether the INIT reply has gone out (only the first reply is
/// INIT's). A slot is set up when the session's io is installed, before any traffic.
struct docfs_init_state {
    int fd;
    int answered;
    uint32_t kernel_flags;
};
#define DOCFS_MAX_SESSIONS 64
static struct docfs_init_state docfs_sessions[DOCFS_MAX_SESSIONS];
static pthread_mutex_t docfs_sessions_lock = PTHREAD_MUTEX_INITIALIZER;

/// The session state of `fd`; NULL when it has none (no slot was free: its INIT goes unpatched).
static struct docfs_init_state *docfs_session_state(int fd) {
    struct docfs_init_state *found = NULL;
    pthread_mutex_lock(&docfs_sessions_lock);
    for (int i = 0; i < DOCFS_MAX_SESSIONS; i++) {
        if (docfs_sessions[i].fd == fd) {
            found = &docfs_sessions[i];
            break;
        }
    }
    pthread_mutex_unlock(&docfs_sessions_lock);
    return found;
}

/// Gives `fd` a fresh slot (a descriptor number may be reused by a later session).
static void docfs_session_begin(int fd) {
    pthread_mutex_lock(&docfs_sessions_lock);
    struct docfs_init_state *slot = NULL;
    for (int i = 0; i < DOCFS_MAX_SESSIONS && !slot; i++) {
        if (docfs_sessions[i].fd == fd) slot = &docfs_sessions[i];
    }
    for (int i = 0; i < DOCFS_MAX_SESSIONS && !slot; i++) {
        if (docfs_sessions[i].fd <= 0 || docfs_sessions[i].answered) slot = &docfs_sessions[i];
    }
    if (slot) {
        slot->fd = fd;
        __atomic_store_n(&slot->answered, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&slot->kernel_flags, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&docfs_sessions_lock);
}

static ssize_t docfs_io_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t n = read(fd, buf, len);
    struct docfs_init_state *state;
    if (n >= (ssize_t)(sizeof(struct docfs_in_header) + sizeof(struct docfs_init_in))
        && (state = docfs_session_state(fd)) && !__atomic_load_n(&state->answered, __ATOMIC_ACQUIRE)) {
        const struct docfs_in_header *header = buf;
        if (header->opcode == DOCFS_FUSE_INIT_OPCODE) {
            const struct docfs_init_in *init = (const void *)((const char *)buf + sizeof *header);
            __atomic_store_n(&state->kernel_flags, init->flags, __ATOMIC_RELEASE);
        }
    }
    return n;
}

static ssize_t docfs_io_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    struct docfs_init_state *state = docfs_session_state(fd);
    if (state && !__atomic_exchange_n(&state->answered, 1, __ATOMIC_ACQ_REL)) {
        struct docfs_out_header *header = (struct docfs_out_header *)iov[0].iov_base;
        if (count >= 2 && header->error == 0 && iov[1].iov_len >= sizeof(struct docfs_init_out)) {
            struct docfs_init_out *init = (struct docfs_init_out *)iov[1].iov_base;
            // docfs drops set-id bits itself on writes and truncates (Filesystem+SetID), so the
            // kernel need not ask for security.capability before every write.
            if (__atomic_load_n(&state->kernel_flags, __ATOMIC_ACQUIRE) & DOCFS_FUSE_HANDLE_KILLPRIV_V2) {
                init->flags |= DOCFS_FUSE_HANDLE_KILLPRIV_V2;
            }
            if (__atomic_load_n(&docfs_passthrough_wanted, __ATOMIC_ACQUIRE)
                && (init->flags & DOCFS_FUSE_INIT_EXT) && !(init->flags & DOCFS_FUSE_WRITEBACK_CACHE)) {
                init->flags2 |= DOCFS_FUSE_PASSTHROUGH_FLAGS2;
                init->max_stack_depth = DOCFS_MAX_STACK_DEPTH;
            }
        }
    }
    return writev(fd, iov, count);
}

static ssize_t docfs_io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                    unsigned int flags, void *userdata) {
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

/// Routes the mounted session's device traffic through the io above (same descriptor).
int docfs_install_io(struct fuse_session *se) {
    static const struct fuse_custom_io io = {
        .writev = docfs_io_writev,
        .read = docfs_io_read,
        .splice_receive = NULL,
        .splice_send = docfs_io_splice_send,
    };
    docfs_session_begin(fuse_session_fd(se));
    return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

void docfs_request_passthrough(int wanted) {
    __atomic_store_n(&docfs_passthrough_wanted, wanted, __ATOMIC_RELEASE);
}

/// Registers `fd` as a backing file; returns its id (> 0) or -errno.
int docfs_backing_open(struct fuse_session *se, int fd) {
    struct docfs_backing_map map = { .fd = fd, .flags = 0, .padding = 0 };
    int id = ioctl(fuse_session_fd(se), DOCFS_FUSE_DEV_IOC_BACKING_OPEN, &map);
    return id < 0 ? -errno : id;
}

int docfs_backing_close(struct fuse_session *se, int id) {
    uint32_t value = (uint32_t)id;
    return ioctl(fuse_session_fd(se), DOCFS_FUSE_DEV_IOC_BACKING_CLOSE, &value) < 0 ? -errno : 0;
}

static void docfs_fill_open_out(struct docfs_open_out *out, uint64_t fh, uint32_t open_flags,
                                int32_t backing_id) {
    memset(out, 0, sizeof(*out));
    out->fh = fh;
    out->open_flags = open_flags | (backing_id > 0 ? DOCFS_FOPEN_PASSTHROUGH : 0);
    out->backing_id = backing_id;
}

int docfs_reply_open_backed(fuse_req_t req, uint64_t fh, uint32_t open_flags, int32_t backing_id) {
    struct docfs_open_out out;
    docfs_fill_open_out(&out, fh, open_flags, backing_id);
    return fuse_reply_buf(req, (const char *)&out, sizeof(out));
}

static uint64_t docfs_whole_seconds(double t) { return t > 0 ? (uint64_t)t : 0; }
static uint32_t docfs_nanoseconds(double t) {
    return t > 0 ? (uint32_t)((t - (double)(uint64_t)t) * 1.0e9) : 0;
}

int docfs_reply_create_backed(fuse_req_t req, const struct fuse_entry_param *e, uint64_t fh,
                                            uint32_t open_flags, int32_t backing_id) {
    struct {
        struct docfs_entry_out entry;
        struct docfs_open_out open;
    } out;
    memset(&out, 0, sizeof(out));
    out.entry.nodeid = e->ino;
    out.entry.generation = e->generation;
    out.entry.entry_valid = docfs_whole_seconds(e->entry_timeout);
    out.entry.entry_valid_nsec = docfs_nanoseconds(e->entry_timeout);
    out.entry.attr_valid = docfs_whole_seconds(e->attr_timeout);
    out.entry.attr_valid_nsec = docfs_nanoseconds(e->attr_timeout);
    const struct stat *st = &e->attr;
    out.entry.attr.ino = st->st_ino;
    out.entry.attr.size = st->st_size;
    out.entry.attr.blocks = st->st_blocks;
    out.entry.attr.atime = st->st_atim.tv_sec;
    out.entry.attr.mtime = st->st_mtim.tv_sec;
    out.entry.attr.ctime = st->st_ctim.tv_sec;
    out.entry.attr.atimensec = st->st_atim.tv_nsec;
    out.entry.attr.mtimensec = st->st_mtim.tv_nsec;
    out.entry.attr.ctimensec = st->st_ctim.tv_nsec;
    out.entry.attr.mode = st->st_mode;
    out.entry.attr.nlink = st->st_nlink;
    out.entry.attr.uid = st->st_uid;
    out.entry.attr.gid = st->st_gid;
    out.entry.attr.rdev = st->st_rdev;
    out.entry.attr.blksize = st->st_blksize;
    docfs_fill_open_out(&out.open, fh, open_flags, backing_id);
    return fuse_reply_buf(req, (const char *)&out, sizeof(out));
}

