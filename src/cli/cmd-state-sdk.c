/* sbx state import / export --sdk: run states of the Agents SDK (docs/internals/runstate.md,
 * "The SDK's RunState"). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run-state.h"
#include "cli/run-vars.h"
#include "sbx/agent.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/runstate.h"
#include "sbx/sandbox-run.h"
#include "sbx/session.h"

#define SDK_STATE_MAX ((size_t)256 << 20)

static int read_json(const char *path, json_t **out, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SDK_STATE_MAX);
    int rc = strcmp(path, "-") == 0 ? sbx_fd_read_all(0, SDK_STATE_MAX, &b, err)
                                    : sbx_fs_read_path(path, SDK_STATE_MAX, &b, err);
    if (rc == 0 && (rc = sbx_json_parse(b.data, b.len, NULL, out, err)) < 0)
        sbx_error_prefix(err, "'%s'", path);
    sbx_buf_release(&b);
    return rc;
}

/* meta.cli of the imported state: what `sbx run --resume` runs it with. */
static json_t *import_meta(const char *agent_path, const char *model, const char *api,
                           const char *base_url)
{
    char *abs = realpath(agent_path, NULL);
    json_t *cli = json_pack("{s:s?, s:s?, s:s, s:s?, s:b, s:n, s:n, s:b, s:b}", "agent_file", abs,
                            "model", model, "api", api ? api : "responses", "base_url", base_url,
                            "use_previous_response_id", 0, "max_turns", "conversation", "stream", 1,
                            "all_agents", 0);
    free(abs);
    return json_pack("{s:o}", "cli", cli);
}

struct import_args {
    const char *file, *agent_path, *out, *model, *api, *base_url;
};

static int import_parse(int argc, char **argv, struct import_args *a)
{
    enum { OPT_BASE_URL = 0x100, OPT_API };
    static const struct option longopts[] = {
            {"agent", required_argument, NULL, 'a'},
            {"output", required_argument, NULL, 'o'},
            {"model", required_argument, NULL, 'm'},
            {"api", required_argument, NULL, OPT_API},
            {"base-url", required_argument, NULL, OPT_BASE_URL},
            {NULL, 0, NULL, 0},
    };
    int c, rc = cli_long_options_exact(argc, argv, "a:o:m:", longopts, "state import ");
    if (rc != CLI_OK)
        return rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "a:o:m:", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            a->agent_path = optarg;
            break;
        case 'o':
            a->out = optarg;
            break;
        case 'm':
            a->model = optarg;
            break;
        case OPT_API:
            a->api = optarg;
            break;
        case OPT_BASE_URL:
            a->base_url = optarg;
            break;
        default:
            return cli_usage("state ", "import: unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return cli_usage("state ", "import takes one FILE (the SDK's RunState JSON, - for stdin)");
    a->file = argv[optind];
    enum sbx_model_api api;
    if (a->api && cli_parse_api(a->api, &api) < 0)
        return cli_usage("state ", "--api must be 'responses' or 'chat', not '%s'", a->api);
    if (!a->agent_path || !a->out)
        return cli_usage("state ", "import needs -a AGENT_FILE (the agents, matched by name) and "
                                   "-o STATE (the sbx run state to write)");
    return CLI_OK;
}

/* Say which decisions for every call of a tool the import carries: they answer calls on
 * resume, sealed with this user's key as the user ran the import. */
static void report_always(const json_t *st)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(st, "always"), i, a)
    {
        cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                        "sbx: the SDK's run state %s every call of '%s': carried as an 'always' "
                        "decision\n",
                        json_is_true(json_object_get(a, "approved")) ? "approves" : "rejects",
                        json_string_value(json_object_get(a, "tool")));
    }
}

/* The state written as the runner writes a checkpoint: atomically, its "always" decisions
 * sealed with this user's run-state key. */
static int write_sealed(const char *path, const json_t *st, struct sbx_error *err)
{
    struct cli_run_state rs;
    cli_run_state_init(&rs);
    rs.path = path;
    int rc = cli_run_state_checkpoint(&rs, st, err);
    cli_run_state_release(&rs);
    return rc;
}

/* sbx state import FILE -a AGENT -o STATE: the SDK's RunState as an sbx run state; the SDK's
 * sandbox, if it has one, made again as an sbx sandbox the state's run owns. */
int cli_state_import(int argc, char **argv)
{
    struct import_args a = {0};
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = import_parse(argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    json_t *sdk = NULL, *st = NULL, *sandbox = NULL, *meta = NULL, *files = NULL;
    struct sbx_agent_file *f = NULL;
    char run_id[33];
    if (read_json(a.file, &sdk, &err) < 0 || sbx_agent_file_load(a.agent_path, &f, &err) < 0 ||
        sbx_random_hex(run_id, 16, &err) < 0)
        goto fail;
    const json_t *sdk_sb = json_object_get(sdk, "sandbox");
    if (sdk_sb && !json_is_null(sdk_sb) &&
        sbx_sandbox_from_sdk(NULL, sdk_sb, sbx_agent_file_agent(f), run_id, &sandbox, &err) < 0)
        goto fail;
    files = sbx_agent_file_sources(f);
    meta = import_meta(a.agent_path, a.model, a.api, a.base_url);
    cli_vars_from_sdk_trace(json_object_get(sdk, "trace"), json_object_get(meta, "cli"));
    struct sbx_run_state_import opt = {
            .start = sbx_agent_file_agent(f),
            .agent_files = files,
            .meta = meta,
            .sandbox = sandbox,
            .run_id = run_id,
    };
    if (sbx_run_state_from_sdk(sdk, &opt, &st, &err) < 0 || write_sealed(a.out, st, &err) < 0)
        goto fail;
    report_always(st);
    size_t np = json_array_size(json_object_get(st, "pending"));
    fprintf(stderr,
            "sbx: imported '%s' (turn %lld, %zu pending call%s) into '%s'; continue with: "
            "sbx run --resume %s -a %s%s\n",
            a.file, (long long)json_integer_value(json_object_get(st, "turn")), np,
            np == 1 ? "" : "s", a.out, a.out, a.agent_path, np ? " --approve <call_id>|all" : "");
    rc = CLI_OK;
    goto out;
fail:
    /* A sandbox made for the state is not left behind by a failed import. */
    if (sandbox)
        sbx_sandbox_run_state_discard(NULL, sandbox, NULL);
    rc = cli_fail(&err);
out:
    json_decref(sdk);
    json_decref(st);
    json_decref(sandbox);
    json_decref(meta);
    json_decref(files);
    sbx_agent_file_free(f);
    return rc;
}

/* sbx state export --sdk STATE [-o FILE]: the run state as the JS SDK's RunState. */
int cli_state_export(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *path = NULL, *out = NULL;
    int sdk = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sdk") == 0)
            sdk = 1;
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_usage("state ", "export: unknown option '%s'", argv[i]);
        else if (path)
            return cli_usage("state ", "export takes one FILE");
        else
            path = argv[i];
    }
    if (!sdk)
        return cli_usage("state ", "export needs --sdk (the Agents SDK's RunState is the one "
                                   "format it writes)");
    if (!path)
        return cli_usage("state ", "export needs a FILE");
    json_t *js = NULL;
    int rc = CLI_OK;
    /* Read as a resume reads it: its "always" approvals only when this user's key seals them. */
    struct cli_run_state rs;
    cli_run_state_init(&rs);
    rs.path = path;
    rs.resume = 1;
    rs.always = json_array();
    if (cli_run_state_prepare(&rs, &err) < 0 ||
        sbx_run_state_to_sdk(rs.doc, rs.always, &js, &err) < 0) {
        rc = cli_fail(&err);
    } else {
        char *text = sbx_json_dumps(js, SBX_JSON_PRETTY);
        if (out) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd < 0 || sbx_fd_write_all(fd, text, strlen(text), &err) < 0 ||
                sbx_fd_write_all(fd, "\n", 1, &err) < 0) {
                if (fd < 0)
                    sbx_error_errno(&err, errno, "cannot create '%s'", out);
                rc = cli_fail(&err);
            }
            sbx_fd_close(&fd);
        } else {
            puts(text);
        }
        free(text);
    }
    cli_run_state_release(&rs);
    json_decref(js);
    return rc;
}
