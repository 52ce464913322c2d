/* The shell capability: exec_command and write_stdin over the session's interactive processes.
 * Names and parameter schemas are the reference's (models are trained on them); the response
 * text is sbx_truncate_format_response's layout. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "capability/capability-internal.h"
#include "sbx/trace.h"
#include "sbx/json.h"
#include "sbx/time.h"
#include "sbx/truncate.h"

#define SHELL_MAX_TOKENS_LIMIT 1000000
#define SHELL_CAPTURE_BYTES    SBX_OUTPUT_DEFAULT_LIMIT

struct shell {
    size_t max_tokens; /* default budget when the model gives none */
    int64_t yield_ms;  /* default exec_command yield */
};

/* The processes exec_command left running, shared by the two tools of one toolset: which
 * were started by a call that needed (and got) approval. Typing into one of those needs
 * approval too. */
#define SESSIONS_MAX 4096
struct shell_sessions {
    atomic_int refs;
    pthread_mutex_t lock;
    int ids[SESSIONS_MAX];
    unsigned char approved[SESSIONS_MAX];
    size_t n;
};

struct shell_tool {
    struct sbx_session *session; /* borrowed: lives as long as the run's agent environment */
    struct shell cfg;
    char user[64]; /* the agent's run_as (a manifest user), "" = the sandbox's default user */
    struct shell_sessions *sessions;
};

static void sessions_note(struct shell_sessions *ss, int id, int approved)
{
    pthread_mutex_lock(&ss->lock);
    size_t i = 0;
    while (i < ss->n && ss->ids[i] != id)
        i++;
    if (i == ss->n && ss->n == SESSIONS_MAX) {
        /* Forget the oldest: a process unknown here needs approval whenever exec_command
         * may. */
        memmove(ss->ids, ss->ids + 1, (SESSIONS_MAX - 1) * sizeof(*ss->ids));
        memmove(ss->approved, ss->approved + 1, SESSIONS_MAX - 1);
        i = --ss->n;
    }
    if (i == ss->n)
        ss->n++;
    ss->ids[i] = id;
    ss->approved[i] = approved != 0;
    pthread_mutex_unlock(&ss->lock);
}

/* 1: started under approval, 0: started without, -1: not started by this run's tools. */
static int sessions_approved(struct shell_sessions *ss, int64_t id)
{
    int r = -1;
    pthread_mutex_lock(&ss->lock);
    for (size_t i = 0; i < ss->n && r < 0; i++)
        if (ss->ids[i] == id)
            r = ss->approved[i];
    pthread_mutex_unlock(&ss->lock);
    return r;
}

static void shell_tool_free_sessions(struct shell_tool *st)
{
    if (st->sessions && atomic_fetch_sub(&st->sessions->refs, 1) == 1) {
        pthread_mutex_destroy(&st->sessions->lock);
        free(st->sessions);
    }
}

static void shell_tool_free(void *p)
{
    shell_tool_free_sessions(p);
    free(p);
}

static const char exec_schema[] =
        "{\"type\":\"object\",\"required\":[\"cmd\"],\"properties\":{"
        "\"cmd\":{\"type\":\"string\",\"minLength\":1,\"description\":\"The shell command to "
        "run.\"},"
        "\"workdir\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"default\":null,"
        "\"description\":\"Directory to run it in, relative to the workspace root (or absolute "
        "under it); the workspace root when omitted.\"},"
        "\"shell\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"default\":null,"
        "\"description\":\"Shell program to run the command with; /bin/sh when omitted.\"},"
        "\"login\":{\"type\":\"boolean\",\"default\":true,\"description\":\"With an explicit "
        "shell, start it as a login shell (-lc instead of -c).\"},"
        "\"tty\":{\"type\":\"boolean\",\"default\":false,\"description\":\"Run the command on a "
        "terminal so it can be written to with write_stdin (REPLs, prompts, Ctrl-C). Without it "
        "stdin is closed and stdout and stderr are merged.\"},"
        "\"yield_time_ms\":{\"type\":\"integer\",\"minimum\":0,\"default\":10000,\"description\":"
        "\"How long to wait for the command before returning its output so far (250 to "
        "30000). A command still running keeps running and gets a session ID.\"},"
        "\"max_output_tokens\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":1},{\"type\":"
        "\"null\"}],\"default\":null,\"description\":\"Most output tokens to return (about 4 "
        "bytes each); the start and the end are kept. Defaults to 10000.\"}}}";

static const char write_schema[] =
        "{\"type\":\"object\",\"required\":[\"session_id\"],\"properties\":{"
        "\"session_id\":{\"type\":\"integer\",\"description\":\"The session ID exec_command "
        "returned for a running command.\"},"
        "\"chars\":{\"type\":\"string\",\"default\":\"\",\"description\":\"Characters to type "
        "(\\\\u0003 is Ctrl-C, \\\\n is Enter). Empty to just collect new output.\"},"
        "\"yield_time_ms\":{\"type\":\"integer\",\"minimum\":0,\"default\":250,\"description\":"
        "\"How long to wait for output after writing (an empty write waits at least 5000).\"},"
        "\"max_output_tokens\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":1},{\"type\":"
        "\"null\"}],\"default\":null,\"description\":\"Most output tokens to return; defaults "
        "to 10000.\"}}}";

static const char fragment[] =
        "- Run shell commands with `exec_command`. Commands start in the workspace root unless "
        "you pass `workdir`.\n"
        "- A command that is still running when `exec_command` returns keeps running: its "
        "response says `Process running with session ID N`. Poll it with `write_stdin` and empty "
        "`chars`, or type into it when it was started with `tty=true`.\n"
        "- To stop a long-running command, start it with `tty=true` and send Ctrl-C "
        "(`\\u0003`) with `write_stdin`.\n"
        "- Output is cut to its start and end when it is long; narrow it with `grep`, `head`, "
        "`tail` or `rg` instead of printing whole large files.";

/* Optional integer argument: absent or null leaves *out. */
static int opt_int(const json_t *args, const char *key, int64_t *out)
{
    json_t *v = json_object_get(args, key);
    if (json_is_integer(v))
        *out = json_integer_value(v);
    return 0;
}

static const char *opt_str(const json_t *args, const char *key)
{
    const char *s = json_string_value(json_object_get(args, key));
    return s && s[0] ? s : NULL;
}

static size_t budget(const struct shell_tool *st, const json_t *args)
{
    int64_t t = 0;
    opt_int(args, "max_output_tokens", &t);
    if (t <= 0)
        return st->cfg.max_tokens;
    return t > SHELL_MAX_TOKENS_LIMIT ? SHELL_MAX_TOKENS_LIMIT : (size_t)t;
}

static int respond(const struct sbx_pty_update *u, int64_t t0, size_t max_tokens,
                   struct sbx_tool_output *out, struct sbx_error *err)
{
    struct sbx_truncate_response r = {
            .wall_time = (double)(sbx_time_mono_ns() - t0) / 1e9,
            .exited = u->exited,
            .exit_code = u->status.code >= 0 ? u->status.code : 128 + u->status.signal,
            .running = !u->exited && u->id > 0,
            .session_id = u->id,
            .output = u->output.data ? u->output.data : "",
            .output_len = u->output.len,
            .max_tokens = max_tokens,
    };
    /* The tool call's span (current on the tool's thread) records how the command ended. */
    if (u->exited)
        sbx_span_set_int(sbx_trace_current(), "sbx.tool.exit_code", r.exit_code);
    return sbx_truncate_format_response(&r, &out->text, err);
}

/* The command's span under the tool call's (the current span on the tool's thread). */
static struct sbx_span *exec_span_start(const char *name, const struct shell_tool *st)
{
    struct sbx_span *span = sbx_span_start(sbx_trace_current(), name, SBX_SPAN_INTERNAL);
    sbx_span_set_str(span, "sbx.sandbox.id", sbx_session_id(st->session));
    return span;
}

static void exec_span_end(struct sbx_span *span, int rc, const struct sbx_pty_update *u,
                          const struct sbx_error *err)
{
    if (rc < 0)
        sbx_span_set_status(span, 0, err->msg);
    else if (u->exited)
        sbx_span_set_int(span, "sbx.sandbox.exit_code",
                         u->status.code >= 0 ? u->status.code : 128 + u->status.signal);
    else
        sbx_span_set_bool(span, "sbx.sandbox.running", 1);
    sbx_span_end(span);
}

static int exec_command(const json_t *args, const struct sbx_tool_call *call,
                        struct sbx_tool_output *out, struct sbx_error *err)
{
    struct shell_tool *st = call->data;
    struct sbx_pty_update u = {0};
    const char *cmd = json_string_value(json_object_get(args, "cmd"));
    const char *shell = opt_str(args, "shell");
    json_t *login_v = json_object_get(args, "login");
    int login = json_is_boolean(login_v) ? json_is_true(login_v) : 1;
    int64_t yield = st->cfg.yield_ms;
    opt_int(args, "yield_time_ms", &yield);
    const char *argv[4] = {shell, login ? "-lc" : "-c", cmd, NULL};
    struct sbx_exec_spec spec = {
            .argv = shell ? argv : NULL,
            .command = shell ? NULL : cmd,
            .cwd = opt_str(args, "workdir"),
            .flags = json_is_true(json_object_get(args, "tty")) ? SBX_EXEC_TTY : 0,
            .output_limit = SHELL_CAPTURE_BYTES,
            .user = st->user[0] ? st->user : NULL,
            .cancel = call->run ? call->run->cancel : NULL,
    };
    if (!cmd || !cmd[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "'cmd' must be a non-empty string");
    int64_t t0 = sbx_time_mono_ns();
    struct sbx_span *span = exec_span_start("sandbox.exec", st);
    sbx_span_set_content(span, "sbx.sandbox.command", cmd, strlen(cmd));
    int rc = sbx_session_pty_start(st->session, &spec, yield, &u, err);
    exec_span_end(span, rc, &u, err);
    if (rc < 0)
        return rc;
    if (!u.exited && u.id > 0)
        sessions_note(st->sessions, u.id, call->approved);
    rc = respond(&u, t0, budget(st, args), out, err);
    sbx_pty_update_release(&u);
    return rc;
}

/* Typing into a process started under approval needs approval too; so does typing into one
 * this run's tools did not start (a resumed run's) when the agent's policy covers
 * exec_command at all. */
static int write_needs_approval(const json_t *args, const struct sbx_tool_call *call)
{
    struct shell_tool *st = call->data;
    int64_t id = 0;
    opt_int(args, "session_id", &id);
    int known = sessions_approved(st->sessions, id);
    if (known >= 0)
        return known;
    return sbx_approval_policy_covers(sbx_agent_needs_approval(call->agent), "exec_command");
}

static int write_stdin(const json_t *args, const struct sbx_tool_call *call,
                       struct sbx_tool_output *out, struct sbx_error *err)
{
    struct shell_tool *st = call->data;
    struct sbx_pty_update u = {0};
    int64_t id = 0, yield = -1;
    opt_int(args, "session_id", &id);
    opt_int(args, "yield_time_ms", &yield);
    const char *chars = json_string_value(json_object_get(args, "chars"));
    size_t n = chars ? json_string_length(json_object_get(args, "chars")) : 0;
    if (id <= 0 || id > 0x7fffffff)
        return sbx_error_set(err, SBX_E_INVAL, 0, "no process with id %lld", (long long)id);
    int64_t t0 = sbx_time_mono_ns();
    struct sbx_span *span = exec_span_start("sandbox.exec_write", st);
    sbx_span_set_int(span, "sbx.sandbox.process", id);
    int rc = sbx_session_pty_write(st->session, (int)id, chars ? chars : "", n, yield,
                                   SHELL_CAPTURE_BYTES, &u, err);
    exec_span_end(span, rc, &u, err);
    if (rc < 0)
        return rc;
    rc = respond(&u, t0, budget(st, args), out, err);
    sbx_pty_update_release(&u);
    return rc;
}

static int new_tool(const char *name, const char *desc, const char *schema, sbx_tool_fn *fn,
                    sbx_tool_approval_fn *approval, struct shell_sessions *ss,
                    const struct shell *cfg, const struct sbx_capability_env *env,
                    struct sbx_tool **out, struct sbx_error *err)
{
    struct sbx_session *s = env->session;
    const char *run_as = env->agent ? json_string_value(json_object_get(
                                              sbx_agent_sandbox_spec(env->agent), "run_as"))
                                    : NULL;
    if (run_as && strlen(run_as) >= sizeof(((struct shell_tool *)NULL)->user))
        return sbx_error_set(err, SBX_E_INVAL, 0, "run_as '%.32s...' is too long", run_as);
    json_t *params = json_loads(schema, 0, NULL);
    if (!params)
        SBX_BUG("shell tool schema does not parse");
    struct shell_tool *st = sbx_xcalloc(1, sizeof(*st));
    st->session = s;
    st->cfg = *cfg;
    st->sessions = ss;
    atomic_fetch_add(&ss->refs, 1);
    if (run_as)
        snprintf(st->user, sizeof(st->user), "%s", run_as);
    struct sbx_function_tool spec = {
            .name = name,
            .description = desc,
            .parameters = params,
            .strict = 1,
            .fn = fn,
            .data = st,
            .free_data = shell_tool_free,
            .needs_approval = approval,
    };
    int rc = sbx_tool_new_function(&spec, out, err);
    json_decref(params);
    return rc;
}

static int shell_tools(struct sbx_capability *c, const struct sbx_capability_env *env,
                       struct sbx_toolset *out, struct sbx_error *err)
{
    const struct shell *cfg = sbx_capability_data(c);
    struct sbx_tool *t = NULL;
    struct shell_sessions *ss = sbx_xcalloc(1, sizeof(*ss));
    atomic_init(&ss->refs, 1);
    pthread_mutex_init(&ss->lock, NULL);
    int rc = new_tool("exec_command",
                      "Runs a shell command in the sandbox workspace and returns its output, or a "
                      "session ID when it is still running after the yield time.",
                      exec_schema, exec_command, NULL, ss, cfg, env, &t, err);
    if (rc == 0) {
        sbx_toolset_add(out, t, 1);
        sbx_tool_unref(t);
        rc = new_tool("write_stdin",
                      "Types characters into a running command started by exec_command (or "
                      "polls it with empty chars) and returns the output since the last call.",
                      write_schema, write_stdin, write_needs_approval, ss, cfg, env, &t, err);
    }
    if (rc == 0) {
        sbx_toolset_add(out, t, 1);
        sbx_tool_unref(t);
    }
    /* The tools hold their own references. */
    struct shell_tool drop = {.sessions = ss};
    shell_tool_free_sessions(&drop);
    return rc;
}

static int shell_instructions(struct sbx_capability *c, const struct sbx_capability_env *env,
                              struct sbx_buf *out, struct sbx_error *err)
{
    (void)c;
    (void)env;
    return sbx_buf_adds(out, fragment, err);
}

static const struct sbx_capability_ops shell_ops = {
        .instructions = shell_instructions,
        .tools = shell_tools,
        .free_data = free,
};

int sbx__capability_shell(const json_t *spec, struct sbx_capability **out, struct sbx_error *err)
{
    static const char *const keys[] = {"type", "max_output_tokens", "default_yield_ms", NULL};
    int64_t tokens = SBX_TRUNCATE_DEFAULT_TOKENS, yield = SBX_PTY_START_YIELD_MS;
    int rc;
    if (spec && ((rc = sbx_json_check_keys(spec, keys, err)) < 0 ||
                 (rc = sbx_json_get_int(spec, "max_output_tokens", 0, &tokens, err)) < 0 ||
                 (rc = sbx_json_get_int(spec, "default_yield_ms", 0, &yield, err)) < 0))
        return rc;
    if (tokens < 1 || tokens > SHELL_MAX_TOKENS_LIMIT)
        return sbx_error_set(err, SBX_E_INVAL, 0, "max_output_tokens must be 1 to %d",
                             SHELL_MAX_TOKENS_LIMIT);
    if (yield < SBX_PTY_YIELD_MIN_MS || yield > SBX_PTY_YIELD_MAX_MS)
        return sbx_error_set(err, SBX_E_INVAL, 0, "default_yield_ms must be %d to %d",
                             SBX_PTY_YIELD_MIN_MS, SBX_PTY_YIELD_MAX_MS);
    struct shell *sh = sbx_xcalloc(1, sizeof(*sh));
    sh->max_tokens = (size_t)tokens;
    sh->yield_ms = yield;
    return sbx_capability_new("shell", &shell_ops, sh, out, err);
}
