/* sbx CLI: shared declarations of the verb files. The CLI holds no logic of its own: each verb
 * parses its arguments, calls the library and renders the result. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "sbx/error.h"
#include "sbx/log.h"
#include "sbx/model.h"
#include "sbx/provider.h"

/* Exit statuses shared by every verb. */
enum {
    CLI_OK = 0,
    CLI_FAIL = 1,
    CLI_USAGE = 2,
};

/* A verb gets argv with argv[0] being the verb name. Returns the process exit status. */
typedef int cli_verb_fn(int argc, char **argv);

/* ---- cmd-state-sdk.c: sbx state import / export (argv[0] is the subcommand) ---- */
int cli_state_import(int argc, char **argv);
int cli_state_export(int argc, char **argv);

/* ---- common.c: what every verb shares ---- */

/* The one printer of text that may come from a model, a sandbox, an archive or a file: with
 * CLI_SAFE_TTY its control characters are escaped (sbx_term_escape) when f is a terminal and
 * written as they are otherwise (data: a model's answer, a file's content); with
 * CLI_SAFE_ALWAYS they are escaped wherever f goes (messages, names, labels, listings). */
enum { CLI_SAFE_TTY = 0, CLI_SAFE_ALWAYS = 1 };
void cli_put_safe(FILE *f, int mode, const char *s, size_t n);
void cli_printf_safe(FILE *f, int mode, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* JSON text as it is, but C1 controls as \u escapes (JSON already escapes C0 controls). */
void cli_put_json(FILE *f, const char *text);

/* Colour on stderr: --color=auto (the default: on a terminal, unless $NO_COLOR is set and not
 * empty), always or never. cli_color_set returns -1 for another word. cli_sgr(code) is code
 * when stderr gets colour, else "". */
#define CLI_RED    "\033[31m"
#define CLI_YELLOW "\033[33m"
#define CLI_DIM    "\033[2m"
#define CLI_RESET  "\033[0m"
int cli_color_set(const char *when);
const char *cli_sgr(const char *code);
/* The log handler of the CLI: "sbx: warning: ..." on stderr, coloured as above. A hook set
 * with cli_log_set_hook is called (from the logging thread) with before 1 just before a
 * message is printed and 0 just after: sbx run erases its status line there. NULL: none. */
void cli_log(enum sbx_log_level level, const char *msg, void *data);
void cli_log_set_hook(void (*hook)(void *data, int before), void *data);

/* Print "sbx: <msg>" to stderr (cli_put_safe, always escaped) and return CLI_FAIL. */
int cli_fail(const struct sbx_error *err);
/* Print "sbx: <formatted>" plus a hint to run --help, return CLI_USAGE. */
int cli_usage(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A usage error for option opt that verb ("sandbox exec ") does not take, with what it may have
 * meant from the help table: "unknown option '--tyy' (did you mean --tty?)". CLI_USAGE. */
int cli_unknown_option(const char *verb, const char *opt);
/* The same for an unknown subcommand word of verb ("sandbox ", NULL for sbx's commands). */
int cli_unknown_command(const char *verb, const char *word);

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
struct sbx_strv;
/* --pass-secret NAME: add NAME to pass after checking it is one of sbx's own credentials
 * (sbx_manifest_harness_credential). Returns 1, or CLI_USAGE after printing why. */
int cli_pass_secret(const char *name, struct sbx_strv *pass);
/* --api NAME ("responses" or "chat") into *api. Returns 0, or -1 for any other name. */
int cli_parse_api(const char *name, enum sbx_model_api *api);
/* The model name to use: -m's value (given, may be NULL), else $SBX_MODEL, else the default. */
const char *cli_model_name(const char *given);
struct sbx_manifest;
/* --manifest of start and resume: the manifest the sandbox was made from, whose ephemeral
 * variables a rebuilt sandbox gets again. NULL path: none (*out NULL). */
int cli_trusted_manifest(const char *path, struct sbx_manifest **out, struct sbx_error *err);

/* ---- options.c: the options of a new sandbox (run, sandbox create, sandbox resume) ---- */

#define CLI_SANDBOX_FLAGS_MAX 128 /* distinct provider flags */
#define CLI_SANDBOX_GIVEN_MAX 256 /* sandbox options on one command line */
/* getopt values: --provider, -o/--provider-option, and provider flag i (CLI_SB_FLAG + i). */
enum { CLI_SB_PROVIDER = 0x1ffe, CLI_SB_OPTION = 0x1fff, CLI_SB_FLAG = 0x2000 };
/* Modes of cli_sandbox_finish: a new sandbox of `sandbox create` / of `run` (required options
 * are asked for, naming the agent file's section for run). */
enum { CLI_SANDBOX_CREATE = 1, CLI_SANDBOX_RUN = 2 };

struct cli_sandbox_arg {
    int flag;         /* index of the provider flag, -1 for -o KEY=VALUE */
    const char *text; /* its value (borrowed from argv); NULL for a flag alone */
};
/* What the command line says of a new sandbox's provider and options, then (after
 * cli_sandbox_finish) the provider and its checked options. */
struct cli_sandbox {
    const char *provider; /* --provider, NULL: the agent file's, else the default */
    struct cli_sandbox_arg given[CLI_SANDBOX_GIVEN_MAX];
    size_t n_given;
    struct sbx_provider_info info; /* the provider, after finish */
    json_t *options;               /* its canonical options, after finish; owned */
};
void cli_sandbox_init(struct cli_sandbox *sb);
void cli_sandbox_release(struct cli_sandbox *sb);
/* The getopt_long table of a command: own (its options, ending with a zero entry) followed by
 * --provider, --provider-option and every provider flag own does not have; shortopts gets
 * own_short plus "o:" and the provider flags' short forms. Static storage, rebuilt per call. */
const struct option *cli_sandbox_longopts(const struct option *own, const char *own_short,
                                          char *shortopts, size_t size);
/* getopt_long returned c with arg: 1 when it is a sandbox option (kept in sb), 0 when not,
 * CLI_USAGE after printing why. */
int cli_sandbox_getopt(struct cli_sandbox *sb, int c, const char *arg, const char *verb);
/* After the options: the provider (--provider, else section's, else the default; an unknown
 * one is a usage error naming the known), section's options when it is that provider's (an
 * agent file's sandbox: section, may be NULL) under the command line's, each value typed by
 * the provider's table, a flag of another provider refused naming whose it is, the whole
 * checked (sbx_provider_options_check), required options asked for (mode), and a warning
 * printed for each dangerous value. Returns CLI_OK or CLI_USAGE. */
int cli_sandbox_finish(struct cli_sandbox *sb, const json_t *section, const char *verb, int mode);
/* The provider's name (after finish). */
const char *cli_sandbox_provider(const struct cli_sandbox *sb);
/* Set key (when the provider declares it; value taken) in the finished options: 1 set, 0 not
 * declared. */
int cli_sandbox_set(struct cli_sandbox *sb, const char *key, json_t *value);
/* A client of the finished provider and options. */
int cli_sandbox_client(const struct cli_sandbox *sb, struct sbx_client **out,
                       struct sbx_error *err);
/* Record sandbox id made by provider p with options (canonical), so that a command given only
 * the id finds it: for a provider that cannot find its sandboxes by itself or needs locator
 * options to reach them. A failure is a warning on stderr. */
void cli_record(const struct sbx_provider_info *p, const char *id, const json_t *options);
/* Record sandbox id as cli_record does, whatever the provider, with its name (NULL: none) and
 * labels (NULL: none): SBX_E_EXISTS when another sandbox has the name. */
int cli_record_named(const struct sbx_provider_info *p, const char *id, const json_t *options,
                     const char *name, const json_t *labels, struct sbx_error *err);

/* ---- by-id.c: the provider that has a sandbox id ---- */

struct sbx_client;
struct sbx_session;
/* A locator flag of a provider (--docker-host URL or --docker-host=URL) at argv[*i]: 1 consumed
 * (*i past its value), 0 not one, CLI_USAGE after printing why. */
int cli_locator_arg(int argc, char **argv, int *i, const char *verb);
/* A client of provider from base options (may be NULL) with the locator flags given. */
int cli_client_with(const char *provider, const json_t *base, struct sbx_client **out,
                    struct sbx_error *err);
/* Whether locator flags of provider were given. */
int cli_locators_given(const char *provider);
/* Whether the locator flags given change one of base's values (they point elsewhere than a
 * record says its sandbox is). */
int cli_locators_move(const char *provider, const json_t *base);
/* A client of provider as found here unconfigured (sbx_provider_probe) with the locator flags
 * given; SBX_E_NOTFOUND when there is nothing to ask, unless asked or a locator flag is. */
int cli_client_found(const char *provider, int asked, struct sbx_client **out,
                     struct sbx_error *err);
/* op on the sandbox id through the client of the provider that has it: the recorded one, else
 * each provider that lists unconfigured in turn until op fails with anything but
 * SBX_E_NOTFOUND. *out: that client (caller frees; NULL on failure). */
typedef int cli_sandbox_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err);
int cli_sandbox_by_id(const char *id, cli_sandbox_op *op, void *data, struct sbx_client **out,
                      struct sbx_error *err);
/* Attach to sandbox id, whichever provider has it. */
int cli_sandbox_attach(const char *id, struct sbx_client **c, struct sbx_session **s,
                       struct sbx_error *err);
/* The same for one command (sbx_client_attach_once): a sandbox whose supervisor died is told
 * by the command's own request ("sandbox 'x' is gone") instead of a probe before it. */
int cli_sandbox_attach_once(const char *id, struct sbx_client **c, struct sbx_session **s,
                            struct sbx_error *err);

/* ---- cmd-sandbox-ps.c and ps-format.c: the sandboxes as ps shows them ---- */

/* Every sandbox ps lists (all: --all's too), each with its provider and the name and labels of
 * its record, into *out (caller owns). Warnings about providers that cannot be reached go to
 * stderr. */
int cli_sandbox_list(int all, json_t **out, struct sbx_error *err);
/* Field ("ID", "Name", "Provider", "Status", "Created", "Workspace", "Labels", or "Label" with
 * arg the key) of listed sandbox v as text; caller frees. */
char *cli_ps_field(const json_t *v, const char *field, const char *arg);
/* --format: "table", "json", "table TEMPLATE" or TEMPLATE ({{.ID}}, {{.Label "KEY"}}, \t).
 * CLI_OK, or CLI_USAGE after naming the action it cannot read. */
int cli_ps_format_check(const char *format, const char *verb);
/* list printed with a checked format other than "table"; terminal-safe. */
void cli_ps_print_format(const char *format, const json_t *list);
/* --filter KEY=VALUE appended to filters (an array): CLI_OK or CLI_USAGE. */
int cli_ps_filter_add(json_t *filters, const char *text, const char *verb);
/* 1 when listed sandbox v passes filters. */
int cli_ps_filter_match(const json_t *filters, const json_t *v);

/* ---- cp-tree.c: sbx sandbox cp of a directory ---- */
/* Host directory srcfd (borrowed) into sandbox directory dst (made, with srcfd's mode). */
int cli_cp_tree_in(struct sbx_session *s, int srcfd, const char *dst, struct sbx_error *err);
/* Sandbox directory src into host directory dst (made when missing, given src's mode). */
int cli_cp_tree_out(struct sbx_session *s, const char *src, const char *dst, struct sbx_error *err);

/* ---- snapshot-browse.c: sbx snapshot ls-files REF [PATH], cat REF PATH, diff REF REF ---- */
struct sbx_snapshot_store;
/* Subcommand sub ("ls-files", "cat" or "diff") with its arguments (counts checked). */
int cli_snapshot_browse(struct sbx_snapshot_store *st, const char *sub, const char *const *args,
                        int nargs, int json, struct sbx_error *err);

/* ---- cmd-snapshot.c: remote stores for the other verbs ---- */
/* Pull ref from the store at url (s3://, gs://, azure://) into the local store, saying so on
 * stderr; *out_ref: the full reference, caller owns (free). */
int cli_snapshot_pull_ref(const char *url, const char *ref, char **out_ref, struct sbx_error *err);
/* Push ref from the local store to url, saying so on stderr. */
int cli_snapshot_push_ref(const char *url, const char *ref, struct sbx_error *err);

/* ---- the verbs ---- */

int cmd_run(int argc, char **argv);          /* cmd-run.c */
int cmd_sandbox(int argc, char **argv);      /* cmd-sandbox.c */
int cmd_manifest(int argc, char **argv);     /* cmd-manifest.c */
int cmd_snapshot(int argc, char **argv);     /* cmd-snapshot.c */
int cmd_conversation(int argc, char **argv); /* cmd-conversation.c */
int cmd_run_state(int argc, char **argv);    /* cmd-state.c */
int cmd_memory(int argc, char **argv);       /* cmd-memory.c */
int cmd_node(int argc, char **argv);         /* cmd-node.c */
int cmd_mcp(int argc, char **argv);          /* cmd-mcp.c */

struct sbx_sandbox_run;
/* After a run's answer was printed: its memory generation (progress on stderr), or with skip
 * none. A failure is a warning on stderr: the run's answer and exit status stand. */
void cli_memory_after_run(struct sbx_sandbox_run *sr, int skip);

/* The subcommands of sbx sandbox in files of their own (argv[0] the subcommand). */
int cmd_sandbox_create(int argc, char **argv);    /* cmd-sandbox-create.c */
int cmd_sandbox_resume(int argc, char **argv);    /* cmd-sandbox-create.c */
int cmd_sandbox_ps(int argc, char **argv);        /* cmd-sandbox-ps.c */
int cmd_sandbox_providers(int argc, char **argv); /* cmd-sandbox-ps.c */
int cmd_sandbox_stats(int argc, char **argv);     /* cmd-sandbox-watch.c */
int cmd_sandbox_logs(int argc, char **argv);      /* cmd-sandbox-watch.c */
int cmd_sandbox_inspect(int argc, char **argv);   /* cmd-sandbox-watch.c */

#endif
