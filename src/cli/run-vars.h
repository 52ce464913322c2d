/* sbx CLI: the variables of `sbx run` (--var, --var-secret, --vars-file, SBX_VAR_<NAME>), which
 * fill the agents' instruction templates and prompt variables (sbx/prompt.h), and the run's
 * trace identity (--workflow, --group-id, --trace-metadata). Both are kept in the run state's
 * meta.cli so that a resumed run keeps them (secret variables excepted). */
#ifndef SBX_CLI_RUN_VARS_H
#define SBX_CLI_RUN_VARS_H

#include <jansson.h>

#include "sbx/agent.h"
#include "sbx/error.h"
#include "sbx/strv.h"

#define CLI_TRACE_METADATA_MAX 16  /* entries of --trace-metadata */
#define CLI_TRACE_KEY_MAX      64  /* bytes of a metadata key */
#define CLI_TRACE_VALUE_MAX    512 /* bytes of a metadata value, a workflow name, a group id */
#define CLI_VARS_FILE_MAX      ((size_t)1 << 20)

struct cli_vars {
    json_t *given;    /* --var: name -> value */
    json_t *secret;   /* --var-secret: name -> environment variable */
    const char *file; /* --vars-file */
    const char *workflow, *group_id;
    json_t *metadata;     /* --trace-metadata: key -> value */
    json_t *saved;        /* the resumed run's variables (name -> value) */
    json_t *saved_secret; /* names of the resumed run's secret variables */
    json_t *values;       /* every variable, merged by cli_vars_apply */
    json_t *from;         /* name -> where its value came from */
};

void cli_vars_init(struct cli_vars *v);
void cli_vars_release(struct cli_vars *v);
/* One of the options above (name without "--"). Returns 1 when taken, 0 when it is not one of
 * them, CLI_USAGE after printing why arg is bad. */
int cli_vars_option(struct cli_vars *v, const char *name, const char *arg);
/* What a resumed run saved (its meta.cli, borrowed; NULL: nothing): the trace identity when
 * not given again, and the variables' values, below every value given now. */
void cli_vars_resume(struct cli_vars *v, const json_t *saved_cli);
/* Gather the values (precedence: --var and --var-secret, then --vars-file, then SBX_VAR_<NAME>,
 * then the resumed run's), fill the instructions and prompt of every agent reachable from
 * start, refuse a prompt on the Chat Completions API (chat non-zero), and warn on stderr of
 * each value no template used. 0, or -code with err naming the variable and its user. */
int cli_vars_apply(struct cli_vars *v, struct sbx_agent *start, int chat, struct sbx_error *err);
/* The values of the secret variables (each once), for the run's scrubber. */
void cli_vars_secrets(const struct cli_vars *v, struct sbx_strv *out);
/* Record the trace identity and the non-secret variables in cli (the run state's meta.cli). */
void cli_vars_meta(const struct cli_vars *v, json_t *cli);
/* The trace identity of an Agents SDK run state's "trace" ({workflow_name, group_id, metadata};
 * borrowed, NULL or null: none) into cli, as --workflow, --group-id and --trace-metadata would
 * set it, so that `sbx state import` keeps it for the resume. What those options would refuse
 * (too long, control characters, a metadata value that is not text, past 16 entries) is left
 * out with a warning on stderr. */
void cli_vars_from_sdk_trace(const json_t *trace, json_t *cli);

#endif
