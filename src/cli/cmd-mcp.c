/* sbx mcp ls: what an agent file's MCP servers offer (tools, resources, prompts). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "sbx/agent.h"
#include "sbx/json.h"

enum { OPT_ALLOW_HOST = 256, OPT_JSON };

/* One list of a server: "  tools: a, b" (names, or URIs for resources). */
static void print_names(const json_t *d, const char *key, const char *field)
{
    const json_t *list = json_object_get(d, key), *v;
    size_t i;
    if (!list)
        return;
    cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "  %s (%zu):", key, json_array_size(list));
    json_array_foreach((json_t *)list, i, v)
    {
        const char *n = json_string_value(json_object_get(v, field));
        const char *desc = json_string_value(json_object_get(v, "description"));
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "\n    %s%s%.100s", n ? n : "?", desc ? "  " : "",
                        desc ? desc : "");
    }
    fputc('\n', stdout);
}

static void print_servers(const json_t *all)
{
    const json_t *d;
    size_t i;
    json_array_foreach((json_t *)all, i, d)
    {
        const json_t *info = json_object_get(d, "server");
        const char *sname = json_string_value(json_object_get(info, "name"));
        const char *sver = json_string_value(json_object_get(info, "version"));
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%s (agent '%s', %s)%s%s%s%s\n",
                        json_string_value(json_object_get(d, "name")),
                        json_string_value(json_object_get(d, "agent")),
                        json_string_value(json_object_get(d, "transport")), sname ? ": " : "",
                        sname ? sname : "", sver ? " " : "", sver ? sver : "");
        const char *e = json_string_value(json_object_get(d, "error"));
        if (e) {
            cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "  not listed: %s\n", e);
            continue;
        }
        print_names(d, "tools", "name");
        print_names(d, "resources", "uri");
        print_names(d, "prompts", "name");
    }
}

static int mcp_ls(int argc, char **argv)
{
    static const struct option longopts[] = {
            {"agent", required_argument, NULL, 'a'},
            {"allow-host-tools", no_argument, NULL, OPT_ALLOW_HOST},
            {"json", no_argument, NULL, OPT_JSON},
            {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int c, allow = 0, as_json = 0;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    if (cli_long_options_exact(argc, argv, "+a:", longopts, "mcp ls ") != CLI_OK)
        return CLI_USAGE;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+a:", longopts, NULL)) != -1) {
        if (c == 'a')
            path = optarg;
        else if (c == OPT_ALLOW_HOST)
            allow = 1;
        else if (c == OPT_JSON)
            as_json = 1;
        else
            return cli_usage("mcp ls ", "invalid option");
    }
    if (!path && argc - optind == 1)
        path = argv[optind++];
    if (!path || argc != optind)
        return cli_usage("mcp ls ", "give one agent file");
    if (sbx_agent_file_load(path, &f, &err) < 0) {
        cli_fail(&err);
        return CLI_FAIL;
    }
    if (allow)
        sbx_agent_file_allow_host_tools(f);
    json_t *all = sbx_agent_file_mcp_describe(f);
    if (as_json) {
        char *s = sbx_json_dumps(all, SBX_JSON_PRETTY);
        puts(s);
        free(s);
    } else if (!json_array_size(all)) {
        printf("no MCP servers\n");
    } else {
        print_servers(all);
    }
    json_decref(all);
    sbx_agent_file_free(f);
    return CLI_OK;
}

int cmd_mcp(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("mcp ", "missing command (ls)");
    if (strcmp(argv[1], "ls") == 0)
        return mcp_ls(argc - 1, argv + 1);
    return cli_usage("mcp ", "unknown command '%s' (ls)", argv[1]);
}
