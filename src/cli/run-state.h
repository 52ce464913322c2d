/* sbx run --state / --resume: the run state file of a run that can be continued, the approval
 * flags and the terminal's approval prompt (cmd-run.c). */
#ifndef SBX_CLI_RUN_STATE_H
#define SBX_CLI_RUN_STATE_H

#include <stdint.h>
#include <jansson.h>

#include "sbx/error.h"
#include "sbx/strv.h"

struct sbx_run_state_log;

/* Exit status of a run that stopped to wait for approvals. */
#define CLI_WAITING 4

struct sbx_run_result;
struct sbx_approval_request;
struct sbx_approval_answer;

struct cli_run_state {
    const char *path; /* --state FILE, the --resume FILE (written again), or auto_path */
    char *auto_path;  /* the default file sbx chose (no --state): removed when the run completes */
    int resume;
    /* The approval flags in command-line order: [{"opt", "arg", "reason"?}], resolved by
     * cli_run_state_resolve once it is known whether the run resumes. */
    json_t *flags;
    /* Resolved: decisions for pending calls {"<call id>" | "*": {"approved", "message"?, "by"}}
     * (resume) and "always" decisions [{"tool", "approved", "message"?, "by"}]; NULL: none. */
    json_t *decisions;
    json_t *always;
    int approve_all;
    int allow_agent_change;
    json_t *doc;                   /* the state resumed from */
    struct sbx_strv secrets;       /* values scrubbed from every state written */
    int written;                   /* checkpoints written by this process */
    struct sbx_run_state_log *log; /* the checkpoints' writer, opened at the first one */
    const char *agent_file;        /* for the "continue with" line (borrowed) */
    uint8_t key[32];               /* this user's run-state key (sealing "always" decisions) */
    int key_state;                 /* 0 not loaded yet, 1 loaded, -1 unavailable */
};

void cli_run_state_init(struct cli_run_state *rs);
void cli_run_state_release(struct cli_run_state *rs);

/* --approve ID|TOOL|all, --reject ID, --reason TEXT, --approve-always TOOL, --reject-always
 * TOOL, --approve-all (opt names which; arg NULL for a flag without a value). Returns 1, or
 * CLI_USAGE after printing why. */
int cli_run_state_flag(struct cli_run_state *rs, const char *opt, const char *arg);
/* Make decisions and "always" decisions of the flags: on a resume --approve and --reject name
 * pending calls; on a new run --approve names a tool (as --approve-always). Returns CLI_OK or
 * CLI_USAGE after printing why. */
int cli_run_state_resolve(struct cli_run_state *rs);

/* Before anything is made: with --state, refuse an existing file; with --resume, read it and
 * take its "always" decisions that this user's key seals (its rejections in any case). */
int cli_run_state_prepare(struct cli_run_state *rs, struct sbx_error *err);
/* No --state: a run that may stop for approval saves its state to a new file under
 * ${XDG_STATE_HOME:-~/.local/state}/sbx/runs (made 0700), so that no work is lost. */
int cli_run_state_default(struct cli_run_state *rs, struct sbx_error *err);

/* The "cli" member of the resumed state's meta (borrowed; NULL when none). */
const json_t *cli_run_state_saved_options(const struct cli_run_state *rs);

/* The secret values of the run (cli_run_secrets), scrubbed from every state written. */
void cli_run_state_set_secrets(struct cli_run_state *rs, const struct sbx_strv *secrets);

/* sbx_checkpoint_fn: writes the state to rs->path (atomically, secrets scrubbed, its "always"
 * decisions sealed with this user's key). */
int cli_run_state_checkpoint(void *data, const json_t *state, struct sbx_error *err);

/* On stderr: the pending calls of an interrupted run and how to continue it. */
void cli_run_state_report_waiting(const struct cli_run_state *rs, const struct sbx_run_result *r);
/* On stderr, after a failed or cancelled run that saved a state: how to continue it. */
void cli_run_state_report_unfinished(const struct cli_run_state *rs);
/* After a completed run: the default state file is removed (nothing is left to continue). */
void cli_run_state_completed(struct cli_run_state *rs);

/* The approval prompt on the terminal (stdin and stderr are one): sbx_approval_ask_fn. data
 * is a struct cli_prompt. */
struct cli_prompt {
    void (*before)(void *data); /* ends the line being drawn (streamed text, a status line) */
    void *before_data;
};
int cli_approval_prompt(void *data, const struct sbx_approval_request *rq,
                        struct sbx_approval_answer *out, struct sbx_error *err);
/* Ask "question [y/N] " on the terminal: 1 for yes, 0 otherwise. */
int cli_confirm(const char *question);

#endif
