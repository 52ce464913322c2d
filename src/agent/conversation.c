/* Conversations across runs: the name check, the checked entry points, and the SQLite store.
 *
 * Layout (user_version 1): conversations(name PRIMARY KEY, created_at, updated_at) and
 * conversation_items(id INTEGER PRIMARY KEY AUTOINCREMENT, conversation, item, created_at), one
 * row per item as compact JSON text. AUTOINCREMENT keeps ids growing even after the last row
 * is popped, so the order by id is the order of appends across every process. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/dl-sqlite.h"
#include "sbx/conversation.h"
#include "sbx/json.h"

#define BUSY_TIMEOUT_MS 30000
#define SCHEMA_VERSION  1

struct sqlite_store {
    struct sbx_conversation_store base;
    sqlite3 *db;
    char *path;
    /* Our own descriptor of the database, kept until after sqlite3_close: closing any
     * descriptor of a file drops every fcntl lock this process holds on it, SQLite's too, and
     * a connection that lost its lock lets another believe it is the last one and remove the
     * WAL under it. */
    int fd;
};

int sbx_conversation_name_check(const char *name, struct sbx_error *err)
{
    if (!name || !name[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "bad conversation name '': it is empty");
    size_t n = strnlen(name, SBX_CONVERSATION_NAME_MAX + 1);
    if (n > SBX_CONVERSATION_NAME_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "bad conversation name '%.32s...': longer than %d bytes", name,
                             SBX_CONVERSATION_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "bad conversation name: byte 0x%02x at %zu is not one of "
                                 "[A-Za-z0-9._-]",
                                 c, i);
    }
    if (name[0] == '.' || name[0] == '-')
        return sbx_error_set(err, SBX_E_INVAL, 0, "bad conversation name '%s': it starts with '%c'",
                             name, name[0]);
    return 0;
}

static int sq_fail(struct sqlite_store *s, int rc, const char *what, struct sbx_error *err)
{
    int prim = rc & 0xff;
    if (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "conversation database '%s' is corrupt or not a database (%s)",
                             s->path, what);
    if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED)
        return sbx_error_set(err, SBX_E_TIMEOUT, 0, "conversation database '%s' stayed locked (%s)",
                             s->path, what);
    if (prim == SQLITE_FULL)
        return sbx_error_set(err, SBX_E_IO, ENOSPC, "conversation database '%s': %s: disk full",
                             s->path, what);
    return sbx_error_set(err, SBX_E_IO, 0, "conversation database '%s': %s: %s", s->path, what,
                         s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
}

static int sq_exec(struct sqlite_store *s, const char *sql, struct sbx_error *err)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : sq_fail(s, rc, sql, err);
}

static int sq_prepare(struct sqlite_store *s, const char *sql, sqlite3_stmt **st,
                      struct sbx_error *err)
{
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? 0 : sq_fail(s, rc, "prepare", err);
}

static void sq_rollback(struct sqlite_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Row text to an item: a JSON object within the size limit, else SBX_E_PARSE / SBX_E_TOOBIG. */
static int row_item(sqlite3_stmt *st, int col, const char *name, long long id, json_t **out,
                    struct sbx_error *err)
{
    const char *text = (const char *)sqlite3_column_text(st, col);
    size_t len = (size_t)sqlite3_column_bytes(st, col);
    if (!text)
        return sbx_error_set(err, SBX_E_PARSE, 0, "conversation '%s' item %lld is not text", name,
                             id);
    if (len > SBX_CONVERSATION_ITEM_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "conversation '%s' item %lld is larger than %zu bytes", name, id,
                             SBX_CONVERSATION_ITEM_MAX);
    json_t *v = NULL;
    int rc = sbx_json_parse(text, len, NULL, &v, err);
    if (rc < 0) {
        sbx_error_prefix(err, "conversation '%s' item %lld", name, id);
        return rc;
    }
    if (!json_is_object(v)) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0,
                           "conversation '%s' item %lld is not a JSON object but %s", name, id,
                           sbx_json_typename(v));
        json_decref(v);
        return rc;
    }
    *out = v;
    return 0;
}

static int sq_get(struct sbx_conversation_store *base, const char *name, size_t last, json_t **out,
                  struct sbx_error *err)
{
    struct sqlite_store *s = (struct sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    json_t *items = json_array();
    int rc = sq_prepare(s,
                        "SELECT id, item FROM (SELECT id, item FROM conversation_items WHERE "
                        "conversation = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id ASC",
                        &st, err);
    if (rc < 0)
        goto out;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, last ? (sqlite3_int64)last : -1);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (json_array_size(items) >= SBX_CONVERSATION_ITEMS_MAX) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "conversation '%s' has more than %d items",
                               name, SBX_CONVERSATION_ITEMS_MAX);
            goto out;
        }
        json_t *v = NULL;
        if ((rc = row_item(st, 1, name, sqlite3_column_int64(st, 0), &v, err)) < 0)
            goto out;
        json_array_append_new(items, v);
    }
    if (rc != SQLITE_DONE) {
        rc = sq_fail(s, rc, "read items", err);
        goto out;
    }
    rc = 0;
    *out = items;
    items = NULL;
out:
    sqlite3_finalize(st);
    json_decref(items);
    return rc;
}

static int sq_add(struct sbx_conversation_store *base, const char *name, const json_t *items,
                  struct sbx_error *err)
{
    struct sqlite_store *s = (struct sqlite_store *)base;
    sqlite3_stmt *up = NULL, *ins = NULL;
    char *text = NULL;
    long long now = (long long)time(NULL);
    int rc;
    if ((rc = sq_exec(s, "BEGIN IMMEDIATE", err)) < 0)
        return rc;
    if ((rc = sq_prepare(s,
                         "INSERT INTO conversations (name, created_at, updated_at) VALUES (?1, "
                         "?2, ?2) ON CONFLICT (name) DO UPDATE SET updated_at = ?2",
                         &up, err)) < 0 ||
        (rc = sq_prepare(s,
                         "INSERT INTO conversation_items (conversation, item, created_at) "
                         "VALUES (?1, ?2, ?3)",
                         &ins, err)) < 0)
        goto out;
    sqlite3_bind_text(up, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(up, 2, now);
    if ((rc = sqlite3_step(up)) != SQLITE_DONE) {
        rc = sq_fail(s, rc, "update conversation", err);
        goto out;
    }
    size_t i;
    const json_t *it;
    json_array_foreach(items, i, it)
    {
        text = sbx_json_dumps(it, SBX_JSON_COMPACT);
        size_t len = strlen(text);
        if (len > SBX_CONVERSATION_ITEM_MAX) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "item %zu is larger than %zu bytes", i,
                               SBX_CONVERSATION_ITEM_MAX);
            goto out;
        }
        sqlite3_reset(ins);
        sqlite3_bind_text(ins, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 2, text, (int)len, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 3, now);
        if ((rc = sqlite3_step(ins)) != SQLITE_DONE) {
            rc = sq_fail(s, rc, "insert item", err);
            goto out;
        }
        free(text);
        text = NULL;
    }
    rc = sq_exec(s, "COMMIT", err);
out:
    free(text);
    sqlite3_finalize(up);
    sqlite3_finalize(ins);
    if (rc < 0)
        sq_rollback(s);
    return rc;
}

static int sq_pop(struct sbx_conversation_store *base, const char *name, json_t **out,
                  struct sbx_error *err)
{
    struct sqlite_store *s = (struct sqlite_store *)base;
    sqlite3_stmt *sel = NULL, *del = NULL;
    json_t *v = NULL;
    int rc;
    if ((rc = sq_exec(s, "BEGIN IMMEDIATE", err)) < 0)
        return rc;
    if ((rc = sq_prepare(s,
                         "SELECT id, item FROM conversation_items WHERE conversation = ?1 "
                         "ORDER BY id DESC LIMIT 1",
                         &sel, err)) < 0)
        goto out;
    sqlite3_bind_text(sel, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(sel);
    if (rc == SQLITE_DONE) {
        rc = sq_exec(s, "COMMIT", err);
        if (rc == 0)
            *out = NULL;
        goto out;
    }
    if (rc != SQLITE_ROW) {
        rc = sq_fail(s, rc, "read last item", err);
        goto out;
    }
    long long id = sqlite3_column_int64(sel, 0);
    if ((rc = row_item(sel, 1, name, id, &v, err)) < 0)
        goto out;
    if ((rc = sq_prepare(s, "DELETE FROM conversation_items WHERE id = ?1", &del, err)) < 0)
        goto out;
    sqlite3_bind_int64(del, 1, id);
    if ((rc = sqlite3_step(del)) != SQLITE_DONE) {
        rc = sq_fail(s, rc, "delete item", err);
        goto out;
    }
    sqlite3_finalize(del);
    del = NULL;
    if ((rc = sq_prepare(s, "UPDATE conversations SET updated_at = ?2 WHERE name = ?1", &del,
                         err)) < 0)
        goto out;
    sqlite3_bind_text(del, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(del, 2, (long long)time(NULL));
    if ((rc = sqlite3_step(del)) != SQLITE_DONE) {
        rc = sq_fail(s, rc, "update conversation", err);
        goto out;
    }
    if ((rc = sq_exec(s, "COMMIT", err)) < 0)
        goto out;
    *out = v;
    v = NULL;
out:
    json_decref(v);
    sqlite3_finalize(sel);
    sqlite3_finalize(del);
    if (rc < 0)
        sq_rollback(s);
    return rc;
}

static int sq_clear(struct sbx_conversation_store *base, const char *name, struct sbx_error *err)
{
    struct sqlite_store *s = (struct sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    int rc;
    if ((rc = sq_exec(s, "BEGIN IMMEDIATE", err)) < 0)
        return rc;
    if ((rc = sq_prepare(s, "DELETE FROM conversation_items WHERE conversation = ?1", &st, err)) <
        0)
        goto out;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
        rc = sq_fail(s, rc, "delete items", err);
        goto out;
    }
    sqlite3_finalize(st);
    if ((rc = sq_prepare(s, "DELETE FROM conversations WHERE name = ?1", &st, err)) < 0)
        goto out;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
        rc = sq_fail(s, rc, "delete conversation", err);
        goto out;
    }
    if (sqlite3_changes(s->db) == 0) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no conversation '%s'", name);
        goto out;
    }
    rc = sq_exec(s, "COMMIT", err);
out:
    sqlite3_finalize(st);
    if (rc < 0)
        sq_rollback(s);
    return rc;
}

static int sq_list(struct sbx_conversation_store *base, json_t **out, struct sbx_error *err)
{
    struct sqlite_store *s = (struct sqlite_store *)base;
    sqlite3_stmt *st = NULL;
    json_t *list = json_array();
    int rc = sq_prepare(s,
                        "SELECT c.name, c.created_at, c.updated_at, (SELECT count(*) FROM "
                        "conversation_items i WHERE i.conversation = c.name) FROM "
                        "conversations c ORDER BY c.name",
                        &st, err);
    if (rc < 0)
        goto out;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        struct sbx_error ignored;
        /* A row someone else wrote with a name we would refuse is shown, not trusted. */
        if (!name || sbx_conversation_name_check(name, &ignored) < 0)
            continue;
        if (json_array_size(list) >= SBX_CONVERSATION_ITEMS_MAX) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d conversations",
                               SBX_CONVERSATION_ITEMS_MAX);
            goto out;
        }
        json_array_append_new(list, json_pack("{s:s, s:I, s:I, s:I}", "name", name, "items",
                                              (json_int_t)sqlite3_column_int64(st, 3), "created_at",
                                              (json_int_t)sqlite3_column_int64(st, 1), "updated_at",
                                              (json_int_t)sqlite3_column_int64(st, 2)));
    }
    if (rc != SQLITE_DONE) {
        rc = sq_fail(s, rc, "list conversations", err);
        goto out;
    }
    rc = 0;
    *out = list;
    list = NULL;
out:
    sqlite3_finalize(st);
    json_decref(list);
    return rc;
}

static void sq_free(struct sbx_conversation_store *base)
{
    struct sqlite_store *s = (struct sqlite_store *)base;
    /* NULL when sqlite could not be loaded: the table's pointers are not set then. */
    if (s->db)
        sqlite3_close_v2(s->db);
    if (s->fd >= 0)
        close(s->fd);
    free(s->path);
    free(s);
}

static const struct sbx_conversation_ops sqlite_ops = {
        .get_items = sq_get,
        .add_items = sq_add,
        .pop_item = sq_pop,
        .clear = sq_clear,
        .list = sq_list,
        .free = sq_free,
};

/* mkdir -p with 0700 for every directory created; existing ones are left as they are. */
static int make_dirs(const char *path, struct sbx_error *err)
{
    char *d = sbx_xstrdup(path);
    char *slash = strrchr(d, '/');
    int rc = 0;
    if (!slash || slash == d)
        goto out;
    *slash = 0;
    for (char *p = d + 1;; p++) {
        if (*p != '/' && *p)
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(d, 0700) < 0 && errno != EEXIST) {
            rc = sbx_error_errno(err, errno, "cannot create '%s'", d);
            goto out;
        }
        if (!c)
            break;
        *p = c;
    }
out:
    free(d);
    return rc;
}

static char *default_path(struct sbx_error *err)
{
    const char *e = getenv("SBX_CONVERSATIONS");
    if (e && e[0])
        return sbx_xstrdup(e);
    e = getenv("XDG_STATE_HOME");
    if (e && e[0] == '/')
        return sbx_xasprintf("%s/sbx/conversations.db", e);
    e = getenv("HOME");
    if (e && e[0] == '/')
        return sbx_xasprintf("%s/.local/state/sbx/conversations.db", e);
    sbx_error_set(err, SBX_E_INVAL, 0,
                  "no conversation database: set SBX_CONVERSATIONS, XDG_STATE_HOME or HOME");
    return NULL;
}

static int sq_open(struct sqlite_store *s, struct sbx_error *err)
{
    int rc;
    if ((rc = sbx__sqlite_load(err)) < 0 || (rc = make_dirs(s->path, err)) < 0)
        return rc;
    /* Created here so the mode is 0600 whatever the umask lets SQLite use; never a symlink. */
    s->fd = open(s->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (s->fd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", s->path);
    struct stat sb;
    if (fstat(s->fd, &sb) < 0 || !S_ISREG(sb.st_mode))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", s->path);
    /* Switching to WAL needs the database to itself and does not wait on the busy handler, so
     * two runs opening at once take turns here. flock does not touch SQLite's fcntl locks. */
    while (flock(s->fd, LOCK_EX) < 0)
        if (errno != EINTR)
            return sbx_error_errno(err, errno, "cannot lock '%s'", s->path);
    rc = sqlite3_open_v2(s->path, &s->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_FULLMUTEX,
                         NULL);
    if (rc != SQLITE_OK)
        return sq_fail(s, rc, "open", err);
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    if ((rc = sq_exec(s, "PRAGMA journal_mode = WAL", err)) < 0 ||
        (rc = sq_exec(s, "PRAGMA synchronous = NORMAL", err)) < 0 ||
        (rc = sq_exec(s, "BEGIN IMMEDIATE", err)) < 0)
        goto out;
    sqlite3_stmt *st = NULL;
    if ((rc = sq_prepare(s, "PRAGMA user_version", &st, err)) < 0)
        goto out;
    int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    if (version != 0 && version != SCHEMA_VERSION) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "conversation database '%s' has schema version %d, not %d", s->path,
                           version, SCHEMA_VERSION);
        goto out;
    }
    if (version == 0 &&
        (rc = sq_exec(s,
                      "CREATE TABLE IF NOT EXISTS conversations (name TEXT PRIMARY KEY NOT NULL, "
                      "created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);"
                      "CREATE TABLE IF NOT EXISTS conversation_items (id INTEGER PRIMARY KEY "
                      "AUTOINCREMENT, conversation TEXT NOT NULL, item TEXT NOT NULL, "
                      "created_at INTEGER NOT NULL);"
                      "CREATE INDEX IF NOT EXISTS conversation_items_order ON "
                      "conversation_items (conversation, id);"
                      "PRAGMA user_version = 1",
                      err)) < 0)
        goto out;
    rc = sq_exec(s, "COMMIT", err);
out:
    if (rc < 0)
        sq_rollback(s);
    flock(s->fd, LOCK_UN);
    return rc;
}

int sbx_conversation_store_open(const char *path, struct sbx_conversation_store **out,
                                struct sbx_error *err)
{
    char *p = path ? sbx_xstrdup(path) : default_path(err);
    if (!p)
        return -SBX_E_INVAL;
    if (!p[0]) {
        free(p);
        return sbx_error_set(err, SBX_E_INVAL, 0, "conversation database path is empty");
    }
    struct sqlite_store *s = sbx_xcalloc(1, sizeof(*s));
    s->base.ops = &sqlite_ops;
    s->path = p;
    s->fd = -1;
    int rc = sq_open(s, err);
    if (rc < 0) {
        sq_free(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}

void sbx_conversation_store_free(struct sbx_conversation_store *s)
{
    if (s)
        s->ops->free(s);
}

/* Every item a backend returns is an object, whatever the backend. */
static int check_items(const char *name, const json_t *items, enum sbx_errcode code,
                       struct sbx_error *err)
{
    if (!json_is_array(items))
        return sbx_error_set(err, SBX_E_INVAL, 0, "conversation '%s': items must be an array",
                             name);
    size_t i;
    const json_t *it;
    json_array_foreach(items, i, it)
    {
        if (!json_is_object(it))
            return sbx_error_set(err, code, 0,
                                 "conversation '%s' item %zu is not a JSON object but %s", name, i,
                                 sbx_json_typename(it));
    }
    return 0;
}

int sbx_conversation_get(struct sbx_conversation_store *s, const char *name, size_t last,
                         json_t **out, struct sbx_error *err)
{
    json_t *items = NULL;
    int rc = sbx_conversation_name_check(name, err);
    if (rc < 0 || (rc = s->ops->get_items(s, name, last, &items, err)) < 0)
        return rc;
    if ((rc = check_items(name, items, SBX_E_PARSE, err)) < 0) {
        json_decref(items);
        return rc;
    }
    *out = items;
    return 0;
}

int sbx_conversation_add(struct sbx_conversation_store *s, const char *name, const json_t *items,
                         struct sbx_error *err)
{
    int rc = sbx_conversation_name_check(name, err);
    if (rc < 0)
        return rc;
    if ((rc = check_items(name, items, SBX_E_INVAL, err)) < 0)
        return rc;
    if ((rc = s->ops->add_items(s, name, items, err)) < 0)
        sbx_error_prefix(err, "conversation '%s'", name);
    return rc;
}

int sbx_conversation_pop(struct sbx_conversation_store *s, const char *name, json_t **out,
                         struct sbx_error *err)
{
    int rc = sbx_conversation_name_check(name, err);
    return rc < 0 ? rc : s->ops->pop_item(s, name, out, err);
}

int sbx_conversation_clear(struct sbx_conversation_store *s, const char *name,
                           struct sbx_error *err)
{
    int rc = sbx_conversation_name_check(name, err);
    return rc < 0 ? rc : s->ops->clear(s, name, err);
}

int sbx_conversation_list(struct sbx_conversation_store *s, json_t **out, struct sbx_error *err)
{
    return s->ops->list(s, out, err);
}
