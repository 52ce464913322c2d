/* sbx: the layout of struct sbx_manifest and the functions the files of src/sandbox/manifest/
 * share to fill it. Only files in this folder include it: the rest of sbx reads a manifest
 * through include/sbx/manifest.h, and internal.h is what materialisation and skills see.
 * Declarations are grouped by the file that defines them (docs/internals/manifest.md has the
 * code map). */
#ifndef SBX_SANDBOX_MANIFEST_MODEL_H
#define SBX_SANDBOX_MANIFEST_MODEL_H

#include <jansson.h>
#include <stddef.h>

#include "sandbox/manifest/internal.h"
#include "sbx/manifest.h"
#include "sbx/strv.h"

struct kv {
    char *name;
    char *value;
};

struct entry {
    struct sbx_manifest_entry pub; /* first: the public view points into this struct */
    int depth;                     /* nesting level of the declaration (0: top level) */
    char *path, *key, *description, *group;
    unsigned char *content;
    char *content_sha256;
    char *src, *src_path;
    char *repo, *host, *ref, *subpath, *url;
    char *mount_path;
    json_t *strategy;
    struct kv *fields;
    size_t nfields;
    struct sbx_secret **secrets;
    size_t nsecrets;
    /* mount credentials given as {"type": "secret", "env": VAR}: name = field, value = VAR.
     * Serialised as the reference; the value read from VAR (when set) is in secrets. */
    struct kv *cred_refs;
    size_t ncred_refs;
};

struct env {
    struct sbx_manifest_env pub;
    char *name, *value, *host_env, *description;
    struct sbx_secret *secret;
};

struct group {
    struct sbx_manifest_group pub;
    char *name;
    struct sbx_strv users;
};

struct sbx_manifest {
    char *root;
    struct entry **entries;
    size_t n, alloc;
    struct env **env;
    size_t nenv, envalloc;
    struct sbx_strv users;
    struct group **groups;
    size_t ngroups, galloc;
    struct sbx_strv allowlist;
    int has_allowlist;
    struct sbx__pathmap paths;    /* entry path -> entry index */
    struct sbx__pathmap prefixes; /* strict ancestor of some entry path -> that entry's index */
    size_t total_content;
};

/* Fields every entry may carry. `is_dir` is written by the Python SDK and ignored here. */
#define SBX__MANIFEST_COMMON_KEYS \
    "type", "description", "ephemeral", "group", "is_dir", "permissions", "mode"

/* ---- model.c ---- */

/* A new entry of type t with the type's defaults; caller owns (sbx__manifest_entry_free). */
struct entry *sbx__manifest_entry_new(enum sbx_entry_type t);
void sbx__manifest_entry_free(struct entry *e);
/* The type named s ("git_repo"); 0 when there is none. */
int sbx__manifest_type_from_name(const char *s, enum sbx_entry_type *out);
/* Can an entry of type t at path p be added? Duplicates, anything under a leaf entry, and a
 * leaf entry over existing entries are refused. Messages name p. */
int sbx__manifest_check_overlap(const struct sbx_manifest *m, const char *p, enum sbx_entry_type t,
                                struct sbx_error *err);
/* Append e (already checked with sbx__manifest_check_overlap). Takes ownership. */
void sbx__manifest_append_entry(struct sbx_manifest *m, struct entry *e);
/* A printable rendering of a name from outside for messages: control bytes, NUL and invalid
 * UTF-8 become \xNN, long names are cut with "...". */
void sbx__manifest_quote_name(const char *s, size_t len, char *out, size_t outsz);
/* Rewrite a path-module message "path '<p>' <rule>" to "path <rule>": the caller names the
 * entry already. */
void sbx__manifest_strip_path_quote(struct sbx_error *err);

/* ---- load.c ---- */

/* Copy obj with camelCase keys renamed to snake_case ("mountPath" -> "mount_path"), so a
 * manifest written by the JS SDK reads like one written by the Python SDK. Both spellings of
 * one field is an error. *out: new reference. */
int sbx__manifest_snake_keys(const json_t *obj, json_t **out, struct sbx_error *err);

/* ---- sources.c ---- */

/* Lexically normalise an absolute host path ("." and ".." resolved, no symlinks followed).
 * Caller owns the result. */
char *sbx__manifest_host_normalize(const char *abs);
/* Absolute normalised form of p, relative paths taken from base (absolute). Caller owns. */
char *sbx__manifest_host_absolute(const char *base, const char *p);
/* The working directory, or "/" when it cannot be had. Caller owns. */
char *sbx__manifest_cwd(void);
/* Check a local source: abs lies under base; every component below base exists and is not a
 * symlink; the last is a regular file (want_dir 0) or a directory without symlinks inside.
 * src is the path as written, for messages. */
int sbx__manifest_check_local_src(const char *base, const char *abs, const char *src, int want_dir,
                                  struct sbx_error *err);
/* Fill the git fields of e (repo, host, ref, subpath, url) from the snake-cased object o. */
int sbx__manifest_parse_git(struct entry *e, const json_t *o, struct sbx_error *err);

/* ---- mounts.c ---- */

/* Fill the mount fields, credentials and strategy of mount entry e from its object o. flags:
 * SBX_MANIFEST_NO_HOST_CHECKS skips the check that referenced credential variables are set. */
int sbx__manifest_parse_mount(struct entry *e, const json_t *o, int flags, struct sbx_error *err);
/* After all entries are in: every mount target (mount_path, or the entry path) lies in the
 * workspace (absolute targets outside root are refused unless flags has
 * SBX_MANIFEST_NO_HOST_CHECKS: the reference allows them, sbx's providers mount only inside the
 * workspace) and overlaps no other entry or mount target. Messages name the entry. */
int sbx__manifest_check_mount_targets(const struct sbx_manifest *m, int flags,
                                      struct sbx_error *err);

/* ---- env.c ---- */

void sbx__manifest_env_free(struct env *v);
/* [A-Za-z_][A-Za-z0-9_]*, at most 255 bytes. */
int sbx__manifest_valid_env_name(const char *s, size_t n);
/* The "environment" of a document. */
int sbx__manifest_parse_environment(struct sbx_manifest *m, const json_t *doc,
                                    struct sbx_error *err);

/* ---- accounts.c ---- */

void sbx__manifest_group_free(struct group *g);
/* [a-z_][a-z0-9_-]{0,31}: portable user and group names. */
int sbx__manifest_valid_account_name(const char *s);
/* A rejected name as a message shows it: s when short and printable, else "...". */
const char *sbx__manifest_shown_name(const char *s);
/* The "users" and "groups" of a document. */
int sbx__manifest_parse_accounts(struct sbx_manifest *m, const json_t *doc, struct sbx_error *err);

#endif
