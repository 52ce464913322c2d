/* sbx: command-line entry point. Dispatches to one file per verb. */
#include <stdarg.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/run-trace.h"
#include "cli/cli.h"
#include "cli/help.h"
#include "sandbox/host/relay.h"
#include "sbx/local.h"
#include "sbx/log.h"
#include "sbx/progress.h"
#include "sbx/term.h"

/* The summaries and the rest of the help are in the help table (help-table.c). */
struct verb {
    const char *name;
    cli_verb_fn *fn;
};

int cli_long_options_exact(int argc, char **argv, const char *shortopts,
                           const struct option *longopts, const char *verb)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0 || a[0] != '-' || a[1] == '\0')
            return CLI_OK;
        if (a[1] != '-') {
            /* A short option cluster: the last one may take the next argument. */
            const char *o = strchr(shortopts, a[strlen(a) - 1]);
            if (strlen(a) == 2 && o && o[1] == ':')
                i++;
            continue;
        }
        size_t n = strcspn(a + 2, "=");
        const struct option *hit = NULL, *near = NULL;
        for (const struct option *o = longopts; o->name; o++) {
            if (strlen(o->name) == n && strncmp(o->name, a + 2, n) == 0)
                hit = o;
            else if (!near && strncmp(o->name, a + 2, n) == 0)
                near = o;
        }
        if (!hit) {
            if (near)
                return cli_usage(verb, "unknown option '%.*s' (did you mean --%s?)", (int)(n + 2),
                                 a, near->name);
            return cli_usage(verb, "unknown option '%.*s'", (int)(n + 2), a);
        }
        if (hit->has_arg == required_argument && !a[2 + n])
            i++;
    }
    return CLI_OK;
}

static void cli_progress(void *data, const struct sbx_progress *p)
{
    (void)data;
    if (p->finished) {
        fputs("\r\033[K", stderr);
    } else {
        char what[64];
        /* The path or repository comes from a manifest: keep it printable and short. */
        size_t n = 0;
        for (const char *s = p->what ? p->what : ""; *s && n < sizeof(what) - 1; s++)
            what[n++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
        what[n] = '\0';
        if (p->total)
            fprintf(stderr, "\r\033[K  %s: %llu of %llu %s", p->step, (unsigned long long)p->done,
                    (unsigned long long)p->total, what);
        else
            fprintf(stderr, "\r\033[K  %s: %llu %s", p->step, (unsigned long long)p->done, what);
    }
    fflush(stderr);
}

cli_progress_cb *cli_progress_fn(void)
{
    return isatty(2) ? cli_progress : NULL;
}

static int cmd_version(int argc, char **argv);

static const struct verb verbs[] = {
        {"conversation", cmd_conversation},
        {"help", cli_help_main},
        {"manifest", cmd_manifest},
        {"memory", cmd_memory},
        {"run", cmd_run},
        {"sandbox", cmd_sandbox},
        {"snapshot", cmd_snapshot},
        {"state", cmd_run_state},
        {"trace", cmd_trace},
        {"version", cmd_version},
};

int cli_fail(const struct sbx_error *err)
{
    /* Messages may quote what a model or a sandbox said: no escape sequences on a terminal. */
    const char *msg = err->msg[0] ? err->msg : sbx_strerror(err->code);
    char *safe = isatty(2) ? sbx_term_escape(msg, strlen(msg), 0, NULL) : NULL;
    fprintf(stderr, "sbx: %s\n", safe ? safe : msg);
    free(safe);
    return CLI_FAIL;
}

int cli_usage(const char *verb, const char *fmt, ...)
{
    va_list ap;
    fputs("sbx: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'sbx %s--help'.\n", verb ? verb : "");
    return CLI_USAGE;
}

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("sbx %s\n", SBX_VERSION);
    return CLI_OK;
}

int main(int argc, char **argv)
{
    sbx_log_set_handler(sbx_log_stderr, NULL, SBX_LOG_WARN);
    if (argc < 2)
        return cli_usage(NULL, "missing command");
    const char *name = argv[1];
    /* Hidden: sbx can serve as a local sandbox's supervisor, which the local client runs only
     * when it finds no sbx-supervisor program (next to the running program, next to libsbx,
     * in libexecdir). */
    if (strcmp(name, SBX_LOCAL_SUPERVISE_VERB) == 0)
        return sbx_local_supervise_main(argc - 1, argv + 1);
    if (strcmp(name, SBX__RELAY_VERB) == 0)
        return sbx__relay_main(argc - 1, argv + 1);
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
    if (strcmp(name, "__isolate-run") == 0)
        return sbx_local_isolate_run_main(argc - 1, argv + 1);
    return cli_usage(NULL, "unknown command '%s'", name);
}
