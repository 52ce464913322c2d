/* sbx CLI: shared declarations of the verb files. The CLI holds no logic of its own: each verb
 * parses its arguments, calls the library and renders the result. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdint.h>

#include "sbx/docker.h"
#include "sbx/error.h"
#include "sbx/local.h"
#include "sbx/model.h"

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

struct option;
/* Before getopt_long(argc, argv, "+...", longopts): refuse a long option that is not spelled out
 * in full. getopt_long takes any unambiguous prefix, so `--port 8000` would silently be
 * `--port-bind 8000`; sbx wants options to mean what they say. Scans up to the first argument
 * that is not an option (the "+" mode) or "--", skipping the values of options that take one.
 * Returns CLI_OK, or CLI_USAGE after printing "unknown option '--port' (did you mean
 * --port-bind?)" for verb. */
int cli_long_options_exact(int argc, char **argv, const char *shortopts,
                           const struct option *longopts, const char *verb);

struct sbx_progress;
/* A status line on stderr for long steps (materialising, fetching, snapshotting), erased when
 * they end: the progress callback to give sbx when stderr is a terminal (cli_progress_fn()
 * returns it then, NULL on a pipe or file, so that logs stay clean). data is unused. */
typedef void cli_progress_cb(void *data, const struct sbx_progress *p);
cli_progress_cb *cli_progress_fn(void);

/* A size with an optional K/M/G suffix (powers of 1024). Returns 0 or -1. */
int cli_parse_size(const char *s, uint64_t *out);
/* The local sandbox options shared by `sandbox create` and `run`: --isolation, --network,
 * --memory, --pids, --cpus, --ro PATH[:DST], --rw PATH[:DST] at argv[*i] (advancing *i past its
 * value). grants: room for SBX_LOCAL_MAX_GRANTS. Returns 1 when consumed, 0 when argv[*i] is
 * none of them, or CLI_USAGE after printing why. */
int cli_local_option(int argc, char **argv, int *i, struct sbx_local_options *o,
                     struct sbx_local_grant *grants);
/* After the options: apply --allow-dangerous-grant PATH to the grants with that source and warn
 * on stderr for each. Returns CLI_OK, or CLI_USAGE when PATH names no grant. */
int cli_local_finish(struct sbx_local_options *o, struct sbx_local_grant *grants);
/* The provider of a new sandbox and its options (`sandbox create`, `run`): --provider
 * local|docker, the local options above, the docker ones (--image, --docker-host, --user,
 * --cap-add, --allow-cap-add); --network, --memory, --pids and --cpus serve both, --network
 * with each provider's modes. Initialise with cli_sandbox_opts_init; never copied (local.grants
 * points into it). */
struct cli_sandbox_opts {
    const char *provider; /* as given; NULL: local */
    struct sbx_local_options local;
    struct sbx_local_grant grants[SBX_LOCAL_MAX_GRANTS];
    struct sbx_docker_options docker;
    const char *caps[SBX_DOCKER_MAX_CAPS];
    char *network;           /* --network's value (read by cli_sandbox_finish) */
    const char *local_only;  /* the first local-only option given, for the usage error */
    const char *docker_only; /* the first docker-only option given */
};
void cli_sandbox_opts_init(struct cli_sandbox_opts *o);
/* An option of a new sandbox at argv[*i] (its value at argv[*i + 1]; argc 1: a flag alone):
 * 1 consumed (*i past its value), 0 none of them, or CLI_USAGE after printing why. */
int cli_sandbox_option(int argc, char **argv, int *i, struct cli_sandbox_opts *o);
/* After the options: the provider is known ("unknown provider" lists them), options of the
 * other provider are refused naming them, --network is read, the limits go to the docker
 * options, and cli_local_finish runs. verb as for cli_usage. Returns CLI_OK or CLI_USAGE. */
int cli_sandbox_finish(struct cli_sandbox_opts *o, const char *verb);
/* The name of o's provider ("local" or "docker"). */
const char *cli_sandbox_provider(const struct cli_sandbox_opts *o);
/* A client of o's provider with its options. */
int cli_sandbox_client(struct cli_sandbox_opts *o, struct sbx_client **out, struct sbx_error *err);

/* By-id commands (sandbox-provider.c): an id is looked up in the local provider first, then
 * through the docker engine when one is configured (--docker-host, $DOCKER_HOST, or
 * /var/run/docker.sock exists). */
struct sbx_client;
struct sbx_session;
/* --docker-host URL at argv[*i]: 1 consumed, 0 not it, CLI_USAGE without a value. */
int cli_docker_host_option(int argc, char **argv, int *i, const char *verb);
/* The engine of by-id commands, or NULL when none is configured. */
const char *cli_docker_host(void);
/* A client of provider ("local", "docker") for by-id commands. */
int cli_client_new(const char *provider, struct sbx_client **out, struct sbx_error *err);
/* op on the sandbox id through the client of the provider that has it: each provider in turn
 * until op fails with anything but SBX_E_NOTFOUND. *out: that client (caller frees; NULL on
 * failure). */
typedef int cli_sandbox_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err);
int cli_sandbox_by_id(const char *id, cli_sandbox_op *op, void *data, struct sbx_client **out,
                      struct sbx_error *err);
/* Attach to sandbox id, whichever provider has it. */
int cli_sandbox_attach(const char *id, struct sbx_client **c, struct sbx_session **s,
                       struct sbx_error *err);

struct sbx_strv;
/* --pass-secret NAME: add NAME to pass after checking it is one of sbx's own credentials
 * (sbx_manifest_harness_credential). Returns 1, or CLI_USAGE after printing why. */
int cli_pass_secret(const char *name, struct sbx_strv *pass);
/* --api NAME ("responses" or "chat") into *api. Returns 0, or -1 for any other name. */
int cli_parse_api(const char *name, enum sbx_model_api *api);
/* The model name to use: -m's value (given, may be NULL), else $SBX_MODEL, else the default. */
const char *cli_model_name(const char *given);

int cmd_manifest(int argc, char **argv);     /* cmd-manifest.c */
int cmd_snapshot(int argc, char **argv);     /* cmd-snapshot.c */
int cmd_conversation(int argc, char **argv); /* cmd-conversation.c */
int cmd_run_state(int argc, char **argv);    /* cmd-state.c */
int cmd_memory(int argc, char **argv);       /* cmd-memory.c */

struct sbx_sandbox_run;
/* After a run's answer was printed: its memory generation (progress on stderr), or with skip
 * none. A failure is a warning on stderr: the run's answer and exit status stand. */
void cli_memory_after_run(struct sbx_sandbox_run *sr, int skip);
/* Hidden verbs. */

#endif
