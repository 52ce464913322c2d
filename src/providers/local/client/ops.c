/* The local provider, client side: the session operations. Commands go through the control
 * socket (the supervisor hands the command's stdio back as descriptors); files are reached
 * through a workspace directory fd, beneath which every path is resolved. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "providers/local/client/client.h"
#include "providers/local/isolate/isolate.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/path.h"
#include "sbx/time.h"

#define COPY_CHUNK 65536

struct local_proc {
    struct sbx_proc base;
    int ctl;
    int have_status;
    struct sbx_exit status;
    char *id;
};

/* ---------------------------------------------------------------------------------------------
 * Processes */

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct local_proc *p = (struct local_proc *)bp;
    if (!p->have_status) {
        struct pollfd pfd = {.fd = p->ctl, .events = POLLIN};
        int r;
        int64_t deadline = sbx_deadline_after_ms(timeout_ms);
        do
            r = poll(&pfd, 1, sbx_deadline_poll_ms(deadline));
        while (r < 0 && errno == EINTR);
        if (r == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "the command is still running");
        json_t *m = NULL;
        int rc = sbx__proto_recv(p->ctl, &m, NULL, 0, NULL,
                                 sbx_deadline_after_ms(SBX__LOCAL_REQUEST_IDLE_MS), err);
        if (rc < 0)
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", p->id);
        int64_t code = -1, sig = 0;
        int to = 0;
        if ((rc = sbx_json_get_int(m, "code", 1, &code, err)) < 0 ||
            (rc = sbx_json_get_int(m, "signal", 1, &sig, err)) < 0 ||
            (rc = sbx_json_get_bool(m, "timed_out", 0, &to, err)) < 0) {
            json_decref(m);
            return rc;
        }
        p->status = (struct sbx_exit){.code = (int)code,
                                      .signal = (int)sig,
                                      .timed_out = to,
                                      .oom = json_is_true(json_object_get(m, "oom")),
                                      .pids_limit = json_is_true(json_object_get(m, "pids_limit"))};
        const char *why = json_string_value(json_object_get(m, "reason"));
        if (why)
            snprintf(p->status.reason, sizeof(p->status.reason), "%s", why);
        json_decref(m);
        p->have_status = 1;
    }
    *out = p->status;
    return 0;
}

static void proc_free(struct sbx_proc *bp)
{
    struct local_proc *p = (struct local_proc *)bp;
    /* Closing the control connection makes the supervisor kill a command still running. */
    sbx_fd_close(&p->ctl);
    if (p->base.stdin_fd != p->base.stdout_fd)
        sbx_fd_close(&p->base.stdin_fd);
    sbx_fd_close(&p->base.stdout_fd);
    sbx_fd_close(&p->base.stderr_fd);
    free(p->id);
    free(p);
}

/* Hand the process to the supervisor: its output descriptors go back (the supervisor reads and
 * drops what it writes, and a terminal keeps its master, so no hangup), and the control
 * connection stops meaning "kill it when I go". */
static int proc_detach(struct sbx_proc *bp, struct sbx_error *err)
{
    struct local_proc *p = (struct local_proc *)bp;
    int fds[3];
    size_t n = 0;
    if (p->have_status)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the command has ended");
    fds[n++] = p->base.stdout_fd;
    if (p->base.stderr_fd >= 0)
        fds[n++] = p->base.stderr_fd;
    json_t *req = json_pack("{s:s}", "op", "detach"), *reply = NULL;
    int64_t deadline = sbx_deadline_after_ms(SBX__LOCAL_REQUEST_IDLE_MS);
    int rc = sbx__proto_send(p->ctl, req, fds, n, deadline, err);
    if (rc == 0)
        rc = sbx__proto_recv(p->ctl, &reply, NULL, 0, NULL, deadline, err);
    if (rc == 0)
        rc = sbx__proto_check(reply, err);
    json_decref(req);
    json_decref(reply);
    if (rc < 0) {
        sbx_error_prefix(err, "sandbox '%s'", p->id);
        return rc;
    }
    proc_free(bp);
    return 0;
}

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free, proc_detach};

static int sess_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec,
                           const char *cwd, struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    json_t *req = json_object(), *argv = json_array(), *env = json_array(), *reply = NULL;
    int fds[SBX_PROTO_MAX_FDS];
    size_t nfds = 0;
    int sock = -1, progress = -1, rc;
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    int want_stdin = !tty && (spec->flags & SBX_EXEC_STDIN);
    int merge = !tty && (spec->flags & SBX_EXEC_MERGE_STDERR);

    if (spec->argv) {
        for (const char *const *a = spec->argv; *a; a++)
            sbx_json_append(argv, sbx_json_str(*a));
    } else {
        sbx_json_append(argv, sbx_json_str("/bin/sh"));
        sbx_json_append(argv, sbx_json_str("-c"));
        sbx_json_append(argv, sbx_json_str(spec->command));
    }
    for (const char *const *e = spec->env; e && *e; e++)
        sbx_json_append(env, sbx_json_str(*e));
    sbx_json_set(req, "op", sbx_json_str("exec"));
    sbx_json_set(req, "argv", argv);
    sbx_json_set(req, "env", env);
    sbx_json_set(req, "cwd", sbx_json_str(cwd));
    if (spec->user)
        sbx_json_set(req, "user", sbx_json_str(spec->user));
    sbx_json_set(req, "timeout_ms", json_integer(spec->timeout_ms));
    sbx_json_set(req, "grace_ms", json_integer(spec->kill_grace_ms));
    sbx_json_set(req, "tty", json_boolean(tty));
    sbx_json_set(req, "stdin", json_boolean(want_stdin));
    sbx_json_set(req, "merge", json_boolean(merge));
    sbx_json_set(req, "keep_background", json_boolean(spec->flags & SBX_EXEC_KEEP_BACKGROUND));
    sbx_json_set(req, "rows", json_integer(spec->rows));
    sbx_json_set(req, "cols", json_integer(spec->cols));

    struct sbx__proto_wait w;
    progress = sbx__local_wait_begin(s->dir, s->idle_ms, &w);
    rc = sbx__local_connect(s->dir, bs->id, &w, &sock, err);
    if (rc < 0)
        goto out;
    rc = sbx__proto_send_wait(sock, req, NULL, 0, &w, err);
    if (rc == 0)
        rc = sbx__proto_recv_wait(sock, &reply, fds, SBX_PROTO_MAX_FDS, &nfds, &w, err);
    if (rc == -SBX_E_SANDBOX)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", bs->id);
    if (rc < 0)
        goto out;
    rc = sbx__proto_check(reply, err);
    size_t want = tty ? 1 : 1 + !merge + !!want_stdin;
    if (rc == 0 && nfds != want)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' sent %zu descriptors, not %zu",
                           bs->id, nfds, want);
    if (rc < 0) {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        goto out;
    }
    struct local_proc *p = sbx_xcalloc(1, sizeof(*p));
    p->base.ops = &proc_ops;
    p->base.tty = tty;
    p->base.pid = (pid_t)json_integer_value(json_object_get(reply, "pid"));
    p->base.status_fd = p->ctl = sock;
    sock = -1;
    p->id = sbx_xstrdup(bs->id);
    size_t k = 0;
    p->base.stdout_fd = fds[k++];
    p->base.stderr_fd = tty || merge ? -1 : fds[k++];
    p->base.stdin_fd = tty ? p->base.stdout_fd : want_stdin ? fds[k++] : -1;
    *out = &p->base;
out:
    sbx_fd_close(&sock);
    sbx_fd_close(&progress);
    json_decref(req);
    json_decref(reply);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Files */

static int root_fd(struct sbx__local_session *s, int *out, struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&s->root_lock);
    const char *iso = json_string_value(json_object_get(s->state, "isolation"));
    if (s->root_fd < 0 && iso && strcmp(iso, "none") != 0 && s->workspace) {
        /* An isolated workspace is a host directory bound into the sandbox: reach it on the
         * host, as the caller (the supervisor's descriptor may be an idmapped mount, where the
         * caller's ids have no mapping). */
        s->root_fd = open(s->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s->root_fd < 0)
            rc = sbx_error_errno(err, errno, "cannot open workspace '%s'", s->workspace);
    } else if (s->root_fd < 0) {
        json_t *req = json_pack("{s:s}", "op", "root"), *reply = NULL;
        int fds[1];
        size_t nfds = 0;
        rc = sbx__local_request(s->dir, s->base.id, req, &reply, fds, 1, &nfds, s->idle_ms, err);
        if (rc == 0 && nfds != 1)
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' sent no workspace", s->base.id);
        if (rc == 0)
            s->root_fd = fds[0];
        json_decref(req);
        json_decref(reply);
    }
    *out = s->root_fd;
    pthread_mutex_unlock(&s->root_lock);
    return rc;
}

static int sess_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                          struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    int dfd, fd = -1;
    struct stat st;
    int rc = root_fd(s, &dfd, err);
    if (rc < 0)
        return rc;
    /* O_NONBLOCK: a fifo planted in the workspace must not hang the open */
    rc = sbx_fs_open(dfd, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, 0, &fd, err);
    if (rc < 0)
        return rc;
    if (fstat(fd, &st) < 0) {
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", path);
    } else if (!S_ISREG(st.st_mode)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
    } else {
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        *out_fd = fd;
        if (out_size)
            *out_size = (uint64_t)st.st_size;
        return 0;
    }
    close(fd);
    return rc;
}

/* holes: fd is a fresh file we may seek in (not O_APPEND), so the reader's holes stay holes. */
static int copy_in(int fd, const struct sbx_file_reader *r, uint64_t max, const char *path,
                   int holes, struct sbx_error *err)
{
    char *buf = sbx_xmalloc(COPY_CHUNK);
    uint64_t total = 0;
    int rc = 0, sparse = 0;
    for (;;) {
        if (holes && r->skip_hole) {
            uint64_t hole = 0;
            rc = r->skip_hole(r->ctx, &hole, err);
            if (rc < 0)
                break;
            if (hole > INT64_MAX || (hole && lseek(fd, (off_t)hole, SEEK_CUR) < 0)) {
                rc = sbx_error_errno(err, hole > INT64_MAX ? EFBIG : errno,
                                     "cannot leave a hole in '%s'", path);
                break;
            }
            sparse |= hole > 0;
        }
        long n = r->read(r->ctx, buf, COPY_CHUNK, err);
        if (n < 0) {
            rc = (int)n;
            break;
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
        if (total > max) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' would exceed %llu bytes", path,
                               (unsigned long long)max);
            break;
        }
        rc = sbx_fd_write_all(fd, buf, (size_t)n, err);
        if (rc < 0)
            break;
    }
    if (rc == 0 && sparse) {
        /* A trailing hole only moved the offset: give the file its length. */
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end < 0 || ftruncate(fd, end) < 0)
            rc = sbx_error_errno(err, errno, "cannot set the length of '%s'", path);
    }
    free(buf);
    return rc;
}

static int sess_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                      uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    int dfd, pfd = -1, fd = -1, rc;
    const char *slash = strrchr(path, '/');
    char *parent = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup("");
    const char *leaf = slash ? slash + 1 : path;
    char tmp[64] = "";

    rc = root_fd(s, &dfd, err);
    if (rc < 0)
        goto out;
    rc = sbx_fs_open(dfd, parent, O_RDONLY | O_DIRECTORY, 0, 0, &pfd, err);
    if (rc == -SBX_E_NOTFOUND && (flags & SBX_WRITE_PARENTS)) {
        /* Only now make the parents: most writes go to directories that exist. */
        rc = sbx_fs_mkdir(dfd, parent, 0755, SBX_FS_PARENTS, err);
        if (rc == 0)
            rc = sbx_fs_open(dfd, parent, O_RDONLY | O_DIRECTORY, 0, 0, &pfd, err);
    }
    if (rc < 0)
        goto out;
    if (flags & SBX_WRITE_APPEND) {
        fd = openat(pfd, leaf, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                    mode & SBX_FS_MODE_MASK);
        if (fd < 0) {
            rc = errno == ELOOP ? sbx_error_set(err, SBX_E_PERM, ELOOP,
                                                "refusing to write through symlink '%s'", path)
                                : sbx_error_errno(err, errno, "cannot open '%s'", path);
            goto out;
        }
        rc = copy_in(fd, r, max, path, 0, err);
        goto out;
    }
    if (flags & SBX__WRITE_FRESH) {
        /* Materialisation of a name that did not exist: written in place (O_EXCL never follows
         * a symlink), removed if the write fails. */
        fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            rc = copy_in(fd, r, max, path, 1, err);
            if (rc == 0 && fchmod(fd, mode & SBX_FS_MODE_MASK) < 0)
                rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", path);
            if (rc < 0)
                unlinkat(pfd, leaf, 0);
            goto out;
        }
        if (errno != EEXIST) {
            rc = sbx_error_errno(err, errno, "cannot create '%s'", path);
            goto out;
        }
    }
    /* A temporary file next to the target, renamed over it: readers never see half a file, and
     * renaming replaces a planted symlink instead of writing through it. */
    /* pid + counter names are unique among writers on this machine; a name planted by the
     * sandbox only costs a retry with a random one. */
    static atomic_ulong counter;
    for (int attempt = 0;; attempt++) {
        char hex[17] = "";
        if (attempt > 0 && (rc = sbx_random_hex(hex, 8, err)) < 0)
            goto out;
        if (attempt == 0)
            snprintf(tmp, sizeof(tmp), ".sbx-write-%d-%lu.tmp", (int)getpid(),
                     atomic_fetch_add(&counter, 1));
        else
            snprintf(tmp, sizeof(tmp), ".sbx-write-%s.tmp", hex);
        fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST || attempt >= 3)
            break;
    }
    if (fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot create a file next to '%s'", path);
        tmp[0] = '\0';
        goto out;
    }
    rc = copy_in(fd, r, max, path, 1, err);
    if (rc == 0 && fchmod(fd, mode & SBX_FS_MODE_MASK) < 0)
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", path);
    if (rc < 0)
        goto out;
    if (renameat2(pfd, tmp, pfd, leaf, (flags & SBX_WRITE_EXCL) ? RENAME_NOREPLACE : 0) < 0) {
        if (errno == EEXIST)
            rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' already exists", path);
        else if (errno == EISDIR || errno == ENOTEMPTY)
            rc = sbx_error_set(err, SBX_E_INVAL, errno, "'%s' is a directory", path);
        else
            rc = sbx_error_errno(err, errno, "cannot write '%s'", path);
        goto out;
    }
    tmp[0] = '\0';
out:
    if (tmp[0] && pfd >= 0)
        unlinkat(pfd, tmp, 0);
    sbx_fd_close(&fd);
    sbx_fd_close(&pfd);
    free(parent);
    return rc;
}

static int cmp_dirent(const void *a, const void *b)
{
    return strcmp(((const struct sbx_dirent *)a)->name, ((const struct sbx_dirent *)b)->name);
}

static void fill_dirent(struct sbx_dirent *d, int dfd, const char *name, const struct stat *st)
{
    d->name = sbx_xstrdup(name);
    d->target = NULL;
    d->type = S_ISREG(st->st_mode)   ? SBX_FILE_REGULAR
              : S_ISDIR(st->st_mode) ? SBX_FILE_DIR
              : S_ISLNK(st->st_mode) ? SBX_FILE_SYMLINK
                                     : SBX_FILE_OTHER;
    d->mode = st->st_mode & 07777;
    d->size = (uint64_t)st->st_size;
    d->mtime_ns = (int64_t)st->st_mtim.tv_sec * SBX_NS_PER_S + st->st_mtim.tv_nsec;
    d->uid = st->st_uid;
    d->gid = st->st_gid;
    if (S_ISLNK(st->st_mode)) {
        char buf[PATH_MAX];
        ssize_t n = readlinkat(dfd, name, buf, sizeof(buf) - 1);
        if (n >= 0)
            d->target = sbx_xstrndup(buf, (size_t)n);
    }
}

static int sess_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                     struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    struct stat st;
    int dfd, pfd = -1;
    int rc = root_fd(s, &dfd, err);
    if (rc < 0)
        return rc;
    const char *slash = strrchr(path, '/');
    char *parent = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup("");
    const char *leaf = slash ? slash + 1 : path;
    rc = sbx_fs_open(dfd, parent, O_RDONLY | O_DIRECTORY, 0, 0, &pfd, err);
    if (rc == 0 && fstatat(pfd, leaf[0] ? leaf : ".", &st, AT_SYMLINK_NOFOLLOW) < 0)
        rc = errno == ENOENT
                     ? sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "'%s' does not exist", path)
                     : sbx_error_errno(err, errno, "cannot stat '%s'", path);
    if (rc == 0)
        fill_dirent(out, pfd, leaf, &st);
    sbx_fd_close(&pfd);
    free(parent);
    return rc;
}

static int sess_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
                   struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    struct sbx_dirlist l = {0};
    size_t cap = 0;
    int dfd, fd = -1, rc;
    struct stat st;
    DIR *d = NULL;

    rc = root_fd(s, &dfd, err);
    if (rc < 0)
        return rc;
    rc = sbx_fs_stat(dfd, path, &st, err);
    if (rc < 0)
        return rc;
    if (S_ISLNK(st.st_mode)) {
        /* Like ls: a link to a directory lists the directory, if it stays inside. */
        rc = sbx_fs_open(dfd, path, O_RDONLY | O_DIRECTORY, 0, 0, &fd, err);
        if (rc == -SBX_E_PERM)
            return rc;
        if (rc == 0)
            st.st_mode = S_IFDIR;
        sbx_error_clear(err);
        rc = 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        l.v = sbx_xcalloc(1, sizeof(*l.v));
        rc = sess_stat(bs, path, &l.v[0], err);
        if (rc < 0) {
            free(l.v);
            return rc;
        }
        l.n = 1;
        *out = l;
        return 0;
    }
    if (fd < 0)
        rc = sbx_fs_open(dfd, path, O_RDONLY | O_DIRECTORY, 0, 0, &fd, err);
    if (rc < 0)
        return rc;
    d = fdopendir(fd);
    if (!d) {
        rc = sbx_error_errno(err, errno, "cannot list '%s'", path);
        close(fd);
        return rc;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        if (l.n >= SBX_LS_MAX_ENTRIES) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' has more than %d entries", path,
                               SBX_LS_MAX_ENTRIES);
            sbx_dirlist_release(&l);
            goto out;
        }
        SBX_ALLOC_GROW(l.v, l.n + 1, cap);
        fill_dirent(&l.v[l.n++], dirfd(d), e->d_name, &st);
    }
    if (l.n)
        qsort(l.v, l.n, sizeof(*l.v), cmp_dirent);
    *out = l;
out:
    closedir(d);
    return rc;
}

static int sess_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    int dfd, rc = root_fd((struct sbx__local_session *)bs, &dfd, err);
    if (rc < 0)
        return rc;
    return sbx_fs_mkdir(dfd, path, 0755, (flags & SBX_MKDIR_PARENTS) ? SBX_FS_PARENTS : 0, err);
}

static int sess_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    int dfd, rc = root_fd((struct sbx__local_session *)bs, &dfd, err);
    if (rc < 0)
        return rc;
    rc = sbx_fs_remove(dfd, path, (flags & SBX_RM_RECURSIVE) ? SBX_FS_RECURSIVE : 0, err);
    if (rc == -SBX_E_NOTFOUND && (flags & SBX_RM_FORCE)) {
        sbx_error_clear(err);
        rc = 0;
    }
    return rc;
}

static int sess_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err)
{
    int dfd, fd = -1;
    struct stat st;
    int rc = root_fd((struct sbx__local_session *)bs, &dfd, err);
    if (rc == 0)
        rc = sbx_fs_open(dfd, path, O_PATH | O_NOFOLLOW, 0, 0, &fd, err);
    if (rc < 0)
        return rc;
    if (fstat(fd, &st) < 0) {
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", path);
    } else if (S_ISLNK(st.st_mode)) {
        rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symlink", path);
    } else {
        /* An O_PATH descriptor cannot fchmod; its /proc link names exactly that inode. */
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        if (chmod(proc, mode & SBX_FS_MODE_MASK) < 0)
            rc = sbx_error_errno(err, errno, "cannot change the mode of '%s'", path);
    }
    close(fd);
    return rc;
}

/* Copy the ephemeral environment variables of the trusted manifest from into to: a session
 * state never holds their values. */

/* The sandbox's gid of group name: a manifest group (2000 + i) or the private group of an
 * account user (1000 + i), as /etc/group inside lists them. */
static int sandbox_gid(struct sbx__local_session *s, const char *name, unsigned *out,
                       struct sbx_error *err)
{
    const struct sbx_manifest *m = NULL;
    struct sbx_strv users;
    int rc = sbx__session_manifest(&s->base, &m, err);
    if (rc < 0)
        return rc;
    sbx_strv_init(&users);
    sbx__local_account_users(m, &users);
    rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                       "group '%s' does not exist in the sandbox: declare it in the manifest's "
                       "groups (or name a user)",
                       name);
    for (size_t i = 0; m && i < sbx_manifest_group_count(m); i++)
        if (strcmp(sbx_manifest_group_at(m, i)->name, name) == 0) {
            *out = SBX__ISOLATION_FIRST_GID + (unsigned)i;
            rc = 0;
            break;
        }
    long k = rc < 0 ? sbx_strv_find(&users, name) : -1;
    if (k >= 0) {
        *out = SBX__ISOLATION_FIRST_UID + (unsigned)k;
        rc = 0;
    }
    if (rc == 0)
        sbx_error_clear(err);
    sbx_strv_release(&users);
    return rc;
}

static int sess_chgrp(struct sbx_session *bs, const char *path, const char *group,
                      struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    const char *iso = json_string_value(json_object_get(s->state, "isolation"));
    unsigned gid = 0;
    int dfd, fd = -1;
    struct stat ws, st;
    int rc = sandbox_gid(s, group, &gid, err);
    if (rc < 0)
        return rc;
    /* Only a root runner's isolated sandbox maps more than its default user's group. */
    if (gid != SBX__ISOLATION_FIRST_UID && (!iso || strcmp(iso, "none") == 0 || geteuid() != 0))
        return sbx_error_set(
                err, SBX_E_UNSUPPORTED, 0,
                "group '%s': this sandbox maps only its default user's group "
                "(%s); other groups need an isolated sandbox made by root",
                group, !iso || strcmp(iso, "none") == 0 ? "isolation none" : "unprivileged runner");
    if ((rc = root_fd(s, &dfd, err)) < 0)
        return rc;
    if (fstat(dfd, &ws) < 0)
        return sbx_error_errno(err, errno, "cannot stat the workspace");
    if ((rc = sbx_fs_open(dfd, path, O_PATH | O_NOFOLLOW, 0, 0, &fd, err)) < 0)
        return rc;
    /* On disk, the ids the idmapped workspace mount shows inside as gid (isolation.md,
     * Identities): the workspace owner's group for the default user's, else the fixed base
     * plus gid, the same in every sandbox so a kept workspace or a snapshot keeps it. */
    gid_t disk = gid == SBX__ISOLATION_FIRST_UID ? ws.st_gid
                                                 : (gid_t)(SBX__ISOLATION_HOST_ID_BASE + gid);
    if (fstat(fd, &st) < 0)
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", path);
    else if (S_ISLNK(st.st_mode))
        rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symlink", path);
    else if (st.st_gid != disk && fchownat(fd, "", (uid_t)-1, disk, AT_EMPTY_PATH) < 0)
        rc = sbx_error_errno(err, errno, "cannot set the group of '%s' to '%s'", path, group);
    close(fd);
    return rc;
}

static int set_root_owner(struct sbx__local_session *s, unsigned disk, const char *user,
                          struct sbx_error *err)
{
    struct stat st;
    int dfd, rc = root_fd(s, &dfd, err);
    if (rc < 0)
        return rc;
    if (fstat(dfd, &st) < 0)
        return sbx_error_errno(err, errno, "cannot stat the workspace");
    if ((st.st_uid != disk || st.st_gid != disk) && fchown(dfd, disk, disk) < 0)
        return sbx_error_errno(err, errno, "cannot give the workspace to %s", user);
    return 0;
}

int sbx__local_apply_root_owner(struct sbx__local_session *s, struct sbx_error *err)
{
    unsigned disk = s->root_owner;
    s->starting = 0;
    s->root_owner = 0;
    return disk ? set_root_owner(s, disk, "the manifest's root_owner", err) : 0;
}

/* The workspace root to a declared user: on disk, the stable ids the idmapped workspace mount
 * shows inside as that user and its private group (isolation.md, Identities). The default
 * user owns the workspace already. Only in a workspace sbx made: a sandbox reads its workspace
 * owner from the root directory when it starts (so while it starts, the owner is only noted,
 * and create sets it once the sandbox is up), and a given directory would keep the change for
 * the next sandbox. */
static int sess_chown_root(struct sbx_session *bs, const char *user, struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    const char *iso = json_string_value(json_object_get(s->state, "isolation"));
    const struct sbx_manifest *m = NULL;
    struct sbx_strv users;
    int rc = sbx__session_manifest(&s->base, &m, err);
    if (rc < 0)
        return rc;
    sbx_strv_init(&users);
    sbx__local_account_users(m, &users);
    long k = sbx_strv_find(&users, user);
    sbx_strv_release(&users);
    if (k < 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "user '%s' does not exist in the sandbox",
                             user);
    if (k == 0)
        return 0;
    if (!iso || strcmp(iso, "none") == 0 || geteuid() != 0)
        return sbx_error_set(
                err, SBX_E_UNSUPPORTED, 0,
                "user '%s': this sandbox maps only its default user (%s); other "
                "users need an isolated sandbox made by root",
                user, !iso || strcmp(iso, "none") == 0 ? "isolation none" : "unprivileged runner");
    if (!s->owned)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "user '%s': only a workspace sbx makes can be given to a user, not "
                             "a given directory",
                             user);
    unsigned disk = SBX__ISOLATION_HOST_ID_BASE + SBX__ISOLATION_FIRST_UID + (unsigned)k;
    if (s->starting) {
        s->root_owner = disk;
        return 0;
    }
    char *who = sbx_xasprintf("user '%s'", user);
    rc = set_root_owner(s, disk, who, err);
    free(who);
    return rc;
}

/* Ask the supervisor for a forward of port: a TCP URL ("url"), or with unix_socket the path of
 * a unix socket in the runtime dir ("path"). *out: caller frees. */
static int port_request(struct sbx_session *bs, int port, int unix_socket, char **out,
                        struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    json_t *req = json_pack("{s:s,s:i,s:b}", "op", "port", "port", port, "unix", unix_socket),
           *reply = NULL;
    int rc = sbx__local_request(s->dir, bs->id, req, &reply, NULL, 0, NULL, s->idle_ms, err);
    const char *v = NULL;
    if (rc == 0)
        rc = sbx_json_get_string(reply, unix_socket ? "path" : "url", 1, &v, err);
    if (rc == 0)
        *out = sbx_xstrdup(v);
    json_decref(req);
    json_decref(reply);
    return rc;
}

static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    return port_request(bs, port, 0, out_url, err);
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    (void)err;
    *out = json_deep_copy(((struct sbx__local_session *)bs)->state);
    return 0;
}

static int sess_workspace_fd(struct sbx_session *bs, int *out, struct sbx_error *err)
{
    return root_fd((struct sbx__local_session *)bs, out, err);
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    sbx__session_state_changed(bs);
    return sbx__local_write_state(s->dir, s->state, err);
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    pthread_mutex_lock(&s->root_lock);
    sbx_fd_close(&s->root_fd);
    pthread_mutex_unlock(&s->root_lock);
    int rc = sbx__local_stop_and_clean(s->dir, bs->id, s->workspace, delete_workspace && s->owned,
                                       json_object_get(s->state, "disk"), s->owned, NULL, err);
    if (rc == 0)
        s->closed = 1;
    return rc;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    sbx_session_release_base(bs);
    sbx_fd_close(&s->root_fd);
    pthread_mutex_destroy(&s->root_lock);
    json_decref(s->state);
    free(s->dir);
    free(s->rundir);
    free(s->workspace);
    free(s);
}

static const struct sbx_session_ops session_ops = {
        .exec_start = sess_exec_start,
        .read_open = sess_read_open,
        .write = sess_write,
        .ls = sess_ls,
        .stat = sess_stat,
        .mkdir = sess_mkdir,
        .rm = sess_rm,
        .chmod = sess_chmod,
        .chgrp = sess_chgrp,
        .chown_root = sess_chown_root,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .workspace_fd = sess_workspace_fd,
        .record_snapshot = sess_record_snapshot,
        .stats = sbx__local_sess_stats,
        .log_open = sbx__local_sess_log_open,
        .free = sess_free,
};

int sbx_local_session_port_unix(struct sbx_session *bs, int port, char **out_path,
                                struct sbx_error *err)
{
    if (bs->ops != &session_ops)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "unix socket port forwards are a feature of local sandboxes");
    if (port < 1 || port > 65535)
        return sbx_error_set(err, SBX_E_INVAL, 0, "port %d is not in 1..65535", port);
    return port_request(bs, port, 1, out_path, err);
}

struct sbx__local_session *sbx__local_session_new(const char *rundir, const char *dir,
                                                  json_t *take_state)
{
    struct sbx__local_session *s = sbx_xcalloc(1, sizeof(*s));
    const char *id = json_string_value(json_object_get(take_state, "id"));
    const char *root = json_string_value(json_object_get(take_state, "root"));
    const char *ws = json_string_value(json_object_get(take_state, "workspace"));
    sbx_session_init_base(&s->base, &session_ops, "local", id ? id : "", root ? root : "");
    s->dir = sbx_xstrdup(dir);
    s->rundir = sbx_xstrdup(rundir);
    s->workspace = ws ? sbx_xstrdup(ws) : NULL;
    s->owned = json_is_true(json_object_get(take_state, "workspace_owned"));
    s->state = take_state;
    s->root_fd = -1;
    s->idle_ms = SBX__LOCAL_REQUEST_IDLE_MS;
    pthread_mutex_init(&s->root_lock, NULL);
    sbx__session_state_changed(&s->base); /* local sessions mark their state's changes */
    return s;
}
