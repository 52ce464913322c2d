/* Manifest materialisation into a fresh workspace, written once over the session API so every
 * provider shares it. Host sources (local_file, local_dir, git_repo) are read on the harness
 * side: the sandbox never needs network access or credentials to get them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "core/spawn.h"
#include "sandbox/provider.h"
#include "sandbox/manifest/internal.h"
#include "sandbox/session/internal.h"
#include "sbx/trace.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/manifest.h"
#include "sbx/path.h"
#include "sbx/session.h"
#include "sbx/strv.h"

#define COPY_MAX_DEPTH 256
#define GIT_ERR_MAX    4096
#define GIT_MSG_MAX    600 /* bytes of git's reason in an error */

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
};

static void undo_push(struct undo *u, enum undo_kind kind, const char *path, size_t len,
                      mode_t mode)
{
    if (u->n == u->cap) {
        u->cap = u->cap ? u->cap * 2 : 16;
        u->v = sbx_xrealloc(u->v, u->cap * sizeof(*u->v));
    }
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

static int mat_write(struct sbx_session *s, struct undo *u, const char *path, const void *data,
                     size_t n, mode_t mode, struct sbx_error *err)
{
    int fresh = undo_note_new(s, u, path) ? SBX__WRITE_FRESH : 0;
    return sbx_session_write(s, path, data, n, mode, SBX_WRITE_PARENTS | fresh, err);
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

/* Copy one regular file (open fd) to dest with mode. */
static int copy_file_fd(struct sbx_session *s, struct undo *u, int fd, const char *dest,
                        mode_t mode, struct sbx_error *err)
{
    if (u)
        undo_note_new(s, u, dest);
    return sbx_session_write_fd(s, dest, fd, SBX_MANIFEST_DEFAULT_MAX_TOTAL_BYTES, mode & 07777,
                                SBX_WRITE_PARENTS, err);
}

/* Copy the directory open at dfd into dest, never following a symlink: every level is opened
 * relative to its parent with O_NOFOLLOW. A symlink inside is an error (it could point anywhere
 * on the host); sockets, fifos and devices are skipped. skip_git leaves out ".git" at the top.
 * u: the undo log, NULL when dest is new (then all beneath it is ours already). */
static int copy_tree(struct sbx_session *s, struct undo *u, int dfd, const char *shown,
                     const char *dest, int depth, int skip_git, struct sbx_error *err)
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
                rc = copy_tree(s, fresh ? NULL : u, cfd, sub_shown, sub_dest, depth + 1, 0, err);
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
        }
        free(sub_shown);
        free(sub_dest);
    }
    closedir(d);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * git */

/* Run git with argv (NULL-terminated, without "git") in cwd; stderr is kept for the message. */
/* What git said when it failed, as one line: from its first "fatal:" or "error:" line on
 * (everything when there is none), without progress and hint lines, lines joined by spaces and
 * control characters made spaces, at most GIT_MSG_MAX bytes. Git often spreads one reason over
 * several lines ("fatal: Could not read from remote repository." and a paragraph on access
 * rights), so no single line explains. Caller owns. */
static char *git_failure(const char *t, size_t n)
{
    char out[GIT_MSG_MAX + 8];
    size_t o = 0;
    int started = 0, cut = 0;
    for (int pass = 0; pass < 2 && o == 0; pass++) {
        const char *p = t, *end = t + n;
        while (p < end && !cut) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            while (len && (p[len - 1] == '\r' || p[len - 1] == ' '))
                len--;
            /* The second pass takes everything: git said no fatal or error line. */
            started |= pass == 1 ||
                       (len >= 6 && (memcmp(p, "fatal:", 6) == 0 || memcmp(p, "error:", 6) == 0));
            int noise = len == 0 || (len >= 5 && memcmp(p, "hint:", 5) == 0) ||
                        (len >= 12 && memcmp(p, "Cloning into", 12) == 0);
            if (started && !noise) {
                if (o + 1 >= GIT_MSG_MAX) {
                    cut = 1;
                    break;
                }
                if (o)
                    out[o++] = ' ';
                size_t room = GIT_MSG_MAX - o;
                if (len > room) {
                    while (room && ((unsigned char)p[room] & 0xC0) == 0x80)
                        room--;
                    len = room;
                    cut = 1;
                }
                memcpy(out + o, p, len);
                o += len;
            }
            p = nl ? nl + 1 : end;
        }
    }
    for (size_t i = 0; i < o; i++)
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
            out[i] = ' ';
    if (!o)
        return sbx_xstrdup("(git printed nothing)");
    return sbx_xasprintf("%.*s%s", (int)o, out, cut ? " ..." : "");
}

/* What git gets of the harness's environment: the way out to the network (proxies, the ssh
 * agent), nothing else, so no API key or token of the harness reaches git or its helpers. */
static const char *const git_pass_env[] = {"http_proxy", "https_proxy",   "HTTPS_PROXY",
                                           "all_proxy",  "ALL_PROXY",     "no_proxy",
                                           "NO_PROXY",   "SSH_AUTH_SOCK", NULL};

static int run_git(const char *cwd, const char *const *args, struct sbx_buf *out,
                   struct sbx_error *err)
{
    struct sbx_strv argv, env;
    struct sbx_buf errtext;
    struct sbx__spawn_capture cap = {.out = out, .err = &errtext};
    int rc;

    sbx_strv_init(&argv);
    sbx_strv_init(&env);
    sbx_buf_init(&errtext, GIT_ERR_MAX);
    sbx_strv_push(&argv, "git");
    if (cwd) {
        sbx_strv_push(&argv, "-C");
        sbx_strv_push(&argv, cwd);
    }
    sbx_strv_pushv(&argv, args);
    /* No configuration but the repository's own (no system or user file: their credential
     * helpers, hooks paths or fsmonitor commands are the harness user's, not this fetch's),
     * never a prompt, messages in English for git_failure. HOME leads nowhere: a temporary
     * one would be empty anyway, and the checkout itself must never serve as one. */
    sbx_strv_setenv(&env, "PATH", SBX__SPAWN_PATH);
    sbx_strv_setenv(&env, "HOME", "/nonexistent");
    sbx_strv_setenv(&env, "XDG_CONFIG_HOME", "/nonexistent");
    sbx_strv_setenv(&env, "GIT_CONFIG_NOSYSTEM", "1");
    sbx_strv_setenv(&env, "GIT_CONFIG_GLOBAL", "/dev/null");
    sbx_strv_setenv(&env, "GIT_TERMINAL_PROMPT", "0");
    sbx_strv_setenv(&env, "GIT_SSH_COMMAND", "ssh -o BatchMode=yes");
    sbx_strv_setenv(&env, "LC_ALL", "C");
    for (size_t i = 0; git_pass_env[i]; i++) {
        const char *v = getenv(git_pass_env[i]);
        if (v)
            sbx_strv_setenv(&env, git_pass_env[i], v);
    }
    struct sbx__spawn sp = {.program = "git",
                            .argv = (const char *const *)argv.v,
                            .env = (const char *const *)env.v};
    /* stdout is small (rev-parse) and stderr bounded: past their bounds output is dropped. */
    if (out)
        sp.out.how = SBX__SPAWN_PIPE;
    sp.err.how = SBX__SPAWN_PIPE;
    rc = sbx__spawn_run(&sp, -1, &cap, err);
    if (rc == 0 && (!WIFEXITED(cap.status) || WEXITSTATUS(cap.status) != 0)) {
        char *why = git_failure(errtext.data, errtext.len);
        rc = sbx_error_set(err, SBX_E_IO, 0, "git %s failed: %s", args[0], why);
        free(why);
    }
    sbx_buf_release(&errtext);
    sbx_strv_release(&argv);
    sbx_strv_release(&env);
    return rc;
}

static int is_commitish(const char *ref)
{
    size_t n = ref ? strlen(ref) : 0;
    if (n < 7 || n > 40)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((ref[i] >= '0' && ref[i] <= '9') || (ref[i] >= 'a' && ref[i] <= 'f') ||
              (ref[i] >= 'A' && ref[i] <= 'F')))
            return 0;
    return 1;
}

void sbx__checkout_remove(const char *dir)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx__fs_remove_tree(dir, &err) < 0)
        sbx_log(SBX_LOG_WARN, "%s", err.msg);
}

int sbx__git_checkout(const struct sbx_manifest_entry *e, char **out_dir, char **out_commit,
                      struct sbx_error *err)
{
    const char *t = getenv("TMPDIR");
    char *tmp = sbx_xasprintf("%s/sbx-git-......", t && t[0] == '/' ? t : "/tmp");
    memset(tmp + strlen(tmp) - 6, 'X', 6); /* the template mkdtemp fills in */
    struct sbx_buf head;
    int rc = 0;

    sbx_buf_init(&head, 256);
    if (!mkdtemp(tmp)) {
        rc = sbx_error_errno(err, errno, "cannot create a temporary directory");
        free(tmp);
        return rc;
    }
    const char *url = e->url ? e->url : e->repo;
    if (e->ref && is_commitish(e->ref)) {
        /* A commit: fetch exactly it. Servers that refuse fetching by id get a clone. */
        const char *const init[] = {"init", "-q", NULL};
        const char *const remote[] = {"remote", "add", "origin", url, NULL};
        const char *const fetch[] = {"fetch",     "-q",     "--depth", "1",
                                     "--no-tags", "origin", e->ref,    NULL};
        const char *const checkout[] = {"checkout", "-q", "--detach", "FETCH_HEAD", NULL};
        rc = run_git(tmp, init, NULL, err);
        if (rc == 0)
            rc = run_git(tmp, remote, NULL, err);
        if (rc == 0)
            rc = run_git(tmp, fetch, NULL, err);
        if (rc == 0)
            rc = run_git(tmp, checkout, NULL, err);
        if (rc < 0) {
            struct sbx_error first;
            sbx_error_copy(&first, err);
            sbx__checkout_remove(tmp);
            if (mkdir(tmp, 0700) < 0) {
                rc = sbx_error_errno(err, errno, "cannot recreate '%s'", tmp);
                goto out;
            }
            const char *const clone[] = {"clone", "-q", "--no-tags", "--", url, tmp, NULL};
            const char *const co[] = {"checkout", "-q", "--detach", e->ref, NULL};
            if (run_git(NULL, clone, NULL, err) < 0 || run_git(tmp, co, NULL, err) < 0) {
                rc = sbx_error_copy(err, &first);
                goto out;
            }
            rc = 0;
        }
    } else {
        struct sbx_strv args;
        sbx_strv_init(&args);
        sbx_strv_pushv(&args,
                       (const char *const[]){"clone", "-q", "--depth", "1", "--no-tags", NULL});
        if (e->ref) {
            sbx_strv_push(&args, "--branch");
            sbx_strv_push(&args, e->ref);
        }
        sbx_strv_push(&args, "--");
        sbx_strv_push(&args, url);
        sbx_strv_push(&args, tmp);
        rc = run_git(NULL, (const char *const *)args.v, NULL, err);
        sbx_strv_release(&args);
    }
    if (rc < 0)
        goto out;
    const char *const revparse[] = {"rev-parse", "HEAD", NULL};
    rc = run_git(tmp, revparse, &head, err);
    if (rc < 0)
        goto out;
    while (head.len && (head.data[head.len - 1] == '\n'))
        sbx_buf_setlen(&head, head.len - 1);
out:
    if (rc < 0) {
        sbx__checkout_remove(tmp);
        free(tmp);
    } else {
        *out_dir = tmp;
        *out_commit = sbx_buf_detach(&head, NULL);
    }
    sbx_buf_release(&head);
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
    if (keep_git) {
        const char *const unremote[] = {"remote", "remove", "origin", NULL};
        if ((rc = run_git(tmp, unremote, NULL, err)) < 0)
            goto out;
    }
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
        rc = copy_tree(s, fresh ? NULL : u, dfd, e->subpath ? e->subpath : ".", e->path, 0,
                       !keep_git, err);
    if (rc == 0) {
        sbx_json_set(record, "commit", sbx_json_str(commit));
        if (e->ref)
            sbx_json_set(record, "ref", sbx_json_str(e->ref));
    }
out:
    sbx_fd_close(&dfd);
    sbx__checkout_remove(tmp);
    free(tmp);
    free(commit);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Entries */

static int materialize_entry(struct sbx_session *s, struct undo *u,
                             const struct sbx_manifest_entry *e, json_t *records,
                             struct sbx_error *err)
{
    int rc = 0, fd = -1;
    switch (e->type) {
    case SBX_ENTRY_FILE:
        if (!e->content)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "the manifest records this file by digest only (a session "
                                 "state's manifest): its content is not there to write");
        return mat_write(s, u, e->path, e->content, e->content_len, e->mode ? e->mode : 0644, err);
    case SBX_ENTRY_DIR:
        rc = mat_mkdir(s, u, e->path, NULL, err);
        if (rc == 0 && e->mode)
            rc = mat_chmod(s, u, e->path, e->mode, err);
        return rc;
    case SBX_ENTRY_LOCAL_FILE: {
        struct stat st;
        fd = open(e->src_path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            return errno == ELOOP ? sbx_error_set(err, SBX_E_PERM, ELOOP,
                                                  "source '%s' is a symlink", e->src)
                                  : sbx_error_errno(err, errno, "cannot open source '%s'", e->src);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "source '%s' is not a regular file", e->src);
        else
            rc = copy_file_fd(s, u, fd, e->path, e->mode ? e->mode : 0644, err);
        close(fd);
        return rc;
    }
    case SBX_ENTRY_LOCAL_DIR: {
        int fresh = 0;
        rc = mat_mkdir(s, u, e->path, &fresh, err);
        if (rc == 0 && e->src_path) {
            fd = open(e->src_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                rc = errno == ELOOP || errno == ENOTDIR
                             ? sbx_error_set(err, SBX_E_PERM, errno,
                                             "source '%s' is not a directory (or is a symlink)",
                                             e->src)
                             : sbx_error_errno(err, errno, "cannot open source '%s'", e->src);
            else
                rc = copy_tree(s, fresh ? NULL : u, fd, e->src, e->path, 0, 0, err);
            sbx_fd_close(&fd);
        }
        if (rc == 0 && e->mode)
            rc = mat_chmod(s, u, e->path, e->mode, err);
        return rc;
    }
    case SBX_ENTRY_GIT_REPO: {
        json_t *rec = json_object();
        sbx_json_set(rec, "path", sbx_json_str(e->path));
        sbx_json_set(rec, "repo", sbx_json_str(e->repo));
        rc = materialize_git(s, u, e, rec, err);
        if (rc == 0)
            sbx_json_append(records, rec);
        else
            json_decref(rec);
        return rc;
    }
    case SBX_ENTRY_S3_MOUNT:
    case SBX_ENTRY_GCS_MOUNT:
    case SBX_ENTRY_R2_MOUNT:
    case SBX_ENTRY_AZURE_BLOB_MOUNT:
    case SBX_ENTRY_BOX_MOUNT:
    case SBX_ENTRY_S3_FILES_MOUNT:
        /* A provider with the mounts trait mounts them while the sandbox starts
         * (docs/internals/mounts.md). */
        if (sbx__provider_traits(s->provider) & SBX_PROVIDER_MOUNTS)
            return 0;
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "%s entries are not supported by the %s provider",
                             sbx_entry_type_name(e->type), s->provider ? s->provider : "this");
    }
    return sbx_error_set(err, SBX_E_INVAL, 0, "unknown entry type %d", (int)e->type);
}

/* 1 when path is prefix itself or lies beneath it. */
static int path_within(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

void sbx__manifest_ephemeral_paths(const struct sbx_manifest *m, struct sbx_strv *out)
{
    size_t n = m ? sbx_manifest_entry_count(m) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        if (!e->ephemeral)
            continue;
        int covered = 0;
        for (size_t k = 0; k < out->n && !covered; k++)
            covered = path_within(e->path, out->v[k]);
        if (!covered)
            sbx_strv_push(out, e->path);
    }
}

static int materialize_entries(struct sbx_session *s, const struct sbx_manifest *m, int flags,
                               struct sbx_progress_sink *progress, json_t **out_records,
                               struct sbx_error *err)
{
    json_t *records = json_array();
    struct undo u = {0};
    struct sbx_strv eph;
    size_t n = sbx_manifest_entry_count(m);
    sbx_strv_init(&eph);
    if (flags & SBX__MATERIALIZE_EPHEMERAL_ONLY)
        sbx__manifest_ephemeral_paths(m, &eph);
    for (size_t i = 0; i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        int covered = 1;
        if (flags & SBX__MATERIALIZE_EPHEMERAL_ONLY) {
            /* The rest came from the snapshot, which keeps no owners: only its group is set
             * again, on what is still there. */
            covered = 0;
            for (size_t k = 0; k < eph.n && !covered; k++)
                covered = path_within(e->path, eph.v[k]);
        }
        int rc = 0;
        if (covered) {
            int fetch = e->type == SBX_ENTRY_GIT_REPO;
            sbx_progress_report(progress, fetch ? "fetch" : "materialise",
                                fetch ? e->repo : e->path, i, n, fetch);
            rc = materialize_entry(s, &u, e, records, err);
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
            sbx_progress_end(progress, "materialise", i, n);
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
    sbx_progress_end(progress, "materialise", n, n);
    *out_records = records;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Digest */

/* One length-prefixed field: unambiguous however the bytes look. NULL and "" differ. */
static int digest_field(struct sbx_sha256 *h, const void *p, size_t n, int present,
                        struct sbx_error *err)
{
    uint8_t hdr[9];
    uint64_t len = present ? (uint64_t)n : 0;
    hdr[0] = present ? 1 : 0;
    for (int i = 0; i < 8; i++)
        hdr[1 + i] = (uint8_t)(len >> (56 - 8 * i));
    int rc = sbx_sha256_update(h, hdr, sizeof(hdr), err);
    if (rc == 0 && present && n)
        rc = sbx_sha256_update(h, p, n, err);
    return rc;
}

static int digest_str(struct sbx_sha256 *h, const char *s, struct sbx_error *err)
{
    return digest_field(h, s, s ? strlen(s) : 0, s != NULL, err);
}

static int digest_int(struct sbx_sha256 *h, uint64_t v, struct sbx_error *err)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return digest_field(h, buf, (size_t)n, 1, err);
}

/* A file's bytes count by their SHA-256, so a manifest whose files a session state records by
 * digest only (SBX_MANIFEST_CONTENT_DIGESTS) has the digest of the one it came from. */
static int digest_content(struct sbx_sha256 *h, const struct sbx_manifest_entry *e,
                          struct sbx_error *err)
{
    uint8_t d[SBX_SHA256_LEN];
    int rc = 0;
    if (!e->content && !e->content_sha256)
        return digest_field(h, NULL, 0, 0, err);
    if (e->content_sha256) {
        for (size_t i = 0; i < SBX_SHA256_LEN; i++) {
            const char *x = e->content_sha256 + 2 * i;
            d[i] = (uint8_t)(((x[0] <= '9' ? x[0] - '0' : x[0] - 'a' + 10) << 4) |
                             (x[1] <= '9' ? x[1] - '0' : x[1] - 'a' + 10));
        }
    } else if ((rc = sbx_sha256(e->content, e->content_len, d, err)) < 0) {
        return rc;
    }
    if ((rc = digest_int(h, e->content_len, err)) < 0)
        return rc;
    return digest_field(h, d, sizeof(d), 1, err);
}

int sbx__manifest_digest(const struct sbx_manifest *m, char out[SBX_SHA256_HEX_LEN + 1],
                         struct sbx_error *err)
{
    struct sbx_sha256 *h = NULL;
    uint8_t d[SBX_SHA256_LEN];
    int rc = sbx_sha256_new(&h, err);
    if (rc < 0)
        return rc;
    rc = digest_str(h, "sbx-manifest-digest-v2", err);
    if (rc == 0)
        rc = digest_str(h, sbx_manifest_root(m), err);
    size_t n = sbx_manifest_entry_count(m);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        if ((rc = digest_str(h, sbx_entry_type_name(e->type), err)) < 0 ||
            (rc = digest_str(h, e->path, err)) < 0 || (rc = digest_int(h, e->mode, err)) < 0 ||
            (rc = digest_int(h, (uint64_t)e->ephemeral, err)) < 0 ||
            (rc = digest_str(h, e->group, err)) < 0 || (rc = digest_content(h, e, err)) < 0 ||
            (rc = digest_str(h, e->src, err)) < 0 || (rc = digest_str(h, e->url, err)) < 0 ||
            (rc = digest_str(h, e->ref, err)) < 0 || (rc = digest_str(h, e->subpath, err)) < 0 ||
            (rc = digest_str(h, e->mount_path, err)) < 0)
            break;
    }
    /* Environment: names, plain values and host references; a secret counts by its name only,
     * so the digest reveals nothing about it. */
    size_t ne = sbx_manifest_env_count(m);
    for (size_t i = 0; rc == 0 && i < ne; i++) {
        const struct sbx_manifest_env *v = sbx_manifest_env_at(m, i);
        if ((rc = digest_str(h, v->name, err)) < 0 || (rc = digest_str(h, v->value, err)) < 0 ||
            (rc = digest_str(h, v->host_env, err)) < 0)
            break;
        rc = digest_int(h, v->secret != NULL, err);
    }
    const struct sbx_strv *users = sbx_manifest_users(m);
    for (size_t i = 0; rc == 0 && users && i < users->n; i++)
        rc = digest_str(h, users->v[i], err);
    size_t ng = sbx_manifest_group_count(m);
    for (size_t i = 0; rc == 0 && i < ng; i++) {
        const struct sbx_manifest_group *g = sbx_manifest_group_at(m, i);
        rc = digest_str(h, g->name, err);
        for (size_t k = 0; rc == 0 && g->users && k < g->users->n; k++)
            rc = digest_str(h, g->users->v[k], err);
    }
    if (rc == 0)
        rc = sbx_sha256_final(h, d, err);
    sbx_sha256_free(h);
    if (rc == 0)
        sbx_hex(d, sizeof(d), out);
    return rc;
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
