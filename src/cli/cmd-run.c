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
#include "sbx/capability.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/sandbox-run.h"
#include "sbx/strv.h"
#include "sbx/term.h"
#include "sbx/time.h"

#define PROMPT_MAX   ((size_t)1 << 20)
#define CLI_MAXTURNS 3

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
    int waiting;  /* a "waiting for the model" line is shown */
    int streamed; /* text deltas of the current message were shown */
    char *shown;  /* the last message whose text was streamed to stderr */
};

/* stdout and stderr are the same terminal: what was streamed to one is on the other. */
static int same_terminal(void)
{
    struct stat a, b;
    return isatty(1) && isatty(2) && fstat(1, &a) == 0 && fstat(2, &b) == 0 && S_ISCHR(a.st_mode) &&
           S_ISCHR(b.st_mode) && a.st_rdev == b.st_rdev;
}

/* Text from the model (or a tool) to f: escaped on a terminal, the exact bytes otherwise. */
static void put_text(FILE *f, int tty, const char *s, size_t n)
{
    if (!tty) {
        fwrite(s, 1, n, f);
        return;
    }
    char *e = sbx_term_escape(s, n, 0, NULL);
    fputs(e, f);
    free(e);
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
        put_text(stderr, r->tty_err, r->pend, r->npend);
    r->npend = 0;
}

static void print_json(const json_t *v)
{
    char *s = sbx_json_dumps(v, SBX_JSON_COMPACT);
    /* JSON escapes C0 controls; C1 controls (U+0080..U+009F, which some terminals obey) are
     * escaped too: a JSON line carries no control character, wherever it ends up. */
    for (const char *p = s; *p; p++) {
        if ((unsigned char)p[0] == 0xC2 && (unsigned char)p[1] >= 0x80 &&
            (unsigned char)p[1] <= 0x9F) {
            printf("\\u%04x", (unsigned char)p[1]);
            p++;
        } else {
            fputc(*p, stdout);
        }
    }
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

/* While the model has not begun to answer: a progress line on a terminal (after 2 s, so quick
 * answers show nothing), erased when the answer starts or the attempt ends. */
static void on_model_wait(void *data, int64_t waited_ms, int attempt)
{
    struct render *r = data;
    if (r->json || !r->tty_err)
        return;
    if (waited_ms < 0) {
        if (r->waiting)
            fputs("\r\033[K", stderr);
        r->waiting = 0;
    } else if (waited_ms >= 2000) {
        if (!r->waiting)
            end_line(r);
        r->waiting = 1;
        fprintf(stderr, "\r\033[K  waiting for the model: %llds", (long long)(waited_ms / 1000));
        if (attempt > 1)
            fprintf(stderr, " (attempt %d)", attempt);
    }
    flush(stderr);
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
                fprintf(stderr, "  port %d of sandbox %s: %s\n", r->ports[k], id, url);
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
    render_event(ev, r);
    if (ev->type == SBX_EVENT_TOOL_OUTPUT)
        report_ports(r); /* after the tool's own line */
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
        if (n > 0)
            put_text(stderr, r->tty_err, line,
                     (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        break;
    }
    case SBX_EVENT_HANDOFF: {
        end_line(r);
        char line[512];
        int n = snprintf(line, sizeof(line), "  handoff %s -> %s\n", ev->agent, ev->text);
        if (n > 0)
            put_text(stderr, r->tty_err, line,
                     (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        break;
    }
    case SBX_EVENT_NOTICE:
        end_line(r);
        put_text(stderr, r->tty_err, "sbx: ", 5);
        put_text(stderr, r->tty_err, ev->text, strlen(ev->text));
        fputc('\n', stderr);
        break;
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
    int rc = sbx_fs_read_path(path, SBX_SESSION_STATE_MAX, &b, err);
    if (rc == 0)
        rc = sbx_session_state_parse(b.data, b.len, out, err);
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
    if (!rs->resume && (json_object_size(rs->decisions) || rs->allow_agent_change))
        return cli_usage("run ", "--approve, --reject and --allow-agent-change continue a saved "
                                 "run: they need --resume FILE");
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
static int saved_options(const struct cli_run_state *rs, const char **agent_path,
                         const char **model_name, struct sbx_model_options *mopt, int api_given,
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
    if (!*agent_path)
        *agent_path = json_string_value(json_object_get(cli, "agent_file"));
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

int cli_parse_api(const char *name, enum sbx_model_api *api)
{
    if (strcmp(name, "responses") == 0)
        *api = SBX_MODEL_API_RESPONSES;
    else if (strcmp(name, "chat") == 0)
        *api = SBX_MODEL_API_CHAT;
    else
        return -1;
    return 0;
}

const char *cli_model_name(const char *given)
{
    const char *name = given ? given : getenv("SBX_MODEL");
    return name && name[0] ? name : "gpt-4.1";
}

static int session_probe(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    struct sbx_session *s = NULL;
    int rc = sbx_client_attach(c, id, &s, err);
    sbx_session_free(s);
    return rc;
}

/* The sandbox options of the command line, kept to be applied over an agent file's. */
struct sandbox_args {
    char name[24][32];
    char *value[24]; /* NULL: a flag */
    size_t n;
    char *held[8]; /* values made from the agent file */
    size_t n_held;
    int done;
};

static int apply_option(struct cli_sandbox_opts *o, const char *name, char *value)
{
    char *pair[] = {(char *)name, value};
    int j = 0, r = cli_sandbox_option(value ? 2 : 1, pair, &j, o);
    return r == 1 ? CLI_OK : r ? r : cli_usage("run ", "unknown sandbox option '%s'", name);
}

/* o from the sandbox section of agent's file (agent NULL: none) under the command line's
 * options: those win, and a --provider other than the file's leaves the file's options out. */
static int sandbox_options(struct cli_sandbox_opts *o, struct sandbox_args *sa,
                           const struct sbx_agent *agent)
{
    static const char *const keys[][2] = {{"provider", "--provider"}, {"image", "--image"},
                                          {"host", "--docker-host"},  {"user", "--user"},
                                          {"network", "--network"},   {"memory", "--memory"},
                                          {"pids", "--pids"},         {"cpus", "--cpus"}};
    const json_t *sec = agent ? json_object_get(sbx_agent_sandbox_spec(agent), "sandbox") : NULL;
    const char *file_provider = json_string_value(json_object_get(sec, "provider"));
    int rc = CLI_OK;
    cli_sandbox_opts_init(o);
    for (size_t i = 0; i < sa->n; i++)
        if (strcmp(sa->name[i], "--provider") == 0 && file_provider &&
            strcmp(sa->value[i], file_provider) != 0)
            sec = NULL;
    for (size_t k = 0; sec && k < SBX_ARRAY_LEN(keys) && rc == CLI_OK; k++) {
        const json_t *v = json_object_get(sec, keys[k][0]);
        if (!v || sa->n_held >= SBX_ARRAY_LEN(sa->held))
            continue;
        char *text = json_is_string(v)    ? sbx_xstrdup(json_string_value(v))
                     : json_is_integer(v) ? sbx_xasprintf("%lld", (long long)json_integer_value(v))
                                          : sbx_xasprintf("%g", json_real_value(v));
        sa->held[sa->n_held++] = text;
        rc = apply_option(o, keys[k][1], text);
    }
    for (size_t i = 0; i < sa->n && rc == CLI_OK; i++)
        rc = apply_option(o, sa->name[i], sa->value[i]);
    if (rc == CLI_OK)
        rc = cli_sandbox_finish(o, "run ");
    if (rc == CLI_OK && strcmp(cli_sandbox_provider(o), "docker") == 0 && !o->docker.image)
        rc = cli_usage("run ", "--provider docker needs --image IMAGE (or image: in the agent "
                               "file's sandbox: section; an image the engine has: sbx never "
                               "pulls)");
    return rc;
}

int cmd_run(int argc, char **argv)
{
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
        OPT_LOCAL,
        OPT_PASS,
        OPT_RUNSTATE,
        OPT_RESUME,
        OPT_DECISION,
        OPT_AGENTCHANGE,
        OPT_NOMEM,
        OPT_PORT,
        OPT_TRACE,
    };
    static const struct option longopts[] = {
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
            {"keep", no_argument, NULL, OPT_KEEP},
            {"share", no_argument, NULL, OPT_SHARE},
            {"conversation", required_argument, NULL, OPT_CONVERSATION},
            {"isolation", required_argument, NULL, OPT_LOCAL},
            {"network", required_argument, NULL, OPT_LOCAL},
            {"memory", required_argument, NULL, OPT_LOCAL},
            {"pids", required_argument, NULL, OPT_LOCAL},
            {"cpus", required_argument, NULL, OPT_LOCAL},
            {"ro", required_argument, NULL, OPT_LOCAL},
            {"rw", required_argument, NULL, OPT_LOCAL},
            {"port-bind", required_argument, NULL, OPT_LOCAL},
            {"allow-port", required_argument, NULL, OPT_LOCAL},
            {"allow-dangerous-grant", required_argument, NULL, OPT_LOCAL},
            {"pass-secret", required_argument, NULL, OPT_PASS},
            {"disk", required_argument, NULL, OPT_LOCAL},
            {"provider", required_argument, NULL, OPT_LOCAL},
            {"image", required_argument, NULL, OPT_LOCAL},
            {"docker-host", required_argument, NULL, OPT_LOCAL},
            {"user", required_argument, NULL, OPT_LOCAL},
            {"cap-add", required_argument, NULL, OPT_LOCAL},
            {"allow-cap-add", no_argument, NULL, OPT_LOCAL},
            {"state", required_argument, NULL, OPT_RUNSTATE},
            {"resume", required_argument, NULL, OPT_RESUME},
            {"approve", required_argument, NULL, OPT_DECISION},
            {"reject", required_argument, NULL, OPT_DECISION},
            {"reason", required_argument, NULL, OPT_DECISION},
            {"allow-agent-change", no_argument, NULL, OPT_AGENTCHANGE},
            {"no-memory-update", no_argument, NULL, OPT_NOMEM},
            {"port", required_argument, NULL, OPT_PORT},
            {"trace", required_argument, NULL, OPT_TRACE},
            {"trace-otlp", required_argument, NULL, OPT_TRACE},
            {"trace-parent", required_argument, NULL, OPT_TRACE},
            {"trace-content", no_argument, NULL, OPT_TRACE},
            {"trace-openai", no_argument, NULL, OPT_TRACE},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model_options mopt = {0};
    struct sbx_run_options ropt = {0};
    struct render rd = {0};
    const char *agent_path = NULL, *model_name = NULL, *session_state_path = NULL;
    struct sbx_agent_file *file = NULL;
    struct sbx_agent *agent = NULL, *own_agent = NULL;
    struct sbx_model *model = NULL;
    struct sbx_run_result *res = NULL;
    struct sbx_run_config scfg = {0};
    struct sbx_sandbox_run *sr = NULL;
    char *prompt = NULL;
    json_t *input = NULL, *session_state = NULL, *agent_files = NULL, *meta = NULL;
    static struct cli_sandbox_opts so;
    struct sandbox_args sa = {0};
    struct sbx_client *client = NULL, *port_client = NULL;
    struct sbx_conversation_store *conv = NULL;
    struct sbx_strv pass;
    struct cli_run_state rs;
    const char *runstate_path = NULL;
    int rc = CLI_FAIL, c, li = 0, api_given = 0, no_memory_update = 0;
    struct cli_trace trace = {0};

    if (cli_long_options_exact(argc, argv, "+a:m:h", longopts, "run ") != CLI_OK)
        return CLI_USAGE;
    sbx_strv_init(&pass);
    cli_run_state_init(&rs);

    optind = 1;
    while ((c = getopt_long(argc, argv, "+a:m:h", longopts, &li)) != -1) {
        switch (c) {
        case OPT_LOCAL:
            if (sa.n >= SBX_ARRAY_LEN(sa.name))
                return cli_usage("run ", "too many sandbox options");
            snprintf(sa.name[sa.n], sizeof(sa.name[0]), "--%s", longopts[li].name);
            sa.value[sa.n++] = optarg;
            break;
        case OPT_PASS: {
            int r = cli_pass_secret(optarg, &pass);
            if (r != 1) {
                rc = r;
                goto out_quiet;
            }
            break;
        }
        case OPT_RUNSTATE:
            runstate_path = optarg;
            break;
        case OPT_RESUME:
            rs.path = optarg;
            rs.resume = 1;
            break;
        case OPT_DECISION: {
            int r = cli_run_state_decision(&rs, longopts[li].name, optarg);
            if (r != 1) {
                rc = r;
                goto out_quiet;
            }
            break;
        }
        case OPT_AGENTCHANGE:
            rs.allow_agent_change = 1;
            break;
        case 'a':
            agent_path = optarg;
            break;
        case 'm':
            model_name = optarg;
            break;
        case OPT_BASE:
            mopt.base_url = optarg;
            break;
        case OPT_API:
            if (cli_parse_api(optarg, &mopt.api) < 0)
                return cli_usage("run ", "--api must be 'responses' or 'chat', not '%s'", optarg);
            api_given = 1;
            break;
        case OPT_MAXTURNS:
            if (parse_count(optarg, 1, 1000000, &ropt.max_turns) < 0)
                return cli_usage("run ", "--max-turns must be a positive integer, not '%s'",
                                 optarg);
            break;
        case OPT_JSON:
            rd.json = 1;
            break;
        case OPT_RECORD:
            mopt.record_path = optarg;
            break;
        case OPT_NOSTREAM:
            mopt.no_stream = 1;
            break;
        case OPT_TIMEOUT:
            if (sbx_duration_parse_ms(optarg, &mopt.timeout_ms) < 0 || mopt.timeout_ms <= 0)
                return cli_usage("run ", "--timeout must be a duration like 30s, not '%s'", optarg);
            break;
        case OPT_DEADLINE:
            if (sbx_duration_parse_ms(optarg, &mopt.deadline_ms) < 0 || mopt.deadline_ms <= 0)
                return cli_usage("run ", "--deadline must be a duration like 5m, not '%s'", optarg);
            break;
        case OPT_RETRIES: {
            int n;
            if (parse_count(optarg, 0, 100, &n) < 0)
                return cli_usage("run ", "--retries must be an integer 0 to 100, not '%s'", optarg);
            mopt.retries = n == 0 ? -1 : n;
            break;
        }
        case OPT_PREVID:
            ropt.use_previous_response_id = 1;
            break;
        case OPT_MANIFEST:
            scfg.manifest_path = optarg;
            break;
        case OPT_SESSION:
            scfg.session_id = optarg;
            break;
        case OPT_SESSION_STATE:
            session_state_path = optarg;
            break;
        case OPT_SNAPSHOT:
            scfg.snapshot = optarg;
            break;
        case OPT_SNAPOUT:
            if (!optarg[0])
                return cli_usage("run ", "--snapshot-out needs 'store' or a file name");
            scfg.snapshot_out = optarg;
            break;
        case OPT_KEEP:
            scfg.keep = 1;
            break;
        case OPT_SHARE:
            scfg.share = 1;
            break;
        case OPT_CONVERSATION:
            if (sbx_conversation_name_check(optarg, &err) < 0)
                return cli_usage("run ", "--conversation: %s", err.msg);
            ropt.conversation = optarg;
            break;
        case OPT_PORT: {
            int port;
            if (parse_count(optarg, 1, 65535, &port) < 0) {
                rc = cli_usage("run ", "--port wants a port number 1 to 65535, not '%s'", optarg);
                goto out_quiet;
            }
            if (rd.nports >= CLI_MAX_PORTS) {
                rc = cli_usage("run ", "at most %d --port options", CLI_MAX_PORTS);
                goto out_quiet;
            }
            rd.ports[rd.nports++] = port;
            break;
        }
        case OPT_NOMEM:
            no_memory_update = 1;
            break;
        case OPT_TRACE:
            cli_trace_option(&trace, longopts[li].name, optarg);
            break;
        case 'h':
            return cli_help_print_path("run");
        default:
            return cli_usage("run ", "invalid option");
        }
    }
    scfg.pass_secrets = &pass;
    if (!rd.json)
        scfg.progress = cli_progress_fn();
    /* Without an agent file now, so that a usage error comes before anything is read; with one,
     * under its sandbox section once it is loaded (once only: the parsers cut values). */
    if (!agent_path && (rc = sandbox_options(&so, &sa, NULL)) != CLI_OK)
        goto out_quiet;
    sa.done = !agent_path;
    rc = CLI_FAIL;
    if (argc - optind > 1)
        return cli_usage("run ", "give the prompt as one argument (quote it)");
    if (scfg.manifest_path && scfg.session_id)
        return cli_usage("run ", "--manifest makes a fresh sandbox; it cannot be used with "
                                 "--session");
    if (session_state_path && (scfg.session_id || scfg.manifest_path))
        return cli_usage("run ", "--session-state resumes a sandbox; it cannot be used with %s",
                         scfg.session_id ? "--session" : "--manifest");
    if (scfg.snapshot && (scfg.session_id || session_state_path))
        return cli_usage("run ", "--snapshot makes a fresh sandbox; it cannot be used with %s",
                         scfg.session_id ? "--session" : "--session-state");
    if (scfg.keep && scfg.session_id)
        return cli_usage("run ", "--keep applies to sandboxes the run creates, not to --session");
    if (rd.nports && !rs.resume && !agent_path && !scfg.manifest_path && !session_state_path &&
        !scfg.snapshot && !scfg.session_id)
        return cli_usage("run ", "--port needs a sandbox: give an agent file (-a), --manifest, "
                                 "--snapshot, --session or --session-state");
    if (scfg.keep && !rs.resume && !agent_path && !scfg.manifest_path && !session_state_path &&
        !scfg.snapshot)
        return cli_usage("run ", "--keep needs a sandbox: give an agent file (-a), --manifest, "
                                 "--snapshot or --session-state");
    if (scfg.snapshot_out && !rs.resume && !agent_path && !scfg.manifest_path &&
        !session_state_path && !scfg.snapshot && !scfg.session_id)
        return cli_usage("run ", "--snapshot-out needs a sandbox: give an agent file (-a), "
                                 "--manifest, --snapshot, --session or --session-state");
    if ((rc = check_run_state_options(&rs, runstate_path, &scfg, session_state_path,
                                      argc - optind)) != CLI_OK)
        goto out_quiet;
    rc = CLI_FAIL;
    const char *p = rs.resume ? NULL : argv[optind];
    if (p && strcmp(p, "-") == 0) {
        if (read_stdin(&prompt, &err) < 0)
            goto out;
        p = prompt;
    }
    if (p && !p[0]) {
        rc = cli_usage("run ", "the prompt is empty");
        goto out;
    }
    /* Read before anything is made, so a bad file leaves nothing behind. */
    if (session_state_path && read_session_state(session_state_path, &session_state, &err) < 0)
        goto out;
    scfg.session_state = session_state;
    if (rs.path) {
        if (cli_run_state_prepare(&rs, &err) < 0)
            goto out;
        if ((rc = saved_options(&rs, &agent_path, &model_name, &mopt, api_given, &ropt, &scfg)) !=
            CLI_OK)
            goto out_quiet;
        rc = CLI_FAIL;
        cli_run_state_add_secrets(&rs, &pass);
    }

    if (agent_path) {
        if (sbx_agent_file_load(agent_path, &file, &err) < 0)
            goto out;
        agent = sbx_agent_file_agent(file);
        if (rs.resume &&
            sbx_run_state_check_agent_files(rs.doc, file, rs.allow_agent_change, &err) < 0)
            goto out;
    } else {
        if (sbx_agent_new("assistant", &own_agent, &err) < 0)
            goto out;
        sbx_agent_set_instructions(own_agent, "You are a helpful assistant.");
        agent = own_agent;
    }
    if (!sa.done && (rc = sandbox_options(&so, &sa, file ? agent : NULL)) != CLI_OK)
        goto out_quiet;
    rc = CLI_FAIL;
    /* Without -m, each agent's own model name is sent; this is the fallback. */
    const char *name = cli_model_name(model_name);
    mopt.cancel = &interrupted;
    mopt.on_wait = on_model_wait;
    mopt.on_wait_data = &rd;
    if (sbx_model_new(name, &mopt, &model, &err) < 0)
        goto out;
    if (ropt.conversation && sbx_conversation_store_open(NULL, &conv, &err) < 0)
        goto out;
    ropt.conversation_store = conv;

    /* After the secrets are known (the scrubber's list) and before any sandbox exists. */
    if (cli_trace_start(&trace, &pass, &err) < 0)
        goto out;
    catch_signals(1);
    start_stdout_watch();

    rd.args = json_object();
    rd.ports_done = json_object();
    rd.tty_out = isatty(1);
    rd.tty_err = isatty(2);
    ropt.model = model;
    ropt.model_name = model_name && strncmp(model_name, "replay:", 7) != 0 ? model_name : NULL;
    ropt.stream = 1;
    ropt.on_event = on_event;
    ropt.event_data = &rd;
    ropt.cancel = &interrupted;
    if (rs.path) {
        agent_files = file ? sbx_agent_file_sources(file) : NULL;
        meta = run_meta(agent_path, model_name, &mopt, &ropt, &scfg);
        use_run_state(&rs, &scfg, &ropt, agent_files, meta);
        rd.state_file = rs.path;
    }
    input = p ? sbx_json_str(p) : NULL;
    /* Plain agents run as before; sandbox agents (or any agent, with --session / --manifest)
     * get their sandbox when they first take a turn. */
    scfg.all_agents = scfg.all_agents || scfg.session_id || scfg.manifest_path ||
                      session_state_path || scfg.snapshot;
    int sandboxed = agent_path || scfg.all_agents;
    if (sandboxed && !scfg.session_id) {
        /* A run that can be continued keeps its sandboxes beyond this process. */
        so.local.tied = !scfg.keep && !scfg.resumable;
        /* A saved docker sandbox is resumed through the engine, as by-id commands find it. */
        const char *sp = json_string_value(json_object_get(session_state, "provider"));
        if (!so.provider && sp && strcmp(sp, "docker") == 0)
            so.provider = "docker";
        if (cli_sandbox_client(&so, &client, &err) < 0)
            goto out;
        scfg.client = client;
    }
    /* --session ID: through the client of the provider that has it. */
    if (sandboxed && scfg.session_id) {
        if (cli_sandbox_by_id(scfg.session_id, session_probe, NULL, &client, &err) < 0)
            goto out;
        scfg.client = client;
    }
    if (sandboxed && sbx_sandbox_run_new(&scfg, &sr, &err) < 0)
        goto out;
    rd.sr = sr;
    rd.client = client;
    if (rd.nports && !client && sbx_client_new("local", NULL, &port_client, &err) < 0)
        goto out;
    if (port_client)
        rd.client = port_client;
    int run_rc = sandboxed ? sbx_sandbox_run(sr, agent, input, &ropt, &res, &err)
                           : sbx_run(agent, input, &ropt, &res, &err);
    if (scfg.keep)
        report_ports(&rd); /* kept sandboxes serve on after the run */
    for (size_t i = 0; sr && scfg.keep && i < sbx_sandbox_run_count(sr); i++) {
        if (!sbx_sandbox_run_created(sr, i))
            continue;
        if (rd.json) {
            json_t *o = json_pack("{s:s, s:s, s:s}", "type", "sandbox_kept", "id",
                                  sbx_sandbox_run_session_id(sr, i), "agent",
                                  sbx_sandbox_run_agent(sr, i));
            print_json(o);
            json_decref(o);
        }
        fprintf(stderr, "kept sandbox %s (agent '%s')\n", sbx_sandbox_run_session_id(sr, i),
                sbx_sandbox_run_agent(sr, i));
    }
    if (sr && scfg.snapshot_out && report_snapshots(sr, scfg.snapshot_out, rd.json) == 0 &&
        run_rc == 0) {
        sbx_error_set(&err, SBX_E_INVAL, 0,
                      "--snapshot-out: no sandbox agent took a turn, so there was nothing to "
                      "snapshot");
        run_rc = -SBX_E_INVAL;
    }
    if (run_rc < 0) {
        sbx_span_set_status(trace.run, 0, err.msg);
        rc = err.code == SBX_E_MAXTURNS ? CLI_MAXTURNS : CLI_FAIL;
        cli_fail(&err);
        if (rs.path)
            cli_run_state_report_unfinished(&rs);
        goto out_quiet;
    }
    if (sbx_run_result_interrupted(res)) {
        cli_run_state_report_waiting(&rs, res);
        rc = CLI_WAITING;
        goto out_quiet;
    }
    /* On one terminal the streamed answer is already on screen (a structured one as the model
     * wrote it): printing it again only doubles it. Anywhere else stdout gets it, for scripts. */
    const char *text = sbx_run_result_text(res);
    int on_screen = rd.shown && same_terminal() &&
                    (strcmp(rd.shown, text) == 0 || sbx_run_result_json(res));
    if (!rd.json && !on_screen) {
        put_text(stdout, rd.tty_out, text, strlen(text));
        fputc('\n', stdout);
        flush(stdout);
    }
    if (sr)
        cli_memory_after_run(sr, no_memory_update);
    rc = CLI_OK;
    goto out_quiet;
out:
    if (rc == CLI_FAIL && err.code != SBX_OK)
        cli_fail(&err);
out_quiet:
    catch_signals(0);
    sbx_run_result_free(res);
    sbx_sandbox_run_free(sr); /* its sandboxes' removal is part of the run's trace */
    cli_trace_finish(&trace, NULL);
    sbx_client_free(client);
    sbx_conversation_store_free(conv);
    sbx_model_free(model);
    sbx_agent_file_free(file);
    sbx_agent_free(own_agent);
    json_decref(input);
    json_decref(session_state);
    json_decref(agent_files);
    json_decref(meta);
    json_decref(rd.args);
    free(rd.shown);
    json_decref(rd.ports_done);
    sbx_client_free(port_client);
    free(prompt);
    if (interrupted && interrupted != SIGINT)
        rc = 128 + interrupted;
    sbx_strv_release(&pass);
    cli_run_state_release(&rs);
    for (size_t i = 0; i < sa.n_held; i++)
        free(sa.held[i]);
    return rc;
}
