// Linux system calls and constants that Swift's Glibc module does not show (they need
// _GNU_SOURCE, which must not leak into this header: Swift's Glibc is built without it).
// Each function returns -1 and sets errno on failure, like the call it wraps.
#ifndef DOCFS_LINUX_H
#define DOCFS_LINUX_H

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

int docfs_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                    unsigned int flags);
ssize_t docfs_copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len,
                              unsigned int flags);
int docfs_fallocate(int fd, int mode, off_t offset, off_t len);
/// posix_spawn_file_actions_addclosefrom_np: the child closes every descriptor from `from` on.
int docfs_spawn_close_from(void *file_actions, int from);
ssize_t docfs_getxattr(const char *path, const char *name, void *value, size_t size);
ssize_t docfs_listxattr(const char *path, char *list, size_t size);
int docfs_setxattr(const char *path, const char *name, const void *value, size_t size, int flags);
int docfs_removexattr(const char *path, const char *name);
ssize_t docfs_lgetxattr(const char *path, const char *name, void *value, size_t size);
ssize_t docfs_llistxattr(const char *path, char *list, size_t size);
int docfs_lsetxattr(const char *path, const char *name, const void *value, size_t size, int flags);
int docfs_lremovexattr(const char *path, const char *name);
/// getxattr/setxattr of the file an O_PATH descriptor refers to (through /proc/self/fd, built on
/// the stack: these are on the lookup and create paths).
ssize_t docfs_fd_getxattr(int fd, const char *name, void *value, size_t size);
/// listxattr of any descriptor, O_PATH ones included (through its /proc link): the names, each
/// ending in a NUL.
ssize_t docfs_fd_listxattr(int fd, char *list, size_t size);
int docfs_fd_setxattr(int fd, const char *name, const void *value, size_t size, int flags);
int docfs_path_fd_chmod(int fd, mode_t mode);
int docfs_path_fd_utimens(int fd, const struct timespec times[2]);
/// accept4 with SOCK_CLOEXEC.
int docfs_accept_cloexec(int fd);
/// The pid, uid and gid of the process at the other end of a unix socket (SO_PEERCRED).
int docfs_peer_credentials(int fd, int *pid, unsigned int *uid, unsigned int *gid);
/// The birth time of `path` (statx, not following a symlink); -1 when the filesystem has none.
int docfs_birth_time(const char *path, long long *seconds, unsigned int *nanoseconds);
/// The same, of the file a descriptor (O_PATH included) refers to.
int docfs_fd_birth_time(int fd, long long *seconds, unsigned int *nanoseconds);
/// fstat(2) and the birth time of a descriptor with one statx(2) (not following a symlink);
/// the birth time is -1 seconds where the filesystem keeps none.
int docfs_fd_stat_and_birth(int fd, struct stat *st, long long *seconds, unsigned int *nanoseconds);
/// getxattr of `name` in the directory `dirfd` without following a symlink there.
ssize_t docfs_at_getxattr(int dirfd, const char *name, const char *attribute, void *value, size_t size);
/// One message on a SOCK_SEQPACKET socket, with `descriptor` (when >= 0) passed along
/// (SCM_RIGHTS). Never raises SIGPIPE.
ssize_t docfs_send_with_descriptor(int socket, const void *bytes, size_t length, int descriptor);
/// One message from a SOCK_SEQPACKET socket; *descriptor is the one passed along (close-on-exec),
/// or -1. A message longer than `capacity` fails with EMSGSIZE.
ssize_t docfs_receive_with_descriptor(int socket, void *bytes, size_t capacity, int *descriptor);

/// The calling thread yields the CPU and the disk to everything else (nice 19, the lowest
/// best-effort I/O priority) without starving: for background work such as cutting kept
/// versions into chunks.
int docfs_make_thread_background(void);

/// The calling thread gives way to others for the CPU (nice `niceness`) without starving:
/// for work that follows the user's, such as the sync engine's rounds.
int docfs_lower_thread_priority(int niceness);

extern const unsigned int DOCFS_RENAME_NOREPLACE;
extern const unsigned int DOCFS_RENAME_EXCHANGE;
extern const int DOCFS_O_PATH;
extern const int DOCFS_AT_EMPTY_PATH;
extern const int DOCFS_O_DIRECT;
/// O_NOATIME: reading does not move the access time (owner or CAP_FOWNER only).
extern const int DOCFS_O_NOATIME;
extern const short DOCFS_POSIX_SPAWN_SETSID;
extern const int DOCFS_MNT_DETACH;
extern const int DOCFS_FALLOC_FL_KEEP_SIZE;
extern const int DOCFS_FALLOC_FL_PUNCH_HOLE;
extern const int DOCFS_FALLOC_FL_ZERO_RANGE;
extern const long DOCFS_UTIME_NOW;
extern const long DOCFS_UTIME_OMIT;
extern const int DOCFS_SEEK_DATA;
extern const int DOCFS_SEEK_HOLE;
extern const int DOCFS_XATTR_CREATE;
extern const int DOCFS_XATTR_REPLACE;

/* An anonymous memory file (memfd_create with MFD_CLOEXEC), for content docfs makes up. */
int docfs_memfd(const char *name);

#endif
