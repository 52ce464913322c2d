/* sbx local provider: host id ranges of root-run sandboxes.
 *
 * Every live root-run sandbox owns SBX__IDRANGE_SIZE host ids of its own, so that per-user
 * kernel limits (inotify instances, RLIMIT_NPROC, user namespaces, ...) are never shared
 * between sandboxes. The ranges are host-wide, independent of XDG_RUNTIME_DIR: slot n is the
 * file "slot-n" in a root-only directory, and its owner is whoever holds an exclusive flock on
 * it. The supervisor holds the lock for its whole life, so a supervisor killed with SIGKILL
 * frees its slot by dying, and a slot file nobody holds is free whatever its content says.
 *
 * Releasing closes the file: the lock goes with it, the file stays with its last holder's
 * record, and the slot's next allocation writes over that record in place (no data block is
 * freed or allocated per sandbox: on a file system mounted with discard each freed block is a
 * synchronous discard, which rm would wait for). Prune removes the files nobody holds, under the
 * lock. An allocator that opened such a file just before may get the lock after its unlink; it
 * then sees that the name no longer leads to the inode it locked and tries again, so two
 * holders of one slot never coexist. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/local/isolate/isolate.h"
#include "sbx/fs.h"
#include "sbx/time.h"

#define ID_FILE_MAX (4 << 20)

static int in_range(uint64_t v, uint64_t first, uint64_t count)
{
    return v >= first && v < first + count;
}

int sbx__idrange_overlaps(const char *text, int kind, uint64_t first, uint64_t count)
{
    const char *line = text;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        /* The fields of the line, split at ':' (at most 8 are looked at). */
        unsigned long long f[8] = {0};
        int have[8] = {0}, nf = 0;
        const char *p = line;
        while (nf < 8 && p <= line + len) {
            const char *colon = memchr(p, ':', (size_t)(line + len - p));
            const char *fe = colon ? colon : line + len;
            if (fe > p && *p >= '0' && *p <= '9') {
                char *num_end = NULL;
                unsigned long long v = strtoull(p, &num_end, 10);
                have[nf] = num_end == fe;
                f[nf] = v;
            }
            nf++;
            if (!colon)
                break;
            p = colon + 1;
        }
        switch (kind) {
        case SBX__IDRANGE_PASSWD: /* name:x:uid:gid:... */
            if ((have[2] && in_range(f[2], first, count)) ||
                (have[3] && in_range(f[3], first, count)))
                return 1;
            break;
        case SBX__IDRANGE_GROUP: /* name:x:gid:members */
            if (have[2] && in_range(f[2], first, count))
                return 1;
            break;
        case SBX__IDRANGE_SUBID: /* name:first:count */
            if (have[1] && have[2] && f[2] > 0 && f[1] < first + count && first < f[1] + f[2])
                return 1;
            break;
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

static const struct {
    const char *path;
    int kind;
} id_files[] = {{"/etc/passwd", SBX__IDRANGE_PASSWD},
                {"/etc/group", SBX__IDRANGE_GROUP},
                {"/etc/subuid", SBX__IDRANGE_SUBID},
                {"/etc/subgid", SBX__IDRANGE_SUBID}};

/* Whether slot's ids are taken by a user, a group or a subordinate range of the host. */
static int slot_in_use_by_host(const struct sbx_buf *texts, unsigned slot)
{
    uint64_t first = SBX__IDRANGE_BASE + (uint64_t)slot * SBX__IDRANGE_SIZE;
    for (size_t i = 0; i < SBX_ARRAY_LEN(id_files); i++)
        if (sbx__idrange_overlaps(texts[i].data, id_files[i].kind, first, SBX__IDRANGE_SIZE))
            return 1;
    return 0;
}

/* The directory of the slot files: created root-only, refused unless it is a real directory
 * owned by root that nobody else can write or read. */
static int open_dir(const char *dir, int *out, struct sbx_error *err)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return sbx_error_errno(err, errno, "cannot create the host id range directory '%s'", dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open the host id range directory '%s'", dir);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077)) {
        close(fd);
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "refusing host id range directory '%s': it must be a directory "
                             "owned by root with mode 0700",
                             dir);
    }
    *out = fd;
    return 0;
}

/* Try to take slot: 1 when taken (r filled in), 0 when another process holds it. */
static int try_slot(int dfd, unsigned slot, const char *id, struct sbx__idrange *r,
                    struct sbx_error *err)
{
    char name[32];
    snprintf(name, sizeof(name), "slot-%u", slot);
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
        if (fd < 0)
            return sbx_error_errno(err, errno, "cannot open host id slot '%s'", name);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK || e == EINTR)
                return 0;
            return sbx_error_errno(err, e, "cannot lock host id slot '%s'", name);
        }
        struct stat a, b;
        if (fstat(fd, &a) < 0 || fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) < 0 ||
            a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd); /* released (unlinked) between our open and our lock: again */
            continue;
        }
        /* Over the last holder's record, then cut to length: the block stays allocated. */
        char text[160];
        int n = snprintf(text, sizeof(text), "%s %d\n", id, (int)getpid());
        if (pwrite(fd, text, (size_t)n, 0) != n || ftruncate(fd, n) < 0) {
            int rc = sbx_error_errno(err, errno, "cannot record host id slot '%s'", name);
            unlinkat(dfd, name, 0);
            close(fd);
            return rc;
        }
        r->fd = fd;
        r->dir_fd = dfd;
        r->slot = slot;
        r->first = SBX__IDRANGE_BASE + slot * SBX__IDRANGE_SIZE;
        return 1;
    }
    return 0;
}

int sbx__idrange_acquire(const char *dir, const char *id, struct sbx__idrange *out,
                         struct sbx_error *err)
{
    struct sbx_buf texts[SBX_ARRAY_LEN(id_files)];
    struct sbx__idrange r = {.fd = -1, .dir_fd = -1};
    int dfd = -1, rc;
    for (size_t i = 0; i < SBX_ARRAY_LEN(id_files); i++) {
        sbx_buf_init(&texts[i], ID_FILE_MAX);
        /* A missing file takes no ids; one too big to read is treated as missing too. */
        if (sbx_fs_read_path(id_files[i].path, ID_FILE_MAX, &texts[i], NULL) < 0)
            sbx_buf_release(&texts[i]);
    }
    if ((rc = open_dir(dir ? dir : SBX__IDRANGE_DIR, &dfd, err)) < 0)
        goto out;
    rc = 0;
    for (unsigned slot = 0; rc == 0 && slot < SBX__IDRANGE_SLOTS; slot++)
        if (!slot_in_use_by_host(texts, slot))
            rc = try_slot(dfd, slot, id ? id : "", &r, err);
    if (rc == 0)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "all %u host id ranges are in use by live sandboxes or host users",
                           SBX__IDRANGE_SLOTS);
    if (rc > 0) {
        dfd = -1; /* kept in r */
        *out = r;
        rc = 0;
    }
out:
    if (dfd >= 0)
        close(dfd);
    for (size_t i = 0; i < SBX_ARRAY_LEN(id_files); i++)
        sbx_buf_release(&texts[i]);
    return rc;
}

void sbx__idrange_release(struct sbx__idrange *r)
{
    /* The lock goes with the descriptor: the file stays, free for the next allocation. */
    if (r->fd >= 0)
        close(r->fd);
    if (r->dir_fd >= 0)
        close(r->dir_fd);
    r->fd = r->dir_fd = -1;
}

void sbx__idrange_drop(struct sbx__idrange *r)
{
    if (r->fd >= 0)
        close(r->fd);
    if (r->dir_fd >= 0)
        close(r->dir_fd);
    r->fd = r->dir_fd = -1;
}

/* Whether the slot file fd records sandbox id. */
static int records(int fd, const char *id)
{
    char text[160];
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    size_t len = strlen(id);
    if (n < 0)
        return 0;
    text[n] = '\0';
    return (size_t)n > len && strncmp(text, id, len) == 0 && text[len] == ' ';
}

int sbx__idrange_wait_free(const char *dir, uint32_t first, const char *id, int timeout_ms)
{
    if (first < SBX__IDRANGE_BASE || (first - SBX__IDRANGE_BASE) % SBX__IDRANGE_SIZE ||
        (first - SBX__IDRANGE_BASE) / SBX__IDRANGE_SIZE >= SBX__IDRANGE_SLOTS || !id || !*id)
        return 0;
    char name[32];
    snprintf(name, sizeof(name), "slot-%u", (first - SBX__IDRANGE_BASE) / SBX__IDRANGE_SIZE);
    int dfd = open(dir ? dir : SBX__IDRANGE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT; /* no directory: no slot either */
    int freed = 0;
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        int fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            freed = 1; /* removed by its holder */
            break;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            freed = 1; /* nobody holds it: free, whatever its record says */
        } else if (!records(fd, id)) {
            freed = 1; /* already another sandbox's */
        }
        close(fd);
        if (freed || sbx_deadline_poll_ms(deadline) == 0)
            break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    close(dfd);
    return freed;
}

int sbx__idrange_prune(const char *dir, unsigned *removed, struct sbx_error *err)
{
    int dfd, rc;
    unsigned n = 0;
    if ((rc = open_dir(dir ? dir : SBX__IDRANGE_DIR, &dfd, err)) < 0)
        return rc;
    int lfd = dup(dfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        rc = sbx_error_errno(err, errno, "cannot list the host id range directory");
        if (lfd >= 0)
            close(lfd);
        close(dfd);
        return rc;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "slot-", 5) != 0)
            continue;
        int fd = openat(dfd, e->d_name, O_RDWR | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat a, b;
        /* The same protocol as an allocation: only a file nobody holds, still under its name. */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 &&
            fstatat(dfd, e->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev && unlinkat(dfd, e->d_name, 0) == 0)
            n++;
        close(fd);
    }
    closedir(d);
    close(dfd);
    if (removed)
        *removed = n;
    return 0;
}
