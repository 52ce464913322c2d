/* Manifest materialisation into a fresh workspace, written once over the session API so every
 * provider shares it. Host sources (local_file, local_dir, git_repo) are read on the harness
 * side: the sandbox never needs network access or credentials to get them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "sandbox/manifest/internal.h"
#include "sandbox/materialize/git.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/session.h"
#include "sbx/strv.h"
#include "sbx/trace.h"

#define COPY_MAX_DEPTH 256

/* ---------------------------------------------------------------------------------------------
 * Undo: what materialisation changed, so that a failure leaves a given workspace as it was. */

enum undo_kind { UNDO_REMOVE, UNDO_MODE };

struct undo_step {
    enum undo_kind kind;
    char *path;  /* workspace-relative, as given to the session */
    mode_t mode; /* UNDO_MODE: the mode before */
};

struct undo {
    struct undo_step *v;
    size_t n, cap;
    /* The parent directory of the last path noted, and whether it is new (ours: nothing beneath
     * needs noting) or was there before. Entries are mostly siblings, so this saves a stat of
     * every ancestor per file: materialisation only adds, so what was there stays there. */
    char *parent;
    int parent_new;
    int keep; /* SBX__MATERIALIZE_KEEP: a file that was there is never written over */
};

static void undo_push(struct undo *u, enum undo_kind kind, const char *path, size_t len,
                      mode_t mode)
{
    SBX_ALLOC_GROW(u->v, u->n + 1, u->cap);
    u->v[u->n++] = (struct undo_step){kind, sbx_xstrndup(path, len), mode};
}

/* Before an operation that may create path and its missing parents: note the topmost component
 * that does not exist yet. Everything beneath it is then ours, and removing it removes all we
 * made there; what existed before is never in the log. Returns 1 when path is new. */
static int undo_note_new(struct sbx_session *s, struct undo *u, const char *path)
{
    size_t len = strlen(path);
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path) : 0;
    size_t from = 0;
    if (u->parent && plen && strlen(u->parent) == plen && strncmp(path, u->parent, plen) == 0) {
        if (u->parent_new)
            return 1;
        from = len;
    }
    if (plen) {
        free(u->parent);
        u->parent = sbx_xstrndup(path, plen);
        u->parent_new = 0;
    }
    for (size_t i = from; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (i == 0)
            continue;
        char *prefix = sbx_xstrndup(path, i);
        struct sbx_dirent d = {0};
        struct sbx_error ignored = SBX_ERROR_INIT;
        int rc = sbx_session_stat(s, prefix, &d, &ignored);
        sbx_dirent_release(&d);
        free(prefix);
        if (rc == -SBX_E_NOTFOUND) {
            undo_push(u, UNDO_REMOVE, path, i, 0);
            u->parent_new = i <= plen;
            return 1;
        }
        if (rc < 0)
            return 0;
    }
    return 0;
}

/* Before a chmod: the mode to put back, when the path existed. */
static void undo_note_mode(struct sbx_session *s, struct undo *u, const char *path)
{
    struct sbx_dirent d = {0};
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx_session_stat(s, path, &d, &ignored) == 0 && d.type == SBX_FILE_DIR)
        undo_push(u, UNDO_MODE, path, strlen(path), d.mode);
    sbx_dirent_release(&d);
}

/* Undo in reverse order. Best effort: the first error of materialisation is what the caller
 * reports. */
static void undo_run(struct sbx_session *s, struct undo *u)
{
    for (size_t i = u->n; i-- > 0;) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (u->v[i].kind == UNDO_REMOVE)
            sbx_session_rm(s, u->v[i].path, SBX_RM_RECURSIVE | SBX_RM_FORCE, &ignored);
        else
            sbx_session_chmod(s, u->v[i].path, u->v[i].mode, &ignored);
    }
}

static void undo_release(struct undo *u)
{
    for (size_t i = 0; i < u->n; i++)
        free(u->v[i].path);
    free(u->v);
    free(u->parent);
    *u = (struct undo){0};
}

/* With keep: a file about to be written that is not new (undo_note_new said so) and is there
 * is the user's; it stays, and the entry fails naming it. */
static int keep_check(struct sbx_session *s, const struct undo *u, const char *path, int isnew,
                      struct sbx_error *err)
{
    if (!u->keep || isnew)
        return 0;
    struct sbx_dirent d = {0};
    struct sbx_error ignored = SBX_ERROR_INIT;
    int there = sbx_session_stat(s, path, &d, &ignored) == 0;
    sbx_dirent_release(&d);
    if (!there)
        return 0;
    return sbx_error_set(err, SBX_E_EXISTS, 0,
                         "'%s' is already in the workspace, which keeps its files: move it "
                         "away, or let the manifest replace it (overwrite)",
                         path);
}

static int mat_write(struct sbx_session *s, struct undo *u, const char *path, const void *data,
                     size_t n, mode_t mode, struct sbx_error *err)
{
    int isnew = undo_note_new(s, u, path);
    int rc = keep_check(s, u, path, isnew, err);
    if (rc < 0)
        return rc;
    return sbx_session_write(s, path, data, n, mode,
                             SBX_WRITE_PARENTS | (isnew ? SBX__WRITE_FRESH : 0), err);
}

/* *fresh (may be NULL): set when the directory is new, so nothing inside needs noting. */
static int mat_mkdir(struct sbx_session *s, struct undo *u, const char *path, int *fresh,
                     struct sbx_error *err)
{
    int isnew = undo_note_new(s, u, path);
    if (fresh)
        *fresh = isnew;
    return sbx_session_mkdir(s, path, SBX_MKDIR_PARENTS, err);
}

static int mat_chmod(struct sbx_session *s, struct undo *u, const char *path, mode_t mode,
                     struct sbx_error *err)
{
    if (u)
        undo_note_mode(s, u, path);
    return sbx_session_chmod(s, path, mode, err);
}

/* ---------------------------------------------------------------------------------------------
 * Progress: files, not entries (one local_dir entry may hold tens of thousands). */

struct tally {
    struct sbx_progress_sink *progress;
    uint64_t done, total;
};

static void tally_one(struct tally *t, const char *what)
{
    if (!t)
        return;
    t->done++;
    sbx_progress_report(t->progress, "materialise", what, t->done, t->total, 0);
}

/* The regular files under the directory open at dfd (symlinks and special files are not
 * copied; a deeper tree than the copy allows is counted to that depth). Best effort: what
 * cannot be read counts as nothing, and the copy reports it. */
static uint64_t count_tree(int dfd, int depth)
{
    uint64_t n = 0;
    int fd = depth <= COPY_MAX_DEPTH ? fcntl(dfd, F_DUPFD_CLOEXEC, 0) : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    rewinddir(d);
    const struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            n++;
        } else if (S_ISDIR(st.st_mode)) {
            int cfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd >= 0) {
                n += count_tree(cfd, depth + 1);
                close(cfd);
            }
        }
    }
    closedir(d);
    return n;
}

/* How many files entry e makes: a local_dir's regular files, 1 for anything else. */
static uint64_t entry_files(const struct sbx_manifest_entry *e)
{
    if (e->type != SBX_ENTRY_LOCAL_DIR || !e->src_path)
        return 1;
    int fd = open(e->src_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 1;
    uint64_t n = count_tree(fd, 0);
    close(fd);
    return n;
}

/* Copy one regular file (open fd) to dest with mode. */
static int copy_file_fd(struct sbx_session *s, struct undo *u, int fd, const char *dest,
                        mode_t mode, struct sbx_error *err)
{
    int rc;
    if (u && (rc = keep_check(s, u, dest, undo_note_new(s, u, dest), err)) < 0)
        return rc;
    return sbx_session_write_fd(s, dest, fd, SBX_MANIFEST_DEFAULT_MAX_TOTAL_BYTES, mode & 07777,
                                SBX_WRITE_PARENTS, err);
}

/* Copy the directory open at dfd into dest, never following a symlink: every level is opened
 * relative to its parent with O_NOFOLLOW. A symlink inside is an error (it could point anywhere
 * on the host); sockets, fifos and devices are skipped. skip_git leaves out ".git" at the top.
 * u: the undo log, NULL when dest is new (then all beneath it is ours already). */
static int copy_tree(struct sbx_session *s, struct undo *u, struct tally *t, int dfd,
                     const char *shown, const char *dest, int depth, int skip_git,
                     struct sbx_error *err)
{
    DIR *d = NULL;
    int rc = 0;
    if (depth > COPY_MAX_DEPTH)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' nests deeper than %d levels", shown,
                             COPY_MAX_DEPTH);
    int fd = dup(dfd);
    if (fd < 0 || !(d = fdopendir(fd))) {
        rc = sbx_error_errno(err, errno, "cannot list '%s'", shown);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    rewinddir(d);
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        const char *n = e->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || (skip_git && strcmp(n, ".git") == 0))
            continue;
        char *sub_shown = sbx_xasprintf("%s/%s", shown, n);
        char *sub_dest = dest[0] ? sbx_xasprintf("%s/%s", dest, n) : sbx_xstrdup(n);
        struct stat st;
        if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = sbx_error_errno(err, errno, "cannot stat '%s'", sub_shown);
        } else if (S_ISLNK(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symlink, which is not copied",
                               sub_shown);
        } else if (S_ISDIR(st.st_mode)) {
            int cfd = openat(dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd < 0)
                rc = sbx_error_errno(err, errno, "cannot open '%s'", sub_shown);
            int fresh = 0;
            if (rc == 0 && u)
                rc = mat_mkdir(s, u, sub_dest, &fresh, err);
            else if (rc == 0)
                rc = sbx_session_mkdir(s, sub_dest, SBX_MKDIR_PARENTS, err);
            if (rc == 0)
                rc = mat_chmod(s, u, sub_dest, st.st_mode & 07777, err);
            if (rc == 0)
                rc = copy_tree(s, fresh ? NULL : u, t, cfd, sub_shown, sub_dest, depth + 1, 0, err);
            if (cfd >= 0)
                close(cfd);
        } else if (S_ISREG(st.st_mode)) {
            int ffd =
                    openat(dirfd(d), n, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
            struct stat fst;
            if (ffd < 0)
                rc = sbx_error_errno(err, errno, "cannot open '%s'", sub_shown);
            else if (fstat(ffd, &fst) < 0 || !S_ISREG(fst.st_mode))
                rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' changed while being copied",
                                   sub_shown);
            else
                rc = copy_file_fd(s, u, ffd, sub_dest, st.st_mode, err);
            if (ffd >= 0)
                close(ffd);
            if (rc == 0)
                tally_one(t, sub_dest);
        }
        free(sub_shown);
        free(sub_dest);
    }
    closedir(d);
    return rc;
}

static int materialize_git(struct sbx_session *s, struct undo *u,
                           const struct sbx_manifest_entry *e, json_t *record,
                           struct sbx_error *err)
{
    char *tmp = NULL, *commit = NULL;
    int rc, dfd = -1;

    if ((rc = sbx__git_checkout(e, &tmp, &commit, err)) < 0)
        return rc;
    /* The repository goes with a whole checkout, so git log and git diff work inside; its
     * remote does not: the URL may be a host path, and the sandbox has no business fetching.
     * A subpath is a part of the tree without its repository: files only. */
    int keep_git = !(e->subpath && e->subpath[0]);
    if (keep_git && (rc = sbx__git_forget_remote(tmp, err)) < 0)
        goto out;
    int root = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", tmp);
        goto out;
    }
    if (e->subpath && e->subpath[0]) {
        rc = sbx_fs_open(root, e->subpath, O_RDONLY | O_DIRECTORY, 0, SBX_FS_NOFOLLOW, &dfd, err);
        close(root);
        if (rc < 0) {
            sbx_error_prefix(err, "subpath");
            goto out;
        }
    } else {
        dfd = root;
    }
    int fresh = 0;
    rc = mat_mkdir(s, u, e->path, &fresh, err);
    if (rc == 0)
        rc = copy_tree(s, fresh ? NULL : u, NULL, dfd, e->subpath ? e->subpath : ".", e->path, 0,
                       !keep_git, err);
    if (rc == 0) {
        sbx_json_set(record, "commit", sbx_json_str(commit));
        if (e->ref)
            sbx_json_set(record, "ref", sbx_json_str(e->ref));
    }
out:
    sbx_fd_close(&dfd);
    sbx__git_checkout_remove(tmp);
    free(tmp);
    free(commit);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Entries */

static int materialize_local_file(struct sbx_session *s, struct undo *u,
                                  const struct sbx_manifest_entry *e, struct sbx_error *err)
{
    struct stat st;
    int rc, fd = open(e->src_path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ELOOP
                       ? sbx_error_set(err, SBX_E_PERM, ELOOP, "source '%s' is a symlink", e->src)
                       : sbx_error_errno(err, errno, "cannot open source '%s'", e->src);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "source '%s' is not a regular file", e->src);
    else
        rc = copy_file_fd(s, u, fd, e->path, e->mode ? e->mode : 0644, err);
    close(fd);
    return rc;
}

static int materialize_local_dir(struct sbx_session *s, struct undo *u, struct tally *t,
                                 const struct sbx_manifest_entry *e, struct sbx_error *err)
{
    int fresh = 0, fd = -1;
    int rc = mat_mkdir(s, u, e->path, &fresh, err);
    if (rc == 0 && e->src_path) {
        fd = open(e->src_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            rc = errno == ELOOP || errno == ENOTDIR
                         ? sbx_error_set(err, SBX_E_PERM, errno,
                                         "source '%s' is not a directory (or is a symlink)", e->src)
                         : sbx_error_errno(err, errno, "cannot open source '%s'", e->src);
        else
            rc = copy_tree(s, fresh ? NULL : u, t, fd, e->src, e->path, 0, 0, err);
        sbx_fd_close(&fd);
    }
    if (rc == 0 && e->mode)
        rc = mat_chmod(s, u, e->path, e->mode, err);
    return rc;
}

/* A git_repo entry, and its record in records (path, repo, ref, the commit fetched). */
static int materialize_git_entry(struct sbx_session *s, struct undo *u,
                                 const struct sbx_manifest_entry *e, json_t *records,
                                 struct sbx_error *err)
{
    json_t *rec = json_object();
    sbx_json_set(rec, "path", sbx_json_str(e->path));
    sbx_json_set(rec, "repo", sbx_json_str(e->repo));
    int rc = materialize_git(s, u, e, rec, err);
    if (rc == 0)
        sbx_json_append(records, rec);
    else
        json_decref(rec);
    return rc;
}

static int materialize_entry(struct sbx_session *s, struct undo *u, struct tally *tl,
                             const struct sbx_manifest_entry *e, json_t *records,
                             struct sbx_error *err)
{
    enum sbx_entry_type t = e->type;
    int rc;
    if (sbx_entry_type_is_mount(t)) {
        /* A provider with the mounts trait mounts them while the sandbox starts
         * (docs/internals/mounts.md); what it refuses it declares, with why. */
        const char *why = sbx__provider_unmountable(s->provider, (int)t);
        if (!why && (sbx__provider_traits(s->provider) & SBX_PROVIDER_MOUNTS))
            return 0;
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the %s provider cannot mount %s entries: %s",
                             s->provider ? s->provider : "this", sbx_entry_type_name(t),
                             why ? why : "it declares no storage mounts");
    }
    if (t == SBX_ENTRY_FILE) {
        if (!e->content)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "the manifest records this file by digest only (a session "
                                 "state's manifest): its content is not there to write");
        return mat_write(s, u, e->path, e->content, e->content_len, e->mode ? e->mode : 0644, err);
    }
    if (t == SBX_ENTRY_DIR) {
        rc = mat_mkdir(s, u, e->path, NULL, err);
        if (rc == 0 && e->mode)
            rc = mat_chmod(s, u, e->path, e->mode, err);
        return rc;
    }
    if (t == SBX_ENTRY_LOCAL_FILE)
        return materialize_local_file(s, u, e, err);
    if (t == SBX_ENTRY_LOCAL_DIR)
        return materialize_local_dir(s, u, tl, e, err);
    if (t == SBX_ENTRY_GIT_REPO)
        return materialize_git_entry(s, u, e, records, err);
    return sbx_error_set(err, SBX_E_INVAL, 0, "unknown entry type %d", (int)t);
}

static int materialize_entries(struct sbx_session *s, const struct sbx_manifest *m, int flags,
                               struct sbx_progress_sink *progress, json_t **out_records,
                               struct sbx_error *err)
{
    json_t *records = json_array();
    struct undo u = {.keep = (flags & SBX__MATERIALIZE_KEEP) != 0};
    struct sbx_strv eph;
    size_t n = sbx_manifest_entry_count(m);
    sbx_strv_init(&eph);
    struct tally t = {.progress = progress};
    if (flags & SBX__MATERIALIZE_EPHEMERAL_ONLY)
        sbx__manifest_ephemeral_paths(m, &eph);
    /* The root's owner first, so that it is set again after a restore too (snapshots keep no
     * owners) and before the entries, which do not depend on it. */
    const char *owner = sbx_manifest_root_owner(m);
    if (owner) {
        int rc = s->ops->chown_root ? s->ops->chown_root(s, owner, err)
                                    : sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                                    "provider '%s' cannot give the workspace root "
                                                    "to user '%s'",
                                                    s->provider, owner);
        if (rc < 0) {
            sbx_error_prefix(err, "field 'root_owner'");
            sbx_strv_release(&eph);
            json_decref(records);
            return rc;
        }
    }
    /* With EPHEMERAL_ONLY the rest came from the snapshot, which keeps no owners: only its
     * group is set again, on what is still there. */
#define COVERED(e) \
    (!(flags & SBX__MATERIALIZE_EPHEMERAL_ONLY) || sbx__manifest_path_under((e)->path, &eph))
    for (size_t i = 0; progress && progress->fn && i < n; i++)
        if (COVERED(sbx_manifest_entry_at(m, i)))
            t.total += entry_files(sbx_manifest_entry_at(m, i));
    for (size_t i = 0; i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        int rc = 0;
        if (COVERED(e)) {
            int fetch = e->type == SBX_ENTRY_GIT_REPO;
            sbx_progress_report(progress, fetch ? "fetch" : "materialise",
                                fetch ? e->repo : e->path, t.done, t.total, fetch);
            rc = materialize_entry(s, &u, &t, e, records, err);
            if (rc == 0 && e->type != SBX_ENTRY_LOCAL_DIR)
                tally_one(&t, e->path);
        } else if (e->group) {
            struct sbx_dirent d = {0};
            struct sbx_error ignored = SBX_ERROR_INIT;
            int there =
                    sbx_session_stat(s, e->path, &d, &ignored) == 0 && d.type != SBX_FILE_SYMLINK;
            sbx_dirent_release(&d);
            if (!there)
                continue;
        } else {
            continue;
        }
        /* As the reference does: the entry itself, not what lies beneath it. */
        if (rc == 0 && e->group && !sbx_entry_type_is_mount(e->type))
            rc = s->ops->chgrp ? s->ops->chgrp(s, e->path, e->group, err)
                               : sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                               "provider '%s' cannot set the group '%s'",
                                               s->provider, e->group);
        if (rc < 0) {
            sbx_error_prefix(err, "entry '%s'", e->path);
            sbx_progress_end(progress, "materialise", t.done, t.total);
            /* A given workspace must be as it was, or the retry trips over our leftovers. */
            undo_run(s, &u);
            undo_release(&u);
            sbx_strv_release(&eph);
            json_decref(records);
            return rc;
        }
    }
    undo_release(&u);
    sbx_strv_release(&eph);
    sbx_progress_end(progress, "materialise", t.done, t.total);
    *out_records = records;
    return 0;
#undef COVERED
}

int sbx__materialize(struct sbx_session *s, const struct sbx_manifest *m, int flags,
                     struct sbx_progress_sink *progress, json_t **out_records,
                     struct sbx_error *err)
{
    /* A span under the caller's (tracing, sbx/trace.h): a no-op when nothing traces. */
    struct sbx_span *span =
            sbx_span_start(sbx_trace_current(), "sandbox.materialize", SBX_SPAN_INTERNAL);
    sbx_span_set_int(span, "sbx.manifest.entries", (int64_t)sbx_manifest_entry_count(m));
    int rc = materialize_entries(s, m, flags, progress, out_records, err);
    if (rc < 0)
        sbx_span_set_status(span, 0, err->msg);
    sbx_span_end(span);
    return rc;
}
