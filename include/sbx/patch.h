/* sbx: the V4A patch engine behind the apply_patch tool.
 *
 * A patch is parsed into a list of file operations (add, delete, update with optional move),
 * every path is normalised with sbx_path_normalize() while parsing, then the patch is applied
 * against a file provider in two phases: all new file contents are computed in memory first
 * (nothing is touched if any hunk fails to match, any file is missing, any path is refused),
 * then the provider's commit step writes everything in one go. The grammar, the matching rules
 * and the commit protocol are described in docs/internals/patch.md.
 *
 * Errors are written for the model to read (the tool layer returns them as the tool output):
 * they name the file and, for a hunk that does not match, quote the line that failed. */
#ifndef SBX_PATCH_H
#define SBX_PATCH_H

#include <stddef.h>

#include "buf.h"
#include "common.h"
#include "error.h"
#include "json.h"

/* Limits on what a patch may ask for. Zero fields take the defaults below. */
struct sbx_patch_limits {
    size_t max_patch_bytes; /* whole patch text (or the sum of the operation diffs) */
    size_t max_files;       /* file operations in one patch */
    size_t max_hunks;       /* hunks (@@ sections) over all files */
    size_t max_line_bytes;  /* one line of the patch */
    size_t max_file_bytes;  /* a file read for update, and any file produced */
};

#define SBX_PATCH_DEFAULT_MAX_PATCH_BYTES ((size_t)4 << 20)
#define SBX_PATCH_DEFAULT_MAX_FILES       512
#define SBX_PATCH_DEFAULT_MAX_HUNKS       4096
#define SBX_PATCH_DEFAULT_MAX_LINE_BYTES  ((size_t)256 << 10)
#define SBX_PATCH_DEFAULT_MAX_FILE_BYTES  ((size_t)64 << 20)

/* How paths written in the patch are turned into workspace paths. All-zero is valid: relative
 * paths only, taken from the workspace root. */
struct sbx_patch_options {
    struct sbx_patch_limits limits;
    /* Normalised workspace-relative directory that relative patch paths are taken from (the
     * run's working directory); NULL or "" for the workspace root. Borrowed. */
    const char *cwd;
    /* Absolute in-sandbox workspace root ("/workspace"). When set, absolute patch paths at or
     * below it are accepted; when NULL every absolute path is refused. Borrowed. */
    const char *root;
};

enum sbx_patch_kind {
    SBX_PATCH_ADD = 1, /* "*** Add File:" / create_file: the file gets exactly the + lines */
    SBX_PATCH_DELETE,  /* "*** Delete File:" / delete_file */
    SBX_PATCH_UPDATE,  /* "*** Update File:" / update_file, optionally moved */
};

/* A parsed patch. Opaque; free with sbx_patch_free(). */
struct sbx_patch;

/* Parse a V4A patch text ("*** Begin Patch" ... "*** End Patch"). opts may be NULL. The
 * envelope is read leniently: surrounding blank lines and whitespace around the markers are
 * ignored, CRLF line ends are accepted, and a shell heredoc wrapper (<<'EOF' ... EOF) is
 * stripped. A text whose first non-blank character is '{' or '[' is read as JSON operations
 * instead (see sbx_patch_from_json), as the reference's apply_patch tool accepts. *out: caller owns
 * (sbx_patch_free). Errors: SBX_E_PARSE with the line number and what was expected, SBX_E_INVAL for
 * a refused path (the sbx_path_normalize() rule), SBX_E_TOOBIG past a limit. */
SBX_API int sbx_patch_parse(const char *text, size_t len, const struct sbx_patch_options *opts,
                            struct sbx_patch **out, struct sbx_error *err);

/* One operation in the form of the Responses API's built-in apply_patch tool: create_file,
 * update_file or delete_file with a path and a V4A diff. For SBX_PATCH_ADD the diff is the
 * whole file as "+" lines; for SBX_PATCH_UPDATE it is the body of an update (the "@@" hunks,
 * optionally ending with "*** End of File"); for SBX_PATCH_DELETE it is ignored (may be NULL).
 * move_to (update only) may be NULL. All pointers borrowed. */
struct sbx_patch_op_spec {
    enum sbx_patch_kind kind;
    const char *path;
    const char *move_to;
    const char *diff;
    size_t diff_len;
};

/* Build a patch from a list of operations; the same rules, limits and atomicity as a parsed
 * patch text apply. Errors name the operation by index ("operation 2 ('a.txt'): ..."). */
SBX_API int sbx_patch_from_ops(const struct sbx_patch_op_spec *ops, size_t n,
                               const struct sbx_patch_options *opts, struct sbx_patch **out,
                               struct sbx_error *err);

/* Build a patch from operations in JSON, as the Responses API and the reference's custom tool
 * carry them: one operation object {"type": "create_file" | "update_file" | "delete_file",
 * "path": str, "diff": str, "move_to": str?}, an array of them, {"operation": op} (an
 * apply_patch_call item) or {"operations": [op...]}. Other keys are ignored. v is borrowed.
 * Errors name the operation: SBX_E_INVAL for a missing or mistyped field ("operation 2:
 * missing required field 'path'"), SBX_E_PARSE for a bad type or shape, then as
 * sbx_patch_from_ops(). */
SBX_API int sbx_patch_from_json(const json_t *v, const struct sbx_patch_options *opts,
                                struct sbx_patch **out, struct sbx_error *err);

SBX_API void sbx_patch_free(struct sbx_patch *p);

/* Inspect the parsed operations (for approvals and logging). Paths are normalised and
 * workspace-relative; borrowed from p. move_to is NULL when the update does not move. */
SBX_API size_t sbx_patch_count(const struct sbx_patch *p);
SBX_API enum sbx_patch_kind sbx_patch_op(const struct sbx_patch *p, size_t i, const char **path,
                                         const char **move_to);

/* ---- file providers ---------------------------------------------------------------------- */

enum sbx_patch_file_kind {
    SBX_PATCH_FILE_NONE = 0, /* nothing at the path */
    SBX_PATCH_FILE_REGULAR,
    SBX_PATCH_FILE_DIR,
    SBX_PATCH_FILE_SYMLINK,
    SBX_PATCH_FILE_OTHER, /* device, socket, fifo */
};

/* One change handed to the commit step. data is NULL for a deletion. mode: permission bits for
 * a written file; 0 means keep the existing file's (0644 when there is none). A moved file
 * carries its source's bits. */
struct sbx_patch_change {
    const char *path; /* normalised, workspace-relative */
    const char *data;
    size_t len;
    unsigned mode;
};

struct sbx_patch_fs;

/* A file provider. Every path it receives is normalised and workspace-relative; every
 * function fills err on failure and returns -code. */
struct sbx_patch_fs_ops {
    /* Read the whole regular file at path, at most max bytes (SBX_E_TOOBIG past it), appending
     * to out; *mode receives its permission bits. A missing file is SBX_E_NOTFOUND; a path
     * that leaves the workspace is SBX_E_PERM. */
    int (*read)(struct sbx_patch_fs *fs, const char *path, size_t max, struct sbx_buf *out,
                unsigned *mode, struct sbx_error *err);
    /* What is at path, without following a final symlink. NONE (also when a parent is missing
     * or is not a directory) is not an error; a path leaving the workspace is SBX_E_PERM. */
    int (*exists)(struct sbx_patch_fs *fs, const char *path, enum sbx_patch_file_kind *kind,
                  struct sbx_error *err);
    /* Write and delete everything in changes[0..n), all or nothing as far as the medium allows:
     * on failure, as many changes as possible are rolled back and the error says what state
     * was left. Missing parent directories are created. */
    int (*commit)(struct sbx_patch_fs *fs, const struct sbx_patch_change *changes, size_t n,
                  struct sbx_error *err);
};

struct sbx_patch_fs {
    const struct sbx_patch_fs_ops *ops;
    void *ctx; /* for the provider */
    int dirfd; /* for the built-in directory provider; -1 otherwise */
};

/* Initialise fs as the built-in provider on a host directory: every access goes through
 * sbx_fs_* beneath dirfd (RESOLVE_BENEATH), symlinks that leave the directory are refused, a
 * final symlink is never patched or deleted. dirfd is borrowed and must outlive fs.
 *
 * Its commit writes every new content to a temp file next to its target (fsynced), hard-links
 * every file about to be replaced or deleted to a backup name, then renames the temps over the
 * targets and removes the deleted files; if any rename or removal fails, the ones already done
 * are undone from the backups. Only then are the backups removed and the directories fsynced.
 * A crash in the middle can leave temp or backup files (".name.sbx-*"); it never leaves a
 * half-written file. Directories created for new files are not removed on failure. */
SBX_API void sbx_patch_fs_init_dirfd(struct sbx_patch_fs *fs, int dirfd);

/* ---- applying ---------------------------------------------------------------------------- */

struct sbx_patch_result {
    /* One line per operation, in order, as the reference tool reports it: "Created p",
     * "Updated p", "Updated p\nMoved p to q", "Deleted p" (paths as written in the patch,
     * normalised). Caller owns: free with sbx_patch_result_release(). */
    char *summary;
    size_t added, updated, deleted, moved;
    /* Number of hunks that matched only after ignoring whitespace (trailing, then surrounding)
     * or folding typographic punctuation. The patch was applied; the tool layer may mention
     * it. */
    size_t fuzzy_hunks;
};

SBX_API void sbx_patch_result_release(struct sbx_patch_result *r);

/* Apply p through fs. opts (may be NULL) supplies the limits. Either every operation takes
 * effect or (unless the commit step itself fails half-way, see the provider) none does.
 * Operations run in order on an in-memory view, so a later operation sees an earlier one's
 * result (update a file twice, delete then re-add). On success *res is filled (caller
 * releases); on failure it is untouched. Errors name the file and the operation:
 *   cannot update 'src/a.py': hunk 2 does not match: line 14 is 'x = 2', the patch expects 'x = 1'
 * Blocks on file I/O. */
SBX_API int sbx_patch_apply(const struct sbx_patch *p, struct sbx_patch_fs *fs,
                            const struct sbx_patch_options *opts, struct sbx_patch_result *res,
                            struct sbx_error *err);

/* Parse text and apply it: sbx_patch_parse() + sbx_patch_apply(). */
SBX_API int sbx_patch_apply_text(const char *text, size_t len, struct sbx_patch_fs *fs,
                                 const struct sbx_patch_options *opts, struct sbx_patch_result *res,
                                 struct sbx_error *err);

/* Apply one file's content in memory: the update body diff (V4A hunks) against the text
 * old[0..old_len). Keeps the file's line endings (CRLF lines stay CRLF, new lines take the
 * ending of the line they replace, else the file's dominant one) and its final newline or the
 * lack of one. path only labels errors.
 * *out: caller owns (free); *out_len its length. *fuzzy (may be NULL) receives the number of
 * hunks matched with whitespace or punctuation tolerance. */
SBX_API int sbx_patch_apply_diff(const char *old, size_t old_len, const char *diff, size_t diff_len,
                                 const char *path, const struct sbx_patch_limits *lim, char **out,
                                 size_t *out_len, size_t *fuzzy, struct sbx_error *err);

#endif
