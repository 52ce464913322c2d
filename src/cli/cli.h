/* sbx CLI: shared declarations of the verb files. The CLI holds no logic of its own: each verb
 * parses its arguments, calls the library and renders the result. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include "sbx/error.h"

/* Exit statuses shared by every verb. */
enum {
    CLI_OK = 0,
    CLI_FAIL = 1,
    CLI_USAGE = 2,
};

/* A verb gets argv with argv[0] being the verb name. Returns the process exit status. */
typedef int cli_verb_fn(int argc, char **argv);

int cmd_run(int argc, char **argv);     /* cmd-run.c */
int cmd_sandbox(int argc, char **argv); /* cmd-sandbox.c */

/* Print "sbx: <msg>" to stderr and return CLI_FAIL. */
int cli_fail(const struct sbx_error *err);
/* Print "sbx: <formatted>" plus a hint to run --help, return CLI_USAGE. */
int cli_usage(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int cmd_manifest(int argc, char **argv); /* cmd-manifest.c */
/* Hidden verbs. */
int cmd_isolate_run(int argc, char **argv); /* cmd-isolate.c */

#endif
