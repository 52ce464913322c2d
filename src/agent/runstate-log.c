/* Checkpoints that append: a run state kept as a small head document plus a log of its items,
 * each record hashed into a chain the head names (docs/internals/runstate.md, "Checkpoints
 * that append"). Writing: sbx_run_state_log_*; reading the log back: sbx__run_state_load_log,
 * called by the run state reader (runstate.c). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "agent/runstate-log.h"
#include "core/json-canon.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/runstate.h"
#include "sbx/scrub.h"

#define DIGEST_PREFIX "sha256:"
#define HEX           SBX_SHA256_HEX_LEN

struct sbx_run_state_log {
    char *path; /* the head */
    char *base; /* its file name */
    /* The log's two file names beside it, "<name>.0.log" and "<name>.1.log": a new log is
     * written under the name the head on disk does not use, so a crash before the new head is
     * in place leaves the old head with its own log. */
    char *names[2];
    int cur;        /* the log fd appends to */
    int ondisk;     /* the log the head on disk names (-1: none of the two) */
    int dfd;        /* their directory */
    int fd;         /* the log, open for appending; -1: the next write starts a new log */
    json_t *held;   /* the items written to the log (the runner's own objects, held) */
    json_t *fields; /* the logged fields as last written, {field: value} */
    size_t nrec;    /* records in the log */
    size_t nsecrets;
    struct sbx_sha256 *sha; /* the digest every hash of the log is taken with, started over */
    struct sbx_buf head;    /* the head's text, kept for the next checkpoint's */
    uint8_t chain[SBX_SHA256_LEN]; /* the hash of the last record (zeros before the first) */
};

/* h' = SHA-256(h || text): the chain hash of the record after h, with the digest s (started
 * over here; one per log, so that each record does not make its own). */
static int chain_next(struct sbx_sha256 *s, const uint8_t h[SBX_SHA256_LEN], const char *text,
                      size_t n, uint8_t out[SBX_SHA256_LEN], struct sbx_error *err)
{
    int rc = sbx_sha256_reset(s, err);
    if (rc == 0 && (rc = sbx_sha256_update(s, h, SBX_SHA256_LEN, err)) == 0 &&
        (rc = sbx_sha256_update(s, text, n, err)) == 0)
        rc = sbx_sha256_final(s, out, err);
    return rc;
}

int sbx__run_state_log_name_ok(const char *name)
{
    return name && name[0] && name[0] != '.' && !strchr(name, '/') && strlen(name) < 256;
}

/* The fields a head keeps: what changes from one checkpoint to the next, and what a reader
 * needs first. Every other field (the agents, the sandboxes, the approvals, meta, ...) is left
 * to the log, as a record each time it changes. */
static const char *const in_head[] = {
        /* In canonical order (byte-wise): the head is written in this order (head_text). */
        "current_agent", "error",      "final_output",
        "format",        "open_calls", "previous_response_id",
        "sent_upto",     "status",     "turn",
        "updated_at",    "usage",      "version"};

static int in_head_field(const char *key)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(in_head); i++)
        if (key[0] == in_head[i][0] && strcmp(key, in_head[i]) == 0)
            return 1;
    return 0;
}

/* Whether key is a field the log may set: not one the head keeps, not "items", "log" or
 * "digest", and a plain word (the record's syntax). */
static int logged(const char *key)
{
    static const char *const never[] = {"items", "log", "digest"};
    if (!key[0] || strpbrk(key, " \n") || in_head_field(key))
        return 0;
    for (size_t i = 0; i < SBX_ARRAY_LEN(never); i++)
        if (key[0] == never[i][0] && strcmp(key, never[i]) == 0)
            return 0;
    return 1;
}

/* One record per line: the chain hash in hex, a space and the body: "i <item>" (an item
 * appended), "s <field> <value>" (a field set) or "d <field>" (a field removed), each value
 * as its canonical text, written straight after the hash's place in b. */
static int add_record(struct sbx_sha256 *sha, const char *key, const json_t *v,
                      const struct sbx_strv *secrets, uint8_t chain[SBX_SHA256_LEN],
                      struct sbx_buf *b, struct sbx_error *err)
{
    size_t at = b->len, body = at + HEX + 1;
    int rc = sbx_buf_reserve(b, HEX + 1, err);
    if (rc < 0)
        return rc;
    sbx_buf_setlen(b, body);
    rc = sbx_buf_add(b, key ? (v ? "s " : "d ") : "i ", 2, err);
    if (rc == 0 && key && (rc = sbx_buf_adds(b, key, err)) == 0 && v)
        rc = sbx_buf_addch(b, ' ', err);
    if (rc == 0 && v) {
        json_t *clean = sbx_scrub_json(secrets, v, NULL);
        rc = sbx__json_canon(clean, b, err);
        json_decref(clean);
    }
    if (rc == 0)
        rc = chain_next(sha, chain, b->data + body, b->len - body, chain, err);
    if (rc == 0) {
        /* The hash goes into the place kept for it before the body. */
        char hex[HEX + 1];
        sbx_hex(chain, SBX_SHA256_LEN, hex);
        memcpy(b->data + at, hex, HEX);
        b->data[at + HEX] = ' ';
        rc = sbx_buf_addch(b, '\n', err);
    }
    if (rc < 0)
        sbx_buf_setlen(b, at);
    return rc;
}

/* Which of the two logs the head now at the path names, if any. */
static int on_disk(const struct sbx_run_state_log *l)
{
    struct sbx_buf b;
    json_t *doc = NULL;
    int which = -1;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    struct sbx_json_limits lim = {.max_bytes = SBX_RUN_STATE_MAX, .max_depth = 128};
    if (sbx_fs_read(l->dfd, l->base, SBX_RUN_STATE_MAX, &b, NULL) == 0 &&
        sbx_json_parse(b.data, b.len, &lim, &doc, NULL) == 0) {
        const char *name = json_string_value(json_object_get(json_object_get(doc, "log"), "file"));
        for (int i = 0; i < 2 && name; i++)
            if (strcmp(name, l->names[i]) == 0)
                which = i;
    }
    json_decref(doc);
    sbx_buf_release(&b);
    return which;
}

int sbx_run_state_log_open(const char *path, struct sbx_run_state_log **out, struct sbx_error *err)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!sbx__run_state_log_name_ok(base))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state '%s': the file name must not be empty or start with '.'",
                             path);
    char *dir = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup(".");
    int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (dfd < 0)
        return sbx_error_errno(err, errno, "cannot open the directory of '%s'", path);
    struct sbx_run_state_log *l = sbx_xcalloc(1, sizeof(*l));
    l->path = sbx_xstrdup(path);
    l->base = sbx_xstrdup(base);
    for (int i = 0; i < 2; i++)
        l->names[i] = sbx_xasprintf("%s.%d.log", base, i);
    l->dfd = dfd;
    l->fd = -1;
    sbx_buf_init(&l->head, SBX_RUN_STATE_MAX);
    l->ondisk = on_disk(l);
    l->cur = l->ondisk;
    int rc = sbx_sha256_new(&l->sha, err);
    if (rc < 0) {
        sbx_run_state_log_close(l);
        return rc;
    }
    *out = l;
    return 0;
}

void sbx_run_state_log_close(struct sbx_run_state_log *l)
{
    if (!l)
        return;
    sbx_fd_close(&l->fd);
    sbx_fd_close(&l->dfd);
    json_decref(l->held);
    json_decref(l->fields);
    sbx_sha256_free(l->sha);
    sbx_buf_release(&l->head);
    free(l->path);
    free(l->base);
    free(l->names[0]);
    free(l->names[1]);
    free(l);
}

/* Whether items extends what the log holds: the same objects first, none taken away. */
static int extends(const struct sbx_run_state_log *l, const json_t *items,
                   const struct sbx_strv *secrets)
{
    size_t n = json_array_size(l->held);
    if (l->fd < 0 || json_array_size(items) < n || (secrets ? secrets->n : 0) != l->nsecrets)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (json_array_get(items, i) != json_array_get(l->held, i))
            return 0;
    return 1;
}

/* Records for the logged fields of state that differ from what the log holds (all of them
 * in a new log), and for those gone from state; fields gets their new values. */
static int add_fields(struct sbx_sha256 *sha, const json_t *state, json_t *fields,
                      const struct sbx_strv *secrets, uint8_t chain[SBX_SHA256_LEN],
                      struct sbx_buf *b, size_t *nrec, struct sbx_error *err)
{
    const char *k;
    json_t *v;
    void *tmp;
    int rc = 0;
    json_object_foreach((json_t *)state, k, v)
    {
        json_t *old = json_object_get(fields, k);
        if (rc < 0 || v == old || !logged(k) || (old && json_equal(v, old)))
            continue;
        rc = add_record(sha, k, v, secrets, chain, b, err);
        (*nrec)++;
        sbx_json_set(fields, k, json_incref(v));
    }
    json_object_foreach_safe(fields, tmp, k, v)
    {
        if (rc < 0 || json_object_get(state, k))
            continue;
        rc = add_record(sha, k, NULL, secrets, chain, b, err);
        (*nrec)++;
        json_object_del(fields, k);
    }
    return rc;
}

/* Bring the log up to state: append records of the new items and the changed fields (write,
 * fdatasync), or, when its items do not extend what the log holds, write a whole new log
 * beside the head and rename it into place. */
static int write_log(struct sbx_run_state_log *l, const json_t *state,
                     const struct sbx_strv *secrets, struct sbx_error *err)
{
    const json_t *items = json_object_get(state, "items");
    int fresh = !extends(l, items, secrets);
    uint8_t chain[SBX_SHA256_LEN];
    size_t from = fresh ? 0 : json_array_size(l->held), nrec = fresh ? 0 : l->nrec;
    /* The log's fields are brought up to date in place: a failure below starts a new log. */
    json_t *fields = fresh || !l->fields ? json_object() : json_incref(l->fields);
    struct sbx_buf b;
    int rc = 0;
    memcpy(chain, l->chain, sizeof(chain));
    if (fresh)
        memset(chain, 0, sizeof(chain));
    sbx_buf_init(&b, SBX_RUN_STATE_MAX);
    for (size_t i = from; i < json_array_size(items) && rc == 0; i++, nrec++)
        rc = add_record(l->sha, NULL, json_array_get(items, i), secrets, chain, &b, err);
    if (rc == 0)
        rc = add_fields(l->sha, state, fields, secrets, chain, &b, &nrec, err);
    if (rc == 0 && fresh) {
        sbx_fd_close(&l->fd);
        l->cur = l->ondisk == 0 ? 1 : 0;
        const char *name = l->names[l->cur];
        rc = sbx_fs_write(l->dfd, name, b.data, b.len, 0600, SBX_FS_ATOMIC, err);
        if (rc == 0) {
            l->fd = openat(l->dfd, name, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
            if (l->fd < 0)
                rc = sbx_error_errno(err, errno, "cannot open '%s'", name);
        }
    } else if (rc == 0 && b.len) {
        rc = sbx_fd_write_all(l->fd, b.data, b.len, err);
        if (rc == 0 && fdatasync(l->fd) < 0)
            rc = sbx_error_errno(err, errno, "cannot sync '%s'", l->names[l->cur]);
    }
    sbx_buf_release(&b);
    if (rc < 0) {
        /* What the log ends with is unknown: the next checkpoint starts a new one. */
        sbx_fd_close(&l->fd);
        json_decref(fields);
        sbx_error_prefix(err, "run state log");
        return rc;
    }
    if (fresh) {
        json_decref(l->held);
        l->held = json_array();
    }
    for (size_t i = from; i < json_array_size(items); i++)
        sbx_json_append(l->held, json_incref(json_array_get(items, i)));
    json_decref(l->fields);
    l->fields = fields;
    l->nrec = nrec;
    l->nsecrets = secrets ? secrets->n : 0;
    memcpy(l->chain, chain, sizeof(chain));
    return 0;
}

#define HEAD_PREFIX "{\"digest\":\"" DIGEST_PREFIX
/* Where the head's own digest goes in its file, and where its canonical text starts: the file
 * is that text with HEAD_PREFIX, the hex and "\"," in place of its opening brace. */
#define HEAD_HEX  (sizeof(HEAD_PREFIX) - 1)
#define HEAD_TEXT (HEAD_HEX + HEX + 2)

/* Whether the head can be written from state's fields in in_head's order: no field of state
 * is one only a head may hold (then it goes into the head too, written by head_tree), and no
 * secret shows in a key of the head, in the log's name or in its digest (a scrubbed key may
 * sort elsewhere). */
static int head_plain(const struct sbx_run_state_log *l, const json_t *state, const char *chain,
                      const struct sbx_strv *secrets)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)state, k, v)
    {
        if (!logged(k) && strcmp(k, "items") != 0 && strcmp(k, "digest") != 0 && !in_head_field(k))
            return 0;
    }
    if (!secrets || !secrets->n)
        return 1;
    /* The words of the head, its log's name and its digest. */
    static const char *const log_words[] = {"log", "count", "digest", "file"};
    const char *texts[SBX_ARRAY_LEN(in_head) + SBX_ARRAY_LEN(log_words) + 2];
    size_t n = 0;
    for (size_t i = 0; i < SBX_ARRAY_LEN(in_head); i++)
        texts[n++] = in_head[i];
    for (size_t i = 0; i < SBX_ARRAY_LEN(log_words); i++)
        texts[n++] = log_words[i];
    texts[n++] = l->names[l->cur];
    texts[n++] = chain;
    for (size_t i = 0; i < n; i++) {
        char *hit = sbx_scrub_text(secrets, texts[i], strlen(texts[i]), NULL, NULL);
        int found = hit != NULL;
        free(hit);
        if (found)
            return 0;
    }
    return 1;
}

/* {"count":N,"digest":"sha256:<hex>","file":"<name>"}: the log the head stands for. */
static int head_log(const struct sbx_run_state_log *l, const char *chain, struct sbx_buf *b,
                    struct sbx_error *err)
{
    int rc = sbx_buf_adds(b, "\"log\":{\"count\":", err);
    if (rc == 0 && (rc = sbx__json_canon_int((long long)l->nrec, b, err)) == 0 &&
        (rc = sbx_buf_adds(b, ",\"digest\":", err)) == 0 &&
        (rc = sbx__json_canon_string(chain, strlen(chain), b, err)) == 0 &&
        (rc = sbx_buf_adds(b, ",\"file\":", err)) == 0 &&
        (rc = sbx__json_canon_string(l->names[l->cur], strlen(l->names[l->cur]), b, err)) == 0)
        rc = sbx_buf_addch(b, '}', err);
    return rc;
}

/* The head's canonical text appended to b, written field by field: in_head is in canonical
 * order, and "log" goes in its place among them. */
static int head_text(const struct sbx_run_state_log *l, const json_t *state, const char *chain,
                     const struct sbx_strv *secrets, struct sbx_buf *b, struct sbx_error *err)
{
    int rc = sbx_buf_addch(b, '{', err), first = 1, log_done = 0;
    for (size_t i = 0; i <= SBX_ARRAY_LEN(in_head) && rc == 0; i++) {
        const char *k = i < SBX_ARRAY_LEN(in_head) ? in_head[i] : NULL;
        if (!log_done && (!k || strcmp(k, "log") > 0)) {
            if ((first || (rc = sbx_buf_addch(b, ',', err)) == 0) &&
                (rc = head_log(l, chain, b, err)) < 0)
                break;
            log_done = 1;
            first = 0;
        }
        const json_t *v = k ? json_object_get(state, k) : NULL;
        if (!v)
            continue;
        json_t *clean = sbx_scrub_json(secrets, v, NULL);
        if ((first || (rc = sbx_buf_addch(b, ',', err)) == 0) &&
            (rc = sbx__json_canon_string(k, strlen(k), b, err)) == 0 &&
            (rc = sbx_buf_addch(b, ':', err)) == 0)
            rc = sbx__json_canon(clean, b, err);
        json_decref(clean);
        first = 0;
    }
    return rc == 0 ? sbx_buf_addch(b, '}', err) : rc;
}

/* The head's canonical text appended to b, from a tree of its fields scrubbed as a whole: for
 * the heads head_plain does not take. */
static int head_tree(const struct sbx_run_state_log *l, const json_t *state, const char *chain,
                     const struct sbx_strv *secrets, struct sbx_buf *b, struct sbx_error *err)
{
    json_t *head = json_object();
    for (size_t i = 0; i < SBX_ARRAY_LEN(in_head); i++) {
        json_t *v = json_object_get(state, in_head[i]);
        if (v)
            sbx_json_set(head, in_head[i], json_incref(v));
    }
    /* A field no record may set (a name with a space) stays in the head. */
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)state, k, v)
    {
        if (!logged(k) && strcmp(k, "items") != 0 && strcmp(k, "digest") != 0 &&
            !json_object_get(head, k))
            sbx_json_set(head, k, json_incref(v));
    }
    sbx_json_set(head, "log",
                 json_pack("{s:s, s:I, s:s}", "file", l->names[l->cur], "count",
                           (json_int_t)l->nrec, "digest", chain));
    json_t *clean = sbx_scrub_json(secrets, head, NULL);
    json_decref(head);
    int rc = sbx__json_canon(clean, b, err);
    json_decref(clean);
    return rc;
}

/* The head: the fields of state the log does not hold, naming the log, written atomically as
 * its canonical text with the digest first. */
static int write_head(struct sbx_run_state_log *l, const json_t *state,
                      const struct sbx_strv *secrets, struct sbx_error *err)
{
    char chain[sizeof(DIGEST_PREFIX) + HEX];
    memcpy(chain, DIGEST_PREFIX, sizeof(DIGEST_PREFIX) - 1);
    sbx_hex(l->chain, SBX_SHA256_LEN, chain + sizeof(DIGEST_PREFIX) - 1);
    /* The text is written where the file has it: its brace is then replaced by the prefix. */
    struct sbx_buf *b = &l->head;
    sbx_buf_reset(b);
    int rc = sbx_buf_reserve(b, HEAD_TEXT, err);
    if (rc == 0) {
        sbx_buf_setlen(b, HEAD_TEXT - 1);
        rc = head_plain(l, state, chain, secrets) ? head_text(l, state, chain, secrets, b, err)
                                                  : head_tree(l, state, chain, secrets, b, err);
    }
    uint8_t d[SBX_SHA256_LEN];
    if (rc == 0 && (rc = sbx_sha256_reset(l->sha, err)) == 0 &&
        (rc = sbx_sha256_update(l->sha, b->data + HEAD_TEXT - 1, b->len - (HEAD_TEXT - 1), err)) ==
                0)
        rc = sbx_sha256_final(l->sha, d, err);
    if (rc == 0)
        rc = sbx_buf_addch(b, '\n', err);
    if (rc == 0) {
        char hex[HEX + 1];
        sbx_hex(d, sizeof(d), hex);
        memcpy(b->data, HEAD_PREFIX, HEAD_HEX);
        memcpy(b->data + HEAD_HEX, hex, HEX);
        memcpy(b->data + HEAD_HEX + HEX, "\",", 2);
        rc = sbx_fs_write(l->dfd, l->base, b->data, b->len, 0600, SBX_FS_ATOMIC, err);
    }
    if (rc < 0) {
        sbx_error_prefix(err, "run state");
        return rc;
    }
    if (l->ondisk != l->cur) {
        /* The head names the new log: the old one is no one's. */
        if (l->ondisk >= 0)
            (void)unlinkat(l->dfd, l->names[l->ondisk], 0);
        l->ondisk = l->cur;
    }
    return 0;
}

int sbx_run_state_log_write(struct sbx_run_state_log *l, const json_t *state,
                            const struct sbx_strv *secrets, struct sbx_error *err)
{
    const json_t *items = json_object_get(state, "items");
    const char *status = json_string_value(json_object_get(state, "status"));
    if (!json_is_object(state) || !json_is_array(items) || !status)
        return sbx_error_set(err, SBX_E_INVAL, 0, "run state: not a run state with items");
    if (strcmp(status, "running") != 0) {
        /* A run that stopped gets one whole document, and the log goes. */
        int rc = sbx_run_state_write_file(l->path, state, secrets, err);
        if (rc < 0)
            return rc;
        sbx_fd_close(&l->fd);
        json_decref(l->held);
        l->held = NULL;
        json_decref(l->fields);
        l->fields = NULL;
        l->ondisk = l->cur = -1;
        for (int i = 0; i < 2; i++)
            if (unlinkat(l->dfd, l->names[i], 0) < 0 && errno != ENOENT)
                return sbx_error_errno(err, errno, "cannot remove '%s'", l->names[i]);
        return 0;
    }
    int rc = write_log(l, state, secrets, err);
    if (rc == 0)
        rc = write_head(l, state, secrets, err);
    return rc;
}

/* Check one record (line [p, e)) against the chain and append its item to items. */
/* What a record's body [p, e) does to items and fields, once its hash is checked. */
static int apply_record(const char *name, size_t i, const char *p, const char *e, json_t *items,
                        json_t *fields, struct sbx_error *err)
{
    struct sbx_json_limits lim = {.max_bytes = SBX_RUN_STATE_MAX, .max_depth = 128};
    const char *at = p + 2, *kend = at;
    char *key = NULL;
    json_t *v = NULL;
    if (e - p < 3 || p[1] != ' ' || (p[0] != 'i' && p[0] != 's' && p[0] != 'd'))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state: record %zu of its log '%s' is not an item or a field",
                             i + 1, name);
    if (p[0] != 'i') {
        while (kend < e && *kend != ' ')
            kend++;
        key = sbx_xstrndup(at, (size_t)(kend - at));
        if (!logged(key) || (p[0] == 'd') != (kend == e)) {
            free(key);
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "run state: record %zu of its log '%s' names no field a log "
                                 "holds",
                                 i + 1, name);
        }
        at = kend + 1;
    }
    int rc = 0;
    if (p[0] == 'd')
        json_object_del(fields, key);
    else if ((rc = sbx_json_parse(at, (size_t)(e - at), &lim, &v, err)) < 0)
        sbx_error_prefix(err, "run state: record %zu of its log '%s'", i + 1, name);
    else if (key)
        json_object_set_new(fields, key, v);
    else
        sbx_json_append(items, v);
    free(key);
    return rc;
}

static int read_record(struct sbx_sha256 *sha, const char *name, size_t i, const char *p,
                       const char *e, uint8_t chain[SBX_SHA256_LEN], json_t *items, json_t *fields,
                       struct sbx_error *err)
{
    char hex[HEX + 1];
    if (e - p < HEX + 2 || p[HEX] != ' ')
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state: record %zu of its log '%s' is not a hash and a body",
                             i + 1, name);
    int rc = chain_next(sha, chain, p + HEX + 1, (size_t)(e - p - HEX - 1), chain, err);
    if (rc < 0)
        return rc;
    sbx_hex(chain, SBX_SHA256_LEN, hex);
    if (memcmp(hex, p, HEX) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state: record %zu of its log '%s' does not match its hash (the "
                             "log was edited, reordered or damaged)",
                             i + 1, name);
    return apply_record(name, i, p + HEX + 1, e, items, fields, err);
}

static int bad_log(struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "run state: field 'log' must be {file, count, digest}");
}

int sbx__run_state_load_log(json_t *doc, int dfd, struct sbx_error *err)
{
    const json_t *log = json_object_get(doc, "log");
    const char *name = json_string_value(json_object_get(log, "file"));
    const char *want = json_string_value(json_object_get(log, "digest"));
    const json_t *count = json_object_get(log, "count");
    if (!name || !want || !json_is_integer(count) || json_integer_value(count) < 0)
        return bad_log(err);
    if (!sbx__run_state_log_name_ok(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state: field 'log.file' must be a file name beside the "
                             "state, not '%s'",
                             name);
    if (json_object_get(doc, "items"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "run state: it has both 'items' and 'log'");
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    struct sbx_sha256 *sha = NULL;
    int rc = sbx_fs_read(dfd, name, SBX_RUN_STATE_MAX, &b, err);
    if (rc < 0) {
        sbx_buf_release(&b);
        sbx_error_prefix(err, "run state: its log");
        return rc;
    }
    if ((rc = sbx_sha256_new(&sha, err)) < 0) {
        sbx_buf_release(&b);
        return rc;
    }
    size_t n = (size_t)json_integer_value(count), i = 0;
    uint8_t chain[SBX_SHA256_LEN] = {0};
    json_t *items = json_array(), *fields = json_object();
    const char *p = b.data, *end = b.data + b.len;
    for (; i < n && rc == 0; i++) {
        const char *e = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
        if (!e)
            break;
        rc = read_record(sha, name, i, p, e, chain, items, fields, err);
        p = e + 1;
    }
    sbx_sha256_free(sha);
    /* Records past count are a checkpoint that did not complete: dropped. */
    char hex[sizeof(DIGEST_PREFIX) + HEX];
    memcpy(hex, DIGEST_PREFIX, sizeof(DIGEST_PREFIX) - 1);
    sbx_hex(chain, SBX_SHA256_LEN, hex + sizeof(DIGEST_PREFIX) - 1);
    if (rc == 0 && i < n)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "run state: its log '%s' ends after %zu of its %zu records (it was "
                           "truncated or damaged)",
                           name, i, n);
    else if (rc == 0 && strcmp(hex, want) != 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "run state: its log '%s' does not match the digest the state names "
                           "(the log was replaced or edited)",
                           name);
    sbx_buf_release(&b);
    const char *k;
    json_t *v;
    json_object_foreach(fields, k, v)
    {
        if (rc == 0 && json_object_get(doc, k))
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "run state: field '%s' is both in the state and in its log", k);
    }
    if (rc < 0) {
        json_decref(items);
        json_decref(fields);
        return rc;
    }
    json_object_del(doc, "log");
    sbx_json_set(doc, "items", items);
    json_object_update(doc, fields);
    json_decref(fields);
    return 0;
}

int sbx_run_state_remove_file(const char *path, struct sbx_error *err)
{
    struct sbx_buf b;
    json_t *doc = NULL;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    /* The log it names, when it is one: read without checking, since a damaged state is
     * removed too (the caller decided). */
    if (sbx_fs_read_path(path, SBX_RUN_STATE_MAX, &b, NULL) == 0) {
        struct sbx_json_limits lim = {.max_bytes = SBX_RUN_STATE_MAX, .max_depth = 128};
        if (sbx_json_parse(b.data, b.len, &lim, &doc, NULL) < 0)
            doc = NULL;
    }
    sbx_buf_release(&b);
    const char *name = json_string_value(json_object_get(json_object_get(doc, "log"), "file"));
    if (sbx__run_state_log_name_ok(name)) {
        const char *slash = strrchr(path, '/');
        char *log = slash ? sbx_xasprintf("%.*s/%s", (int)(slash - path), path, name)
                          : sbx_xstrdup(name);
        if (unlink(log) < 0 && errno != ENOENT) {
            int rc = sbx_error_errno(err, errno, "cannot remove '%s'", log);
            free(log);
            json_decref(doc);
            return rc;
        }
        free(log);
    }
    json_decref(doc);
    if (unlink(path) < 0)
        return sbx_error_errno(err, errno, "cannot remove '%s'", path);
    return 0;
}
