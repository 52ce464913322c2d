/* sbx: entries whose contents come from outside the document: local_file / local_dir sources on
 * the host (inside the base directory, no symlinks) and git_repo references, read from a
 * document or built from C (sbx_manifest_add_local_file, _local_dir, _git_repo). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/manifest/model.h"
#include "sbx/json.h"
#include "sbx/path.h"

#define DIR_WALK_MAX   100000
#define DIR_WALK_DEPTH 128

/* Lexically normalise an absolute host path ("." and ".." resolved, no symlinks followed).
 * Caller owns the result. */
char *sbx__manifest_host_normalize(const char *abs)
{
    size_t len = strlen(abs);
    char *out = sbx_xmalloc(len + 2);
    size_t o = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && abs[i] == '/')
            i++;
        size_t j = i;
        while (j < len && abs[j] != '/')
            j++;
        size_t n = j - i;
        if (n == 0 || (n == 1 && abs[i] == '.')) {
            /* skip */
        } else if (n == 2 && abs[i] == '.' && abs[i + 1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
        } else {
            out[o++] = '/';
            memcpy(out + o, abs + i, n);
            o += n;
        }
        i = j;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return out;
}

/* Absolute normalised form of p, relative paths taken from base (absolute). */
char *sbx__manifest_host_absolute(const char *base, const char *p)
{
    if (p[0] == '/')
        return sbx__manifest_host_normalize(p);
    char *joined = sbx_xasprintf("%s/%s", base, p);
    char *res = sbx__manifest_host_normalize(joined);
    free(joined);
    return res;
}

static int host_within(const char *p, const char *base)
{
    size_t bl = strlen(base);
    if (bl == 1)
        return 1;
    return strncmp(p, base, bl) == 0 && (p[bl] == '\0' || p[bl] == '/');
}

/* Refuse symlinks anywhere in the tree below the directory fd (the reference copies regular
 * files only and fails on symlinks; we fail early, at load). Walks at most DIR_WALK_MAX
 * entries; beyond that the copy re-checks every file anyway. dfd is consumed. */
static int walk_no_symlinks(int dfd, const char *rel, int depth, size_t *budget, const char *src,
                            struct sbx_error *err)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return sbx_error_errno(err, e, "cannot read local source '%s'", src);
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) && *budget > 0) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        (*budget)--;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* vanished while walking; the copy decides */
        char *sub = rel[0] ? sbx_xasprintf("%s/%s", rel, de->d_name) : sbx_xstrdup(de->d_name);
        if (S_ISLNK(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "local source '%s' contains a symlink '%s' (symlinks are not "
                               "copied into the workspace)",
                               src, sub);
        } else if (S_ISDIR(st.st_mode) && depth < DIR_WALK_DEPTH) {
            int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0)
                rc = walk_no_symlinks(fd, sub, depth + 1, budget, src, err);
        }
        free(sub);
        if (rc)
            break;
    }
    closedir(d);
    return rc;
}

/* Check a local source: abs lies under base; every component below base exists and is not a
 * symlink; the last is a regular file (want_dir 0) or a directory without symlinks inside. */
int sbx__manifest_check_local_src(const char *base, const char *abs, const char *src, int want_dir,
                                  struct sbx_error *err)
{
    if (!host_within(abs, base))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "local source '%s' is outside the base directory '%s'", src, base);
    size_t bl = strlen(base);
    size_t alen = strlen(abs);
    char *p = sbx_xstrdup(abs);
    int rc = 0;
    struct stat st;
    for (size_t k = bl == 1 ? 1 : bl + 1; k <= alen; k++) {
        if (k < alen && abs[k] != '/')
            continue;
        p[k] = '\0';
        if (lstat(p, &st) != 0) {
            int e = errno;
            if (e == ENOENT || e == ENOTDIR)
                rc = sbx_error_set(err, SBX_E_NOTFOUND, e, "local source '%s' does not exist", src);
            else
                rc = sbx_error_errno(err, e, "cannot inspect local source '%s'", src);
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "local source '%s' is or passes through a symlink ('%s')", src, p);
            goto out;
        }
        p[k] = abs[k];
    }
    if (alen == bl && lstat(abs, &st) != 0) {
        rc = sbx_error_errno(err, errno, "cannot inspect local source '%s'", src);
        goto out;
    }
    if (!want_dir && !S_ISREG(st.st_mode)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "local source '%s' is not a regular file", src);
        goto out;
    }
    if (want_dir) {
        if (!S_ISDIR(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "local source '%s' is not a directory", src);
            goto out;
        }
        if (want_dir == SBX__LOCAL_SRC_DIR_ITSELF)
            goto out;
        int fd = open(abs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            rc = sbx_error_errno(err, errno, "cannot open local source '%s'", src);
            goto out;
        }
        size_t budget = DIR_WALK_MAX;
        rc = walk_no_symlinks(fd, "", 0, &budget, src, err);
    }
out:
    free(p);
    return rc;
}

char *sbx__manifest_cwd(void)
{
    char *cwd = getcwd(NULL, 0);
    if (!cwd)
        return sbx_xstrdup("/");
    char *res = sbx_xstrdup(cwd);
    free(cwd);
    return res;
}

static const char *const git_keys[] = {
        SBX__MANIFEST_COMMON_KEYS, "host", "repo", "ref", "subpath", NULL};

/* repo "owner/name" (segments of [A-Za-z0-9._-], not "." or "..", not starting with '-'),
 * an https:// or file:// URL, or an absolute local path. */
int sbx__manifest_parse_git(struct entry *e, const json_t *o, struct sbx_error *err)
{
    const char *repo = NULL, *host = NULL, *ref = NULL, *sub = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(o, git_keys, err)) ||
        (rc = sbx_json_get_text(o, "repo", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &repo, NULL,
                                err)) ||
        (rc = sbx_json_get_text(o, "host", 0, &host, NULL, err)) ||
        (rc = sbx_json_get_text(o, "ref", 0, &ref, NULL, err)) ||
        (rc = sbx_json_get_text(o, "subpath", 0, &sub, NULL, err)))
        return rc;
    int is_url = 0;
    if (strncmp(repo, "https://", 8) == 0) {
        const char *h = repo + 8;
        size_t hl = strcspn(h, "/");
        if (!hl || memchr(h, '@', hl) || strchr(repo, '?') || strchr(repo, ' '))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'repo': URL must name a host and carry no credentials or "
                                 "query");
        is_url = 1;
    } else if (strncmp(repo, "file:///", 8) == 0 || repo[0] == '/') {
        /* Read on the host by git itself: no escapes git would decode after our checks. */
        if (strpbrk(repo, "%?#") || strstr(repo, "::"))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'repo': a local repository path must not contain '%%', "
                                 "'?', '#' or '::'");
        is_url = 1;
    } else {
        const char *p = repo;
        int segs = 0;
        while (*p) {
            size_t n = strcspn(p, "/");
            if (n == 0 || p[0] == '-' || (n == 1 && p[0] == '.') ||
                (n == 2 && p[0] == '.' && p[1] == '.'))
                goto bad_repo;
            for (size_t i = 0; i < n; i++)
                if (!(isalnum((unsigned char)p[i]) || p[i] == '.' || p[i] == '_' || p[i] == '-'))
                    goto bad_repo;
            segs++;
            p += n;
            if (*p == '/' && !*++p)
                goto bad_repo;
        }
        if (segs < 2)
            goto bad_repo;
    }
    if (is_url && host && strcmp(host, "github.com") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'host' cannot be combined with a URL in 'repo'");
    if (!is_url) {
        if (!host)
            host = "github.com";
        if (!*host || host[0] == '-' ||
            strspn(host, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") != strlen(host))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'host': '%s' is not a host name",
                                 host);
        e->host = sbx_xstrdup(host);
        size_t rl = strlen(repo);
        int has_git = rl > 4 && strcmp(repo + rl - 4, ".git") == 0;
        e->url = sbx_xasprintf("https://%s/%s%s", host, repo, has_git ? "" : ".git");
    } else {
        e->url = sbx_xstrdup(repo);
    }
    e->repo = sbx_xstrdup(repo);
    if (ref) {
        size_t n = strlen(ref);
        if (n == 0 || n > 255 || ref[0] == '-' || strstr(ref, "..") || strpbrk(ref, " ~^:?*[\\") ||
            ref[n - 1] == '/' || ref[n - 1] == '.')
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'ref': '%s' is not a valid git ref",
                                 n < 200 ? ref : "...");
        e->ref = sbx_xstrdup(ref);
    }
    if (sub) {
        char *n = NULL;
        if ((rc = sbx_path_normalize(sub, strlen(sub), SBX_PATH_ALLOW_ROOT, NULL, &n, err))) {
            sbx__manifest_strip_path_quote(err);
            sbx_error_prefix(err, "field 'subpath'");
            return rc;
        }
        if (*n)
            e->subpath = n;
        else
            free(n);
    }
    return 0;
bad_repo:
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "field 'repo': '%s' is neither \"owner/name\" nor an https:// or file:// "
                         "URL",
                         strlen(repo) < 200 ? repo : "...");
}

char *sbx__manifest_git_host_path(const char *url)
{
    if (!url)
        return NULL;
    if (strncmp(url, "file://", 7) == 0)
        url += 7;
    return url[0] == '/' ? sbx__manifest_host_normalize(url) : NULL;
}

int sbx__manifest_check_git_local(const char *base, const char *url, const char *repo,
                                  struct sbx_error *err)
{
    char *abs = sbx__manifest_git_host_path(url);
    int rc = 0;
    if (abs) {
        rc = sbx__manifest_check_local_src(base, abs, repo, SBX__LOCAL_SRC_DIR_ITSELF, err);
        if (rc < 0)
            sbx_error_prefix(err, "field 'repo': a repository on this host is a local source");
    }
    free(abs);
    return rc;
}

/* ---- building from C (sbx_manifest_add_*, the rest in model.c) ------------------------- */

static int add_local(struct sbx_manifest *m, const char *path, const char *src, int is_dir,
                     const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = sbx__manifest_add_begin(m, path, is_dir ? SBX_ENTRY_LOCAL_DIR : SBX_ENTRY_LOCAL_FILE,
                                     o, &e, err);
    if (rc)
        return rc;
    if (!src || !*src) {
        if (!is_dir)
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'src'");
        return sbx__manifest_add_finish(m, e, rc, err);
    }
    char *cwd = sbx__manifest_cwd();
    e->src = sbx_xstrdup(src);
    e->src_path = sbx__manifest_host_absolute(cwd, src);
    free(cwd);
    /* Only the source itself is checked: the caller chose the path, so its ancestors are
     * trusted; what lies inside a directory is not. */
    char *parent = sbx_xstrdup(e->src_path);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        parent[1] = '\0';
    else if (slash)
        *slash = '\0';
    rc = sbx__manifest_check_local_src(parent, e->src_path, src, is_dir, err);
    free(parent);
    return sbx__manifest_add_finish(m, e, rc, err);
}

int sbx_manifest_add_local_file(struct sbx_manifest *m, const char *path, const char *src,
                                const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    return add_local(m, path, src, 0, o, err);
}

int sbx_manifest_add_local_dir(struct sbx_manifest *m, const char *path, const char *src,
                               const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    return add_local(m, path, src, 1, o, err);
}

int sbx_manifest_add_git_repo(struct sbx_manifest *m, const char *path, const char *repo,
                              const char *ref, const char *subpath,
                              const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = sbx__manifest_add_begin(m, path, SBX_ENTRY_GIT_REPO, o, &e, err);
    if (rc)
        return rc;
    json_t *spec = json_object();
    sbx_json_set(spec, "type", sbx_json_str("git_repo"));
    if (repo)
        sbx_json_set(spec, "repo", sbx_json_str(repo));
    if (ref)
        sbx_json_set(spec, "ref", sbx_json_str(ref));
    if (subpath)
        sbx_json_set(spec, "subpath", sbx_json_str(subpath));
    rc = sbx__manifest_parse_git(e, spec, err);
    json_decref(spec);
    return sbx__manifest_add_finish(m, e, rc, err);
}
