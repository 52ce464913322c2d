/* sbx run --state / --resume: writing the run state at every checkpoint, reading it back, the
 * approval decisions and what the user is told (docs/internals/runstate.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/run-state.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/term.h"

#define ARGS_SHOWN 200

void cli_run_state_init(struct cli_run_state *rs)
{
    memset(rs, 0, sizeof(*rs));
    sbx_strv_init(&rs->secrets);
}

void cli_run_state_release(struct cli_run_state *rs)
{
    json_decref(rs->decisions);
    json_decref(rs->doc);
    free(rs->last_reject);
    for (size_t i = 0; i < rs->secrets.n; i++)
        explicit_bzero(rs->secrets.v[i], strlen(rs->secrets.v[i]));
    sbx_strv_release(&rs->secrets);
}

int cli_run_state_decision(struct cli_run_state *rs, const char *opt, const char *arg)
{
    if (strcmp(opt, "reason") == 0) {
        json_t *d = rs->last_reject ? json_object_get(rs->decisions, rs->last_reject) : NULL;
        if (!d)
            return cli_usage("run ", "--reason applies to the --reject before it; give "
                                     "--reject CALL_ID first");
        sbx_json_set(d, "message", sbx_json_str(arg));
        free(rs->last_reject);
        rs->last_reject = NULL;
        return 1;
    }
    int approve = strcmp(opt, "approve") == 0;
    if (!arg[0])
        return cli_usage("run ", "--%s needs a call id%s", opt, approve ? " or 'all'" : "");
    const char *key = approve && strcmp(arg, "all") == 0 ? "*" : arg;
    if (!rs->decisions)
        rs->decisions = json_object();
    if (json_object_get(rs->decisions, key))
        return cli_usage("run ", "call '%s' is decided twice (--approve / --reject)", arg);
    sbx_json_set(rs->decisions, key, json_pack("{s:b}", "approved", approve));
    free(rs->last_reject);
    rs->last_reject = approve ? NULL : sbx_xstrdup(key);
    return 1;
}

int cli_run_state_prepare(struct cli_run_state *rs, struct sbx_error *err)
{
    struct stat st;
    if (rs->resume)
        return sbx_run_state_read_file(rs->path, &rs->doc, err);
    if (lstat(rs->path, &st) == 0)
        return sbx_error_set(err, SBX_E_EXISTS, 0,
                             "'%s' exists: continue it with --resume %s, or remove it", rs->path,
                             rs->path);
    if (errno != ENOENT)
        return sbx_error_errno(err, errno, "cannot use '%s' as the run state file", rs->path);
    return 0;
}

const json_t *cli_run_state_saved_options(const struct cli_run_state *rs)
{
    const json_t *cli = json_object_get(json_object_get(rs->doc, "meta"), "cli");
    return json_is_object(cli) ? cli : NULL;
}

static void add_secret(struct cli_run_state *rs, const char *v)
{
    if (v && v[0] && sbx_strv_find(&rs->secrets, v) < 0)
        sbx_strv_push(&rs->secrets, v);
}

void cli_run_state_add_secrets(struct cli_run_state *rs, const struct sbx_strv *pass)
{
    add_secret(rs, getenv("OPENAI_API_KEY"));
    for (size_t i = 0; pass && i < pass->n; i++)
        add_secret(rs, getenv(pass->v[i]));
}

int cli_run_state_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    struct cli_run_state *rs = data;
    int rc = sbx_run_state_write_file(rs->path, state, &rs->secrets, err);
    if (rc < 0)
        sbx_error_prefix(err, "run state '%s'", rs->path);
    else
        rs->written++;
    return rc;
}

/* At most ARGS_SHOWN bytes of s, not cutting a UTF-8 character. */
static int shown_len(const char *s)
{
    size_t n = strlen(s);
    if (n <= ARGS_SHOWN)
        return (int)n;
    n = ARGS_SHOWN;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return (int)n;
}

void cli_run_state_report_waiting(const struct cli_run_state *rs, const struct sbx_run_result *r)
{
    const json_t *pending = sbx_run_result_interruptions(r), *p;
    int tty = isatty(2);
    size_t i;
    fprintf(stderr, "sbx: waiting for approval (state saved to %s):\n", rs->path);
    json_array_foreach(pending, i, p)
    {
        const json_t *a = json_object_get(p, "arguments");
        char *args = a ? sbx_json_dumps(a, SBX_JSON_COMPACT) : sbx_xstrdup("");
        int n = shown_len(args);
        const char *id = json_string_value(json_object_get(p, "call_id"));
        const char *tool = json_string_value(json_object_get(p, "tool"));
        char *line = sbx_xasprintf("  %s  %s  %.*s%s\n", id ? id : "?", tool ? tool : "?", n, args,
                                   args[n] ? " ..." : "");
        /* Call ids and arguments come from the model: no escape sequences on a terminal. */
        char *safe = tty ? sbx_term_escape(line, strlen(line), 0, NULL) : NULL;
        fputs(safe ? safe : line, stderr);
        free(safe);
        free(line);
        free(args);
    }
    fprintf(stderr,
            "continue with: sbx run --resume %s --approve <call_id>|all, or --reject <call_id> "
            "[--reason TEXT]\n",
            rs->path);
}

void cli_run_state_report_unfinished(const struct cli_run_state *rs)
{
    if (rs->written)
        fprintf(stderr, "sbx: the run can be continued: sbx run --resume %s\n", rs->path);
}
