/* Conversation store: round trip, last N, pop, clear, list, name checks, hostile database
 * files and rows, file modes, and two processes appending to one conversation at once. */
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "sbx/conversation.h"
#include "sbx/json.h"

static char top[64];

static char *dbpath(const char *name)
{
    return sbx_xasprintf("%s/%s", top, name);
}

static json_t *msg(const char *role, const char *text)
{
    return json_pack("{s:s, s:s, s:s}", "type", "message", "role", role, "content", text);
}

static const char *content(const json_t *items, size_t i)
{
    return json_string_value(json_object_get(json_array_get(items, i), "content"));
}

static void test_round_trip(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_conversation_store *s = NULL;
    char *p = dbpath("rt.db");
    CHECK_OK(sbx_conversation_store_open(p, &s, &err), &err);
    json_t *items = json_array(), *got = NULL;
    json_array_append_new(items, msg("user", "one"));
    json_array_append_new(items, msg("assistant", "two"));
    CHECK_OK(sbx_conversation_add(s, "chat-1", items, &err), &err);
    json_array_clear(items);
    json_array_append_new(items, msg("user", "three"));
    CHECK_OK(sbx_conversation_add(s, "chat-1", items, &err), &err);
    CHECK_OK(sbx_conversation_add(s, "other", items, &err), &err);

    CHECK_OK(sbx_conversation_get(s, "chat-1", 0, &got, &err), &err);
    CHECK_EQ_INT(json_array_size(got), 3);
    CHECK_EQ_STR(content(got, 0), "one");
    CHECK_EQ_STR(content(got, 2), "three");
    json_decref(got);
    CHECK_OK(sbx_conversation_get(s, "chat-1", 2, &got, &err), &err);
    CHECK_EQ_INT(json_array_size(got), 2);
    CHECK_EQ_STR(content(got, 0), "two");
    CHECK_EQ_STR(content(got, 1), "three");
    json_decref(got);
    CHECK_OK(sbx_conversation_get(s, "nobody", 0, &got, &err), &err);
    CHECK_EQ_INT(json_array_size(got), 0);
    json_decref(got);

    /* Survives closing and reopening. */
    sbx_conversation_store_free(s);
    CHECK_OK(sbx_conversation_store_open(p, &s, &err), &err);
    json_t *popped = NULL;
    CHECK_OK(sbx_conversation_pop(s, "chat-1", &popped, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(popped, "content")), "three");
    json_decref(popped);
    CHECK_OK(sbx_conversation_get(s, "chat-1", 0, &got, &err), &err);
    CHECK_EQ_INT(json_array_size(got), 2);
    json_decref(got);

    json_t *list = NULL;
    CHECK_OK(sbx_conversation_list(s, &list, &err), &err);
    CHECK_EQ_INT(json_array_size(list), 2);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(list, 0), "name")), "chat-1");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(list, 0), "items")), 2);
    CHECK(json_integer_value(json_object_get(json_array_get(list, 0), "updated_at")) > 0);
    json_decref(list);

    CHECK_OK(sbx_conversation_clear(s, "chat-1", &err), &err);
    CHECK_OK(sbx_conversation_get(s, "chat-1", 0, &got, &err), &err);
    CHECK_EQ_INT(json_array_size(got), 0);
    json_decref(got);
    CHECK_ERR(sbx_conversation_clear(s, "chat-1", &err), SBX_E_NOTFOUND, &err, "no conversation");
    CHECK_OK(sbx_conversation_pop(s, "chat-1", &popped, &err), &err);
    CHECK(popped == NULL);
    /* A pop after a clear does not reuse ids: order stays the order of appends. */
    CHECK_OK(sbx_conversation_list(s, &list, &err), &err);
    CHECK_EQ_INT(json_array_size(list), 1);
    json_decref(list);

    json_array_clear(items);
    json_array_append_new(items, json_integer(1));
    CHECK_ERR(sbx_conversation_add(s, "chat-1", items, &err), SBX_E_INVAL, &err,
              "not a JSON object");
    json_decref(items);
    sbx_conversation_store_free(s);
    free(p);
}

static void test_names(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char longname[SBX_CONVERSATION_NAME_MAX + 2];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    CHECK_OK(sbx_conversation_name_check("Proj_2.notes-x", &err), &err);
    CHECK_ERR(sbx_conversation_name_check("", &err), SBX_E_INVAL, &err, "empty");
    CHECK_ERR(sbx_conversation_name_check(longname, &err), SBX_E_INVAL, &err, "longer than");
    longname[SBX_CONVERSATION_NAME_MAX] = 0;
    CHECK_OK(sbx_conversation_name_check(longname, &err), &err);
    CHECK_ERR(sbx_conversation_name_check("a/b", &err), SBX_E_INVAL, &err, "0x2f");
    CHECK_ERR(sbx_conversation_name_check("a b", &err), SBX_E_INVAL, &err, "not one of");
    CHECK_ERR(sbx_conversation_name_check("x\033[2J", &err), SBX_E_INVAL, &err, "0x1b");
    CHECK_ERR(sbx_conversation_name_check("..", &err), SBX_E_INVAL, &err, "starts with");
    CHECK_ERR(sbx_conversation_name_check("-rf", &err), SBX_E_INVAL, &err, "starts with");

    struct sbx_conversation_store *s = NULL;
    char *p = dbpath("names.db");
    CHECK_OK(sbx_conversation_store_open(p, &s, &err), &err);
    json_t *items = json_array(), *got = NULL;
    CHECK_ERR(sbx_conversation_add(s, "a'b", items, &err), SBX_E_INVAL, &err, "0x27");
    CHECK_ERR(sbx_conversation_get(s, "a;b", 0, &got, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_conversation_clear(s, "", &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_conversation_pop(s, "\xff", &got, &err), SBX_E_INVAL, &err, NULL);
    json_decref(items);
    sbx_conversation_store_free(s);
    free(p);
}

static void test_hostile(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_conversation_store *s = NULL;
    char *p = dbpath("garbage.db");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 512; i++)
        fputs("this is not an sqlite database at all\n", f);
    fclose(f);
    CHECK_ERR(sbx_conversation_store_open(p, &s, &err), SBX_E_PARSE, &err,
              "is corrupt or not a database");
    CHECK_CONTAINS(err.msg, p);
    free(p);

    /* A real database whose first page was overwritten. */
    p = dbpath("trashed.db");
    CHECK_OK(sbx_conversation_store_open(p, &s, &err), &err);
    json_t *items = json_array(), *got = NULL;
    json_array_append_new(items, msg("user", "hello"));
    CHECK_OK(sbx_conversation_add(s, "c", items, &err), &err);
    sbx_conversation_store_free(s);
    char *wal = sbx_xasprintf("%s-wal", p);
    unlink(wal);
    free(wal);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    char junk[200];
    memset(junk, 0x5a, sizeof(junk));
    CHECK_EQ_INT(pwrite(fd, junk, sizeof(junk), 0), sizeof(junk));
    close(fd);
    CHECK_ERR(sbx_conversation_store_open(p, &s, &err), SBX_E_PARSE, &err, "corrupt");
    free(p);

    /* Rows someone else wrote: not JSON, and JSON that is not an object. */
    p = dbpath("rows.db");
    CHECK_OK(sbx_conversation_store_open(p, &s, &err), &err);
    CHECK_OK(sbx_conversation_add(s, "bad", items, &err), &err);
    CHECK_OK(sbx_conversation_add(s, "arr", items, &err), &err);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open(p, &db), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(db,
                              "INSERT INTO conversation_items (conversation, item, created_at) "
                              "VALUES ('bad', '{\"type\": \"mess', 1), ('arr', '[1, 2]', 1)",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
    CHECK_ERR(sbx_conversation_get(s, "bad", 0, &got, &err), SBX_E_PARSE, &err,
              "conversation 'bad' item");
    CHECK_ERR(sbx_conversation_get(s, "arr", 0, &got, &err), SBX_E_PARSE, &err,
              "is not a JSON object but array");
    CHECK_ERR(sbx_conversation_pop(s, "arr", &got, &err), SBX_E_PARSE, &err, "not a JSON object");
    /* The last good item is still there: nothing was popped. */
    CHECK_OK(sbx_conversation_get(s, "arr", 0, &got, &err) == -SBX_E_PARSE ? 0 : -1, &err);
    sbx_conversation_store_free(s);
    free(p);

    /* A database from a newer sbx. */
    p = dbpath("newer.db");
    CHECK_EQ_INT(sqlite3_open(p, &db), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(db, "PRAGMA user_version = 7", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    CHECK_ERR(sbx_conversation_store_open(p, &s, &err), SBX_E_UNSUPPORTED, &err,
              "schema version 7");
    free(p);

    /* A directory, and a symlink, where the database should be. */
    p = dbpath("adir");
    mkdir(p, 0700);
    CHECK(sbx_conversation_store_open(p, &s, &err) < 0);
    free(p);
    p = dbpath("link.db");
    char *target = dbpath("rt.db");
    CHECK_EQ_INT(symlink(target, p), 0);
    CHECK(sbx_conversation_store_open(p, &s, &err) < 0);
    free(target);
    free(p);
    json_decref(items);
}

static void test_default_path_modes(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_conversation_store *s = NULL;
    char *state = dbpath("state");
    setenv("XDG_STATE_HOME", state, 1);
    unsetenv("SBX_CONVERSATIONS");
    mode_t old = umask(0);
    CHECK_OK(sbx_conversation_store_open(NULL, &s, &err), &err);
    umask(old);
    sbx_conversation_store_free(s);
    char *dir = sbx_xasprintf("%s/sbx", state);
    char *file = sbx_xasprintf("%s/sbx/conversations.db", state);
    struct stat sb;
    CHECK_EQ_INT(stat(dir, &sb), 0);
    CHECK_EQ_INT(sb.st_mode & 07777, 0700);
    CHECK_EQ_INT(stat(file, &sb), 0);
    CHECK_EQ_INT(sb.st_mode & 07777, 0600);
    /* $SBX_CONVERSATIONS wins. */
    char *over = dbpath("override.db");
    setenv("SBX_CONVERSATIONS", over, 1);
    CHECK_OK(sbx_conversation_store_open(NULL, &s, &err), &err);
    sbx_conversation_store_free(s);
    CHECK_EQ_INT(stat(over, &sb), 0);
    unsetenv("SBX_CONVERSATIONS");
    unsetenv("XDG_STATE_HOME");
    free(over);
    free(dir);
    free(file);
    free(state);
}

#define WRITERS   2
#define BATCHES   150
#define PER_BATCH 3

/* Each batch opens and closes the store, as separate runs do: a close in one process while the
 * other writes is where a lost WAL would drop items. */
static int writer(const char *p, int w)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (int b = 0; b < BATCHES; b++) {
        struct sbx_conversation_store *s = NULL;
        if (sbx_conversation_store_open(p, &s, &err) < 0) {
            fprintf(stderr, "writer %d: %s\n", w, err.msg);
            return 1;
        }
        json_t *items = json_array();
        for (int k = 0; k < PER_BATCH; k++)
            json_array_append_new(items, json_pack("{s:i, s:i, s:i}", "w", w, "b", b, "k", k));
        int rc = sbx_conversation_add(s, "shared", items, &err);
        json_decref(items);
        sbx_conversation_store_free(s);
        if (rc < 0) {
            fprintf(stderr, "writer %d: %s\n", w, err.msg);
            return 1;
        }
    }
    return 0;
}

static void test_concurrent(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *p = dbpath("shared.db");
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        if (pids[w] == 0)
            _exit(writer(p, w));
    }
    for (int w = 0; w < WRITERS; w++) {
        int st = 0;
        CHECK_EQ_INT(waitpid(pids[w], &st, 0), pids[w]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    struct sbx_conversation_store *s = NULL;
    json_t *got = NULL;
    CHECK_OK(sbx_conversation_store_open(p, &s, &err), &err);
    CHECK_OK(sbx_conversation_get(s, "shared", 0, &got, &err), &err);
    CHECK_EQ_INT(json_array_size(got), WRITERS * BATCHES * PER_BATCH);
    /* Every batch is contiguous, and each writer's batches are in its own order. */
    int next[WRITERS] = {0}, ok = 1;
    for (size_t i = 0; got && i + PER_BATCH <= json_array_size(got); i += PER_BATCH) {
        int w = (int)json_integer_value(json_object_get(json_array_get(got, i), "w"));
        if (w < 0 || w >= WRITERS) {
            ok = 0;
            break;
        }
        for (int k = 0; k < PER_BATCH; k++) {
            const json_t *it = json_array_get(got, i + (size_t)k);
            ok &= json_integer_value(json_object_get(it, "w")) == w &&
                  json_integer_value(json_object_get(it, "b")) == next[w] &&
                  json_integer_value(json_object_get(it, "k")) == k;
        }
        next[w]++;
    }
    CHECK(ok);
    for (int w = 0; w < WRITERS; w++)
        CHECK_EQ_INT(next[w], BATCHES);
    json_decref(got);
    sbx_conversation_store_free(s);
    free(p);
}

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *f)
{
    return remove(p);
}

int main(void)
{
    TAP_START();
    snprintf(top, sizeof(top), "/tmp/sbx-conv-XXXXXX");
    if (!mkdtemp(top))
        return 1;
    TAP_RUN(test_round_trip);
    TAP_RUN(test_names);
    TAP_RUN(test_hostile);
    TAP_RUN(test_default_path_modes);
    TAP_RUN(test_concurrent);
    nftw(top, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return TAP_DONE();
}
