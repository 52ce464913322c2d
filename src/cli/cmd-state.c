/* sbx state show|rm: the run state files `sbx run --state FILE` writes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sbx/capability.h"
#include "sbx/json.h"
#include "sbx/runstate.h"
#include "sbx/sandbox-run.h"
#include "sbx/session.h"
#include "sbx/term.h"

#define SHOWN_MAX 200

/* Text from a model, a tool or the file (which anyone may have written): never an escape
 * sequence, on a terminal or in a pipe. */
static void put_safe(FILE *f, const char *s)
{
    cli_put_safe(f, CLI_SAFE_ALWAYS, s, strlen(s));
}

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* The sandboxes of the state, one per sandbox id: [{"agents": [...], "id", "owned", "status":
 * "live" | "stopped" | "gone" | "unknown", "snapshot"}]. */
static json_t *sandboxes(const json_t *state)
{
    const json_t *by = json_object_get(json_object_get(state, "sandbox"), "sessions_by_agent"), *v;
    json_t *out = json_array(), *list = NULL;
    struct sbx_client *client = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    const char *key;
    if (json_object_size(by) && (sbx_client_new("local", NULL, &client, &err) < 0 ||
                                 sbx_client_list(client, &list, &err) < 0))
        list = NULL;
    json_object_foreach((json_t *)by, key, v)
    {
        const json_t *st = json_object_get(v, "session_state");
        const char *id = str(st, "id");
        json_t *row = NULL, *r;
        size_t i;
        json_array_foreach(out, i, r)
        {
            if (strcmp(str(r, "id"), id) == 0)
                row = r;
        }
        if (row) {
            sbx_json_append(json_object_get(row, "agents"), sbx_json_str(key));
            continue;
        }
        const char *status = list ? "gone" : "unknown";
        json_array_foreach(list, i, r)
        {
            if (strcmp(str(r, "id"), id) == 0)
                status = strcmp(str(r, "status"), "stopped") == 0 ? "stopped" : "live";
        }
        const json_t *snap = json_object_get(st, "snapshot");
        row = json_pack("{s:[s], s:s, s:b, s:s, s:O}", "agents", key, "id", id, "owned",
                        json_is_true(json_object_get(v, "owned")), "status", status, "snapshot",
                        json_is_string(snap) ? snap : json_null());
        sbx_json_append(out, row);
    }
    json_decref(list);
    sbx_client_free(client);
    return out;
}

static json_t *summary(const char *path, const json_t *state)
{
    static const char *const keys[] = {"status",    "start_agent",  "current_agent", "turn",
                                       "max_turns", "usage",        "updated_at",    "pending",
                                       "always",    "final_output", "error",         "tripwire"};
    json_t *o = json_pack("{s:s}", "file", path);
    for (size_t i = 0; i < SBX_ARRAY_LEN(keys); i++) {
        json_t *v = json_object_get(state, keys[i]);
        sbx_json_set(o, keys[i], v ? json_incref(v) : json_null());
    }
    sbx_json_set(o, "sandboxes", sandboxes(state));
    /* What a resume takes from sbx run's meta.cli: the trace identity and the variables (the
     * secret ones by name only). */
    static const char *const cli_keys[] = {"workflow", "group_id", "trace_metadata", "variables",
                                           "secret_variables"};
    const json_t *cli = json_object_get(json_object_get(state, "meta"), "cli");
    for (size_t i = 0; i < SBX_ARRAY_LEN(cli_keys); i++) {
        json_t *v = json_object_get(cli, cli_keys[i]);
        sbx_json_set(o, cli_keys[i], v ? json_incref(v) : json_null());
    }
    return o;
}

/* "workflow:" and "variables:" lines of a run started with them. */
static void print_identity(const json_t *s)
{
    const char *k;
    const json_t *v;
    size_t i;
    if (json_is_string(json_object_get(s, "workflow")) ||
        json_is_string(json_object_get(s, "group_id")) ||
        json_object_size(json_object_get(s, "trace_metadata"))) {
        const char *wf = json_string_value(json_object_get(s, "workflow"));
        const char *g = json_string_value(json_object_get(s, "group_id"));
        char *line = sbx_xasprintf("workflow: %s%s%s", wf ? wf : "sbx run", g ? "  group " : "",
                                   g ? g : "");
        put_safe(stdout, line);
        free(line);
        json_object_foreach((json_t *)json_object_get(s, "trace_metadata"), k, v)
        {
            line = sbx_xasprintf("  %s=%s", k, json_is_string(v) ? json_string_value(v) : "");
            put_safe(stdout, line);
            free(line);
        }
        printf("\n");
    }
    if (!json_object_size(json_object_get(s, "variables")) &&
        !json_array_size(json_object_get(s, "secret_variables")))
        return;
    printf("variables:");
    json_object_foreach((json_t *)json_object_get(s, "variables"), k, v)
    {
        char *line = sbx_xasprintf(" %s", k);
        put_safe(stdout, line);
        free(line);
    }
    json_array_foreach(json_object_get(s, "secret_variables"), i, v)
    {
        const char *name = json_string_value(v);
        char *line = sbx_xasprintf(" %s (secret: give it again)", name ? name : "?");
        put_safe(stdout, line);
        free(line);
    }
    printf("\n");
}

static void print_text(const json_t *s)
{
    const char *status = str(s, "status");
    const json_t *u = json_object_get(s, "usage"), *p, *b;
    size_t i;
    printf("state:    ");
    put_safe(stdout, str(s, "file"));
    printf("\nstatus:   %s%s\n", status,
           strcmp(status, "interrupted") == 0 ? " (waiting for approval)" : "");
    printf("agent:    ");
    put_safe(stdout, str(s, "current_agent"));
    if (strcmp(str(s, "current_agent"), str(s, "start_agent")) != 0) {
        printf(" (started with ");
        put_safe(stdout, str(s, "start_agent"));
        printf(")");
    }
    printf("\nturn:     %lld of %lld\n", (long long)json_integer_value(json_object_get(s, "turn")),
           (long long)json_integer_value(json_object_get(s, "max_turns")));
    printf("usage:    %lld input, %lld output tokens in %lld requests\n",
           (long long)json_integer_value(json_object_get(u, "input_tokens")),
           (long long)json_integer_value(json_object_get(u, "output_tokens")),
           (long long)json_integer_value(json_object_get(u, "requests")));
    printf("updated:  ");
    put_safe(stdout, str(s, "updated_at"));
    printf("\n");
    print_identity(s);
    if (json_array_size(json_object_get(s, "pending")))
        printf("pending:\n");
    json_array_foreach(json_object_get(s, "pending"), i, p)
    {
        const json_t *a = json_object_get(p, "arguments");
        char *args = a ? sbx_json_dumps(a, SBX_JSON_COMPACT) : sbx_xstrdup("");
        size_t n = strlen(args);
        if (n > SHOWN_MAX) {
            n = SHOWN_MAX;
            while (n > 0 && ((unsigned char)args[n] & 0xC0) == 0x80)
                n--;
            memcpy(args + n, " ...", 5);
        }
        char *line = sbx_xasprintf("  %s  %s  %s\n", str(p, "call_id"), str(p, "tool"), args);
        put_safe(stdout, line);
        free(line);
        free(args);
    }
    /* "Always" decisions as the file says; whether a resume takes them is its seal's say. */
    if (json_array_size(json_object_get(s, "always")))
        printf("always:\n");
    json_array_foreach(json_object_get(s, "always"), i, p)
    {
        const char *why = str(p, "message");
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "  %s  %s  (%s)%s%s\n", str(p, "tool"),
                        json_is_true(json_object_get(p, "approved")) ? "approved" : "rejected",
                        str(p, "by"), why[0] ? ": " : "", why);
    }
    if (json_array_size(json_object_get(s, "sandboxes")))
        printf("sandboxes:\n");
    json_array_foreach(json_object_get(s, "sandboxes"), i, b)
    {
        const json_t *agents = json_object_get(b, "agents"), *a;
        size_t k;
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "  %s  %s  %s  agent", str(b, "id"),
                        str(b, "status"),
                        json_is_true(json_object_get(b, "owned")) ? "owned" : "attached");
        printf("%s", json_array_size(agents) > 1 ? "s" : "");
        json_array_foreach(agents, k, a)
        {
            printf("%s'", k ? ", " : " ");
            put_safe(stdout, json_string_value(a));
            printf("'");
        }
        const char *snap = str(b, "snapshot");
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%s%s\n", snap[0] ? "  snapshot " : "", snap);
    }
    if (json_is_string(json_object_get(s, "final_output"))) {
        printf("final output:\n");
        put_safe(stdout, str(s, "final_output"));
        printf("\n");
    }
    if (json_is_string(json_object_get(s, "error"))) {
        printf("error:    ");
        put_safe(stdout, str(s, "error"));
        printf("\n");
    }
    const json_t *tw = json_object_get(s, "tripwire");
    if (json_is_object(tw)) {
        /* The run ended because this guardrail tripped (its info is in the error). */
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "tripwire: %s guardrail '%s'%s%s%s\n",
                        str(tw, "kind"), str(tw, "guardrail"),
                        str(tw, "tool")[0] ? " on tool '" : "", str(tw, "tool"),
                        str(tw, "tool")[0] ? "'" : "");
    }
}

static int cmd_show(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *path = NULL;
    int as_json = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = 1;
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage("state ", "unknown option '%s'", argv[i]);
        else if (path)
            return cli_usage("state ", "show takes one FILE");
        else
            path = argv[i];
    }
    if (!path)
        return cli_usage("state ", "show needs a FILE");
    json_t *state = NULL;
    if (sbx_run_state_read_file(path, &state, &err) < 0)
        return cli_fail(&err);
    json_t *s = summary(path, state);
    if (as_json) {
        char *out = sbx_json_dumps(s, SBX_JSON_PRETTY);
        cli_put_json(stdout, out);
        putchar('\n');
        free(out);
    } else {
        print_text(s);
    }
    json_decref(s);
    json_decref(state);
    return CLI_OK;
}

static int cmd_rm(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (argc != 1 || (argv[0][0] == '-' && argv[0][1]))
        return cli_usage("state ", "rm takes one FILE");
    const char *path = argv[0];
    json_t *state = NULL;
    /* An unreadable file is left alone: what it names cannot be trusted to be removed. */
    if (sbx_run_state_read_file(path, &state, &err) < 0)
        return cli_fail(&err);
    int rc = sbx_sandbox_run_state_discard(NULL, json_object_get(state, "sandbox"), &err);
    json_decref(state);
    if (rc < 0) {
        sbx_error_prefix(&err, "run state '%s' kept", path);
        return cli_fail(&err);
    }
    if (sbx_run_state_remove_file(path, &err) < 0)
        return cli_fail(&err);
    return CLI_OK;
}

int cmd_run_state(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("state ", "missing subcommand (show, rm, import, export)");
    const char *sub = argv[1];
    if (strcmp(sub, "show") == 0)
        return cmd_show(argc - 2, argv + 2);
    if (strcmp(sub, "rm") == 0)
        return cmd_rm(argc - 2, argv + 2);
    if (strcmp(sub, "import") == 0)
        return cli_state_import(argc - 1, argv + 1);
    if (strcmp(sub, "export") == 0)
        return cli_state_export(argc - 1, argv + 1);
    return cli_usage("state ", "unknown subcommand '%s' (show, rm, import, export)", sub);
}
