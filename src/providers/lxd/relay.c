/* A user's command in an LXD sandbox as a struct sbx_proc, relayed by the remote layer's event
 * loop (src/sandbox/wire/rproc.h): one loop thread per process serves every command. A small
 * fixed shell preamble runs first inside the instance (the same as the Docker provider's,
 * docker-provider.md): it enters the working directory (refusing one that resolves out of the
 * workspace), tells a missing program from a failing one, reports its process id (the process
 * group a timeout kills) and, unless the caller keeps background processes, ends the group when
 * the command ends. exec_start reads the preamble's verdict on the caller's thread, then hands
 * the exec's WebSockets to the loop: stdout and stderr (or the terminal's) into the proc, stdin
 * and its end out, the terminal's size on the control socket, the deadline's kills and the
 * exit status (the operation's) as asynchronous requests. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/lxd/exec.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/loop.h"
#include "sandbox/wire/rproc.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define MARK_MAX   32
#define OP_WAIT_S  60 /* how long one wait for the exit status may take, after the streams end */
#define CUT_WAIT_S 1  /* the same after a stream was cut */
#define END_KEY    8  /* random bytes (in hex) in a terminal's end marker */
#define END_MAX    (sizeof(END_OPEN) - 1 + 2 * END_KEY + sizeof(END_SHUT) - 1)
/* A terminal's end marker: an APC string (terminals ignore it), with the command's key. */
#define END_OPEN "\033_sbx-end "
#define END_SHUT "\033\\"

/* $1 workspace root, $2 working directory, $3 keep background processes (1/0), $4 $5 the
 * terminal's rows and columns, $6 the terminal's end key, then argv. The first bytes on stdout
 * are the verdict: "S<pid>\n" started, "N" not found, "X" not executable, "C" no such
 * directory, "P" a directory out of the workspace. The shell stays until the command ends,
 * whatever the timeout's SIGTERM does to it, so the exec's status is the command's.
 *
 * With a terminal and a key, the shell then writes the end marker and waits (10 s at most) for
 * sbx to answer a byte: LXD before 5.14 stops relaying a terminal the moment the process it
 * started ends, dropping output it had not read yet (canonical/lxd#11422), and a terminal's
 * stream has no end of its own to tell a cut one by. The answer comes once sbx read the marker,
 * so everything written before it arrived. Input the command left unread is dropped first, so
 * that only the answer ends the wait; the terminal stops echoing, so the answer is not seen. */
static const char WRAPPER[] =
        "root=$1 dir=$2 keep=$3 rows=$4 cols=$5 key=$6; shift 6\n"
        "[ -z \"$rows\" ] || stty rows \"$rows\" cols \"$cols\" 2>/dev/null\n"
        "cd -- \"$dir\" 2>/dev/null || { printf C; exit 125; }\n"
        "case \"$(pwd -P)/\" in \"$root\"/*) ;; *) printf P; exit 125;; esac\n"
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
        "if [ -n \"$key\" ]; then\n"
        "  stty -echo -icanon min 0 time 0 2>/dev/null && cat >/dev/null 2>&1\n"
        "  stty min 0 time 100 2>/dev/null\n"
        "  printf '\\033_sbx-end %s\\033\\\\' \"$key\"\n"
        "  dd bs=1 count=1 >/dev/null 2>&1\n"
        "fi\n"
        "exit \"$r\"\n";

/* Signal a process group, or the process alone when it leads none. */
static const char KILL[] = "kill -s \"$1\" -- \"-$2\" 2>/dev/null || kill -s \"$1\" \"$2\"";

struct lx_cmd;
struct lx_slot {
    struct lx_cmd *c;
    int i; /* SBX__LXD_IN ... SBX__LXD_CTL */
};

/* One command, from exec_start to sbx_proc_free. */
struct lx_cmd {
    struct sbx__lxd_server sv;
    char *inst, *id, *name;
    struct sbx__lxd_exec x; /* the operation; its connections until the loop takes them */
    struct sbx__loop *l;
    struct sbx__rproc *r;
    struct lx_slot slot[SBX__LXD_NSTREAMS];
    struct sbx__lws *ws[SBX__LXD_NSTREAMS];
    int open[SBX__LXD_NSTREAMS];     /* an output stream that has not ended */
    int cut[SBX__LXD_NSTREAMS];      /* an output stream that ended without its end message */
    uint64_t got[SBX__LXD_NSTREAMS]; /* bytes of output received on each stream */
    int tty, want_in, paused, asked;
    pid_t pid;
    char mark[MARK_MAX];
    size_t mark_len;
    char key[2 * END_KEY + 1];   /* a terminal's end key ("": none) */
    char end[END_MAX + 1];       /* its end marker */
    size_t end_len, end_held;    /* its length; how much of it the output ends with, held back */
    size_t end_fail[END_MAX];    /* where a partial match goes on a mismatch (KMP) */
    struct sbx_buf pre;          /* output read with the verdict, given first */
    char why[SBX_ERROR_MSG_MAX]; /* how a stream was cut */
    struct sbx__xfer *status_x, *kill_x[2];
};

/* ---------------------------------------------------------------------------------------------
 * On the loop */

/* Output to the caller: 0 when it is behind. */
static int output(struct lx_cmd *c, int i, const void *p, size_t n)
{
    if (!n)
        return 1;
    c->got[i] += n;
    return sbx__rproc_output(c->r, i == SBX__LXD_ERR ? 2 : 1, p, n);
}

static void cmd_fail(struct lx_cmd *c, const char *why)
{
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_error_set(&err, SBX_E_SANDBOX, 0, "the exit status of '%s' in sandbox '%s' is unknown: %s",
                  c->name, c->id, why);
    sbx__rproc_fail(c->r, &err);
}

/* Without a terminal LXD ends stdout and stderr with an empty text message. One that stopped
 * without it while LXD still tells the command's exit status lost its tail on the server's side:
 * LXD before 5.14 can close an exec's output streams before it sent all they held when their
 * reader falls behind the command (docs/internals/lxd-provider.md). The output is incomplete,
 * and the caller is told so instead of getting a clean exit with a short stream. */
static int cut_output(const struct lx_cmd *c, const struct sbx_exit *st, struct sbx_error *err)
{
    for (int i = SBX__LXD_OUT; i <= SBX__LXD_ERR; i++) {
        if (c->tty || !c->cut[i])
            continue;
        return sbx_error_set(
                err, SBX_E_IO, 0,
                "the output of '%s' in sandbox '%s' is incomplete: LXD closed its %s after %llu "
                "bytes without the stream's end, yet reports it exited (status %d); LXD before "
                "5.14 drops the tail of a command's output when its reader falls behind "
                "(canonical/lxd#11422)",
                c->name, c->id, i == SBX__LXD_OUT ? "stdout" : "stderr",
                (unsigned long long)c->got[i], st->signal ? 128 + st->signal : st->code);
    }
    return 0;
}

static void on_status(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                      const struct sbx_error *err, void *ud)
{
    struct lx_cmd *c = ud;
    struct sbx_error e = SBX_ERROR_INIT;
    json_t *md = NULL;
    (void)x;
    c->status_x = NULL;
    if (rc < 0) {
        cmd_fail(c, c->why[0] ? c->why : err->msg);
        return;
    }
    rc = sbx__lxd_envelope(&c->sv, resp->status, &resp->body, &md, NULL, &e);
    rc = sbx__lxd_op_result(&c->sv, c->x.op, rc, md, &e);
    json_t *ret = json_object_get(json_object_get(md, "metadata"), "return");
    /* LXD fails the operation of a command that exits 126 or 127, with the status in its
     * metadata all the same: the status is what counts. */
    if ((rc == 0 || rc == -SBX_E_SANDBOX) && json_is_integer(ret)) {
        struct sbx_exit st = {.code = (int)json_integer_value(ret)};
        /* The preamble shell reports a command killed by the deadline as 128 + signal. */
        if (sbx__rproc_timed_out(c->r) && st.code > 128 && st.code < 128 + 65) {
            st.signal = st.code - 128;
            st.code = -1;
        }
        struct sbx_error cut = SBX_ERROR_INIT;
        if (cut_output(c, &st, &cut) < 0)
            sbx__rproc_fail(c->r, &cut);
        else
            sbx__rproc_exit(c->r, &st);
    } else if (c->why[0] && rc == -SBX_E_TIMEOUT) {
        cmd_fail(c, c->why); /* still running as far as the server knows: the stream was cut */
    } else {
        cmd_fail(c, rc < 0 ? e.msg : c->why[0] ? c->why : "LXD reported no exit status");
    }
    json_decref(md);
}

static const struct sbx__xfer_ops status_ops = {NULL, on_status};

/* Every output stream ended: the status is the operation's. */
static void ask_status(struct lx_cmd *c)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (c->asked)
        return;
    c->asked = 1;
    if (c->tty && c->ws[SBX__LXD_IN]) {
        /* With a terminal LXD ends the exec only once its input ends too. */
        (void)sbx__lws_send(c->ws[SBX__LXD_IN], SBX__WS_TEXT, "", 0, &err);
        sbx__lws_close(c->ws[SBX__LXD_IN], SBX__WS_CLOSE_NORMAL, NULL);
    }
    /* A stream that was cut (its member gone) gets the server a moment to still tell the
     * status, not the whole wait: what it says about a dead member takes LXD 10 s. */
    int wait_s = c->why[0] ? CUT_WAIT_S : OP_WAIT_S;
    char *proj = sbx__lxd_escape(c->sv.project, 0);
    char *path =
            sbx_xasprintf("/1.0/operations/%s/wait?timeout=%d&project=%s", c->x.op, wait_s, proj);
    struct sbx__http_req req = {
            .path = path, .timeout_ms = wait_s * 1000 + (c->why[0] ? 500 : 10000), .no_retry = 1};
    if (sbx__xfer_start(c->l, c->sv.ep, &req, &status_ops, c, &c->status_x, &err) < 0)
        cmd_fail(c, err.msg);
    free(path);
    free(proj);
}

static void stream_ended(struct lx_cmd *c, int i)
{
    /* What was held back as the start of an end marker was output after all. */
    if (c->tty && c->end_held)
        (void)output(c, SBX__LXD_IN, c->end, c->end_held);
    c->end_held = 0;
    c->open[i] = 0;
    if (!c->open[SBX__LXD_IN] && !c->open[SBX__LXD_OUT] && !c->open[SBX__LXD_ERR])
        ask_status(c);
}

/* The terminal's output on its way to the caller, without the preamble's end marker: bytes that
 * may begin the marker are held back until they turn out not to; the whole marker is dropped
 * and answered, which lets the preamble end (see WRAPPER). 0 when the caller is behind. */
static int tty_output(struct lx_cmd *c, const uint8_t *p, size_t n)
{
    struct sbx_error ignored = SBX_ERROR_INIT;
    int more = 1;
    size_t i = 0;
    while (i < n && c->end_len) {
        if (!c->end_held) {
            const uint8_t *e = memchr(p + i, c->end[0], n - i);
            size_t k = e ? (size_t)(e - (p + i)) : n - i;
            more &= output(c, SBX__LXD_IN, p + i, k);
            i += k;
            if (!e)
                return more;
        }
        uint8_t b = p[i++];
        while (c->end_held && (char)b != c->end[c->end_held]) {
            size_t f = c->end_fail[c->end_held - 1];
            more &= output(c, SBX__LXD_IN, c->end, c->end_held - f);
            c->end_held = f;
        }
        if ((char)b == c->end[c->end_held]) {
            c->end_held++;
        } else {
            more &= output(c, SBX__LXD_IN, &b, 1);
        }
        if (c->end_held == c->end_len) {
            c->end_len = c->end_held = 0; /* seen: the rest passes as it is */
            (void)sbx__lws_send(c->ws[SBX__LXD_IN], SBX__WS_BINARY, "\n", 1, &ignored);
        }
    }
    return more & output(c, SBX__LXD_IN, p + i, n - i);
}

/* The end marker and its KMP table, for a command on a terminal whose preamble ends it. */
static int end_marker(struct lx_cmd *c, struct sbx_error *err)
{
    int rc = sbx_random_hex(c->key, END_KEY, err);
    if (rc < 0)
        return rc;
    c->end_len = (size_t)snprintf(c->end, sizeof(c->end), END_OPEN "%s" END_SHUT, c->key);
    for (size_t q = 1, k = 0; q < c->end_len; q++) {
        while (k && c->end[q] != c->end[k])
            k = c->end_fail[k - 1];
        k += c->end[q] == c->end[k];
        c->end_fail[q] = k;
    }
    return 0;
}

static int on_message(struct sbx__lws *w, const struct sbx__ws_msg *m, void *ud,
                      struct sbx_error *err)
{
    struct lx_slot *s = ud;
    struct lx_cmd *c = s->c;
    (void)w;
    (void)err;
    if (!c->open[s->i])
        return 0; /* the control socket, stdin: nothing sbx needs */
    if (m->opcode == SBX__WS_CLOSE || (m->opcode == SBX__WS_TEXT && m->len == 0)) {
        stream_ended(c, s->i);
        return 0;
    }
    if (c->tty ? tty_output(c, m->data, m->len) : output(c, s->i, m->data, m->len))
        return 0;
    /* The caller is behind: every output stream waits (resume follows). */
    c->paused = 1;
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++)
        if (c->ws[i] && c->open[i] && c->ws[i] != w)
            sbx__lws_pause(c->ws[i]);
    return SBX__PAUSE;
}

static void on_end(struct sbx__lws *w, int rc, const struct sbx_error *err, void *ud)
{
    struct lx_slot *s = ud;
    struct lx_cmd *c = s->c;
    (void)w;
    if (!c->open[s->i])
        return;
    /* Cut without the end of the stream: the server (or its member) went away. Its own
     * account of the command, if it can still give one, comes with the status. */
    c->cut[s->i] = 1;
    if (!c->why[0])
        snprintf(c->why, sizeof(c->why), "%.900s (the member running the instance may be down)",
                 rc < 0 && err && err->msg[0] ? err->msg : "the stream ended without its end");
    stream_ended(c, s->i);
}

static void on_drained(struct sbx__lws *w, void *ud)
{
    struct lx_slot *s = ud;
    (void)w;
    if (s->i == SBX__LXD_IN)
        sbx__rproc_input_ready(s->c->r);
}

static const struct sbx__lws_ops lws_ops = {on_message, on_end, on_drained};

static size_t op_input(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud)
{
    struct lx_cmd *c = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)r;
    if (!c->ws[SBX__LXD_IN])
        return n;
    if (n == 0) {
        /* The caller closed stdin: so does the command's. */
        (void)sbx__lws_send(c->ws[SBX__LXD_IN], SBX__WS_TEXT, "", 0, &err);
        return 0;
    }
    int rc = sbx__lws_send(c->ws[SBX__LXD_IN], SBX__WS_BINARY, p, n, &err);
    if (rc == -SBX_E_TOOBIG)
        return 0; /* offered again once the queue drained */
    return n;     /* taken, or the stream is gone: the rest is dropped */
}

static void op_resize(struct sbx__rproc *r, unsigned rows, unsigned cols, void *ud)
{
    struct lx_cmd *c = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)r;
    char msg[160];
    int n = snprintf(
            msg, sizeof(msg),
            "{\"command\":\"window-resize\",\"args\":{\"width\":\"%u\",\"height\":\"%u\"}}", cols,
            rows);
    if (c->ws[SBX__LXD_CTL])
        (void)sbx__lws_send(c->ws[SBX__LXD_CTL], SBX__WS_TEXT, msg, (size_t)n, &err);
}

static void on_killed(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                      const struct sbx_error *err, void *ud)
{
    struct lx_cmd *c = ud;
    (void)rc;
    (void)resp;
    (void)err;
    for (int i = 0; i < 2; i++)
        if (c->kill_x[i] == x)
            c->kill_x[i] = NULL;
}

static const struct sbx__xfer_ops kill_ops = {NULL, on_killed};

/* The body of an exec as root that signals the command's process group. */
static json_t *kill_body(const struct lx_cmd *c, const char *sig)
{
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)c->pid);
    return json_pack("{s:[ssssss],s:b,s:b,s:b,s:i,s:i}", "command", "/bin/sh", "-c", KILL, "sh",
                     sig, pid, "wait-for-websocket", 0, "record-output", 0, "interactive", 0,
                     "user", 0, "group", 0);
}

static void op_signal(struct sbx__rproc *r, int sig, void *ud)
{
    struct lx_cmd *c = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    int slot = sig == SIGKILL;
    (void)r;
    if (c->pid <= 1 || c->kill_x[slot])
        return;
    json_t *body = kill_body(c, slot ? "KILL" : "TERM");
    char *proj = sbx__lxd_escape(c->sv.project, 0);
    char *inst = sbx__lxd_inst_path(c->inst, "/exec");
    char *path = sbx_xasprintf("%s?project=%s", inst, proj);
    struct sbx__http_req req = {.method = "POST", .path = path, .json = body, .no_retry = 1};
    (void)sbx__xfer_start(c->l, c->sv.ep, &req, &kill_ops, c, &c->kill_x[slot], &err);
    free(path);
    free(inst);
    free(proj);
    json_decref(body);
}

static void op_resume(struct sbx__rproc *r, void *ud)
{
    struct lx_cmd *c = ud;
    (void)r;
    if (!c->paused)
        return;
    c->paused = 0;
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++)
        if (c->ws[i] && c->open[i])
            sbx__lws_resume(c->ws[i]);
}

static void op_stop(struct sbx__rproc *r, void *ud)
{
    struct lx_cmd *c = ud;
    (void)r;
    /* Closing the control connection ends what is left of the command (LXD kills it). */
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++) {
        sbx__lws_free(c->ws[i]);
        c->ws[i] = NULL;
    }
    sbx__xfer_cancel(c->status_x);
    c->status_x = NULL;
    for (int i = 0; i < 2; i++) {
        sbx__xfer_cancel(c->kill_x[i]);
        c->kill_x[i] = NULL;
    }
}

/* ---------------------------------------------------------------------------------------------
 * On the caller's thread */

static void op_kill(struct sbx__rproc *r, void *ud)
{
    struct lx_cmd *c = ud;
    struct sbx_error ignored = SBX_ERROR_INIT;
    char pid[32];
    (void)r;
    if (c->pid <= 1)
        return;
    snprintf(pid, sizeof(pid), "%d", (int)c->pid);
    const char *argv[] = {"/bin/sh", "-c", KILL, "sh", "KILL", pid, NULL};
    (void)sbx__lxd_exec_detached(&c->sv, c->inst, c->id, argv, &ignored);
}

static void cmd_free(struct lx_cmd *c)
{
    if (!c)
        return;
    sbx__lxd_exec_release(&c->x);
    sbx__lxd_server_release(&c->sv);
    sbx_buf_release(&c->pre);
    free(c->inst);
    free(c->id);
    free(c->name);
    free(c);
}

static void op_release(void *ud)
{
    cmd_free(ud);
}

static const struct sbx__rproc_ops rproc_ops = {
        .input = op_input,
        .resize = op_resize,
        .signal = op_signal,
        .resume = op_resume,
        .stop = op_stop,
        .kill = op_kill,
        .release = op_release,
};

/* On the loop: the connections become loop WebSockets; what came with the verdict goes first. */
static int setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct lx_cmd *c = ud;
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++) {
        if (!c->x.conn[i])
            continue;
        c->slot[i] = (struct lx_slot){c, i};
        int rc = sbx__lws_new(c->l, c->x.conn[i], &lws_ops, &c->slot[i], &c->ws[i], err);
        c->x.conn[i] = NULL; /* taken, also on failure */
        if (rc < 0) {
            op_stop(r, c);
            return rc;
        }
    }
    if (c->tty)
        (void)tty_output(c, (const uint8_t *)c->pre.data, c->pre.len);
    else
        (void)output(c, SBX__LXD_OUT, c->pre.data, c->pre.len);
    if (!c->tty && !c->want_in)
        (void)sbx__lws_send(c->ws[SBX__LXD_IN], SBX__WS_TEXT, "", 0, err);
    /* Output streams that ended while the verdict was read. */
    if (!c->open[SBX__LXD_IN] && !c->open[SBX__LXD_OUT] && !c->open[SBX__LXD_ERR])
        ask_status(c);
    return 0;
}

/* The preamble's verdict, read from the first bytes of stdout (the terminal's with one): what
 * follows it in the same message is kept for the caller. Output that ends before a verdict
 * leaves it empty. */
static int read_verdict(struct lx_cmd *c, struct sbx_error *err)
{
    int i = c->tty ? SBX__LXD_IN : SBX__LXD_OUT;
    int64_t deadline = sbx_deadline_after_ms(c->sv.timeout_ms);
    for (;;) {
        struct sbx__ws_msg m;
        int rc = sbx__wsconn_read(c->x.conn[i], &m, deadline, err);
        if (rc < 0)
            return rc;
        if (m.opcode == SBX__WS_CLOSE || (m.opcode == SBX__WS_TEXT && m.len == 0)) {
            c->open[i] = 0;
            return 0;
        }
        size_t k = 0;
        int have = 0;
        for (; k < m.len && !have; k++) {
            if (c->mark_len == 0 && m.data[k] != 'S')
                c->mark[c->mark_len++] = (char)m.data[k], have = 1;
            else if (m.data[k] == '\n')
                have = 1;
            else if (m.data[k] != '\r' && c->mark_len < MARK_MAX - 1)
                c->mark[c->mark_len++] = (char)m.data[k];
        }
        if (k < m.len && sbx_buf_add(&c->pre, m.data + k, m.len - k, err) < 0)
            return -SBX_E_TOOBIG;
        if (have || c->mark_len >= MARK_MAX - 1)
            return 0;
    }
}

/* The exec's command: (setsid, so that the preamble leads a process group the timeout can
 * kill) the preamble with its arguments, then the command. */
static json_t *wrapped_cmd(const struct sbx__lxd_session *s, const struct lx_cmd *c,
                           const struct sbx_exec_spec *spec, const char *cwd, unsigned short rows,
                           unsigned short cols)
{
    char *dir = cwd[0] ? sbx_xasprintf("%s/%s", s->base.root, cwd) : sbx_xstrdup(s->base.root);
    char r[8] = "", k[8] = "";
    json_t *cmd = json_array();
    if (!c->tty && s->setsid)
        sbx_json_append(cmd, sbx_json_str("setsid"));
    int keep = !!(spec->flags & SBX_EXEC_KEEP_BACKGROUND);
    const char *head[] = {"/bin/sh", "-c", WRAPPER, "sbx", s->base.root, dir, keep ? "1" : "0"};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        sbx_json_append(cmd, sbx_json_str(head[i]));
    free(dir);
    if (c->tty) {
        snprintf(r, sizeof(r), "%u", rows);
        snprintf(k, sizeof(k), "%u", cols);
    }
    sbx_json_append(cmd, sbx_json_str(r));
    sbx_json_append(cmd, sbx_json_str(k));
    sbx_json_append(cmd, sbx_json_str(c->key));
    if (spec->argv) {
        for (const char *const *a = spec->argv; *a; a++)
            sbx_json_append(cmd, sbx_json_str(*a));
    } else {
        sbx_json_append(cmd, sbx_json_str("/bin/sh"));
        sbx_json_append(cmd, sbx_json_str("-c"));
        sbx_json_append(cmd, sbx_json_str(spec->command));
    }
    return cmd;
}

/* The error for a verdict other than "S<pid>": the preamble's letter, or LXD's account of an
 * exec that ended without one (no /bin/sh in the image, an instance that stopped). */
static int verdict_error(struct lx_cmd *c, const char *cwd, struct sbx_error *err)
{
    const char *mark = c->mark;
    if (c->mark_len == 0 || (mark[0] != 'S' && c->mark_len != 1)) {
        int code = 0;
        struct sbx_error e = SBX_ERROR_INIT;
        int rc = sbx__lxd_exec_status(&c->sv, c->x.op, &code, &e);
        if (rc < 0)
            return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s' in sandbox '%s': %s", c->name,
                                 c->id, e.msg);
        return sbx_error_set(err, SBX_E_EXEC, 0,
                             "cannot run '%s' in sandbox '%s': it ended at once (exit status %d)",
                             c->name, c->id, code);
    }
    if (mark[0] == 'N')
        return sbx_error_set(err, SBX_E_EXEC, ENOENT, "command '%s' not found", c->name);
    if (mark[0] == 'X')
        return sbx_error_set(err, SBX_E_EXEC, EACCES, "cannot run '%s': %s", c->name,
                             strerror(EACCES));
    if (mark[0] == 'C')
        return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                             "working directory '%s' is not a directory of the sandbox",
                             cwd[0] ? cwd : ".");
    return sbx_error_set(err, SBX_E_PERM, 0, "working directory '%s' leads out of the workspace",
                         cwd);
}

static int pick_user(struct sbx__lxd_session *s, const char *want,
                     const struct sbx__lxd_account **out, struct sbx_error *err)
{
    if (!want) {
        *out = &s->owner;
        return 0;
    }
    for (size_t i = 0; i < s->n_users; i++)
        if (strcmp(s->users[i].name, want) == 0) {
            *out = &s->users[i];
            return 0;
        }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no user '%s' in the sandbox's manifest", want);
}

/* POST the exec as the account, with its HOME and USER under what the caller sets, and read
 * the preamble's verdict. */
static int begin(struct sbx__lxd_session *s, struct lx_cmd *c, const struct sbx_exec_spec *spec,
                 const char *cwd, struct sbx_error *err)
{
    const struct sbx__lxd_account *who = NULL;
    unsigned short rows = spec->rows ? spec->rows : 24, cols = spec->cols ? spec->cols : 80;
    int rc = pick_user(s, spec->user, &who, err);
    if (rc < 0)
        return rc;
    json_t *cmd = wrapped_cmd(s, c, spec, cwd, rows, cols);
    struct sbx_strv env;
    sbx_strv_init(&env);
    sbx_strv_push_take(&env, sbx_xasprintf("USER=%s", who->name));
    if (who->home)
        sbx_strv_push_take(&env, sbx_xasprintf("HOME=%s", who->home));
    for (const char *const *e = spec->env; e && *e; e++)
        sbx_strv_push(&env, *e);
    struct sbx__lxd_exec_args a = {.argv = cmd,
                                   .env = (const char *const *)env.v,
                                   .uid = who->uid,
                                   .gid = who->gid,
                                   .tty = c->tty,
                                   .rows = rows,
                                   .cols = cols,
                                   .streams = 1};
    rc = sbx__lxd_exec_begin(&c->sv, c->inst, c->id, &a, &c->x, err);
    sbx_strv_release(&env);
    json_decref(cmd);
    if (rc == 0)
        rc = read_verdict(c, err);
    if (rc == 0 && (c->mark[0] != 'S' || c->mark_len < 2))
        rc = verdict_error(c, cwd, err);
    return rc;
}

int sbx__lxd_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                        struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    struct lx_cmd *c = sbx_xcalloc(1, sizeof(*c));
    struct sbx__rproc *r = NULL;
    sbx__lxd_exec_init(&c->x);
    sbx_buf_init(&c->pre, SBX_BUF_NOLIMIT);
    sbx__lxd_server_copy(&c->sv, &s->sv);
    c->inst = sbx_xstrdup(s->name);
    c->id = sbx_xstrdup(s->base.id);
    c->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "sh");
    c->tty = !!(spec->flags & SBX_EXEC_TTY);
    c->want_in = c->tty || (spec->flags & SBX_EXEC_STDIN);
    c->open[SBX__LXD_IN] = c->tty;
    c->open[SBX__LXD_OUT] = c->open[SBX__LXD_ERR] = !c->tty;
    int rc = sbx__loop_default(&c->l, err);
    if (rc == 0 && c->tty && !(spec->flags & SBX_EXEC_KEEP_BACKGROUND))
        rc = end_marker(c, err);
    if (rc == 0)
        rc = begin(s, c, spec, cwd, err);
    if (rc < 0) {
        cmd_free(c);
        return rc;
    }
    c->pid = (pid_t)strtol(c->mark + 1, NULL, 10);
    struct sbx__rproc_opts o = {.name = c->name,
                                .tty = c->tty,
                                .rows = spec->rows,
                                .cols = spec->cols,
                                .want_stdin = !c->tty && c->want_in,
                                .merge_stderr = !!(spec->flags & SBX_EXEC_MERGE_STDERR),
                                .timeout_ms = spec->timeout_ms,
                                .kill_grace_ms = spec->kill_grace_ms,
                                .pid = c->pid};
    if ((rc = sbx__rproc_new(c->l, &o, &rproc_ops, c, &r, err)) < 0) {
        cmd_free(c);
        return rc;
    }
    c->r = r;
    /* From here the proc owns c (op_release frees it). */
    rc = sbx__rproc_start(r, setup, err);
    if (rc < 0) {
        sbx_proc_free(sbx__rproc_proc(r));
        return rc;
    }
    *out = sbx__rproc_proc(r);
    return 0;
}
