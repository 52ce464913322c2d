/* Run states: parse and check, serialise with a digest, atomic files, agent-file checks. */
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
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/scrub.h"

#define DIGEST_PREFIX "sha256:"
#define SEAL_PREFIX   "hmac-sha256:"

/* Compare n bytes in time that does not depend on where they differ. */
static int same_time_cmp(const char *a, const char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d;
}

/* The canonical text the digest covers: the document without "digest", keys sorted, compact
 * (no whitespace), non-ASCII characters as UTF-8 (not \u escapes). */
static int digest_of(const json_t *doc, char out[sizeof(DIGEST_PREFIX) + SBX_SHA256_HEX_LEN],
                     struct sbx_error *err)
{
    json_t *copy = json_copy((json_t *)doc);
    if (!copy)
        SBX_BUG("out of memory copying a run state");
    json_object_del(copy, "digest");
    struct sbx_buf text;
    sbx_buf_init(&text, SBX_BUF_NOLIMIT);
    int rc = sbx__json_canon(copy, &text, err);
    json_decref(copy);
    uint8_t d[SBX_SHA256_LEN];
    if (rc == 0)
        rc = sbx_sha256(text.data, text.len, d, err);
    sbx_buf_release(&text);
    if (rc < 0) {
        sbx_error_prefix(err, "run state");
        return rc;
    }
    memcpy(out, DIGEST_PREFIX, sizeof(DIGEST_PREFIX) - 1);
    sbx_hex(d, sizeof(d), out + sizeof(DIGEST_PREFIX) - 1);
    return 0;
}

static int bad(struct sbx_error *err, const char *field, const char *what)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "run state: field '%s' must be %s", field, what);
}

static int is_count(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0;
}

static int str_or_null(const json_t *v)
{
    return !v || json_is_null(v) || json_is_string(v);
}

static int obj_or_null(const json_t *v)
{
    return !v || json_is_null(v) || json_is_object(v);
}

static int check_agents(const json_t *v, struct sbx_error *err)
{
    size_t i;
    json_t *a;
    if (!json_is_array(v))
        return bad(err, "agents", "a list of {name, file, digest}");
    json_array_foreach(v, i, a)
    {
        if (!json_is_object(a) || !json_is_string(json_object_get(a, "name")) ||
            !str_or_null(json_object_get(a, "file")) || !str_or_null(json_object_get(a, "digest")))
            return bad(err, "agents", "a list of {name, file, digest}");
    }
    return 0;
}

static int check_agent_files(const json_t *v, struct sbx_error *err)
{
    size_t i;
    json_t *a;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return bad(err, "agent_files", "null or a list of {path, digest}");
    json_array_foreach(v, i, a)
    {
        if (!json_is_string(json_object_get(a, "path")) ||
            !json_is_string(json_object_get(a, "digest")))
            return bad(err, "agent_files", "null or a list of {path, digest}");
    }
    return 0;
}

static int check_strings(const json_t *v, const char *field, struct sbx_error *err)
{
    size_t i;
    json_t *s;
    if (!json_is_array(v))
        return bad(err, field, "a list of strings");
    json_array_foreach(v, i, s)
    {
        if (!json_is_string(s))
            return bad(err, field, "a list of strings");
    }
    return 0;
}

static int check_pending(const json_t *v, struct sbx_error *err)
{
    static const char *const need[] = {"agent", "tool", "call_id", "type"};
    size_t i;
    json_t *p;
    if (!json_is_array(v))
        return bad(err, "pending", "a list of {agent, tool, call_id, type, arguments}");
    json_array_foreach(v, i, p)
    {
        for (size_t k = 0; k < SBX_ARRAY_LEN(need); k++)
            if (!json_is_string(json_object_get(p, need[k])))
                return bad(err, "pending", "a list of {agent, tool, call_id, type, arguments}");
    }
    return 0;
}

/* Version 1: {call id: {approved, message?}}. Version 2: a log, [{call_id, approved, ...}]. */
static int check_decisions(const json_t *v, json_int_t version, struct sbx_error *err)
{
    const char *k;
    json_t *d;
    size_t i;
    if (version >= 2) {
        if (!json_is_array(v))
            return bad(err, "decisions", "a list of {call_id, approved, ...}");
        json_array_foreach(v, i, d)
        {
            json_t *m = json_object_get(d, "message");
            if (!json_is_string(json_object_get(d, "call_id")) ||
                !json_is_boolean(json_object_get(d, "approved")) || (m && !json_is_string(m)))
                return bad(err, "decisions", "a list of {call_id, approved, ...}");
        }
        return 0;
    }
    if (!json_is_object(v))
        return bad(err, "decisions", "an object of {\"approved\": bool, \"message\"?: text}");
    json_object_foreach((json_t *)v, k, d)
    {
        json_t *m = json_object_get(d, "message");
        if (!json_is_boolean(json_object_get(d, "approved")) || (m && !json_is_string(m)))
            return bad(err, "decisions", "an object of {\"approved\": bool, \"message\"?: text}");
    }
    return 0;
}

static int check_always(const json_t *v, struct sbx_error *err)
{
    size_t i;
    json_t *a;
    if (!v)
        return 0;
    if (!json_is_array(v))
        return bad(err, "always", "a list of {tool, approved, message?, by}");
    json_array_foreach(v, i, a)
    {
        json_t *m = json_object_get(a, "message"), *by = json_object_get(a, "by");
        if (!json_is_string(json_object_get(a, "tool")) ||
            !json_is_boolean(json_object_get(a, "approved")) || (m && !json_is_string(m)) ||
            (by && !json_is_string(by)))
            return bad(err, "always", "a list of {tool, approved, message?, by}");
    }
    return 0;
}

static int check_fields(const json_t *doc, struct sbx_error *err)
{
    static const char *const statuses[] = {"running", "interrupted", "completed", "failed"};
    static const char *const counts[] = {"turn", "input_items", "sent_upto"};
    static const char *const strs[] = {"status", "updated_at", "start_agent", "current_agent"};
    static const char *const opt_strs[] = {"error",        "model",  "previous_response_id",
                                           "final_output", "run_id", "always_seal"};
    static const char *const opt_objs[] = {"model_settings", "sandbox", "meta"};
    json_t *v;
    int rc;
    for (size_t i = 0; i < SBX_ARRAY_LEN(strs); i++)
        if (!json_is_string(json_object_get(doc, strs[i])))
            return bad(err, strs[i], "a string");
    const char *status = json_string_value(json_object_get(doc, "status"));
    int known = 0;
    for (size_t i = 0; i < SBX_ARRAY_LEN(statuses); i++)
        known |= strcmp(status, statuses[i]) == 0;
    if (!known)
        return bad(err, "status", "\"running\", \"interrupted\", \"completed\" or \"failed\"");
    for (size_t i = 0; i < SBX_ARRAY_LEN(counts); i++)
        if (!is_count(json_object_get(doc, counts[i])))
            return bad(err, counts[i], "a non-negative integer");
    if (!json_is_integer(json_object_get(doc, "max_turns")))
        return bad(err, "max_turns", "an integer");
    for (size_t i = 0; i < SBX_ARRAY_LEN(opt_strs); i++)
        if (!str_or_null(json_object_get(doc, opt_strs[i])))
            return bad(err, opt_strs[i], "a string or null");
    for (size_t i = 0; i < SBX_ARRAY_LEN(opt_objs); i++)
        if (!obj_or_null(json_object_get(doc, opt_objs[i])))
            return bad(err, opt_objs[i], "an object or null");
    json_t *items = json_object_get(doc, "items");
    size_t i;
    if (!json_is_array(items))
        return bad(err, "items", "a list of items");
    json_array_foreach(items, i, v)
    {
        if (!json_is_object(v))
            return bad(err, "items", "a list of items");
    }
    size_t nitems = json_array_size(items);
    if ((size_t)json_integer_value(json_object_get(doc, "input_items")) > nitems)
        return bad(err, "input_items", "at most the number of items");
    if ((size_t)json_integer_value(json_object_get(doc, "sent_upto")) > nitems)
        return bad(err, "sent_upto", "at most the number of items");
    if (!json_is_object(json_object_get(doc, "usage")))
        return bad(err, "usage", "an object");
    if ((rc = check_agents(json_object_get(doc, "agents"), err)) < 0 ||
        (rc = check_agent_files(json_object_get(doc, "agent_files"), err)) < 0 ||
        (rc = check_strings(json_object_get(doc, "tools_used"), "tools_used", err)) < 0 ||
        (rc = check_strings(json_object_get(doc, "open_calls"), "open_calls", err)) < 0 ||
        (rc = check_pending(json_object_get(doc, "pending"), err)) < 0 ||
        (rc = check_decisions(json_object_get(doc, "decisions"),
                              json_integer_value(json_object_get(doc, "version")), err)) < 0 ||
        (rc = check_always(json_object_get(doc, "always"), err)) < 0)
        return rc;
    v = json_object_get(doc, "conversation");
    if (v && !json_is_null(v) &&
        (!json_is_string(json_object_get(v, "name")) ||
         !is_count(json_object_get(v, "saved_upto")) ||
         (size_t)json_integer_value(json_object_get(v, "saved_upto")) > nitems))
        return bad(err, "conversation", "null or {name, saved_upto}");
    return 0;
}

/* dfd: the state's directory, where the log of a head is read (-1: a head is refused). */
static int parse_in(const char *text, size_t n, int dfd, json_t **out, struct sbx_error *err)
{
    json_t *doc = NULL;
    int rc;
    if (n > SBX_RUN_STATE_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "run state: larger than %zu MiB",
                             SBX_RUN_STATE_MAX >> 20);
    struct sbx_json_limits lim = {.max_bytes = SBX_RUN_STATE_MAX, .max_depth = 128};
    if ((rc = sbx_json_parse(text, n, &lim, &doc, err)) < 0) {
        sbx_error_prefix(err, "run state");
        return rc;
    }
    if (!json_is_object(doc)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "run state: not a JSON object");
        goto out;
    }
    if (!json_is_string(json_object_get(doc, "format")) ||
        strcmp(json_string_value(json_object_get(doc, "format")), SBX_RUN_STATE_FORMAT) != 0) {
        rc = bad(err, "format", "\"" SBX_RUN_STATE_FORMAT "\"");
        goto out;
    }
    json_t *ver = json_object_get(doc, "version");
    if (!json_is_integer(ver) || json_integer_value(ver) < 1) {
        rc = bad(err, "version", "a positive integer");
        goto out;
    }
    if (json_integer_value(ver) > SBX_RUN_STATE_VERSION) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "run state: version %" JSON_INTEGER_FORMAT
                           " is newer than this sbx reads (%d)",
                           json_integer_value(ver), SBX_RUN_STATE_VERSION);
        goto out;
    }
    const char *digest = json_string_value(json_object_get(doc, "digest"));
    if (!digest) {
        rc = bad(err, "digest", "a string");
        goto out;
    }
    char want[sizeof(DIGEST_PREFIX) + SBX_SHA256_HEX_LEN];
    if ((rc = digest_of(doc, want, err)) < 0)
        goto out;
    if (strcmp(digest, want) != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "run state: its digest does not match its content (the file was "
                           "edited or damaged)");
        goto out;
    }
    if (json_object_get(doc, "log")) {
        if (dfd < 0)
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "run state: its items are in a log beside its file: read it "
                               "as a file");
        else
            rc = sbx__run_state_load_log(doc, dfd, err);
        if (rc < 0)
            goto out;
    }
    if ((rc = check_fields(doc, err)) < 0)
        goto out;
    *out = doc;
    doc = NULL;
out:
    json_decref(doc);
    return rc;
}

int sbx_run_state_parse(const char *text, size_t n, json_t **out, struct sbx_error *err)
{
    return parse_in(text, n, -1, out, err);
}

int sbx_run_state_serialize(const json_t *state, const struct sbx_strv *secrets, char **out,
                            struct sbx_error *err)
{
    if (!json_is_object(state))
        return sbx_error_set(err, SBX_E_INVAL, 0, "run state: not a JSON object");
    json_t *doc = sbx_scrub_json(secrets, state, NULL);
    if (doc == state) {
        json_decref(doc);
        doc = json_copy((json_t *)state);
        if (!doc)
            SBX_BUG("out of memory copying a run state");
    }
    char digest[sizeof(DIGEST_PREFIX) + SBX_SHA256_HEX_LEN];
    int rc = digest_of(doc, digest, err);
    if (rc < 0) {
        json_decref(doc);
        return rc;
    }
    sbx_json_set(doc, "digest", sbx_json_str(digest));
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_RUN_STATE_MAX);
    rc = sbx_json_dump(doc, SBX_JSON_PRETTY | SBX_JSON_SORTED, &b, err);
    if (rc == 0)
        rc = sbx_buf_addch(&b, '\n', err);
    json_decref(doc);
    if (rc < 0) {
        sbx_buf_release(&b);
        sbx_error_prefix(err, "run state");
        return rc;
    }
    *out = sbx_buf_detach(&b, NULL);
    return 0;
}

int sbx_run_state_read_file(const char *path, json_t **out, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    int dfd = -1, rc = sbx_fs_read_path(path, SBX_RUN_STATE_MAX, &b, err);
    if (rc == 0) {
        const char *slash = strrchr(path, '/');
        char *dir = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup(".");
        dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
            rc = sbx_error_errno(err, errno, "cannot open the directory of '%s'", path);
        free(dir);
    }
    if (rc == 0)
        rc = parse_in(b.data, b.len, dfd, out, err);
    sbx_fd_close(&dfd);
    sbx_buf_release(&b);
    if (rc < 0 && rc != -SBX_E_NOTFOUND)
        sbx_error_prefix(err, "'%s'", path);
    return rc;
}

int sbx_run_state_write_file(const char *path, const json_t *state, const struct sbx_strv *secrets,
                             struct sbx_error *err)
{
    char *text = NULL;
    int dfd = -1;
    int rc = sbx_run_state_serialize(state, secrets, &text, err);
    if (rc < 0)
        return rc;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup(".");
    if (!dir[0]) {
        free(dir);
        dir = sbx_xstrdup("/");
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open the directory of '%s'", path);
        goto out;
    }
    rc = sbx_fs_write(dfd, base, text, strlen(text), 0600, SBX_FS_ATOMIC, err);
    if (rc < 0)
        sbx_error_prefix(err, "run state");
out:
    sbx_fd_close(&dfd);
    free(dir);
    free(text);
    return rc;
}

/* "sha256:1a2b3c4d.." for messages. */
static void short_digest(const char *d, char out[32])
{
    snprintf(out, 32, "%.15s..", d ? d : "none");
}

int sbx_run_state_check_agent_files(const json_t *state, const struct sbx_agent_file *f,
                                    int allow_changed, struct sbx_error *err)
{
    json_t *had = json_object_get(state, "agent_files");
    json_t *now = sbx_agent_file_sources(f);
    size_t i, k;
    json_t *e, *n;
    int rc = 0;
    json_array_foreach(had, i, e)
    {
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *then = json_string_value(json_object_get(e, "digest"));
        const char *cur = NULL;
        json_array_foreach(now, k, n)
        {
            if (path && strcmp(json_string_value(json_object_get(n, "path")), path) == 0)
                cur = json_string_value(json_object_get(n, "digest"));
        }
        if (allow_changed || (cur && then && strcmp(cur, then) == 0))
            continue;
        char a[32], b[32];
        short_digest(then, a);
        short_digest(cur, b);
        if (!cur)
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "run state: agent file '%s' is no longer used by the agent (%s "
                               "then); allow it with --allow-agent-change",
                               path ? path : "?", a);
        else
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "run state: agent file '%s' changed since the run was saved (%s "
                               "then, %s now); allow it with --allow-agent-change",
                               path ? path : "?", a, b);
        break;
    }
    json_decref(now);
    return rc;
}

/* "hmac-sha256:<hex>" over the canonical text of {"always", "run_id"} of state. */
static int seal_of(const json_t *state, const uint8_t *key, size_t keylen,
                   char out[sizeof(SEAL_PREFIX) + SBX_SHA256_HEX_LEN], struct sbx_error *err)
{
    const json_t *always = json_object_get(state, "always");
    const json_t *run_id = json_object_get(state, "run_id");
    json_t *what = json_pack("{s:O, s:O}", "always", always ? always : json_array(), "run_id",
                             run_id ? run_id : json_null());
    char *text = json_dumps(what, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(what);
    if (!text)
        SBX_BUG("out of memory dumping a run state's seal");
    uint8_t mac[SBX_SHA256_LEN];
    int rc = sbx_hmac_sha256(key, keylen, text, strlen(text), mac, err);
    free(text);
    if (rc < 0)
        return rc;
    memcpy(out, SEAL_PREFIX, sizeof(SEAL_PREFIX) - 1);
    sbx_hex(mac, sizeof(mac), out + sizeof(SEAL_PREFIX) - 1);
    return 0;
}

int sbx_run_state_seal(json_t *state, const uint8_t *key, size_t keylen, struct sbx_error *err)
{
    char seal[sizeof(SEAL_PREFIX) + SBX_SHA256_HEX_LEN];
    int rc = seal_of(state, key, keylen, seal, err);
    if (rc == 0)
        sbx_json_set(state, "always_seal", sbx_json_str(seal));
    return rc;
}

json_t *sbx_run_state_always(const json_t *state, const uint8_t *key, size_t keylen,
                             size_t *dropped)
{
    char want[sizeof(SEAL_PREFIX) + SBX_SHA256_HEX_LEN];
    const char *seal = json_string_value(json_object_get(state, "always_seal"));
    int sealed = key && seal && seal_of(state, key, keylen, want, NULL) == 0 &&
                 strlen(seal) == strlen(want) && same_time_cmp(seal, want, strlen(want)) == 0;
    json_t *out = json_array();
    size_t i, left = 0;
    json_t *a;
    json_array_foreach(json_object_get(state, "always"), i, a)
    {
        /* A rejection only narrows what runs: it holds even unsealed. */
        if (sealed || json_is_false(json_object_get(a, "approved")))
            sbx_json_append(out, json_deep_copy(a));
        else
            left++;
    }
    if (dropped)
        *dropped = left;
    return out;
}
