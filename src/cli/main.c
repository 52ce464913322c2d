/* sbx: command-line entry point. Dispatches to one file per verb. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/run-trace.h"
#include "cli/cli.h"
#include "cli/help.h"
#include "providers/programs.h"
#include "sbx/log.h"

/* The summaries and the rest of the help are in the help table (help-table.c). */
struct verb {
    const char *name;
    cli_verb_fn *fn;
};

static int cmd_version(int argc, char **argv);

static const struct verb verbs[] = {
        {"conversation", cmd_conversation},
        {"help", cli_help_main},
        {"manifest", cmd_manifest},
        {"mcp", cmd_mcp},
        {"memory", cmd_memory},
        {"node", cmd_node},
        {"run", cmd_run},
        {"sandbox", cmd_sandbox},
        {"snapshot", cmd_snapshot},
        {"state", cmd_run_state},
        {"trace", cmd_trace},
        {"version", cmd_version},
};

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("sbx %s\n", SBX_VERSION);
    return CLI_OK;
}

int main(int argc, char **argv)
{
    /* jansson seeds its hash tables from /dev/urandom when the first object is made: an open,
     * a read and a close on every command. The seed only matters against hash flooding, where
     * whoever writes a document picks keys that collide under a seed they know; the documents
     * of a CLI run are small and bounded (state.json, records, its own supervisor's replies, a
     * provider's responses under SBX_E_TOOBIG limits) and the clock and pid mixed here are the
     * values jansson itself falls back to without /dev/urandom, unknown to a peer in advance. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    json_object_seed(((size_t)ts.tv_nsec ^ ((size_t)ts.tv_sec << 20) ^ (size_t)getpid()) | 1);
    sbx_log_set_handler(cli_log, NULL, SBX_LOG_WARN);
    /* --color=WHEN (or --color WHEN) before the command, for every command. */
    while (argc >= 2 && strncmp(argv[1], "--color", 7) == 0 &&
           (argv[1][7] == '=' || (argv[1][7] == '\0' && argc >= 3))) {
        const char *when = argv[1][7] == '=' ? argv[1] + 8 : argv[2];
        int used = argv[1][7] == '=' ? 1 : 2;
        if (cli_color_set(when) < 0)
            return cli_usage(NULL, "--color is auto, always or never, not '%s'", when);
        argv[used] = argv[0];
        argv += used;
        argc -= used;
    }
    if (argc < 2)
        return cli_usage(NULL, "missing command");
    const char *name = argv[1];
    /* Hidden program entry points of the providers (a local sandbox's supervisor, which the
     * local client runs through sbx only when it finds no sbx-supervisor program; the port
     * relay; test drivers), found through the registry. */
    int status;
    if (name[0] == '_' && sbx__program_main(argc - 1, argv + 1, &status))
        return status;
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        return cli_help_main(1, argv + 1);
    if (strcmp(name, "--version") == 0)
        return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        if (strcmp(name, verbs[i].name) != 0)
            continue;
        /* --help and -h wherever the verb's parser takes options: one answer for every verb. */
        int rc;
        if (verbs[i].fn != cli_help_main && cli_help_intercept(argc - 1, argv + 1, &rc))
            return rc;
        return verbs[i].fn(argc - 1, argv + 1);
    }
    /* Hidden internal verbs: not listed by help. The man pages and completions are generated
     * from the help table by running sbx (meson.build). */
    if (strcmp(name, "__gen") == 0)
        return cli_help_gen_main(argc - 1, argv + 1);
    return cli_unknown_command(NULL, name);
}
