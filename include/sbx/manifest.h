/* sbx: the workspace manifest, the fresh-session contract of a sandbox workspace.
 *
 * A manifest says what a new workspace starts with: entries keyed by workspace-relative path
 * (files, directories, host files and directories to copy in, git repositories, storage mounts),
 * the in-sandbox root ("/workspace"), environment variables, and OS users and groups. It is pure
 * data: loading one never touches the sandbox. The local provider materialises it later.
 *
 * Document shape (JSON or YAML, docs/internals/manifest.md has the details): the entry `type`
 * strings and field names of the OpenAI Agents SDK (`file`, `dir`, `local_file`, `local_dir`,
 * `git_repo`, `s3_mount`, `gcs_mount`, `r2_mount`, `azure_blob_mount`, `box_mount`,
 * `s3_files_mount`), so a manifest serialized by the Python or JS SDK loads here (camelCase field
 * names are accepted as aliases of the snake_case ones). Unknown fields are errors.
 *
 * Path rules: every entry key goes through sbx_path_normalize() once; keys of a dir's
 * `children` are relative to the dir. Two entries may not name the same normalised path, and
 * nothing may lie under a `file`, `local_file` or mount entry. Errors name the entry:
 *   entry 'a/../b': path must not contain '..'
 *
 * Secrets (mount credentials, environment values marked secret) are held as struct sbx_secret,
 * which has no serializer: sbx_manifest_to_json() leaves them out and counts them.
 *
 * A manifest is not thread-safe for writing; concurrent readers are fine. */
#ifndef SBX_MANIFEST_H
#define SBX_MANIFEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "buf.h"
#include "common.h"
#include "error.h"
#include "secret.h"
#include "strv.h"

struct sbx_manifest; /* opaque */

enum sbx_entry_type {
    SBX_ENTRY_FILE = 0,
    SBX_ENTRY_DIR,
    SBX_ENTRY_LOCAL_FILE,
    SBX_ENTRY_LOCAL_DIR,
    SBX_ENTRY_GIT_REPO,
    SBX_ENTRY_S3_MOUNT,
    SBX_ENTRY_GCS_MOUNT,
    SBX_ENTRY_R2_MOUNT,
    SBX_ENTRY_AZURE_BLOB_MOUNT,
    SBX_ENTRY_BOX_MOUNT,
    SBX_ENTRY_S3_FILES_MOUNT,
};

/* The document `type` string of t ("file", "s3_mount", ...). Never NULL. */
SBX_API const char *sbx_entry_type_name(enum sbx_entry_type t);
/* True for the six mount kinds. */
SBX_API int sbx_entry_type_is_mount(enum sbx_entry_type t);

#define SBX_MANIFEST_NONE ((size_t)-1)

/* One entry, read-only. Every pointer is borrowed from the manifest and valid until it is
 * changed or freed. Fields that do not apply to the entry's type are NULL / 0. */
struct sbx_manifest_entry {
    const char *path; /* normalised workspace-relative path, e.g. "data/report.md" */
    const char *key;  /* the key as declared (normalised), relative to the parent dir */
    enum sbx_entry_type type;
    size_t parent;           /* index of the dir entry whose `children` declared it, or NONE */
    size_t nchildren;        /* number of entries declared in `children` (dir), 0 otherwise */
    mode_t mode;             /* permission bits (0..0777) applied after materialising */
    int ephemeral;           /* rebuilt on every start, never in snapshots (mounts: always 1) */
    const char *description; /* shown to the agent next to the path; may be NULL */
    const char *group;       /* group (or user) name to chgrp the entry to; may be NULL */

    /* file: content[0..content_len) (any bytes; NUL-terminated for convenience) */
    const unsigned char *content;
    size_t content_len;

    /* local_file, local_dir: src as written in the document (NULL: local_dir without a
     * source, materialised as an empty directory) and the absolute host path it resolved to */
    const char *src;
    const char *src_path;

    /* git_repo: repo as written ("owner/name" or a URL), host ("github.com" unless given,
     * NULL for a URL repo), ref (NULL: the remote's default branch), subpath (NULL: repo root),
     * and the clone URL: "https://<host>/<repo>.git" or the URL / local path as given. */
    const char *repo;
    const char *host;
    const char *ref;
    const char *subpath;
    const char *url;

    /* mounts: where it is mounted (NULL: at the entry path; relative paths are normalised and
     * lie under root, absolute ones are kept), read_only (default 1), and the strategy as the
     * reference spells it ({"type": "in_container", "pattern": {...}} or {"type":
     * "docker_volume", "driver": ...}; NULL if none; its driver_options are secrets). Other
     * fields: sbx_manifest_entry_field() and sbx_manifest_entry_secret(). */
    const char *mount_path;
    int read_only;
    const json_t *mount_strategy;

    /* file recorded by digest only (a session state's manifest, SBX_MANIFEST_CONTENT_DIGESTS):
     * the SHA-256 of its content_len bytes as 64 lowercase hex digits, content NULL. NULL for
     * every other entry. Such an entry cannot be materialised: its bytes are in the workspace
     * or the snapshot it was restored from. */
    const char *content_sha256;
};

/* Entries in declared depth-first pre-order: a dir comes before its children, siblings in the
 * order written. Iterate with `for (i = 0; i < count; i++) entry_at(m, i)`. */
SBX_API size_t sbx_manifest_entry_count(const struct sbx_manifest *m);
/* NULL when i is out of range. */
SBX_API const struct sbx_manifest_entry *sbx_manifest_entry_at(const struct sbx_manifest *m,
                                                               size_t i);
/* The entry at a normalised path, or NULL. */
SBX_API const struct sbx_manifest_entry *sbx_manifest_find(const struct sbx_manifest *m,
                                                           const char *path);
/* A non-secret string field of a mount entry ("bucket", "prefix", "region", "endpoint_url",
 * "account", "container", "file_system_id", "s3_provider", ...); NULL when not set. */
SBX_API const char *sbx_manifest_entry_field(const struct sbx_manifest_entry *e, const char *name);
/* A credential of a mount entry by field name ("secret_access_key", "account_key",
 * "driver_options.<key>", "extra_options.<key>" ...); NULL when not set. */
SBX_API const struct sbx_secret *sbx_manifest_entry_secret(const struct sbx_manifest_entry *e,
                                                           const char *name);

/* Environment. A variable is a plain value, a secret value (held as struct sbx_secret), or a
 * reference to a variable of the harness environment read when the sandbox starts
 * (`{"type": "secret", "env": "HOST_VAR"}`; the value read is secret). */
struct sbx_manifest_env {
    const char *name;
    const char *value;               /* plain value, or NULL */
    const struct sbx_secret *secret; /* secret value, or NULL */
    const char *host_env;            /* harness variable to read at start, or NULL */
    const char *description;         /* may be NULL */
    int ephemeral;
};
SBX_API size_t sbx_manifest_env_count(const struct sbx_manifest *m);
SBX_API const struct sbx_manifest_env *sbx_manifest_env_at(const struct sbx_manifest *m, size_t i);
/* Append "NAME=VALUE" for every variable to out, in declared order, revealing secrets and
 * reading host references with getenv(). A reference to one of sbx's own credentials
 * (sbx_manifest_harness_credential) is refused unless pass (may be NULL) names it: a manifest,
 * which may come from anywhere, never pulls the model's key into a sandbox by itself.
 * Errors: SBX_E_NOTFOUND when a referenced harness variable is not set ("environment 'K':
 * harness variable 'H' is not set"); SBX_E_PERM for a credential not let through. */
SBX_API int sbx_manifest_env_resolve(const struct sbx_manifest *m, const struct sbx_strv *pass,
                                     struct sbx_strv *out, struct sbx_error *err);
/* Append the value of every secret of m to out (each once): secret environment values, the
 * harness variables secret references read (those set now) and mount credentials. For the
 * scrubber of what sbx writes (traces, run states, conversations). */
SBX_API void sbx_manifest_secret_values(const struct sbx_manifest *m, struct sbx_strv *out);
/* True when name is a variable sbx itself reads for credentials (OPENAI_API_KEY). */
SBX_API int sbx_manifest_harness_credential(const char *name);

/* Users and groups to provision. Borrowed. */
struct sbx_manifest_group {
    const char *name;
    const struct sbx_strv *users; /* member user names, in declared order */
};
SBX_API const struct sbx_strv *sbx_manifest_users(const struct sbx_manifest *m);
SBX_API size_t sbx_manifest_group_count(const struct sbx_manifest *m);
SBX_API const struct sbx_manifest_group *sbx_manifest_group_at(const struct sbx_manifest *m,
                                                               size_t i);
/* Every user to create: the declared users, then group members not declared as users (the
 * reference provisions that union). Appends names to out. */
SBX_API void sbx_manifest_account_users(const struct sbx_manifest *m, struct sbx_strv *out);
/* The declared user the workspace root directory belongs to (top-level "root_owner"), or NULL:
 * the provider's user. Borrowed. */
SBX_API const char *sbx_manifest_root_owner(const struct sbx_manifest *m);

/* Host paths the manifest asks to show inside the sandbox (the Agents SDK's extra_path_grants,
 * each {"path", "read_only", "description", "host_path"}): path is where it appears in the
 * sandbox, host_path the host source (NULL: the same as path). A provider applies them with the
 * same checks as the grants its own configuration gives (the local provider: --ro/--rw; never
 * "/", a home directory itself, the system paths, /proc /sys /dev /run or a tree with sockets);
 * one without host grants (no SBX_PROVIDER_GRANTS) refuses a manifest that has any. A session
 * state's manifest never carries them: a state grants nothing by itself. Borrowed. */
struct sbx_manifest_grant {
    const char *path;
    const char *host_path;
    int read_only;
    const char *description;
};
#define SBX_MANIFEST_MAX_GRANTS 64
SBX_API size_t sbx_manifest_grant_count(const struct sbx_manifest *m);
SBX_API const struct sbx_manifest_grant *sbx_manifest_grant_at(const struct sbx_manifest *m,
                                                               size_t i);

/* In-sandbox absolute root, "/workspace" unless set. Borrowed. */
SBX_API const char *sbx_manifest_root(const struct sbx_manifest *m);
/* The commands the agent is told to use on remote mounts (remote_mount_command_allowlist, as
 * the Agents SDK names it), or NULL when the manifest gives none (then the default applies:
 * SBX_REMOTE_MOUNT_COMMANDS). Borrowed. */
struct sbx_strv;
SBX_API const struct sbx_strv *sbx_manifest_mount_commands(const struct sbx_manifest *m);
/* The Agents SDK's default remote_mount_command_allowlist, space-separated. */
#define SBX_REMOTE_MOUNT_COMMANDS \
    "ls find stat cat less head tail du grep rg wc sort cut cp tee echo mkdir rm"

/* ---- Loading ---------------------------------------------------------------------------- */

#define SBX_MANIFEST_DEFAULT_MAX_FILE_BYTES  ((size_t)64 << 20)
#define SBX_MANIFEST_DEFAULT_MAX_TOTAL_BYTES ((size_t)256 << 20)
#define SBX_MANIFEST_DEFAULT_MAX_ENTRIES     100000
/* A manifest document (file) is read whole, so it has a bound: past it sbx_manifest_load_file
 * fails with SBX_E_TOOBIG "the document is N bytes, more than the manifest limit of 64 MiB
 * (...)" before reading it. Large files belong in local_file entries, which have no such bound. */
#define SBX_MANIFEST_DEFAULT_MAX_DOC_BYTES ((size_t)64 << 20)

enum sbx_manifest_load_flags {
    /* Do not look at the host for local_file / local_dir sources (existence, type, symlinks).
     * For tools that only reformat a manifest; materialising re-checks anyway. */
    SBX_MANIFEST_NO_HOST_CHECKS = 1 << 0,
    /* Accept file content given by digest, {"type": "sha256", "digest": "<64 hex>", "size": N}
     * (what a session state records, SBX_MANIFEST_JSON_CONTENT_DIGESTS). Without the flag that
     * form is an error: a manifest must carry its files' bytes. */
    SBX_MANIFEST_CONTENT_DIGESTS = 1 << 1,
};

/* All-zero is the default. */
struct sbx_manifest_load_opts {
    /* Directory relative local sources resolve against, and that every source must lie under.
     * NULL: the manifest file's directory (load_file) or the current directory (from_json). */
    const char *base_dir;
    size_t max_file_bytes;  /* per file entry content; 0: SBX_MANIFEST_DEFAULT_MAX_FILE_BYTES */
    size_t max_total_bytes; /* all file content; 0: SBX_MANIFEST_DEFAULT_MAX_TOTAL_BYTES */
    size_t max_entries;     /* 0: SBX_MANIFEST_DEFAULT_MAX_ENTRIES */
    size_t max_doc_bytes;   /* document size (load_file); 0: SBX_MANIFEST_DEFAULT_MAX_DOC_BYTES */
    int max_depth;          /* document nesting (load_file); 0: the JSON default (64) */
    int flags;              /* enum sbx_manifest_load_flags */
};

/* Build a manifest from a parsed document. doc is borrowed. opts may be NULL. *out: caller
 * owns (sbx_manifest_free). Errors name the entry or field and the rule:
 *   SBX_E_INVAL  bad path, duplicate or overlapping entry, unknown type or field, missing
 *                required field, wrong field type, bad name or value
 *   SBX_E_TOOBIG content or entry count over a limit (checked before decoding)
 *   SBX_E_NOTFOUND / SBX_E_PERM  a local source is missing / is or contains a symlink or lies
 *                outside base_dir
 * Blocks only for the host checks of local sources. */
SBX_API int sbx_manifest_from_json(const json_t *doc, const struct sbx_manifest_load_opts *opts,
                                   struct sbx_manifest **out, struct sbx_error *err);
/* Load a YAML or JSON file (sbx_doc_load_file) and build the manifest from it. Relative local
 * sources resolve against the file's directory unless opts->base_dir says otherwise. Error
 * messages do not repeat the file name (callers add it: "manifest 'm.yaml': entry 'x': ..."):
 * the reader's own errors (size, depth, syntax) plus those of sbx_manifest_from_json. */
SBX_API int sbx_manifest_load_file(const char *path, const struct sbx_manifest_load_opts *opts,
                                   struct sbx_manifest **out, struct sbx_error *err);

SBX_API void sbx_manifest_free(struct sbx_manifest *m);

/* ---- Serialising ------------------------------------------------------------------------ */

enum sbx_manifest_json_flags {
    SBX_MANIFEST_JSON_BASE64 = 1 << 0, /* write every file content as base64, even text */
    /* Leave out ephemeral environment variables that hold a value (a harness reference holds
     * none and stays): what a session state keeps. */
    SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV = 1 << 1,
    /* Write the content of non-ephemeral file entries as {"type": "sha256", "digest": ...,
     * "size": N} instead of the bytes: what a session state keeps, since those files are in the
     * workspace (and in its snapshots) already; ephemeral files, rebuilt on every start, keep
     * their bytes. A file recorded by digest is always written so, whatever the flags. */
    SBX_MANIFEST_JSON_CONTENT_DIGESTS = 1 << 2,
};

/* The normalised document: version, root, entries (declared order and nesting, defaults made
 * explicit where they differ from the reference's: permissions always), environment, users,
 * groups. File content that is valid UTF-8 without NUL bytes is written as a string, anything
 * else as {"type": "base64", "data": "..."}. Secrets are never written: secret environment
 * variables are left out, mount credentials and driver options are left out of their entry,
 * and *omitted_secrets (may be NULL) receives how many were left out. *out: caller owns
 * (json_decref). Fails only on an internal limit (SBX_E_TOOBIG). */
SBX_API int sbx_manifest_to_json(const struct sbx_manifest *m, int flags, json_t **out,
                                 size_t *omitted_secrets, struct sbx_error *err);

/* ---- The tree shown to the agent -------------------------------------------------------- */

#define SBX_MANIFEST_TREE_DEFAULT_MAX_BYTES 5000

/* Append the workspace tree as the agent sees it to out: root, then one line per path
 * component with box-drawing branches, kind and size, and the description after " # ". Paths
 * deeper than depth components are folded into their parent's line ("12 entries not shown");
 * depth 0 means no limit. The text never exceeds max_bytes (0: the default); past it, it ends
 * with "... (truncated, N more lines; use ls to see them)". Host paths and secrets never
 * appear. Fails only on out's limit. */
SBX_API int sbx_manifest_render_tree(const struct sbx_manifest *m, int depth, size_t max_bytes,
                                     struct sbx_buf *out, struct sbx_error *err);

/* ---- Building from C ---------------------------------------------------------------------- */

/* An empty manifest with root "/workspace". Caller owns (sbx_manifest_free). */
SBX_API struct sbx_manifest *sbx_manifest_new(void);
/* Set the root (sbx_path_check_root rules). */
SBX_API int sbx_manifest_set_root(struct sbx_manifest *m, const char *root, struct sbx_error *err);

/* Per-entry options for the add functions; NULL or all-zero means the defaults. */
struct sbx_manifest_entry_opts {
    mode_t mode; /* 0: 0644 for file / local_file, 0755 otherwise */
    int ephemeral;
    const char *description; /* copied */
};

/* Each add function appends a top-level entry at path (normalised with the same rules and the
 * same duplicate / overlap checks as loading; path may have several components, e.g.
 * "output/report.md"), copying every argument. On error the manifest is unchanged. */
SBX_API int sbx_manifest_add_file(struct sbx_manifest *m, const char *path, const void *data,
                                  size_t len, const struct sbx_manifest_entry_opts *o,
                                  struct sbx_error *err);
SBX_API int sbx_manifest_add_dir(struct sbx_manifest *m, const char *path,
                                 const struct sbx_manifest_entry_opts *o, struct sbx_error *err);
/* src: host path, absolute or relative to the current directory; checked like a loaded
 * source with base_dir "/" (exists, right type, no symlinks). */
SBX_API int sbx_manifest_add_local_file(struct sbx_manifest *m, const char *path, const char *src,
                                        const struct sbx_manifest_entry_opts *o,
                                        struct sbx_error *err);
SBX_API int sbx_manifest_add_local_dir(struct sbx_manifest *m, const char *path, const char *src,
                                       const struct sbx_manifest_entry_opts *o,
                                       struct sbx_error *err);
/* repo: "owner/name" (on github.com) or a URL; ref and subpath may be NULL. */
SBX_API int sbx_manifest_add_git_repo(struct sbx_manifest *m, const char *path, const char *repo,
                                      const char *ref, const char *subpath,
                                      const struct sbx_manifest_entry_opts *o,
                                      struct sbx_error *err);

/* Give the mount entries of m the credentials of the same entries of the trusted manifest
 * from (same path, type and non-secret fields): a saved manifest never holds them, so start and
 * resume take them from the manifest the user gives again. Returns how many entries got some. */
SBX_API size_t sbx_manifest_copy_mount_secrets(const struct sbx_manifest *from,
                                               struct sbx_manifest *m);
enum sbx_manifest_env_flags {
    SBX_MANIFEST_ENV_SECRET = 1 << 0,    /* hold the value as a secret; never serialised */
    SBX_MANIFEST_ENV_EPHEMERAL = 1 << 1, /* rebuild instead of persisting */
    SBX_MANIFEST_ENV_HOST = 1 << 2,      /* value names a harness variable read at start */
};
/* Set (or replace) an environment variable. name: [A-Za-z_][A-Za-z0-9_]*. */
SBX_API int sbx_manifest_set_env(struct sbx_manifest *m, const char *name, const char *value,
                                 int flags, struct sbx_error *err);
/* Declare a user ([a-z_][a-z0-9_-]{0,31}); declaring one twice is SBX_E_EXISTS. */
SBX_API int sbx_manifest_add_user(struct sbx_manifest *m, const char *name, struct sbx_error *err);
/* Give the workspace root directory to name, a user already declared (sbx_manifest_add_user);
 * SBX_E_INVAL for an invalid or undeclared name. */
SBX_API int sbx_manifest_set_root_owner(struct sbx_manifest *m, const char *name,
                                        struct sbx_error *err);
/* Declare a group with members (NULL-terminated, may be NULL). */
SBX_API int sbx_manifest_add_group(struct sbx_manifest *m, const char *name,
                                   const char *const *users, struct sbx_error *err);

#endif
