/* Commands in a Kubernetes sandbox: pods/exec over WebSocket (v5.channel.k8s.io, else v4),
 * one connection per command.
 *
 * Kubernetes runs an exec as the container's user, in the container's working directory, with
 * the container's environment: a small fixed shell preamble (WRAPPER) runs first, as the Docker
 * provider's does, and does the rest inside the pod: the command's own environment, its working
 * directory (refusing one that resolves out of the workspace), a missing program told from a
 * failing one, its process id reported (the process group a timeout kills, through a second
 * exec), and, unless background processes are kept, the group ended with the command.
 *
 * A caller's command (sbx__kube_exec_start) is relayed by the remote layer's event loop
 * (wire/rproc.h): no thread of its own. The provider's own short commands (files, setup,
 * kills) run with sbx__kube_run, blocking on the caller's thread. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "providers/kubernetes/api.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/conn.h"
#include "sandbox/wire/rproc.h"
#include "sbx/fs.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define CHUNK      65536
#define MARK_MAX   32
#define SEND_HIGH  ((size_t)1 << 20) /* stdin queued on a connection before we wait */
#define MSG_MAX    ((size_t)4 << 20)
#define STATUS_MAX SBX__CH_STATUS_MAX
#define KILL_MS    30000

/* $1 workspace root, $2 working directory, $3 keep background processes (1/0), $4 $5 the
 * terminal's rows and columns, $6 the number of environment entries that follow, then argv.
 * The first bytes on stdout are the verdict: "S<pid>\n" started, "N" not found, "X" not
 * executable, "C" no such directory, "P" directory out of the workspace, "E" a bad
 * environment entry. The shell stays until the command ends (see the Docker provider's
 * wrapper): the exec's status is the command's. */
static const char WRAPPER[] =
        "root=$1 dir=$2 keep=$3 rows=$4 cols=$5 n=$6; shift 6\n"
        "while [ \"$n\" -gt 0 ]; do export \"$1\" 2>/dev/null || { printf E; exit 125; }; "
        "shift; n=$((n-1)); done\n"
        "[ -z \"$rows\" ] || stty rows \"$rows\" cols \"$cols\" 2>/dev/null\n"
        "rootr=$(cd -P -- \"$root\" 2>/dev/null && pwd -P) || { printf C; exit 125; }\n"
        "cd -- \"$dir\" 2>/dev/null || { printf C; exit 125; }\n"
        "case \"$(pwd -P)/\" in \"$rootr\"/*) ;; *) printf P; exit 125;; esac\n"
        "case $1 in\n"
        "*/*) if [ ! -e \"$1\" ]; then printf N; exit 127; fi\n"
        "     if [ -d \"$1\" ] || [ ! -x \"$1\" ]; then printf X; exit 126; fi;;\n"
        "*) if ! command -v \"$1\" >/dev/null 2>&1; then printf N; exit 127; fi;;\n"
        "esac\n"
        "printf 'S%d\\n' \"$$\"\n"
        "if [ \"$keep\" = 1 ]; then exec \"$@\"; fi\n"
        "trap : TERM\n"
        "\"$@\"\n"
        "r=$?\n"
        "trap '' TERM\n"
        "kill -TERM 0 2>/dev/null\n"
        "exit \"$r\"\n";

/* Where a command runs: the pod, its container, the API server. */
static char *exec_path(const struct sbx__kube_target *t, const char *const *argv, int in, int tty)
{
    struct sbx_buf q;
    sbx_buf_init(&q, SBX_BUF_NOLIMIT);
    char *c = sbx__http_escape(t->container, 0);
    (void)sbx_buf_addf(&q, NULL, "container=%s&stdin=%s&stdout=true&stderr=%s&tty=%s", c,
                       in ? "true" : "false", tty ? "false" : "true", tty ? "true" : "false");
    free(c);
    for (const char *const *a = argv; *a; a++) {
        char *e = sbx__http_escape(*a, 0);
        (void)sbx_buf_addf(&q, NULL, "&command=%s", e);
        free(e);
    }
    char *path = sbx__kube_path(t->api, SBX__KUBE_POD, t->pod, "exec", q.data);
    sbx_buf_release(&q);
    return path;
}

/* Open the exec's WebSocket; *version the channel protocol the server chose. A pod that is
 * not there (404) or not running (400 "container not found", ...) is SBX_E_SANDBOX naming the
 * sandbox; 403 names pods/exec. */
static int exec_open(const struct sbx__kube_target *t, const char *const *argv, int in, int tty,
                     struct sbx__wsconn **out, int *version, struct sbx_error *err)
{
    static const char *const protocols[] = {"v5.channel.k8s.io", "v4.channel.k8s.io", NULL};
    char *path = exec_path(t, argv, in, tty);
    int rc = sbx__wsconn_open(t->api->ep, path, protocols, NULL, MSG_MAX, 0, out, err);
    free(path);
    if (rc == -SBX_E_PERM && strstr(err->msg, "403"))
        return sbx__kube_forbidden(t->api, "create", "pods/exec", err);
    if (rc == -SBX_E_NOTFOUND || rc == -SBX_E_INVAL) {
        char why[SBX_ERROR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err->msg);
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone or stopped: %s", t->id,
                             why);
    }
    if (rc == 0)
        *version = (*out)->protocol == 1 ? SBX__CH_V4 : SBX__CH_V5;
    return rc;
}

static int send_channel(struct sbx__wsconn *w, int version, int channel, const void *p, size_t n,
                        struct sbx_error *err)
{
    struct sbx_buf m;
    sbx_buf_init(&m, SBX_BUF_NOLIMIT);
    int rc = sbx__ch_encode(version, channel, p, n, &m, err);
    if (rc == 0)
        rc = sbx__ws_send(&w->ws, sbx__ch_opcode(version), m.data, m.len, err);
    sbx_buf_release(&m);
    return rc;
}

static int send_close_stdin(struct sbx__wsconn *w, int version, struct sbx_error *err)
{
    struct sbx_buf m;
    sbx_buf_init(&m, 16);
    int rc = sbx__ch_encode_close(version, SBX__CH_STDIN, &m, err);
    if (rc == 0)
        rc = sbx__ws_send(&w->ws, SBX__WS_BINARY, m.data, m.len, err);
    sbx_buf_release(&m);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The provider's own commands: blocking */

struct runner {
    struct sbx__kube_run *io;
    struct sbx__wsconn *w;
    int version;
    struct sbx_buf status, scratch;
    int have_status, closed;
    uint64_t sent;    /* stdin bytes queued */
    uint64_t written; /* stdout bytes to output_fd */
    int in_done;      /* stdin sent to its end (and closed) */
};

/* Take one message from the server. */
static int take(struct runner *r, const struct sbx__ws_msg *m, struct sbx_error *err)
{
    if (m->opcode == SBX__WS_CLOSE) {
        r->closed = 1;
        return 0;
    }
    if (m->opcode != SBX__WS_TEXT && m->opcode != SBX__WS_BINARY)
        return 0;
    struct sbx__ch_frame f;
    int rc = sbx__ch_decode(r->version, m->opcode, m->data, m->len, &r->scratch, &f, err);
    if (rc < 0)
        return rc;
    if (f.channel == SBX__CH_STDOUT) {
        if (r->io->output_fd >= 0) {
            r->written += f.len;
            if (r->io->output_max && r->written > r->io->output_max)
                return sbx_error_set(err, SBX_E_TOOBIG, 0, "the output of '%s' passed %llu bytes",
                                     r->io->argv[0], (unsigned long long)r->io->output_max);
            return sbx_fd_write_all(r->io->output_fd, f.data, f.len, err);
        }
        rc = sbx_buf_add(r->io->out, f.data, f.len, err);
    } else if (f.channel == SBX__CH_STDERR) {
        rc = sbx_buf_add(r->io->err, f.data, f.len, err);
    } else if (f.channel == SBX__CH_ERROR) {
        r->have_status = 1;
        rc = sbx_buf_add(&r->status, f.data, f.len, err);
    }
    return rc;
}

/* Queue the next piece of stdin (from memory or the input descriptor). 1 when the input
 * descriptor must be polled first. */
static int feed(struct runner *r, int in_ready, struct sbx_error *err)
{
    struct sbx__kube_run *io = r->io;
    if (r->in_done)
        return 0;
    if (io->input_fd < 0) {
        size_t left = io->input_len - (size_t)r->sent;
        size_t k = left < CHUNK ? left : CHUNK;
        int rc = k ? send_channel(r->w, r->version, SBX__CH_STDIN,
                                  (const char *)io->input + r->sent, k, err)
                   : 0;
        if (rc < 0)
            return rc;
        r->sent += k;
    } else {
        if (!in_ready)
            return 1;
        char buf[CHUNK];
        ssize_t n = read(io->input_fd, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            return 1;
        if (n < 0)
            return sbx_error_errno(err, errno, "cannot read the input of '%s'", io->argv[0]);
        if (n > 0) {
            int rc = send_channel(r->w, r->version, SBX__CH_STDIN, buf, (size_t)n, err);
            if (rc < 0)
                return rc;
            r->sent += (uint64_t)n;
            return 1;
        }
        io->input_len = (size_t)r->sent;
    }
    if (r->sent == io->input_len) {
        r->in_done = 1;
        if (r->version >= SBX__CH_V5)
            return send_close_stdin(r->w, r->version, err);
    }
    return 0;
}

static int run_step(struct runner *r, int in_ready, int *want_in, int *pending_out, int *got,
                    struct sbx_error *err)
{
    struct sbx__kube_run *io = r->io;
    *want_in = 0;
    *got = 0;
    int rc = sbx__wsconn_flush(r->w, err);
    /* More stdin only once everything queued went out (pongs included): a TLS write that
     * could not finish must be retried with the same bytes (OpenSSL refuses a moved buffer). */
    if (rc == 0 && (io->input || io->input_fd >= 0)) {
        if ((rc = feed(r, in_ready, err)) < 0)
            return rc;
        *want_in = rc == 1;
        rc = sbx__wsconn_flush(r->w, err);
    }
    if (rc < 0)
        return rc;
    *pending_out = rc == 1;
    /* Everything decoded before waiting: TLS may hold what the socket no longer shows. */
    struct sbx__ws_msg m;
    while ((rc = sbx__wsconn_next(r->w, &m, err)) == 1) {
        *got = 1;
        if ((rc = take(r, &m, err)) < 0)
            return rc;
    }
    return rc;
}

static int run_loop(struct runner *r, int64_t deadline, struct sbx_error *err)
{
    struct sbx__kube_run *io = r->io;
    int in_ready = 0;
    if (!io->input && io->input_fd < 0)
        r->in_done = 1;
    for (;;) {
        int want_in, pending_out, got;
        int rc = run_step(r, in_ready, &want_in, &pending_out, &got, err);
        /* The command ended and said so: stdin it did not take is of no interest. */
        if (r->have_status && (rc < 0 || rc == SBX__WSCONN_END || r->closed)) {
            sbx_error_clear(err);
            return 0;
        }
        if (rc == SBX__WSCONN_END || r->closed)
            return 0;
        if (rc < 0)
            return rc;
        if (got)
            continue;
        struct pollfd pf[2] = {{.fd = sbx__conn_fd(r->w->conn),
                                .events = (short)(POLLIN | (pending_out ? POLLOUT : 0))},
                               {.fd = want_in ? io->input_fd : -1, .events = POLLIN}};
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' in the pod took too long",
                                 io->argv[0]);
        int pr = poll(pf, 2, ms);
        if (pr < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
        in_ready = pr > 0 && (pf[1].revents & (POLLIN | POLLHUP));
    }
}

/* argv behind a `head -c N |` that ends its input after n bytes: v4 cannot close stdin. */
static void bounded_argv(struct sbx_strv *out, const char *const *argv, uint64_t n)
{
    char num[32];
    snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
    sbx_strv_push(out, "/bin/sh");
    sbx_strv_push(out, "-c");
    sbx_strv_push(out, "n=$1; shift; head -c \"$n\" | \"$@\"");
    sbx_strv_push(out, "sh");
    sbx_strv_push(out, num);
    for (const char *const *a = argv; *a; a++)
        sbx_strv_push(out, *a);
}

/* The size of what is left to read from fd, spooled into a temporary file when fd cannot tell
 * (a pipe): *spool is that file (caller closes). */
static int input_size(int fd, uint64_t *n, int *spool, struct sbx_error *err)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t at = lseek(fd, 0, SEEK_CUR);
        *n = (uint64_t)(st.st_size - (at > 0 ? at : 0));
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    int t = open(tmp && tmp[0] == '/' ? tmp : "/tmp", O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
    if (t < 0)
        return sbx_error_errno(err, errno, "cannot make a temporary file");
    uint64_t copied = 0;
    int rc = sbx_fd_copy_sparse(fd, t, 0, &copied, err);
    if (rc == 0 && lseek(t, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "lseek");
    if (rc < 0) {
        close(t);
        return rc;
    }
    *n = copied;
    *spool = t;
    return 0;
}

int sbx__kube_run(const struct sbx__kube_target *t, struct sbx__kube_run *io, struct sbx_error *err)
{
    struct runner r = {.io = io};
    struct sbx_strv bounded;
    int spool = -1, in_fd = io->input_fd, rc;
    int has_in = io->input || io->input_fd >= 0;
    sbx_strv_init(&bounded);
    sbx_buf_init(&r.status, STATUS_MAX);
    sbx_buf_init(&r.scratch, MSG_MAX);
    io->code = -1;
    const char *const *argv = io->argv;
    int64_t deadline = sbx_deadline_after_ms(io->timeout_ms ? io->timeout_ms
                                                            : sbx__endpoint_timeout_ms(t->api->ep));
    if ((rc = exec_open(t, argv, has_in, 0, &r.w, &r.version, err)) < 0)
        goto out;
    if (has_in && !io->input_bounded && r.version < SBX__CH_V5) {
        /* Without v5's close of stdin the command learns the length instead: open again. */
        uint64_t n = io->input_len;
        if (io->input_fd >= 0 && (rc = input_size(io->input_fd, &n, &spool, err)) < 0)
            goto out;
        if (spool >= 0)
            io->input_fd = spool;
        io->input_len = (size_t)n;
        bounded_argv(&bounded, argv, n);
        (void)sbx__wsconn_close(r.w, SBX__WS_CLOSE_NORMAL, NULL, sbx_deadline_after_ms(1000), NULL);
        sbx__wsconn_free(r.w);
        r.w = NULL;
        if ((rc = exec_open(t, (const char *const *)bounded.v, 1, 0, &r.w, &r.version, err)) < 0)
            goto out;
    }
    if ((rc = run_loop(&r, deadline, err)) < 0)
        goto out;
    if (!r.have_status) {
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "the exec of '%s' in sandbox '%s' ended without its status (was the "
                           "pod stopped?)",
                           argv[0], t->id);
        goto out;
    }
    rc = sbx__ch_status_decode(r.version, (const uint8_t *)r.status.data, r.status.len, &io->code,
                               err);
out:
    if (rc < 0 && io->input_fd >= 0 && io->input_fd == spool)
        io->input_fd = in_fd;
    io->input_fd = in_fd;
    sbx_fd_close(&spool);
    if (r.w) {
        if (rc == 0)
            (void)sbx__wsconn_close(r.w, SBX__WS_CLOSE_NORMAL, NULL, sbx_deadline_after_ms(1000),
                                    NULL);
        sbx__wsconn_free(r.w);
    }
    sbx_buf_release(&r.status);
    sbx_buf_release(&r.scratch);
    sbx_strv_release(&bounded);
    if (rc < 0)
        sbx__endpoint_scrub(t->api->ep, err);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Kills: `kill -SIG -PID` through another exec */

struct killer {
    struct sbx__kube_target t;
    pid_t pid;
    int sig;
};

static void target_copy(struct sbx__kube_target *dst, const struct sbx__kube_target *src)
{
    dst->api = sbx__kube_api_ref(src->api);
    dst->pod = sbx_xstrdup(src->pod);
    dst->container = sbx_xstrdup(src->container);
    dst->id = sbx_xstrdup(src->id);
    dst->root = sbx_xstrdup(src->root);
}

static void target_release(struct sbx__kube_target *t)
{
    sbx__kube_api_free(t->api);
    free((char *)t->pod);
    free((char *)t->container);
    free((char *)t->id);
    free((char *)t->root);
}

int sbx__kube_kill_group(const struct sbx__kube_target *t, pid_t pid, int sig,
                         struct sbx_error *err)
{
    char num[32], flag[16];
    if (pid <= 1)
        return 0;
    snprintf(num, sizeof(num), "-%d", (int)pid);
    snprintf(flag, sizeof(flag), "-%d", sig);
    const char *argv[] = {"kill", flag, "--", num, NULL};
    struct sbx_buf o, e;
    sbx_buf_init(&o, 4096);
    sbx_buf_init(&e, 4096);
    struct sbx__kube_run io = {.argv = argv,
                               .input_fd = -1,
                               .output_fd = -1,
                               .out = &o,
                               .err = &e,
                               .timeout_ms = KILL_MS};
    int rc = sbx__kube_run(t, &io, err);
    sbx_buf_release(&o);
    sbx_buf_release(&e);
    return rc;
}

static void *killer_main(void *arg)
{
    struct killer *k = arg;
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__kube_kill_group(&k->t, k->pid, k->sig, &ignored);
    target_release(&k->t);
    free(k);
    return NULL;
}

/* A kill from the loop's thread, which must not block: a short-lived thread does it. */
static void kill_later(const struct sbx__kube_target *t, pid_t pid, int sig)
{
    struct killer *k = sbx_xcalloc(1, sizeof(*k));
    target_copy(&k->t, t);
    k->pid = pid;
    k->sig = sig;
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, killer_main, k) != 0)
        killer_main(k);
    pthread_attr_destroy(&at);
}

/* ---------------------------------------------------------------------------------------------
 * A caller's command, relayed by the loop */

struct kproc {
    struct sbx__kube_target t;
    char *name;
    struct sbx__wsconn *wc; /* until the loop takes it */
    struct sbx__lws *lws;
    struct sbx__rproc *r;
    int version, tty;
    pid_t pid;
    struct sbx_buf pre, pre_err; /* output that came with the verdict */
    struct sbx_buf status, scratch;
    int have_status, in_closed;
    unsigned rows, cols; /* the terminal size the pod was last told */
};

static void kproc_free(void *ud)
{
    struct kproc *k = ud;
    sbx__wsconn_free(k->wc);
    target_release(&k->t);
    sbx_buf_release(&k->pre);
    sbx_buf_release(&k->pre_err);
    sbx_buf_release(&k->status);
    sbx_buf_release(&k->scratch);
    free(k->name);
    free(k);
}

static int lws_send_channel(struct kproc *k, int channel, const void *p, size_t n)
{
    struct sbx_buf m;
    struct sbx_error e = SBX_ERROR_INIT;
    sbx_buf_init(&m, SBX_BUF_NOLIMIT);
    int rc = sbx__ch_encode(k->version, channel, p, n, &m, &e);
    if (rc == 0)
        rc = sbx__lws_send(k->lws, sbx__ch_opcode(k->version), m.data, m.len, &e);
    sbx_buf_release(&m);
    return rc;
}

static void send_size(struct kproc *k, unsigned rows, unsigned cols)
{
    struct sbx_buf m;
    sbx_buf_init(&m, 64);
    if (k->lws && (rows != k->rows || cols != k->cols) &&
        sbx__ch_resize_encode(cols, rows, &m, NULL) == 0 &&
        lws_send_channel(k, SBX__CH_RESIZE, m.data, m.len) == 0) {
        k->rows = rows;
        k->cols = cols;
    }
    sbx_buf_release(&m);
}

static size_t op_input(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud)
{
    struct kproc *k = ud;
    if (!k->lws)
        return n;
    /* A size set just before typing reaches the pod before the keys do. */
    struct winsize ws;
    if (k->tty && ioctl(sbx__rproc_proc(r)->stdout_fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row &&
        ws.ws_col)
        send_size(k, ws.ws_row, ws.ws_col);
    if (n == 0) {
        if (!k->in_closed && k->version >= SBX__CH_V5) {
            struct sbx_buf m;
            sbx_buf_init(&m, 16);
            if (sbx__ch_encode_close(k->version, SBX__CH_STDIN, &m, NULL) == 0)
                (void)sbx__lws_send(k->lws, SBX__WS_BINARY, m.data, m.len, NULL);
            sbx_buf_release(&m);
        }
        k->in_closed = 1;
        return 0;
    }
    if (sbx__lws_queued(k->lws) >= SEND_HIGH)
        return 0;
    size_t take_n = n < CHUNK ? n : CHUNK;
    if (lws_send_channel(k, SBX__CH_STDIN, p, take_n) < 0)
        return 0;
    return take_n;
}

static void op_resize(struct sbx__rproc *r, unsigned rows, unsigned cols, void *ud)
{
    (void)r;
    send_size(ud, rows, cols);
}

static void op_signal(struct sbx__rproc *r, int sig, void *ud)
{
    struct kproc *k = ud;
    (void)r;
    kill_later(&k->t, k->pid, sig);
}

static void op_resume(struct sbx__rproc *r, void *ud)
{
    struct kproc *k = ud;
    (void)r;
    if (k->lws)
        sbx__lws_resume(k->lws);
}

static void op_stop(struct sbx__rproc *r, void *ud)
{
    struct kproc *k = ud;
    (void)r;
    sbx__lws_free(k->lws);
    k->lws = NULL;
}

static void op_kill(struct sbx__rproc *r, void *ud)
{
    struct kproc *k = ud;
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)r;
    (void)sbx__kube_kill_group(&k->t, k->pid, SIGKILL, &ignored);
}

static const struct sbx__rproc_ops proc_ops = {.input = op_input,
                                               .resize = op_resize,
                                               .signal = op_signal,
                                               .resume = op_resume,
                                               .stop = op_stop,
                                               .kill = op_kill,
                                               .release = kproc_free};

static int on_message(struct sbx__lws *w, const struct sbx__ws_msg *m, void *ud,
                      struct sbx_error *err)
{
    struct kproc *k = ud;
    (void)w;
    if (m->opcode != SBX__WS_TEXT && m->opcode != SBX__WS_BINARY)
        return 0;
    struct sbx__ch_frame f;
    int rc = sbx__ch_decode(k->version, m->opcode, m->data, m->len, &k->scratch, &f, err);
    if (rc < 0)
        return rc;
    if ((f.channel == SBX__CH_STDOUT || f.channel == SBX__CH_STDERR) && f.len) {
        if (!sbx__rproc_output(k->r, f.channel, f.data, f.len))
            return SBX__PAUSE;
    } else if (f.channel == SBX__CH_ERROR) {
        k->have_status = 1;
        return sbx_buf_add(&k->status, f.data, f.len, err);
    }
    return 0;
}

static void on_end(struct sbx__lws *w, int rc, const struct sbx_error *err, void *ud)
{
    struct kproc *k = ud;
    struct sbx_error e = SBX_ERROR_INIT;
    (void)w;
    if (!k->have_status) {
        sbx_error_set(&e, SBX_E_SANDBOX, 0,
                      "the connection to the Kubernetes API server was lost while '%s' ran%s%s",
                      k->name, rc < 0 ? ": " : "", rc < 0 && err ? err->msg : "");
        sbx__endpoint_scrub(k->t.api->ep, &e);
        sbx__rproc_fail(k->r, &e);
        return;
    }
    struct sbx_exit st = {0};
    if (sbx__ch_status_decode(k->version, (const uint8_t *)k->status.data, k->status.len, &st.code,
                              &e) < 0) {
        sbx__rproc_fail(k->r, &e);
        return;
    }
    if (sbx__rproc_timed_out(k->r)) {
        st.timed_out = 1;
        /* The preamble's shell reports a killed command as 128 + signal. */
        if (st.code > 128 && st.code < 128 + 65) {
            st.signal = st.code - 128;
            st.code = -1;
        }
    }
    sbx__rproc_exit(k->r, &st);
}

static void on_drained(struct sbx__lws *w, void *ud)
{
    struct kproc *k = ud;
    (void)w;
    sbx__rproc_input_ready(k->r);
}

static const struct sbx__lws_ops lws_ops = {
        .message = on_message, .end = on_end, .drained = on_drained};

static int setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct kproc *k = ud;
    struct sbx__wsconn *wc = k->wc;
    k->wc = NULL;
    int rc = sbx__lws_new(sbx__rproc_loop(r), wc, &lws_ops, k, &k->lws, err);
    if (rc < 0)
        return rc;
    if (k->pre.len)
        (void)sbx__rproc_output(r, 1, k->pre.data, k->pre.len);
    if (k->pre_err.len)
        (void)sbx__rproc_output(r, 2, k->pre_err.data, k->pre_err.len);
    return 0;
}

/* Read the preamble's verdict: "S<pid>\n", or one letter for a command that cannot start.
 * Output that came with it is kept in pre and pre_err; *ended when the command ended already
 * (its status arrived). */
static int read_verdict(struct kproc *k, char *mark, size_t *mark_len, int *ended,
                        struct sbx_error *err)
{
    int64_t deadline = sbx_deadline_after_ms(sbx__endpoint_timeout_ms(k->t.api->ep));
    int have = 0;
    *mark_len = 0;
    *ended = 0;
    while (!have) {
        struct sbx__ws_msg m;
        int rc = sbx__wsconn_read(k->wc, &m, deadline, err);
        if (rc < 0)
            return rc;
        if (m.opcode == SBX__WS_CLOSE) {
            *ended = 1;
            break;
        }
        struct sbx__ch_frame f;
        if ((rc = sbx__ch_decode(k->version, m.opcode, m.data, m.len, &k->scratch, &f, err)) < 0)
            return rc;
        if (f.channel == SBX__CH_ERROR) {
            k->have_status = 1;
            if ((rc = sbx_buf_add(&k->status, f.data, f.len, err)) < 0)
                return rc;
            continue;
        }
        if (f.channel == SBX__CH_STDERR) {
            if ((rc = sbx_buf_add(&k->pre_err, f.data, f.len, err)) < 0)
                return rc;
            continue;
        }
        if (f.channel != SBX__CH_STDOUT)
            continue;
        size_t i = 0;
        for (; i < f.len && !have; i++) {
            char c = (char)f.data[i];
            if (*mark_len == 0 && c != 'S') {
                mark[(*mark_len)++] = c;
                have = 1;
            } else if (c == '\n') {
                have = 1;
            } else if (c != '\r') {
                if (*mark_len >= MARK_MAX - 1)
                    return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled",
                                         k->name);
                mark[(*mark_len)++] = c;
            }
        }
        if (i < f.len && (rc = sbx_buf_add(&k->pre, f.data + i, f.len - i, err)) < 0)
            return rc;
    }
    mark[*mark_len] = '\0';
    return 0;
}

/* The error for a verdict other than "S<pid>". */
static int verdict_error(struct kproc *k, const char *mark, size_t mark_len, const char *cwd,
                         struct sbx_error *err)
{
    int code = -1;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (k->have_status)
        (void)sbx__ch_status_decode(k->version, (const uint8_t *)k->status.data, k->status.len,
                                    &code, &ignored);
    if (mark_len == 0) {
        const char *why = k->pre_err.len ? k->pre_err.data : k->pre.len ? k->pre.data : "";
        return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s': %.*s%s(exit status %d)", k->name,
                             (int)strcspn(why, "\r\n"), why, why[0] ? " " : "", code);
    }
    int start_rc = sbx__shellfs_start_error(mark[0], k->name, cwd, err);
    if (start_rc < 0)
        return start_rc;
    return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled", k->name);
}

/* The exec's command: the preamble with its arguments, then the command. */
static void wrapped(const struct sbx__kube_target *t, const struct sbx_exec_spec *spec,
                    const char *cwd, struct sbx_strv *argv)
{
    char rows[8] = "", cols[8] = "", n[16];
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    size_t nenv = 0;
    for (const char *const *e = spec->env; e && *e; e++)
        nenv++;
    if (tty) {
        snprintf(rows, sizeof(rows), "%u", spec->rows ? spec->rows : 24);
        snprintf(cols, sizeof(cols), "%u", spec->cols ? spec->cols : 80);
    }
    snprintf(n, sizeof(n), "%zu", nenv);
    sbx_strv_push(argv, "/bin/sh");
    sbx_strv_push(argv, "-c");
    sbx_strv_push(argv, WRAPPER);
    sbx_strv_push(argv, "sbx");
    sbx_strv_push(argv, t->root);
    sbx_strv_push_take(argv, cwd[0] ? sbx_xasprintf("%s/%s", t->root, cwd) : sbx_xstrdup(t->root));
    sbx_strv_push(argv, spec->flags & SBX_EXEC_KEEP_BACKGROUND ? "1" : "0");
    sbx_strv_push(argv, rows);
    sbx_strv_push(argv, cols);
    sbx_strv_push(argv, n);
    for (const char *const *e = spec->env; e && *e; e++)
        sbx_strv_push(argv, *e);
    if (spec->argv) {
        for (const char *const *a = spec->argv; *a; a++)
            sbx_strv_push(argv, *a);
    } else {
        sbx_strv_push(argv, "/bin/sh");
        sbx_strv_push(argv, "-c");
        sbx_strv_push(argv, spec->command);
    }
}

int sbx__kube_exec_start(const struct sbx__kube_target *t, const struct sbx_exec_spec *spec,
                         const char *cwd, struct sbx_proc **out, struct sbx_error *err)
{
    struct kproc *k = sbx_xcalloc(1, sizeof(*k));
    struct sbx_strv argv;
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    int want_in = tty || (spec->flags & SBX_EXEC_STDIN);
    int rc, ended = 0;
    sbx_strv_init(&argv);
    target_copy(&k->t, t);
    k->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    k->tty = tty;
    sbx_buf_init(&k->pre, SBX_BUF_NOLIMIT);
    sbx_buf_init(&k->pre_err, SBX_BUF_NOLIMIT);
    sbx_buf_init(&k->status, STATUS_MAX);
    sbx_buf_init(&k->scratch, MSG_MAX);
    if (spec->user) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "a kubernetes sandbox runs commands as its pod's user only, not as "
                           "'%s'",
                           spec->user);
        goto fail;
    }
    wrapped(t, spec, cwd, &argv);
    if ((rc = exec_open(t, (const char *const *)argv.v, want_in, tty, &k->wc, &k->version, err)) <
        0)
        goto fail;
    if (tty) {
        /* The size first: a runtime that cannot size an exec before it starts waits for it. */
        struct sbx_buf m;
        sbx_buf_init(&m, 64);
        rc = sbx__ch_resize_encode(spec->cols ? spec->cols : 80, spec->rows ? spec->rows : 24, &m,
                                   err);
        if (rc == 0)
            rc = send_channel(k->wc, k->version, SBX__CH_RESIZE, m.data, m.len, err);
        sbx_buf_release(&m);
        if (rc == 0)
            rc = sbx__wsconn_flush(k->wc, err) < 0 ? -SBX_E_HTTP : 0;
        if (rc < 0)
            goto fail;
    }
    char mark[MARK_MAX];
    size_t mark_len = 0;
    if ((rc = read_verdict(k, mark, &mark_len, &ended, err)) < 0)
        goto fail;
    if (mark_len == 0 || mark[0] != 'S') {
        rc = verdict_error(k, mark, mark_len, cwd, err);
        goto fail;
    }
    k->pid = (pid_t)strtol(mark + 1, NULL, 10);
    k->rows = spec->rows ? spec->rows : 24;
    k->cols = spec->cols ? spec->cols : 80;
    struct sbx__rproc_opts o = {.name = k->name,
                                .tty = tty,
                                .rows = spec->rows,
                                .cols = spec->cols,
                                .want_stdin = want_in && !tty,
                                .merge_stderr = !!(spec->flags & SBX_EXEC_MERGE_STDERR),
                                .timeout_ms = spec->timeout_ms,
                                .kill_grace_ms = spec->kill_grace_ms,
                                .pid = k->pid};
    struct sbx__loop *loop = NULL;
    if ((rc = sbx__loop_default(&loop, err)) < 0 ||
        (rc = sbx__rproc_new(loop, &o, &proc_ops, k, &k->r, err)) < 0)
        goto fail;
    struct sbx__rproc *r = k->r;
    rc = sbx__rproc_start(r, setup, err);
    if (rc < 0) {
        sbx_proc_free(sbx__rproc_proc(r));
        sbx_strv_release(&argv);
        return rc;
    }
    *out = sbx__rproc_proc(r);
    sbx_strv_release(&argv);
    return 0;
fail:
    sbx_strv_release(&argv);
    kproc_free(k);
    return rc;
}
