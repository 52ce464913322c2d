/* sbx: the providers as a table any program can read.
 *
 * Every provider (local, docker, ...) declares its name, a one-line summary, its traits (what it
 * can do: mounts, snapshots, a terminal, ...) and its options: the keys of
 * sbx_client_new_json, of an agent file's `sandbox:` section and of `sbx run` / `sbx sandbox
 * create` (their flags, help, man pages, completions and `sbx sandbox providers` are made from
 * this table). Shared code asks a provider's traits, never its name. The C structs of
 * sbx/local.h and sbx/docker.h (sbx_client_new) stay the typed way to the same options.
 *
 * sbx also keeps a small record of each sandbox made with a provider that cannot find its
 * sandboxes by itself (anything but local): the provider and the options needed to reach it
 * again, never a credential, so that a later command given only the id finds it.
 * docs/internals/providers.md describes the layer. */
#ifndef SBX_PROVIDER_H
#define SBX_PROVIDER_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "common.h"
#include "error.h"
#include "session.h"

/* What a provider can do. Code above the providers asks these, never a provider's name; the
 * conformance suite skips what a provider does not declare, saying so. */
enum sbx_provider_trait {
    SBX_PROVIDER_MOUNTS = 1u << 0,            /* storage mount entries (s3_mount, gcs_mount, ...) */
    SBX_PROVIDER_ACCOUNTS = 1u << 1,          /* manifest users and groups */
    SBX_PROVIDER_HOST_WORKSPACE = 1u << 2,    /* the workspace is a directory of this host, and
                                                 sbx_create_spec.workspace may name one */
    SBX_PROVIDER_SNAPSHOTS = 1u << 3,         /* sbx's tar snapshots (sbx_session_snapshot) */
    SBX_PROVIDER_NATIVE_SNAPSHOTS = 1u << 4,  /* snapshots of the provider's own making */
    SBX_PROVIDER_STOP_START = 1u << 5,        /* sbx_client_stop and sbx_client_start */
    SBX_PROVIDER_PTY = 1u << 6,               /* commands on a terminal (SBX_EXEC_TTY) */
    SBX_PROVIDER_PORTS = 1u << 7,             /* ports reached from the host (resolve_port) */
    SBX_PROVIDER_NETWORK_POLICY = 1u << 8,    /* an allow-list of network destinations */
    SBX_PROVIDER_GRANTS = 1u << 9,            /* host paths shown inside the sandbox */
    SBX_PROVIDER_ISOLATION_LEVELS = 1u << 10, /* a choice of isolation strengths */
    SBX_PROVIDER_LISTS = 1u << 11,            /* finds its sandboxes without being configured (local
                                                 always; docker when sbx_provider_probe finds an engine):
                                                 by-id commands and `sbx sandbox ps` ask it */
    SBX_PROVIDER_RESUME = 1u << 12, /* a later process reaches a sandbox again (attach by id,
                                       resume from a session state) */
    SBX_PROVIDER_STATS = 1u << 13,  /* sbx_session_stats: CPU, memory, processes */
    SBX_PROVIDER_LOGS = 1u << 14,   /* sbx_session_log_open: the sandbox's own log */
};

/* The name of one trait bit ("mounts", "accounts", "host-workspace", ...), or NULL. */
SBX_API const char *sbx_provider_trait_name(unsigned trait);

/* The type of a declared option, and what its JSON value is once checked (canonical form). A
 * string where another type is declared is read as the command line would read it ("2G",
 * "1.5", "true"): an agent file may write either. */
enum sbx_option_type {
    SBX_OPTION_STRING,  /* a string */
    SBX_OPTION_BOOL,    /* true or false */
    SBX_OPTION_INTEGER, /* a whole number within [min, max] */
    SBX_OPTION_SIZE,    /* bytes: an integer, or a string with a K, M or G suffix (powers of
                           1024); canonical: the integer */
    SBX_OPTION_CPUS,    /* a number of CPUs > 0 and <= 4096 (1.5); canonical: a real */
    SBX_OPTION_PATH,    /* an absolute host path, possibly followed by what arg says */
    SBX_OPTION_CHOICE,  /* one of the '|'-separated words of arg */
    SBX_OPTION_PORT,    /* a port number 1..65535 */
    SBX_OPTION_SECRET,  /* a reference, never the value: {"env": "VAR"} or {"file": "/PATH"}
                           (on the command line env:VAR or file:/PATH); never in a state or a
                           record; read with sbx_provider_secret */
};

enum {
    SBX_OPTION_LIST = 1 << 0,     /* a list of values: a JSON array (one value: a list of one);
                                     the command-line flag is repeated */
    SBX_OPTION_NONE_OK = 1 << 1,  /* also the string "none" (no limit) */
    SBX_OPTION_STATE = 1 << 2,    /* the provider keeps the value in its session states */
    SBX_OPTION_LOCATOR = 1 << 3,  /* needed to reach the provider's sandboxes again (an engine's
                                     address, a cluster context): kept in sbx's record of each
                                     sandbox, and given to the by-id commands by its flag */
    SBX_OPTION_TRUSTED = 1 << 4,  /* trusted host configuration (host paths, weaker isolation,
                                     extra privileges): from the command line or the C API only,
                                     never from an agent file */
    SBX_OPTION_REQUIRED = 1 << 5, /* needed to create a sandbox (not to attach, list or remove
                                     one): `sbx sandbox create` and `sbx run` say so first */
};

/* One declared option. Keys are snake_case; a key two providers declare means the same on
 * both and has the same type (image, memory, pids, cpus, network, ports, user, disk, ...). */
struct sbx_provider_option {
    const char *key;
    enum sbx_option_type type;
    unsigned flags;      /* SBX_OPTION_* above */
    const char *arg;     /* the value's name in help ("SIZE", "IMAGE"); CHOICE: the choices */
    const char *help;    /* one line */
    const char *flag;    /* its long flag on `sbx run` and `sbx sandbox create` ("docker-host"),
                            or NULL: only `-o KEY=VALUE` */
    char short_flag;     /* a one-letter flag too, or 0 */
    long long min, max;  /* INTEGER bounds; both 0: 1 and up */
    const char *danger;  /* values the command line warns about when given ('|'-separated, "*"
                            any), or NULL */
    const char *warning; /* that warning; "%s" stands for the value */
};

/* A provider as the table has it. Everything is borrowed and static. */
struct sbx_provider_info {
    const char *name;    /* "local", "docker" */
    const char *summary; /* one line */
    unsigned traits;     /* SBX_PROVIDER_* */
    const struct sbx_provider_option *options;
    size_t n_options;
    /* Mount entry types it refuses (bits 1u << enum sbx_entry_type; without
     * SBX_PROVIDER_MOUNTS, all of them) and why, with what it would take (NULL: none refused). */
    unsigned unmountable;
    const char *unmountable_why;
};

/* Refuse the mount entries of m that provider (NULL: the default) cannot mount, before anything
 * is made: SBX_E_UNSUPPORTED "entry 'data' (s3_files_mount): the local provider cannot mount
 * it: <why>" for the first one. SBX_E_NOTFOUND for an unknown provider. */
struct sbx_manifest;
SBX_API int sbx_provider_check_mounts(const char *provider, const struct sbx_manifest *m,
                                      struct sbx_error *err);

/* How many providers are built in; the first is the default (sbx_client_new(NULL, ...)). */
SBX_API size_t sbx_provider_count(void);
/* Provider i into *out: 0, or -SBX_E_NOTFOUND past the end (err untouched). */
SBX_API int sbx_provider_at(size_t i, struct sbx_provider_info *out);
/* The provider called name (NULL: the default) into *out. SBX_E_NOTFOUND "unknown provider
 * 'x' (local, docker)" naming the known ones. */
SBX_API int sbx_provider_find(const char *name, struct sbx_provider_info *out,
                              struct sbx_error *err);
/* p's option key, or NULL. */
SBX_API const struct sbx_provider_option *sbx_provider_option(const struct sbx_provider_info *p,
                                                              const char *key);
/* The value of option o as text (a command line's "2G", "env:VAR") into its canonical JSON
 * (one value even for a list). *out: caller owns. SBX_E_INVAL with a message that completes
 * "--FLAG ...", such as "wants a size such as 512M, not 'x'" (a secret's text is never
 * repeated). */
SBX_API int sbx_provider_option_parse(const struct sbx_provider_option *o, const char *text,
                                      json_t **out, struct sbx_error *err);
/* Check options (a JSON object; NULL: none) against provider's declared options and the
 * provider's own rules, as sbx_client_new_json would, without making a client: an unknown key
 * is SBX_E_INVAL "provider 'docker' has no option 'imgae' (did you mean 'image'?)", a value of
 * the wrong type names the key and what it wants. *out (may be NULL): the options in canonical
 * form, caller owns. SBX_E_NOTFOUND for an unknown provider. */
SBX_API int sbx_provider_options_check(const char *provider, const json_t *options, json_t **out,
                                       struct sbx_error *err);
/* A client of provider (NULL: the default) from its declared options, checked as above (never
 * taken; secrets are read when the provider needs them). *out: caller owns
 * (sbx_client_free). */
SBX_API int sbx_client_new_json(const char *provider, const json_t *options,
                                struct sbx_client **out, struct sbx_error *err);
/* The options under which provider finds its sandboxes here without being configured (docker:
 * the engine of $DOCKER_HOST, or /var/run/docker.sock when it exists), to merge under the
 * caller's own. 0 and *out (caller owns, {} when none are needed); SBX_E_NOTFOUND when it
 * cannot (no SBX_PROVIDER_LISTS trait, or nothing configured here). */
SBX_API int sbx_provider_probe(const char *provider, json_t **out, struct sbx_error *err);
/* p as JSON: {"name", "summary", "default": bool, "traits": [names], "options": [{"key",
 * "type", "arg", "help", "flag", "list", "locator", "state", "trusted"}], and when it refuses
 * some mount types "unmountable": {"types": [entry type names], "why"}}. Caller owns. */
SBX_API json_t *sbx_provider_describe(const struct sbx_provider_info *p);
/* Read a SECRET option's value (ref: {"env": "VAR"} or {"file": "/PATH"}, at most 64 KiB, a
 * trailing newline dropped) into a secret called what. *out: caller owns (sbx_secret_free).
 * SBX_E_NOTFOUND for an unset variable or a missing file. */
struct sbx_secret;
SBX_API int sbx_provider_secret(const json_t *ref, const char *what, struct sbx_secret **out,
                                struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Sandbox records: $SBX_RECORDS, else ${XDG_STATE_HOME:-~/.local/state}/sbx/sandboxes (0700),
 * one file ID.json each, written atomically: {"version": 1, "id", "provider", "options"
 * (only the provider's LOCATOR options), "created", "run"?: the id of the run that made the
 * sandbox and may remove it, "name"?: the sandbox's name, unique among the records, "labels"?:
 * {"key": "value"}}. Writing the record of an id again keeps its run, name and labels. */

/* A sandbox name: 1 to SBX_SANDBOX_NAME_MAX letters, digits, '.', '_' or '-', starting with a
 * letter or digit (as a container name). Labels: at most SBX_SANDBOX_LABELS_MAX, keys of 1 to
 * SBX_SANDBOX_LABEL_KEY_MAX printable characters without space or '=', string values of at most
 * SBX_SANDBOX_LABEL_VALUE_MAX bytes without control characters. */
#define SBX_SANDBOX_NAME_MAX        64
#define SBX_SANDBOX_LABELS_MAX      64
#define SBX_SANDBOX_LABEL_KEY_MAX   128
#define SBX_SANDBOX_LABEL_VALUE_MAX 1024
/* SBX_E_INVAL naming the name and the rule when name is not one. */
SBX_API int sbx_sandbox_name_check(const char *name, struct sbx_error *err);
/* SBX_E_INVAL naming the key (SBX_E_TOOBIG for too many) when labels (an object; NULL: none)
 * break the rules above. */
SBX_API int sbx_sandbox_labels_check(const json_t *labels, struct sbx_error *err);

/* Record sandbox id of provider, made with options (its canonical declared options: only the
 * LOCATOR ones are kept). Replaces an older record of the id, keeping its "run" (same
 * provider). */
SBX_API int sbx_sandbox_record_write(const char *provider, const char *id, const json_t *options,
                                     struct sbx_error *err);
/* Record that run (a run state's "run_id") made sandbox id: the run, and only the run, may
 * remove it (sbx_sandbox_run_state_discard, a completed resumed run). As record_write. */
SBX_API int sbx_sandbox_record_claim(const char *provider, const char *id, const json_t *options,
                                     const char *run, struct sbx_error *err);
/* Write the record of sandbox id as record_write does, with name (NULL: none) and labels (an
 * object; NULL: none) in place of the earlier ones. Checked as above; SBX_E_EXISTS "the name 'x'
 * is in use by sandbox 'y'" when another record has the name (writers take turns: one name, one
 * sandbox). */
SBX_API int sbx_sandbox_record_name(const char *provider, const char *id, const json_t *options,
                                    const char *name, const json_t *labels, struct sbx_error *err);
/* The record whose name is name (exact). SBX_E_NOTFOUND "no sandbox named 'x'". *out: caller
 * owns. */
SBX_API int sbx_sandbox_record_named(const char *name, json_t **out, struct sbx_error *err);
/* 1 when the record of id (exact) names run as the run that made it, else 0. */
SBX_API int sbx_sandbox_record_owned_by(const char *id, const char *run);
/* The record of id, else of the sandbox named id, else of the one recorded sandbox whose id
 * starts with it. SBX_E_NOTFOUND when
 * none (or several: "sandbox id prefix 'x' is ambiguous" is SBX_E_INVAL). *out: caller owns. */
SBX_API int sbx_sandbox_record_read(const char *id, json_t **out, struct sbx_error *err);
/* Forget id (exact). No record is not an error. */
SBX_API int sbx_sandbox_record_remove(const char *id, struct sbx_error *err);
/* Every record, oldest first. *out: caller owns (a JSON array). Unreadable files are
 * skipped. */
SBX_API int sbx_sandbox_records(json_t **out, struct sbx_error *err);

#endif
