#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/resource.h>
#include <spawn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <sys/socket.h>
#include <linux/fs.h>
#include <linux/falloc.h>
#include "docfs_linux.h"

int docfs_lower_thread_priority(int niceness) {
    return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), niceness);
}

int docfs_make_thread_background(void) {
    int result = docfs_lower_thread_priority(19);
    // ioprio_set(IOPRIO_WHO_PROCESS, this thread, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7))
    if (syscall(SYS_ioprio_set, 1, (pid_t)syscall(SYS_gettid), (2 << 13) | 7) != 0) result = -1;
    return result;
}

int docfs_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                    unsigned int flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

ssize_t docfs_copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len,
                              unsigned int flags) {
    return copy_file_range(fd_in, off_in, fd_out, off_out, len, flags);
}

int docfs_fallocate(int fd, int mode, off_t offset, off_t len) {
    return fallocate(fd, mode, offset, len);
}

int docfs_spawn_close_from(void *file_actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)file_actions, from);
}

ssize_t docfs_getxattr(const char *path, const char *name, void *value, size_t size) {
    return getxattr(path, name, value, size);
}
ssize_t docfs_listxattr(const char *path, char *list, size_t size) { return listxattr(path, list, size); }
int docfs_setxattr(const char *path, const char *name, const void *value, size_t size, int flags) {
    return setxattr(path, name, value, size, flags);
}
int docfs_removexattr(const char *path, const char *name) { return removexattr(path, name); }
ssize_t docfs_lgetxattr(const char *path, const char *name, void *value, size_t size) {
    return lgetxattr(path, name, value, size);
}
ssize_t docfs_llistxattr(const char *path, char *list, size_t size) { return llistxattr(path, list, size); }
int docfs_lsetxattr(const char *path, const char *name, const void *value, size_t size, int flags) {
    return lsetxattr(path, name, value, size, flags);
}
int docfs_lremovexattr(const char *path, const char *name) { return lremovexattr(path, name); }
// An open file answers directly; an O_PATH descriptor (EBADF) through its /proc link.
ssize_t docfs_fd_getxattr(int fd, const char *name, void *value, size_t size) {
    ssize_t n = fgetxattr(fd, name, value, size);
    if (n >= 0 || errno != EBADF) return n;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return getxattr(path, name, value, size);
}
ssize_t docfs_fd_listxattr(int fd, char *list, size_t size) {
    ssize_t n = flistxattr(fd, list, size);
    if (n >= 0 || errno != EBADF) return n;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return listxattr(path, list, size);
}
int docfs_fd_setxattr(int fd, const char *name, const void *value, size_t size, int flags) {
    int r = fsetxattr(fd, name, value, size, flags);
    if (r == 0 || errno != EBADF) return r;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return setxattr(path, name, value, size, flags);
}
// chmod and utimensat of the file an O_PATH descriptor names, without a walk of its /proc link
// where the kernel takes the descriptor itself (fchmodat2 is Linux 6.6+; utimensat with
// AT_EMPTY_PATH is older); the /proc link otherwise. Both follow no symbolic link.
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
int docfs_path_fd_chmod(int fd, mode_t mode) {
    int r = (int)syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH);
    if (r == 0 || (errno != ENOSYS && errno != EINVAL)) return r;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return chmod(path, mode);
}
int docfs_path_fd_utimens(int fd, const struct timespec times[2]) {
    int r = utimensat(fd, "", times, AT_EMPTY_PATH);
    if (r == 0 || errno != EINVAL) return r;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return utimensat(AT_FDCWD, path, times, 0);
}
ssize_t docfs_at_getxattr(int dirfd, const char *name, const char *attribute, void *value, size_t size) {
    char path[4200];
    if (snprintf(path, sizeof path, "/proc/self/fd/%d/%s", dirfd, name) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return lgetxattr(path, attribute, value, size);
}

const unsigned int DOCFS_RENAME_NOREPLACE = RENAME_NOREPLACE;
const unsigned int DOCFS_RENAME_EXCHANGE = RENAME_EXCHANGE;
const int DOCFS_O_PATH = O_PATH;
const int DOCFS_AT_EMPTY_PATH = AT_EMPTY_PATH;
const int DOCFS_O_DIRECT = O_DIRECT;
const int DOCFS_O_NOATIME = O_NOATIME;
const short DOCFS_POSIX_SPAWN_SETSID = POSIX_SPAWN_SETSID;
const int DOCFS_MNT_DETACH = MNT_DETACH;
const int DOCFS_FALLOC_FL_KEEP_SIZE = FALLOC_FL_KEEP_SIZE;
const int DOCFS_FALLOC_FL_PUNCH_HOLE = FALLOC_FL_PUNCH_HOLE;
const int DOCFS_FALLOC_FL_ZERO_RANGE = FALLOC_FL_ZERO_RANGE;
const long DOCFS_UTIME_NOW = UTIME_NOW;
const long DOCFS_UTIME_OMIT = UTIME_OMIT;
const int DOCFS_SEEK_DATA = SEEK_DATA;
const int DOCFS_SEEK_HOLE = SEEK_HOLE;
const int DOCFS_XATTR_CREATE = XATTR_CREATE;
const int DOCFS_XATTR_REPLACE = XATTR_REPLACE;

int docfs_birth_time(const char *path, long long *seconds, unsigned int *nanoseconds) {
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) != 0) return -1;
    if (!(sx.stx_mask & STATX_BTIME)) {
        errno = EOPNOTSUPP;
        return -1;
    }
    *seconds = sx.stx_btime.tv_sec;
    *nanoseconds = sx.stx_btime.tv_nsec;
    return 0;
}

int docfs_fd_birth_time(int fd, long long *seconds, unsigned int *nanoseconds) {
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) != 0) return -1;
    if (!(sx.stx_mask & STATX_BTIME)) {
        errno = EOPNOTSUPP;
        return -1;
    }
    *seconds = sx.stx_btime.tv_sec;
    *nanoseconds = sx.stx_btime.tv_nsec;
    return 0;
}

int docfs_fd_stat_and_birth(int fd, struct stat *st, long long *seconds, unsigned int *nanoseconds) {
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS | STATX_BTIME, &sx) != 0) return -1;
    memset(st, 0, sizeof *st);
    st->st_dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    st->st_ino = sx.stx_ino;
    st->st_mode = sx.stx_mode;
    st->st_nlink = sx.stx_nlink;
    st->st_uid = sx.stx_uid;
    st->st_gid = sx.stx_gid;
    st->st_rdev = makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
    st->st_size = (off_t)sx.stx_size;
    st->st_blksize = (blksize_t)sx.stx_blksize;
    st->st_blocks = (blkcnt_t)sx.stx_blocks;
    st->st_atim.tv_sec = sx.stx_atime.tv_sec;
    st->st_atim.tv_nsec = sx.stx_atime.tv_nsec;
    st->st_mtim.tv_sec = sx.stx_mtime.tv_sec;
    st->st_mtim.tv_nsec = sx.stx_mtime.tv_nsec;
    st->st_ctim.tv_sec = sx.stx_ctime.tv_sec;
    st->st_ctim.tv_nsec = sx.stx_ctime.tv_nsec;
    if (sx.stx_mask & STATX_BTIME) {
        *seconds = sx.stx_btime.tv_sec;
        *nanoseconds = sx.stx_btime.tv_nsec;
    } else {
        *seconds = -1;
        *nanoseconds = 0;
    }
    return 0;
}

int docfs_accept_cloexec(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC); }

int docfs_peer_credentials(int fd, int *pid, unsigned int *uid, unsigned int *gid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    *pid = credentials.pid;
    *uid = credentials.uid;
    *gid = credentials.gid;
    return 0;
}

ssize_t docfs_send_with_descriptor(int socket, const void *bytes, size_t length, int descriptor) {
    struct iovec part = { .iov_base = (void *)bytes, .iov_len = length };
    union { char buffer[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct msghdr message = { .msg_iov = &part, .msg_iovlen = 1 };
    if (descriptor >= 0) {
        memset(&control, 0, sizeof control);
        message.msg_control = control.buffer;
        message.msg_controllen = sizeof control.buffer;
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &descriptor, sizeof(int));
    }
    ssize_t n;
    do { n = sendmsg(socket, &message, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    return n;
}

ssize_t docfs_receive_with_descriptor(int socket, void *bytes, size_t capacity, int *descriptor) {
    struct iovec part = { .iov_base = bytes, .iov_len = capacity };
    union { char buffer[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct msghdr message = { .msg_iov = &part, .msg_iovlen = 1, .msg_control = control.buffer,
                              .msg_controllen = sizeof control.buffer };
    *descriptor = -1;
    ssize_t n;
    do { n = recvmsg(socket, &message, MSG_CMSG_CLOEXEC); } while (n < 0 && errno == EINTR);
    if (n < 0) return n;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
            memcpy(descriptor, CMSG_DATA(header), sizeof(int));
        }
    }
    if (message.msg_flags & MSG_TRUNC) {
        if (*descriptor >= 0) close(*descriptor);
        *descriptor = -1;
        errno = EMSGSIZE;
        return -1;
    }
    return n;
}

int docfs_memfd(const char *name) {
    return memfd_create(name, MFD_CLOEXEC);
}
