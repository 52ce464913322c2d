/* sbx run: run an agent against a model and print its final output. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli/run-trace.h"
#include "cli/cli.h"
#include "cli/help.h"
#include "cli/run-state.h"
#include "cli/run-status.h"
#include "cli/run-vars.h"
#include "sbx/capability.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/sandbox-run.h"
#include "sbx/secret.h"
#include "sbx/snapshot-remote.h"
#include "sbx/strv.h"
#include "sbx/term.h"
#include "sbx/time.h"

#define PROMPT_MAX   ((size_t)1 << 20)
#define CLI_MAXTURNS 3
/* A guardrail tripped: on the input side (the run's input, a tool's arguments) or the output
 * side (the final output, a tool's output). */
#define CLI_TRIPWIRE_INPUT  5
#define CLI_TRIPWIRE_OUTPUT 6

/* The signal that ends the run (SIGPIPE also when stdout's reader went away), 0 while none did:
 * the run's cancellation flag. */
static volatile sig_atomic_t interrupted;
static const int end_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void on_signal(int sig)
{
    interrupted = sig;
}

static void flush(FILE *f)
{
    if (fflush(f) == EOF && errno == EPIPE && !interrupted)
        interrupted = SIGPIPE;
}

/* Output written to a pipe or socket nobody reads any more fails only at the next write, which
 * a run busy in a long tool call may not make for minutes: notice the reader going away (the
 * write end polls POLLERR, a socket POLLHUP) and end the run then. */
static void *watch_stdout(void *unused)
{
    (void)unused;
    struct pollfd p = {.fd = 1, .events = 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    if ((p.revents & (POLLERR | POLLHUP)) && !interrupted)
        interrupted = SIGPIPE;
    return NULL;
}

static void start_stdout_watch(void)
{
    struct stat st;
    if (fstat(1, &st) < 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
        return;
    pthread_attr_t attr;
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* signals stay with the threads that run */
    (void)pthread_create(&t, &attr, watch_stdout, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

/* SIGINT, SIGTERM and SIGHUP cancel the run (a second one ends the process at once: the
 * sandboxes the run made are tied to it and go away anyway); SIGPIPE is ignored and a broken
 * stdout ends the run instead. */
static void catch_signals(int on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on ? on_signal : SIG_DFL;
    sa.sa_flags = on ? SA_RESETHAND : 0;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < SBX_ARRAY_LEN(end_signals); i++)
        sigaction(end_signals[i], &sa, NULL);
    signal(SIGPIPE, on ? SIG_IGN : SIG_DFL);
}

#define CLI_MAX_PORTS 8

struct render {
    int json;
    /* --port: the ports to tell the URL of once something listens on them in a sandbox of
     * the run; done holds "id:port" of those told. */
    struct sbx_sandbox_run *sr;
    struct sbx_client *client;
    int ports[CLI_MAX_PORTS];
    size_t nports;
    json_t *ports_done;
    const char *state_file; /* added to the interruption event */
    int mid_line;           /* streamed text without a final newline on stderr */
    json_t *args;           /* call_id -> arguments, for the tool line */
    /* On a terminal, model text is escaped (sbx_term_escape); a streamed UTF-8 character cut
     * between two deltas waits in pend for the rest. */
    int tty_out, tty_err;
    char pend[4];
    size_t npend;
    struct run_status status; /* the terminal's status line, and the lock of stderr */
    int streamed;             /* text deltas of the current message were shown */
    char *shown;              /* the last message whose text was streamed to stderr */
    int tripwire;             /* the exit status of the guardrail that tripped, 0: none */
};

/* stdout and stderr reach the same place (one terminal, or `2>&1` into one pipe or file): what
 * was streamed to stderr is already where stdout goes. */
static int same_output(void)
{
    struct stat a, b;
    if (fstat(1, &a) < 0 || fstat(2, &b) < 0)
        return 0;
    if (S_ISCHR(a.st_mode) && S_ISCHR(b.st_mode) && isatty(1) && isatty(2))
        return a.st_rdev == b.st_rdev;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void put_delta(struct render *r, const char *s)
{
    size_t n = strlen(s);
    if (!r->tty_err) {
        fwrite(s, 1, n, stderr);
        return;
    }
    char *joined = sbx_xmalloc(r->npend + n + 1);
    memcpy(joined, r->pend, r->npend);
    memcpy(joined + r->npend, s, n);
    size_t total = r->npend + n, used = 0;
    char *e = sbx_term_escape(joined, total, 1, &used);
    fputs(e, stderr);
    free(e);
    /* What is left is a valid start of at most 3 bytes. */
    r->npend = total - used < sizeof(r->pend) ? total - used : 0;
    memcpy(r->pend, joined + used, r->npend);
    free(joined);
}

static void flush_delta(struct render *r)
{
    if (r->npend)
        cli_put_safe(stderr, CLI_SAFE_TTY, r->pend, r->npend);
    r->npend = 0;
}

static void print_json(const json_t *v)
{
    char *s = sbx_json_dumps(v, SBX_JSON_COMPACT);
    cli_put_json(stdout, s);
    free(s);
    fputc('\n', stdout);
    flush(stdout);
}

static void end_line(struct render *r)
{
    flush_delta(r);
    if (r->mid_line) {
        fputc('\n', stderr);
        r->mid_line = 0;
    }
}

/* While the model has not begun to answer: a status line on a terminal (after 2 s, so quick
 * answers show nothing), erased when the answer starts or the attempt ends. */
static void on_model_wait(void *data, int64_t waited_ms, int attempt)
{
    struct render *r = data;
    if (r->json || !r->tty_err)
        return;
    run_status_lock(&r->status);
    if (waited_ms >= 2000 && !r->status.shown)
        end_line(r);
    run_status_model_wait(&r->status, waited_ms, attempt);
    run_status_unlock(&r->status);
}

/* After a tool ran (it may have started a server) and at the end: for each --port not yet told
 * of in each sandbox of the run, its host URL once something listens there, on stderr (and as
 * a "port" event with --json). Runs on the run's thread, between its steps. */
static void report_ports(struct render *r)
{
    for (size_t i = 0; r->sr && r->nports && i < sbx_sandbox_run_count(r->sr); i++) {
        const char *id = sbx_sandbox_run_session_id(r->sr, i);
        struct sbx_session *s = NULL;
        struct sbx_error err = SBX_ERROR_INIT;
        for (size_t k = 0; id && k < r->nports; k++) {
            char key[64];
            snprintf(key, sizeof(key), "%s:%d", id, r->ports[k]);
            if (json_object_get(r->ports_done, key))
                continue;
            if (!s && (!r->client || sbx_client_attach(r->client, id, &s, &err) < 0))
                break;
            char *url = NULL;
            if (sbx_session_resolve_port(s, r->ports[k], &url, &err) < 0)
                continue; /* nothing listens yet: try again after the next tool */
            sbx_json_set(r->ports_done, key, json_true());
            if (r->json) {
                json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:s?}", "type", "port", "port",
                                      r->ports[k], "url", url, "sandbox", id, "agent",
                                      sbx_sandbox_run_agent(r->sr, i));
                print_json(o);
                json_decref(o);
            } else {
                end_line(r);
                cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "  port %d of sandbox %s: %s\n",
                                r->ports[k], id, url);
                flush(stderr);
            }
            free(url);
        }
        sbx_session_free(s);
    }
}

static void render_event(const struct sbx_event *ev, struct render *r);

static void on_event(const struct sbx_event *ev, void *data)
{
    struct render *r = data;
    if (ev->type == SBX_EVENT_GUARDRAIL && json_is_true(json_object_get(ev->item, "triggered"))) {
        const char *kind = json_string_value(json_object_get(ev->item, "kind"));
        r->tripwire = kind && strstr(kind, "output") ? CLI_TRIPWIRE_OUTPUT : CLI_TRIPWIRE_INPUT;
    }
    /* Whatever the event prints goes on a line of its own, never onto the status line. */
    run_status_lock(&r->status);
    run_status_clear(&r->status);
    render_event(ev, r);
    if (ev->type == SBX_EVENT_TOOL_OUTPUT)
        report_ports(r); /* after the tool's own line */
    run_status_unlock(&r->status);
}

/* What a running call is shown as on the status line: the tool and its command, or its
 * arguments ("exec_command: npm test"). */
static void tool_label(const struct sbx_event *ev, char *out, size_t size)
{
    const char *tool = ev->tool ? ev->tool : "a tool";
    const char *a = json_string_value(json_object_get(ev->item, "arguments"));
    if (!a)
        a = json_string_value(json_object_get(ev->item, "input"));
    json_t *args = a ? json_loads(a, JSON_DECODE_ANY, NULL) : NULL;
    const char *cmd = json_string_value(json_object_get(args, "cmd"));
    if (!cmd)
        cmd = json_string_value(json_object_get(args, "command"));
    snprintf(out, size, "%s%s%s", tool, cmd || (a && a[0]) ? ": " : "", cmd ? cmd : a ? a : "");
    json_decref(args);
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\t' || *p == '\r')
            *p = ' ';
}

/* A progress line of the run (a tool ran, a handoff, a decision): dimmed where stderr gets
 * colour, so the answer stands out. line ends with a newline; n its length (bounded). */
static void put_dim_line(const char *line, int n, size_t size)
{
    if (n <= 0)
        return;
    size_t len = (size_t)n < size ? (size_t)n : size - 1;
    if (len && line[len - 1] == '\n')
        len--;
    fputs(cli_sgr(CLI_DIM), stderr);
    cli_put_safe(stderr, CLI_SAFE_TTY, line, len);
    fprintf(stderr, "%s\n", cli_sgr(CLI_RESET));
}

static void render_event(const struct sbx_event *ev, struct render *r)
{
    if (r->json) {
        if (ev->type == SBX_EVENT_MODEL_STREAM)
            return;
        json_t *o = sbx_event_to_json(ev);
        if (ev->type == SBX_EVENT_INTERRUPTION && r->state_file)
            sbx_json_set(o, "state", sbx_json_str(r->state_file));
        print_json(o);
        json_decref(o);
        return;
    }
    switch (ev->type) {
    case SBX_EVENT_TOOL_START: {
        char label[RUN_STATUS_LABEL_MAX + 1];
        tool_label(ev, label, sizeof(label));
        run_status_tool_start(&r->status, label);
        break;
    }
    case SBX_EVENT_SANDBOX:
        /* On a terminal, so a person can look inside while the agent works. */
        if (r->tty_err) {
            end_line(r);
            const char *src = json_string_value(json_object_get(ev->item, "source"));
            cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                            "  sandbox %s (agent '%s', %s; look inside: sbx sandbox shell %s)\n",
                            ev->text, ev->agent ? ev->agent : "?", src ? src : "?", ev->text);
        }
        break;
    case SBX_EVENT_TEXT_DELTA:
        put_delta(r, ev->text);
        r->mid_line = ev->text[0] && ev->text[strlen(ev->text) - 1] != '\n';
        r->streamed = 1;
        break;
    case SBX_EVENT_MESSAGE:
        end_line(r);
        if (r->streamed) {
            free(r->shown);
            r->shown = sbx_xstrdup(ev->text ? ev->text : "");
        }
        r->streamed = 0;
        break;
    case SBX_EVENT_TOOL_CALL: {
        const char *id = json_string_value(json_object_get(ev->item, "call_id"));
        json_t *a = json_object_get(ev->item, "arguments");
        if (!a)
            a = json_object_get(ev->item, "input");
        json_t *op = json_object_get(ev->item, "operation");
        const char *ot = json_string_value(json_object_get(op, "type"));
        const char *op_path = json_string_value(json_object_get(op, "path"));
        if (!a && ot && op_path) /* a built-in apply_patch call: show the operation */
            a = json_pack("s++", ot, " ", op_path);
        else
            json_incref(a);
        if (id && json_is_string(a))
            sbx_json_set(r->args, id, json_incref(a));
        json_decref(a);
        break;
    }
    case SBX_EVENT_TOOL_OUTPUT: {
        run_status_tools_done(&r->status);
        end_line(r);
        const char *id = json_string_value(json_object_get(ev->item, "call_id"));
        const char *args = id ? json_string_value(json_object_get(r->args, id)) : NULL;
        const char *out = ev->text ? ev->text : "";
        /* Shell tool answers start with a chunk id and a wall time: show the status line. */
        const char *status = strncmp(out, "Chunk ID:", 9) == 0 ? strstr(out, "\nProcess ") : NULL;
        if (status)
            out = status + 1;
        size_t olen = strcspn(out, "\n");
        char line[1024];
        int n = snprintf(line, sizeof(line), "  tool %s(%.200s) %s %.*s%s (%.1f ms)\n",
                         ev->tool ? ev->tool : "?", args ? args : "", ev->failed ? "failed:" : "->",
                         (int)(olen > 200 ? 200 : olen), out, olen > 200 || out[olen] ? " ..." : "",
                         (double)ev->duration_ns / (double)SBX_NS_PER_MS);
        put_dim_line(line, n, sizeof(line));
        break;
    }
    case SBX_EVENT_HANDOFF: {
        end_line(r);
        char line[512];
        int n = snprintf(line, sizeof(line), "  handoff %s -> %s\n", ev->agent, ev->text);
        put_dim_line(line, n, sizeof(line));
        break;
    }
    case SBX_EVENT_GUARDRAIL: {
        if (!json_is_true(json_object_get(ev->item, "triggered")))
            break;
        end_line(r);
        const char *how = json_string_value(json_object_get(ev->item, "behavior"));
        char line[512];
        int n = snprintf(line, sizeof(line), "  %s guardrail '%s' tripped%s%s%s\n",
                         json_string_value(json_object_get(ev->item, "kind")),
                         json_string_value(json_object_get(ev->item, "guardrail")),
                         ev->tool ? " on " : "", ev->tool ? ev->tool : "",
                         how && strcmp(how, "reject_content") == 0 ? " (the model reads why)" : "");
        put_dim_line(line, n, sizeof(line));
        break;
    }
    case SBX_EVENT_NOTICE:
        end_line(r);
        cli_put_safe(stderr, CLI_SAFE_TTY, "sbx: ", 5);
        cli_put_safe(stderr, CLI_SAFE_TTY, ev->text, strlen(ev->text));
        fputc('\n', stderr);
        break;
    case SBX_EVENT_APPROVAL: {
        /* The prompt's own answers were just typed; say what the others decided. */
        const char *by = json_string_value(json_object_get(ev->item, "by"));
        if (by && strcmp(by, "prompt") == 0)
            break;
        end_line(r);
        const char *why = json_string_value(json_object_get(ev->item, "message"));
        cli_printf_safe(
                stderr, CLI_SAFE_TTY, "  %s %s (call %s, %s)%s%s\n",
                json_is_true(json_object_get(ev->item, "approved")) ? "approved" : "rejected",
                ev->tool ? ev->tool : "?", json_string_value(json_object_get(ev->item, "call_id")),
                by ? by : "?", why ? ": " : "", why ? why : "");
        break;
    }
    case SBX_EVENT_ERROR:
    case SBX_EVENT_FINAL:
    case SBX_EVENT_INTERRUPTION:
        end_line(r);
        break;
    case SBX_EVENT_AGENT_START:
    case SBX_EVENT_TURN_START:
    case SBX_EVENT_MODEL_STREAM:
    case SBX_EVENT_MODEL_DONE:
        break;
    }
    flush(stderr);
}

static int read_stdin(char **out, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, PROMPT_MAX);
    for (;;) {
        int rc = sbx_buf_reserve(&b, 4096, err);
        if (rc < 0) {
            sbx_buf_release(&b);
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "prompt exceeds %zu bytes", PROMPT_MAX);
        }
        ssize_t n = read(0, b.data + b.len, 4096);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            sbx_buf_release(&b);
            return sbx_error_errno(err, errno, "cannot read the prompt from standard input");
        }
        if (n == 0)
            break;
        sbx_buf_setlen(&b, b.len + (size_t)n);
    }
    *out = sbx_buf_detach(&b, NULL);
    return 0;
}

/* One line per snapshot taken (agents sharing a sandbox share one), on stderr and, with json,
 * as a "snapshot" event; the first one is the one exported to a file. Returns how many. */
static size_t report_snapshots(const struct sbx_sandbox_run *sr, const char *out, int json)
{
    const char *file = strcmp(out, "store") == 0 ? NULL : out;
    size_t n = 0;
    for (size_t i = 0; i < sbx_sandbox_run_count(sr); i++) {
        const char *ref = sbx_sandbox_run_snapshot_ref(sr, i),
                   *id = sbx_sandbox_run_session_id(sr, i);
        size_t j;
        if (!ref)
            continue;
        for (j = 0; j < i && strcmp(sbx_sandbox_run_session_id(sr, j), id) != 0; j++)
            ;
        if (j < i)
            continue;
        const char *agent = sbx_sandbox_run_agent(sr, i), *to = n == 0 ? file : NULL;
        if (json) {
            json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s?}", "type", "snapshot", "ref", ref,
                                  "agent", agent, "sandbox", id, "file", to);
            print_json(o);
            json_decref(o);
        }
        if (to)
            fprintf(stderr, "snapshot %s (agent '%s', sandbox %s) exported to '%s'\n", ref, agent,
                    id, to);
        else
            fprintf(stderr, "snapshot %s (agent '%s', sandbox %s)\n", ref, agent, id);
        n++;
    }
    return n;
}

/* A session state file (sbx sandbox state ID > FILE). */
static int read_session_state(const char *path, json_t **out, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_SESSION_STATE_MAX);
    json_t *doc = NULL;
    int rc = sbx_fs_read_path(path, SBX_SESSION_STATE_MAX, &b, err);
    /* The Agents SDK's SandboxSessionState: its sandbox made again as a local one, which the
     * run then resumes like any saved sandbox. */
    if (rc == 0 && sbx_json_parse(b.data, b.len, NULL, &doc, NULL) == 0 &&
        sbx_sandbox_is_sdk_session(doc))
        rc = sbx_sandbox_from_sdk_session(NULL, doc, out, err);
    else if (rc == 0)
        rc = sbx_session_state_parse(b.data, b.len, out, err);
    json_decref(doc);
    if (rc < 0)
        sbx_error_prefix(err, "session state '%s'", path);
    sbx_buf_release(&b);
    return rc;
}

static int parse_count(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* --state / --resume against the other options. Returns CLI_OK or CLI_USAGE after printing. */
static int check_run_state_options(struct cli_run_state *rs, const char *state_file,
                                   const struct sbx_run_config *scfg,
                                   const char *session_state_path, int nargs)
{
    if (state_file && rs->resume && strcmp(state_file, rs->path) != 0)
        return cli_usage("run ", "--resume FILE saves the run to FILE again; --state cannot "
                                 "name another file");
    if (state_file)
        rs->path = state_file;
    if (!rs->resume && rs->allow_agent_change)
        return cli_usage("run ", "--allow-agent-change continues a saved run: it needs --resume "
                                 "FILE");
    if (cli_run_state_resolve(rs) != CLI_OK)
        return CLI_USAGE;
    if (!rs->resume)
        return nargs ? CLI_OK
                     : cli_usage("run ", "missing prompt (give '-' to read it from standard "
                                         "input)");
    if (nargs)
        return cli_usage("run ", "--resume continues the saved run: give no prompt");
    const char *other = scfg->manifest_path  ? "--manifest"
                        : scfg->session_id   ? "--session"
                        : scfg->snapshot     ? "--snapshot"
                        : session_state_path ? "--session-state"
                                             : NULL;
    if (other)
        return cli_usage("run ",
                         "--resume continues the saved run in its own sandboxes; it "
                         "cannot be used with %s",
                         other);
    return CLI_OK;
}

/* A resumed run takes the options it was started with unless given again, except that the
 * API key never goes to a model server named only by the state file: a state is a file anyone
 * could have written (its digest is no signature), so a saved base URL is taken as it is only
 * when no key would be sent or it is the one OPENAI_BASE_URL names; else --base-url must say
 * it. Returns CLI_OK or CLI_USAGE after saying so. */
static int saved_options(const struct cli_run_state *rs, const char **model_name,
                         struct sbx_model_options *mopt, int api_given,
                         struct sbx_run_options *ropt, struct sbx_run_config *scfg)
{
    const json_t *cli = cli_run_state_saved_options(rs);
    const char *api = json_string_value(json_object_get(cli, "api"));
    if (!cli)
        return CLI_OK;
    const char *saved_url = json_string_value(json_object_get(cli, "base_url"));
    const char *key = getenv("OPENAI_API_KEY"), *env_url = getenv("OPENAI_BASE_URL");
    const char *model =
            *model_name ? *model_name : json_string_value(json_object_get(cli, "model"));
    int replay = model && strncmp(model, "replay:", 7) == 0;
    if (!mopt->base_url && saved_url && !replay && key && key[0] &&
        !(env_url && strcmp(env_url, saved_url) == 0))
        return cli_usage("run ",
                         "the saved run used the model server '%s': give --base-url '%s' to "
                         "resume against it (sbx does not send your API key to a server that "
                         "only a state file names)",
                         saved_url, saved_url);
    if (!*model_name)
        *model_name = json_string_value(json_object_get(cli, "model"));
    if (!api_given && api)
        mopt->api = strcmp(api, "chat") == 0 ? SBX_MODEL_API_CHAT : SBX_MODEL_API_RESPONSES;
    if (!mopt->base_url)
        mopt->base_url = json_string_value(json_object_get(cli, "base_url"));
    if (json_is_true(json_object_get(cli, "use_previous_response_id")))
        ropt->use_previous_response_id = 1;
    if (!ropt->conversation)
        ropt->conversation = json_string_value(json_object_get(cli, "conversation"));
    if (json_is_false(json_object_get(cli, "stream")))
        mopt->no_stream = 1;
    if (json_is_true(json_object_get(cli, "all_agents")))
        scfg->all_agents = 1;
    return CLI_OK;
}

/* The run state's "meta": what `sbx run --resume` needs to run the same way. */
static json_t *run_meta(const char *agent_path, const char *model_name,
                        const struct sbx_model_options *mopt, const struct sbx_run_options *ropt,
                        const struct sbx_run_config *scfg)
{
    char *abs = agent_path ? realpath(agent_path, NULL) : NULL;
    json_t *cli = json_object();
    sbx_json_set(cli, "agent_file", abs ? sbx_json_str(abs) : json_null());
    sbx_json_set(cli, "model", model_name ? sbx_json_str(model_name) : json_null());
    sbx_json_set(cli, "api", sbx_json_str(mopt->api == SBX_MODEL_API_CHAT ? "chat" : "responses"));
    sbx_json_set(cli, "base_url", mopt->base_url ? sbx_json_str(mopt->base_url) : json_null());
    sbx_json_set(cli, "use_previous_response_id",
                 json_boolean(ropt->use_previous_response_id != 0));
    sbx_json_set(cli, "max_turns", ropt->max_turns ? json_integer(ropt->max_turns) : json_null());
    sbx_json_set(cli, "conversation",
                 ropt->conversation ? sbx_json_str(ropt->conversation) : json_null());
    sbx_json_set(cli, "stream", json_boolean(!mopt->no_stream));
    sbx_json_set(cli, "all_agents", json_boolean(scfg->all_agents != 0));
    free(abs);
    return json_pack("{s:o}", "cli", cli);
}

static void use_run_state(struct cli_run_state *rs, struct sbx_run_config *scfg,
                          struct sbx_run_options *ropt, const json_t *agent_files,
                          const json_t *meta)
{
    scfg->resumable = 1;
    ropt->checkpoint = cli_run_state_checkpoint;
    ropt->checkpoint_data = rs;
    ropt->agent_files = agent_files;
    ropt->meta = meta;
    if (!rs->resume)
        return;
    ropt->resume = rs->doc;
    ropt->decisions = json_object_size(rs->decisions) ? rs->decisions : NULL;
    const json_t *sandbox = json_object_get(rs->doc, "sandbox");
    if (json_is_object(sandbox))
        scfg->run_state_sandbox = sandbox;
}

static int session_probe(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    struct sbx_session *s = NULL;
    int rc = sbx_client_attach(c, id, &s, err);
    sbx_session_free(s);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The command: parse -> check -> prepare -> build the run configuration -> run -> report */

enum {
    OPT_BASE = 256,
    OPT_API,
    OPT_MAXTURNS,
    OPT_JSON,
    OPT_RECORD,
    OPT_NOSTREAM,
    OPT_TIMEOUT,
    OPT_DEADLINE,
    OPT_RETRIES,
    OPT_PREVID,
    OPT_MANIFEST,
    OPT_SESSION,
    OPT_SESSION_STATE,
    OPT_SNAPSHOT,
    OPT_SNAPOUT,
    OPT_KEEP,
    OPT_SHARE,
    OPT_CONVERSATION,
    OPT_PASS,
    OPT_RUNSTATE,
    OPT_RESUME,
    OPT_DECISION,
    OPT_AGENTCHANGE,
    OPT_NOMEM,
    OPT_PORT,
    OPT_TRACE,
    OPT_HOSTTOOLS,
    OPT_COLOR,
    OPT_STORE,
    OPT_VARS,
};

/* run's own options; the sandbox's provider and options follow (cli/options.c). */
static const struct option run_options[] = {
        {"agent", required_argument, NULL, 'a'},
        {"model", required_argument, NULL, 'm'},
        {"base-url", required_argument, NULL, OPT_BASE},
        {"api", required_argument, NULL, OPT_API},
        {"max-turns", required_argument, NULL, OPT_MAXTURNS},
        {"json", no_argument, NULL, OPT_JSON},
        {"record", required_argument, NULL, OPT_RECORD},
        {"no-stream", no_argument, NULL, OPT_NOSTREAM},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"deadline", required_argument, NULL, OPT_DEADLINE},
        {"retries", required_argument, NULL, OPT_RETRIES},
        {"use-previous-response-id", no_argument, NULL, OPT_PREVID},
        {"manifest", required_argument, NULL, OPT_MANIFEST},
        {"session", required_argument, NULL, OPT_SESSION},
        {"session-state", required_argument, NULL, OPT_SESSION_STATE},
        {"snapshot", required_argument, NULL, OPT_SNAPSHOT},
        {"snapshot-out", required_argument, NULL, OPT_SNAPOUT},
        {"store", required_argument, NULL, OPT_STORE},
        {"keep", no_argument, NULL, OPT_KEEP},
        {"share", no_argument, NULL, OPT_SHARE},
        {"conversation", required_argument, NULL, OPT_CONVERSATION},
        {"pass-secret", required_argument, NULL, OPT_PASS},
        {"state", required_argument, NULL, OPT_RUNSTATE},
        {"resume", required_argument, NULL, OPT_RESUME},
        {"approve", required_argument, NULL, OPT_DECISION},
        {"reject", required_argument, NULL, OPT_DECISION},
        {"reason", required_argument, NULL, OPT_DECISION},
        {"approve-always", required_argument, NULL, OPT_DECISION},
        {"reject-always", required_argument, NULL, OPT_DECISION},
        {"approve-all", no_argument, NULL, OPT_DECISION},
        {"allow-agent-change", no_argument, NULL, OPT_AGENTCHANGE},
        {"no-memory-update", no_argument, NULL, OPT_NOMEM},
        {"allow-host-tools", no_argument, NULL, OPT_HOSTTOOLS},
        {"port", required_argument, NULL, OPT_PORT},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"trace-otlp", required_argument, NULL, OPT_TRACE},
        {"trace-parent", required_argument, NULL, OPT_TRACE},
        {"trace-content", no_argument, NULL, OPT_TRACE},
        {"trace-openai", no_argument, NULL, OPT_TRACE},
        {"var", required_argument, NULL, OPT_VARS},
        {"var-secret", required_argument, NULL, OPT_VARS},
        {"vars-file", required_argument, NULL, OPT_VARS},
        {"workflow", required_argument, NULL, OPT_VARS},
        {"group-id", required_argument, NULL, OPT_VARS},
        {"trace-metadata", required_argument, NULL, OPT_VARS},
        {"color", required_argument, NULL, OPT_COLOR},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
};

/* Everything one `sbx run` holds: what the command line says, then what it made. Released by
 * run_release whatever step failed. */
struct run {
    struct sbx_model_options mopt;
    struct sbx_run_options ropt;
    struct sbx_run_config scfg;
    struct render rd;
    struct cli_trace trace;
    struct cli_vars vars;
    struct cli_run_state rs;
    struct cli_prompt prompt_ui;
    struct cli_sandbox sb;
    struct sbx_strv pass;
    struct sbx_strv secrets; /* every secret value the run knows: scrubbed from what it writes */
    const char *agent_path, *model_name, *session_state_path, *runstate_path, *prompt_arg;
    const char *store; /* --store URL: --snapshot comes from there, --snapshot-out goes there */
    char *pulled;      /* the reference --snapshot was pulled as */
    int nargs, api_given, no_memory_update, sandbox_done, allow_host_tools;

    struct sbx_agent_file *file;
    struct sbx_agent *agent, *own_agent;
    struct sbx_model *model;
    struct sbx_run_result *res;
    struct sbx_sandbox_run *sr;
    struct sbx_client *client, *port_client;
    int client_from_options; /* client was made from sb's provider and options */
    struct sbx_conversation_store *conv;
    char *prompt;
    json_t *input, *session_state, *agent_files, *meta;
    json_t *saved_record; /* the locator options of a resumed sandbox's record */
    /* A step that returns CLI_FAIL with this set has it printed once, at the end. */
    struct sbx_error err;
};

/* One option of run's own (c as getopt_long returned it, name its long name or NULL). Returns
 * CLI_OK or the status of a usage error it printed. */
static int run_option(struct run *r, int c, const char *name, const char *arg)
{
    switch (c) {
    case OPT_COLOR:
        if (cli_color_set(arg) < 0)
            return cli_usage("run ", "--color is auto, always or never, not '%s'", arg);
        return CLI_OK;
    case OPT_PASS:
        return cli_pass_secret(arg, &r->pass) == 1 ? CLI_OK : CLI_USAGE;
    case OPT_RUNSTATE:
        r->runstate_path = arg;
        return CLI_OK;
    case OPT_RESUME:
        r->rs.path = arg;
        r->rs.resume = 1;
        return CLI_OK;
    case OPT_DECISION:
        return cli_run_state_flag(&r->rs, name, arg) == 1 ? CLI_OK : CLI_USAGE;
    case OPT_AGENTCHANGE:
        r->rs.allow_agent_change = 1;
        return CLI_OK;
    case 'a':
        r->agent_path = arg;
        return CLI_OK;
    case 'm':
        r->model_name = arg;
        return CLI_OK;
    case OPT_BASE:
        r->mopt.base_url = arg;
        return CLI_OK;
    case OPT_API:
        if (cli_parse_api(arg, &r->mopt.api) < 0)
            return cli_usage("run ", "--api must be 'responses' or 'chat', not '%s'", arg);
        r->api_given = 1;
        return CLI_OK;
    case OPT_MAXTURNS:
        if (parse_count(arg, 1, 1000000, &r->ropt.max_turns) < 0)
            return cli_usage("run ", "--max-turns must be a positive integer, not '%s'", arg);
        return CLI_OK;
    case OPT_JSON:
        r->rd.json = 1;
        return CLI_OK;
    case OPT_RECORD:
        r->mopt.record_path = arg;
        return CLI_OK;
    case OPT_NOSTREAM:
        r->mopt.no_stream = 1;
        return CLI_OK;
    case OPT_PREVID:
        r->ropt.use_previous_response_id = 1;
        return CLI_OK;
    case OPT_HOSTTOOLS:
        r->allow_host_tools = 1;
        return CLI_OK;
    case OPT_NOMEM:
        r->no_memory_update = 1;
        return CLI_OK;
    case OPT_TRACE:
        cli_trace_option(&r->trace, name, arg);
        return CLI_OK;
    case OPT_VARS:
        return cli_vars_option(&r->vars, name, arg) == 1 ? CLI_OK : CLI_USAGE;
    default:
        return -1; /* not one of these */
    }
}

/* The options of run's model and sandbox configuration. */
static int run_config_option(struct run *r, int c, const char *arg)
{
    int n;
    struct sbx_error err = SBX_ERROR_INIT;
    switch (c) {
    case OPT_TIMEOUT:
        if (sbx_duration_parse_ms(arg, &r->mopt.timeout_ms) < 0 || r->mopt.timeout_ms <= 0)
            return cli_usage("run ", "--timeout must be a duration like 30s, not '%s'", arg);
        return CLI_OK;
    case OPT_DEADLINE:
        if (sbx_duration_parse_ms(arg, &r->mopt.deadline_ms) < 0 || r->mopt.deadline_ms <= 0)
            return cli_usage("run ", "--deadline must be a duration like 5m, not '%s'", arg);
        return CLI_OK;
    case OPT_RETRIES:
        if (parse_count(arg, 0, 100, &n) < 0)
            return cli_usage("run ", "--retries must be an integer 0 to 100, not '%s'", arg);
        r->mopt.retries = n == 0 ? -1 : n;
        return CLI_OK;
    case OPT_MANIFEST:
        r->scfg.manifest_path = arg;
        return CLI_OK;
    case OPT_SESSION:
        r->scfg.session_id = arg;
        return CLI_OK;
    case OPT_SESSION_STATE:
        r->session_state_path = arg;
        return CLI_OK;
    case OPT_SNAPSHOT:
        r->scfg.snapshot = arg;
        return CLI_OK;
    case OPT_STORE:
        if (!sbx_snapshot_remote_is_url(arg))
            return cli_usage("run ", "--store takes a URL (s3://, gs://, azure://), not '%s'", arg);
        r->store = arg;
        return CLI_OK;
    case OPT_SNAPOUT:
        if (!arg[0])
            return cli_usage("run ", "--snapshot-out needs 'store' or a file name");
        r->scfg.snapshot_out = arg;
        return CLI_OK;
    case OPT_KEEP:
        r->scfg.keep = 1;
        return CLI_OK;
    case OPT_SHARE:
        r->scfg.share = 1;
        return CLI_OK;
    case OPT_CONVERSATION:
        if (sbx_conversation_name_check(arg, &err) < 0)
            return cli_usage("run ", "--conversation: %s", err.msg);
        r->ropt.conversation = arg;
        return CLI_OK;
    case OPT_PORT:
        if (parse_count(arg, 1, 65535, &n) < 0)
            return cli_usage("run ", "--port wants a port number 1 to 65535, not '%s'", arg);
        if (r->rd.nports >= CLI_MAX_PORTS)
            return cli_usage("run ", "at most %d --port options", CLI_MAX_PORTS);
        r->rd.ports[r->rd.nports++] = n;
        return CLI_OK;
    default:
        return cli_usage("run ", "invalid option");
    }
}

static int parse_args(struct run *r, int argc, char **argv)
{
    char shortopts[64];
    const struct option *longopts =
            cli_sandbox_longopts(run_options, "+a:m:h", shortopts, sizeof(shortopts));
    int c, li = 0, rc = CLI_OK;
    if (cli_long_options_exact(argc, argv, shortopts, longopts, "run ") != CLI_OK)
        return CLI_USAGE;
    optind = 1;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, shortopts, longopts, &li)) != -1) {
        const char *name = c > 255 && c == longopts[li].val ? longopts[li].name : NULL;
        if (c == 'h')
            return cli_help_print_path("run");
        if ((rc = cli_sandbox_getopt(&r->sb, c, optarg, "run ")) != 0) {
            rc = rc == 1 ? CLI_OK : rc;
            continue;
        }
        rc = run_option(r, c, name, optarg);
        if (rc == -1)
            rc = run_config_option(r, c, optarg);
    }
    r->nargs = argc - optind;
    r->prompt_arg = optind < argc ? argv[optind] : NULL;
    return rc;
}

/* The combinations of options: usage errors before anything is read or made. */
static int check_args(struct run *r)
{
    const struct sbx_run_config *c = &r->scfg;
    int fresh = r->agent_path || c->manifest_path || r->session_state_path || c->snapshot;
    /* Without an agent file now, so that a usage error comes before anything is read; with
     * one, under its sandbox section once it is loaded. */
    int rc = r->agent_path ? CLI_OK : cli_sandbox_finish(&r->sb, NULL, "run ", CLI_SANDBOX_RUN);
    r->sandbox_done = !r->agent_path;
    if (rc != CLI_OK)
        return rc;
    if (r->nargs > 1)
        return cli_usage("run ", "give the prompt as one argument (quote it)");
    if (c->manifest_path && c->session_id)
        return cli_usage("run ", "--manifest makes a fresh sandbox; it cannot be used with "
                                 "--session");
    if (r->session_state_path && (c->session_id || c->manifest_path))
        return cli_usage("run ", "--session-state resumes a sandbox; it cannot be used with %s",
                         c->session_id ? "--session" : "--manifest");
    if (r->store && !c->snapshot && !c->snapshot_out)
        return cli_usage("run ", "--store goes with --snapshot REF (pulled from it first) or "
                                 "--snapshot-out store (pushed to it after)");
    if (c->snapshot && (c->session_id || r->session_state_path))
        return cli_usage("run ", "--snapshot makes a fresh sandbox; it cannot be used with %s",
                         c->session_id ? "--session" : "--session-state");
    if (c->keep && c->session_id)
        return cli_usage("run ", "--keep applies to sandboxes the run creates, not to --session");
    if (r->rd.nports && !r->rs.resume && !fresh && !c->session_id)
        return cli_usage("run ", "--port needs a sandbox: give an agent file (-a), --manifest, "
                                 "--snapshot, --session or --session-state");
    if (c->keep && !r->rs.resume && !fresh)
        return cli_usage("run ", "--keep needs a sandbox: give an agent file (-a), --manifest, "
                                 "--snapshot or --session-state");
    if (c->snapshot_out && !r->rs.resume && !fresh && !c->session_id)
        return cli_usage("run ", "--snapshot-out needs a sandbox: give an agent file (-a), "
                                 "--manifest, --snapshot, --session or --session-state");
    return check_run_state_options(&r->rs, r->runstate_path, &r->scfg, r->session_state_path,
                                   r->nargs);
}

/* A resume without -a: the agent file the state names is a file's say, and the agent file is
 * the run's policy (its approval rules, tools and instructions). It is used only when the
 * person at the terminal says so after seeing it; elsewhere -a must name it. */
static int saved_agent_file(struct run *r)
{
    const char *saved =
            json_string_value(json_object_get(cli_run_state_saved_options(&r->rs), "agent_file"));
    if (r->agent_path || !saved)
        return CLI_OK;
    if (isatty(0) && isatty(2)) {
        char *q = sbx_xasprintf("sbx: the saved run used the agent file '%s': use it?", saved);
        int yes = cli_confirm(q);
        free(q);
        if (yes) {
            r->agent_path = saved;
            return CLI_OK;
        }
    }
    return cli_usage("run ",
                     "give the agent file with -a: the saved run used '%s' (sbx takes the "
                     "agent file of a resumed run from the command line, not from the state "
                     "file)",
                     saved);
}

/* Host commands in the agent files: refused before anything is made unless the command line
 * allows them, and named on stderr when it does. */
static int host_tools(struct run *r)
{
    json_t *list = sbx_agent_file_host_tools(r->file), *t;
    size_t i, n = json_array_size(list);
    int rc = CLI_OK;
    if (n && !r->allow_host_tools) {
        t = json_array_get(list, 0);
        sbx_error_set(&r->err, SBX_E_PERM, 0,
                      "agent file '%s': %s runs '%s' on this machine, outside every "
                      "sandbox: give --allow-host-tools to let the agent file's host tools run",
                      json_string_value(json_object_get(t, "file")),
                      json_string_value(json_object_get(t, "what")),
                      json_string_value(json_object_get(t, "program")));
        rc = CLI_FAIL;
    }
    json_array_foreach(n && rc == CLI_OK ? list : NULL, i, t)
    {
        int mcp = json_is_true(json_object_get(t, "mcp"));
        cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                        "sbx: warning: host %s of '%s' runs '%s' on this machine with "
                        "your user's rights, outside every sandbox, %s\n",
                        json_string_value(json_object_get(t, "what")),
                        json_string_value(json_object_get(t, "file")),
                        json_string_value(json_object_get(t, "program")),
                        mcp ? "for the whole run"
                        : strncmp(json_string_value(json_object_get(t, "what")), "tool '", 6) == 0
                                ? "whenever the model calls it"
                                : "whenever it runs");
    }
    if (rc == CLI_OK)
        sbx_agent_file_allow_host_tools(r->file);
    json_decref(list);
    return rc;
}

/* The prompt, the saved state, the run state, the agent and its sandbox options. */
static int prepare_inputs(struct run *r)
{
    const char *p = r->rs.resume ? NULL : r->prompt_arg;
    int rc;
    if (p && strcmp(p, "-") == 0) {
        if (read_stdin(&r->prompt, &r->err) < 0)
            return CLI_FAIL;
        p = r->prompt;
    }
    if (p && !p[0])
        return cli_usage("run ", "the prompt is empty");
    r->input = p ? sbx_json_str(p) : NULL;
    /* Read before anything is made, so a bad file leaves nothing behind. */
    if (r->session_state_path &&
        read_session_state(r->session_state_path, &r->session_state, &r->err) < 0)
        return CLI_FAIL;
    r->scfg.session_state = r->session_state;
    if (r->rs.path) {
        if (cli_run_state_prepare(&r->rs, &r->err) < 0)
            return CLI_FAIL;
        if ((rc = saved_options(&r->rs, &r->model_name, &r->mopt, r->api_given, &r->ropt,
                                &r->scfg)) != CLI_OK ||
            (rc = saved_agent_file(r)) != CLI_OK)
            return rc;
    }
    if (r->agent_path) {
        if (sbx_agent_file_load(r->agent_path, &r->file, &r->err) < 0)
            return CLI_FAIL;
        r->agent = sbx_agent_file_agent(r->file);
        if ((rc = host_tools(r)) != CLI_OK)
            return rc;
        if (r->rs.resume && sbx_run_state_check_agent_files(r->rs.doc, r->file,
                                                            r->rs.allow_agent_change, &r->err) < 0)
            return CLI_FAIL;
    } else {
        if (sbx_agent_new("assistant", &r->own_agent, &r->err) < 0)
            return CLI_FAIL;
        sbx_agent_set_instructions(r->own_agent, "You are a helpful assistant.");
        r->agent = r->own_agent;
    }
    /* Every agent's templates filled before anything is made: a missing variable is the
     * user's to fix first. */
    cli_vars_resume(&r->vars, cli_run_state_saved_options(&r->rs));
    if (cli_vars_apply(&r->vars, r->agent, r->mopt.api == SBX_MODEL_API_CHAT, &r->err) < 0)
        return CLI_FAIL;
    if (r->sandbox_done)
        return CLI_OK;
    const json_t *sec =
            r->file ? json_object_get(sbx_agent_sandbox_spec(r->agent), "sandbox") : NULL;
    return cli_sandbox_finish(&r->sb, sec, "run ", CLI_SANDBOX_RUN);
}

static int has_policy(struct sbx_agent *a, void *data, struct sbx_error *err)
{
    (void)err;
    if (sbx_agent_needs_approval(a))
        *(int *)data = 1;
    return 0;
}

/* Whether a call of the run may stop it for approval: an agent it can reach has rules. */
static int agent_may_ask(struct sbx_agent *start)
{
    int any = 0;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)sbx_agent_walk(start, has_policy, &any, &err);
    return any;
}

static void end_line_cb(void *data)
{
    struct render *rd = data;
    run_status_lock(&rd->status);
    run_status_clear(&rd->status);
    end_line(rd);
    flush(stderr);
    run_status_unlock(&rd->status);
}

/* Every secret the run knows, for the one scrubber of what it writes (run states, the trace,
 * the conversation, --record, memory files): the model's key, the --pass-secret values, the
 * secrets of the manifests its sandboxes may get, and the provider's credentials. */
static void run_secrets(struct run *r)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *key = getenv("OPENAI_API_KEY");
    if (key && key[0])
        sbx_strv_push(&r->secrets, key);
    (void)sbx_sandbox_run_secrets(&r->scfg, r->agent, &r->secrets, &err);
    if (r->file)
        sbx_agent_file_secret_values(r->file, &r->secrets);
    cli_vars_secrets(&r->vars, &r->secrets);
    for (size_t i = 0; r->sb.options && i < r->sb.info.n_options; i++) {
        const struct sbx_provider_option *o = &r->sb.info.options[i];
        const json_t *ref = json_object_get(r->sb.options, o->key);
        struct sbx_secret *sec = NULL;
        if (o->type != SBX_OPTION_SECRET || !ref ||
            sbx_provider_secret(ref, o->key, &sec, &err) < 0)
            continue;
        const char *v = sbx_secret_reveal(sec, NULL);
        if (v && v[0] && sbx_strv_find(&r->secrets, v) < 0)
            sbx_strv_push(&r->secrets, v);
        sbx_secret_free(sec);
    }
}

/* The model, the conversation store, the trace, the signals and the event rendering. */
static int prepare_run(struct run *r)
{
    /* Without -m, each agent's own model name is sent; this is the fallback. */
    const char *name = cli_model_name(r->model_name);
    r->scfg.pass_secrets = &r->pass;
    run_secrets(r);
    r->scfg.secrets = &r->secrets;
    r->mopt.secrets = &r->secrets;
    r->ropt.secrets = &r->secrets;
    cli_run_state_set_secrets(&r->rs, &r->secrets);
    if (!r->rd.json)
        r->scfg.progress = cli_progress_fn();
    /* The agent files are the user's to fix first: their errors come before the model's
     * (a missing key) and before anything is made. */
    if (r->file && sbx_sandbox_run_check(&r->scfg, r->agent, &r->err) < 0)
        return CLI_FAIL;
    r->mopt.cancel = &interrupted;
    r->mopt.on_wait = on_model_wait;
    r->mopt.on_wait_data = &r->rd;
    if (sbx_model_new(name, &r->mopt, &r->model, &r->err) < 0)
        return CLI_FAIL;
    if (r->ropt.conversation && sbx_conversation_store_open(NULL, &r->conv, &r->err) < 0)
        return CLI_FAIL;
    r->ropt.conversation_store = r->conv;
    r->trace.workflow = r->vars.workflow;
    r->trace.group_id = r->vars.group_id;
    r->trace.metadata = r->vars.metadata;
    /* After the secrets are known (the scrubber's list) and before any sandbox exists. */
    if (cli_trace_start(&r->trace, &r->secrets, &r->err) < 0)
        return CLI_FAIL;
    catch_signals(1);
    start_stdout_watch();
    r->rd.args = json_object();
    r->rd.ports_done = json_object();
    r->rd.tty_out = isatty(1);
    r->rd.tty_err = isatty(2);
    r->rd.status.enabled = r->rd.tty_err && !r->rd.json;
    if (r->rd.status.enabled)
        cli_log_set_hook(run_status_log_hook, &r->rd.status);
    r->ropt.model = r->model;
    r->ropt.model_name =
            r->model_name && strncmp(r->model_name, "replay:", 7) != 0 ? r->model_name : NULL;
    r->ropt.stream = 1;
    r->ropt.on_event = on_event;
    r->ropt.event_data = &r->rd;
    r->ropt.cancel = &interrupted;
    if (!r->rs.path && !r->rs.approve_all && agent_may_ask(r->agent) &&
        cli_run_state_default(&r->rs, &r->err) < 0)
        return CLI_FAIL;
    if (r->rs.path) {
        r->agent_files = r->file ? sbx_agent_file_sources(r->file) : NULL;
        r->meta = run_meta(r->agent_path, r->model_name, &r->mopt, &r->ropt, &r->scfg);
        cli_vars_meta(&r->vars, json_object_get(r->meta, "cli"));
        use_run_state(&r->rs, &r->scfg, &r->ropt, r->agent_files, r->meta);
        r->rd.state_file = r->rs.path;
        r->rs.agent_file = r->agent_path;
    }
    r->ropt.always = json_array_size(r->rs.always) ? r->rs.always : NULL;
    /* On a terminal a call that needs approval is asked about there; the run goes on. */
    if (isatty(0) && isatty(2)) {
        r->prompt_ui.before = end_line_cb;
        r->prompt_ui.before_data = &r->rd;
        r->ropt.ask = cli_approval_prompt;
        r->ropt.ask_data = &r->prompt_ui;
    }
    return CLI_OK;
}

/* The session state a resumed run's sandbox part names first: its own, else its first
 * agent's. NULL: none. */
static const json_t *run_state_session(const json_t *sandbox)
{
    const json_t *st = json_object_get(sandbox, "session_state");
    const char *key;
    json_t *v;
    if (json_is_object(st))
        return st;
    json_object_foreach(json_object_get(sandbox, "sessions_by_agent"), key, v)
    {
        if (json_is_object(json_object_get(v, "session_state")))
            return json_object_get(v, "session_state");
    }
    return NULL;
}

static int str_is(const json_t *j, const char *want)
{
    const char *v = json_string_value(j);
    return v && strcmp(v, want) == 0;
}

/* The client of a saved sandbox of provider sp: through this user's record of it when there is
 * one (the locators its run was started with: a remote run's node and the paths of its
 * certificates, never read from the state file, which anyone could have written), else found
 * as the by-id commands find a provider. Locator flags given now win either way. */
static int saved_client(struct run *r, const char *sp, const json_t *state)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    json_t *rec = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    int rc;
    if (id && sbx_sandbox_record_read(id, &rec, &e) == 0 &&
        str_is(json_object_get(rec, "id"), id) && str_is(json_object_get(rec, "provider"), sp)) {
        rc = cli_client_with(sp, json_object_get(rec, "options"), &r->client, &r->err);
        /* A sandbox rebuilt from its snapshot gets the same record. */
        r->saved_record = json_incref(json_object_get(rec, "options"));
        r->scfg.record_options = r->saved_record;
    } else {
        rc = cli_client_found(sp, 1, &r->client, &r->err);
    }
    json_decref(rec);
    return rc < 0 ? CLI_FAIL : CLI_OK;
}

/* The run configuration: which client makes or finds the sandboxes. */
static int build_config(struct run *r)
{
    struct sbx_run_config *c = &r->scfg;
    /* Plain agents run as before; sandbox agents (or any agent, with --session / --manifest)
     * get their sandbox when they first take a turn. */
    c->all_agents = c->all_agents || c->session_id || c->manifest_path || r->session_state_path ||
                    c->snapshot;
    int sandboxed = r->agent_path || c->all_agents;
    /* --session-state's sandbox, else the one a resumed run state names. */
    const json_t *saved =
            r->session_state ? r->session_state : run_state_session(c->run_state_sandbox);
    const char *sp = json_string_value(json_object_get(saved, "provider"));
    if (sandboxed && !c->session_id && !r->sb.provider && sp &&
        strcmp(sp, cli_sandbox_provider(&r->sb)) != 0) {
        /* A saved sandbox of another provider is resumed through that provider. */
        if (saved_client(r, sp, saved) != CLI_OK)
            return CLI_FAIL;
    } else if (sandboxed && !c->session_id) {
        /* A run that can be continued keeps its sandboxes beyond this process. */
        cli_sandbox_set(&r->sb, "tied", json_boolean(!c->keep && !c->resumable));
        if (cli_sandbox_client(&r->sb, &r->client, &r->err) < 0)
            return CLI_FAIL;
        r->client_from_options = 1;
        c->record_options = r->sb.options;
    }
    /* --session ID: through the client of the provider that has it. */
    if (sandboxed && c->session_id &&
        cli_sandbox_by_id(c->session_id, session_probe, NULL, &r->client, &r->err) < 0)
        return CLI_FAIL;
    c->client = r->client;
    if (sandboxed && sbx_sandbox_run_new(c, &r->sr, &r->err) < 0)
        return CLI_FAIL;
    r->rd.sr = r->sr;
    r->rd.client = r->client;
    if (r->rd.nports && !r->client && sbx_client_new(NULL, NULL, &r->port_client, &r->err) < 0)
        return CLI_FAIL;
    if (r->port_client)
        r->rd.client = r->port_client;
    return CLI_OK;
}

/* The sandboxes a run leaves running (--keep): told of, and recorded so that their ids find
 * them later. */
static void report_kept(struct run *r)
{
    struct sbx_sandbox_run *sr = r->sr;
    report_ports(&r->rd); /* kept sandboxes serve on after the run */
    for (size_t i = 0; sr && i < sbx_sandbox_run_count(sr); i++) {
        if (!sbx_sandbox_run_created(sr, i))
            continue;
        const char *id = sbx_sandbox_run_session_id(sr, i), *agent = sbx_sandbox_run_agent(sr, i);
        if (r->rd.json) {
            json_t *o =
                    json_pack("{s:s, s:s, s:s}", "type", "sandbox_kept", "id", id, "agent", agent);
            print_json(o);
            json_decref(o);
        }
        fprintf(stderr, "kept sandbox %s (agent '%s')\n", id, agent);
        if (r->client_from_options)
            cli_record(&r->sb.info, id, r->sb.options);
    }
}

/* --store with --snapshot-out: each snapshot the run took goes to the remote store too. */
static int push_snapshots(struct run *r)
{
    for (size_t i = 0; i < sbx_sandbox_run_count(r->sr); i++) {
        const char *ref = sbx_sandbox_run_snapshot_ref(r->sr, i);
        size_t j;
        for (j = 0; ref && j < i; j++) {
            const char *other = sbx_sandbox_run_snapshot_ref(r->sr, j);
            if (other && strcmp(other, ref) == 0)
                break;
        }
        if (ref && j == i && cli_snapshot_push_ref(r->store, ref, &r->err) < 0)
            return -1;
    }
    return 0;
}

/* Run, then report: the answer, kept sandboxes, snapshots, why it stopped. */
static int run_and_report(struct run *r)
{
    int run_rc = r->sr ? sbx_sandbox_run(r->sr, r->agent, r->input, &r->ropt, &r->res, &r->err)
                       : sbx_run(r->agent, r->input, &r->ropt, &r->res, &r->err);
    cli_log_set_hook(NULL, NULL);
    run_status_release(&r->rd.status); /* what follows is printed by this thread alone */
    if (r->scfg.keep)
        report_kept(r);
    if (r->sr && r->scfg.snapshot_out &&
        report_snapshots(r->sr, r->scfg.snapshot_out, r->rd.json) == 0 && run_rc == 0) {
        sbx_error_set(&r->err, SBX_E_INVAL, 0,
                      "--snapshot-out: no sandbox agent took a turn, so there was nothing to "
                      "snapshot");
        run_rc = -SBX_E_INVAL;
    }
    if (r->sr && r->scfg.snapshot_out && r->store && push_snapshots(r) < 0 && run_rc == 0)
        run_rc = -(int)r->err.code;
    if (run_rc < 0) {
        sbx_span_set_status(r->trace.run, 0, r->err.msg);
        int rc = r->err.code == SBX_E_MAXTURNS ? CLI_MAXTURNS : CLI_FAIL;
        if (r->err.code == SBX_E_TRIPWIRE && r->rd.tripwire)
            rc = r->rd.tripwire;
        cli_fail(&r->err);
        sbx_error_clear(&r->err);
        if (r->rs.path)
            cli_run_state_report_unfinished(&r->rs);
        return rc;
    }
    if (sbx_run_result_interrupted(r->res)) {
        cli_run_state_report_waiting(&r->rs, r->res);
        return CLI_WAITING;
    }
    cli_run_state_completed(&r->rs);
    /* Where stdout and stderr are one terminal, pipe or file, the streamed answer is already
     * there (a structured one as the model wrote it): printing it again only doubles it.
     * Anywhere else stdout gets it, for scripts. */
    const char *text = sbx_run_result_text(r->res);
    int on_screen = r->rd.shown && same_output() &&
                    (strcmp(r->rd.shown, text) == 0 || sbx_run_result_json(r->res));
    if (!r->rd.json && !on_screen) {
        cli_put_safe(stdout, CLI_SAFE_TTY, text, strlen(text));
        fputc('\n', stdout);
        flush(stdout);
    }
    if (r->sr)
        cli_memory_after_run(r->sr, r->no_memory_update);
    return CLI_OK;
}

static int run_release(struct run *r, int rc)
{
    catch_signals(0);
    if (r->res)
        cli_trace_usage(&r->trace, sbx_run_result_usage(r->res));
    sbx_run_result_free(r->res);
    sbx_sandbox_run_free(r->sr); /* its sandboxes' removal is part of the run's trace */
    cli_trace_finish(&r->trace, NULL);
    sbx_client_free(r->client);
    sbx_conversation_store_free(r->conv);
    sbx_model_free(r->model);
    sbx_agent_file_free(r->file);
    sbx_agent_free(r->own_agent);
    json_decref(r->input);
    json_decref(r->session_state);
    json_decref(r->agent_files);
    json_decref(r->meta);
    json_decref(r->saved_record);
    json_decref(r->rd.args);
    free(r->rd.shown);
    json_decref(r->rd.ports_done);
    sbx_client_free(r->port_client);
    free(r->prompt);
    free(r->pulled);
    cli_log_set_hook(NULL, NULL);
    run_status_release(&r->rd.status);
    /* As shells and docker do: Ctrl-C is 130, any other signal 128+N. */
    if (interrupted)
        rc = 128 + interrupted;
    sbx_strv_release(&r->pass);
    for (size_t i = 0; i < r->secrets.n; i++)
        explicit_bzero(r->secrets.v[i], strlen(r->secrets.v[i]));
    sbx_strv_release(&r->secrets);
    cli_vars_release(&r->vars);
    cli_run_state_release(&r->rs);
    cli_sandbox_release(&r->sb);
    free(r);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    struct run *r = sbx_xcalloc(1, sizeof(*r));
    r->err = (struct sbx_error)SBX_ERROR_INIT;
    sbx_strv_init(&r->pass);
    sbx_strv_init(&r->secrets);
    cli_run_state_init(&r->rs);
    cli_vars_init(&r->vars);
    cli_sandbox_init(&r->sb);
    run_status_init(&r->rd.status, 0);
    int rc = parse_args(r, argc, argv);
    if (rc == CLI_OK)
        rc = check_args(r);
    /* restore straight from a remote store: pulled into the local store first */
    if (rc == CLI_OK && r->store && r->scfg.snapshot) {
        if (cli_snapshot_pull_ref(r->store, r->scfg.snapshot, &r->pulled, &r->err) < 0)
            rc = CLI_FAIL;
        else
            r->scfg.snapshot = r->pulled;
    }
    if (rc == CLI_OK)
        rc = prepare_inputs(r);
    if (rc == CLI_OK)
        rc = prepare_run(r);
    if (rc == CLI_OK)
        rc = build_config(r);
    if (rc == CLI_OK)
        rc = run_and_report(r);
    if (rc == CLI_FAIL && r->err.code != SBX_OK)
        cli_fail(&r->err);
    return run_release(r, rc);
}
