/* Checkpoints that append: the head and its log of items (append only, hash chained), a torn
 * tail dropped, tampered, reordered and truncated logs refused, a new log when the items are
 * not an extension, the whole document when a run stops, and states of the older form. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/runstate.h"
#include "sbx/scrub.h"
#include "sbx/strv.h"

static char dir[] = "/tmp/sbx-test-runstate-log.XXXXXX";

static json_t *item(const char *role, const char *text)
{
    return json_pack("{s:s, s:s, s:s}", "type", "message", "role", role, "content", text);
}

/* A running state of version 2 with n items. */
static json_t *state_with(size_t n)
{
    const char *text =
            "{\"format\":\"sbx-run-state\",\"version\":2,\"status\":\"running\",\"error\":null,"
            "\"updated_at\":\"2026-01-01T00:00:00Z\",\"start_agent\":\"a\",\"current_agent\":"
            "\"a\",\"agents\":[{\"name\":\"a\",\"file\":null,\"digest\":null}],\"agent_files\":"
            "null,\"turn\":1,\"max_turns\":10,\"items\":[],\"input_items\":1,\"usage\":"
            "{\"requests\":1},\"model\":null,\"model_settings\":null,\"previous_response_id\":"
            "null,\"sent_upto\":0,\"tools_used\":[],\"conversation\":null,\"open_calls\":[],"
            "\"pending\":[],\"decisions\":[],\"always\":[],\"run_id\":\"ab12\",\"final_output\":"
            "null,\"sandbox\":null,\"meta\":null}";
    json_t *v = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_json_parse(text, strlen(text), NULL, &v, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    json_t *items = json_object_get(v, "items");
    for (size_t i = 0; i < n; i++) {
        char t[32];
        snprintf(t, sizeof(t), "turn %zu h\xc3\xa9", i);
        sbx_json_append(items, item(i ? "assistant" : "user", t));
    }
    return v;
}

static char *path_of(const char *name)
{
    return sbx_xasprintf("%s/%s", dir, name);
}

static char *slurp(const char *path, size_t *n)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_fs_read_path(path, 1 << 24, &b, NULL) < 0) {
        sbx_buf_release(&b);
        return NULL;
    }
    return sbx_buf_detach(&b, n);
}

static void put(const char *path, const char *text, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write(fd, text, n) == (ssize_t)n);
    if (fd >= 0)
        close(fd);
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Read path back and compare its items with want's. */
static void check_reads_as(const char *path, const json_t *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *got = NULL;
    CHECK_OK(sbx_run_state_read_file(path, &got, &err), &err);
    CHECK(json_equal(json_object_get(got, "items"), json_object_get(want, "items")));
    CHECK_EQ_STR(json_string_value(json_object_get(got, "status")),
                 json_string_value(json_object_get(want, "status")));
    CHECK(json_object_get(got, "log") == NULL);
    json_decref(got);
}

static void test_append(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_run_state_log *l = NULL;
    char *path = path_of("a.json"), *log0 = path_of("a.json.0.log"),
         *log1 = path_of("a.json.1.log");
    json_t *st = state_with(2);
    CHECK_OK(sbx_run_state_log_open(path, &l, &err), &err);
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    CHECK(exists(log0));
    CHECK(!exists(log1));
    check_reads_as(path, st);
    /* The head is the state without its items: what any JSON reader sees of a running run. */
    size_t n0 = 0, hn = 0;
    char *head = slurp(path, &hn);
    json_t *h = json_loads(head, 0, NULL);
    CHECK(h && !json_object_get(h, "items"));
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(h, "log"), "file")),
                 "a.json.0.log");
    /* Two items, then the fifteen fields the head leaves to the log. */
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(h, "log"), "count")), 17);
    CHECK(!json_object_get(h, "agents") && !json_object_get(h, "meta"));
    CHECK(json_object_get(h, "status") && json_object_get(h, "turn"));
    json_decref(h);
    free(head);
    char *before = slurp(log0, &n0);

    /* Three more items: appended, what was there untouched. */
    for (int i = 0; i < 3; i++)
        sbx_json_append(json_object_get(st, "items"), item("assistant", "more"));
    sbx_json_set(st, "turn", json_integer(2));
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    size_t n1 = 0;
    char *after = slurp(log0, &n1);
    CHECK(n1 > n0 && memcmp(before, after, n0) == 0);
    size_t lines = 0;
    for (size_t i = 0; i < n1; i++)
        lines += after[i] == '\n';
    CHECK_EQ_INT(lines, 20);
    check_reads_as(path, st);
    /* A checkpoint with nothing new writes no record. */
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    size_t n2 = 0;
    free(slurp(log0, &n2));
    CHECK_EQ_INT(n2, n1);

    /* The run stops: one whole document, as before, and no log. */
    sbx_json_set(st, "status", sbx_json_str("interrupted"));
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    CHECK(!exists(log0) && !exists(log1));
    size_t dn = 0;
    char *doc = slurp(path, &dn);
    json_t *parsed = NULL;
    CHECK_OK(sbx_run_state_parse(doc, dn, &parsed, &err), &err);
    CHECK(json_equal(json_object_get(parsed, "items"), json_object_get(st, "items")));
    json_decref(parsed);
    free(doc);
    sbx_run_state_log_close(l);
    free(before);
    free(after);
    json_decref(st);
    unlink(path);
    free(path);
    free(log0);
    free(log1);
}

/* A head and its log of 4 items at b.json, the writer closed. */
static json_t *four(const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_run_state_log *l = NULL;
    json_t *st = state_with(2);
    CHECK_OK(sbx_run_state_log_open(path, &l, &err), &err);
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    sbx_json_append(json_object_get(st, "items"), item("assistant", "three"));
    sbx_json_append(json_object_get(st, "items"), item("assistant", "four"));
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    sbx_run_state_log_close(l);
    return st;
}

static void refused(const char *path, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *got = NULL;
    CHECK_ERR(sbx_run_state_read_file(path, &got, &err), SBX_E_INVAL, &err, needle);
    CHECK(got == NULL);
}

static void test_torn_and_tampered(void)
{
    char *path = path_of("b.json"), *log = path_of("b.json.0.log");
    json_t *st = four(path);
    size_t n = 0;
    char *good = slurp(log, &n);
    CHECK(good && n > 0);

    /* A torn last record (a checkpoint killed while it appended) is dropped, and so is a
     * whole record the head does not count yet. */
    char *torn = sbx_xasprintf("%s%.*s", good, 40, good);
    put(log, torn, strlen(torn));
    check_reads_as(path, st);
    char *first = sbx_xstrndup(good, (size_t)(strchr(good, '\n') - good + 1));
    char *extra = sbx_xasprintf("%s%s", good, first);
    put(log, extra, strlen(extra));
    check_reads_as(path, st);

    /* One byte of an item changed: its record no longer matches its hash. */
    char *bad = sbx_xstrdup(good);
    char *t = strstr(bad, "three");
    t[0] = 'T';
    put(log, bad, n);
    refused(path, "record 18 of its log 'b.json.0.log' does not match its hash (the log was "
                  "edited, reordered or damaged)");

    /* Two records swapped. */
    char *l1 = strchr(good, '\n') + 1, *l2 = strchr(l1, '\n') + 1;
    char *swapped = sbx_xasprintf("%.*s%.*s%s", (int)(l2 - l1), l1, (int)(l1 - good), good, l2);
    put(log, swapped, n);
    refused(path, "record 1 of its log 'b.json.0.log' does not match its hash");

    /* Cut short of what the head counts. */
    put(log, good, (size_t)(l2 - good));
    refused(path, "its log 'b.json.0.log' ends after 2 of its 19 records (it was truncated or "
                  "damaged)");

    /* A whole valid log of other items in its place: the head's digest of the chain differs. */
    char *other = path_of("o.json");
    json_t *ost = state_with(5);
    struct sbx_run_state_log *l = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_run_state_log_open(other, &l, &err), &err);
    CHECK_OK(sbx_run_state_log_write(l, ost, NULL, &err), &err);
    sbx_run_state_log_close(l);
    char *olog = path_of("o.json.0.log");
    size_t on = 0;
    char *otext = slurp(olog, &on);
    put(log, otext, on);
    refused(path, "its log 'b.json.0.log' does not match the digest the state names");

    /* The head edited: its own digest, as for a whole document. */
    put(log, good, n);
    check_reads_as(path, st);
    size_t hn = 0;
    char *head = slurp(path, &hn);
    char *r = strstr(head, "\"running\"");
    memcpy(r, "\"failed\" ", 9);
    put(path, head, hn);
    refused(path, "its digest does not match its content (the file was edited or damaged)");

    /* sbx_run_state_remove_file takes the head and its log. */
    CHECK_OK(sbx_run_state_remove_file(path, &err), &err);
    CHECK(!exists(path) && !exists(log));
    CHECK_OK(sbx_run_state_remove_file(other, &err), &err);
    CHECK(!exists(other) && !exists(olog));
    free(head);
    free(otext);
    free(olog);
    json_decref(ost);
    free(other);
    free(swapped);
    free(bad);
    free(extra);
    free(first);
    free(torn);
    free(good);
    json_decref(st);
    free(path);
    free(log);
}

/* Edit the head at path as anyone who can write it could: h is changed by the caller, its
 * digest recomputed. */
static void reseal_head(const char *path, json_t *h)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_object_del(h, "digest");
    char *canon = json_dumps(h, JSON_SORT_KEYS | JSON_COMPACT);
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    CHECK_OK(sbx_sha256(canon, strlen(canon), d, &err), &err);
    sbx_hex(d, sizeof(d), hex);
    char *text = sbx_xasprintf("{\"digest\":\"sha256:%s\",%s", hex, canon + 1);
    put(path, text, strlen(text));
    free(text);
    free(canon);
}

/* Append a record with body to the log of the head at path, chained as the writer does, and
 * count it in the head (resealed). */
static void append_record(const char *path, const char *log, const char *body)
{
    struct sbx_error err = SBX_ERROR_INIT;
    size_t n = 0, hn = 0;
    char *text = slurp(log, &n), *head = slurp(path, &hn);
    const char *last = text;
    for (const char *q = text; q + 1 < text + n; q++)
        if (*q == '\n')
            last = q + 1;
    uint8_t buf[SBX_SHA256_LEN + 256], d[SBX_SHA256_LEN];
    for (size_t i = 0; i < SBX_SHA256_LEN; i++)
        sscanf(last + 2 * i, "%2hhx", &buf[i]);
    size_t bn = strlen(body);
    memcpy(buf + SBX_SHA256_LEN, body, bn);
    CHECK_OK(sbx_sha256(buf, SBX_SHA256_LEN + bn, d, &err), &err);
    char hex[SBX_SHA256_HEX_LEN + 1];
    sbx_hex(d, sizeof(d), hex);
    char *more = sbx_xasprintf("%s%s %s\n", text, hex, body);
    put(log, more, strlen(more));
    json_t *h = json_loads(head, 0, NULL);
    json_t *lg = json_object_get(h, "log");
    json_object_set_new(lg, "count",
                        json_integer(json_integer_value(json_object_get(lg, "count")) + 1));
    char *dg = sbx_xasprintf("sha256:%s", hex);
    json_object_set_new(lg, "digest", json_string(dg));
    free(dg);
    reseal_head(path, h);
    json_decref(h);
    free(more);
    free(head);
    free(text);
}

static void test_fields(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_run_state_log *l = NULL;
    char *path = path_of("f.json"), *log0 = path_of("f.json.0.log");
    json_t *st = state_with(1), *got = NULL;
    CHECK_OK(sbx_run_state_log_open(path, &l, &err), &err);
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    size_t n0 = 0, n1 = 0, n2 = 0;
    free(slurp(log0, &n0));
    /* An equal value (a new object) writes nothing; a changed one writes one record. */
    sbx_json_set(st, "agents", json_deep_copy(json_object_get(st, "agents")));
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    free(slurp(log0, &n1));
    CHECK_EQ_INT(n1, n0);
    sbx_json_set(st, "sandbox", json_pack("{s:s}", "run_id", "ab12"));
    json_object_del(st, "meta");
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    char *text = slurp(log0, &n2);
    CHECK(strstr(text + n1, " s sandbox {\"run_id\":\"ab12\"}\n") != NULL);
    CHECK(strstr(text + n1, " d meta\n") != NULL);
    free(text);
    sbx_run_state_log_close(l);
    CHECK_OK(sbx_run_state_read_file(path, &got, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(got, "sandbox"), "run_id")),
                 "ab12");
    CHECK(json_object_get(got, "meta") == NULL);
    CHECK(json_equal(json_object_get(got, "agents"), json_object_get(st, "agents")));
    json_decref(got);

    /* A log sets only the fields a head leaves to it: never status, turn or the like. */
    append_record(path, log0, "s status \"completed\"");
    refused(path, "record 19 of its log 'f.json.0.log' names no field a log holds");
    CHECK_OK(sbx_run_state_remove_file(path, &err), &err);
    unlink(log0);
    json_decref(st);
    free(path);
    free(log0);
}

static void test_parse_needs_file(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *path = path_of("p.json"), *log0 = path_of("p.json.0.log");
    json_t *st = four(path), *got = NULL;
    size_t hn = 0;
    char *head = slurp(path, &hn);
    CHECK_ERR(sbx_run_state_parse(head, hn, &got, &err), SBX_E_INVAL, &err,
              "its items are in a log beside its file: read it as a file");
    /* A log name that leaves the state's directory is refused. */
    json_t *h = json_loads(head, 0, NULL);
    CHECK(h != NULL);
    json_object_set_new(json_object_get(h, "log"), "file", json_string("../x.log"));
    json_object_del(h, "digest");
    char *canon = json_dumps(h, JSON_SORT_KEYS | JSON_COMPACT);
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    CHECK_OK(sbx_sha256(canon, strlen(canon), d, &err), &err);
    sbx_hex(d, sizeof(d), hex);
    char *text = sbx_xasprintf("{\"digest\":\"sha256:%s\",%s", hex, canon + 1);
    put(path, text, strlen(text));
    refused(path, "field 'log.file' must be a file name beside the state, not '../x.log'");
    free(text);
    free(canon);
    json_decref(h);
    free(head);
    json_decref(st);
    unlink(path);
    unlink(log0);
    free(path);
    free(log0);
}

static void test_new_log(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_run_state_log *l = NULL;
    char *path = path_of("c.json"), *log0 = path_of("c.json.0.log"),
         *log1 = path_of("c.json.1.log");
    json_t *st = state_with(3);
    CHECK_OK(sbx_run_state_log_open(path, &l, &err), &err);
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    CHECK(exists(log0) && !exists(log1));

    /* Items that are not the ones written plus new ones (one replaced): a whole new log under
     * the other name, the old one removed once the head names the new. */
    json_array_set_new(json_object_get(st, "items"), 1, item("assistant", "changed"));
    CHECK_OK(sbx_run_state_log_write(l, st, NULL, &err), &err);
    CHECK(!exists(log0) && exists(log1));
    check_reads_as(path, st);

    /* New secrets: a new log again, with the secret scrubbed from every record. */
    json_array_set_new(json_object_get(st, "items"), 0, item("user", "key=s3cr3t-value"));
    struct sbx_strv secrets;
    sbx_strv_init(&secrets);
    sbx_strv_push(&secrets, "s3cr3t-value");
    CHECK_OK(sbx_run_state_log_write(l, st, &secrets, &err), &err);
    CHECK(exists(log0) && !exists(log1));
    size_t n = 0;
    char *text = slurp(log0, &n);
    CHECK(text && !strstr(text, "s3cr3t") && strstr(text, "key=[redacted]"));
    free(text);
    sbx_run_state_log_close(l);

    /* A new writer over that head (a resumed run) starts a new log under the other name; the
     * head on disk keeps its own until then. */
    json_t *got = NULL;
    CHECK_OK(sbx_run_state_read_file(path, &got, &err), &err);
    sbx_json_append(json_object_get(got, "items"), item("assistant", "after resume"));
    CHECK_OK(sbx_run_state_log_open(path, &l, &err), &err);
    CHECK_OK(sbx_run_state_log_write(l, got, &secrets, &err), &err);
    CHECK(!exists(log0) && exists(log1));
    check_reads_as(path, got);
    sbx_run_state_log_close(l);
    json_decref(got);
    sbx_strv_release(&secrets);
    CHECK_OK(sbx_run_state_remove_file(path, &err), &err);
    CHECK(!exists(path) && !exists(log0) && !exists(log1));
    json_decref(st);
    free(path);
    free(log0);
    free(log1);
}

static void test_old_form(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *path = path_of("d.json"), *log0 = path_of("d.json.0.log");
    json_t *st = state_with(3), *got = NULL;
    /* A state as every checkpoint wrote it before: one whole document. */
    CHECK_OK(sbx_run_state_write_file(path, st, NULL, &err), &err);
    check_reads_as(path, st);
    /* Resumed: the writer takes it over and the next checkpoint is a head and a log. */
    CHECK_OK(sbx_run_state_read_file(path, &got, &err), &err);
    sbx_json_append(json_object_get(got, "items"), item("assistant", "next"));
    struct sbx_run_state_log *l = NULL;
    CHECK_OK(sbx_run_state_log_open(path, &l, &err), &err);
    CHECK_OK(sbx_run_state_log_write(l, got, NULL, &err), &err);
    CHECK(exists(log0));
    check_reads_as(path, got);
    sbx_run_state_log_close(l);
    /* A whole document has no log to remove. */
    CHECK_OK(sbx_run_state_write_file(path, st, NULL, &err), &err);
    unlink(log0);
    CHECK_OK(sbx_run_state_remove_file(path, &err), &err);
    CHECK(!exists(path));
    json_decref(got);
    json_decref(st);
    free(path);
    free(log0);
}

/* The bytes a checkpoint wrote before the head and the records were written straight to text
 * (the head a tree of its fields scrubbed as a whole and dumped by jansson, each record's value
 * dumped by jansson), rebuilt here from the state and the head's log fields. */
static const char *const head_fields[] = {"format",    "version",    "status",
                                          "error",     "updated_at", "current_agent",
                                          "turn",      "usage",      "previous_response_id",
                                          "sent_upto", "open_calls", "final_output"};

static char *old_head(const json_t *st, const json_t *log, const struct sbx_strv *secrets)
{
    json_t *head = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)st, k, v)
    {
        int keep = !k[0] || strpbrk(k, " \n") || strcmp(k, "log") == 0;
        for (size_t i = 0; i < SBX_ARRAY_LEN(head_fields); i++)
            keep |= strcmp(k, head_fields[i]) == 0;
        if (keep && strcmp(k, "items") != 0 && strcmp(k, "digest") != 0)
            json_object_set(head, k, v);
    }
    json_object_set(head, "log", (json_t *)log);
    json_t *clean = sbx_scrub_json(secrets, head, NULL);
    char *text = json_dumps(clean, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(clean);
    json_decref(head);
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_sha256(text, strlen(text), d, &err), &err);
    sbx_hex(d, sizeof(d), hex);
    char *file = sbx_xasprintf("{\"digest\":\"sha256:%s\",%s\n", hex, text + 1);
    free(text);
    return file;
}

/* Whether every record's body is "i " or "s <field> " and the canonical text of its value as
 * jansson dumps it, or "d <field>". */
static int old_records(const char *log, size_t n)
{
    const char *p = log, *end = log + n;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e || e - p < SBX_SHA256_HEX_LEN + 3)
            return 0;
        const char *body = p + SBX_SHA256_HEX_LEN + 1, *val = body + 2;
        p = e + 1;
        if (body[0] == 'd')
            continue;
        if (body[0] == 's')
            val = (const char *)memchr(val, ' ', (size_t)(e - val)) + 1;
        json_error_t je;
        json_t *v = json_loadb(val, (size_t)(e - val), JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        char *t = v ? json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(v);
        int ok = t && strlen(t) == (size_t)(e - val) && memcmp(t, val, (size_t)(e - val)) == 0;
        if (!ok)
            printf("# record %.*s\n# jansson %s\n", (int)(e - body), body, t ? t : "(fails)");
        free(t);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Checkpoints of a run whose fields hold odd text, big and negative numbers, reals, a field
 * only a head may hold and secrets (one of them a word of the head) write exactly the bytes
 * they wrote before. */
static void test_bytes_as_before(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *path = path_of("bytes.json");
    struct sbx_strv secrets;
    sbx_strv_init(&secrets);
    struct sbx_run_state_log *l = NULL;
    CHECK_OK(sbx_run_state_log_open(path, &l, &err), &err);
    json_t *st = state_with(2);
    for (int round = 0; round < 8 && l; round++) {
        char t[64];
        snprintf(t, sizeof(t), "2026-12-03T17:%02d:00Z", round);
        sbx_json_set(st, "updated_at", sbx_json_str(t));
        sbx_json_set(st, "turn", json_integer(round * 1000003 - 4));
        sbx_json_set(st, "usage",
                     json_pack("{s:I, s:I, s:f, s:s}", "input_tokens",
                               (json_int_t)INT64_MAX - round, "output_tokens",
                               (json_int_t)INT64_MIN + round, "cost", 1e22 / (round + 3), "note",
                               "tab\there \"q\" \\ / \xe2\x80\xa8 \xf0\x9f\x98\x80"));
        sbx_json_set(st, "error",
                     round % 2 ? sbx_json_str("ctl \x01\x1f\x7f caf\xc3\xa9") : json_null());
        sbx_json_set(st, "open_calls", json_pack("[s, s]", "call_\xc3\xa9", "sk-secret-value-1"));
        sbx_json_set(st, "previous_response_id", sbx_json_str("resp_sk-secret-value-1_x"));
        sbx_json_set(st, "meta",
                     json_pack("{s:f, s:[i, s]}", "r", -0.0, "l", round, "sk-secret-value-1"));
        if (round >= 2)
            sbx_json_set(st, "odd key", sbx_json_str("kept in the head"));
        if (round == 3)
            sbx_strv_push(&secrets, "sk-secret-value-1");
        if (round == 5)
            sbx_strv_push(&secrets, "turn");
        if (round == 6)
            json_object_del(st, "odd key");
        sbx_json_append(json_object_get(st, "items"), item("assistant", "a \xe2\x9c\x93 \x02"));
        CHECK_OK(sbx_run_state_log_write(l, st, &secrets, &err), &err);
        size_t hn = 0;
        char *head = slurp(path, &hn);
        json_t *h = NULL;
        CHECK(head && sbx_json_parse(head, hn, NULL, &h, &err) == 0);
        const json_t *log = json_object_get(h, "log");
        char *want = log ? old_head(st, log, &secrets) : NULL;
        CHECK(want && head && strcmp(want, head) == 0);
        if (want && head && strcmp(want, head) != 0)
            printf("# want %s# got  %s", want, head);
        const char *name = json_string_value(json_object_get(log, "file"));
        char *lp = name ? path_of(name) : NULL;
        size_t ln = 0;
        char *text = lp ? slurp(lp, &ln) : NULL;
        CHECK(text && old_records(text, ln));
        free(text);
        free(lp);
        free(want);
        json_decref(h);
        free(head);
    }
    sbx_run_state_log_close(l);
    CHECK_OK(sbx_run_state_remove_file(path, &err), &err);
    json_decref(st);
    sbx_strv_release(&secrets);
    free(path);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        TAP_SKIP_ALL("cannot make a temporary directory");
    TAP_RUN(test_append);
    TAP_RUN(test_torn_and_tampered);
    TAP_RUN(test_parse_needs_file);
    TAP_RUN(test_fields);
    TAP_RUN(test_new_log);
    TAP_RUN(test_old_form);
    TAP_RUN(test_bytes_as_before);
    rmdir(dir);
    return TAP_DONE();
}
