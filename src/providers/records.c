/* Sandbox records (sbx/provider.h): which provider has a sandbox that sbx made, and the options
 * needed to reach it again, so that a command given only an id goes straight to it instead of
 * asking every provider. One small JSON file per sandbox, written atomically, in a directory
 * that only the caller may write (a record says which server to talk to). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/provider.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/provider.h"

#define RECORD_VERSION 1
#define RECORD_MAX     ((size_t)64 << 10)
#define RECORDS_MAX    100000 /* files looked at by one listing */
#define ID_MAX         128

/* Ids become file names: letters, digits, '.', '_' and '-', not starting with '.'. */
static int valid_id(const char *id)
{
    size_t n = strlen(id);
    return n > 0 && n <= ID_MAX && id[0] != '.' &&
           strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* The records directory (caller frees), made 0700 with its parents when make. */
static int records_dir(int make, char **out, struct sbx_error *err)
{
    const char *env = getenv("SBX_RECORDS"), *state = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    char *dir;
    if (env && env[0] == '/')
        dir = sbx_xstrdup(env);
    else if (state && state[0] == '/')
        dir = sbx_xasprintf("%s/sbx/sandboxes", state);
    else if (home && home[0] == '/')
        dir = sbx_xasprintf("%s/.local/state/sbx/sandboxes", home);
    else
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "no place for sandbox records: set SBX_RECORDS, XDG_STATE_HOME or "
                             "HOME");
    for (char *p = dir + 1; make; p++) {
        char c = *p;
        if (c != '/' && c != '\0')
            continue;
        *p = '\0';
        int made = mkdir(dir, 0700);
        *p = c;
        if (made < 0 && errno != EEXIST) {
            int e = errno;
            int rc = sbx_error_errno(err, e, "cannot make '%s'", dir);
            free(dir);
            return rc;
        }
        if (c == '\0')
            break;
    }
    *out = dir;
    return 0;
}

/* Open the directory, refusing one another user could write. -SBX_E_NOTFOUND when missing. */
static int open_dir(int make, char **path, int *out, struct sbx_error *err)
{
    struct stat st;
    int rc = records_dir(make, path, err);
    if (rc < 0)
        return rc;
    int fd = open(*path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox records")
                             : sbx_error_errno(err, errno, "cannot open '%s'", *path);
    } else if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
        rc = sbx_error_set(err, SBX_E_PERM, 0,
                           "sandbox records '%s' must be a directory only you may write", *path);
        close(fd);
    } else {
        *out = fd;
    }
    if (rc < 0) {
        free(*path);
        *path = NULL;
    }
    return rc;
}

/* The record in file name of dir (parsed, version checked). */
static int read_record(int dfd, const char *name, json_t **out, struct sbx_error *err)
{
    struct sbx_buf b;
    struct stat st;
    sbx_buf_init(&b, RECORD_MAX);
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 ? sbx_error_errno(err, errno, "cannot open record '%s'", name) : 0;
    if (rc == 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()))
        rc = sbx_error_set(err, SBX_E_PERM, 0, "record '%s' is not a file of yours", name);
    if (rc == 0)
        rc = sbx_fd_read_all(fd, RECORD_MAX, &b, err);
    if (fd >= 0)
        close(fd);
    json_t *doc = rc == 0 ? json_loadb(b.data, b.len, 0, NULL) : NULL;
    if (rc == 0 && (!json_is_object(doc) ||
                    json_integer_value(json_object_get(doc, "version")) != RECORD_VERSION ||
                    !json_is_string(json_object_get(doc, "id")) ||
                    !json_is_string(json_object_get(doc, "provider")) ||
                    !json_is_object(json_object_get(doc, "options"))))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "record '%s' is not a sandbox record", name);
    sbx_buf_release(&b);
    if (rc < 0)
        json_decref(doc);
    else
        *out = doc;
    return rc;
}

/* The "run" of the existing record of id (caller frees), or NULL. */
static char *recorded_run(int dfd, const char *id, const char *provider)
{
    char name[ID_MAX + 8];
    json_t *old = NULL;
    snprintf(name, sizeof(name), "%s.json", id);
    if (read_record(dfd, name, &old, NULL) < 0)
        return NULL;
    const char *run = json_string_value(json_object_get(old, "run"));
    char *out = run && strcmp(json_string_value(json_object_get(old, "provider")), provider) == 0
                        ? sbx_xstrdup(run)
                        : NULL;
    json_decref(old);
    return out;
}

/* Write the record of id; run: the run that made the sandbox (NULL: the one an earlier record
 * of the same id and provider names, if any). */
static int write_record(const char *provider, const char *id, const json_t *options,
                        const char *run, struct sbx_error *err)
{
    struct sbx_provider_info p;
    char *path = NULL, name[ID_MAX + 8], *kept_run = NULL;
    int dfd = -1, rc = sbx_provider_find(provider, &p, err);
    if (rc < 0)
        return rc;
    if (!id || !valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' cannot be a recorded sandbox id",
                             id ? id : "");
    json_t *keep = json_object();
    for (size_t i = 0; i < p.n_options; i++) {
        const struct sbx_provider_option *o = &p.options[i];
        json_t *v = json_object_get(options, o->key);
        /* Never a credential, whatever a provider declares. */
        if (v && (o->flags & SBX_OPTION_LOCATOR) && o->type != SBX_OPTION_SECRET)
            sbx_json_set(keep, o->key, json_incref(v));
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    json_t *doc = json_pack("{s:i, s:s, s:s, s:o, s:I}", "version", RECORD_VERSION, "id", id,
                            "provider", p.name, "options", keep, "created", (json_int_t)now.tv_sec);
    snprintf(name, sizeof(name), "%s.json", id);
    rc = open_dir(1, &path, &dfd, err);
    if (rc == 0 && !run)
        run = kept_run = recorded_run(dfd, id, p.name);
    if (run)
        sbx_json_set(doc, "run", sbx_json_str(run));
    char *text = sbx_json_dumps(doc, 0);
    if (rc == 0)
        rc = sbx_fs_write_state(dfd, name, text, strlen(text), 0600, err);
    if (rc < 0)
        sbx_error_prefix(err, "record of sandbox '%s'", id);
    if (dfd >= 0)
        close(dfd);
    free(kept_run);
    free(path);
    free(text);
    json_decref(doc);
    return rc;
}

int sbx_sandbox_record_write(const char *provider, const char *id, const json_t *options,
                             struct sbx_error *err)
{
    return write_record(provider, id, options, NULL, err);
}

int sbx_sandbox_record_claim(const char *provider, const char *id, const json_t *options,
                             const char *run, struct sbx_error *err)
{
    if (!run || !run[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "a sandbox record's run must not be empty");
    return write_record(provider, id, options, run, err);
}

int sbx_sandbox_record_owned_by(const char *id, const char *run)
{
    char *path = NULL;
    int dfd = -1;
    if (!id || !valid_id(id) || !run || !run[0] || open_dir(0, &path, &dfd, NULL) < 0)
        return 0;
    char name[ID_MAX + 8];
    json_t *doc = NULL;
    snprintf(name, sizeof(name), "%s.json", id);
    int mine = read_record(dfd, name, &doc, NULL) == 0 &&
               strcmp(json_string_value(json_object_get(doc, "id")), id) == 0 &&
               json_is_string(json_object_get(doc, "run")) &&
               strcmp(json_string_value(json_object_get(doc, "run")), run) == 0;
    json_decref(doc);
    close(dfd);
    free(path);
    return mine;
}

int sbx_sandbox_record_remove(const char *id, struct sbx_error *err)
{
    char *path = NULL, name[ID_MAX + 8];
    int dfd = -1;
    if (!id || !valid_id(id))
        return 0;
    int rc = open_dir(0, &path, &dfd, err);
    if (rc == -SBX_E_NOTFOUND) {
        sbx_error_clear(err);
        return 0;
    }
    snprintf(name, sizeof(name), "%s.json", id);
    if (rc == 0 && unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
        rc = sbx_error_errno(err, errno, "cannot remove the record of sandbox '%s'", id);
    if (rc == 0 && fsync(dfd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync '%s'", path);
    if (dfd >= 0)
        close(dfd);
    free(path);
    return rc;
}

static int by_created(const void *a, const void *b)
{
    json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "created"));
    json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "created"));
    if (x != y)
        return x < y ? -1 : 1;
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "id")),
                  json_string_value(json_object_get(*(json_t *const *)b, "id")));
}

/* Every record whose id starts with prefix (NULL: all), sorted, into *out. */
static int scan(const char *prefix, json_t **out, struct sbx_error *err)
{
    char *path = NULL;
    int dfd = -1, rc = open_dir(0, &path, &dfd, err);
    json_t *list = json_array();
    if (rc == -SBX_E_NOTFOUND) {
        sbx_error_clear(err);
        *out = list;
        return 0;
    }
    DIR *d = rc == 0 ? fdopendir(dfd) : NULL;
    if (rc == 0 && !d) {
        rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
        close(dfd);
    }
    struct dirent *e;
    size_t seen = 0;
    while (d && (e = readdir(d)) && seen++ < RECORDS_MAX) {
        size_t n = strlen(e->d_name);
        json_t *doc = NULL;
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0 || e->d_name[0] == '.' ||
            (prefix && strncmp(e->d_name, prefix, strlen(prefix)) != 0))
            continue;
        /* A record is named after its sandbox: any other file is not one. */
        if (read_record(dirfd(d), e->d_name, &doc, NULL) < 0)
            continue;
        const char *rid = json_string_value(json_object_get(doc, "id"));
        if (strlen(rid) == n - 5 && strncmp(rid, e->d_name, n - 5) == 0)
            sbx_json_append(list, doc);
        else
            json_decref(doc);
    }
    if (d)
        closedir(d);
    free(path);
    if (rc < 0) {
        json_decref(list);
        return rc;
    }
    size_t n = json_array_size(list);
    json_t **items = sbx_xcalloc(n ? n : 1, sizeof(*items));
    for (size_t i = 0; i < n; i++)
        items[i] = json_incref(json_array_get(list, i));
    qsort(items, n, sizeof(*items), by_created);
    json_array_clear(list);
    for (size_t i = 0; i < n; i++)
        sbx_json_append(list, items[i]);
    free(items);
    *out = list;
    return 0;
}

int sbx_sandbox_records(json_t **out, struct sbx_error *err)
{
    return scan(NULL, out, err);
}

int sbx_sandbox_record_read(const char *id, json_t **out, struct sbx_error *err)
{
    json_t *list = NULL, *v, *hit = NULL;
    size_t i;
    if (!id || !valid_id(id))
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no record of sandbox '%s'", id ? id : "");
    int rc = scan(id, &list, err);
    if (rc < 0)
        return rc;
    json_array_foreach(list, i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "id")), id) == 0) {
            hit = v;
            break;
        }
    }
    if (!hit && json_array_size(list) == 1)
        hit = json_array_get(list, 0);
    if (hit)
        *out = json_incref(hit);
    else if (json_array_size(list) > 1)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id prefix '%s' is ambiguous", id);
    else
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no record of sandbox '%s'", id);
    json_decref(list);
    return rc;
}
