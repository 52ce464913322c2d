/* The local provider, client side: creating supervisors, attaching to them, and the session
 * operations (commands through the control socket, files through a workspace directory fd that
 * the supervisor hands out). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "providers/local/config.h"
#include "core/spawn.h"
#include "providers/local/client/disk.h"
#include "providers/local/isolate/isolate.h"
#include "providers/local/local.h"
#include "providers/local/net/net.h"
#include "providers/local/supervisor/rclone.h"
#include "sandbox/host/host.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/manifest.h"
#include "sbx/path.h"
#include "sbx/secret.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#ifndef SBX_BINDIR
#    define SBX_BINDIR "/usr/local/bin"
#endif
#ifndef SBX_LIBDIR_REL
#    define SBX_LIBDIR_REL "lib"
#endif
#ifndef SBX_LIBEXECDIR_REL
#    define SBX_LIBEXECDIR_REL "libexec"
#endif
#ifndef SBX_LIBEXECDIR
#    define SBX_LIBEXECDIR "/usr/local/libexec"
#endif

#define ID_BYTES           8 /* 16 hex characters */
#define ID_MAX_LEN         64
#define STATE_MAX          SBX_SESSION_STATE_MAX
#define MANIFEST_STATE_MAX (SBX_SESSION_STATE_MAX / 2)
/* A request fails when the supervisor answers nobody for this long; while it answers others
 * (a queue of clients on a loaded host) the wait goes on, up to REQUEST_LIMIT_MS. */
#define REQUEST_IDLE_MS  10000
#define REQUEST_LIMIT_MS 300000
#define IDRANGE_WAIT_MS  10000
/* Create waits for the supervisor's report, which comes (ok or an error) or the socket closes
 * when it died: this is only a safety bound, so creates under load queue rather than fail. */
#define START_TIMEOUT_MS 300000
#define COPY_CHUNK       65536

static const char *const base_env[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C.UTF-8",
        "SHELL=/bin/sh",
        NULL,
};

struct local_client {
    struct sbx_client base;
    char *supervisor_path; /* may be NULL: resolved at create */
    char *runtime_dir;     /* configured base or NULL */
    char *workspace_dir;   /* configured base or NULL */
    int isolated;          /* namespaces (the default) */
    enum sbx_local_network network;
    struct sbx_local_limits limits;
    struct sbx_local_grant *grants; /* strings owned */
    size_t n_grants;
    int ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_ports;
    int64_t start_timeout_ms;
    int64_t request_idle_ms;
    int64_t test_delay_ms; /* test only: the supervisor's pause before each request */
    struct sbx_strv allow; /* network allow: the normalized patterns */
    char *port_bind;       /* NULL: 127.0.0.1 */
    int allow_ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_allow_ports;
    struct sbx_strv test_hosts; /* test only: "name=ip" */
    int tied;                   /* sandboxes go away with the calling process */
    uint64_t disk_bytes;        /* resolved: SBX_LOCAL_LIMIT_NONE = no limit */
    int disk_explicit;          /* given by the caller: must be enforced */
};

static int write_state(const char *dir, const json_t *state, struct sbx_error *err);

struct local_session {
    struct sbx_session base;
    char *dir;       /* runtime directory of this sandbox */
    char *rundir;    /* the runtime base */
    char *workspace; /* host path */
    int owned;       /* workspace created by us */
    json_t *state;
    pthread_mutex_t root_lock;
    int root_fd; /* workspace dir fd from the supervisor, -1 until first use */
    int closed;
    int64_t idle_ms; /* requests: how long the supervisor may answer nobody */
    /* The state's manifest, parsed at the first chgrp (its users and groups); NULL before. */
    struct sbx_manifest *accounts;
};

struct local_proc {
    struct sbx_proc base;
    int ctl;
    int have_status;
    struct sbx_exit status;
    char *id;
};

/* ---------------------------------------------------------------------------------------------
 * Helpers */

/* Start waiting for the supervisor in runtime dir dir: idle_ms without progress, at most
 * REQUEST_LIMIT_MS. Returns the progress counter's descriptor (the caller closes it) or -1 (a
 * supervisor without one: idle_ms is then a plain deadline). */
static int wait_begin(const char *dir, int64_t idle_ms, struct sbx__proto_wait *w)
{
    int64_t limit_ms = idle_ms > REQUEST_LIMIT_MS ? idle_ms : REQUEST_LIMIT_MS;
    sbx__proto_wait_init(w, sbx_deadline_after_ms(idle_ms));
    w->idle_ms = idle_ms;
    w->limit = sbx_deadline_after_ms(limit_ms);
    char *path = sbx_xasprintf("%s/%s", dir, SBX_PROTO_PROGRESS);
    w->progress_fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    free(path);
    if (w->progress_fd >= 0 && sbx__proto_progress_read(w->progress_fd, &w->seen) < 0)
        sbx_fd_close(&w->progress_fd);
    return w->progress_fd;
}

static int request(const char *dir, const char *id, const json_t *req, json_t **reply, int *fds,
                   size_t max_fds, size_t *nfds, int64_t idle_ms, struct sbx_error *err)
{
    int sock = -1;
    struct sbx__proto_wait w;
    int progress = wait_begin(dir, idle_ms, &w);
    int rc = sbx__local_connect(dir, id, &w, &sock, err);
    if (rc < 0)
        goto out;
    rc = sbx__proto_send_wait(sock, req, NULL, 0, &w, err);
    if (rc == 0)
        rc = sbx__proto_recv_wait(sock, reply, fds, max_fds, nfds, &w, err);
    if (rc == -SBX_E_SANDBOX)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", id);
    if (rc == 0) {
        rc = sbx__proto_check(*reply, err);
        if (rc < 0) {
            json_decref(*reply);
            *reply = NULL;
            for (size_t i = 0; nfds && i < *nfds; i++)
                close(fds[i]);
        }
    }
out:
    sbx_fd_close(&sock);
    sbx_fd_close(&progress);
    return rc;
}

static int valid_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > ID_MAX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

/* Expand an id or unique prefix to the full id found in the runtime base. */
static int resolve_id(const char *base, const char *prefix, char **out, struct sbx_error *err)
{
    if (!valid_id(prefix))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", prefix);
    DIR *d = opendir(base);
    if (!d && (errno == EMFILE || errno == ENFILE)) {
        int rc = sbx_error_errno(err, errno, "cannot look for sandbox '%s'", prefix);
        sbx__proto_fd_hint(err);
        return rc;
    }
    if (!d)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    char *found = NULL;
    int many = 0;
    size_t n = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!valid_id(e->d_name) || strncmp(e->d_name, prefix, n) != 0)
            continue;
        if (strcmp(e->d_name, prefix) == 0) {
            free(found);
            found = sbx_xstrdup(e->d_name);
            many = 0;
            break;
        }
        if (found)
            many = 1;
        else
            found = sbx_xstrdup(e->d_name);
    }
    closedir(d);
    if (!found)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    if (many) {
        free(found);
        return sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id '%s' is ambiguous", prefix);
    }
    *out = found;
    return 0;
}

static int read_state(const char *dir, const char *id, json_t **out, struct sbx_error *err)
{
    struct sbx_buf b;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0 && (errno == EMFILE || errno == ENFILE)) {
        int rc = sbx_error_errno(err, errno, "cannot read the state of sandbox '%s'", id);
        sbx__proto_fd_hint(err);
        return rc;
    }
    if (dfd < 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, errno, "no sandbox '%s'", id);
    sbx_buf_init(&b, STATE_MAX);
    /* The runtime directory is ours alone (0700): plain openat is enough here. */
    int fd = openat(dfd, SBX_PROTO_STATE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = 0;
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        rc = sbx_error_errno(err, errno, "cannot read the state of sandbox '%s'", id);
        sbx__proto_fd_hint(err);
    } else {
        rc = fd < 0 ? sbx_error_set(err, SBX_E_SANDBOX, errno, "sandbox '%s' is gone", id)
                    : sbx_fd_read_all(fd, STATE_MAX, &b, err);
    }
    if (fd >= 0)
        close(fd);
    if (rc == 0)
        rc = sbx_json_parse(b.data, b.len, NULL, out, err);
    if (rc == 0 && !json_is_object(*out)) {
        json_decref(*out);
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "state of sandbox '%s' is not an object", id);
    }
    sbx_buf_release(&b);
    close(dfd);
    return rc;
}

/* Take sandbox id down (teardown.c): its workspace's disk image (disk: the state's "disk", may
 * be NULL; for a workspace sbx made, owned, an image at the derived path is found without it),
 * and the workspace too when remove_workspace. */
static int stop_and_clean(const char *dir, const char *id, const char *workspace,
                          int remove_workspace, const json_t *disk, int owned, json_t *removed,
                          struct sbx_error *err)
{
    const char *image = json_string_value(json_object_get(disk, "image"));
    char *derived = NULL;
    struct stat st;
    if (!image && owned && workspace) {
        /* A create killed between mounting the image and recording it in the state. */
        derived = sbx_xasprintf("%s" SBX__DISK_IMAGE_SUFFIX, workspace);
        if (lstat(derived, &st) == 0 && S_ISREG(st.st_mode))
            image = derived;
    }
    struct sbx__teardown t = {
            .dir = dir,
            .id = id,
            .workspace = remove_workspace ? workspace : NULL,
            .removed = removed,
            .disk_image = image,
            .disk_loop = image == derived ? NULL : json_string_value(json_object_get(disk, "loop")),
            .mount = workspace};
    int rc = sbx__local_teardown(&t, err);
    free(derived);
    return rc;
}

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
        int rc = sbx__proto_recv(p->ctl, &m, NULL, 0, NULL, sbx_deadline_after_ms(REQUEST_IDLE_MS),
                                 err);
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

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free};

static int sess_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec,
                           const char *cwd, struct sbx_proc **out, struct sbx_error *err)
{
    struct local_session *s = (struct local_session *)bs;
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
    progress = wait_begin(s->dir, s->idle_ms, &w);
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

static int root_fd(struct local_session *s, int *out, struct sbx_error *err)
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
        rc = request(s->dir, s->base.id, req, &reply, fds, 1, &nfds, s->idle_ms, err);
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
    struct local_session *s = (struct local_session *)bs;
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
    struct local_session *s = (struct local_session *)bs;
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
    struct local_session *s = (struct local_session *)bs;
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
    struct local_session *s = (struct local_session *)bs;
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
        if (l.n == cap) {
            cap = cap ? cap * 2 : 16;
            l.v = sbx_xrealloc(l.v, cap * sizeof(*l.v));
        }
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
    int dfd, rc = root_fd((struct local_session *)bs, &dfd, err);
    if (rc < 0)
        return rc;
    return sbx_fs_mkdir(dfd, path, 0755, (flags & SBX_MKDIR_PARENTS) ? SBX_FS_PARENTS : 0, err);
}

static int sess_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    int dfd, rc = root_fd((struct local_session *)bs, &dfd, err);
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
    int rc = root_fd((struct local_session *)bs, &dfd, err);
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
static int ephemeral_env(const struct sbx_manifest *from, struct sbx_manifest *to,
                         struct sbx_error *err)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sbx_manifest_env_count(from); i++) {
        const struct sbx_manifest_env *v = sbx_manifest_env_at(from, i);
        if (!v->ephemeral)
            continue;
        int flags = SBX_MANIFEST_ENV_EPHEMERAL;
        const char *value = v->value;
        if (v->host_env) {
            flags |= SBX_MANIFEST_ENV_HOST;
            value = v->host_env;
        } else if (v->secret) {
            flags |= SBX_MANIFEST_ENV_SECRET;
            value = sbx_secret_reveal(v->secret, NULL);
        }
        rc = sbx_manifest_set_env(to, v->name, value, flags, err);
    }
    if (rc < 0)
        sbx_error_prefix(err, "the ephemeral environment of the given manifest");
    return rc;
}

/* The sandbox's gid of group name: a manifest group (2000 + i) or the private group of an
 * account user (1000 + i), as /etc/group inside lists them. */
static int sandbox_gid(struct local_session *s, const char *name, unsigned *out,
                       struct sbx_error *err)
{
    const json_t *mj = json_object_get(s->state, "manifest");
    struct sbx_manifest_load_opts lo = {
            .base_dir = "/", .flags = SBX_MANIFEST_NO_HOST_CHECKS | SBX_MANIFEST_CONTENT_DIGESTS};
    struct sbx_strv users;
    int rc = 0;
    /* Parsed once: materialisation asks for every entry with a group. */
    if (!s->accounts && json_is_object(mj) &&
        (rc = sbx_manifest_from_json(mj, &lo, &s->accounts, err)) < 0)
        return rc;
    const struct sbx_manifest *m = s->accounts;
    sbx_strv_init(&users);
    if (m)
        sbx_manifest_account_users(m, &users);
    if (!users.n)
        sbx_strv_push(&users, SBX__ISOLATION_DEFAULT_USER);
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
    struct local_session *s = (struct local_session *)bs;
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

/* Ask the supervisor for a forward of port: a TCP URL ("url"), or with unix_socket the path of
 * a unix socket in the runtime dir ("path"). *out: caller frees. */
static int port_request(struct sbx_session *bs, int port, int unix_socket, char **out,
                        struct sbx_error *err)
{
    struct local_session *s = (struct local_session *)bs;
    json_t *req = json_pack("{s:s,s:i,s:b}", "op", "port", "port", port, "unix", unix_socket),
           *reply = NULL;
    int rc = request(s->dir, bs->id, req, &reply, NULL, 0, NULL, s->idle_ms, err);
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
    *out = json_deep_copy(((struct local_session *)bs)->state);
    return 0;
}

static int sess_workspace_fd(struct sbx_session *bs, int *out, struct sbx_error *err)
{
    return root_fd((struct local_session *)bs, out, err);
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct local_session *s = (struct local_session *)bs;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return write_state(s->dir, s->state, err);
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct local_session *s = (struct local_session *)bs;
    pthread_mutex_lock(&s->root_lock);
    sbx_fd_close(&s->root_fd);
    pthread_mutex_unlock(&s->root_lock);
    int rc = stop_and_clean(s->dir, bs->id, s->workspace, delete_workspace && s->owned,
                            json_object_get(s->state, "disk"), s->owned, NULL, err);
    if (rc == 0)
        s->closed = 1;
    return rc;
}

static void sess_free(struct sbx_session *bs)
{
    struct local_session *s = (struct local_session *)bs;
    sbx_session_release_base(bs);
    sbx_fd_close(&s->root_fd);
    pthread_mutex_destroy(&s->root_lock);
    json_decref(s->state);
    sbx_manifest_free(s->accounts);
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
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .workspace_fd = sess_workspace_fd,
        .record_snapshot = sess_record_snapshot,
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

static struct local_session *session_from_state(const char *rundir, const char *dir,
                                                json_t *take_state)
{
    struct local_session *s = sbx_xcalloc(1, sizeof(*s));
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
    s->idle_ms = REQUEST_IDLE_MS;
    pthread_mutex_init(&s->root_lock, NULL);
    return s;
}

static int check_state(const json_t *st, const char *id, struct sbx_error *err)
{
    int64_t version = 0;
    const char *provider = NULL, *sid = NULL, *ws = NULL, *root = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(st, sbx__local_state_keys, err)) < 0 ||
        (rc = sbx_json_get_int(st, "version", 1, &version, err)) < 0 ||
        (rc = sbx_json_get_string(st, "provider", 1, &provider, err)) < 0 ||
        (rc = sbx_json_get_string(st, "id", 1, &sid, err)) < 0 ||
        (rc = sbx_json_get_string(st, "workspace", 1, &ws, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0)
        goto out;
    if (version != 1)
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "session state version %lld is not 1",
                           (long long)version);
    else if (strcmp(provider, "local") != 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "session state is for provider '%s', not 'local'",
                           provider);
    else if (!valid_id(sid) || (id && strcmp(sid, id) != 0))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "session state has a bad id '%s'", sid);
out:
    if (rc < 0)
        sbx_error_prefix(err, "session state");
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Client */

/* Start the supervisor detached (its own session, reparented away from us) and wait until it
 * reports that it serves. */
struct while_starting {
    int (*fn)(void *ctx, struct sbx_error *err);
    void *ctx;
};

/* ws->fn runs while the supervisor boots (it takes a few milliseconds to exec and link); its
 * error is returned after the supervisor has reported, so the caller can shut it down. */
/* Without pidfd_open (Linux < 5.3, valgrind, a seccomp filter that refuses it): the read end
 * of a pipe whose write end this process holds, close-on-exec, until it ends. */
static int tie_pipe[2] = {-1, -1};
static pthread_once_t tie_pipe_once = PTHREAD_ONCE_INIT;

static void make_tie_pipe(void)
{
    if (pipe2(tie_pipe, O_CLOEXEC) < 0)
        tie_pipe[0] = tie_pipe[1] = -1;
}

/* What a tied sandbox's supervisor watches: a pidfd of this process, which unlike a pid can
 * never come to name another process, else the pipe above. */
static int open_tie(int *out, struct sbx_error *err)
{
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
        pthread_once(&tie_pipe_once, make_tie_pipe);
        errno = EMFILE;
        fd = tie_pipe[0] >= 0 ? fcntl(tie_pipe[0], F_DUPFD_CLOEXEC, 0) : -1;
    }
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot tie the sandbox to this process");
    *out = fd;
    return 0;
}

/* tie_fd (>= 0): handed to the supervisor as SBX_PROTO_TIE_FD. */
static int spawn_supervisor(const char *path, const char *id, const json_t *cfg, int64_t timeout_ms,
                            const struct while_starting *ws, int tie_fd, json_t **report_out,
                            struct sbx_error *err)
{
    struct sbx_error werr = SBX_ERROR_INIT;
    int wrc = 0;
    int sp[2] = {-1, -1}, rc;
    struct sbx__child child = {.pid = -1, .in = -1, .out = -1, .err = -1};
    struct sbx_buf text;
    const char *const argv[] = {path, SBX_LOCAL_SUPERVISE_VERB, id, NULL};

    sbx_buf_init(&text, 65536);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
        return sbx_error_errno(err, errno, "socketpair");
    /* Into a new session, with an empty environment and nothing of ours but the socket (and the
     * tie); the supervisor forks once more itself and this first process exits at once, so the
     * supervisor ends up detached: no session leader, parent gone. */
    struct sbx__spawn spec = {.program = path, .argv = argv, .new_session = 1, .name = path};
    spec.in = spec.out = (struct sbx__spawn_stdio){.how = SBX__SPAWN_FD, .fd = sp[1]};
    if (tie_fd >= 0)
        spec.keep[spec.nkeep++] = (struct sbx__spawn_keep){.fd = tie_fd, .at = SBX_PROTO_TIE_FD};
    rc = sbx__spawn_start(&spec, &child, err);
    if (rc < 0) {
        sbx_error_prefix(err, "the supervisor");
        goto out;
    }
    sbx_fd_close(&sp[1]);
    char *cfgtext = sbx_json_dumps(cfg, SBX_JSON_COMPACT);
    size_t len = strlen(cfgtext), off = 0;
    rc = 0;
    while (off < len) {
        ssize_t w = send(sp[0], cfgtext + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = -1;
            break;
        }
        off += (size_t)w;
    }
    free(cfgtext);
    shutdown(sp[0], SHUT_WR);
    if (ws)
        wrc = ws->fn(ws->ctx, &werr);
    /* Read the report until the supervisor lets go of the socket. */
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        struct pollfd pfd = {.fd = sp[0], .events = POLLIN};
        int r = poll(&pfd, 1, sbx_deadline_poll_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "the supervisor did not start within %lld ms",
                               (long long)timeout_ms);
            goto out;
        }
        char buf[4096];
        ssize_t n = recv(sp[0], buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (sbx_buf_add(&text, buf, (size_t)n, err) < 0) {
            rc = -SBX_E_TOOBIG;
            goto out;
        }
    }
    /* The first process has forked the supervisor and exited by now (or died): reap it. */
    (void)sbx__child_wait(&child, -1, NULL, NULL);
    json_t *report = NULL;
    if (text.len == 0 || sbx_json_parse(text.data, text.len, NULL, &report, NULL) < 0 ||
        !json_is_object(report)) {
        json_decref(report);
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the supervisor '%s' exited during start-up",
                           path);
        goto out;
    }
    rc = sbx__proto_check(report, err);
    if (rc == 0 && wrc < 0)
        rc = sbx_error_copy(err, &werr);
    if (rc == 0 && report_out)
        *report_out = json_incref(report);
    json_decref(report);
out:
    /* Gave up waiting: the supervisor, finding nobody to report to, exits by itself. */
    sbx__child_kill(&child);
    sbx_buf_release(&text);
    sbx_fd_close(&sp[0]);
    sbx_fd_close(&sp[1]);
    return rc;
}

/* mkdir -p path (absolute), each new level private to us (0700). */
static int mkdir_private(char *path, struct sbx_error *err)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c0 = *p;
        *p = '\0';
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
            int rc = sbx_error_errno(err, errno, "cannot create '%s'", path);
            *p = c0;
            return rc;
        }
        *p = c0;
        if (!c0)
            return 0;
    }
}

/* given, else $env_name, else ${XDG_STATE_HOME:-~/.local/state}/sbx/sub; made 0700 (each new
 * level) when make. */
static int state_subdir(const char *given, const char *env_name, const char *sub, int make,
                        char **out, struct sbx_error *err)
{
    const char *env = getenv(env_name), *state = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    char *dir;
    if (given)
        dir = sbx_xstrdup(given);
    else if (env && env[0] == '/')
        dir = sbx_xstrdup(env);
    else if (state && state[0] == '/')
        dir = sbx_xasprintf("%s/sbx/%s", state, sub);
    else if (home && home[0] == '/')
        dir = sbx_xasprintf("%s/.local/state/sbx/%s", home, sub);
    else
        return sbx_error_set(err, SBX_E_INVAL, 0, "no place for sbx/%s: set HOME or XDG_STATE_HOME",
                             sub);
    int rc = make ? mkdir_private(dir, err) : 0;
    if (rc < 0) {
        free(dir);
        return rc;
    }
    *out = dir;
    return 0;
}

static int workspace_base(const struct local_client *c, char **out, struct sbx_error *err)
{
    return state_subdir(c->workspace_dir, "SBX_WORKSPACES", "workspaces", 1, out, err);
}

/* state.json in the new runtime directory: written whole before the supervisor exists, so a
 * reader never sees it partial. */
static int write_state(const char *dir, const json_t *state, struct sbx_error *err)
{
    char *text = sbx_json_dumps(state, SBX_JSON_PRETTY);
    char *tmp = sbx_xasprintf("%s/%s.tmp", dir, SBX_PROTO_STATE);
    char *path = sbx_xasprintf("%s/%s", dir, SBX_PROTO_STATE);
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        rc = sbx_error_errno(err, errno, "cannot create '%s'", tmp);
    if (rc == 0)
        rc = sbx_fd_write_all(fd, text, strlen(text), err);
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = sbx_error_errno(err, errno, "cannot write '%s'", tmp);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = sbx_error_errno(err, errno, "cannot rename '%s'", tmp);
    if (rc < 0)
        unlink(tmp);
    free(text);
    free(tmp);
    free(path);
    return rc;
}

struct state_job {
    const char *dir;
    json_t *state;
    const struct sbx_manifest *manifest;
    int materialize_flags;
    struct sbx_session *session; /* materialise through it now (isolated: the host directory) */
    struct sbx_progress_sink *progress;
};

/* The manifest digest and state.json; run while the supervisor starts. An isolated workspace is
 * reached on the host (see root_fd), so its manifest is materialised meanwhile too: the
 * supervisor's start-up (cgroup attach, namespaces, the new root) and the copy overlap. */
static int write_initial_state(void *ctx, struct sbx_error *err)
{
    struct state_job *j = ctx;
    int rc = 0;
    if (j->session && j->manifest) {
        json_t *records = NULL;
        rc = sbx__materialize(j->session, j->manifest, j->materialize_flags, j->progress, &records,
                              err);
        if (rc < 0)
            return rc;
        sbx_json_set(j->state, "materialized", records);
    }
    if (j->manifest) {
        char hex[SBX_SHA256_HEX_LEN + 1];
        rc = sbx__manifest_digest(j->manifest, hex, err);
        if (rc < 0)
            return rc;
        char *tagged = sbx_xasprintf("sha256:%s", hex);
        sbx_json_set(j->state, "manifest_digest", sbx_json_str(tagged));
        free(tagged);
    } else {
        sbx_json_set(j->state, "manifest_digest", json_null());
    }
    return write_state(j->dir, j->state, err);
}

/* Hold an exclusive flock on the runtime dir of a sandbox being created. The descriptor is
 * close-on-exec, so no supervisor or git child inherits the lease. */
static int create_lease(const char *dir, struct sbx_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open runtime directory '%s'", dir);
    if (flock(fd, LOCK_EX) < 0) {
        int rc = sbx_error_errno(err, errno, "cannot lock runtime directory '%s'", dir);
        close(fd);
        return rc;
    }
    return fd;
}

/* 1 while a creator holds the lease on dir. */
static int being_created(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int busy = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd); /* drops our lock, if we got it */
    return busy;
}

static void format_size(uint64_t n, char *out, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && n >= 1024 && n % 1024 == 0) {
        n /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, len, "%llu bytes", (unsigned long long)n);
    else
        snprintf(out, len, "%llu %ciB", (unsigned long long)n, units[u]);
}

/* The size limit of a new workspace: a disk image when this process can make one for a fresh
 * workspace (wsbase: where it is; NULL for a given directory). *disk_out: the state's "disk";
 * *image_out, *loop_out: set when an image was mounted (the caller detaches it on failure). */
static int workspace_disk(const struct local_client *c, const char *id, const char *wsbase,
                          const char *ws, char **image_out, char **loop_out, json_t **disk_out,
                          struct sbx_error *err)
{
    json_t *d = json_object();
    struct sbx_error why = SBX_ERROR_INIT;
    int rc = 0;
    if (c->disk_bytes == SBX_LOCAL_LIMIT_NONE) {
        sbx_json_set(d, "limit", json_null());
        sbx_json_set(d, "enforced", json_false());
        *disk_out = d;
        return 0;
    }
    sbx_json_set(d, "limit", json_integer((json_int_t)c->disk_bytes));
    if (!wsbase)
        rc = sbx_error_set(&why, SBX_E_UNSUPPORTED, 0,
                           "a given workspace directory is used in place, on the host's file "
                           "system");
    else
        rc = sbx__disk_usable(&why);
    if (rc == 0) {
        char *image = sbx_xasprintf("%s" SBX__DISK_IMAGE_SUFFIX, ws), *loop = NULL;
        rc = sbx__disk_attach(image, ws, c->disk_bytes, &loop, &why);
        if (rc == 0) {
            sbx_json_set(d, "enforced", json_true());
            sbx_json_set(d, "image", sbx_json_str(image));
            sbx_json_set(d, "loop", sbx_json_str(loop));
            *image_out = image;
            *loop_out = loop;
            *disk_out = d;
            return 0;
        }
        free(image);
    }
    char size[32];
    format_size(c->disk_bytes, size, sizeof(size));
    if (c->disk_explicit) {
        json_decref(d);
        rc = sbx_error_copy(err, &why);
        sbx_error_prefix(err, "disk limit %s cannot be enforced", size);
        return rc;
    }
    sbx_log(SBX_LOG_WARN, "sandbox '%s': disk limit %s is not enforced: %s", id, size, why.msg);
    sbx_json_set(d, "enforced", json_false());
    sbx_json_set(d, "reason", sbx_json_str(why.msg));
    *disk_out = d;
    return 0;
}

/* The limits the supervisor reported into the state ("limits" in force, "unenforced": name and
 * reason of each one the host could not apply), and one warning line naming the unenforced:
 * a caller must not believe in a limit that is not there. */
static int record_limits(const char *dir, const char *id, json_t *state, const json_t *report,
                         struct sbx_error *err)
{
    json_t *lim = json_object_get(report, "limits"), *un = json_object_get(report, "unenforced");
    if (!json_is_object(lim) || !json_is_array(un))
        return 0;
    sbx_json_set(state, "limits", json_deep_copy(lim));
    sbx_json_set(state, "unenforced", json_deep_copy(un));
    size_t n = json_array_size(un), i;
    if (n) {
        struct sbx_buf names;
        sbx_buf_init(&names, 1024);
        const char *reason = NULL;
        int same = 1;
        json_t *u;
        json_array_foreach(un, i, u)
        {
            const char *nm = json_string_value(json_object_get(u, "name"));
            const char *why = json_string_value(json_object_get(u, "reason"));
            (void)sbx_buf_addf(&names, NULL, "%s%s",
                               i == 0       ? ""
                               : i + 1 == n ? " and "
                                            : ", ",
                               nm ? nm : "?");
            if (!reason)
                reason = why;
            else if (!why || strcmp(reason, why) != 0)
                same = 0;
        }
        sbx_log(SBX_LOG_WARN, "sandbox '%s': %s limit%s %s not enforced: %s", id, names.data,
                n > 1 ? "s" : "", n > 1 ? "are" : "is",
                same && reason ? reason : "see 'sbx sandbox ps --json'");
        sbx_buf_release(&names);
    }
    /* The workspace's size limit is decided (and warned about) before the supervisor starts;
     * it is listed with the others. */
    const json_t *disk = json_object_get(state, "disk");
    if (json_is_integer(json_object_get(disk, "limit")) &&
        json_is_false(json_object_get(disk, "enforced")))
        sbx_json_append(
                json_object_get(state, "unenforced"),
                json_pack("{s:s,s:O?}", "name", "disk", "reason", json_object_get(disk, "reason")));
    return write_state(dir, state, err);
}

/* A limit or size as the session state records it: the number, or "none". */
static json_t *amount_json(uint64_t v)
{
    return v == SBX_LOCAL_LIMIT_NONE ? sbx_json_str("none") : json_integer((json_int_t)v);
}

/* What this client creates sandboxes with, as the session state's "options": everything a
 * rebuild needs and nothing of the caller's environment. Grants are recorded (a reader sees
 * what the sandbox could reach), but a rebuild from a state file takes them only from its own
 * client: see sbx_client_resume_with. */
static json_t *options_json(const struct local_client *c)
{
    json_t *o = json_object(), *lim = json_object(), *grants = json_array();
    sbx_json_set(o, "isolation", sbx_json_str(c->isolated ? "namespaces" : "none"));
    sbx_json_set(o, "network",
                 sbx_json_str(!c->isolated || c->network == SBX_LOCAL_NETWORK_HOST ? "full"
                              : c->network == SBX_LOCAL_NETWORK_ALLOW              ? "allow"
                                                                                   : "none"));
    const struct sbx_local_limits *l = &c->limits;
    const uint64_t vals[] = {l->memory_bytes, l->pids, l->cpu_millis, l->file_size_bytes,
                             l->open_files};
    static const char *const names[] = {"memory", "pids", "cpu_millis", "file_size", "open_files"};
    for (size_t i = 0; i < 5; i++)
        if (vals[i])
            sbx_json_set(lim, names[i], amount_json(vals[i]));
    sbx_json_set(o, "limits", lim);
    sbx_json_set(o, "disk",
                 c->disk_bytes == SBX_LOCAL_LIMIT_NONE ? sbx_json_str("none")
                 : c->disk_explicit                    ? json_integer((json_int_t)c->disk_bytes)
                                                       : json_null());
    for (size_t i = 0; i < c->n_grants; i++) {
        json_t *g = json_object();
        sbx_json_set(g, "src", sbx_json_str(c->grants[i].src));
        if (c->grants[i].dst)
            sbx_json_set(g, "dst", sbx_json_str(c->grants[i].dst));
        sbx_json_set(g, "writable", json_boolean(c->grants[i].writable));
        sbx_json_set(g, "dangerous", json_boolean(c->grants[i].dangerous));
        sbx_json_append(grants, g);
    }
    sbx_json_set(o, "grants", grants);
    if (c->allow.n) {
        json_t *a = json_array(), *p = json_array();
        for (size_t i = 0; i < c->allow.n; i++)
            sbx_json_append(a, sbx_json_str(c->allow.v[i]));
        for (size_t i = 0; i < c->n_allow_ports; i++)
            sbx_json_append(p, json_integer(c->allow_ports[i]));
        sbx_json_set(o, "allow_domains", a);
        sbx_json_set(o, "allow_ports", p);
    }
    if (c->port_bind)
        sbx_json_set(o, "port_bind", sbx_json_str(c->port_bind));
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * Stopped sandboxes: <stopped>/<id>.json holds the session state (with its snapshot, held in
 * the store) of a sandbox that sbx_client_stop ended. */

#define STOPPED_SUFFIX ".json"
#define HOLDER_PREFIX  "sandbox-"

/* $SBX_STOPPED, else ${XDG_STATE_HOME:-~/.local/state}/sbx/stopped; made 0700 when make. */
static int stopped_dir(int make, char **out, struct sbx_error *err)
{
    return state_subdir(NULL, "SBX_STOPPED", "stopped", make, out, err);
}

/* The full id of the stopped sandbox prefix names: 1 found, 0 none (or no such directory),
 * -code when ambiguous. */
static int find_stopped(const char *sdir, const char *prefix, char **out, struct sbx_error *err)
{
    if (!valid_id(prefix))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", prefix);
    DIR *d = opendir(sdir);
    if (!d)
        return 0;
    char *found = NULL;
    int many = 0;
    size_t n = strlen(prefix), sl = strlen(STOPPED_SUFFIX);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= sl || strcmp(e->d_name + len - sl, STOPPED_SUFFIX) != 0)
            continue;
        char *id = sbx_xstrndup(e->d_name, len - sl);
        if (!valid_id(id) || strncmp(id, prefix, n) != 0) {
            free(id);
            continue;
        }
        if (strcmp(id, prefix) == 0) {
            free(found);
            found = id;
            many = 0;
            break;
        }
        if (found) {
            many = 1;
            free(id);
        } else {
            found = id;
        }
    }
    closedir(d);
    if (many) {
        free(found);
        return sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id '%s' is ambiguous", prefix);
    }
    if (!found)
        return 0;
    *out = found;
    return 1;
}

/* The stopped record of id, checked as any saved session state. */
static int read_stopped(const char *sdir, const char *id, json_t **out, struct sbx_error *err)
{
    char *path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, id);
    struct sbx_buf b;
    json_t *st = NULL;
    sbx_buf_init(&b, SBX_SESSION_STATE_MAX + 1);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", path)
                    : sbx_fd_read_all(fd, SBX_SESSION_STATE_MAX, &b, err);
    if (fd >= 0)
        close(fd);
    if (rc == 0)
        rc = sbx_session_state_parse(b.data, b.len, &st, err);
    if (rc == 0 && strcmp(json_string_value(json_object_get(st, "id")), id) != 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "it names another sandbox");
    if (rc == 0 && !json_is_string(json_object_get(st, "snapshot")))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "it has no snapshot");
    if (rc < 0) {
        json_decref(st);
        sbx_error_prefix(err, "stopped sandbox '%s'", id);
    } else {
        *out = st;
    }
    sbx_buf_release(&b);
    free(path);
    return rc;
}

static int write_stopped(const char *sdir, const char *id, const json_t *state,
                         struct sbx_error *err)
{
    char *text = NULL, *name = sbx_xasprintf("%s" STOPPED_SUFFIX, id);
    int dfd = open(sdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = dfd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", sdir) : 0;
    if (rc == 0)
        rc = sbx_session_state_serialize(state, &text, err);
    if (rc == 0)
        rc = sbx_fs_write_state(dfd, name, text, strlen(text), 0600, err);
    if (dfd >= 0)
        close(dfd);
    free(text);
    free(name);
    return rc;
}

/* Forget the stopped record of id and let go of its snapshot (which stays in the store until
 * sbx snapshot rm). Errors are logged: the sandbox they were about is gone either way. */
static void drop_stopped(const char *sdir, const char *id, const char *ref)
{
    char *path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, id);
    char *holder = sbx_xasprintf(HOLDER_PREFIX "%s", id);
    struct sbx_snapshot_store *st = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    if (unlink(path) < 0 && errno != ENOENT)
        sbx_log(SBX_LOG_WARN, "cannot remove '%s': %s", path, strerror(errno));
    if (ref && (sbx_snapshot_store_open(NULL, &st, &e) < 0 ||
                sbx_snapshot_release(st, ref, holder, &e) < 0))
        sbx_log(SBX_LOG_WARN, "sandbox '%s': cannot release its snapshot: %s", id, e.msg);
    sbx_snapshot_store_free(st);
    free(holder);
    free(path);
}

/* 1 when a stopped record of exactly id exists. */
static int is_stopped(const char *id)
{
    char *sdir = NULL, *path;
    struct stat st;
    if (stopped_dir(0, &sdir, NULL) < 0)
        return 0;
    path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, id);
    int yes = lstat(path, &st) == 0;
    free(path);
    free(sdir);
    return yes;
}

/* One create in progress: what the steps below make, and so what rollback undoes. */
struct create_job {
    struct local_client *c;
    const struct sbx_create_spec *spec;
    char id[2 * ID_BYTES + 1];
    char *sup;        /* the supervisor program */
    char *rundir;     /* the runtime base */
    char *dir;        /* this sandbox's runtime directory */
    char *ws;         /* the workspace */
    char *wsbase;     /* where a fresh workspace is made; NULL for a given one */
    char *image;      /* the workspace's disk image, once mounted */
    char *loop;       /* its loop device */
    char *snap_ref;   /* the snapshot to restore */
    const char *root; /* where commands see the workspace (borrowed) */
    const char *net;  /* the state's network mode */
    int owned;        /* a fresh workspace */
    int made_dir, made_ws, started;
    int lock_fd;   /* the create lease on dir */
    int tie_fd;    /* the creator's pidfd for a tied sandbox */
    json_t *mjson; /* the manifest as the state records it, until the state takes it */
    json_t *state; /* until the session takes it */
    json_t *cfg;   /* the supervisor's configuration */
    struct local_session *ls;
    struct sbx_snapshot_store *store;
    struct sbx_progress_sink progress;
    int mflags; /* how the manifest is materialised */
};

/* A bad id, a stopped one, a bad snapshot or a manifest too large for the state: refused before
 * anything of the sandbox exists. */
static int check_spec(struct create_job *j, int allow_stopped, struct sbx_error *err)
{
    const struct sbx_create_spec *spec = j->spec;
    int rc;
    if (spec->id && (strlen(spec->id) != 2 * ID_BYTES || !valid_id(spec->id)))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id (16 hex digits)",
                             spec->id);
    if (spec->id && !allow_stopped && is_stopped(spec->id))
        return sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' exists and is stopped", spec->id);
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &j->store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(j->store, spec->snapshot, NULL, &j->snap_ref, err)) < 0))
        return rc;
    j->mflags = j->snap_ref ? SBX__MATERIALIZE_EPHEMERAL_ONLY : 0;
    if (spec->manifest && (rc = sbx_manifest_to_json(spec->manifest,
                                                     SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV |
                                                             SBX_MANIFEST_JSON_CONTENT_DIGESTS,
                                                     &j->mjson, NULL, err)) < 0)
        return rc;
    if (j->mjson) {
        /* The state must stay readable: its manifest has a bound. The files a snapshot keeps
         * count by digest only; the bytes of ephemeral ones, written again on every start, are
         * there in full. */
        char *text = sbx_json_dumps(j->mjson, SBX_JSON_COMPACT);
        size_t n = strlen(text);
        free(text);
        if (n > MANIFEST_STATE_MAX)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "the manifest takes %zu bytes in the session state, more than "
                                 "%zu (large ephemeral files belong in local_file entries)",
                                 n, MANIFEST_STATE_MAX);
    }
    return 0;
}

/* path made absolute (it exists): the supervisor is given absolute paths only. */
static int absolute_dir(char **path, struct sbx_error *err)
{
    if ((*path)[0] == '/')
        return 0;
    char *abs = realpath(*path, NULL);
    if (!abs)
        return sbx_error_errno(err, errno, "cannot resolve '%s'", *path);
    free(*path);
    *path = abs;
    return 0;
}

/* The supervisor program, the id, and the runtime directory under its create lease. */
static int make_runtime_dir(struct create_job *j, struct sbx_error *err)
{
    int rc;
    if ((rc = sbx__supervisor_program(j->c->supervisor_path, &j->sup, err)) < 0 ||
        (rc = sbx__runtime_base(j->c->runtime_dir, &j->rundir, err)) < 0 ||
        (rc = absolute_dir(&j->rundir, err)) < 0)
        return rc;
    if (j->spec->id)
        memcpy(j->id, j->spec->id, sizeof(j->id));
    else if ((rc = sbx_random_hex(j->id, ID_BYTES, err)) < 0)
        return rc;
    j->dir = sbx_xasprintf("%s/%s", j->rundir, j->id);
    if (mkdir(j->dir, 0700) < 0)
        return errno == EEXIST && j->spec->id
                       ? sbx_error_set(err, SBX_E_EXISTS, EEXIST, "sandbox '%s' already exists",
                                       j->id)
                       : sbx_error_errno(err, errno, "cannot create runtime directory '%s'",
                                         j->dir);
    j->made_dir = 1;
    /* The create lease: while we hold it, ps --all says "creating" and prune keeps off. It goes
     * with us however we end, so a creator killed mid-create leaves a dir prune can take. */
    j->lock_fd = create_lease(j->dir, err);
    return j->lock_fd < 0 ? j->lock_fd : 0;
}

/* The given workspace (an existing directory), else the path of a fresh one. */
static int choose_workspace(struct create_job *j, struct sbx_error *err)
{
    int rc;
    if (j->spec->workspace) {
        struct stat st;
        j->ws = realpath(j->spec->workspace, NULL);
        if (!j->ws || stat(j->ws, &st) < 0 || !S_ISDIR(st.st_mode))
            return sbx_error_set(err, SBX_E_NOTFOUND, errno,
                                 "workspace '%s' is not an existing directory", j->spec->workspace);
    } else {
        if ((rc = workspace_base(j->c, &j->wsbase, err)) < 0 ||
            (rc = absolute_dir(&j->wsbase, err)) < 0)
            return rc;
        j->ws = sbx_xasprintf("%s/%s", j->wsbase, j->id);
        j->owned = 1;
    }
    /* Without isolation commands see the workspace at its host path; with it, at the manifest
     * root. */
    j->root = !j->c->isolated     ? j->ws
              : j->spec->manifest ? sbx_manifest_root(j->spec->manifest)
                                  : "/workspace";
    return 0;
}

/* The first state.json, written before the workspace exists: whatever a killed create leaves,
 * the state names it (ps --all, prune). */
static int record_state(struct create_job *j, struct sbx_error *err)
{
    const struct local_client *c = j->c;
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    j->net = !c->isolated || c->network == SBX_LOCAL_NETWORK_HOST ? "full"
             : c->network == SBX_LOCAL_NETWORK_ALLOW              ? "allow"
                                                                  : "none";
    json_t *state = j->state = json_object();
    sbx_json_set(state, "version", json_integer(1));
    sbx_json_set(state, "provider", sbx_json_str("local"));
    sbx_json_set(state, "id", sbx_json_str(j->id));
    sbx_json_set(state, "workspace", sbx_json_str(j->ws));
    sbx_json_set(state, "root", sbx_json_str(j->root));
    sbx_json_set(state, "created", sbx_json_str(created));
    sbx_json_set(state, "isolation", sbx_json_str(c->isolated ? "namespaces" : "none"));
    sbx_json_set(state, "network", sbx_json_str(j->net));
    sbx_json_set(state, "workspace_owned", json_boolean(j->owned));
    sbx_json_set(state, "manifest_digest", json_null());
    /* What a rebuild needs (sbx_client_resume): the manifest without secret values, the
     * options, the ports; the snapshot it came from, until one is taken of it. */
    sbx_json_set(state, "options", options_json(c));
    json_t *eports = json_array();
    for (size_t i = 0; i < c->n_ports; i++)
        sbx_json_append(eports, json_integer(c->ports[i]));
    sbx_json_set(state, "exposed_ports", eports);
    sbx_json_set(state, "manifest", j->mjson ? j->mjson : json_null());
    j->mjson = NULL;
    sbx_json_set(state, "snapshot", j->snap_ref ? sbx_json_str(j->snap_ref) : json_null());
    return write_state(j->dir, state, err);
}

/* A fresh workspace made, its size limit decided (and recorded), the snapshot restored into it
 * as it will be seen (the mounted image, if any); a failed restore removes what it wrote. */
static int prepare_workspace(struct create_job *j, struct sbx_error *err)
{
    json_t *disk = NULL;
    int rc;
    if (j->owned) {
        if (mkdir(j->ws, 0755) < 0)
            return sbx_error_errno(err, errno, "cannot create workspace '%s'", j->ws);
        j->made_ws = 1;
    }
    rc = workspace_disk(j->c, j->id, j->owned ? j->wsbase : NULL, j->ws, &j->image, &j->loop, &disk,
                        err);
    if (rc < 0)
        return rc;
    sbx_json_set(j->state, "disk", disk);
    if ((rc = write_state(j->dir, j->state, err)) < 0 || !j->snap_ref)
        return rc;
    int ws_fd = open(j->ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ws_fd < 0)
        return sbx_error_errno(err, errno, "cannot open workspace '%s'", j->ws);
    rc = sbx_snapshot_restore_progress(j->store, j->snap_ref, ws_fd, j->spec->progress,
                                       j->spec->progress_data, err);
    close(ws_fd);
    if (rc < 0)
        sbx_error_prefix(err, "snapshot '%s'", j->spec->snapshot);
    return rc;
}

/* Without isolation: the warning, and the base environment with HOME the workspace. */
static void unconfined_config(const struct create_job *j, struct sbx__local_config *cfg)
{
    const struct sbx_manifest *m = j->spec->manifest;
    sbx_log(SBX_LOG_WARN,
            "sandbox '%s' runs UNCONFINED (isolation 'none'): its commands run as you, "
            "see your files and use your network",
            j->id);
    sbx_strv_pushv(&cfg->env, base_env);
    sbx_strv_pushf(&cfg->env, "HOME=%s", j->ws);
    if (m && ((sbx_manifest_users(m) && sbx_manifest_users(m)->n) || sbx_manifest_group_count(m)))
        sbx_log(SBX_LOG_WARN,
                "sandbox '%s': manifest users and groups need isolation; "
                "commands run as the calling user",
                j->id);
}

/* With isolation: the manifest's accounts, the client's grants, limits and network. */
static void isolated_config(const struct create_job *j, struct sbx__local_config *cfg)
{
    const struct local_client *c = j->c;
    const struct sbx_manifest *m = j->spec->manifest;
    const char *hh = getenv("HOME");
    cfg->net = c->network == SBX_LOCAL_NETWORK_HOST    ? SBX__LOCAL_CONFIG_NET_FULL
               : c->network == SBX_LOCAL_NETWORK_ALLOW ? SBX__LOCAL_CONFIG_NET_ALLOW
                                                       : SBX__LOCAL_CONFIG_NET_NONE;
    if (hh && hh[0] == '/')
        cfg->host_home = sbx_xstrdup(hh);
    if (m) {
        sbx_manifest_account_users(m, &cfg->users);
        cfg->n_groups = sbx_manifest_group_count(m);
        cfg->groups = cfg->n_groups ? sbx_xcalloc(cfg->n_groups, sizeof(*cfg->groups)) : NULL;
        for (size_t i = 0; i < cfg->n_groups; i++) {
            const struct sbx_manifest_group *g = sbx_manifest_group_at(m, i);
            cfg->groups[i].name = sbx_xstrdup(g->name);
            sbx_strv_init(&cfg->groups[i].members);
            for (size_t k = 0; g->users && k < g->users->n; k++)
                sbx_strv_push(&cfg->groups[i].members, g->users->v[k]);
        }
    }
    cfg->n_grants = c->n_grants;
    cfg->grants = c->n_grants ? sbx_xcalloc(c->n_grants, sizeof(*cfg->grants)) : NULL;
    for (size_t i = 0; i < c->n_grants; i++) {
        cfg->grants[i].src = sbx_xstrdup(c->grants[i].src);
        cfg->grants[i].dst = c->grants[i].dst ? sbx_xstrdup(c->grants[i].dst) : NULL;
        cfg->grants[i].writable = c->grants[i].writable;
        cfg->grants[i].dangerous = c->grants[i].dangerous;
    }
    cfg->limits = c->limits;
    for (size_t i = 0; i < c->allow.n; i++)
        sbx_strv_push(&cfg->allow, c->allow.v[i]);
    for (size_t i = 0; i < c->test_hosts.n; i++)
        sbx_strv_push(&cfg->test_hosts, c->test_hosts.v[i]);
    cfg->port_bind = c->port_bind ? sbx_xstrdup(c->port_bind) : NULL;
    memcpy(cfg->allow_ports, c->allow_ports, sizeof(cfg->allow_ports));
    cfg->n_allow_ports = c->n_allow_ports;
}

/* The manifest's storage mounts, for the supervisor to start (docs/internals/mounts.md). */
static int mount_config(const struct create_job *j, struct sbx__local_config *cfg,
                        struct sbx_error *err)
{
    const struct sbx_manifest *m = j->spec->manifest;
    size_t n = m ? sbx_manifest_entry_count(m) : 0, k = 0;
    for (size_t i = 0; i < n; i++)
        k += sbx_entry_type_is_mount(sbx_manifest_entry_at(m, i)->type) != 0;
    if (!k)
        return 0;
    if (k > SBX__LOCAL_CONFIG_MAX_MOUNTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d mount entries",
                             SBX__LOCAL_CONFIG_MAX_MOUNTS);
    cfg->mounts = sbx_xcalloc(k, sizeof(*cfg->mounts));
    for (size_t i = 0; i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        if (!sbx_entry_type_is_mount(e->type))
            continue;
        int rc = j->c->isolated ? 0
                                : sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                                "needs isolation: without it nothing keeps the "
                                                "mount's credentials from the commands");
        if (rc == 0)
            rc = sbx__rclone_mount(e, j->root, &cfg->mounts[cfg->n_mounts], err);
        if (rc < 0) {
            sbx_error_prefix(err, "entry '%s' (%s)", e->path, sbx_entry_type_name(e->type));
            return rc;
        }
        cfg->n_mounts++;
    }
    return 0;
}

/* The manifest's environment (secret values resolved) after the base one. */
static int manifest_env(const struct create_job *j, struct sbx_strv *env, struct sbx_error *err)
{
    struct sbx_strv menv;
    sbx_strv_init(&menv);
    int rc = sbx_manifest_env_resolve(j->spec->manifest, j->spec->pass_secrets, &menv, err);
    for (size_t i = 0; rc == 0 && i < menv.n; i++)
        sbx_strv_push(env, menv.v[i]);
    /* Secret values are in there: wipe our copies. */
    for (size_t i = 0; i < menv.n; i++)
        explicit_bzero(menv.v[i], strlen(menv.v[i]));
    sbx_strv_release(&menv);
    return rc;
}

/* The supervisor's configuration (config.h) as JSON in j->cfg; the tie for a tied sandbox. */
static int build_config(struct create_job *j, struct sbx_error *err)
{
    const struct local_client *c = j->c;
    struct sbx__local_config cfg;
    int rc = 0;
    sbx__local_config_init(&cfg);
    cfg.id = sbx_xstrdup(j->id);
    cfg.dir = sbx_xstrdup(j->dir);
    cfg.workspace = sbx_xstrdup(j->ws);
    cfg.root = sbx_xstrdup(j->root);
    cfg.workspace_owned = j->owned;
    cfg.isolated = c->isolated;
    memcpy(cfg.ports, c->ports, sizeof(cfg.ports));
    cfg.n_ports = c->n_ports;
    cfg.test_delay_ms = c->test_delay_ms;
    cfg.tied = c->tied;
    if (c->isolated)
        isolated_config(j, &cfg);
    else
        unconfined_config(j, &cfg);
    if (j->spec->manifest)
        rc = manifest_env(j, &cfg.env, err);
    if (rc == 0)
        rc = mount_config(j, &cfg, err);
    if (rc == 0)
        rc = sbx__local_config_to_json(&cfg, &j->cfg, err);
    sbx__local_config_release(&cfg);
    if (rc == 0 && c->tied)
        rc = open_tie(&j->tie_fd, err);
    return rc;
}

/* The supervisor started and serving; meanwhile the initial state is written (and an isolated
 * workspace materialised: see write_initial_state). The limits it reports go into the state. */
static int start_supervisor(struct create_job *j, struct sbx_error *err)
{
    j->ls = session_from_state(j->rundir, j->dir, j->state);
    j->ls->idle_ms = j->c->request_idle_ms;
    j->state = NULL;
    struct state_job job = {.dir = j->dir,
                            .state = j->ls->state,
                            .manifest = j->spec->manifest,
                            .materialize_flags = j->mflags,
                            .session = j->c->isolated ? &j->ls->base : NULL,
                            .progress = &j->progress};
    struct while_starting ws_job = {write_initial_state, &job};
    json_t *report = NULL;
    int rc = spawn_supervisor(j->sup, j->id, j->cfg, j->c->start_timeout_ms, &ws_job, j->tie_fd,
                              &report, err);
    sbx_fd_close(&j->tie_fd);
    if (rc < 0)
        return rc;
    j->started = 1;
    rc = record_limits(j->dir, j->id, j->ls->state, report, err);
    json_decref(report);
    return rc;
}

/* Without isolation the manifest is materialised through the serving supervisor. */
static int materialize(struct create_job *j, struct sbx_error *err)
{
    json_t *records = NULL;
    if (j->c->isolated || !j->spec->manifest)
        return 0;
    int rc = sbx__materialize(&j->ls->base, j->spec->manifest, j->mflags, &j->progress, &records,
                              err);
    if (rc < 0)
        return rc;
    sbx_json_set(j->ls->state, "materialized", records);
    return write_state(j->dir, j->ls->state, err);
}

/* Undo a failed create: the supervisor, the runtime directory, a fresh workspace, the disk. */
static void rollback(struct create_job *j)
{
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (j->started || j->made_dir) {
        json_t *dj = j->image ? json_pack("{s:s,s:s*}", "image", j->image, "loop", j->loop) : NULL;
        stop_and_clean(j->dir, j->id, j->ws, j->made_ws, dj, j->made_ws, NULL, &ignored);
        json_decref(dj);
    } else if (j->image) {
        sbx__disk_detach(j->image, j->loop, j->ws, 0, &ignored);
    }
}

static void create_job_release(struct create_job *j)
{
    sbx_fd_close(&j->lock_fd);
    if (j->ls)
        sess_free(&j->ls->base);
    sbx_fd_close(&j->tie_fd);
    json_decref(j->state);
    json_decref(j->cfg);
    json_decref(j->mjson);
    free(j->rundir);
    free(j->dir);
    free(j->ws);
    free(j->wsbase);
    free(j->sup);
    free(j->image);
    free(j->loop);
    free(j->snap_ref);
    sbx_snapshot_store_free(j->store);
}

/* allow_stopped: spec->id may name a stopped sandbox (start brings it back). */
static int create_impl(struct local_client *c, const struct sbx_create_spec *spec,
                       int allow_stopped, struct sbx_session **out, struct sbx_error *err)
{
    struct create_job j = {.c = c, .spec = spec, .lock_fd = -1, .tie_fd = -1};
    int rc;
    sbx_progress_sink_init(&j.progress, spec->progress, spec->progress_data);
    if ((rc = check_spec(&j, allow_stopped, err)) < 0 || (rc = make_runtime_dir(&j, err)) < 0 ||
        (rc = choose_workspace(&j, err)) < 0 || (rc = record_state(&j, err)) < 0 ||
        (rc = prepare_workspace(&j, err)) < 0 || (rc = build_config(&j, err)) < 0 ||
        (rc = start_supervisor(&j, err)) < 0 || (rc = materialize(&j, err)) < 0) {
        rollback(&j);
        sbx_error_prefix(err, "cannot create sandbox");
    } else {
        *out = &j.ls->base;
        j.ls = NULL;
    }
    create_job_release(&j);
    return rc;
}

static int lc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    return create_impl((struct local_client *)bc, spec, 0, out, err);
}

static int lc_attach(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct local_client *c = (struct local_client *)bc;
    char *rundir = NULL, *id = NULL, *dir = NULL;
    json_t *state = NULL, *req = NULL, *reply = NULL;
    int rc;
    if ((rc = sbx__runtime_base(c->runtime_dir, &rundir, err)) < 0)
        goto out;
    if ((rc = resolve_id(rundir, prefix, &id, err)) == -SBX_E_NOTFOUND) {
        char *sdir = NULL, *sid = NULL;
        if (stopped_dir(0, &sdir, NULL) == 0 && find_stopped(sdir, prefix, &sid, NULL) == 1)
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                               "sandbox '%s' is stopped (sbx sandbox start %s)", sid, sid);
        free(sdir);
        free(sid);
    }
    if (rc < 0)
        goto out;
    dir = sbx_xasprintf("%s/%s", rundir, id);
    if ((rc = read_state(dir, id, &state, err)) < 0 || (rc = check_state(state, id, err)) < 0)
        goto out;
    req = json_pack("{s:s}", "op", "info");
    rc = request(dir, id, req, &reply, NULL, 0, NULL, c->request_idle_ms, err);
    if (rc < 0)
        goto out;
    struct local_session *ls = session_from_state(rundir, dir, state);
    ls->idle_ms = c->request_idle_ms;
    *out = &ls->base;
    state = NULL;
out:
    json_decref(state);
    json_decref(req);
    json_decref(reply);
    free(rundir);
    free(id);
    free(dir);
    return rc;
}

static int cmp_created(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "created"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "created"));
    if (!x)
        x = json_string_value(
                json_object_get(json_object_get(*(json_t *const *)a, "state"), "created"));
    if (!y)
        y = json_string_value(
                json_object_get(json_object_get(*(json_t *const *)b, "state"), "created"));
    return strcmp(x ? x : "", y ? y : "");
}

/* One runtime dir entry as sbx_client_list_all describes it; *dead says prune may take it, and
 * *ws_out (borrowed from the result) is the workspace prune removes, NULL for none. NULL when
 * the entry is not a directory of ours. */
static json_t *describe(const char *rundir, const char *id, int *dead, const char **ws_out)
{
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    json_t *state = NULL, *out = NULL, *req = NULL, *reply = NULL;
    struct sbx__local_record rec;
    struct sbx_error ignored = SBX_ERROR_INIT;
    struct stat st;
    int stopped = 0, alive = 0;
    const char *status = "dead";
    sbx__local_record_init(&rec);
    *dead = 0;
    *ws_out = NULL;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        goto out;
    if (read_state(dir, id, &state, &ignored) < 0 || check_state(state, id, &ignored) < 0) {
        json_decref(state);
        state = NULL;
    }
    if (sbx__local_record_read(dir, id, &rec) == 0)
        alive = sbx__local_record_alive(&rec, id, &stopped);
    req = json_pack("{s:s}", "op", "info");
    if (being_created(dir))
        status = "creating";
    else if (stopped)
        status = "suspended"; /* SIGSTOPped: it would not answer, do not wait for it */
    else if (state && request(dir, id, req, &reply, NULL, 0, NULL, REQUEST_IDLE_MS, &ignored) == 0)
        status = "live";
    else if (alive)
        status = "unresponsive"; /* a process of it runs: rm, not prune, decides */
    if (strcmp(status, "live") == 0) {
        out = json_deep_copy(state);
        sbx_json_set(out, "status", sbx_json_str(status));
        goto out;
    }
    json_t *left = json_object(), *cgs = json_array();
    const char *ws = state ? json_string_value(json_object_get(state, "workspace")) : NULL;
    int owned = state && json_is_true(json_object_get(state, "workspace_owned"));
    sbx_json_set(left, "runtime_dir", sbx_json_str(dir));
    sbx_json_set(left, "workspace", ws && lstat(ws, &st) == 0 ? sbx_json_str(ws) : json_null());
    sbx_json_set(left, "workspace_owned", json_boolean(owned));
    for (size_t i = 0; i < rec.cgroups.n; i++)
        if (lstat(rec.cgroups.v[i], &st) == 0)
            sbx_json_append(cgs, sbx_json_str(rec.cgroups.v[i]));
    sbx_json_set(left, "cgroups", cgs);
    const char *image =
            state ? json_string_value(json_object_get(json_object_get(state, "disk"), "image"))
                  : NULL;
    sbx_json_set(left, "disk_image",
                 image && lstat(image, &st) == 0 ? sbx_json_str(image) : json_null());
    sbx_json_set(left, "supervisor_pid", alive ? json_integer(rec.pid) : json_null());
    out = json_object();
    sbx_json_set(out, "id", sbx_json_str(id));
    sbx_json_set(out, "status", sbx_json_str(status));
    if (state && json_object_get(state, "created"))
        sbx_json_set(out, "created", json_deep_copy(json_object_get(state, "created")));
    sbx_json_set(out, "state", state ? json_incref(state) : json_null());
    sbx_json_set(out, "leftovers", left);
    *dead = strcmp(status, "dead") == 0;
    if (owned)
        *ws_out = json_string_value(json_object_get(state, "workspace"));
out:
    sbx__local_record_release(&rec);
    json_decref(state);
    json_decref(req);
    json_decref(reply);
    free(dir);
    return out;
}

/* Each sandbox id of the runtime base rundir through fn (NULL: not listed), into *out sorted by
 * creation time. */
/* Describing a sandbox takes a few descriptors at a time, and one that cannot be read is
 * taken for dead; without them a listing would quietly lose the live ones. Check that they are
 * there first. */
#define SCAN_FDS 4
static int fd_headroom(const char *what, struct sbx_error *err)
{
    int fds[SCAN_FDS], n = 0, rc = 0;
    for (; n < SCAN_FDS; n++) {
        fds[n] = fcntl(2, F_DUPFD_CLOEXEC, 3);
        if (fds[n] < 0 && errno == EBADF)
            fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fds[n] < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                rc = sbx_error_errno(err, errno, "cannot %s", what);
                sbx__proto_fd_hint(err);
            }
            break;
        }
    }
    while (n > 0)
        close(fds[--n]);
    return rc;
}

static int scan_runtime(const char *rundir, json_t *(*fn)(const char *rundir, const char *id),
                        json_t **out, struct sbx_error *err)
{
    int rc = fd_headroom("list sandboxes", err);
    if (rc < 0)
        return rc;
    DIR *d = opendir(rundir);
    if (!d) {
        rc = sbx_error_errno(err, errno, "cannot list '%s'", rundir);
        sbx__proto_fd_hint(err);
        return rc;
    }
    json_t **items = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        json_t *item = valid_id(e->d_name) ? fn(rundir, e->d_name) : NULL;
        if (!item)
            continue;
        items = sbx_xrealloc(items, (n + 1) * sizeof(*items));
        items[n++] = item;
    }
    closedir(d);
    if (n)
        qsort(items, n, sizeof(*items), cmp_created);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        sbx_json_append(arr, items[i]);
    free(items);
    *out = arr;
    return 0;
}

static json_t *describe_entry(const char *rundir, const char *id)
{
    int dead;
    const char *ws;
    return describe(rundir, id, &dead, &ws);
}

/* Every entry of the runtime base, described; *out sorted by creation time. */
static int list_entries(struct local_client *c, char **rundir_out, json_t **out,
                        struct sbx_error *err)
{
    char *rundir = NULL;
    int rc = sbx__runtime_base(c->runtime_dir, &rundir, err);
    if (rc == 0)
        rc = scan_runtime(rundir, describe_entry, out, err);
    if (rc == 0)
        *rundir_out = rundir;
    else
        free(rundir);
    return rc;
}

static void add_stopped(json_t *arr);
static void sort_created(json_t *arr);

static int lc_list_all(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    char *rundir = NULL;
    int rc = list_entries((struct local_client *)bc, &rundir, out, err);
    if (rc == 0) {
        add_stopped(*out);
        sort_created(*out);
    }
    free(rundir);
    return rc;
}

#define STALE_CGROUP_AGE_S 60 /* younger ones may belong to a create in progress */

static int lc_prune(struct sbx_client *bc, int keep_workspace, json_t **out, struct sbx_error *err)
{
    struct local_client *c = (struct local_client *)bc;
    char *rundir = NULL;
    json_t *all = NULL, *removed = json_array(), *v;
    size_t i;
    int rc = list_entries(c, &rundir, &all, err);
    if (rc < 0) {
        json_decref(removed);
        return rc;
    }
    json_array_foreach(all, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        int dead;
        const char *ws;
        /* Described again: it may have come to life (or died) since the listing. */
        json_t *now = id ? describe(rundir, id, &dead, &ws) : NULL;
        if (now && dead) {
            struct sbx_error e = SBX_ERROR_INIT;
            char *dir = sbx_xasprintf("%s/%s", rundir, id);
            const json_t *disk = json_object_get(json_object_get(now, "state"), "disk");
            if (stop_and_clean(dir, id, ws, ws && !keep_workspace, disk, ws != NULL, removed, &e) <
                        0 &&
                rc == 0)
                rc = sbx_error_copy(err, &e);
            free(dir);
        }
        json_decref(now);
    }
    /* Empty sandbox cgroups nobody records any more (rmdir refuses one with processes). */
    struct sbx_strv stale;
    struct sbx_error e = SBX_ERROR_INIT;
    sbx_strv_init(&stale);
    if (sbx__cgroup_remove_stale("sbx-", STALE_CGROUP_AGE_S, NULL, &stale, &e) == 0)
        for (size_t k = 0; k < stale.n; k++)
            sbx_json_append(removed, json_pack("{s:n,s:s,s:s}", "sandbox", "kind", "cgroup", "path",
                                               stale.v[k]));
    sbx_strv_release(&stale);
    /* Host id range slots of root-run sandboxes whose supervisor is gone (nobody holds their
     * lock); allocation would take them again anyway, this removes the clutter. */
    unsigned slots = 0;
    if (geteuid() == 0 && sbx__idrange_prune(NULL, &slots, &e) == 0)
        for (unsigned k = 0; k < slots; k++)
            sbx_json_append(removed, json_pack("{s:n,s:s,s:s}", "sandbox", "kind", "id_range_slot",
                                               "path", SBX__IDRANGE_DIR));
    json_decref(all);
    free(rundir);
    if (rc == 0 && out)
        *out = removed;
    else
        json_decref(removed);
    return rc;
}

/* The state of sandbox id when its supervisor answers, with the host ids it holds; else NULL.
 * A stopped supervisor would not answer: it is not asked (ps --all shows it). */
static json_t *live_state(const char *rundir, const char *id)
{
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    json_t *state = NULL, *req = json_pack("{s:s}", "op", "info"), *reply = NULL, *out = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    struct sbx__local_record rec;
    int stopped = 0;
    sbx__local_record_init(&rec);
    if (sbx__local_record_read(dir, id, &rec) == 0)
        sbx__local_record_alive(&rec, id, &stopped);
    sbx__local_record_release(&rec);
    if (!stopped && read_state(dir, id, &state, &ignored) == 0 &&
        check_state(state, id, &ignored) == 0 &&
        request(dir, id, req, &reply, NULL, 0, NULL, REQUEST_IDLE_MS, &ignored) == 0) {
        /* Live facts come from the supervisor: the host ids it holds (root runners). */
        json_t *ids = json_object_get(reply, "host_ids");
        if (json_is_object(ids))
            sbx_json_set(state, "host_ids", json_incref(ids));
        out = state;
        state = NULL;
    }
    json_decref(state);
    json_decref(req);
    json_decref(reply);
    free(dir);
    return out;
}

static int lc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct local_client *c = (struct local_client *)bc;
    char *rundir = NULL;
    int rc = sbx__runtime_base(c->runtime_dir, &rundir, err);
    if (rc == 0)
        rc = scan_runtime(rundir, live_state, out, err);
    if (rc == 0) {
        add_stopped(*out);
        sort_created(*out);
    }
    free(rundir);
    return rc;
}

static int lc_remove(struct sbx_client *bc, const char *prefix, int keep_workspace,
                     struct sbx_error *err)
{
    struct local_client *c = (struct local_client *)bc;
    char *rundir = NULL, *id = NULL, *dir = NULL;
    json_t *state = NULL;
    int rc;
    if ((rc = sbx__runtime_base(c->runtime_dir, &rundir, err)) < 0)
        goto out;
    if ((rc = resolve_id(rundir, prefix, &id, err)) == -SBX_E_NOTFOUND) {
        /* A stopped sandbox is its record and the hold on its snapshot. */
        char *sdir = NULL, *sid = NULL;
        if (stopped_dir(0, &sdir, NULL) == 0 && find_stopped(sdir, prefix, &sid, NULL) == 1) {
            json_t *rec = NULL;
            struct sbx_error ignored = SBX_ERROR_INIT;
            read_stopped(sdir, sid, &rec, &ignored);
            drop_stopped(sdir, sid, json_string_value(json_object_get(rec, "snapshot")));
            json_decref(rec);
            sbx_error_clear(err);
            rc = 0;
        }
        free(sdir);
        free(sid);
        goto out;
    }
    if (rc < 0)
        goto out;
    dir = sbx_xasprintf("%s/%s", rundir, id);
    const char *ws = NULL;
    int owned = 0;
    if (read_state(dir, id, &state, NULL) == 0 && check_state(state, id, NULL) == 0) {
        ws = json_string_value(json_object_get(state, "workspace"));
        owned = json_is_true(json_object_get(state, "workspace_owned"));
    }
    /* The host id range is freed by the host-side supervisor, which may outlive PID 1 by a
     * moment: rm returns once the range is free. Only a supervisor that runs and is not stopped
     * is asked which range it holds (a stopped one would not answer). */
    json_int_t first = 0;
    struct sbx__local_record rec;
    int stopped = 0;
    sbx__local_record_init(&rec);
    if (sbx__local_record_read(dir, id, &rec) == 0 && sbx__local_record_alive(&rec, id, &stopped) &&
        !stopped) {
        json_t *req = json_pack("{s:s}", "op", "info"), *reply = NULL;
        if (request(dir, id, req, &reply, NULL, 0, NULL, REQUEST_IDLE_MS, NULL) == 0)
            first = json_integer_value(
                    json_object_get(json_object_get(reply, "host_ids"), "first"));
        json_decref(req);
        json_decref(reply);
    }
    sbx__local_record_release(&rec);
    rc = stop_and_clean(dir, id, ws, owned && !keep_workspace, json_object_get(state, "disk"),
                        owned, NULL, err);
    if (rc == 0 && first > 0 && first <= UINT32_MAX &&
        !sbx__idrange_wait_free(NULL, (uint32_t)first, id, IDRANGE_WAIT_MS))
        sbx_log(SBX_LOG_WARN, "sandbox '%s': its host id range is still held", id);
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot remove sandbox '%s'", prefix);
    json_decref(state);
    free(rundir);
    free(id);
    free(dir);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Rebuilding a sandbox from its session state: resume, start */

static enum sbx_local_network network_of(const char *name)
{
    return strcmp(name, "full") == 0    ? SBX_LOCAL_NETWORK_HOST
           : strcmp(name, "allow") == 0 ? SBX_LOCAL_NETWORK_ALLOW
                                        : SBX_LOCAL_NETWORK_NONE;
}

static uint64_t amount_of(const json_t *v)
{
    if (json_is_string(v))
        return SBX_LOCAL_LIMIT_NONE;
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

static int same_grant(const struct sbx_local_grant *g, const json_t *j)
{
    const char *src = json_string_value(json_object_get(j, "src"));
    const char *dst = json_string_value(json_object_get(j, "dst"));
    return src && strcmp(g->src, src) == 0 &&
           (g->dst && dst ? strcmp(g->dst, dst) == 0 : !g->dst == !dst) &&
           !!g->writable == json_is_true(json_object_get(j, "writable"));
}

/* 1 when path lies beneath (or is) base; both absolute and normalised. */
static int host_within(const char *path, const char *base)
{
    size_t n = strlen(base);
    if (n == 1)
        return 1;
    return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* A state file is no opt-in: what weakens the sandbox (no isolation, the host's network, a
 * network allow list) is rebuilt only when the resuming client itself asks for as much. */
static int check_opt_in(const struct local_client *c, const json_t *o, struct sbx_error *err)
{
    const char *iso = json_string_value(json_object_get(o, "isolation"));
    const char *net = json_string_value(json_object_get(o, "network"));
    const json_t *v;
    size_t i;
    if (strcmp(iso, "none") == 0 && c->isolated)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox ran without isolation; a session state cannot ask for "
                             "that by itself: resume with --isolation none to accept it");
    if (strcmp(iso, "none") == 0)
        return 0;
    const json_t *lim = json_object_get(o, "limits");
    const uint64_t mine[] = {c->limits.memory_bytes, c->limits.pids, c->limits.cpu_millis,
                             c->limits.file_size_bytes, c->limits.open_files};
    static const char *const names[] = {"memory", "pids", "cpu_millis", "file_size", "open_files"};
    for (size_t k = 0; k < 5; k++)
        if (json_is_string(json_object_get(lim, names[k])) && mine[k] != SBX_LOCAL_LIMIT_NONE)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox had no %s limit; a session state cannot lift a "
                                 "limit by itself: resume with the same limit%s to accept it",
                                 names[k], k == 2 ? " (--cpus none)" : "");
    if (strcmp(net, "full") == 0 && c->network != SBX_LOCAL_NETWORK_HOST)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox had the host's network; a session state cannot ask for "
                             "that by itself: resume with --network full to accept it");
    if (strcmp(net, "allow") != 0)
        return 0;
    if (c->network == SBX_LOCAL_NETWORK_HOST)
        return 0;
    json_array_foreach(json_object_get(o, "allow_domains"), i, v)
    {
        if (c->network != SBX_LOCAL_NETWORK_ALLOW ||
            sbx_strv_find(&c->allow, json_string_value(v)) < 0)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox's network allowed '%s'; a session state cannot allow "
                                 "a domain by itself: resume with --network allow:%s (and the "
                                 "others it allowed) to accept it",
                                 json_string_value(v), json_string_value(v));
    }
    json_array_foreach(json_object_get(o, "allow_ports"), i, v)
    {
        int port = (int)json_integer_value(v),
            found = c->n_allow_ports == 0 && (port == 80 || port == 443);
        for (size_t k = 0; k < c->n_allow_ports && !found; k++)
            found = c->allow_ports[k] == port;
        if (!found)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox's network allowed port %d; resume with "
                                 "--allow-port %d to accept it",
                                 port, port);
    }
    return 0;
}

/* A new sandbox from state: its options with this client's own places, programs and tie, and
 * (trusted: the user's own stopped record) the recorded grants, else this client's grants,
 * which must include every recorded one. id: the id to use, NULL for a fresh one. */
static int rebuild(struct local_client *c, const json_t *state, const struct sbx_resume_opts *ro,
                   int trusted, const char *id, struct sbx_session **out, struct sbx_error *err)
{
    const json_t *o = json_object_get(state, "options");
    const char *ref = json_string_value(json_object_get(state, "snapshot"));
    const json_t *ga = json_object_get(o, "grants"), *v;
    struct sbx_local_options lo = {0};
    struct sbx_local_grant grants[SBX_LOCAL_MAX_GRANTS];
    const char *domains[SBX_LOCAL_MAX_ALLOW_DOMAINS];
    int aports[SBX_LOCAL_MAX_EXPOSED_PORTS], eports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    struct sbx_client *tmp = NULL;
    struct sbx_manifest *m = NULL;
    char *base = NULL;
    size_t i;
    int rc = 0;

    lo.supervisor_path = c->supervisor_path;
    lo.runtime_dir = c->runtime_dir;
    lo.workspace_dir = c->workspace_dir;
    lo.start_timeout_ms = c->start_timeout_ms;
    lo.tied = c->tied;
    struct sbx__local_test test = {
            .proxy_hosts = c->test_hosts.n ? (const char *const *)c->test_hosts.v : NULL,
            .request_delay_ms = c->test_delay_ms};
    lo.isolation = strcmp(json_string_value(json_object_get(o, "isolation")), "none") == 0
                           ? SBX_LOCAL_ISOLATION_NONE
                           : SBX_LOCAL_ISOLATION_NAMESPACES;
    lo.network = network_of(json_string_value(json_object_get(o, "network")));
    if (lo.isolation == SBX_LOCAL_ISOLATION_NONE)
        lo.network = SBX_LOCAL_NETWORK_DEFAULT;
    if (!trusted && (rc = check_opt_in(c, o, err)) < 0)
        goto out;
    const json_t *lim = json_object_get(o, "limits");
    lo.limits.memory_bytes = amount_of(json_object_get(lim, "memory"));
    lo.limits.pids = amount_of(json_object_get(lim, "pids"));
    lo.limits.cpu_millis = amount_of(json_object_get(lim, "cpu_millis"));
    lo.limits.file_size_bytes = amount_of(json_object_get(lim, "file_size"));
    lo.limits.open_files = amount_of(json_object_get(lim, "open_files"));
    lo.disk_bytes = amount_of(json_object_get(o, "disk"));
    json_array_foreach(json_object_get(o, "allow_domains"), i, v) domains[i] = json_string_value(v);
    lo.allow_domains = domains;
    lo.n_allow_domains = json_array_size(json_object_get(o, "allow_domains"));
    json_array_foreach(json_object_get(o, "allow_ports"), i, v) aports[i] =
            (int)json_integer_value(v);
    lo.allow_ports = aports;
    lo.n_allow_ports = json_array_size(json_object_get(o, "allow_ports"));
    lo.port_bind = json_string_value(json_object_get(o, "port_bind"));
    json_array_foreach(json_object_get(state, "exposed_ports"), i, v) eports[i] =
            (int)json_integer_value(v);
    lo.exposed_ports = eports;
    lo.n_exposed_ports = json_array_size(json_object_get(state, "exposed_ports"));
    if (trusted) {
        json_array_foreach(ga, i, v)
        {
            grants[i] = (struct sbx_local_grant){
                    .src = json_string_value(json_object_get(v, "src")),
                    .dst = json_string_value(json_object_get(v, "dst")),
                    .writable = json_is_true(json_object_get(v, "writable")),
                    .dangerous = json_is_true(json_object_get(v, "dangerous"))};
        }
        lo.grants = grants;
        lo.n_grants = json_array_size(ga);
    } else {
        /* Host paths are trusted configuration: a state file from anywhere must not open the
         * host to the sandbox. The caller grants again what the sandbox had. */
        json_array_foreach(ga, i, v)
        {
            size_t k = 0;
            while (k < c->n_grants && !same_grant(&c->grants[k], v))
                k++;
            if (k == c->n_grants) {
                rc = sbx_error_set(err, SBX_E_PERM, 0,
                                   "the sandbox had %s grant of host path '%s'; a session state "
                                   "never grants host paths: give it again (--%s %s) to resume",
                                   json_is_true(json_object_get(v, "writable")) ? "a writable"
                                                                                : "a read-only",
                                   json_string_value(json_object_get(v, "src")),
                                   json_is_true(json_object_get(v, "writable")) ? "rw" : "ro",
                                   json_string_value(json_object_get(v, "src")));
                goto out;
            }
        }
        lo.grants = c->grants;
        lo.n_grants = c->n_grants;
    }
    if ((rc = sbx__local_client_new_test(&lo, &test, &tmp, err)) < 0) {
        sbx_error_prefix(err, "session state options");
        goto out;
    }
    /* The state's manifest is as trusted as a manifest file: its ephemeral host sources are
     * materialised again only from beneath the base directory. */
    char cwd[PATH_MAX];
    if (!ro->base_dir && !getcwd(cwd, sizeof(cwd))) {
        rc = sbx_error_errno(err, errno, "cannot find the current directory");
        goto out;
    }
    base = realpath(ro->base_dir ? ro->base_dir : cwd, NULL);
    if (!base) {
        rc = sbx_error_errno(err, errno, "base directory '%s'", ro->base_dir ? ro->base_dir : cwd);
        goto out;
    }
    const json_t *mj = json_object_get(state, "manifest");
    if (json_is_object(mj)) {
        struct sbx_manifest_load_opts mo = {.base_dir = base,
                                            .flags = SBX_MANIFEST_NO_HOST_CHECKS |
                                                     SBX_MANIFEST_CONTENT_DIGESTS};
        struct sbx_strv eph;
        if ((rc = sbx_manifest_from_json(mj, &mo, &m, err)) < 0) {
            sbx_error_prefix(err, "session state manifest");
            goto out;
        }
        sbx_strv_init(&eph);
        sbx__manifest_ephemeral_paths(m, &eph);
        for (size_t k = 0; k < sbx_manifest_entry_count(m) && rc == 0; k++) {
            const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, k);
            int covered = 0;
            for (size_t j = 0; j < eph.n && !covered; j++) {
                size_t n = strlen(eph.v[j]);
                covered = strncmp(e->path, eph.v[j], n) == 0 &&
                          (e->path[n] == '\0' || e->path[n] == '/');
            }
            if (covered && e->src_path && !host_within(e->src_path, base))
                rc = sbx_error_set(err, SBX_E_PERM, 0,
                                   "session state manifest: entry '%s': local source '%s' is "
                                   "outside the base directory '%s'",
                                   e->path, e->src, base);
        }
        sbx_strv_release(&eph);
        if (rc < 0)
            goto out;
    }
    if (ro->manifest &&
        (rc = ephemeral_env(ro->manifest, m ? m : (m = sbx_manifest_new()), err)) < 0)
        goto out;
    if (ro->manifest)
        sbx_manifest_copy_mount_secrets(ro->manifest, m);
    struct sbx_create_spec spec = {.manifest = m,
                                   .base_dir = base,
                                   .pass_secrets = ro->pass_secrets,
                                   .snapshot = ref,
                                   .id = id,
                                   .progress = ro->progress,
                                   .progress_data = ro->progress_data};
    rc = create_impl((struct local_client *)tmp, &spec, 1, out, err);
out:
    sbx_manifest_free(m);
    sbx_client_free(tmp);
    free(base);
    return rc;
}

static int lc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *ro,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct local_client *c = (struct local_client *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    char *rundir = NULL, *sdir = NULL, *sid = NULL;
    struct stat st;
    int rc = sbx__runtime_base(c->runtime_dir, &rundir, err);
    if (rc < 0)
        return rc;
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    int present = lstat(dir, &st) == 0;
    const char *use_id = id;
    if (present) {
        struct sbx_error aerr = SBX_ERROR_INIT;
        rc = lc_attach(bc, id, out, &aerr);
        if (rc == 0 || rc != -SBX_E_SANDBOX) {
            if (rc < 0)
                sbx_error_copy(err, &aerr);
            goto out;
        }
        /* Its leftovers keep the id: the rebuild gets a fresh one. */
        use_id = NULL;
    }
    if (!json_is_string(json_object_get(state, "snapshot"))) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "sandbox '%s' is gone and its state has no snapshot", id);
        goto out;
    }
    int stopped = use_id && stopped_dir(0, &sdir, NULL) == 0 &&
                  find_stopped(sdir, id, &sid, NULL) == 1 && strcmp(sid, id) == 0;
    rc = rebuild(c, state, ro, 0, use_id, out, err);
    if (rc == 0 && stopped) {
        json_t *rec = NULL;
        struct sbx_error ignored = SBX_ERROR_INIT;
        /* The stopped sandbox is back: its record and hold go, as with start. */
        read_stopped(sdir, id, &rec, &ignored);
        drop_stopped(sdir, id, json_string_value(json_object_get(rec, "snapshot")));
        json_decref(rec);
    }
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot resume sandbox '%s'", id);
    free(dir);
    free(rundir);
    free(sdir);
    free(sid);
    return rc;
}

static int lc_start(struct sbx_client *bc, const char *prefix, const struct sbx_resume_opts *ro,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct local_client *c = (struct local_client *)bc;
    char *sdir = NULL, *id = NULL;
    json_t *rec = NULL;
    int rc = stopped_dir(0, &sdir, err);
    if (rc == 0 && (rc = find_stopped(sdir, prefix, &id, err)) == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no stopped sandbox '%s'", prefix);
    if (rc < 0)
        goto out;
    char *rundir = NULL;
    if ((rc = sbx__runtime_base(c->runtime_dir, &rundir, err)) < 0)
        goto out;
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    struct stat st;
    if (lstat(dir, &st) == 0)
        /* A stop that did not finish: the sandbox (or what it left) is still there. */
        rc = sbx_error_set(err, SBX_E_EXISTS, 0,
                           "sandbox '%s' still has a runtime directory (its stop did not "
                           "finish): stop it again, or 'sbx sandbox rm %s' and start",
                           id, id);
    free(dir);
    free(rundir);
    if (rc < 0 || (rc = read_stopped(sdir, id, &rec, err)) < 0 ||
        (rc = rebuild(c, rec, ro, 1, id, out, err)) < 0)
        goto out;
    drop_stopped(sdir, id, json_string_value(json_object_get(rec, "snapshot")));
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot start sandbox '%s'", prefix);
    json_decref(rec);
    free(sdir);
    free(id);
    return rc;
}

static int lc_stop(struct sbx_client *bc, const char *prefix, char **out_ref, struct sbx_error *err)
{
    struct sbx_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *sdir = NULL, *ref = NULL, *holder = NULL;
    json_t *state = NULL;
    int held = 0, recorded = 0;
    int rc = lc_attach(bc, prefix, &s, err);
    if (rc < 0)
        goto out;
    const char *id = sbx_session_id(s);
    holder = sbx_xasprintf(HOLDER_PREFIX "%s", id);
    if ((rc = stopped_dir(1, &sdir, err)) < 0 ||
        (rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
        (rc = sbx_session_snapshot(s, store, &ref, err)) < 0 ||
        (rc = sbx_snapshot_hold(store, ref, holder, err)) < 0)
        goto out;
    held = 1;
    if ((rc = sbx_session_state(s, &state, err)) < 0)
        goto out;
    char now[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), now);
    sbx_json_set(state, "stopped", sbx_json_str(now));
    /* The record first: a stop killed after it leaves a sandbox start can bring back, plus
     * leftovers prune removes; never a sandbox with neither. */
    if ((rc = write_stopped(sdir, id, state, err)) < 0)
        goto out;
    recorded = 1;
    rc = sbx_session_delete(s, err);
    if (rc == 0) {
        held = recorded = 0;
        *out_ref = ref;
        ref = NULL;
    }
out:
    if (recorded) {
        char *path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, sbx_session_id(s));
        unlink(path);
        free(path);
    }
    if (held) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        sbx_snapshot_release(store, ref, holder, &ignored);
    }
    if (rc < 0)
        sbx_error_prefix(err, "cannot stop sandbox '%s'", prefix);
    json_decref(state);
    sbx_session_free(s);
    sbx_snapshot_store_free(store);
    free(sdir);
    free(ref);
    free(holder);
    return rc;
}

static int lc_stopped_state(struct sbx_client *bc, const char *prefix, json_t **out,
                            struct sbx_error *err)
{
    (void)bc;
    char *sdir = NULL, *id = NULL;
    int rc = stopped_dir(0, &sdir, err);
    if (rc == 0 && (rc = find_stopped(sdir, prefix, &id, err)) == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    if (rc > 0)
        rc = read_stopped(sdir, id, out, err);
    free(sdir);
    free(id);
    return rc;
}

/* Every stopped record as ps lists it: the state with "status": "stopped" and the snapshot's
 * size ("snapshot_bytes", null when the store cannot say), appended to arr. */
static void add_stopped(json_t *arr)
{
    char *sdir = NULL;
    struct sbx_snapshot_store *store = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (stopped_dir(0, &sdir, NULL) < 0)
        return;
    DIR *d = opendir(sdir);
    if (!d) {
        free(sdir);
        return;
    }
    if (sbx_snapshot_store_open(NULL, &store, &ignored) < 0)
        store = NULL;
    size_t sl = strlen(STOPPED_SUFFIX);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= sl || strcmp(e->d_name + len - sl, STOPPED_SUFFIX) != 0)
            continue;
        char *id = sbx_xstrndup(e->d_name, len - sl);
        json_t *rec = NULL, *hdr = NULL;
        if (valid_id(id) && read_stopped(sdir, id, &rec, &ignored) == 0) {
            const char *ref = json_string_value(json_object_get(rec, "snapshot"));
            json_t *bytes = NULL;
            if (store && sbx_snapshot_inspect(store, ref, &hdr, &ignored) == 0)
                bytes = json_incref(json_object_get(hdr, "bytes"));
            sbx_json_set(rec, "status", sbx_json_str("stopped"));
            sbx_json_set(rec, "snapshot_bytes", bytes ? bytes : json_null());
            sbx_json_append(arr, rec);
        }
        json_decref(hdr);
        free(id);
    }
    closedir(d);
    sbx_snapshot_store_free(store);
    free(sdir);
}

/* arr sorted by creation time again, after add_stopped. */
static void sort_created(json_t *arr)
{
    size_t n = json_array_size(arr);
    if (n < 2)
        return;
    json_t **items = sbx_xcalloc(n, sizeof(*items));
    for (size_t i = 0; i < n; i++)
        items[i] = json_incref(json_array_get(arr, i));
    qsort(items, n, sizeof(*items), cmp_created);
    json_array_clear(arr);
    for (size_t i = 0; i < n; i++)
        sbx_json_append(arr, items[i]);
    free(items);
}

static void lc_free(struct sbx_client *bc)
{
    struct local_client *c = (struct local_client *)bc;
    free(c->supervisor_path);
    free(c->runtime_dir);
    free(c->workspace_dir);
    for (size_t i = 0; i < c->n_grants; i++) {
        free((char *)c->grants[i].src);
        free((char *)c->grants[i].dst);
    }
    free(c->grants);
    sbx_strv_release(&c->allow);
    sbx_strv_release(&c->test_hosts);
    free(c->port_bind);
    free(c);
}

static int lc_tied(const struct sbx_client *c)
{
    return ((const struct local_client *)c)->tied;
}

static const struct sbx_client_ops client_ops = {
        .create = lc_create,
        .attach = lc_attach,
        .list = lc_list,
        .remove = lc_remove,
        .list_all = lc_list_all,
        .prune = lc_prune,
        .resume = lc_resume,
        .stop = lc_stop,
        .start = lc_start,
        .stopped_state = lc_stopped_state,
        .tied = lc_tied,
        .free = lc_free,
};

/* Network mode allow and the forwarders' address: checked here, so a bad pattern fails the
 * client, not the supervisor. *allow gets the normalized patterns. */
static int check_network_options(const struct sbx_local_options *o, int isolated,
                                 struct sbx_strv *allow, struct sbx_error *err)
{
    struct in6_addr a6;
    if (o->port_bind && inet_pton(AF_INET, o->port_bind, &a6) != 1 &&
        inet_pton(AF_INET6, o->port_bind, &a6) != 1)
        return sbx_error_set(err, SBX_E_INVAL, 0, "port bind address '%s' is not an IP address",
                             o->port_bind);
    if (o->network != SBX_LOCAL_NETWORK_ALLOW) {
        if (o->n_allow_domains || o->n_allow_ports)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "allowed domains and ports need network 'allow'");
        return 0;
    }
    if (!isolated)
        return sbx_error_set(err, SBX_E_INVAL, 0, "network 'allow' needs isolation, not 'none'");
    if (o->n_allow_domains == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "network 'allow' needs at least one domain");
    if (o->n_allow_domains > SBX_LOCAL_MAX_ALLOW_DOMAINS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d allowed domains",
                             SBX_LOCAL_MAX_ALLOW_DOMAINS);
    for (size_t i = 0; i < o->n_allow_domains; i++) {
        char *p = NULL;
        int rc = sbx__proxy_pattern_normalize(o->allow_domains[i] ? o->allow_domains[i] : "", &p,
                                              err);
        if (rc < 0)
            return rc;
        sbx_strv_push_take(allow, p);
    }
    if (o->n_allow_ports > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d allowed ports",
                             SBX_LOCAL_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < o->n_allow_ports; i++)
        if (o->allow_ports[i] < 1 || o->allow_ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "allowed port %d is not in 1..65535",
                                 o->allow_ports[i]);
    return 0;
}

int sbx__local_client_new(const void *opts, struct sbx_client **out, struct sbx_error *err)
{
    return sbx__local_client_new_test(opts, NULL, out, err);
}

int sbx__local_client_new_test(const struct sbx_local_options *o, const struct sbx__local_test *t,
                               struct sbx_client **out, struct sbx_error *err)
{
    struct sbx_local_options dflt = {0};
    struct sbx__local_test none = {0};
    if (!o)
        o = &dflt;
    if (!t)
        t = &none;
    if (o->isolation != SBX_LOCAL_ISOLATION_DEFAULT &&
        o->isolation != SBX_LOCAL_ISOLATION_NAMESPACES && o->isolation != SBX_LOCAL_ISOLATION_NONE)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown isolation mode %d", (int)o->isolation);
    if (o->network != SBX_LOCAL_NETWORK_DEFAULT && o->network != SBX_LOCAL_NETWORK_HOST &&
        o->network != SBX_LOCAL_NETWORK_NONE && o->network != SBX_LOCAL_NETWORK_ALLOW)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown network mode %d", (int)o->network);
    int isolated = o->isolation != SBX_LOCAL_ISOLATION_NONE;
    const struct sbx_local_limits *l = &o->limits;
    if (!isolated &&
        (l->memory_bytes || l->pids || l->cpu_millis || l->file_size_bytes || l->open_files))
        return sbx_error_set(err, SBX_E_INVAL, 0, "resource limits need isolation, not 'none'");
    if (!isolated && o->network == SBX_LOCAL_NETWORK_NONE)
        return sbx_error_set(err, SBX_E_INVAL, 0, "network 'none' needs isolation, not 'none'");
    if (!isolated && o->n_grants)
        return sbx_error_set(err, SBX_E_INVAL, 0, "path grants need isolation, not 'none'");
    if (o->n_grants > SBX_LOCAL_MAX_GRANTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d path grants",
                             SBX_LOCAL_MAX_GRANTS);
    for (size_t i = 0; i < o->n_grants; i++)
        if (!o->grants[i].src || o->grants[i].src[0] != '/' ||
            (o->grants[i].dst && o->grants[i].dst[0] != '/'))
            return sbx_error_set(err, SBX_E_INVAL, 0, "path grant '%s' must be an absolute path",
                                 o->grants[i].src ? o->grants[i].src : "");
    if (o->n_exposed_ports > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d exposed ports",
                             SBX_LOCAL_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        if (o->exposed_ports[i] < 1 || o->exposed_ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "exposed port %d is not in 1..65535",
                                 o->exposed_ports[i]);
    if (o->disk_bytes && o->disk_bytes != SBX_LOCAL_LIMIT_NONE &&
        (o->disk_bytes < SBX_LOCAL_DISK_MIN || o->disk_bytes > SBX_LOCAL_DISK_MAX))
        return sbx_error_set(
                err, SBX_E_INVAL, 0, "disk limit %llu bytes is outside %llu MiB .. %llu TiB",
                (unsigned long long)o->disk_bytes, (unsigned long long)(SBX_LOCAL_DISK_MIN >> 20),
                (unsigned long long)(SBX_LOCAL_DISK_MAX >> 40));
    struct sbx_strv allow;
    sbx_strv_init(&allow);
    int rc = check_network_options(o, isolated, &allow, err);
    if (rc < 0) {
        sbx_strv_release(&allow);
        return rc;
    }
    struct local_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "local";
    c->supervisor_path = o->supervisor_path ? sbx_xstrdup(o->supervisor_path) : NULL;
    c->runtime_dir = o->runtime_dir ? sbx_xstrdup(o->runtime_dir) : NULL;
    c->workspace_dir = o->workspace_dir ? sbx_xstrdup(o->workspace_dir) : NULL;
    c->isolated = isolated;
    c->network = o->network;
    c->limits = o->limits;
    c->n_grants = o->n_grants;
    c->grants = o->n_grants ? sbx_xcalloc(o->n_grants, sizeof(*c->grants)) : NULL;
    for (size_t i = 0; i < o->n_grants; i++) {
        c->grants[i].src = sbx_xstrdup(o->grants[i].src);
        c->grants[i].dst = o->grants[i].dst ? sbx_xstrdup(o->grants[i].dst) : NULL;
        c->grants[i].writable = o->grants[i].writable;
        c->grants[i].dangerous = o->grants[i].dangerous;
    }
    c->n_ports = o->n_exposed_ports;
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        c->ports[i] = o->exposed_ports[i];
    c->start_timeout_ms = o->start_timeout_ms > 0 ? o->start_timeout_ms : START_TIMEOUT_MS;
    c->request_idle_ms = o->request_idle_ms > 0 ? o->request_idle_ms : REQUEST_IDLE_MS;
    c->test_delay_ms = t->request_delay_ms > 0 ? t->request_delay_ms : 0;
    c->allow = allow;
    c->port_bind = o->port_bind ? sbx_xstrdup(o->port_bind) : NULL;
    c->n_allow_ports = o->n_allow_ports;
    for (size_t i = 0; i < o->n_allow_ports; i++)
        c->allow_ports[i] = o->allow_ports[i];
    sbx_strv_init(&c->test_hosts);
    sbx_strv_pushv(&c->test_hosts, t->proxy_hosts);
    c->tied = o->tied != 0;
    c->disk_bytes = o->disk_bytes ? o->disk_bytes : SBX_LOCAL_DISK_DEFAULT;
    c->disk_explicit = o->disk_bytes != 0 && o->disk_bytes != SBX_LOCAL_LIMIT_NONE;
    *out = &c->base;
    return 0;
}
