/* The provider-independent half of a session, at the bottom of session/: the shared part
 * (init_base), events, argument checks, path normalisation, starting a command (struct
 * sbx_proc), the exec-and-capture loop and the file helpers, all over the provider's vtable.
 * stream.c and pty.c are loops over the command it starts; close.c ends a session. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/manifest/internal.h"
#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/path.h"
#include "sbx/session.h"
#include "sbx/time.h"

void sbx_session_init_base(struct sbx_session *s, const struct sbx_session_ops *ops,
                           const char *provider, const char *id, const char *root)
{
    s->ops = ops;
    s->provider = provider;
    s->id = sbx_xstrdup(id);
    s->root = sbx_xstrdup(root);
    pthread_mutex_init(&s->lock, NULL);
    s->ptys = NULL;
    s->n_ptys = 0;
    s->pty_clock = 0;
    s->event_fn = NULL;
    s->event_data = NULL;
    s->progress_fn = NULL;
    s->progress_data = NULL;
    s->event_seq = 0;
    s->state_gen = 0;
    s->manifest = NULL;
}

const char *sbx_session_id(const struct sbx_session *s)
{
    return s->id;
}

const char *sbx_session_provider(const struct sbx_session *s)
{
    return s->provider;
}

const char *sbx_session_root(const struct sbx_session *s)
{
    return s->root;
}

/* ------------------------------------------------------------------------------------------ */
/* The manifest the sandbox was made from */

void sbx__session_set_manifest(struct sbx_session *s, const struct sbx_manifest *m)
{
    struct sbx_manifest *copy = m ? sbx__manifest_dup(m) : NULL;
    pthread_mutex_lock(&s->lock);
    sbx_manifest_free(s->manifest);
    s->manifest = copy;
    pthread_mutex_unlock(&s->lock);
}

/* The session state's manifest (an empty one when it keeps none), as every reader of a state
 * takes it: host sources are not looked at, files may be recorded by digest. */
static int read_manifest(struct sbx_session *s, struct sbx_manifest **out, struct sbx_error *err)
{
    json_t *st = NULL;
    int rc = s->ops->state(s, &st, err);
    const json_t *mj = rc == 0 ? json_object_get(st, "manifest") : NULL;
    if (json_is_object(mj)) {
        struct sbx_manifest_load_opts lo = {.base_dir = "/",
                                            .flags = SBX_MANIFEST_NO_HOST_CHECKS |
                                                     SBX_MANIFEST_CONTENT_DIGESTS};
        if ((rc = sbx_manifest_from_json(mj, &lo, out, err)) < 0)
            sbx_error_prefix(err, "the manifest of sandbox '%s'", s->id);
    } else if (rc == 0) {
        *out = sbx_manifest_new();
    }
    json_decref(st);
    return rc;
}

int sbx__session_manifest(struct sbx_session *s, const struct sbx_manifest **out,
                          struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (!s->manifest)
        rc = read_manifest(s, &s->manifest, err);
    if (rc == 0)
        *out = s->manifest;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Events */

void sbx_session_set_event_fn(struct sbx_session *s, sbx_session_event_fn *fn, void *data)
{
    s->event_fn = fn;
    s->event_data = data;
}

void sbx__session_event_start(struct sbx_session *s, struct sbx_session_event *ev, const char *op)
{
    memset(ev, 0, sizeof(*ev));
    if (!s->event_fn)
        return;
    ev->session_id = s->id;
    ev->provider = s->provider;
    ev->op = op;
    ev->phase = SBX_SESSION_EVENT_START;
    ev->seq = __atomic_add_fetch(&s->event_seq, 1, __ATOMIC_RELAXED);
    ev->ts_ns = sbx_time_real_ns();
    s->event_fn(ev, s->event_data);
}

void sbx__session_event_finish(struct sbx_session *s, struct sbx_session_event *ev, int rc,
                               const struct sbx_error *err)
{
    if (!s->event_fn || !ev->op)
        return;
    int64_t start = ev->ts_ns;
    ev->phase = SBX_SESSION_EVENT_FINISH;
    ev->seq = __atomic_add_fetch(&s->event_seq, 1, __ATOMIC_RELAXED);
    ev->ts_ns = sbx_time_real_ns();
    ev->duration_ns = ev->ts_ns - start;
    ev->ok = rc == 0 && (!ev->exit || (ev->exit->code == 0 && !ev->exit->timed_out));
    ev->error = rc < 0 ? err : NULL;
    s->event_fn(ev, s->event_data);
}

json_t *sbx_session_event_json(const struct sbx_session_event *ev)
{
    char ts[SBX_TIME_RFC3339_LEN];
    json_t *o = json_object(), *data = json_object();
    sbx_time_rfc3339(ev->ts_ns, ts);
    sbx_json_set(o, "version", json_integer(1));
    sbx_json_set(o, "session_id", sbx_json_str(ev->session_id ? ev->session_id : ""));
    sbx_json_set(o, "seq", json_integer((json_int_t)ev->seq));
    sbx_json_set(o, "op", sbx_json_str(ev->op ? ev->op : ""));
    sbx_json_set(o, "phase",
                 sbx_json_str(ev->phase == SBX_SESSION_EVENT_START ? "start" : "finish"));
    sbx_json_set(o, "ts", sbx_json_str(ts));
    sbx_json_set(data, "sandbox.backend", sbx_json_str(ev->provider ? ev->provider : ""));
    if (ev->path)
        sbx_json_set(data, "path", sbx_json_str(ev->path));
    if (ev->command)
        sbx_json_set(data, "command", sbx_json_str(ev->command));
    if (ev->argv) {
        json_t *a = json_array();
        for (const char *const *p = ev->argv; *p; p++)
            sbx_json_append(a, sbx_json_str(*p));
        sbx_json_set(data, "command", a);
    }
    if (ev->port)
        sbx_json_set(data, "port", json_integer(ev->port));
    if (ev->phase == SBX_SESSION_EVENT_FINISH) {
        sbx_json_set(o, "ok", json_boolean(ev->ok));
        sbx_json_set(o, "duration_ms", json_real((double)ev->duration_ns / 1e6));
        if (ev->exit) {
            sbx_json_set(data, "exit_code", json_integer(ev->exit->code));
            if (ev->exit->signal)
                sbx_json_set(data, "signal", json_integer(ev->exit->signal));
            if (ev->exit->timed_out)
                sbx_json_set(data, "timed_out", json_true());
        }
        if (!strcmp(ev->op ? ev->op : "", "read") || !strcmp(ev->op ? ev->op : "", "write"))
            sbx_json_set(data, "bytes", json_integer((json_int_t)ev->bytes));
        if (ev->error) {
            sbx_json_set(o, "error_code", sbx_json_str(sbx_strerror(ev->error->code)));
            sbx_json_set(o, "error_message", sbx_json_str(ev->error->msg));
        }
    }
    sbx_json_set(o, "data", data);
    return o;
}

int sbx__session_path(struct sbx_session *s, const char *path, int allow_root, char **out,
                      struct sbx_error *err)
{
    if (!path)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing path");
    int flags = SBX_PATH_ALLOW_ABSOLUTE | (allow_root ? SBX_PATH_ALLOW_ROOT : 0);
    return sbx_path_normalize(path, strlen(path), flags, s->root, out, err);
}

static int check_spec(const struct sbx_exec_spec *spec, struct sbx_error *err)
{
    if (!spec)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing command");
    if (!!spec->argv == !!spec->command)
        return sbx_error_set(err, SBX_E_INVAL, 0, "give exactly one of argv and command");
    if (spec->argv) {
        size_t n = 0;
        while (spec->argv[n])
            n++;
        if (n == 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "empty command");
        if (n > SBX_EXEC_MAX_ARGS)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d arguments", SBX_EXEC_MAX_ARGS);
        if (spec->argv[0][0] == '\0')
            return sbx_error_set(err, SBX_E_INVAL, 0, "empty command name");
    } else if (spec->command[0] == '\0') {
        return sbx_error_set(err, SBX_E_INVAL, 0, "empty command");
    }
    if (spec->env) {
        size_t n = 0;
        for (const char *const *e = spec->env; *e; e++, n++) {
            const char *eq = strchr(*e, '=');
            if (!eq || eq == *e)
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "environment entry '%s' must be KEY=VALUE", *e);
        }
        if (n > SBX_EXEC_MAX_ENV)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d environment entries",
                                 SBX_EXEC_MAX_ENV);
    }
    if (spec->timeout_ms < 0 || spec->kill_grace_ms < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "timeout must not be negative");
    return 0;
}

int sbx_session_exec_start(struct sbx_session *s, const struct sbx_exec_spec *spec,
                           struct sbx_proc **out, struct sbx_error *err)
{
    char *cwd = NULL;
    int rc = check_spec(spec, err);
    if (rc < 0)
        return rc;
    rc = sbx__session_path(s, spec->cwd ? spec->cwd : "", 1, &cwd, err);
    if (rc < 0) {
        sbx_error_prefix(err, "working directory");
        return rc;
    }
    rc = s->ops->exec_start(s, spec, cwd, out, err);
    free(cwd);
    return rc;
}

int sbx_proc_wait(struct sbx_proc *p, int64_t timeout_ms, struct sbx_exit *out,
                  struct sbx_error *err)
{
    return p->ops->wait(p, timeout_ms, out, err);
}

void sbx_proc_close_stdin(struct sbx_proc *p)
{
    if (p->tty || p->stdin_fd < 0)
        return;
    sbx_fd_close(&p->stdin_fd);
}

int sbx_proc_resize(struct sbx_proc *p, unsigned short rows, unsigned short cols,
                    struct sbx_error *err)
{
    if (!p->tty)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the process has no terminal");
    return sbx__tty_resize(p->stdout_fd, rows, cols, err);
}

void sbx_proc_free(struct sbx_proc *p)
{
    if (p)
        p->ops->free(p);
}

void sbx_exec_result_release(struct sbx_exec_result *r)
{
    sbx_output_release(&r->out);
    sbx_output_release(&r->err);
}

/* One command run to completion with its output captured (sbx_session_exec): the process,
 * its pipes (-1 once at EOF, or for input once all is written), the captures, the status. */
struct capture_run {
    const struct sbx_exec_spec *sp;
    struct sbx_proc *p;
    struct sbx_capture out, err;
    int ofd, efd, ifd;
    size_t in_off;
    int have_status;
    struct sbx_exit st;
};

/* Write what the command takes of its input; no more input once all of it is written or the
 * command stopped reading. */
static void feed_input(struct capture_run *c)
{
    const char *from = (const char *)c->sp->input + c->in_off;
    size_t left = c->sp->input_len - c->in_off;
    ssize_t w = c->p->tty ? write(c->ifd, from, left)
                          : send(c->ifd, from, left, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0)
        c->in_off += (size_t)w;
    if ((w < 0 && errno != EINTR && errno != EAGAIN) || c->in_off == c->sp->input_len) {
        if (!c->p->tty)
            sbx_proc_close_stdin(c->p);
        c->ifd = -1;
    }
}

/* One wait: for output, room for input, the exit status or cancellation; then what is ready
 * is done. */
static int capture_step(struct capture_run *c, struct sbx_error *err)
{
    struct pollfd pfd[4];
    int n = 0, io = -1, ie = -1, ii = -1, is, rc;
    if (c->ofd >= 0) {
        io = n;
        pfd[n++] = (struct pollfd){.fd = c->ofd, .events = POLLIN};
    }
    if (c->efd >= 0) {
        ie = n;
        pfd[n++] = (struct pollfd){.fd = c->efd, .events = POLLIN};
    }
    if (c->ifd >= 0) {
        ii = n;
        pfd[n++] = (struct pollfd){.fd = c->ifd, .events = POLLOUT};
    }
    is = n;
    pfd[n++] = (struct pollfd){.fd = c->p->status_fd, .events = POLLIN};
    int r = poll(pfd, (nfds_t)n, sbx__cancel_poll_ms(c->sp->cancel, -1));
    /* Freeing the process (the caller's) kills it. */
    if ((rc = sbx__cancel_check(c->sp->cancel, err)) < 0)
        return rc;
    if (r < 0)
        return errno == EINTR ? 0 : sbx_error_errno(err, errno, "poll");
    if (io >= 0 && pfd[io].revents)
        sbx__pump(&c->ofd, &c->out);
    if (ie >= 0 && pfd[ie].revents)
        sbx__pump(&c->efd, &c->err);
    if (ii >= 0 && pfd[ii].revents)
        feed_input(c);
    if (pfd[is].revents) {
        if ((rc = sbx_proc_wait(c->p, 0, &c->st, err)) < 0)
            return rc;
        c->have_status = 1;
    }
    return 0;
}

static int exec_body(struct sbx_session *s, const struct sbx_exec_spec *spec,
                     struct sbx_exec_result *res, struct sbx_error *err)
{
    struct sbx_exec_spec sp;
    struct capture_run c = {.sp = &sp, .ofd = -1, .efd = -1, .ifd = -1};
    int rc;

    if (!spec)
        return check_spec(spec, err);
    sp = *spec;
    if (sp.input)
        sp.flags |= SBX_EXEC_STDIN;
    sbx_capture_init(&c.out, sp.output_limit);
    sbx_capture_init(&c.err, sp.output_limit);
    rc = sbx_session_exec_start(s, &sp, &c.p, err);
    if (rc < 0)
        goto out;
    c.ofd = c.p->stdout_fd;
    c.efd = c.p->stderr_fd;
    c.ifd = sp.input ? c.p->stdin_fd : -1;
    if (c.ofd >= 0)
        sbx__set_nonblock(c.ofd);
    if (c.efd >= 0)
        sbx__set_nonblock(c.efd);
    if (c.ifd >= 0 && !c.p->tty && sp.input_len == 0) {
        sbx_proc_close_stdin(c.p);
        c.ifd = -1;
    }
    while (!c.have_status || c.ofd >= 0 || c.efd >= 0) {
        if (c.have_status) {
            /* The command is gone; take what it left in the pipes and stop. */
            if (c.ofd >= 0)
                sbx__pump(&c.ofd, &c.out);
            if (c.efd >= 0)
                sbx__pump(&c.efd, &c.err);
            break;
        }
        if ((rc = capture_step(&c, err)) < 0)
            goto out;
    }
    if (!c.have_status && (rc = sbx_proc_wait(c.p, -1, &c.st, err)) < 0)
        goto out;
    res->status = c.st;
    sbx_capture_take(&c.out, &res->out);
    sbx_capture_take(&c.err, &res->err);
    rc = 0;
out:
    sbx_proc_free(c.p);
    sbx_capture_release(&c.out);
    sbx_capture_release(&c.err);
    return rc;
}

int sbx_session_exec(struct sbx_session *s, const struct sbx_exec_spec *spec,
                     struct sbx_exec_result *res, struct sbx_error *err)
{
    struct sbx_session_event ev;
    sbx__session_event_start(s, &ev, "exec");
    if (spec) {
        ev.argv = spec->argv;
        ev.command = spec->command;
    }
    int rc = exec_body(s, spec, res, err);
    if (rc == 0)
        ev.exit = &res->status;
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Files */

static int read_open_body(struct sbx_session *s, const char *path, int *out_fd, uint64_t *out_size,
                          struct sbx_error *err)
{
    char *rel = NULL;
    int rc = sbx__session_path(s, path, 0, &rel, err);
    if (rc == 0)
        rc = s->ops->read_open(s, rel, out_fd, out_size, err);
    free(rel);
    return rc;
}

int sbx_session_read_open(struct sbx_session *s, const char *path, int *out_fd, uint64_t *out_size,
                          struct sbx_error *err)
{
    struct sbx_session_event ev;
    uint64_t size = 0;
    sbx__session_event_start(s, &ev, "read");
    ev.path = path;
    int rc = read_open_body(s, path, out_fd, &size, err);
    if (rc == 0 && out_size)
        *out_size = size;
    ev.bytes = size;
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

int sbx_session_read(struct sbx_session *s, const char *path, uint64_t max, struct sbx_buf *out,
                     struct sbx_error *err)
{
    struct sbx_session_event ev;
    int fd = -1;
    uint64_t size = 0;
    size_t before = out->len;
    if (max == 0)
        max = SBX_FILE_DEFAULT_MAX;
    sbx__session_event_start(s, &ev, "read");
    ev.path = path;
    int rc = read_open_body(s, path, &fd, &size, err);
    if (rc < 0)
        goto out;
    if (size > max) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "file '%s' is larger than %llu bytes", path,
                           (unsigned long long)max);
        goto out;
    }
    rc = sbx_fd_read_all(fd, (size_t)max, out, err);
    if (rc < 0) {
        sbx_buf_setlen(out, before);
        sbx_error_prefix(err, "read '%s'", path);
    }
out:
    ev.bytes = out->len - before;
    sbx__session_event_finish(s, &ev, rc, err);
    sbx_fd_close(&fd);
    return rc;
}

struct mem_reader {
    const char *p;
    size_t n, off;
    uint64_t count;
};

struct fd_reader {
    int fd;
    uint64_t count;
    uint64_t data_left; /* bytes before the next hole; UINT64_MAX: unknown */
};

static long mem_read(void *ctx, void *buf, size_t n, struct sbx_error *err)
{
    struct mem_reader *m = ctx;
    (void)err;
    size_t k = m->n - m->off;
    if (k > n)
        k = n;
    memcpy(buf, m->p + m->off, k);
    m->off += k;
    m->count += k;
    return (long)k;
}

static long fd_read(void *ctx, void *buf, size_t n, struct sbx_error *err)
{
    struct fd_reader *f = ctx;
    /* Stop at the next hole, so that its zeros are skipped rather than read as data. */
    if (f->data_left < n)
        n = (size_t)f->data_left;
    if (n == 0)
        return 0;
    for (;;) {
        ssize_t r = read(f->fd, buf, n);
        if (r >= 0) {
            f->count += (uint64_t)r;
            if (f->data_left != UINT64_MAX)
                f->data_left -= (uint64_t)r;
            return (long)r;
        }
        if (errno != EINTR)
            return sbx_error_errno(err, errno, "read");
    }
}

static int fd_skip_hole(void *ctx, uint64_t *hole, struct sbx_error *err)
{
    struct fd_reader *f = ctx;
    return sbx_fd_next_extent(f->fd, hole, &f->data_left, err);
}

static int do_write(struct sbx_session *s, const char *path, const struct sbx_file_reader *r,
                    uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    char *rel = NULL;
    int rc = sbx__session_path(s, path, 0, &rel, err);
    if (rc < 0)
        return rc;
    if (mode == 0)
        mode = 0644;
    if (mode & ~(mode_t)07777) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "mode %o is not a permission mode", (unsigned)mode);
        goto out;
    }
    rc = s->ops->write(s, rel, r, max, mode & SBX_FS_MODE_MASK, flags, err);
out:
    free(rel);
    return rc;
}

static int traced_write(struct sbx_session *s, const char *path, const struct sbx_file_reader *r,
                        uint64_t max, mode_t mode, int flags, uint64_t *count,
                        struct sbx_error *err)
{
    struct sbx_session_event ev;
    sbx__session_event_start(s, &ev, "write");
    ev.path = path;
    int rc = do_write(s, path, r, max, mode, flags, err);
    ev.bytes = *count;
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

int sbx_session_write(struct sbx_session *s, const char *path, const void *data, size_t n,
                      mode_t mode, int flags, struct sbx_error *err)
{
    struct mem_reader m = {data, n, 0, 0};
    struct sbx_file_reader r = {mem_read, &m};
    return traced_write(s, path, &r, n, mode, flags, &m.count, err);
}

int sbx_session_write_fd(struct sbx_session *s, const char *path, int fd, uint64_t max, mode_t mode,
                         int flags, struct sbx_error *err)
{
    struct fd_reader f = {fd, 0, UINT64_MAX};
    struct sbx_file_reader r = {fd_read, &f, fd_skip_hole};
    return traced_write(s, path, &r, max ? max : SBX_FILE_DEFAULT_MAX, mode, flags, &f.count, err);
}

int sbx_session_ls(struct sbx_session *s, const char *path, struct sbx_dirlist *out,
                   struct sbx_error *err)
{
    struct sbx_session_event ev;
    char *rel = NULL;
    sbx__session_event_start(s, &ev, "ls");
    ev.path = path;
    int rc = sbx__session_path(s, path, 1, &rel, err);
    if (rc == 0)
        rc = s->ops->ls(s, rel, out, err);
    free(rel);
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

int sbx_session_stat(struct sbx_session *s, const char *path, struct sbx_dirent *out,
                     struct sbx_error *err)
{
    char *rel = NULL;
    int rc = sbx__session_path(s, path, 1, &rel, err);
    if (rc == 0)
        rc = s->ops->stat(s, rel, out, err);
    free(rel);
    return rc;
}

void sbx_dirent_release(struct sbx_dirent *d)
{
    free(d->name);
    free(d->target);
    d->name = d->target = NULL;
}

void sbx_dirlist_release(struct sbx_dirlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        sbx_dirent_release(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

int sbx_session_mkdir(struct sbx_session *s, const char *path, int flags, struct sbx_error *err)
{
    struct sbx_session_event ev;
    char *rel = NULL;
    sbx__session_event_start(s, &ev, "mkdir");
    ev.path = path;
    int rc = sbx__session_path(s, path, 0, &rel, err);
    if (rc == 0)
        rc = s->ops->mkdir(s, rel, flags, err);
    free(rel);
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

int sbx_session_rm(struct sbx_session *s, const char *path, int flags, struct sbx_error *err)
{
    struct sbx_session_event ev;
    char *rel = NULL;
    sbx__session_event_start(s, &ev, "rm");
    ev.path = path;
    int rc = sbx__session_path(s, path, 1, &rel, err);
    if (rc == 0 && rel[0] == '\0')
        rc = sbx_error_set(err, SBX_E_PERM, 0, "refusing to remove the workspace root");
    else if (rc == 0)
        rc = s->ops->rm(s, rel, flags, err);
    free(rel);
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

int sbx_session_chmod(struct sbx_session *s, const char *path, mode_t mode, struct sbx_error *err)
{
    char *rel = NULL;
    if (mode & ~(mode_t)07777)
        return sbx_error_set(err, SBX_E_INVAL, 0, "mode %o is not a permission mode",
                             (unsigned)mode);
    int rc = sbx__session_path(s, path, 1, &rel, err);
    if (rc == 0)
        rc = s->ops->chmod(s, rel, mode & SBX_FS_MODE_MASK, err);
    free(rel);
    return rc;
}

int sbx_session_resolve_port(struct sbx_session *s, int port, char **out_url, struct sbx_error *err)
{
    struct sbx_session_event ev;
    int rc;
    sbx__session_event_start(s, &ev, "resolve_port");
    ev.port = port;
    if (port < 1 || port > 65535)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "port %d is not in 1..65535", port);
    else
        rc = s->ops->resolve_port(s, port, out_url, err);
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

int sbx_session_state(struct sbx_session *s, json_t **out, struct sbx_error *err)
{
    return s->ops->state(s, out, err);
}

static uint64_t state_clock; /* atomic: the last mark given out */

void sbx__session_state_changed(struct sbx_session *s)
{
    uint64_t g = __atomic_add_fetch(&state_clock, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state_gen, g, __ATOMIC_RELEASE);
}

uint64_t sbx_session_state_gen(const struct sbx_session *s)
{
    return __atomic_load_n(&s->state_gen, __ATOMIC_ACQUIRE);
}

void sbx_session_set_progress(struct sbx_session *s, sbx_progress_fn *fn, void *data)
{
    s->progress_fn = fn;
    s->progress_data = data;
}
