/* sbx: the layout of struct sbx_manifest and the functions the files of src/sandbox/manifest/
 * share to fill it. Only files in this folder include it: the rest of sbx reads a manifest
 * through include/sbx/manifest.h, and internal.h is what materialisation and skills see.
 * Declarations are grouped by the file that defines them (docs/internals/manifest.md has the
 * code map). The files form a tree, each calling only files listed above it here: keys.c
 * (keys.h) and pathmap.c (internal.h) at the bottom, then model.c, then env.c, accounts.c,
 * sources.c and mounts.c, and load.c, which declares nothing here, on top; serialize.c and render.c
 * only read a finished manifest. */
#ifndef SBX_SANDBOX_MANIFEST_MODEL_H
#define SBX_SANDBOX_MANIFEST_MODEL_H

#include <jansson.h>
#include <stddef.h>

#include "sandbox/manifest/internal.h"
#include "sandbox/manifest/keys.h"
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
    char *root_owner; /* a declared user, or NULL: the provider's user */
    struct entry **entries;
    size_t n, alloc;
    struct env **env;
    size_t nenv, envalloc;
    struct sbx_strv users;
    struct group **groups;
    size_t ngroups, galloc;
    struct sbx_strv allowlist;
    int has_allowlist;
    struct sbx_manifest_grant *grants; /* strings owned */
    size_t ngrants;
    struct sbx__pathmap paths;    /* entry path -> entry index */
    struct sbx__pathmap prefixes; /* strict ancestor of some entry path -> that entry's index */
    size_t total_content;
};

/* ---- model.c ---- */

/* Append a copy of g (its strings copied). */
void sbx__manifest_add_grant(struct sbx_manifest *m, const struct sbx_manifest_grant *g);

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
/* The parts of a manifest, freed (each accepts NULL). */
void sbx__manifest_env_free(struct env *v);
void sbx__manifest_group_free(struct group *g);
/* The first half of every sbx_manifest_add_* builder: normalise path, apply o; *ep: a new
 * entry of type t (caller fills its type's fields, then calls sbx__manifest_add_finish). */
int sbx__manifest_add_begin(struct sbx_manifest *m, const char *path, enum sbx_entry_type t,
                            const struct sbx_manifest_entry_opts *o, struct entry **ep,
                            struct sbx_error *err);
/* The second half: with rc 0, check the entry limit and the overlap rules and append e; else
 * (or when a check fails) prefix err with the entry and free e. Takes e. */
int sbx__manifest_add_finish(struct sbx_manifest *m, struct entry *e, int rc,
                             struct sbx_error *err);

/* ---- env.c ---- */

/* [A-Za-z_][A-Za-z0-9_]*, at most 255 bytes. */
int sbx__manifest_valid_env_name(const char *s, size_t n);
/* Add variable v to m, replacing one of the same name. Takes v. */
void sbx__manifest_env_put(struct sbx_manifest *m, struct env *v);
/* The "environment" of a document. */
int sbx__manifest_parse_environment(struct sbx_manifest *m, const json_t *doc,
                                    struct sbx_error *err);

/* ---- accounts.c ---- */

/* [a-z_][a-z0-9_-]{0,31}: portable user and group names. */
int sbx__manifest_valid_account_name(const char *s);
/* A rejected name as a message shows it: s when short and printable, else "...". */
const char *sbx__manifest_shown_name(const char *s);
/* The "users" and "groups" of a document. */
int sbx__manifest_parse_accounts(struct sbx_manifest *m, const json_t *doc, struct sbx_error *err);

/* ---- sources.c ---- */

/* Lexically normalise an absolute host path ("." and ".." resolved, no symlinks followed).
 * Caller owns the result. */
char *sbx__manifest_host_normalize(const char *abs);
/* Absolute normalised form of p, relative paths taken from base (absolute). Caller owns. */
char *sbx__manifest_host_absolute(const char *base, const char *p);
/* The working directory, or "/" when it cannot be had. Caller owns. */
char *sbx__manifest_cwd(void);
/* Check a local source: abs lies under base; every component below base exists and is not a
 * symlink; the last is a regular file (want_dir 0) or a directory without symlinks inside
 * (want_dir 1), or a directory whose contents are not looked at (SBX__LOCAL_SRC_DIR_ITSELF).
 * src is the path as written, for messages. */
#define SBX__LOCAL_SRC_DIR_ITSELF 2
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

#endif
