/* sbx sandbox cp of a directory, both ways, through the session's file operations (so for every
 * provider): directories, regular files with their permission bits (never setuid, setgid or
 * sticky), and symlinks that stay inside the copied tree (made in a sandbox by its own ln). Nothing
 * is followed: on the host each step is an openat with O_NOFOLLOW beneath a directory this copy
 * opened, and in the sandbox the session refuses a path through a symlink out of the workspace. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sbx/fs.h"
#include "sbx/session.h"

#define TREE_DEPTH_MAX   128
#define TREE_ENTRIES_MAX 1000000

struct tree {
    struct sbx_session *s;
    uint64_t entries;
    uint64_t skipped;
};

static void skip(struct tree *t, const char *path, const char *why)
{
    t->skipped++;
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: warning: '%s' skipped: %s\n", path, why);
}

static int count(struct tree *t, struct sbx_error *err)
{
    if (++t->entries > TREE_ENTRIES_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d entries to copy",
                             TREE_ENTRIES_MAX);
    return 0;
}

/* A symlink target that stays inside the copied tree from a link depth directories below its
 * top: relative, its ".." steps first and never above the top. */
static int target_inside(const char *target, int depth)
{
    const char *p = target;
    if (!target[0] || target[0] == '/')
        return 0;
    while (strncmp(p, "../", 3) == 0 || strcmp(p, "..") == 0) {
        if (--depth < 0)
            return 0;
        p += p[2] ? 3 : 2;
    }
    for (const char *q = p; (q = strstr(q, "..")); q += 2)
        if ((q == p || q[-1] == '/') && (q[2] == '/' || q[2] == '\0'))
            return 0;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * host -> sandbox */

static int in_dir(struct tree *t, int dfd, const char *dst, int depth, struct sbx_error *err);

/* A host symlink that stays inside the copied tree, made again in the sandbox by the sandbox's
 * own ln (the file operations make no links); one out of the tree is left out. */
static int in_link(struct tree *t, int dfd, const char *name, const char *path, int depth,
                   struct sbx_error *err)
{
    char target[4096];
    ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
    if (n < 0)
        return sbx_error_errno(err, errno, "cannot read the symlink '%s'", name);
    target[n] = '\0';
    if (!target_inside(target, depth)) {
        skip(t, path, "a symlink out of the copied directory");
        return 0;
    }
    const char *const argv[] = {"ln", "-sfn", "--", target, path, NULL};
    struct sbx_exec_spec spec = {.argv = argv, .output_limit = 4096};
    struct sbx_exec_result r = {0};
    struct sbx_error e = SBX_ERROR_INIT;
    if (sbx_session_exec(t->s, &spec, &r, &e) < 0 || r.status.code != 0)
        skip(t, path, "the sandbox could not make the symlink (no ln?)");
    sbx_exec_result_release(&r);
    return 0;
}

static int in_entry(struct tree *t, int dfd, const char *name, const char *dst, int depth,
                    struct sbx_error *err)
{
    struct stat st;
    int rc = count(t, err);
    char *path = dst[0] ? sbx_xasprintf("%s/%s", dst, name) : sbx_xstrdup(name);
    if (rc == 0 && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", name);
    if (rc == 0 && S_ISDIR(st.st_mode)) {
        int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        rc = sub < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", name)
                     : in_dir(t, sub, path, depth + 1, err);
        if (rc == 0)
            rc = sbx_session_chmod(t->s, path, st.st_mode & 0777, err);
    } else if (rc == 0 && S_ISREG(st.st_mode)) {
        int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        rc = fd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", name)
                    : sbx_session_write_fd(t->s, path, fd, 0, st.st_mode & 0777, 0, err);
        if (fd >= 0)
            close(fd);
    } else if (rc == 0 && S_ISLNK(st.st_mode)) {
        rc = in_link(t, dfd, name, path, depth, err);
    } else if (rc == 0) {
        skip(t, path, "not a file, directory or symlink");
    }
    free(path);
    return rc;
}

/* The entries of host directory dfd (taken) into sandbox directory dst (made here). */
static int in_dir(struct tree *t, int dfd, const char *dst, int depth, struct sbx_error *err)
{
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    int rc = 0;
    if (!d) {
        rc = sbx_error_errno(err, errno, "cannot read a directory");
        close(dfd);
        return rc;
    }
    if (depth > TREE_DEPTH_MAX)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is more than %d directories deep", dst,
                           TREE_DEPTH_MAX);
    if (rc == 0)
        rc = sbx_session_mkdir(t->s, dst, SBX_MKDIR_PARENTS, err);
    /* Writable while it is filled; its own mode is set once it is full. */
    if (rc == 0)
        rc = sbx_session_chmod(t->s, dst, 0700, err);
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            rc = in_entry(t, dirfd(d), e->d_name, dst, depth, err);
    }
    closedir(d);
    return rc;
}

int cli_cp_tree_in(struct sbx_session *s, int srcfd, const char *dst, struct sbx_error *err)
{
    struct tree t = {.s = s};
    struct stat st;
    if (fstat(srcfd, &st) < 0)
        return sbx_error_errno(err, errno, "cannot stat the source");
    int fd = fcntl(srcfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot read the source");
    int rc = in_dir(&t, fd, dst, 0, err);
    if (rc == 0)
        rc = sbx_session_chmod(s, dst, st.st_mode & 0777, err);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * sandbox -> host */

static int out_dir(struct tree *t, const char *src, int dfd, int depth, struct sbx_error *err);

static int out_file(struct tree *t, const char *src, int dfd, const struct sbx_dirent *e,
                    struct sbx_error *err)
{
    int in = -1, rc = sbx_session_read_open(t->s, src, &in, NULL, err);
    int out = rc < 0 ? -1
                     : openat(dfd, e->name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                              0600);
    if (rc == 0 && out < 0)
        rc = sbx_error_errno(err, errno, "cannot create '%s'", e->name);
    /* Holes stay holes; the mode never carries setuid or setgid (an existing file's either). */
    if (rc == 0)
        rc = sbx_fd_copy_sparse(in, out, 0, NULL, err);
    if (rc == 0 && fchmod(out, e->mode & 0777) < 0)
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", e->name);
    sbx_fd_close(&in);
    sbx_fd_close(&out);
    return rc;
}

static int out_entry(struct tree *t, const char *src, int dfd, const struct sbx_dirent *e,
                     int depth, struct sbx_error *err)
{
    int rc = count(t, err);
    if (rc < 0)
        return rc;
    if (e->type == SBX_FILE_REGULAR)
        return out_file(t, src, dfd, e, err);
    if (e->type == SBX_FILE_SYMLINK) {
        if (!e->target || !target_inside(e->target, depth))
            skip(t, src, "a symlink out of the copied directory");
        else if (symlinkat(e->target, dfd, e->name) < 0 && errno != EEXIST)
            rc = sbx_error_errno(err, errno, "cannot make the symlink '%s'", e->name);
        return rc;
    }
    if (e->type != SBX_FILE_DIR) {
        skip(t, src, "not a file, directory or symlink");
        return 0;
    }
    if (mkdirat(dfd, e->name, 0700) < 0 && errno != EEXIST)
        return sbx_error_errno(err, errno, "cannot make '%s'", e->name);
    int sub = openat(dfd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", e->name);
    rc = out_dir(t, src, sub, depth + 1, err);
    if (rc == 0 && fchmod(sub, e->mode & 0777) < 0)
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", e->name);
    close(sub);
    return rc;
}

/* The entries of sandbox directory src into host directory dfd (borrowed). */
static int out_dir(struct tree *t, const char *src, int dfd, int depth, struct sbx_error *err)
{
    struct sbx_dirlist l = {0};
    if (depth > TREE_DEPTH_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is more than %d directories deep", src,
                             TREE_DEPTH_MAX);
    int rc = sbx_session_ls(t->s, src, &l, err);
    for (size_t i = 0; rc == 0 && i < l.n; i++) {
        char *path = src[0] ? sbx_xasprintf("%s/%s", src, l.v[i].name) : sbx_xstrdup(l.v[i].name);
        rc = out_entry(t, path, dfd, &l.v[i], depth, err);
        free(path);
    }
    sbx_dirlist_release(&l);
    return rc;
}

int cli_cp_tree_out(struct sbx_session *s, const char *src, const char *dst, struct sbx_error *err)
{
    struct tree t = {.s = s};
    struct sbx_dirent top = {0};
    int rc = sbx_session_stat(s, src, &top, err);
    if (rc == 0 && mkdir(dst, 0700) < 0 && errno != EEXIST)
        rc = sbx_error_errno(err, errno, "cannot make '%s'", dst);
    int dfd = rc < 0 ? -1 : open(dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rc == 0 && dfd < 0)
        rc = sbx_error_errno(err, errno, "cannot open '%s'", dst);
    if (rc == 0)
        rc = out_dir(&t, src, dfd, 0, err);
    if (rc == 0 && fchmod(dfd, top.mode & 0777) < 0)
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", dst);
    sbx_fd_close(&dfd);
    sbx_dirent_release(&top);
    return rc;
}
