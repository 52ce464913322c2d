/* sbx run --state / --resume: the run state file of a run that can be continued (cmd-run.c). */
#ifndef SBX_CLI_RUN_STATE_H
#define SBX_CLI_RUN_STATE_H

#include <jansson.h>

#include "sbx/error.h"
#include "sbx/strv.h"

/* Exit status of a run that stopped to wait for approvals. */
#define CLI_WAITING 4

struct sbx_run_result;

struct cli_run_state {
    const char *path; /* --state FILE, or the --resume FILE (written again) */
    int resume;
    /* --approve / --reject: {"<call id>" | "*": {"approved", "message"?}}; NULL: none */
    json_t *decisions;
    char *last_reject; /* the call id --reason applies to */
    int allow_agent_change;
    json_t *doc;             /* the state resumed from */
    struct sbx_strv secrets; /* values scrubbed from every state written */
    int written;             /* checkpoints written by this process */
};

void cli_run_state_init(struct cli_run_state *rs);
void cli_run_state_release(struct cli_run_state *rs);

/* --approve ID|all, --reject ID, --reason TEXT (opt names which). Returns 1, or CLI_USAGE after
 * printing why. */
int cli_run_state_decision(struct cli_run_state *rs, const char *opt, const char *arg);

/* Before anything is made: with --state, refuse an existing file; with --resume, read it. */
int cli_run_state_prepare(struct cli_run_state *rs, struct sbx_error *err);

/* The "cli" member of the resumed state's meta (borrowed; NULL when none). */
const json_t *cli_run_state_saved_options(const struct cli_run_state *rs);

/* The secret values: $OPENAI_API_KEY and those of every --pass-secret NAME. */
void cli_run_state_add_secrets(struct cli_run_state *rs, const struct sbx_strv *pass);

/* sbx_checkpoint_fn: writes the state to rs->path (atomically, secrets scrubbed). */
int cli_run_state_checkpoint(void *data, const json_t *state, struct sbx_error *err);

/* On stderr: the pending calls of an interrupted run and how to continue it. */
void cli_run_state_report_waiting(const struct cli_run_state *rs, const struct sbx_run_result *r);
/* On stderr, after a failed or cancelled run that saved a state: how to continue it. */
void cli_run_state_report_unfinished(const struct cli_run_state *rs);

#endif
