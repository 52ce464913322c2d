/* Conversation rows as the store's SQLite file holds them: another program (or a damaged file)
 * may have written anything there. The input is cut into up to 8 rows at 0xff bytes, each
 * stored as TEXT or BLOB (its first byte picks), straight into a scratch database; then
 * sbx_conversation_get (all, and the last 2), _pop and _list read them back. What they accept
 * is JSON objects in order; what they refuse is an error with a message. */
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "sbx/conversation.h"
#include "sbx/json.h"

static char top[64];
static struct sbx_conversation_store *store;
static sqlite3 *db;
static sqlite3_stmt *ins;

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *f)
{
    return remove(p);
}

/* The scratch database goes when libFuzzer exits. */
static void cleanup(void)
{
    sqlite3_finalize(ins);
    sqlite3_close(db);
    sbx_conversation_store_free(store);
    nftw(top, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void init(void)
{
    snprintf(top, sizeof(top), "/tmp/sbx-fuzz-conversation-XXXXXX");
    FUZZ_ASSERT(mkdtemp(top) != NULL);
    char path[128];
    snprintf(path, sizeof(path), "%s/conversations.db", top);
    struct sbx_error err = SBX_ERROR_INIT;
    FUZZ_ASSERT(sbx_conversation_store_open(path, &store, &err) == 0);
    json_t *items = json_pack("[{s:s}]", "type", "message");
    FUZZ_ASSERT(sbx_conversation_add(store, "c", items, &err) == 0);
    json_decref(items);
    FUZZ_ASSERT(sqlite3_open(path, &db) == SQLITE_OK);
    FUZZ_ASSERT(sqlite3_exec(db, "PRAGMA synchronous = OFF", NULL, NULL, NULL) == SQLITE_OK);
    FUZZ_ASSERT(sqlite3_prepare_v2(db,
                                   "INSERT INTO conversation_items (conversation, item, "
                                   "created_at) VALUES ('c', ?1, 1)",
                                   -1, &ins, NULL) == SQLITE_OK);
    atexit(cleanup);
}

static void check_items(int rc, json_t *got, const struct sbx_error *err)
{
    if (rc < 0) {
        FUZZ_ASSERT(err->msg[0] != '\0');
        return;
    }
    FUZZ_ASSERT(json_is_array(got));
    size_t i;
    json_t *v;
    json_array_foreach(got, i, v) FUZZ_ASSERT(json_is_object(v));
    json_decref(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!store)
        init();
    FUZZ_ASSERT(sqlite3_exec(db, "DELETE FROM conversation_items", NULL, NULL, NULL) == SQLITE_OK);
    const uint8_t *p = data, *end = data + size;
    for (int row = 0; row < 8 && p < end; row++) {
        int blob = *p++ & 1;
        const uint8_t *s = p;
        while (p < end && *p != 0xff)
            p++;
        int n = (int)(p - s);
        if (p < end)
            p++;
        FUZZ_ASSERT((blob ? sqlite3_bind_blob(ins, 1, s, n, SQLITE_TRANSIENT)
                          : sqlite3_bind_text(ins, 1, (const char *)s, n, SQLITE_TRANSIENT)) ==
                    SQLITE_OK);
        FUZZ_ASSERT(sqlite3_step(ins) == SQLITE_DONE);
        sqlite3_reset(ins);
    }
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *got = NULL;
    int rc = sbx_conversation_get(store, "c", 0, &got, &err);
    check_items(rc, got, &err);
    got = NULL;
    rc = sbx_conversation_get(store, "c", 2, &got, &err);
    check_items(rc, got, &err);
    got = NULL;
    if (sbx_conversation_pop(store, "c", &got, &err) == 0)
        json_decref(got);
    else
        FUZZ_ASSERT(err.msg[0] != '\0' || got == NULL);
    got = NULL;
    FUZZ_ASSERT(sbx_conversation_list(store, &got, &err) == 0);
    FUZZ_ASSERT(json_is_array(got));
    json_decref(got);
    return 0;
}
