/* The skills capability: folders with a SKILL.md (front matter: name, description) and the
 * scripts, references and assets it uses, from a host folder, a git repository fetched on the
 * host, or a folder already in the workspace. Eager: every skill is copied into the workspace
 * when the agent's session is bound and listed with its path. Lazy: only the index is listed and
 * load_skill (the reference's name and schema) copies one skill on demand. Everything a skills
 * source holds is hostile input: read through descriptors that never follow a symlink, bounded
 * in size and count, and a skill that breaks a rule is skipped with a warning, never cut or
 * followed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capability/capability-internal.h"
#include "capability/skills-internal.h"
#include "sandbox/materialize/git.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/path.h"
#include "sbx/skills.h"
#include "sbx/yaml.h"

#define SKILLS_DEFAULT_PATH ".agents"
#define NONE                ((size_t)-1)

/* ---- front matter ---------------------------------------------------------------------------- */

static int valid_name(const char *s, size_t n)
{
    if (n == 0 || n > SBX_SKILL_NAME_MAX || s[0] == '.' || s[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* A "---" line (trailing blanks and a CR allowed) from p to eol. */
static int is_marker(const char *p, const char *eol)
{
    if (eol - p < 3 || memcmp(p, "---", 3) != 0)
        return 0;
    for (p += 3; p < eol; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r')
            return 0;
    return 1;
}

static const char *line_end(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl ? nl : end;
}

/* Fold every run of whitespace and control characters into one space, without leading or
 * trailing ones. */
static char *fold(const char *s, size_t n)
{
    char *out = sbx_xmalloc(n + 1);
    size_t k = 0;
    int gap = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == 0x7f) {
            gap = k > 0;
            continue;
        }
        if (gap)
            out[k++] = ' ';
        gap = 0;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return out;
}

/* The value of a front matter line as the reference SDK's line parser reads it: the text after
 * the first ':' without the blanks around it, and without one pair of matching quotes. */
static char *raw_value(const char *v, size_t n)
{
    if (n >= 2 && v[0] == v[n - 1] && (v[0] == '"' || v[0] == '\''))
        return sbx_xstrndup(v + 1, n - 2);
    return sbx_xstrndup(v, n);
}

/* Whether a value needs YAML to be read: quoted (escapes), a block scalar ('|' or '>' with
 * its indicators), or empty (its text may be on the indented lines after it). A plain one-line
 * value is taken as it is, as the SDK does, so that a '#' inside it stays. */
static int needs_yaml(const char *v, size_t n)
{
    if (n == 0 || v[0] == '"' || v[0] == '\'')
        return 1;
    if (v[0] != '|' && v[0] != '>')
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!strchr("+-0123456789", v[i]))
            return 0;
    return 1;
}

static const char *trim(const char *p, const char **end)
{
    while (p < *end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    while (*end > p && ((*end)[-1] == ' ' || (*end)[-1] == '\t' || (*end)[-1] == '\r'))
        (*end)--;
    return p;
}

/* name and description from the front matter between body and close: each top-level
 * "key: value" line, the last of a key winning; values that need YAML come from the YAML
 * reading of the whole front matter when it has one for the key (else the line's text). */
static void read_fields(const char *body, const char *close, char **name, char **desc)
{
    static const char *const keys[] = {"name", "description"};
    char **out[] = {name, desc};
    json_t *doc = NULL;
    int tried = 0;
    for (const char *q = body; q < close;) {
        const char *eol = line_end(q, close), *end = eol, *next = eol < close ? eol + 1 : close;
        int indented = *q == ' ' || *q == '\t';
        const char *s = trim(q, &end), *colon = memchr(s, ':', (size_t)(end - s));
        q = next;
        if (indented || s == end || *s == '#' || !colon)
            continue;
        const char *kend = colon, *v = colon + 1, *vend = end;
        const char *k = trim(s, &kend);
        v = trim(v, &vend);
        /* An indented line next continues the value over several lines. */
        const char *nend = line_end(next, close), *n = trim(next, &nend);
        int continued = next < close && (*next == ' ' || *next == '\t') && n < nend;
        for (size_t i = 0; i < 2; i++) {
            if ((size_t)(kend - k) != strlen(keys[i]) || memcmp(k, keys[i], kend - k) != 0)
                continue;
            free(*out[i]);
            *out[i] = NULL;
            if (continued || needs_yaml(v, (size_t)(vend - v))) {
                if (!tried++) {
                    struct sbx_yaml_limits lim = {
                            .max_bytes = SBX_SKILL_FRONT_MAX, .max_depth = 16, .max_nodes = 4096};
                    if (sbx_yaml_parse(body, (size_t)(close - body), &lim, &doc, NULL) < 0)
                        doc = NULL;
                }
                const json_t *y = json_object_get(doc, keys[i]);
                if (json_is_string(y))
                    *out[i] = sbx_xstrndup(json_string_value(y), json_string_length(y));
            }
            if (!*out[i])
                *out[i] = raw_value(v, (size_t)(vend - v));
        }
    }
    json_decref(doc);
}

int sbx__skill_front_matter(const char *text, size_t len, const char *dir, char **name, char **desc,
                            struct sbx_error *err)
{
    const char *p = text, *end = text + len, *close = NULL, *body = NULL;
    char *n = NULL, *d = NULL;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    const char *eol = line_end(p, end);
    if (is_marker(p, eol)) {
        body = eol < end ? eol + 1 : end;
        for (const char *q = body; q < end && !close;) {
            eol = line_end(q, end);
            if (is_marker(q, eol))
                close = q;
            else
                q = eol < end ? eol + 1 : end;
            if ((size_t)(q - body) > SBX_SKILL_FRONT_MAX)
                return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                     "the front matter is longer than %u bytes",
                                     SBX_SKILL_FRONT_MAX);
        }
    }
    /* No front matter, or none that closes: the SDK lists the skill with the defaults. */
    if (close)
        read_fields(body, close, &n, &d);
    char *fn = n ? fold(n, strlen(n)) : NULL, *fd = d ? fold(d, strlen(d)) : NULL;
    free(n);
    free(d);
    if (!fn || !fn[0]) {
        free(fn);
        fn = sbx_xstrdup(dir);
    }
    if (!fd || !fd[0]) {
        free(fd);
        fd = sbx_xstrdup(SBX_SKILL_NO_DESCRIPTION);
    }
    int rc = 0;
    if (strlen(fn) > SBX_SKILL_NAME_MAX)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "name '%.64s...' is longer than %d bytes", fn,
                           SBX_SKILL_NAME_MAX);
    else if (strlen(fd) > SBX_SKILL_DESC_MAX)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "the description is longer than %d bytes",
                           SBX_SKILL_DESC_MAX);
    if (rc < 0) {
        free(fn);
        free(fd);
        return rc;
    }
    *name = fn;
    *desc = fd;
    return 0;
}

/* ---- lists ----------------------------------------------------------------------------------- */

void sbx__skill_list_release(struct sbx__skill_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].description);
        free(l->v[i].dir);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Add a skill (taking name and desc) unless its name is taken or the list is full. Of two
 * skills with one name, the one in the folder of that name wins, else the first. */
static void list_add(struct sbx__skill_list *l, const char *shown, int quiet, const char *dir,
                     char *name, char *desc)
{
    for (size_t i = 0; i < l->n; i++) {
        struct sbx__skill *k = &l->v[i];
        if (strcmp(k->name, name) != 0)
            continue;
        if (strcmp(dir, name) == 0 && strcmp(k->dir, name) != 0) {
            if (!quiet)
                sbx_log(SBX_LOG_WARN,
                        "skills: skipped '%s' in '%s': the name '%s' belongs to folder '%s'",
                        k->dir, shown, name, dir);
            free(k->description);
            free(k->dir);
            free(name);
            k->description = desc;
            k->dir = sbx_xstrdup(dir);
            return;
        }
        if (!quiet)
            sbx_log(SBX_LOG_WARN,
                    "skills: skipped '%s' in '%s': the name '%s' is already taken by '%s'", dir,
                    shown, name, k->dir);
        goto drop;
    }
    if (l->n == SBX_SKILLS_MAX) {
        if (!quiet)
            sbx_log(SBX_LOG_WARN, "skills: skipped '%s' in '%s': a source holds at most %d skills",
                    dir, shown, SBX_SKILLS_MAX);
        goto drop;
    }
    l->v = sbx_xrealloc(l->v, (l->n + 1) * sizeof(*l->v));
    l->v[l->n++] = (struct sbx__skill){name, desc, sbx_xstrdup(dir)};
    return;
drop:
    free(name);
    free(desc);
}

static struct sbx__skill_list list_copy(const struct sbx__skill_list *l)
{
    struct sbx__skill_list c = {sbx_xcalloc(l->n + 1, sizeof(*c.v)), l->n};
    for (size_t i = 0; i < l->n; i++)
        c.v[i] = (struct sbx__skill){sbx_xstrdup(l->v[i].name), sbx_xstrdup(l->v[i].description),
                                     sbx_xstrdup(l->v[i].dir)};
    return c;
}

int sbx__skills_find(const struct sbx__skill_list *l, const char *q, size_t *idx,
                     struct sbx_error *err)
{
    size_t first = NONE, second = NONE;
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->v[i].name, q) != 0 && strcmp(l->v[i].dir, q) != 0)
            continue;
        if (first == NONE)
            first = i;
        else if (second == NONE)
            second = i;
    }
    if (second != NONE)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "skill name '%.64s' is ambiguous: it names both '%s' (folder '%s') "
                             "and '%s' (folder '%s'); use the other skill's folder name",
                             q, l->v[first].name, l->v[first].dir, l->v[second].name,
                             l->v[second].dir);
    if (first != NONE) {
        *idx = first;
        return 0;
    }
    char known[512];
    size_t k = 0;
    known[0] = '\0';
    for (size_t i = 0; i < l->n && k < sizeof(known); i++) {
        int w = snprintf(known + k, sizeof(known) - k, "%s%s", i ? ", " : "", l->v[i].name);
        k += w > 0 ? (size_t)w : 0;
    }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no skill named '%.64s' (available: %s)", q,
                         l->n ? known : "none");
}

/* ---- host folders ---------------------------------------------------------------------------- */

struct walk {
    struct sbx_session *s; /* NULL: only check */
    size_t entries;
    uint64_t bytes;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in the folder open at dfd, sorted (at most max; SBX_E_TOOBIG past it). */
static int list_names(int dfd, const char *shown, size_t max, struct sbx_strv *out,
                      struct sbx_error *err)
{
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int rc = sbx_error_errno(err, errno, "cannot list '%s'", shown);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    rewinddir(d);
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (out->n == max) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' holds more than %zu entries", shown,
                               max);
            break;
        }
        sbx_strv_push(out, e->d_name);
    }
    closedir(d);
    if (out->n)
        qsort(out->v, out->n, sizeof(*out->v), by_name);
    return rc;
}

/* Check (and with w->s, copy to dest) the folder open at dfd, shown as rel. */
static int walk(struct walk *w, int dfd, const char *rel, const char *dest, int depth,
                struct sbx_error *err)
{
    struct sbx_strv names;
    int rc;
    if (depth > SBX_SKILL_MAX_DEPTH)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' nests deeper than %d folders", rel,
                             SBX_SKILL_MAX_DEPTH);
    sbx_strv_init(&names);
    if ((rc = list_names(dfd, rel, SBX_SKILL_MAX_ENTRIES + 1, &names, err)) == -SBX_E_TOOBIG)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "it holds more than %d files and folders",
                           SBX_SKILL_MAX_ENTRIES);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < names.n && rc == 0; i++) {
        const char *n = names.v[i];
        char *sub = sbx_xasprintf("%s/%s", rel, n);
        char *to = w->s ? sbx_xasprintf("%s/%s", dest, n) : NULL;
        struct stat st;
        int fd = -1;
        if (++w->entries > SBX_SKILL_MAX_ENTRIES)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "it holds more than %d files and folders",
                               SBX_SKILL_MAX_ENTRIES);
        else if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0)
            rc = sbx_error_errno(err, errno, "cannot inspect '%s'", sub);
        else if (S_ISLNK(st.st_mode))
            rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symlink, which is never followed",
                               sub);
        else if (S_ISDIR(st.st_mode)) {
            fd = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                rc = sbx_error_errno(err, errno, "cannot open '%s'", sub);
            else if (w->s)
                rc = sbx_session_mkdir(w->s, to, SBX_MKDIR_PARENTS, err);
            if (rc == 0)
                rc = walk(w, fd, sub, to, depth + 1, err);
        } else if (!S_ISREG(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file or folder", sub);
        } else if ((uint64_t)st.st_size > SBX_SKILL_MAX_FILE) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is larger than %llu MiB", sub,
                               (unsigned long long)(SBX_SKILL_MAX_FILE >> 20));
        } else if (w->bytes + (uint64_t)st.st_size > SBX_SKILL_MAX_BYTES) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "its files are larger than %llu MiB in all",
                               (unsigned long long)(SBX_SKILL_MAX_BYTES >> 20));
        } else if (w->s) {
            struct stat fst;
            uint64_t room = SBX_SKILL_MAX_BYTES - w->bytes;
            fd = openat(dfd, n, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0)
                rc = sbx_error_errno(err, errno, "cannot open '%s'", sub);
            else if (fstat(fd, &fst) < 0 || !S_ISREG(fst.st_mode))
                rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' changed while being copied", sub);
            else
                rc = sbx_session_write_fd(w->s, to, fd,
                                          room < SBX_SKILL_MAX_FILE ? room : SBX_SKILL_MAX_FILE,
                                          st.st_mode & 0777, SBX_WRITE_PARENTS, err);
            w->bytes += (uint64_t)st.st_size;
        } else {
            w->bytes += (uint64_t)st.st_size;
        }
        sbx_fd_close(&fd);
        free(sub);
        free(to);
    }
out:
    sbx_strv_release(&names);
    return rc;
}

/* Read SKILL.md of the skill folder open at dfd (never a symlink, at most SBX_SKILL_MD_MAX). */
static int read_skill_md(int dfd, const char *dir, struct sbx_buf *out, struct sbx_error *err)
{
    int fd = openat(dfd, "SKILL.md", O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    int rc = 0;
    if (fd < 0)
        return errno == ENOENT  ? sbx_error_set(err, SBX_E_NOTFOUND, 0, "it has no SKILL.md")
               : errno == ELOOP ? sbx_error_set(err, SBX_E_PERM, 0,
                                                "'%s/SKILL.md' is a symlink, which is never "
                                                "followed",
                                                dir)
                                : sbx_error_errno(err, errno, "cannot open '%s/SKILL.md'", dir);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s/SKILL.md' is not a regular file", dir);
    else if ((uint64_t)st.st_size > SBX_SKILL_MD_MAX)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s/SKILL.md' is larger than %u KiB", dir,
                           SBX_SKILL_MD_MAX >> 10);
    while (rc == 0) {
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = sbx_error_errno(err, errno, "cannot read '%s/SKILL.md'", dir);
        if (n <= 0)
            break;
        if (sbx_buf_add(out, buf, (size_t)n, NULL) < 0)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s/SKILL.md' is larger than %u KiB", dir,
                               SBX_SKILL_MD_MAX >> 10);
    }
    close(fd);
    return rc;
}

/* One candidate folder: the skill, or an error saying why it is not one. */
static int host_skill(int dfd, const char *dir, char **name, char **desc, struct sbx_error *err)
{
    struct stat st;
    struct sbx_buf md;
    int fd = -1, rc;
    if (fstatat(dfd, dir, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return sbx_error_errno(err, errno, "cannot inspect it");
    if (S_ISLNK(st.st_mode))
        return sbx_error_set(err, SBX_E_PERM, 0, "it is a symlink, which is never followed");
    if (!S_ISDIR(st.st_mode))
        return 1; /* a plain file (a README): not a skill */
    if (!valid_name(dir, strlen(dir)))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "a skill folder name must be 1 to %d letters, digits, '.', '_' or "
                             "'-'",
                             SBX_SKILL_NAME_MAX);
    fd = openat(dfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open it");
    sbx_buf_init(&md, SBX_SKILL_MD_MAX);
    rc = read_skill_md(fd, dir, &md, err);
    if (rc == 0)
        rc = sbx__skill_front_matter(md.data, md.len, dir, name, desc, err);
    if (rc == 0) {
        struct walk w = {0};
        if ((rc = walk(&w, fd, dir, NULL, 0, err)) < 0) {
            free(*name);
            free(*desc);
        }
    }
    sbx_buf_release(&md);
    close(fd);
    return rc;
}

int sbx__skills_scan_host(int dfd, const char *shown, struct sbx__skill_list *out,
                          struct sbx_error *err)
{
    struct sbx_strv names;
    struct sbx__skill_list l = {0};
    sbx_strv_init(&names);
    int rc = list_names(dfd, shown, SBX_SKILLS_SCAN_MAX, &names, err);
    if (rc == -SBX_E_TOOBIG) {
        sbx_log(SBX_LOG_WARN, "skills: %s; only the first %d are looked at", err->msg,
                SBX_SKILLS_SCAN_MAX);
        rc = 0;
    }
    for (size_t i = 0; i < names.n && rc == 0; i++) {
        const char *dir = names.v[i];
        struct sbx_error why = SBX_ERROR_INIT;
        char *name = NULL, *desc = NULL;
        if (dir[0] == '.')
            continue; /* .git, .github and the like */
        int r = host_skill(dfd, dir, &name, &desc, &why);
        if (r < 0)
            sbx_log(SBX_LOG_WARN, "skills: skipped '%s' in '%s': %s", dir, shown, why.msg);
        else if (r == 0)
            list_add(&l, shown, 0, dir, name, desc);
    }
    sbx_strv_release(&names);
    if (rc < 0) {
        sbx__skill_list_release(&l);
        return rc;
    }
    *out = l;
    return 0;
}

int sbx__skill_copy(struct sbx_session *s, int dfd, const char *dir, const char *dest,
                    struct sbx_error *err)
{
    struct sbx_error ignored = SBX_ERROR_INIT;
    struct walk w = {.s = s};
    int fd = openat(dfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc;
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open skill folder '%s'", dir);
    /* A stale copy (an earlier run, or whatever the sandbox put there) is replaced whole. */
    rc = sbx_session_rm(s, dest, SBX_RM_RECURSIVE | SBX_RM_FORCE, err);
    if (rc == 0)
        rc = sbx_session_mkdir(s, dest, SBX_MKDIR_PARENTS, err);
    if (rc == 0)
        rc = walk(&w, fd, dir, dest, 0, err);
    if (rc < 0 && rc != -SBX_E_SANDBOX)
        sbx_session_rm(s, dest, SBX_RM_RECURSIVE | SBX_RM_FORCE, &ignored);
    close(fd);
    return rc;
}

/* ---- the workspace as a source --------------------------------------------------------------- */

/* The skills in workspace folder path: the same front matter rules, read through the session
 * (which never leaves the workspace); a skill folder or SKILL.md that is a symlink is skipped,
 * with a warning unless quiet. */
static int scan_workspace(struct sbx_session *s, const char *path, int quiet,
                          struct sbx__skill_list *out, struct sbx_error *err)
{
    struct sbx_dirlist dl = {0};
    struct sbx__skill_list l = {0};
    int rc = sbx_session_ls(s, path[0] ? path : ".", &dl, err);
    if (rc < 0) {
        sbx_error_prefix(err, "skills folder '%s' in the workspace", path[0] ? path : ".");
        return rc;
    }
    for (size_t i = 0; i < dl.n && i < SBX_SKILLS_SCAN_MAX; i++) {
        const struct sbx_dirent *e = &dl.v[i];
        struct sbx_error why = SBX_ERROR_INIT;
        struct sbx_dirent md = {0};
        struct sbx_buf text;
        char *name = NULL, *desc = NULL;
        int r = 0;
        if (e->name[0] == '.' || e->type == SBX_FILE_REGULAR)
            continue;
        char *mdp = path[0] ? sbx_xasprintf("%s/%s/SKILL.md", path, e->name)
                            : sbx_xasprintf("%s/SKILL.md", e->name);
        sbx_buf_init(&text, SBX_SKILL_MD_MAX);
        if (e->type != SBX_FILE_DIR)
            r = sbx_error_set(&why, SBX_E_PERM, 0,
                              "it is not a folder (symlinks are never "
                              "followed)");
        else if (!valid_name(e->name, strlen(e->name)))
            r = sbx_error_set(&why, SBX_E_INVAL, 0,
                              "a skill folder name must be 1 to %d letters, digits, '.', '_' or "
                              "'-'",
                              SBX_SKILL_NAME_MAX);
        else if ((r = sbx_session_stat(s, mdp, &md, &why)) == -SBX_E_NOTFOUND)
            r = sbx_error_set(&why, SBX_E_NOTFOUND, 0, "it has no SKILL.md");
        else if (r == 0 && md.type != SBX_FILE_REGULAR)
            r = sbx_error_set(&why, SBX_E_PERM, 0, "its SKILL.md is not a regular file");
        else if (r == 0 && (r = sbx_session_read(s, mdp, SBX_SKILL_MD_MAX, &text, &why)) == 0)
            r = sbx__skill_front_matter(text.data, text.len, e->name, &name, &desc, &why);
        if (r == -SBX_E_SANDBOX) {
            rc = sbx_error_copy(err, &why);
        } else if (r < 0 && !quiet) {
            sbx_log(SBX_LOG_WARN, "skills: skipped '%s' in workspace folder '%s': %s", e->name,
                    path[0] ? path : ".", why.msg);
        } else if (r == 0) {
            list_add(&l, path[0] ? path : ".", quiet, e->name, name, desc);
        }
        sbx_dirent_release(&md);
        sbx_buf_release(&text);
        free(mdp);
        if (rc < 0)
            break;
    }
    sbx_dirlist_release(&dl);
    if (rc < 0) {
        sbx__skill_list_release(&l);
        return rc;
    }
    *out = l;
    return 0;
}

/* ---- the capability -------------------------------------------------------------------------- */

enum source { SRC_HOST, SRC_GIT, SRC_WORKSPACE };

struct skills {
    enum source kind;
    int lazy;
    char *skills_path;      /* where host skills go in the workspace */
    char *ws_path;          /* SRC_WORKSPACE: the folder that holds them */
    char *shown;            /* the source as written, for messages */
    struct sbx_manifest *m; /* SRC_HOST, SRC_GIT: the source as a manifest entry */

    /* Host sources are read once, by the first agent bound, and shared by all. */
    pthread_mutex_t lock;
    int prepared, prep_rc;
    struct sbx_error prep_err;
    char *checkout; /* SRC_GIT: the host checkout, removed with the capability */
    int fd;         /* the host source folder */
    struct sbx__skill_list list;
};

static void skills_free(void *data)
{
    struct skills *d = data;
    if (!d)
        return;
    free(d->skills_path);
    free(d->ws_path);
    free(d->shown);
    sbx_manifest_free(d->m);
    sbx_fd_close(&d->fd);
    if (d->checkout)
        sbx__git_checkout_remove(d->checkout);
    free(d->checkout);
    sbx__skill_list_release(&d->list);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

static int open_host(struct skills *d, struct sbx_error *err)
{
    const struct sbx_manifest_entry *e = sbx_manifest_entry_at(d->m, 0);
    char *commit = NULL;
    int rc = 0, root = -1;
    if (d->kind == SRC_HOST) {
        d->fd = open(e->src_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d->fd < 0)
            return errno == ENOENT ? sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                                                   "skills source '%s' does not exist", d->shown)
                   : errno == ELOOP || errno == ENOTDIR
                           ? sbx_error_set(err, SBX_E_INVAL, errno,
                                           "skills source '%s' is not a folder (or is a symlink)",
                                           d->shown)
                           : sbx_error_errno(err, errno, "cannot open skills source '%s'",
                                             d->shown);
    } else {
        if ((rc = sbx__git_checkout(e, &d->checkout, &commit, err)) < 0) {
            sbx_error_prefix(err, "skills source '%s'", d->shown);
            return rc;
        }
        free(commit);
        root = open(d->checkout, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            return sbx_error_errno(err, errno, "cannot open '%s'", d->checkout);
        if (e->subpath) {
            rc = sbx_fs_open(root, e->subpath, O_RDONLY | O_DIRECTORY, 0, SBX_FS_NOFOLLOW, &d->fd,
                             err);
            close(root);
            if (rc < 0) {
                sbx_error_prefix(err, "skills source '%s': subpath", d->shown);
                return rc;
            }
        } else {
            d->fd = root;
        }
    }
    if ((rc = sbx__skills_scan_host(d->fd, d->shown, &d->list, err)) < 0)
        return rc;
    if (d->list.n == 0)
        sbx_log(SBX_LOG_WARN, "skills: no skills found in '%s'", d->shown);
    return 0;
}

static int prepare(struct skills *d, struct sbx_error *err)
{
    pthread_mutex_lock(&d->lock);
    if (!d->prepared) {
        d->prep_rc = open_host(d, &d->prep_err);
        d->prepared = 1;
    }
    int rc = d->prep_rc;
    if (rc < 0)
        sbx_error_copy(err, &d->prep_err);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

/* The index for one session: host sources' shared list, or the workspace folder scanned now
 * (into *tmp; quiet: without warnings, which the other hook gives). */
static int get_index(struct skills *d, struct sbx_session *s, int quiet,
                     struct sbx__skill_list *tmp, const struct sbx__skill_list **out,
                     struct sbx_error *err)
{
    int rc;
    if (d->kind == SRC_WORKSPACE) {
        if ((rc = scan_workspace(s, d->ws_path, quiet, tmp, err)) < 0)
            return rc;
        if (tmp->n == 0 && !quiet)
            sbx_log(SBX_LOG_WARN, "skills: no skills found in workspace folder '%s'",
                    d->ws_path[0] ? d->ws_path : ".");
        *out = tmp;
        return 0;
    }
    if ((rc = prepare(d, err)) < 0)
        return rc;
    *out = &d->list;
    return 0;
}

/* Where skill k is in the workspace (caller frees). */
static char *skill_path(const struct skills *d, const struct sbx__skill *k)
{
    const char *base = d->kind == SRC_WORKSPACE ? d->ws_path : d->skills_path;
    return base[0] ? sbx_xasprintf("%s/%s", base, k->dir) : sbx_xstrdup(k->dir);
}

/* ---- load_skill ------------------------------------------------------------------------------ */

static const char load_schema[] = "{\"type\":\"object\",\"required\":[\"skill_name\"],"
                                  "\"properties\":{\"skill_name\":{\"type\":\"string\"}}}";

struct load_tool {
    struct sbx_capability *cap; /* a reference: the skills object */
    struct sbx_session *session;
    struct sbx__skill_list list;
    pthread_mutex_t lock;
    unsigned char *loaded;
};

static void load_free(void *data)
{
    struct load_tool *lt = data;
    sbx_capability_unref(lt->cap);
    sbx__skill_list_release(&lt->list);
    pthread_mutex_destroy(&lt->lock);
    free(lt->loaded);
    free(lt);
}

static int load_skill(const json_t *args, const struct sbx_tool_call *call,
                      struct sbx_tool_output *out, struct sbx_error *err)
{
    struct load_tool *lt = call->data;
    struct skills *d = sbx_capability_data(lt->cap);
    const char *q = json_string_value(json_object_get(args, "skill_name"));
    const char *status = "loaded";
    struct sbx_dirent st = {0};
    struct sbx_error ignored = SBX_ERROR_INIT;
    size_t k;
    int rc = sbx__skills_find(&lt->list, q ? q : "", &k, err);
    if (rc < 0)
        return rc;
    const struct sbx__skill *sk = &lt->list.v[k];
    char *path = skill_path(d, sk);
    char *md = sbx_xasprintf("%s/SKILL.md", path);
    /* One call at a time copies: two calls for one skill must not interleave. */
    pthread_mutex_lock(&lt->lock);
    if (lt->loaded[k] ||
        (d->kind != SRC_WORKSPACE && sbx_session_stat(lt->session, md, &st, &ignored) == 0 &&
         st.type == SBX_FILE_REGULAR))
        status = "already_loaded";
    else if (d->kind != SRC_WORKSPACE)
        rc = sbx__skill_copy(lt->session, d->fd, sk->dir, path, err);
    if (rc == 0)
        lt->loaded[k] = 1;
    pthread_mutex_unlock(&lt->lock);
    if (rc < 0) {
        sbx_error_prefix(err, "cannot load skill '%s'", sk->name);
    } else {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "status", status, "skill_name", sk->name,
                              "path", path, "skill_md", md);
        rc = sbx_json_dump(o, JSON_COMPACT, &out->text, err);
        json_decref(o);
    }
    sbx_dirent_release(&st);
    free(md);
    free(path);
    return rc;
}

/* ---- hooks ----------------------------------------------------------------------------------- */

static int skills_tools(struct sbx_capability *c, const struct sbx_capability_env *env,
                        struct sbx_toolset *out, struct sbx_error *err)
{
    struct skills *d = sbx_capability_data(c);
    struct sbx__skill_list tmp = {0};
    const struct sbx__skill_list *l = NULL;
    int rc = 0;
    if (!d->lazy && d->kind == SRC_WORKSPACE)
        return 0; /* already where they are listed */
    if ((rc = get_index(d, env->session, 1, &tmp, &l, err)) < 0 || l->n == 0)
        goto out;
    if (!d->lazy) {
        for (size_t i = 0; i < l->n && rc == 0; i++) {
            char *path = skill_path(d, &l->v[i]);
            if ((rc = sbx__skill_copy(env->session, d->fd, l->v[i].dir, path, err)) < 0)
                sbx_error_prefix(err, "cannot copy skill '%s' to '%s'", l->v[i].name, path);
            free(path);
        }
        goto out;
    }
    json_t *params = json_loads(load_schema, 0, NULL);
    if (!params)
        SBX_BUG("load_skill schema does not parse");
    struct load_tool *lt = sbx_xcalloc(1, sizeof(*lt));
    lt->cap = sbx_capability_ref(c);
    lt->session = env->session;
    lt->list = list_copy(l);
    lt->loaded = sbx_xcalloc(l->n, 1);
    pthread_mutex_init(&lt->lock, NULL);
    struct sbx_function_tool spec = {
            .name = "load_skill",
            .description = "Copies one skill, named as in the skills list of your instructions, "
                           "into the workspace and returns its folder, where its SKILL.md and "
                           "any scripts, references and assets can then be read.",
            .parameters = params,
            .fn = load_skill,
            .data = lt,
            .free_data = load_free,
    };
    struct sbx_tool *t = NULL;
    rc = sbx_tool_new_function(&spec, &t, err);
    json_decref(params);
    if (rc == 0) {
        sbx_toolset_add(out, t, 1);
        sbx_tool_unref(t);
    }
out:
    sbx__skill_list_release(&tmp);
    return rc;
}

static int skills_instructions(struct sbx_capability *c, const struct sbx_capability_env *env,
                               struct sbx_buf *out, struct sbx_error *err)
{
    struct skills *d = sbx_capability_data(c);
    struct sbx__skill_list tmp = {0};
    const struct sbx__skill_list *l = NULL;
    int rc = get_index(d, env->session, 0, &tmp, &l, err);
    if (rc < 0 || l->n == 0)
        goto out;
    rc = sbx_buf_adds(out,
                      "## Skills\n\n"
                      "A skill is a folder of instructions for one kind of task: its SKILL.md "
                      "says when and how to use it, and the folder may hold scripts, reference "
                      "documents and assets it points to. Paths are relative to the workspace "
                      "root.\n\n### Available skills\n\n",
                      err);
    for (size_t i = 0; i < l->n && rc == 0; i++) {
        /* Lazy skills too: the path says where load_skill will put the skill. */
        char *path = skill_path(d, &l->v[i]);
        rc = sbx_buf_addf(out, err, "- %s: %s (file: %s/SKILL.md)\n", l->v[i].name,
                          l->v[i].description, path);
        free(path);
    }
    if (rc == 0 && d->lazy)
        rc = sbx_buf_adds(
                out,
                "\n### Loading a skill\n\n"
                "These skills are not in the workspace until you load them: the paths above "
                "are where they will be. Call "
                "`load_skill` with the skill's name, one skill per call; it answers "
                "with the folder it put the skill in (`path`) and its SKILL.md "
                "(`skill_md`). A skill that is already there answers "
                "`already_loaded`. Load only the skills the task needs.\n",
                err);
    if (rc == 0)
        rc = sbx_buf_adds(out,
                          "\n### How to use skills\n\n"
                          "- Use a skill when the user names it (for example `$name`) or when "
                          "the task plainly matches its description. Several may apply; use "
                          "each one that does, in a sensible order.\n"
                          "- Before you act on a skill, read its whole SKILL.md with "
                          "`exec_command` (`cat`) and follow it. Paths inside a SKILL.md are "
                          "relative to the skill's folder.\n"
                          "- Open only the references and assets the SKILL.md sends you to for "
                          "the task at hand. Run its scripts instead of retyping them.\n"
                          "- A skill is guidance for this task, not the task itself: do not "
                          "change a skill's files unless you are asked to.\n"
                          "- If a skill is missing, its files cannot be read or its steps fail, "
                          "say so briefly and carry on with the best other way to do the "
                          "task.",
                          err);
out:
    sbx__skill_list_release(&tmp);
    return rc;
}

static const struct sbx_capability_ops skills_ops = {
        .instructions = skills_instructions,
        .tools = skills_tools,
        .free_data = skills_free,
};

/* ---- configuration --------------------------------------------------------------------------- */

/* A host source ({type: local_dir, src} or {type: git_repo, ...}) as a one-entry manifest, so
 * it is checked by the manifest's own rules; the host is read only when a session is bound. */
static int parse_host(struct skills *d, const json_t *from, const char *base_dir,
                      struct sbx_error *err)
{
    static const char *const local_keys[] = {"type", "src", NULL};
    static const char *const git_keys[] = {"type", "repo", "host", "ref", "subpath", NULL};
    const char *type = json_string_value(json_object_get(from, "type"));
    int git = type && strcmp(type, "git_repo") == 0;
    int rc = sbx_json_check_keys(from, git ? git_keys : local_keys, err);
    if (rc < 0)
        return rc;
    if (!git && !json_is_string(json_object_get(from, "src")))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a local_dir source needs a string 'src'");
    json_t *doc = json_pack("{s:{s:O}}", "entries", "skills", from);
    struct sbx_manifest_load_opts lo = {.base_dir = base_dir, .flags = SBX_MANIFEST_NO_HOST_CHECKS};
    rc = sbx_manifest_from_json(doc, &lo, &d->m, err);
    json_decref(doc);
    if (rc < 0)
        return rc;
    const struct sbx_manifest_entry *e = sbx_manifest_entry_at(d->m, 0);
    d->kind = git ? SRC_GIT : SRC_HOST;
    d->shown = git ? e->ref ? sbx_xasprintf("%s@%s", e->repo, e->ref) : sbx_xstrdup(e->repo)
                   : sbx_xstrdup(e->src);
    return 0;
}

int sbx__capability_skills(const json_t *spec, const char *base_dir, struct sbx_capability **out,
                           struct sbx_error *err)
{
    static const char *const keys[] = {"type", "from", "lazy", "skills_path", NULL};
    const json_t *from = json_object_get(spec, "from");
    const char *sp = SKILLS_DEFAULT_PATH, *type = NULL;
    int rc;
    if (!spec)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "needs a source: {type: skills, from: <folder or entry>}");
    struct skills *d = sbx_xcalloc(1, sizeof(*d));
    d->fd = -1;
    pthread_mutex_init(&d->lock, NULL);
    if ((rc = sbx_json_check_keys(spec, keys, err)) < 0 ||
        (rc = sbx_json_get_bool(spec, "lazy", 0, &d->lazy, err)) < 0 ||
        (rc = sbx_json_get_string(spec, "skills_path", 0, &sp, err)) < 0)
        goto fail;
    if ((rc = sbx_path_normalize(sp, strlen(sp), 0, NULL, &d->skills_path, err)) < 0) {
        sbx_error_prefix(err, "field 'skills_path'");
        goto fail;
    }
    if (!from) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'from'");
        goto fail;
    }
    if (json_is_string(from)) {
        json_t *o = json_pack("{s:s, s:O}", "type", "local_dir", "src", from);
        rc = parse_host(d, o, base_dir, err);
        json_decref(o);
    } else if (!json_is_object(from) ||
               !(type = json_string_value(json_object_get(from, "type")))) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "must be a folder or an entry with a 'type' (local_dir, git_repo, "
                           "workspace)");
    } else if (strcmp(type, "workspace") == 0) {
        static const char *const ws_keys[] = {"type", "path", NULL};
        const char *p = NULL;
        if ((rc = sbx_json_check_keys(from, ws_keys, err)) == 0 &&
            (rc = sbx_json_get_string(from, "path", 1, &p, err)) == 0 &&
            (rc = sbx_path_normalize(p, strlen(p), SBX_PATH_ALLOW_ROOT, NULL, &d->ws_path, err)) ==
                    0) {
            d->kind = SRC_WORKSPACE;
            d->shown = sbx_xstrdup(p);
        }
    } else if (strcmp(type, "local_dir") == 0 || strcmp(type, "git_repo") == 0) {
        rc = parse_host(d, from, base_dir, err);
    } else {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "unknown type '%.32s' (known: local_dir, git_repo, workspace)", type);
    }
    if (rc < 0) {
        sbx_error_prefix(err, "field 'from'");
        goto fail;
    }
    return sbx_capability_new("skills", &skills_ops, d, out, err);
fail:
    skills_free(d);
    return rc;
}

/* ---- listing skills (skills.h) --------------------------------------------------------------- */

/* The public form of list l of folder shown (taken: l is released). */
static void to_public(struct sbx__skill_list *l, const char *shown, struct sbx_skill_list *out)
{
    out->v = sbx_xcalloc(l->n + 1, sizeof(*out->v));
    out->n = l->n;
    for (size_t i = 0; i < l->n; i++) {
        out->v[i].name = l->v[i].name;
        out->v[i].description = l->v[i].description;
        out->v[i].path =
                shown[0] ? sbx_xasprintf("%s/%s", shown, l->v[i].dir) : sbx_xstrdup(l->v[i].dir);
        l->v[i].name = l->v[i].description = NULL;
    }
    sbx__skill_list_release(l);
}

int sbx_skills_list_dir(const char *dir, struct sbx_skill_list *out, struct sbx_error *err)
{
    struct sbx__skill_list l = {0};
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                                               "skills folder '%s' does not exist", dir)
                               : sbx_error_errno(err, errno, "cannot open skills folder '%s'", dir);
    int rc = sbx__skills_scan_host(fd, dir, &l, err);
    close(fd);
    if (rc == 0)
        to_public(&l, strcmp(dir, "/") == 0 ? "" : dir, out);
    return rc;
}

int sbx_skills_list_workspace(struct sbx_session *s, const char *path, struct sbx_skill_list *out,
                              struct sbx_error *err)
{
    struct sbx__skill_list l = {0};
    char *norm = NULL;
    const char *p = path ? path : "";
    int rc = sbx_path_normalize(p, strlen(p), SBX_PATH_ALLOW_ABSOLUTE | SBX_PATH_ALLOW_ROOT,
                                sbx_session_root(s), &norm, err);
    if (rc < 0) {
        sbx_error_prefix(err, "skills folder");
        return rc;
    }
    if ((rc = scan_workspace(s, norm, 0, &l, err)) == 0)
        to_public(&l, norm, out);
    free(norm);
    return rc;
}

void sbx_skill_list_release(struct sbx_skill_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].description);
        free(l->v[i].path);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}
