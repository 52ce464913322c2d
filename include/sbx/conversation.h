/* sbx: conversations that continue across runs (session memory).
 *
 * A conversation store keeps named conversations, each an ordered list of Responses API items
 * (JSON objects). A run given a conversation reads its history before the first turn and
 * appends the run's new items after every completed turn (include/sbx/runner.h), so a later run
 * continues where the last one stopped. This is the harness's message history only: sandbox
 * files and session state are kept apart (include/sbx/session.h, include/sbx/snapshot.h).
 *
 * The store is a small vtable so other backends can be added; SQLite is the embedded default.
 * Every call blocks. A store may be used by one thread at a time; several processes may use the
 * same SQLite database at once (each add is one transaction, so the items of one call stay
 * together and in order). */
#ifndef SBX_CONVERSATION_H
#define SBX_CONVERSATION_H

#include <stddef.h>
#include <jansson.h>

#include "common.h"
#include "error.h"

/* Names: 1..SBX_CONVERSATION_NAME_MAX bytes of [A-Za-z0-9._-], not starting with '.' or '-'. */
#define SBX_CONVERSATION_NAME_MAX 128
/* Bounds on what a store returns or takes (SBX_E_TOOBIG beyond). */
#define SBX_CONVERSATION_ITEM_MAX  ((size_t)16 << 20)
#define SBX_CONVERSATION_ITEMS_MAX 100000

struct sbx_conversation_store;

/* A backend. Names reach it already validated; items arrays hold only objects. */
struct sbx_conversation_ops {
    /* The last `last` items (0: all) in order, as a new array; an unknown name is empty. */
    int (*get_items)(struct sbx_conversation_store *s, const char *name, size_t last, json_t **out,
                     struct sbx_error *err);
    /* Append items (borrowed array) in order, creating the conversation if needed. */
    int (*add_items)(struct sbx_conversation_store *s, const char *name, const json_t *items,
                     struct sbx_error *err);
    /* Remove and return the last item; *out NULL when the conversation is empty. */
    int (*pop_item)(struct sbx_conversation_store *s, const char *name, json_t **out,
                    struct sbx_error *err);
    /* Delete the conversation and its items; SBX_E_NOTFOUND when there is none. */
    int (*clear)(struct sbx_conversation_store *s, const char *name, struct sbx_error *err);
    /* Every conversation by name: [{"name", "items": count, "created_at", "updated_at"}] with
     * times in seconds since the epoch. */
    int (*list)(struct sbx_conversation_store *s, json_t **out, struct sbx_error *err);
    void (*free)(struct sbx_conversation_store *s);
};

/* Backends embed this as their first member. */
struct sbx_conversation_store {
    const struct sbx_conversation_ops *ops;
};

/* 0, or SBX_E_INVAL "bad conversation name '...': why". */
SBX_API int sbx_conversation_name_check(const char *name, struct sbx_error *err);

/* The SQLite store at path, or NULL for the default: $SBX_CONVERSATIONS, else
 * ${XDG_STATE_HOME:-$HOME/.local/state}/sbx/conversations.db. The database's directory is
 * created with mode 0700 when missing and the file with 0600; WAL journal, a busy timeout so
 * concurrent runs wait for each other. A file that is not a database, or a database whose
 * tables are not ours, is SBX_E_PARSE naming the file. *out: caller owns
 * (sbx_conversation_store_free). */
SBX_API int sbx_conversation_store_open(const char *path, struct sbx_conversation_store **out,
                                        struct sbx_error *err);
SBX_API void sbx_conversation_store_free(struct sbx_conversation_store *s);

/* These check the name, then call the backend. A stored item that is not a JSON object is
 * SBX_E_PARSE naming the conversation and the item. *out: caller owns (json_decref). */
SBX_API int sbx_conversation_get(struct sbx_conversation_store *s, const char *name, size_t last,
                                 json_t **out, struct sbx_error *err);
SBX_API int sbx_conversation_add(struct sbx_conversation_store *s, const char *name,
                                 const json_t *items, struct sbx_error *err);
SBX_API int sbx_conversation_pop(struct sbx_conversation_store *s, const char *name, json_t **out,
                                 struct sbx_error *err);
SBX_API int sbx_conversation_clear(struct sbx_conversation_store *s, const char *name,
                                   struct sbx_error *err);
SBX_API int sbx_conversation_list(struct sbx_conversation_store *s, json_t **out,
                                  struct sbx_error *err);

#endif
