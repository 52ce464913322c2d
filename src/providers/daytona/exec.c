/* Commands in a Daytona sandbox: each is an asynchronous command of a toolbox session of its
 * own (POST /process/session, then .../exec with runAsync), whose output streams over a
 * WebSocket (.../command/{cmdId}/logs?follow=true: binary messages in which three 0x01 bytes
 * start stdout and three 0x02 bytes start stderr) and whose exit code is read from the command
 * (GET .../command/{cmdId}) once the stream has ended.
 *
 * The toolbox takes a command line, not an argv: the line is a fixed preamble (OUTER, INNER)
 * with every argument single-quoted (sbx__dtn_quote), never a line built from input. The
 * preamble enters the working directory (refusing one that resolves out of the workspace),
 * exports the command's environment, tells a missing program from a failing one, reports its
 * pid and process group, and ends its group when the command ends unless background processes
 * are kept. It runs through `setsid -w` where the sandbox has it, so a timeout's signals reach
 * the command's own group (by POST /process/execute of a fixed kill line). Stdin: the toolbox
 * has no way to close a command's input, so sbx sends stdin as base64 lines and a "." line for
 * its end, and the preamble decodes them into a pipe the command reads.
 *
 * A command with a terminal is a PTY session of its own instead (process/pty/create-connect, a
 * WebSocket of raw terminal bytes and JSON control messages: connected, exited with the exit
 * code): the PTY runs a shell, into which the preamble's line is typed with `exec`; what the
 * terminal shows before the preamble's mark (0x1e) is the echo of that line and is dropped.
 *
 * The stream, the exit code request, stdin and signals are relayed by the remote layer's event
 * loop (wire/rproc.h); the requests that start a command run on the caller's thread. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/daytona/daytona.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/conn.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/rproc.h"
#include "sbx/b64.h"
#include "sbx/json.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define MARK_MAX     48
#define MSG_MAX      ((size_t)4 << 20)
#define INPUT_CHUNK  ((size_t)48 << 10)
#define EXIT_POLLS   100
#define EXIT_POLL_MS 100
#define SEND_HIGH    ((size_t)1 << 20)
#define PRE_MAX      ((size_t)1 << 20) /* output that came with the start, kept until relayed */

static const char INNER[] =
        "root=$1 dir=$2 keep=$3 in=$4 n=$5; shift 5\n"
        "while [ \"$n\" -gt 0 ]; do export \"$1\" 2>/dev/null || { printf '\\036E'; exit 125; }; "
        "shift; n=$((n-1)); done\n"
        "rootr=$(cd -P -- \"$root\" 2>/dev/null && pwd -P) || { printf '\\036C'; exit 125; }\n"
        "cd -- \"$dir\" 2>/dev/null || { printf '\\036C'; exit 125; }\n"
        "case \"$(pwd -P)/\" in \"$rootr\"/*) ;; *) printf '\\036P'; exit 125;; esac\n"
        "case $1 in\n"
        "*/*) if [ ! -e \"$1\" ]; then printf '\\036N'; exit 127; fi\n"
        "     if [ -d \"$1\" ] || [ ! -x \"$1\" ]; then printf '\\036X'; exit 126; fi;;\n"
        "*) if ! command -v \"$1\" >/dev/null 2>&1; then printf '\\036N'; exit 127; fi;;\n"
        "esac\n"
        "f=/dev/null\n"
        "if [ \"$in\" = 1 ]; then\n"
        "  f=$(mktemp -u) && mkfifo -m 600 \"$f\" || { printf '\\036F'; exit 125; }\n"
        "  exec 3<&0\n"
        "  ( while IFS= read -r l; do [ \"$l\" = . ] && break; "
        "printf %s \"$l\" | base64 -d || break; done ) <&3 >\"$f\" &\n"
        "  exec 3<&-\n"
        "fi\n"
        "pg=0; read -r _ _ _ _ pg _ < /proc/$$/stat 2>/dev/null\n"
        "printf '\\036S%d %d\\n' \"$$\" \"$pg\"\n"
        "trap : TERM\n"
        "if [ \"$in\" = 2 ]; then \"$@\"; else \"$@\" <\"$f\"; fi\n"
        "r=$?\n"
        "trap '' TERM\n"
        "[ \"$f\" = /dev/null ] || rm -f -- \"$f\"\n"
        "[ \"$keep\" = 1 ] || [ \"$pg\" != \"$$\" ] || kill -TERM 0 2>/dev/null\n"
        "exit \"$r\"\n";

static const char OUTER[] = "w=$1; shift\n"
                            "if command -v setsid >/dev/null 2>&1; then\n"
                            "  exec setsid -w /bin/sh -c \"$w\" sbx \"$@\"\n"
                            "fi\n"
                            "exec /bin/sh -c \"$w\" sbx \"$@\"\n";

struct verdict {
    char mark[MARK_MAX];
    size_t len;
    int have, ended;
};

struct dproc {
    struct verdict *verdict;  /* while the start is read */
    struct sbx__dtn_box *box; /* borrowed for the requests of exec_start only */
    struct sbx__endpoint *ep; /* the toolbox (a reference) */
    struct sbx__dtn_conf *conf;
    char *name, *sid, *cid, *org_hdr;
    struct sbx__wsconn *wc; /* until the loop takes it */
    struct sbx__lws *lws;
    struct sbx__rproc *r;
    struct sbx__xfer *in_x, *exit_x;
    struct sbx__timer *timer;
    struct sbx__dtn_demux dm;
    pid_t pid, pgid;
    int eof_pending, eof_sent, polls;
    int tty, armed;           /* a PTY session; the verdict's 0x1e was seen */
    int have_exit, exit_code; /* a PTY's exit, from its control message */
    unsigned rows, cols;      /* the size the PTY was last given */
    struct sbx__xfer *resize_x;
    struct sbx_buf pre, pre_err;
};

static void dproc_free(void *ud)
{
    struct dproc *d = ud;
    if (d->sid && !d->tty) {
        /* The session goes with the command (a best effort: it holds nothing else). */
        const char *hdr[2] = {d->org_hdr, NULL};
        char *path = sbx_xasprintf("/process/session/%s", d->sid);
        struct sbx__http_req req = {.method = "DELETE", .path = path, .headers = hdr};
        struct sbx__http_resp resp;
        struct sbx_error ignored = SBX_ERROR_INIT;
        sbx__http_resp_init(&resp);
        if (d->ep)
            (void)sbx__http_call(d->ep, &req, &resp, &ignored);
        sbx__http_resp_release(&resp);
        free(path);
    }
    sbx__wsconn_free(d->wc);
    sbx__endpoint_free(d->ep);
    if (d->conf)
        sbx__dtn_conf_unref(d->conf);
    sbx_buf_release(&d->pre);
    sbx_buf_release(&d->pre_err);
    free(d->name);
    free(d->sid);
    free(d->cid);
    free(d->org_hdr);
    free(d);
}

/* ---------------------------------------------------------------------------------------------
 * On the loop */

static void exit_poll(struct sbx__timer *t, void *ud);

/* The command's end with exit code c. */
static void finish(struct dproc *d, int c)
{
    struct sbx_exit st = {.code = c};
    if (sbx__rproc_timed_out(d->r)) {
        st.timed_out = 1;
        /* The preamble's shell reports a killed command as 128 + signal. */
        if (st.code > 128 && st.code < 128 + 65) {
            st.signal = st.code - 128;
            st.code = -1;
        }
    }
    sbx__rproc_exit(d->r, &st);
}

/* A PTY's control message ({"type": "control", "status": "connected" | "exited" | "error"}):
 * 1 when m was one (handled), 0 when it is output, -code for the error it reports. */
static int pty_control(struct dproc *d, const struct sbx__ws_msg *m, struct sbx_error *err)
{
    if (m->opcode != SBX__WS_TEXT || m->len == 0 || m->data[0] != '{')
        return 0;
    json_t *o = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx_json_parse((const char *)m->data, m->len, NULL, &o, &ignored) < 0)
        return 0;
    const char *type = json_string_value(json_object_get(o, "type"));
    const char *status = json_string_value(json_object_get(o, "status"));
    int rc = 0;
    if (type && strcmp(type, "control") == 0 && status) {
        rc = 1;
        if (strcmp(status, "exited") == 0) {
            d->have_exit = 1;
            d->exit_code = (int)json_integer_value(json_object_get(o, "exitCode"));
        } else if (strcmp(status, "error") == 0) {
            const char *why = json_string_value(json_object_get(o, "error"));
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                               "the Daytona toolbox refused a terminal for '%s': %.200s", d->name,
                               why ? why : "no reason given");
        }
    }
    json_decref(o);
    return rc;
}

static void exit_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                      const struct sbx_error *err, void *ud)
{
    struct dproc *d = ud;
    json_t *ans = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    (void)x;
    d->exit_x = NULL;
    if (rc == 0 && resp->status >= 400)
        rc = sbx__http_status_error(d->ep, resp->status, resp->body.data, resp->body.len,
                                    "GET the command", &e);
    else if (rc < 0 && err)
        e = *err;
    if (rc == 0)
        rc = sbx_json_parse(resp->body.data, resp->body.len, NULL, &ans, &e);
    const json_t *code = json_object_get(ans, "exitCode");
    if (rc == 0 && !json_is_integer(code) && ++d->polls < EXIT_POLLS) {
        json_decref(ans);
        sbx__timer_after(d->timer, EXIT_POLL_MS);
        return;
    }
    if (rc == 0 && !json_is_integer(code))
        rc = sbx_error_set(&e, SBX_E_SANDBOX, 0,
                           "the Daytona toolbox never gave the exit code of '%s'", d->name);
    if (rc < 0) {
        json_decref(ans);
        sbx__rproc_fail(d->r, &e);
        return;
    }
    int c = (int)json_integer_value(code);
    json_decref(ans);
    finish(d, c);
}

static void exit_poll(struct sbx__timer *t, void *ud)
{
    struct dproc *d = ud;
    static const struct sbx__xfer_ops ops = {.done = exit_done};
    const char *hdr[2] = {d->org_hdr, NULL};
    char *path = sbx_xasprintf("/process/session/%s/command/%s", d->sid, d->cid);
    struct sbx__http_req req = {.method = "GET", .path = path, .headers = hdr};
    struct sbx_error e = SBX_ERROR_INIT;
    (void)t;
    int rc = sbx__xfer_start(sbx__rproc_loop(d->r), d->ep, &req, &ops, d, &d->exit_x, &e);
    free(path);
    if (rc < 0)
        sbx__rproc_fail(d->r, &e);
}

static int out_piece(void *ud, int stream, const uint8_t *p, size_t n, struct sbx_error *err)
{
    struct dproc *d = ud;
    (void)err;
    return sbx__rproc_output(d->r, stream, p, n) ? 0 : SBX__PAUSE;
}

static int on_message(struct sbx__lws *w, const struct sbx__ws_msg *m, void *ud,
                      struct sbx_error *err)
{
    struct dproc *d = ud;
    (void)w;
    if (d->tty && m->opcode == SBX__WS_CLOSE && !d->have_exit && m->reason && m->reason[0] == '{') {
        /* Without the exit-control capability a terminal's exit code is in the close reason. */
        json_t *o = NULL;
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (sbx_json_parse(m->reason, strlen(m->reason), NULL, &o, &ignored) == 0 &&
            json_is_integer(json_object_get(o, "exitCode"))) {
            d->have_exit = 1;
            d->exit_code = (int)json_integer_value(json_object_get(o, "exitCode"));
        }
        json_decref(o);
        return 0;
    }
    if (m->opcode != SBX__WS_TEXT && m->opcode != SBX__WS_BINARY)
        return 0;
    if (!d->tty)
        return sbx__dtn_demux_feed(&d->dm, m->data, m->len, out_piece, d, err);
    int rc = pty_control(d, m, err);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    return sbx__rproc_output(d->r, 1, m->data, m->len) ? 0 : SBX__PAUSE;
}

static void on_end(struct sbx__lws *w, int rc, const struct sbx_error *err, void *ud)
{
    struct dproc *d = ud;
    (void)w;
    (void)rc;
    (void)err;
    if (d->tty) {
        /* A terminal's end is its control message, sent before the close. */
        struct sbx_error e = SBX_ERROR_INIT;
        if (d->have_exit) {
            finish(d, d->exit_code);
            return;
        }
        sbx_error_set(&e, SBX_E_SANDBOX, 0,
                      "the terminal of '%s' in the Daytona sandbox closed without an exit code%s%s",
                      d->name, rc < 0 && err ? ": " : "", rc < 0 && err ? err->msg : "");
        sbx__endpoint_scrub(d->ep, &e);
        sbx__rproc_fail(d->r, &e);
        return;
    }
    /* Closed or cut, the command's own end is what the toolbox says of it. */
    (void)sbx__dtn_demux_finish(&d->dm, out_piece, d, NULL);
    exit_poll(d->timer, d);
}

static void on_drained(struct sbx__lws *w, void *ud)
{
    struct dproc *d = ud;
    (void)w;
    sbx__rproc_input_ready(d->r);
}

static const struct sbx__lws_ops lws_ops = {
        .message = on_message, .end = on_end, .drained = on_drained};

static int send_input(struct dproc *d, const uint8_t *p, size_t n);

static void input_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                       const struct sbx_error *err, void *ud)
{
    struct dproc *d = ud;
    (void)x;
    (void)rc;
    (void)resp;
    (void)err;
    d->in_x = NULL;
    if (d->eof_pending && !d->eof_sent && send_input(d, NULL, 0) == 0)
        d->eof_sent = 1;
    sbx__rproc_input_ready(d->r);
}

/* One line of stdin for the preamble's decoder: base64 of p, or "." for the end. */
static int send_input(struct dproc *d, const uint8_t *p, size_t n)
{
    static const struct sbx__xfer_ops ops = {.done = input_done};
    struct sbx_buf line;
    sbx_buf_init(&line, SBX_BUF_NOLIMIT);
    if (n)
        sbx__dtn_keep(sbx_b64_encode(p, n, &line, NULL));
    else
        sbx__dtn_keep(sbx_buf_add(&line, ".", 1, NULL));
    sbx__dtn_keep(sbx_buf_add(&line, "\n", 2, NULL));
    json_t *body = json_pack("{s:s}", "data", line.data);
    const char *hdr[2] = {d->org_hdr, NULL};
    char *path = sbx_xasprintf("/process/session/%s/command/%s/input", d->sid, d->cid);
    struct sbx__http_req req = {.method = "POST", .path = path, .json = body, .headers = hdr};
    int rc = sbx__xfer_start(sbx__rproc_loop(d->r), d->ep, &req, &ops, d, &d->in_x, NULL);
    free(path);
    json_decref(body);
    sbx_buf_release(&line);
    return rc;
}

static size_t op_input(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud)
{
    struct dproc *d = ud;
    (void)r;
    if (d->tty) {
        /* Keys go to the terminal as they are, after any resize asked before them. */
        if (n == 0 || !d->lws)
            return n;
        if (d->resize_x || sbx__lws_queued(d->lws) >= SEND_HIGH)
            return 0;
        size_t take = n < INPUT_CHUNK ? n : INPUT_CHUNK;
        return sbx__lws_send(d->lws, SBX__WS_BINARY, p, take, NULL) == 0 ? take : 0;
    }
    if (d->eof_sent)
        return n;
    if (n == 0) {
        if (d->in_x)
            d->eof_pending = 1;
        else if (send_input(d, NULL, 0) == 0)
            d->eof_sent = 1;
        return 0;
    }
    if (d->in_x)
        return 0;
    size_t take = n < INPUT_CHUNK ? n : INPUT_CHUNK;
    return send_input(d, p, take) == 0 ? take : 0;
}

static void resize_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                        const struct sbx_error *err, void *ud)
{
    struct dproc *d = ud;
    (void)x;
    (void)rc;
    (void)resp;
    (void)err;
    d->resize_x = NULL;
    sbx__rproc_input_ready(d->r);
}

static void op_resize(struct sbx__rproc *r, unsigned rows, unsigned cols, void *ud)
{
    struct dproc *d = ud;
    static const struct sbx__xfer_ops ops = {.done = resize_done};
    if (!d->tty || d->resize_x || (rows == d->rows && cols == d->cols))
        return;
    d->rows = rows;
    d->cols = cols;
    json_t *body = json_pack("{s:i,s:i}", "cols", (int)cols, "rows", (int)rows);
    const char *hdr[2] = {d->org_hdr, NULL};
    char *path = sbx_xasprintf("/process/pty/%s/resize", d->sid);
    struct sbx__http_req req = {.method = "POST", .path = path, .json = body, .headers = hdr};
    (void)sbx__xfer_start(sbx__rproc_loop(r), d->ep, &req, &ops, d, &d->resize_x, NULL);
    json_decref(body);
    free(path);
}

static void signal_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                        const struct sbx_error *err, void *ud)
{
    (void)x;
    (void)rc;
    (void)resp;
    (void)err;
    (void)ud;
}

/* The fixed kill line for process/execute (which splits a line into words itself). */
static char *kill_line(const struct dproc *d, int sig)
{
    if (d->pgid == d->pid && d->pid > 0)
        return sbx_xasprintf("kill -s %d -- -%d", sig, (int)d->pgid);
    return sbx_xasprintf("kill -s %d %d", sig, (int)d->pid);
}

static void op_signal(struct sbx__rproc *r, int sig, void *ud)
{
    struct dproc *d = ud;
    static const struct sbx__xfer_ops ops = {.done = signal_done};
    char *line = kill_line(d, sig);
    json_t *body = json_pack("{s:s}", "command", line);
    const char *hdr[2] = {d->org_hdr, NULL};
    struct sbx__http_req req = {
            .method = "POST", .path = "/process/execute", .json = body, .headers = hdr};
    (void)sbx__xfer_start(sbx__rproc_loop(r), d->ep, &req, &ops, NULL, NULL, NULL);
    json_decref(body);
    free(line);
}

static void op_resume(struct sbx__rproc *r, void *ud)
{
    struct dproc *d = ud;
    (void)r;
    if (d->lws)
        sbx__lws_resume(d->lws);
}

static void op_stop(struct sbx__rproc *r, void *ud)
{
    struct dproc *d = ud;
    (void)r;
    sbx__lws_free(d->lws);
    d->lws = NULL;
    if (d->in_x)
        sbx__xfer_cancel(d->in_x);
    if (d->exit_x)
        sbx__xfer_cancel(d->exit_x);
    if (d->resize_x)
        sbx__xfer_cancel(d->resize_x);
    d->in_x = d->exit_x = d->resize_x = NULL;
    sbx__timer_free(d->timer);
    d->timer = NULL;
}

static void op_kill(struct sbx__rproc *r, void *ud)
{
    struct dproc *d = ud;
    (void)r;
    char *line = kill_line(d, SIGKILL);
    json_t *body = json_pack("{s:s}", "command", line);
    const char *hdr[2] = {d->org_hdr, NULL};
    struct sbx__http_req req = {
            .method = "POST", .path = "/process/execute", .json = body, .headers = hdr};
    struct sbx__http_resp resp;
    struct sbx_error ignored = SBX_ERROR_INIT;
    sbx__http_resp_init(&resp);
    (void)sbx__http_call(d->ep, &req, &resp, &ignored);
    sbx__http_resp_release(&resp);
    json_decref(body);
    free(line);
}

static const struct sbx__rproc_ops proc_ops = {.input = op_input,
                                               .resize = op_resize,
                                               .signal = op_signal,
                                               .resume = op_resume,
                                               .stop = op_stop,
                                               .kill = op_kill,
                                               .release = dproc_free};

static int setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct dproc *d = ud;
    struct sbx__wsconn *wc = d->wc;
    d->wc = NULL;
    d->timer = sbx__timer_new(sbx__rproc_loop(r), exit_poll, d);
    int rc = sbx__lws_new(sbx__rproc_loop(r), wc, &lws_ops, d, &d->lws, err);
    if (rc < 0) {
        sbx__timer_free(d->timer);
        d->timer = NULL;
        return rc;
    }
    if (d->pre.len)
        (void)sbx__rproc_output(r, 1, d->pre.data, d->pre.len);
    if (d->pre_err.len)
        (void)sbx__rproc_output(r, 2, d->pre_err.data, d->pre_err.len);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Starting a command (caller's thread) */

static int pre_piece(void *ud, int stream, const uint8_t *p, size_t n, struct sbx_error *err)
{
    struct dproc *d = ud;
    struct verdict *v = d->verdict;
    if (stream == 2)
        return sbx_buf_add(&d->pre_err, p, n, err);
    size_t i = 0;
    for (; i < n && !v->have; i++) {
        char c = (char)p[i];
        if (!d->armed) {
            /* Before the preamble's mark: a terminal's echo of the typed line, a prompt. */
            d->armed = c == '\036';
            continue;
        }
        if (c == '\r')
            continue;
        if (v->len == 0 && c != 'S') {
            v->mark[v->len++] = c;
            v->have = 1;
        } else if (c == '\n') {
            v->have = 1;
        } else {
            if (v->len >= MARK_MAX - 1)
                return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled",
                                     d->name);
            v->mark[v->len++] = c;
        }
    }
    return i < n ? sbx_buf_add(&d->pre, p + i, n - i, err) : 0;
}

/* The preamble's first word: "S<pid> <pgid>", or one letter for a command that cannot start. */
static int read_verdict(struct dproc *d, struct verdict *v, struct sbx_error *err)
{
    int64_t deadline = sbx_deadline_after_ms(sbx__endpoint_timeout_ms(d->ep));
    memset(v, 0, sizeof(*v));
    d->verdict = v;
    int rc = 0;
    while (!v->have && rc == 0) {
        struct sbx__ws_msg m;
        if ((rc = sbx__wsconn_read(d->wc, &m, deadline, err)) < 0)
            break;
        if (m.opcode == SBX__WS_CLOSE) {
            v->ended = 1;
            break;
        }
        if (!d->tty) {
            rc = sbx__dtn_demux_feed(&d->dm, m.data, m.len, pre_piece, d, err);
            continue;
        }
        if ((rc = pty_control(d, &m, err)) != 0) {
            rc = rc < 0 ? rc : 0;
            continue;
        }
        rc = pre_piece(d, 1, m.data, m.len, err);
    }
    d->verdict = NULL;
    v->mark[v->len] = '\0';
    return rc;
}

static int verdict_error(struct dproc *d, const struct verdict *v, const char *cwd,
                         struct sbx_error *err)
{
    if (v->len == 0) {
        const char *why = d->pre_err.len ? d->pre_err.data : "";
        return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s': %.*s", d->name,
                             (int)strcspn(why, "\r\n"), why[0] ? why : "the command ended at once");
    }
    int start_rc = sbx__shellfs_start_error(v->mark[0], d->name, cwd, err);
    if (start_rc < 0)
        return start_rc;
    switch (v->mark[0]) {
    case 'F':
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox has no fifo for the stdin of '%s'",
                             d->name);
    default:
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled", d->name);
    }
}

/* The command line: OUTER running INNER with its arguments, then the command. */
static char *command_line(const char *root, const struct sbx_exec_spec *spec, const char *cwd,
                          int want_in, int tty)
{
    struct sbx_strv argv;
    char n[16];
    size_t nenv = 0;
    sbx_strv_init(&argv);
    for (const char *const *e = spec->env; e && *e; e++)
        nenv++;
    snprintf(n, sizeof(n), "%zu", nenv);
    sbx_strv_push(&argv, "/bin/sh");
    sbx_strv_push(&argv, "-c");
    if (!tty) {
        /* (A terminal's shell already gives the command a process group of its own.) */
        sbx_strv_push(&argv, OUTER);
        sbx_strv_push(&argv, "sbx");
    }
    sbx_strv_push(&argv, INNER);
    if (tty)
        sbx_strv_push(&argv, "sbx");
    sbx_strv_push(&argv, root);
    sbx_strv_push_take(&argv, cwd[0] ? sbx_xasprintf("%s/%s", root, cwd) : sbx_xstrdup(root));
    sbx_strv_push(&argv, spec->flags & SBX_EXEC_KEEP_BACKGROUND ? "1" : "0");
    sbx_strv_push(&argv, tty ? "2" : want_in ? "1" : "0");
    sbx_strv_push(&argv, n);
    for (const char *const *e = spec->env; e && *e; e++)
        sbx_strv_push(&argv, *e);
    if (spec->argv) {
        for (const char *const *a = spec->argv; *a; a++)
            sbx_strv_push(&argv, *a);
    } else {
        sbx_strv_push(&argv, "/bin/sh");
        sbx_strv_push(&argv, "-c");
        sbx_strv_push(&argv, spec->command);
    }
    char *q = sbx__shellfs_quote_argv((const char *const *)argv.v);
    sbx_strv_release(&argv);
    if (!tty)
        return q;
    /* Typed into the terminal's shell, which the command then replaces. */
    char *line = sbx_xasprintf("exec %s\n", q);
    free(q);
    return line;
}

/* A PTY session of the command's own (create-connect), the command line typed into its shell
 * once the toolbox says it is connected. */
static int start_pty(struct dproc *d, const struct sbx_exec_spec *spec, const char *line,
                     struct sbx_error *err)
{
    static const char *const protocols[] = {"X-Daytona-Pty-Exit-Control", NULL};
    const char *hdr[2] = {d->org_hdr, NULL};
    d->rows = spec->rows ? spec->rows : 24;
    d->cols = spec->cols ? spec->cols : 80;
    char *path = sbx_xasprintf("/process/pty/create-connect?id=%s&cols=%u&rows=%u", d->sid, d->cols,
                               d->rows);
    int rc = sbx__wsconn_open(d->ep, path, protocols, hdr, MSG_MAX, sbx__endpoint_timeout_ms(d->ep),
                              &d->wc, err);
    free(path);
    int64_t deadline = sbx_deadline_after_ms(sbx__endpoint_timeout_ms(d->ep));
    struct sbx__ws_msg m = {0};
    while (rc == 0) {
        if ((rc = sbx__wsconn_read(d->wc, &m, deadline, err)) < 0)
            break;
        if (m.opcode == SBX__WS_CLOSE) {
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                               "the Daytona toolbox closed the terminal of '%s' at once", d->name);
            break;
        }
        int c = pty_control(d, &m, err);
        if (c < 0)
            rc = c;
        else if (c == 1)
            break;
    }
    if (rc == 0)
        rc = sbx__wsconn_write(d->wc, SBX__WS_BINARY, line, strlen(line), deadline, err);
    return rc;
}

/* A session of the command's own, the command started in it, its logs opened. */
static int start_remote(struct dproc *d, const char *line, struct sbx_error *err)
{
    json_t *body = json_pack("{s:s}", "sessionId", d->sid), *ans = NULL;
    int rc = sbx__dtn_toolbox(d->box, "POST", "/process/session", body, NULL, err);
    json_decref(body);
    if (rc < 0) {
        free(d->sid);
        d->sid = NULL;
        return rc;
    }
    char *path = sbx_xasprintf("/process/session/%s/exec", d->sid);
    body = json_pack("{s:s,s:b}", "command", line, "runAsync", 1);
    rc = sbx__dtn_toolbox(d->box, "POST", path, body, &ans, err);
    json_decref(body);
    free(path);
    const char *cid = json_string_value(json_object_get(ans, "cmdId"));
    if (rc == 0 && (!cid || !cid[0] || strpbrk(cid, "/?#% ")))
        rc = sbx_error_set(err, SBX_E_API, 0,
                           "the Daytona toolbox started '%s' without a command id", d->name);
    if (rc == 0)
        d->cid = sbx_xstrdup(cid);
    json_decref(ans);
    if (rc < 0)
        return rc;
    const char *hdr[2] = {d->org_hdr, NULL};
    path = sbx_xasprintf("/process/session/%s/command/%s/logs?follow=true", d->sid, d->cid);
    rc = sbx__wsconn_open(d->ep, path, NULL, hdr, MSG_MAX, sbx__endpoint_timeout_ms(d->ep), &d->wc,
                          err);
    free(path);
    return rc;
}

int sbx__dtn_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                        struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__dtn_session *s = (struct sbx__dtn_session *)bs;
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    int want_in = tty || (spec->flags & SBX_EXEC_STDIN);
    if (spec->user && strcmp(spec->user, "daytona") != 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a daytona sandbox runs commands as its user 'daytona' only, not as "
                             "'%s'",
                             spec->user);
    struct dproc *d = sbx_xcalloc(1, sizeof(*d));
    d->box = &s->box;
    d->ep = sbx__endpoint_ref(s->box.ep);
    d->conf = sbx__dtn_conf_ref(s->box.conf);
    d->org_hdr = s->box.conf->org_hdr ? sbx_xstrdup(s->box.conf->org_hdr) : NULL;
    d->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    d->sid = sbx__dtn_session_id();
    sbx_buf_init(&d->pre, PRE_MAX);
    sbx_buf_init(&d->pre_err, PRE_MAX);
    d->tty = tty;
    char *line = command_line(s->base.root, spec, cwd, want_in, tty);
    struct verdict v;
    int rc = tty ? start_pty(d, spec, line, err) : start_remote(d, line, err);
    free(line);
    if (rc == 0)
        rc = read_verdict(d, &v, err);
    if (rc == 0 && (v.len == 0 || v.mark[0] != 'S'))
        rc = verdict_error(d, &v, cwd, err);
    if (rc < 0) {
        dproc_free(d);
        return rc;
    }
    char *sp = NULL;
    d->pid = (pid_t)strtol(v.mark + 1, &sp, 10);
    d->pgid = (pid_t)strtol(sp, NULL, 10);
    d->box = NULL;
    struct sbx__rproc_opts o = {.name = d->name,
                                .tty = tty,
                                .rows = spec->rows,
                                .cols = spec->cols,
                                .want_stdin = want_in && !tty,
                                .merge_stderr = !!(spec->flags & SBX_EXEC_MERGE_STDERR),
                                .timeout_ms = spec->timeout_ms,
                                .kill_grace_ms = spec->kill_grace_ms,
                                .pid = d->pid};
    struct sbx__loop *loop = NULL;
    if ((rc = sbx__loop_default(&loop, err)) < 0 ||
        (rc = sbx__rproc_new(loop, &o, &proc_ops, d, &d->r, err)) < 0) {
        dproc_free(d);
        return rc;
    }
    struct sbx__rproc *r = d->r;
    if ((rc = sbx__rproc_start(r, setup, err)) < 0) {
        sbx_proc_free(sbx__rproc_proc(r));
        return rc;
    }
    *out = sbx__rproc_proc(r);
    return 0;
}
