/* Commands in a Docker sandbox: one engine exec per command, its connection hijacked. A small
 * fixed shell preamble (WRAPPER) runs first inside the container: it enters the working
 * directory (refusing one that resolves out of the workspace), tells a missing program from a
 * failing one, reports its process id (the process group the timeout kills) and, unless the
 * caller keeps background processes, ends the group when the command ends. This file starts a
 * command and reads the preamble's verdict on the caller's thread; the remote layer's event
 * loop then relays it (exec-loop.c), and runs the short fixed-argv commands sbx needs itself
 * (sbx__dk_exec_run) to completion here. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "providers/docker/docker.h"
#include "providers/docker/exec.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/mux.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define CHUNK        65536
#define MARK_MAX     32
#define EXIT_WAIT_MS 5000

/* The shell stays until the command ends, whatever the timeout's SIGTERM does to it ("trap :"
 * is reset to the default in the command; an ignored signal would be inherited): the exec's
 * status is the command's, and the stream lasts as long as the command (podman ends it when
 * this shell exits).
 * $1 workspace root, $2 working directory, $3 keep background processes (1/0), $4 $5 the
 * terminal's rows and columns (set before the command runs: a resize through the API could
 * come after it looked), then argv.
 * The first bytes on stdout are the verdict: "S<pid>\n" started, "N" not found, "X" not
 * executable, "C" no such directory, "P" directory out of the workspace. */
static const char WRAPPER[] =
        "root=$1 dir=$2 keep=$3 rows=$4 cols=$5; shift 5\n"
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
        "exit \"$r\"\n";

void sbx__dk_run_init(struct sbx__dk_run *r, size_t max)
{
    r->code = -1;
    sbx_buf_init(&r->out, max);
    sbx_buf_init(&r->err, max);
}

void sbx__dk_run_release(struct sbx__dk_run *r)
{
    sbx_buf_release(&r->out);
    sbx_buf_release(&r->err);
}

/* Into a buffer without a limit: sbx_buf_add cannot fail then (allocation failure aborts). */
static void buf_put(struct sbx_buf *b, const void *p, size_t n)
{
    int rc = sbx_buf_add(b, p, n, NULL);
    (void)rc;
}

static json_t *strv_json(const char *const *v)
{
    json_t *a = json_array();
    for (; v && *v; v++)
        sbx_json_append(a, sbx_json_str(*v));
    return a;
}

int sbx__dk_exec_create(const struct sbx__dk_engine *e, const char *container, json_t *cmd,
                        const char *const *env, const char *user, int tty, int attach_in,
                        int attach_out, char **out, struct sbx_error *err)
{
    json_t *body = json_object(), *reply = NULL;
    sbx_json_set(body, "AttachStdin", json_boolean(attach_in));
    sbx_json_set(body, "AttachStdout", json_boolean(attach_out));
    sbx_json_set(body, "AttachStderr", json_boolean(attach_out));
    sbx_json_set(body, "Tty", json_boolean(tty));
    sbx_json_set(body, "Cmd", cmd);
    if (env && *env)
        sbx_json_set(body, "Env", strv_json(env));
    if (user && user[0])
        sbx_json_set(body, "User", sbx_json_str(user));
    char *path = sbx_xasprintf("/containers/%s/exec", container);
    int rc = sbx__dk_json(e, "POST", path, body, NULL, &reply, err);
    const char *id = json_string_value(json_object_get(reply, "Id"));
    if (rc == 0 && !id)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the Docker engine made an exec without an id");
    if (rc == 0)
        *out = sbx_xstrdup(id);
    if (rc == -SBX_E_NOTFOUND || rc == -SBX_E_EXISTS) {
        /* 404: no such container; 409: it is not running. */
        char why[SBX_ERROR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err ? err->msg : "");
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the container '%.12s' is gone or stopped: %s",
                           container, why);
    }
    free(path);
    json_decref(body);
    json_decref(reply);
    return rc;
}

/* ExitCode of exec eid once it no longer runs (the stream can end a moment before). */
int sbx__dk_exec_exit_code(const struct sbx__dk_engine *e, const char *eid, int *code,
                           struct sbx_error *err)
{
    char *path = sbx_xasprintf("/exec/%s/json", eid);
    int64_t deadline = sbx_deadline_after_ms(EXIT_WAIT_MS);
    int rc;
    for (;;) {
        json_t *j = NULL;
        rc = sbx__dk_json(e, "GET", path, NULL, NULL, &j, err);
        int running = json_is_true(json_object_get(j, "Running"));
        json_t *c = json_object_get(j, "ExitCode");
        if (rc == 0 && !running && json_is_integer(c)) {
            *code = (int)json_integer_value(c);
            json_decref(j);
            break;
        }
        json_decref(j);
        if (rc < 0)
            break;
        if (sbx_deadline_poll_ms(deadline) == 0) {
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the engine reports no exit status");
            break;
        }
        sbx_sleep_ms(20);
    }
    free(path);
    return rc;
}

void sbx__dk_kill_group(const struct sbx__dk_engine *e, const char *container, pid_t pid,
                        const char *sig)
{
    char num[32], flag[16];
    char *eid = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (pid <= 1)
        return;
    snprintf(num, sizeof(num), "-%d", (int)pid);
    snprintf(flag, sizeof(flag), "-%s", sig);
    const char *argv[] = {"kill", flag, num, NULL};
    if (sbx__dk_exec_create(e, container, strv_json(argv), NULL, "0", 0, 0, 0, &eid, &ignored) ==
        0) {
        json_t *body = json_pack("{s:b}", "Detach", 1);
        char *path = sbx_xasprintf("/exec/%s/start", eid);
        int code;
        /* A detached start returns before kill has run (podman): wait until it has, so the
         * group is gone when the caller goes on (a timeout reported, a cancel returned). */
        if (sbx__dk_json(e, "POST", path, body, NULL, NULL, &ignored) == 0)
            (void)sbx__dk_exec_exit_code(e, eid, &code, &ignored);
        free(path);
        json_decref(body);
    }
    free(eid);
}

static int start_hijack(const struct sbx__dk_engine *e, const char *eid, int tty,
                        struct sbx__conn **out, struct sbx_error *err)
{
    json_t *body = json_pack("{s:b,s:b}", "Detach", 0, "Tty", tty);
    char *path = sbx_xasprintf("/exec/%s/start", eid);
    int rc = sbx__dk_hijack(e, path, body, out, err);
    free(path);
    json_decref(body);
    return rc;
}

/* Feed n bytes of the multiplexed stream into a run's outputs. */
static int run_feed(struct sbx__mux *dm, const uint8_t *p, size_t n, struct sbx__dk_run *out,
                    const char *name, struct sbx_error *err)
{
    for (size_t off = 0; off < n;) {
        int stream;
        const uint8_t *pl;
        size_t plen;
        long used = sbx__mux_feed(dm, p + off, n - off, &stream, &pl, &plen, err);
        if (used < 0)
            return (int)used;
        off += (size_t)used;
        struct sbx_buf *dst = stream == 2 ? &out->err : &out->out;
        if (plen && sbx_buf_add(dst, pl, plen, err) < 0) {
            sbx_error_prefix(err, "output of '%s'", name);
            return -SBX_E_TOOBIG;
        }
    }
    return 0;
}

int sbx__dk_exec_run(struct sbx__dk_session *s, const char *const *argv, const void *input,
                     size_t input_len, struct sbx__dk_run *out, struct sbx_error *err)
{
    char *eid = NULL;
    struct sbx__conn *c = NULL;
    struct sbx__mux dm;
    int rc;
    sbx__mux_init(&dm, 0);
    if ((rc = sbx__dk_exec_create(&s->eng, s->container, strv_json(argv), NULL, "0", 0,
                                  input != NULL, 1, &eid, err)) < 0 ||
        (rc = start_hijack(&s->eng, eid, 0, &c, err)) < 0)
        goto out;
    int64_t deadline = sbx_deadline_after_ms(s->eng.timeout_ms);
    if (input && (rc = sbx__conn_write_all(c, input, input_len, deadline, err)) < 0)
        goto out;
    if ((rc = sbx__conn_shutdown_write(c, err)) < 0)
        goto out;
    for (;;) {
        uint8_t buf[CHUNK];
        size_t got = 0;
        rc = sbx__conn_read(c, buf, sizeof(buf), deadline, &got, err);
        if (rc == -SBX_E_TIMEOUT)
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' in the container took too long",
                               argv[0]);
        if (rc < 0)
            goto out;
        if (rc == SBX__CONN_EOF)
            break;
        if ((rc = run_feed(&dm, buf, got, out, argv[0], err)) < 0)
            goto out;
    }
    rc = sbx__dk_exec_exit_code(&s->eng, eid, &out->code, err);
out:
    sbx__conn_free(c);
    free(eid);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Starting a command: the exec, its connection and the preamble's verdict */

/* Read the preamble's verdict: "S<pid>\n", or one letter for a command that cannot start.
 * Output of the command that came with it is kept in p->pre and p->pre_err (the stream is
 * left at a frame boundary for the relay). stderr may come first (the engine copies the two
 * streams independently): it goes to p->pre_err too, where an engine's message about a
 * command it could not start (a user that does not exist) also lands. */
static int read_verdict(struct sbx__dk_cmd *p, char *mark, size_t *mark_len, struct sbx_error *err)
{
    uint8_t buf[CHUNK];
    int64_t deadline = sbx_deadline_after_ms(p->eng.timeout_ms);
    int have = 0;
    sbx__mux_init(&p->dm, 0);
    *mark_len = 0;
    while (!have) {
        size_t n = 0;
        /* A terminal has no frames: the verdict is read byte by byte, not into the output. */
        int rc = sbx__conn_read(p->conn, buf, p->tty ? 1 : sizeof(buf), deadline, &n, err);
        if (rc == -SBX_E_TIMEOUT)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' did not start in time", p->name);
        if (rc < 0)
            return rc;
        if (rc == SBX__CONN_EOF)
            break; /* ended (with or without a verdict) */
        for (size_t off = 0; off < n;) {
            int stream = 1;
            const uint8_t *pl = buf + off;
            size_t plen = n - off;
            if (p->tty) {
                off = n;
            } else {
                long used = sbx__mux_feed(&p->dm, buf + off, n - off, &stream, &pl, &plen, err);
                if (used < 0)
                    return (int)used;
                off += (size_t)used;
            }
            if (!plen)
                continue;
            if (have || stream == 2) {
                buf_put(stream == 2 ? &p->pre_err : &p->pre, pl, plen);
                continue;
            }
            size_t i = 0;
            for (; i < plen && !have; i++) {
                if (*mark_len == 0 && pl[i] != 'S') {
                    mark[(*mark_len)++] = (char)pl[i];
                    have = 1;
                } else if (pl[i] == '\n') {
                    have = 1;
                } else if (pl[i] != '\r') {
                    if (*mark_len >= MARK_MAX - 1)
                        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled",
                                             p->name);
                    mark[(*mark_len)++] = (char)pl[i];
                }
            }
            if (i < plen)
                buf_put(&p->pre, pl + i, plen - i);
        }
    }
    mark[*mark_len] = '\0';
    return 0;
}

static int pick_user(struct sbx__dk_session *s, const char *want, const char **out,
                     struct sbx_error *err)
{
    if (!want) {
        *out = s->owner;
        return 0;
    }
    if (sbx_strv_find(&s->users, want) < 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no user '%s' in the sandbox's manifest",
                             want);
    *out = want;
    return 0;
}

static struct sbx__dk_cmd *cmd_new(struct sbx__dk_session *s, const struct sbx_exec_spec *spec)
{
    struct sbx__dk_cmd *p = sbx_xcalloc(1, sizeof(*p));
    p->tty = !!(spec->flags & SBX_EXEC_TTY);
    p->keep = !!(spec->flags & SBX_EXEC_KEEP_BACKGROUND);
    sbx_buf_init(&p->pre, SBX_BUF_NOLIMIT);
    sbx_buf_init(&p->pre_err, SBX_BUF_NOLIMIT);
    p->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    p->container = sbx_xstrdup(s->container);
    p->rows = spec->rows ? spec->rows : 24;
    p->cols = spec->cols ? spec->cols : 80;
    sbx__dk_engine_copy(&p->eng, &s->eng);
    return p;
}

void sbx__dk_cmd_free(struct sbx__dk_cmd *p)
{
    if (!p)
        return;
    sbx__conn_free(p->conn);
    sbx_buf_release(&p->pre);
    sbx_buf_release(&p->pre_err);
    sbx__dk_engine_release(&p->eng);
    free(p->container);
    free(p->eid);
    free(p->name);
    free(p);
}

/* The exec's command: the WRAPPER preamble with its arguments, then the command. */
static json_t *wrapped_cmd(const struct sbx__dk_session *s, const struct sbx__dk_cmd *p,
                           const struct sbx_exec_spec *spec, const char *cwd)
{
    char *dir = cwd[0] ? sbx_xasprintf("%s/%s", s->base.root, cwd) : sbx_xstrdup(s->base.root);
    json_t *cmd = json_array();
    sbx_json_append(cmd, sbx_json_str("/bin/sh"));
    sbx_json_append(cmd, sbx_json_str("-c"));
    sbx_json_append(cmd, sbx_json_str(WRAPPER));
    sbx_json_append(cmd, sbx_json_str("sbx"));
    sbx_json_append(cmd, sbx_json_str(s->base.root));
    sbx_json_append(cmd, sbx_json_str(dir));
    sbx_json_append(cmd, sbx_json_str(p->keep ? "1" : "0"));
    free(dir);
    char rows[8] = "", cols[8] = "";
    if (p->tty) {
        snprintf(rows, sizeof(rows), "%u", p->rows);
        snprintf(cols, sizeof(cols), "%u", p->cols);
    }
    sbx_json_append(cmd, sbx_json_str(rows));
    sbx_json_append(cmd, sbx_json_str(cols));
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

/* The error for a verdict other than "S<pid>": the preamble's letter, or the engine's own
 * words when it could not run the preamble at all (no /bin/sh, an unknown user). */
static int verdict_error(const struct sbx__dk_cmd *p, const char *mark, size_t mark_len,
                         const char *cwd, struct sbx_error *err)
{
    int code = -1;
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__dk_exec_exit_code(&p->eng, p->eid, &code, &ignored);
    if (mark_len == 0 || (mark[0] != 'S' && mark_len != 1)) {
        const char *why = p->pre_err.len ? p->pre_err.data : p->pre.len ? p->pre.data : "";
        return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s': %.*s%s(exit status %d)", p->name,
                             (int)strcspn(why, "\r\n"), why, why[0] ? " " : "", code);
    }
    if (mark[0] == 'N')
        return sbx_error_set(err, SBX_E_EXEC, ENOENT, "command '%s' not found", p->name);
    if (mark[0] == 'X')
        return sbx_error_set(err, SBX_E_EXEC, EACCES, "cannot run '%s': %s", p->name,
                             strerror(EACCES));
    if (mark[0] == 'C')
        return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                             "working directory '%s' is not a directory of the sandbox",
                             cwd[0] ? cwd : ".");
    return sbx_error_set(err, SBX_E_PERM, 0, "working directory '%s' leads out of the workspace",
                         cwd);
}

int sbx__dk_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    struct sbx__dk_cmd *p = cmd_new(s, spec);
    int want_in = p->tty || (spec->flags & SBX_EXEC_STDIN);
    const char *user = NULL;
    int rc;
    if ((rc = pick_user(s, spec->user, &user, err)) < 0)
        goto fail;
    if ((rc = sbx__dk_exec_create(&s->eng, s->container, wrapped_cmd(s, p, spec, cwd), spec->env,
                                  user, p->tty, want_in, 1, &p->eid, err)) < 0 ||
        (rc = start_hijack(&s->eng, p->eid, p->tty, &p->conn, err)) < 0)
        goto fail;
    char mark[MARK_MAX];
    size_t mark_len = 0;
    if ((rc = read_verdict(p, mark, &mark_len, err)) < 0)
        goto fail;
    if (mark_len == 0 || mark[0] != 'S') {
        rc = verdict_error(p, mark, mark_len, cwd, err);
        goto fail;
    }
    p->pid = (pid_t)strtol(mark + 1, NULL, 10);
    /* The relay is the event loop's from here on (exec-loop.c); p is its. */
    return sbx__dk_cmd_relay(p, spec, want_in, out, err);
fail:
    sbx__dk_cmd_free(p);
    return rc;
}
