/* Sandbox records (sbx/provider.h): which provider has a sandbox that sbx made, and the options
 * needed to reach it again, so that a command given only an id goes straight to it instead of
 * asking every provider. One small JSON file per sandbox, written atomically, in a directory
 * that only the caller may write (a record says which server to talk to). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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

/* The existing record of id when it is of provider, or NULL. */
static json_t *recorded(int dfd, const char *id, const char *provider)
{
    char name[ID_MAX + 8];
    json_t *old = NULL;
    snprintf(name, sizeof(name), "%s.json", id);
    if (read_record(dfd, name, &old, NULL) < 0)
        return NULL;
    if (strcmp(json_string_value(json_object_get(old, "provider")), provider) != 0) {
        json_decref(old);
        return NULL;
    }
    return old;
}

/* What a record carries besides the provider's options: the run that made the sandbox (NULL:
 * the one an earlier record of the same id and provider names, if any), and its name and
 * labels (named: replace them with name and labels, which may be NULL; else keep the earlier
 * record's). */
struct extras {
    const char *run;
    int named;
    const char *name;
    const json_t *labels;
};

/* Another record than id's with this name: SBX_E_EXISTS naming its sandbox. */
static int name_taken(int dfd, const char *id, const char *name, struct sbx_error *err);

static int write_record(const char *provider, const char *id, const json_t *options,
                        const struct extras *x, struct sbx_error *err)
{
    struct sbx_provider_info p;
    char *path = NULL, name[ID_MAX + 8];
    json_t *old = NULL;
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
    /* One writer at a time: a name is given to one sandbox only. */
    if (rc == 0 && flock(dfd, LOCK_EX) < 0)
        rc = sbx_error_errno(err, errno, "cannot lock '%s'", path);
    if (rc == 0)
        old = recorded(dfd, id, p.name);
    const char *run = x->run ? x->run : json_string_value(json_object_get(old, "run"));
    if (run)
        sbx_json_set(doc, "run", sbx_json_str(run));
    const char *nm = x->named ? x->name : json_string_value(json_object_get(old, "name"));
    const json_t *labels = x->named ? x->labels : json_object_get(old, "labels");
    if (rc == 0 && nm && x->named)
        rc = name_taken(dfd, id, nm, err);
    if (nm)
        sbx_json_set(doc, "name", sbx_json_str(nm));
    if (json_object_size(labels))
        sbx_json_set(doc, "labels", json_deep_copy(labels));
    char *text = sbx_json_dumps(doc, 0);
    if (rc == 0)
        rc = sbx_fs_write_state(dfd, name, text, strlen(text), 0600, err);
    if (rc < 0)
        sbx_error_prefix(err, "record of sandbox '%s'", id);
    if (dfd >= 0)
        close(dfd);
    free(path);
    free(text);
    json_decref(old);
    json_decref(doc);
    return rc;
}

int sbx_sandbox_record_write(const char *provider, const char *id, const json_t *options,
                             struct sbx_error *err)
{
    struct extras x = {0};
    return write_record(provider, id, options, &x, err);
}

int sbx_sandbox_record_claim(const char *provider, const char *id, const json_t *options,
                             const char *run, struct sbx_error *err)
{
    struct extras x = {.run = run};
    if (!run || !run[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "a sandbox record's run must not be empty");
    return write_record(provider, id, options, &x, err);
}

int sbx_sandbox_name_check(const char *name, struct sbx_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SBX_SANDBOX_NAME_MAX ||
        !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z') ||
          (name[0] >= '0' && name[0] <= '9')) ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "bad sandbox name '%s': 1 to %d letters, digits, '.', '_' or '-', "
                             "starting with a letter or digit",
                             name ? name : "", SBX_SANDBOX_NAME_MAX);
    return 0;
}

int sbx_sandbox_labels_check(const json_t *labels, struct sbx_error *err)
{
    const char *k;
    json_t *v;
    if (!labels)
        return 0;
    if (!json_is_object(labels))
        return sbx_error_set(err, SBX_E_INVAL, 0, "sandbox labels must be an object");
    if (json_object_size(labels) > SBX_SANDBOX_LABELS_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d sandbox labels",
                             SBX_SANDBOX_LABELS_MAX);
    json_object_foreach((json_t *)labels, k, v)
    {
        size_t n = strlen(k);
        const char *val = json_string_value(v);
        int bad = n == 0 || n > SBX_SANDBOX_LABEL_KEY_MAX || strchr(k, '=') != NULL;
        for (const char *c = k; !bad && *c; c++)
            bad = (unsigned char)*c <= 0x20 || *c == 0x7f;
        if (bad)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "bad label key '%.64s': 1 to %d printable characters, no "
                                 "space or '='",
                                 k, SBX_SANDBOX_LABEL_KEY_MAX);
        if (!val || strlen(val) > SBX_SANDBOX_LABEL_VALUE_MAX)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "label '%s' wants a string of at most %d bytes", k,
                                 SBX_SANDBOX_LABEL_VALUE_MAX);
        for (const char *c = val; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "label '%s' has a control character in its value", k);
    }
    return 0;
}

int sbx_sandbox_record_name(const char *provider, const char *id, const json_t *options,
                            const char *name, const json_t *labels, struct sbx_error *err)
{
    struct extras x = {.named = 1, .name = name, .labels = labels};
    int rc = 0;
    if (name)
        rc = sbx_sandbox_name_check(name, err);
    if (rc == 0)
        rc = sbx_sandbox_labels_check(labels, err);
    return rc < 0 ? rc : write_record(provider, id, options, &x, err);
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

/* Every record of directory dfd (not closed) whose id starts with prefix (NULL: all), sorted,
 * into *out. */
static int scan_dir(int dfd, const char *path, const char *prefix, json_t **out,
                    struct sbx_error *err)
{
    int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    rewinddir(d);
    json_t *list = json_array();
    struct dirent *e;
    size_t seen = 0;
    while ((e = readdir(d)) && seen++ < RECORDS_MAX) {
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
    closedir(d);
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

/* As scan_dir, of the records directory (none yet: an empty list). */
static int scan(const char *prefix, json_t **out, struct sbx_error *err)
{
    char *path = NULL;
    int dfd = -1, rc = open_dir(0, &path, &dfd, err);
    if (rc == -SBX_E_NOTFOUND) {
        sbx_error_clear(err);
        *out = json_array();
        return 0;
    }
    if (rc == 0)
        rc = scan_dir(dfd, path, prefix, out, err);
    if (dfd >= 0)
        close(dfd);
    free(path);
    return rc;
}

/* The record in list named name, or NULL (borrowed). */
static json_t *with_name(const json_t *list, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *nm = json_string_value(json_object_get(v, "name"));
        if (nm && strcmp(nm, name) == 0)
            return v;
    }
    return NULL;
}

static int name_taken(int dfd, const char *id, const char *name, struct sbx_error *err)
{
    json_t *list = NULL, *hit;
    int rc = scan_dir(dfd, "sandbox records", NULL, &list, err);
    if (rc == 0 && (hit = with_name(list, name)) &&
        strcmp(json_string_value(json_object_get(hit, "id")), id) != 0)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "the name '%s' is in use by sandbox '%s'", name,
                           json_string_value(json_object_get(hit, "id")));
    json_decref(list);
    return rc;
}

int sbx_sandbox_record_named(const char *name, json_t **out, struct sbx_error *err)
{
    json_t *list = NULL, *hit;
    int rc = scan(NULL, &list, err);
    if (rc == 0 && (hit = with_name(list, name ? name : "")))
        *out = json_incref(hit);
    else if (rc == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox named '%s'", name ? name : "");
    json_decref(list);
    return rc;
}

int sbx_sandbox_records(json_t **out, struct sbx_error *err)
{
    return scan(NULL, out, err);
}

/* The record named after id itself, read alone (no listing): 1 with it in *out, 0 when there
 * is none that scan_dir would take (no file, not a record, another id), -1 when there is no
 * records directory (then no name or prefix finds one either). */
static int record_of_id(const char *id, json_t **out)
{
    char *path = NULL, name[ID_MAX + 8];
    int dfd = -1;
    json_t *doc = NULL;
    int rc = open_dir(0, &path, &dfd, NULL);
    if (rc < 0)
        return rc == -SBX_E_NOTFOUND ? -1 : 0;
    snprintf(name, sizeof(name), "%s.json", id);
    int hit = read_record(dfd, name, &doc, NULL) == 0 &&
              strcmp(json_string_value(json_object_get(doc, "id")), id) == 0;
    close(dfd);
    free(path);
    if (hit)
        *out = doc;
    else
        json_decref(doc);
    return hit;
}

int sbx_sandbox_record_read(const char *id, json_t **out, struct sbx_error *err)
{
    json_t *list = NULL, *v, *hit = NULL;
    size_t i;
    if (!id || !valid_id(id))
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no record of sandbox '%s'", id ? id : "");
    /* An exact id wins over names and prefixes: its own file answers without reading every
     * record (what `sbx sandbox exec ID` pays per command). */
    int own = record_of_id(id, out);
    if (own == 1)
        return 0;
    if (own < 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no record of sandbox '%s'", id);
    int rc = scan(NULL, &list, err);
    if (rc < 0)
        return rc;
    /* The exact id, else the sandbox of that name, else the one id the prefix starts. */
    json_array_foreach(list, i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "id")), id) == 0) {
            hit = v;
            break;
        }
    }
    if (!hit)
        hit = with_name(list, id);
    size_t matches = 0;
    json_t *first = NULL;
    json_array_foreach(list, i, v)
    {
        if (!hit && strncmp(json_string_value(json_object_get(v, "id")), id, strlen(id)) == 0 &&
            matches++ == 0)
            first = v;
    }
    if (!hit && matches == 1)
        hit = first;
    if (hit)
        *out = json_incref(hit);
    else if (matches > 1)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id prefix '%s' is ambiguous", id);
    else
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no record of sandbox '%s'", id);
    json_decref(list);
    return rc;
}
