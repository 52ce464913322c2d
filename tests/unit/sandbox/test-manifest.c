#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "sandbox/manifest/internal.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/yaml.h"

static struct sbx_manifest_load_opts no_host = {.flags = SBX_MANIFEST_NO_HOST_CHECKS};

/* Parse a YAML or JSON text and build a manifest from it. */
static int load_opts(const char *text, const struct sbx_manifest_load_opts *o,
                     struct sbx_manifest **m, struct sbx_error *err)
{
    json_t *doc = NULL;
    int rc = sbx_doc_parse("test.yaml", text, strlen(text), NULL, &doc, err);
    if (rc)
        return rc;
    rc = sbx_manifest_from_json(doc, o, m, err);
    json_decref(doc);
    return rc;
}

static int load(const char *text, struct sbx_manifest **m, struct sbx_error *err)
{
    return load_opts(text, &no_host, m, err);
}

/* Expect the document to be refused with code and a message containing needle. */
static void bad(const char *text, enum sbx_errcode code, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_ERR(load(text, &m, &err), code, &err, needle);
    CHECK(m == NULL);
    sbx_manifest_free(m);
}

/* The same for a document built in C (keys JSON text cannot carry). */
static void bad_doc(json_t *doc, enum sbx_errcode code, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_ERR(sbx_manifest_from_json(doc, &no_host, &m, &err), code, &err, needle);
    CHECK(m == NULL);
    json_decref(doc);
}

static char *to_text(const struct sbx_manifest *m, size_t *omitted)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *doc = NULL;
    if (sbx_manifest_to_json(m, 0, &doc, omitted, &err) != 0)
        return NULL;
    char *s = sbx_json_dumps(doc, SBX_JSON_COMPACT);
    json_decref(doc);
    return s;
}

static const char renewal[] =
        "{\"entries\": {\n"
        "  \"account_brief.md\": {\"type\": \"file\", \"content\": \"# Northwind Health\\n\"},\n"
        "  \"implementation_risks.md\": {\"type\": \"file\", \"content\": \"# Delivery "
        "risks\\n\"}}}";

static void test_basic_load(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load(renewal, &m, &err), &err);
    if (!m)
        return;
    CHECK_EQ_STR(sbx_manifest_root(m), "/workspace");
    CHECK_EQ_INT(sbx_manifest_entry_count(m), 2);
    const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, 0);
    CHECK_EQ_STR(e->path, "account_brief.md");
    CHECK_EQ_INT(e->type, SBX_ENTRY_FILE);
    CHECK_EQ_INT(e->mode, 0644);
    CHECK_EQ_INT(e->content_len, strlen("# Northwind Health\n"));
    CHECK_EQ_MEM(e->content, e->content_len, "# Northwind Health\n", 19);
    CHECK(sbx_manifest_find(m, "implementation_risks.md") == sbx_manifest_entry_at(m, 1));
    CHECK(sbx_manifest_find(m, "nope") == NULL);
    CHECK(sbx_manifest_entry_at(m, 2) == NULL);
    sbx_manifest_free(m);
}

static void test_preorder_and_children(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("entries:\n"
                  "  z.txt: {type: file, content: z}\n"
                  "  ./data//:\n"
                  "    type: dir\n"
                  "    children:\n"
                  "      in: {type: dir, children: {deep.txt: {type: file, content: d}}}\n"
                  "      b.txt: {type: file, content: b}\n"
                  "  data/extra.txt: {type: file, content: e}\n",
                  &m, &err),
             &err);
    if (!m)
        return;
    const char *want[] = {"z.txt",      "data",          "data/in", "data/in/deep.txt",
                          "data/b.txt", "data/extra.txt"};
    CHECK_EQ_INT(sbx_manifest_entry_count(m), 6);
    for (size_t i = 0; i < 6 && i < sbx_manifest_entry_count(m); i++)
        CHECK_EQ_STR(sbx_manifest_entry_at(m, i)->path, want[i]);
    CHECK_EQ_INT(sbx_manifest_entry_at(m, 1)->nchildren, 2);
    CHECK_EQ_INT(sbx_manifest_entry_at(m, 1)->mode, 0755);
    CHECK_EQ_INT(sbx_manifest_entry_at(m, 3)->parent, 2);
    CHECK_EQ_STR(sbx_manifest_entry_at(m, 3)->key, "deep.txt");
    CHECK(sbx_manifest_entry_at(m, 5)->parent == SBX_MANIFEST_NONE);
    /* Serialising keeps the declared nesting and the normalised keys. */
    char *s = to_text(m, NULL);
    CHECK_CONTAINS(s, "\"data\":{\"type\":\"dir\"");
    CHECK_CONTAINS(s, "\"children\":{\"in\":");
    CHECK_CONTAINS(s, "\"data/extra.txt\":");
    free(s);
    sbx_manifest_free(m);
}

static void test_path_rules(void)
{
    bad("{\"entries\": {\"/etc/passwd\": {\"type\": \"file\", \"content\": \"x\"}}}", SBX_E_INVAL,
        "entry '/etc/passwd': path must be relative");
    bad("{\"entries\": {\"a/../b\": {\"type\": \"file\", \"content\": \"x\"}}}", SBX_E_INVAL,
        "entry 'a/../b': path must not contain '..'");
    bad("{\"entries\": {\"..\": {\"type\": \"dir\"}}}", SBX_E_INVAL, "entry '..'");
    bad("{\"entries\": {\"d\": {\"type\": \"dir\", \"children\": {\"../../x\": {\"type\": "
        "\"file\", \"content\": \"x\"}}}}}",
        SBX_E_INVAL, "entry 'd/../../x': path must not contain '..'");
    bad("{\"entries\": {\"\": {\"type\": \"dir\"}}}", SBX_E_INVAL, "entry ''");
    bad("{\"entries\": {\"./\": {\"type\": \"dir\"}}}", SBX_E_INVAL, "workspace root");
    /* NUL cannot come through JSON text ... */
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *doc = NULL;
    const char *nul = "{\"entries\": {\"a\\u0000b\": {\"type\": \"dir\"}}}";
    CHECK_ERR(sbx_json_parse(nul, strlen(nul), NULL, &doc, &err), SBX_E_PARSE, &err, "line 1");
    CHECK(doc == NULL);
    /* ... but a document built in C may carry it: the entry is named with the byte escaped. */
    doc = json_object();
    json_t *entries = json_object();
    json_object_setn_new_nocheck(entries, "a\0b", 3, json_pack("{s:s}", "type", "dir"));
    json_object_set_new(doc, "entries", entries);
    bad_doc(doc, SBX_E_INVAL, "entry 'a\\x00b': path must not contain a NUL byte");
    /* Invalid UTF-8 in a name. */
    doc = json_object();
    entries = json_object();
    json_object_setn_new_nocheck(entries, "bad\xff", 4, json_pack("{s:s}", "type", "dir"));
    json_object_set_new(doc, "entries", entries);
    bad_doc(doc, SBX_E_INVAL, "entry 'bad\\xff': path is not valid UTF-8");
    /* ... and in a child name, named with its parent. */
    doc = json_pack("{s:{s:{s:s,s:{}}}}", "entries", "d", "type", "dir", "children");
    json_object_setn_new_nocheck(
            json_object_get(json_object_get(json_object_get(doc, "entries"), "d"), "children"),
            "\xc0\xaf", 2, json_pack("{s:s}", "type", "dir"));
    bad_doc(doc, SBX_E_INVAL, "entry 'd/\\xc0\\xaf': path is not valid UTF-8");
    /* Invalid UTF-8 in a YAML file is refused by the reader. */
    const char *y = "entries:\n  \"x\xff\": {type: dir}\n";
    CHECK(sbx_doc_parse("m.yaml", y, strlen(y), NULL, &doc, &err) != 0);
}

static void test_duplicates_and_overlap(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *doc = NULL;
    const char *dupj = "{\"entries\": {\"a\": {\"type\": \"dir\"}, \"a\": {\"type\": \"dir\"}}}";
    CHECK_ERR(sbx_json_parse(dupj, strlen(dupj), NULL, &doc, &err), SBX_E_INVAL, &err, "duplicate");
    const char *dupy = "entries:\n  a: {type: dir}\n  a: {type: dir}\n";
    CHECK_ERR(sbx_doc_parse("m.yaml", dupy, strlen(dupy), NULL, &doc, &err), SBX_E_INVAL, &err,
              NULL);
    CHECK_CONTAINS(err.msg, "line");
    bad("entries:\n  a: {type: dir}\n  ./a: {type: dir}\n", SBX_E_INVAL,
        "entry 'a': path is declared twice");
    bad("entries:\n  a/b: {type: dir}\n  a: {type: dir, children: {b: {type: dir}}}\n", SBX_E_INVAL,
        "entry 'a/b': path is declared twice");
    bad("entries:\n  a: {type: file, content: x}\n  a/b: {type: file, content: y}\n", SBX_E_INVAL,
        "entry 'a/b': lies under file entry 'a'");
    bad("entries:\n  a/b/c: {type: dir}\n  a: {type: file, content: y}\n", SBX_E_INVAL,
        "entry 'a': a file entry cannot contain entry 'a/b/c'");
    bad("entries:\n  m: {type: s3_mount, bucket: b}\n  m/x: {type: dir}\n", SBX_E_INVAL,
        "entry 'm/x': lies under s3_mount entry 'm'");
    bad("entries:\n  f: {type: local_file, src: x}\n  f/x/y: {type: dir}\n", SBX_E_INVAL,
        "lies under local_file entry 'f'");
    /* Dirs, local dirs and repos may hold entries: overlays are materialised in order. */
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("entries:\n  repo: {type: git_repo, repo: o/n}\n"
                  "  repo/TASK.md: {type: file, content: t}\n  d: {type: local_dir}\n"
                  "  d/x: {type: file, content: x}\n",
                  &m, &err),
             &err);
    sbx_manifest_free(m);
}

static void test_schema_errors(void)
{
    bad("entries:\n  x: {type: frob}\n", SBX_E_INVAL, "entry 'x': unknown type 'frob' (known:");
    bad("entries:\n  x: {content: a}\n", SBX_E_INVAL, "entry 'x': missing required field 'type'");
    bad("entries:\n  x: {type: file}\n", SBX_E_INVAL,
        "entry 'x': missing required field 'content'");
    bad("entries:\n  x: {type: git_repo, ref: main}\n", SBX_E_INVAL,
        "entry 'x': missing required field 'repo'");
    bad("entries:\n  x: {type: local_file}\n", SBX_E_INVAL,
        "entry 'x': missing required field 'src'");
    bad("entries:\n  x: {type: s3_mount}\n", SBX_E_INVAL,
        "entry 'x': missing required field 'bucket'");
    bad("entries:\n  x: {type: file, content: 5}\n", SBX_E_INVAL,
        "entry 'x': field 'content' must be a string or");
    bad("entries:\n  x: {type: file, content: a, ephemeral: yes}\n", SBX_E_INVAL,
        "entry 'x': field 'ephemeral' must be a boolean, not string");
    bad("entries:\n  x: {type: dir, description: [1]}\n", SBX_E_INVAL,
        "entry 'x': field 'description' must be a string, not array");
    bad("entries:\n  x: {type: dir, children: [1]}\n", SBX_E_INVAL,
        "entry 'x': field 'children' must be an object, not array");
    bad("entries:\n  x: file\n", SBX_E_INVAL, "entry 'x': must be an object, not string");
    bad("entries:\n  x: {type: file, content: a, contnet: b}\n", SBX_E_INVAL,
        "entry 'x': unknown field 'contnet'");
    bad("entires: {}\n", SBX_E_INVAL, "unknown field 'entires'");
    bad("entries: []\n", SBX_E_INVAL, "field 'entries' must be an object, not array");
    bad("version: 2\n", SBX_E_INVAL, "field 'version' must be 1");
    bad("[1]\n", SBX_E_INVAL, "a manifest must be an object, not array");
    bad("root: /\n", SBX_E_INVAL, "field 'root'");
    bad("root: workspace\n", SBX_E_INVAL, "field 'root'");
    /* Host path grants, as the SDK writes them: checked here for form, by the provider for
     * what they reach (the same rules as its own grants). */
    bad("extra_path_grants: [{path: data}]\n", SBX_E_INVAL,
        "field 'extra_path_grants[0].path' must be an absolute path other than '/'");
    bad("extra_path_grants: [\"/\"]\n", SBX_E_INVAL, "extra_path_grants[0].path");
    bad("extra_path_grants: [/a/../etc]\n", SBX_E_INVAL, "without '.' or '..' components");
    bad("extra_path_grants: [{path: /d, host_path: rel}]\n", SBX_E_INVAL,
        "extra_path_grants[0].host_path");
    bad("extra_path_grants: [{path: /d, writable: true}]\n", SBX_E_INVAL,
        "field 'extra_path_grants[0]': unknown field 'writable'");
    bad("extra_path_grants: {path: /d}\n", SBX_E_INVAL, "field 'extra_path_grants' must be a list");
    {
        struct sbx_error gerr = SBX_ERROR_INIT;
        struct sbx_manifest *gm = NULL;
        CHECK_OK(load("{\"extraPathGrants\": [{\"path\": \"/opt/t\", \"readOnly\": true, "
                      "\"hostPath\": \"/srv/t\"}, \"/data\"]}",
                      &gm, &gerr),
                 &gerr);
        CHECK_EQ_INT(sbx_manifest_grant_count(gm), 2);
        const struct sbx_manifest_grant *g0 = sbx_manifest_grant_at(gm, 0);
        const struct sbx_manifest_grant *g1 = sbx_manifest_grant_at(gm, 1);
        CHECK(g0 && strcmp(g0->path, "/opt/t") == 0 && strcmp(g0->host_path, "/srv/t") == 0 &&
              g0->read_only);
        CHECK(g1 && strcmp(g1->path, "/data") == 0 && !g1->host_path && !g1->read_only);
        json_t *doc = NULL;
        CHECK_OK(sbx_manifest_to_json(gm, 0, &doc, NULL, &gerr), &gerr);
        CHECK_EQ_INT(json_array_size(json_object_get(doc, "extra_path_grants")), 2);
        json_decref(doc);
        /* A session state's manifest never carries them, and one that does is refused. */
        CHECK_OK(sbx_manifest_to_json(gm, SBX_MANIFEST_JSON_CONTENT_DIGESTS, &doc, NULL, &gerr),
                 &gerr);
        CHECK(json_object_get(doc, "extra_path_grants") == NULL);
        json_decref(doc);
        sbx_manifest_free(gm);
        json_t *st = json_loads("{\"extra_path_grants\": [\"/data\"]}", 0, NULL);
        struct sbx_manifest_load_opts so = {.flags = SBX_MANIFEST_CONTENT_DIGESTS};
        gm = NULL;
        CHECK_ERR(sbx_manifest_from_json(st, &so, &gm, &gerr), SBX_E_PERM, &gerr,
                  "a session state never grants host paths");
        json_decref(st);
    }
    /* The reference's serialization has fields we accept and ignore or check. */
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("{\"version\": 1, \"root\": \"/srv/ws\", \"extra_path_grants\": [],"
                  " \"remote_mount_command_allowlist\": [\"ls\", \"cat\"], \"entries\": {\"a\": "
                  "{\"type\": \"file\", \"description\": null, \"ephemeral\": false, \"group\": "
                  "null, \"is_dir\": false, \"permissions\": {\"owner\": 7, \"group\": 5, "
                  "\"other\": 5, \"directory\": false}, \"content\": \"hi\"}}}",
                  &m, &err),
             &err);
    if (m) {
        CHECK_EQ_STR(sbx_manifest_root(m), "/srv/ws");
        CHECK_EQ_INT(sbx_manifest_entry_at(m, 0)->mode, 0755);
        char *s = to_text(m, NULL);
        CHECK_CONTAINS(s, "\"remote_mount_command_allowlist\":[\"ls\",\"cat\"]");
        free(s);
    }
    sbx_manifest_free(m);
}

static void test_permissions(void)
{
    struct {
        const char *field;
        mode_t want;
    } ok[] = {
            {"mode: \"0600\"", 0600},
            {"mode: \"0o750\"", 0750},
            {"permissions: \"-rwxr-x---\"", 0750},
            {"permissions: \"drwxr-xr-x+\"", 0755},
            {"mode: 420", 0644},
            {"mode: 16877", 0755}, /* S_IFDIR | 0755 */
            {"permissions: {owner: 6}", 0600},
            {"permissions: {owner: 7, group: 5, other: 0}", 0750},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(ok); i++) {
        char doc[200];
        snprintf(doc, sizeof(doc), "entries:\n  x: {type: file, content: a, %s}\n", ok[i].field);
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_manifest *m = NULL;
        CHECK_OK(load(doc, &m, &err), &err);
        if (m)
            CHECK_EQ_INT(sbx_manifest_entry_at(m, 0)->mode, ok[i].want);
        sbx_manifest_free(m);
    }
    bad("entries:\n  x: {type: file, content: a, mode: 644}\n", SBX_E_INVAL,
        "entry 'x': field 'mode': 644 is not a permission mode");
    bad("entries:\n  x: {type: file, content: a, mode: \"4755\"}\n", SBX_E_INVAL,
        "is not a permission mode");
    bad("entries:\n  x: {type: file, content: a, mode: \"rwx\"}\n", SBX_E_INVAL,
        "is not a permission mode");
    bad("entries:\n  x: {type: file, content: a, permissions: {owner: 9}}\n", SBX_E_INVAL,
        "'owner' must be an integer from 0 to 7");
    bad("entries:\n  x: {type: file, content: a, mode: \"0644\", permissions: \"0644\"}\n",
        SBX_E_INVAL, "not both");
    bad("entries:\n  x: {type: s3_mount, bucket: b, mode: \"0700\"}\n", SBX_E_INVAL,
        "mount permissions are not enforced");
}

static void test_content_limits(void)
{
    /* A declared size over the limit fails before anything is decoded or allocated. */
    bad("entries:\n  big.bin: {type: file, content: {type: base64, data: AAAA, size: "
        "1073741824}}\n",
        SBX_E_TOOBIG, "entry 'big.bin': content of 1073741824 bytes exceeds the limit");
    bad("entries:\n  x: {type: file, content: {type: base64, data: AAAA, size: 5}}\n", SBX_E_INVAL,
        "decoded 3 bytes but 'size' says 5");
    bad("entries:\n  x: {type: file, content: {type: base64, data: \"A*==\"}}\n", SBX_E_PARSE,
        "entry 'x': field 'content'");
    bad("entries:\n  x: {type: file, content: {type: hex, data: \"00\"}}\n", SBX_E_INVAL,
        "unknown encoding 'hex'");
    bad("entries:\n  x: {type: file, content: {type: base64}}\n", SBX_E_INVAL,
        "missing required field 'data'");

    struct sbx_manifest_load_opts small = {.flags = SBX_MANIFEST_NO_HOST_CHECKS,
                                           .max_file_bytes = 8,
                                           .max_total_bytes = 12,
                                           .max_entries = 3};
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_ERR(load_opts("entries:\n  t: {type: file, content: \"123456789\"}\n", &small, &m, &err),
              SBX_E_TOOBIG, &err, "entry 't': content of 9 bytes exceeds the limit of 8 bytes");
    CHECK_ERR(load_opts("entries:\n  b: {type: file, content: {type: base64, data: "
                        "\"AAAAAAAAAAAAAAAA\"}}\n",
                        &small, &m, &err),
              SBX_E_TOOBIG, &err, "entry 'b': content");
    CHECK_ERR(load_opts("entries:\n  a: {type: file, content: \"1234567\"}\n"
                        "  b: {type: file, content: \"1234567\"}\n",
                        &small, &m, &err),
              SBX_E_TOOBIG, &err, "entry 'b': file contents add up to more than");
    CHECK_ERR(load_opts("entries:\n  a: {type: dir}\n  b: {type: dir}\n  c: {type: dir}\n"
                        "  d: {type: dir}\n",
                        &small, &m, &err),
              SBX_E_TOOBIG, &err, "entry 'd': the manifest has more than 3 entries");
    CHECK(m == NULL);
}

static void test_deep_yaml(void)
{
    /* 200 nested dirs: the document reader stops at its depth limit, nothing recurses. */
    struct sbx_buf b;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_buf_adds(&b, "entries:\n", &err), &err);
    int rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++)
        rc = sbx_buf_addf(&b, &err, "%*sd%d:\n%*s  type: dir\n%*s  children:\n", 2 + 4 * i, "", i,
                          2 + 4 * i, "", 2 + 4 * i, "");
    CHECK_EQ_INT(rc, 0);
    json_t *doc = NULL;
    CHECK_ERR(sbx_doc_parse("deep.yaml", b.data, b.len, NULL, &doc, &err), SBX_E_TOOBIG, &err,
              "depth");
    CHECK(doc == NULL);
    sbx_buf_release(&b);
}

static void test_binary_round_trip(void)
{
    unsigned char bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (unsigned char)i;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new();
    CHECK_OK(sbx_manifest_add_file(m, "bin/all.bytes", bytes, sizeof(bytes), NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "nul.txt", "a\0b", 3, NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "text.txt", "héllo\n", 7, NULL, &err), &err);
    json_t *doc = NULL;
    CHECK_OK(sbx_manifest_to_json(m, 0, &doc, NULL, &err), &err);
    char *s = sbx_json_dumps(doc, SBX_JSON_COMPACT);
    CHECK_CONTAINS(s, "\"bin/all.bytes\":{\"type\":\"file\"");
    CHECK_CONTAINS(s, "\"content\":{\"type\":\"base64\",\"data\":\"AAECAwQF");
    CHECK_CONTAINS(s, "\"content\":{\"type\":\"base64\",\"data\":\"YQBi\"}");
    CHECK_CONTAINS(s, "\"content\":\"héllo\\n\"");
    /* Through text and back: the same bytes. */
    json_t *again = NULL;
    CHECK_OK(sbx_json_parse(s, strlen(s), NULL, &again, &err), &err);
    struct sbx_manifest *m2 = NULL;
    CHECK_OK(sbx_manifest_from_json(again, &no_host, &m2, &err), &err);
    if (m2) {
        const struct sbx_manifest_entry *e = sbx_manifest_find(m2, "bin/all.bytes");
        CHECK(e != NULL);
        if (e)
            CHECK_EQ_MEM(e->content, e->content_len, bytes, sizeof(bytes));
        e = sbx_manifest_find(m2, "nul.txt");
        if (e)
            CHECK_EQ_MEM(e->content, e->content_len, "a\0b", 3);
        char *s2 = to_text(m2, NULL);
        CHECK_EQ_STR(s2, s);
        free(s2);
    }
    /* Forced base64 for text too. */
    json_t *b64 = NULL;
    CHECK_OK(sbx_manifest_to_json(m, SBX_MANIFEST_JSON_BASE64, &b64, NULL, &err), &err);
    char *s3 = sbx_json_dumps(b64, SBX_JSON_COMPACT);
    CHECK_CONTAINS(s3, "{\"type\":\"base64\",\"data\":\"aMOpbGxvCg==\"}");
    free(s3);
    json_decref(b64);
    free(s);
    json_decref(doc);
    json_decref(again);
    sbx_manifest_free(m2);
    sbx_manifest_free(m);
}

/* What a session state keeps: non-ephemeral files by digest, ephemeral ones (and files under
 * an ephemeral dir) with their bytes; only a state reader accepts the digest form. */
static void test_content_digests(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new(), *m2 = NULL;
    struct sbx_manifest_entry_opts eph = {.ephemeral = 1};
    CHECK_OK(sbx_manifest_add_file(m, "a.txt", "abc", 3, NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "e.txt", "kept", 4, &eph, &err), &err);
    CHECK_OK(sbx_manifest_add_dir(m, "tmp", &eph, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "tmp/in.txt", "under", 5, NULL, &err), &err);
    json_t *doc = NULL;
    CHECK_OK(sbx_manifest_to_json(m, SBX_MANIFEST_JSON_CONTENT_DIGESTS, &doc, NULL, &err), &err);
    char *s = sbx_json_dumps(doc, SBX_JSON_COMPACT);
    CHECK_CONTAINS(s, "\"content\":{\"type\":\"sha256\",\"digest\":"
                      "\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\","
                      "\"size\":3}");
    CHECK_CONTAINS(s, "\"content\":\"kept\"");
    CHECK_CONTAINS(s, "\"content\":\"under\"");
    CHECK_ERR(sbx_manifest_from_json(doc, &no_host, &m2, &err), SBX_E_INVAL, &err,
              "entry 'a.txt': field 'content': unknown encoding 'sha256'");
    struct sbx_manifest_load_opts st = {.flags = SBX_MANIFEST_NO_HOST_CHECKS |
                                                 SBX_MANIFEST_CONTENT_DIGESTS};
    CHECK_OK(sbx_manifest_from_json(doc, &st, &m2, &err), &err);
    const struct sbx_manifest_entry *e = m2 ? sbx_manifest_find(m2, "a.txt") : NULL;
    CHECK(e && !e->content && e->content_len == 3 && e->content_sha256 &&
          strncmp(e->content_sha256, "ba7816bf", 8) == 0);
    e = m2 ? sbx_manifest_find(m2, "e.txt") : NULL;
    CHECK(e && e->content && !e->content_sha256);
    /* Written again, with or without the flag: the same document. */
    char *s2 = m2 ? to_text(m2, NULL) : NULL;
    CHECK_EQ_STR(s2, s);
    free(s2);
    free(s);
    json_decref(doc);
    sbx_manifest_free(m2);
    m2 = NULL;
    /* A state reader still checks the form. */
    static const char *const bads[][2] = {
            {"{\"entries\": {\"a\": {\"type\": \"file\", \"content\": {\"type\": \"sha256\", "
             "\"digest\": \"ABCD\", \"size\": 1}}}}",
             "64 lowercase hex"},
            {"{\"entries\": {\"a\": {\"type\": \"file\", \"content\": {\"type\": \"sha256\", "
             "\"digest\": \"0000000000000000000000000000000000000000000000000000000000000000\"}}}}",
             "'size'"},
            {"{\"entries\": {\"a\": {\"type\": \"file\", \"content\": {\"type\": \"sha256\", "
             "\"digest\": \"0000000000000000000000000000000000000000000000000000000000000000\", "
             "\"size\": 1, \"data\": \"x\"}}}}",
             "data"},
    };
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        CHECK(load_opts(bads[i][0], &st, &m2, &err) != 0);
        CHECK_CONTAINS(err.msg, bads[i][1]);
        sbx_manifest_free(m2);
        m2 = NULL;
    }
    sbx_manifest_free(m);
}

static void test_secrets(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    setenv("SBX_TEST_HOST_TOKEN", "from-host", 1);
    CHECK_OK(load("entries:\n"
                  "  data:\n"
                  "    type: s3_mount\n"
                  "    bucket: reports\n"
                  "    prefix: q3/\n"
                  "    accessKeyId: AKIAEXAMPLE\n"
                  "    secret_access_key: s3cr3t-key\n"
                  "    mount_strategy: {type: docker_volume, driver: rclone,\n"
                  "                     driver_options: {s3-session-token: drv-tok}}\n"
                  "environment:\n"
                  "  PLAIN: hello\n"
                  "  API_KEY: {value: sk-live-123, secret: true}\n"
                  "  OTHER: {type: secret, value: other-secret}\n"
                  "  FROM_HOST: {type: secret, env: SBX_TEST_HOST_TOKEN, description: tok}\n"
                  "  EPH: {value: v, ephemeral: true}\n",
                  &m, &err),
             &err);
    if (!m)
        return;
    size_t omitted = 99;
    char *s = to_text(m, &omitted);
    CHECK_EQ_INT(omitted, 5);
    CHECK(s && !strstr(s, "AKIAEXAMPLE") && !strstr(s, "s3cr3t-key") && !strstr(s, "drv-tok") &&
          !strstr(s, "sk-live-123") && !strstr(s, "other-secret"));
    CHECK_CONTAINS(s, "\"bucket\":\"reports\"");
    CHECK_CONTAINS(s, "\"mount_strategy\":{\"type\":\"docker_volume\",\"driver\":\"rclone\"}");
    CHECK_CONTAINS(s, "\"FROM_HOST\":{\"type\":\"secret\",\"env\":\"SBX_TEST_HOST_TOKEN\"");
    CHECK_CONTAINS(s, "\"EPH\":{\"value\":\"v\",\"ephemeral\":true}");
    CHECK(!strstr(s, "API_KEY"));
    free(s);
    /* What a session state keeps: no ephemeral value, the plain ones and references stay. */
    json_t *doc = NULL;
    CHECK_OK(sbx_manifest_to_json(m, SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV, &doc, NULL, &err), &err);
    s = doc ? sbx_json_dumps(doc, SBX_JSON_COMPACT) : NULL;
    CHECK(s && !strstr(s, "EPH"));
    CHECK_CONTAINS(s, "\"PLAIN\":\"hello\"");
    CHECK_CONTAINS(s, "\"FROM_HOST\":{\"type\":\"secret\"");
    free(s);
    json_decref(doc);
    const struct sbx_manifest_entry *e = sbx_manifest_find(m, "data");
    CHECK_EQ_STR(sbx_manifest_entry_field(e, "bucket"), "reports");
    CHECK(sbx_manifest_entry_field(e, "secret_access_key") == NULL);
    const struct sbx_secret *sec = sbx_manifest_entry_secret(e, "secret_access_key");
    CHECK(sec != NULL);
    if (sec) {
        size_t len = 0;
        CHECK_EQ_STR(sbx_secret_reveal(sec, &len), "s3cr3t-key");
        CHECK_EQ_INT(len, 10);
        CHECK_EQ_STR(sbx_secret_name(sec), "secret_access_key");
    }
    CHECK(sbx_manifest_entry_secret(e, "driver_options.s3-session-token") != NULL);
    CHECK(sbx_manifest_entry_secret(e, "access_key_id") != NULL);
    CHECK_EQ_INT(sbx_manifest_env_count(m), 5);
    const struct sbx_manifest_env *v = sbx_manifest_env_at(m, 1);
    CHECK_EQ_STR(v->name, "API_KEY");
    CHECK(v->value == NULL && v->secret != NULL);
    struct sbx_strv env;
    sbx_strv_init(&env);
    CHECK_OK(sbx_manifest_env_resolve(m, NULL, &env, &err), &err);
    CHECK_EQ_STR(sbx_strv_getenv(&env, "API_KEY"), "sk-live-123");
    CHECK_EQ_STR(sbx_strv_getenv(&env, "FROM_HOST"), "from-host");
    CHECK_EQ_STR(sbx_strv_getenv(&env, "PLAIN"), "hello");
    sbx_strv_release(&env);
    unsetenv("SBX_TEST_HOST_TOKEN");
    CHECK_ERR(sbx_manifest_env_resolve(m, NULL, &env, &err), SBX_E_NOTFOUND, &err,
              "environment 'FROM_HOST': harness variable 'SBX_TEST_HOST_TOKEN' is not set");
    CHECK_EQ_INT(env.n, 0);
    sbx_manifest_free(m);
}

/* A saved manifest (credentials left out) gets them back from the given one, entry by entry,
 * only where path, type and every other field agree. */
static void test_copy_mount_secrets(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *given = NULL, *saved = NULL;
    const char *text =
            "entries:\n"
            "  a: {type: s3_mount, bucket: b1, access_key_id: AK, secret_access_key: SK}\n"
            "  b: {type: s3_mount, bucket: b2, access_key_id: AK2, secret_access_key: SK2}\n"
            "  c: {type: azure_blob_mount, account: x, container: y, account_key: K}\n";
    CHECK_OK(load(text, &given, &err), &err);
    CHECK_OK(load("entries:\n"
                  "  a: {type: s3_mount, bucket: b1}\n"
                  "  b: {type: s3_mount, bucket: other}\n"
                  "  c: {type: s3_mount, bucket: y}\n",
                  &saved, &err),
             &err);
    if (!given || !saved)
        goto out;
    CHECK_EQ_INT(sbx_manifest_copy_mount_secrets(given, saved), 1);
    const struct sbx_manifest_entry *a = sbx_manifest_entry_at(saved, 0);
    const struct sbx_secret *sk = sbx_manifest_entry_secret(a, "secret_access_key");
    CHECK(sk && strcmp(sbx_secret_reveal(sk, NULL), "SK") == 0);
    CHECK(!sbx_manifest_entry_secret(sbx_manifest_entry_at(saved, 1), "secret_access_key"));
    CHECK(!sbx_manifest_entry_secret(sbx_manifest_entry_at(saved, 2), "account_key"));
    /* Entries that have credentials keep their own. */
    CHECK_EQ_INT(sbx_manifest_copy_mount_secrets(given, saved), 0);
out:
    sbx_manifest_free(given);
    sbx_manifest_free(saved);
}

/* Every secret value a manifest holds, for the run's scrubber: environment secrets (inline and
 * read from the environment) and mount credentials (inline and by reference), each once. */
static void test_secret_values(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    struct sbx_strv out;
    sbx_strv_init(&out);
    setenv("SBX_TEST_TOK", "tok-from-env-42", 1);
    setenv("SBX_TEST_S3KEY", "s3-key-from-env", 1);
    const char *text =
            "entries:\n"
            "  a: {type: s3_mount, bucket: b1, access_key_id: AK, secret_access_key: SK-inline}\n"
            "  b: {type: s3_mount, bucket: b2, access_key_id: AK2,\n"
            "      secret_access_key: {type: secret, env: SBX_TEST_S3KEY}}\n"
            "environment:\n"
            "  TOK: {type: secret, env: SBX_TEST_TOK}\n"
            "  INL: {value: inline-7777, secret: true}\n"
            "  PLAIN: visible\n"
            "  AGAIN: {value: inline-7777, secret: true}\n";
    CHECK_OK(load(text, &m, &err), &err);
    if (m) {
        sbx_manifest_secret_values(m, &out);
        /* The key ids count as credentials too. */
        CHECK_EQ_INT(out.n, 6);
        CHECK(sbx_strv_find(&out, "AK2") >= 0);
        CHECK(sbx_strv_find(&out, "tok-from-env-42") >= 0);
        CHECK(sbx_strv_find(&out, "inline-7777") >= 0);
        CHECK(sbx_strv_find(&out, "SK-inline") >= 0);
        CHECK(sbx_strv_find(&out, "s3-key-from-env") >= 0);
        CHECK(sbx_strv_find(&out, "visible") < 0);
    }
    unsetenv("SBX_TEST_TOK");
    unsetenv("SBX_TEST_S3KEY");
    sbx_strv_release(&out);
    sbx_manifest_free(m);
}

static void test_environment_forms(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    /* The Python SDK's wrapper and EnvEntry shapes. */
    CHECK_OK(load("{\"environment\": {\"value\": {\"A\": \"1\", \"B\": {\"type\": \"str\", "
                  "\"value\": \"2\"}, \"C\": {\"description\": \"c\", \"ephemeral\": true, "
                  "\"value\": {\"type\": \"str\", \"value\": \"3\"}}, \"D\": {\"value\": "
                  "\"4\"}}}}",
                  &m, &err),
             &err);
    if (m) {
        CHECK_EQ_INT(sbx_manifest_env_count(m), 4);
        CHECK_EQ_STR(sbx_manifest_env_at(m, 2)->value, "3");
        CHECK_EQ_STR(sbx_manifest_env_at(m, 2)->description, "c");
        CHECK_EQ_INT(sbx_manifest_env_at(m, 2)->ephemeral, 1);
        CHECK_EQ_STR(sbx_manifest_env_at(m, 3)->value, "4");
    }
    sbx_manifest_free(m);
    /* A variable named "value" is not mistaken for the wrapper. */
    CHECK_OK(load("environment: {value: {type: secret, env: HOME}}\n", &m, &err), &err);
    if (m) {
        CHECK_EQ_INT(sbx_manifest_env_count(m), 1);
        CHECK_EQ_STR(sbx_manifest_env_at(m, 0)->name, "value");
        CHECK_EQ_STR(sbx_manifest_env_at(m, 0)->host_env, "HOME");
    }
    sbx_manifest_free(m);
    /* The model's key reaches a sandbox only when the caller names it. */
    CHECK_OK(load("environment: {K: {type: secret, env: OPENAI_API_KEY}}\n", &m, &err), &err);
    if (m) {
        struct sbx_strv env, pass;
        sbx_strv_init(&env);
        sbx_strv_init(&pass);
        setenv("OPENAI_API_KEY", "sk-harness", 1);
        CHECK_ERR(sbx_manifest_env_resolve(m, NULL, &env, &err), SBX_E_PERM, &err,
                  "--pass-secret OPENAI_API_KEY");
        sbx_strv_push(&pass, "OTHER");
        CHECK_ERR(sbx_manifest_env_resolve(m, &pass, &env, &err), SBX_E_PERM, &err,
                  "harness variable 'OPENAI_API_KEY'");
        CHECK_EQ_INT(env.n, 0);
        sbx_strv_push(&pass, "OPENAI_API_KEY");
        CHECK_OK(sbx_manifest_env_resolve(m, &pass, &env, &err), &err);
        CHECK_EQ_STR(sbx_strv_getenv(&env, "K"), "sk-harness");
        unsetenv("OPENAI_API_KEY");
        sbx_strv_release(&env);
        sbx_strv_release(&pass);
    }
    sbx_manifest_free(m);
    bad("environment: {\"1BAD\": x}\n", SBX_E_INVAL, "environment '1BAD': not a valid variable");
    bad("environment: {\"A-B\": x}\n", SBX_E_INVAL, "environment 'A-B'");
    bad("environment: {A: 5}\n", SBX_E_INVAL, "environment 'A': must be a string or an object");
    bad("environment: {A: {type: vault, path: x}}\n", SBX_E_INVAL, "environment 'A'");
    bad("environment: {A: {type: vault}}\n", SBX_E_INVAL, "unknown value type 'vault'");
    bad("environment: {A: {description: x}}\n", SBX_E_INVAL, "missing required field 'value'");
    bad("environment: {A: {type: secret, env: \"no way\"}}\n", SBX_E_INVAL, "not a valid variable");
    bad("environment: {A: {env: HOME}}\n", SBX_E_INVAL, "needs \"type\": \"secret\"");
    bad("environment: [A]\n", SBX_E_INVAL, "field 'environment' must be an object");
}

static void test_accounts(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("users: [{name: alice}, bob]\n"
                  "groups: [{name: devs, users: [{name: carol}, alice]}, {name: ops, users: []}]\n",
                  &m, &err),
             &err);
    if (m) {
        CHECK_EQ_INT(sbx_manifest_users(m)->n, 2);
        CHECK_EQ_INT(sbx_manifest_group_count(m), 2);
        CHECK_EQ_STR(sbx_manifest_group_at(m, 0)->users->v[0], "carol");
        struct sbx_strv all;
        sbx_strv_init(&all);
        sbx_manifest_account_users(m, &all);
        CHECK_EQ_INT(all.n, 3);
        if (all.n == 3)
            CHECK_EQ_STR(all.v[2], "carol");
        sbx_strv_release(&all);
        char *s = to_text(m, NULL);
        CHECK_CONTAINS(s, "\"users\":[{\"name\":\"alice\"},{\"name\":\"bob\"}]");
        free(s);
    }
    sbx_manifest_free(m);
    bad("users: [{name: Alice}]\n", SBX_E_INVAL, "users[0]: 'Alice' is not a valid name");
    bad("users: [{name: a}, {name: a}]\n", SBX_E_EXISTS, "user 'a': declared twice");
    bad("users: [{name: a, uid: 5}]\n", SBX_E_INVAL, "users[0]: unknown field 'uid'");
    bad("groups: [{name: g, users: [\"x y\"]}]\n", SBX_E_INVAL, "group 'g': users[0]");
    bad("groups: [{name: g}, {name: g}]\n", SBX_E_EXISTS, "group 'g': declared twice");
    bad("users: {name: a}\n", SBX_E_INVAL, "field 'users' must be an array");
}

/* root_owner: a declared user, kept by the serializer, the copy and the digest. */
static void test_root_owner(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL, *plain = NULL;
    CHECK_OK(load("root: /home/user\nusers: [user]\nrootOwner: user\n", &m, &err), &err);
    CHECK_OK(load("root: /home/user\nusers: [user]\n", &plain, &err), &err);
    if (m && plain) {
        CHECK_EQ_STR(sbx_manifest_root_owner(m), "user");
        CHECK(sbx_manifest_root_owner(plain) == NULL);
        char *s = to_text(m, NULL);
        CHECK_CONTAINS(s, "\"root_owner\":\"user\"");
        char *p = to_text(plain, NULL);
        CHECK(strstr(p, "root_owner") == NULL);
        free(p);
        /* The output loads back to the same manifest. */
        struct sbx_manifest *back = NULL;
        CHECK_OK(load(s, &back, &err), &err);
        CHECK(back && sbx_manifest_root_owner(back) &&
              strcmp(sbx_manifest_root_owner(back), "user") == 0);
        sbx_manifest_free(back);
        free(s);
        struct sbx_manifest *c = sbx__manifest_dup(m);
        CHECK(sbx_manifest_root_owner(c) && strcmp(sbx_manifest_root_owner(c), "user") == 0);
        char a[65], b[65], d[65];
        CHECK_OK(sbx__manifest_digest(m, a, &err), &err);
        CHECK_OK(sbx__manifest_digest(c, b, &err), &err);
        CHECK_OK(sbx__manifest_digest(plain, d, &err), &err);
        CHECK_EQ_STR(a, b);
        CHECK(strcmp(a, d) != 0);
        sbx_manifest_free(c);
        /* The builder: declared users only, the manifest unchanged on error. */
        CHECK_ERR(sbx_manifest_set_root_owner(plain, "nobody", &err), SBX_E_INVAL, &err,
                  "field 'root_owner': user 'nobody' is not declared in 'users'");
        CHECK(sbx_manifest_root_owner(plain) == NULL);
        CHECK_ERR(sbx_manifest_set_root_owner(plain, "Bad Name", &err), SBX_E_INVAL, &err,
                  "not a valid name");
        CHECK_OK(sbx_manifest_set_root_owner(plain, "user", &err), &err);
        CHECK_EQ_STR(sbx_manifest_root_owner(plain), "user");
    }
    sbx_manifest_free(m);
    sbx_manifest_free(plain);
    bad("users: [alice]\nroot_owner: bob\n", SBX_E_INVAL,
        "field 'root_owner': user 'bob' is not declared in 'users'");
    bad("groups: [{name: g, users: [bob]}]\nroot_owner: bob\n", SBX_E_INVAL,
        "user 'bob' is not declared in 'users'");
    bad("users: [alice]\nroot_owner: Alice\n", SBX_E_INVAL, "'Alice' is not a valid name");
    bad("users: [alice]\nroot_owner: \"\"\n", SBX_E_INVAL, "field 'root_owner' must not be empty");
    bad("users: [alice]\nroot_owner: [alice]\n", SBX_E_INVAL,
        "field 'root_owner' must be a string");
}

static void test_git_repo(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("entries:\n"
                  "  skills: {type: git_repo, repo: owner/tax-prep-skills, ref: main}\n"
                  "  other: {type: git_repo, host: gitlab.example.com, repo: grp/sub/proj.git,"
                  " ref: v1.2, subpath: ./docs/}\n"
                  "  url: {type: git_repo, repo: \"https://example.com/x/y.git\"}\n"
                  "  local: {type: git_repo, repo: /srv/git/repo, ref: 0123abc}\n",
                  &m, &err),
             &err);
    if (m) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, 0);
        CHECK_EQ_STR(e->url, "https://github.com/owner/tax-prep-skills.git");
        CHECK_EQ_STR(e->host, "github.com");
        CHECK_EQ_STR(e->ref, "main");
        e = sbx_manifest_entry_at(m, 1);
        CHECK_EQ_STR(e->url, "https://gitlab.example.com/grp/sub/proj.git");
        CHECK_EQ_STR(e->subpath, "docs");
        e = sbx_manifest_entry_at(m, 2);
        CHECK_EQ_STR(e->url, "https://example.com/x/y.git");
        CHECK(e->host == NULL && e->ref == NULL);
        CHECK_EQ_STR(sbx_manifest_entry_at(m, 3)->url, "/srv/git/repo");
    }
    sbx_manifest_free(m);
    bad("entries:\n  r: {type: git_repo, repo: justname}\n", SBX_E_INVAL,
        "entry 'r': field 'repo': 'justname' is neither");
    bad("entries:\n  r: {type: git_repo, repo: o/../n}\n", SBX_E_INVAL, "field 'repo'");
    bad("entries:\n  r: {type: git_repo, repo: -o/n}\n", SBX_E_INVAL, "field 'repo'");
    bad("entries:\n  r: {type: git_repo, repo: \"https://u:tok@h.com/x\"}\n", SBX_E_INVAL,
        "carry no credentials");
    bad("entries:\n  r: {type: git_repo, repo: o/n, ref: --upload-pack=x}\n", SBX_E_INVAL,
        "field 'ref'");
    bad("entries:\n  r: {type: git_repo, repo: o/n, subpath: ../x}\n", SBX_E_INVAL,
        "entry 'r': field 'subpath': path must not contain '..'");
    bad("entries:\n  r: {type: git_repo, repo: \"https://h.com/x\", host: other.com}\n",
        SBX_E_INVAL, "field 'host' cannot be combined");
}

/* A credential reference reads the harness variable when the manifest loads: the provider's
 * mount helper sees the value through sbx_manifest_entry_secret; unset, it is simply absent
 * when host checks are off (a stored manifest reloaded where the variable is not set). */
static void test_mount_credential_refs(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    const char *doc = "entries:\n"
                      "  d: {type: s3_mount, bucket: b,\n"
                      "      access_key_id: {type: secret, env: SBX_UT_KEY},\n"
                      "      secret_access_key: {type: secret, env: SBX_UT_SECRET}}\n";
    setenv("SBX_UT_KEY", "key-value", 1);
    setenv("SBX_UT_SECRET", "secret-value", 1);
    CHECK_OK(load(doc, &m, &err), &err);
    if (m) {
        const struct sbx_secret *s =
                sbx_manifest_entry_secret(sbx_manifest_entry_at(m, 0), "access_key_id");
        CHECK(s != NULL);
        if (s)
            CHECK_EQ_STR(sbx_secret_reveal(s, NULL), "key-value");
        size_t omitted = 0;
        char *t = to_text(m, &omitted);
        CHECK_EQ_INT(omitted, 0);
        CHECK_CONTAINS(t, "\"access_key_id\":{\"type\":\"secret\",\"env\":\"SBX_UT_KEY\"}");
        CHECK(strstr(t, "key-value") == NULL);
        free(t);
    }
    sbx_manifest_free(m);
    m = NULL;
    unsetenv("SBX_UT_KEY");
    unsetenv("SBX_UT_SECRET");
    CHECK_OK(load(doc, &m, &err), &err);
    if (m)
        CHECK(sbx_manifest_entry_secret(sbx_manifest_entry_at(m, 0), "access_key_id") == NULL);
    sbx_manifest_free(m);
    m = NULL;
    struct sbx_manifest_load_opts host = {0};
    CHECK_ERR(load_opts(doc, &host, &m, &err), SBX_E_NOTFOUND, &err,
              "entry 'd': credential 'access_key_id': unknown credential reference");
    CHECK(m == NULL);
}

static void test_mounts(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("entries:\n"
                  "  a: {type: gcs_mount, bucket: b, mountPath: /mnt/gcs, readOnly: false,\n"
                  "      mount_strategy: {type: in_container, pattern: {type: mountpoint,\n"
                  "        options: {prefix: p/, endpointUrl: \"https://storage.example\"}}}}\n"
                  "  b: {type: azure_blob_mount, account: acct, container: c, account_key: k,\n"
                  "      mount_path: rel/./dir}\n"
                  "  c: {type: box_mount, box_sub_type: enterprise, client_secret: cs}\n"
                  "  d: {type: s3_files_mount, file_system_id: fs-1, extra_options: {ro: null,"
                  " tls: \"1\"},\n"
                  "      mount_strategy: {type: in_container, pattern: {type: s3files}}}\n"
                  "  e: {type: r2_mount, bucket: b, account_id: acc}\n",
                  &m, &err),
             &err);
    if (m) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, 0);
        CHECK_EQ_STR(e->mount_path, "/mnt/gcs");
        CHECK_EQ_INT(e->read_only, 0);
        CHECK_EQ_INT(e->ephemeral, 1);
        CHECK(e->mount_strategy != NULL);
        CHECK_EQ_STR(sbx_manifest_entry_at(m, 1)->mount_path, "rel/dir");
        CHECK(sbx_manifest_entry_secret(sbx_manifest_entry_at(m, 3), "extra_options.ro") != NULL);
        size_t omitted = 0;
        char *s = to_text(m, &omitted);
        CHECK_EQ_INT(omitted, 4);
        CHECK_CONTAINS(s, "\"endpoint_url\":\"https://storage.example\"");
        CHECK(!strstr(s, "extra_options"));
        free(s);
    }
    sbx_manifest_free(m);
    bad("entries:\n  m: {type: r2_mount, bucket: b, account_id: a, access_key_id: k}\n",
        SBX_E_INVAL, "entry 'm': credentials 'access_key_id' and 'secret_access_key' go together");
    bad("entries:\n  m: {type: s3_mount, bucket: b, endpoint_url: \"https://k:s@h.com\"}\n",
        SBX_E_INVAL, "field 'endpoint_url' must not carry credentials");
    bad("entries:\n  m: {type: s3_mount, bucket: b, endpoint_url: \"ftp://h\"}\n", SBX_E_INVAL,
        "must be an http(s) URL");
    bad("entries:\n  m: {type: s3_mount, bucket: \"a\\nb\"}\n", SBX_E_INVAL,
        "field 'bucket' must not contain control characters");
    bad("entries:\n  m: {type: s3_mount, bucket: b, ephemeral: false}\n", SBX_E_INVAL,
        "always ephemeral");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mount_path: /}\n", SBX_E_INVAL,
        "field 'mount_path' must not be '/'");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mount_path: /mnt/../etc}\n", SBX_E_INVAL,
        "field 'mount_path'");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mount_path: ../up}\n", SBX_E_INVAL,
        "field 'mount_path': path must not contain '..'");
    bad("entries:\n  m: {type: r2_mount, bucket: b, account_id: a, mount_strategy: {type: "
        "in_container, pattern: {type: mountpoint}}}\n",
        SBX_E_INVAL, "field 'mount_strategy': mount pattern 'mountpoint' cannot mount a r2_mount");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mount_strategy: {type: teleport}}\n",
        SBX_E_INVAL, "unknown mount strategy 'teleport'");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mount_strategy: {type: in_container}}\n",
        SBX_E_INVAL, "field 'mount_strategy': missing required field 'pattern'");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mount_strategy: {type: in_container, "
        "pattern: {type: rclone, mode: smb}}}\n",
        SBX_E_INVAL, "field 'mode' must be");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mount_strategy: {type: docker_volume, "
        "driver: nfs}}\n",
        SBX_E_INVAL, "docker volume driver 'nfs' cannot mount a s3_mount");
    bad("entries:\n  m: {type: s3_mount, bucket: b, mountPath: /x, mount_path: /y}\n", SBX_E_INVAL,
        "field 'mountPath' repeats 'mount_path'");
    bad("entries:\n  m: {type: box_mount, box_sub_type: admin}\n", SBX_E_INVAL, "box_sub_type");
    bad("entries:\n  m: {type: s3_mount, bucket: b, account_key: x}\n", SBX_E_INVAL,
        "unknown field 'account_key'");
}

/* A scratch tree: base/{file.txt, dir/{a.txt}, link -> /etc, dir2/{inner -> ../file.txt}}. */
static char base[64];

static void make_tree(void)
{
    snprintf(base, sizeof(base), "/tmp/sbx-test-manifest.XXXXXX");
    if (!mkdtemp(base))
        TAP_SKIP_ALL("mkdtemp failed");
    char p[256];
    snprintf(p, sizeof(p), "%s/file.txt", base);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    snprintf(p, sizeof(p), "%s/dir", base);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/dir/a.txt", base);
    fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    snprintf(p, sizeof(p), "%s/link", base);
    CHECK(symlink("/etc", p) == 0);
    snprintf(p, sizeof(p), "%s/dir2", base);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/dir2/inner", base);
    CHECK(symlink("../file.txt", p) == 0);
}

static void remove_tree(void)
{
    const char *names[] = {"dir2/inner", "dir2", "link", "dir/a.txt", "dir", "file.txt"};
    char p[256];
    for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++) {
        snprintf(p, sizeof(p), "%s/%s", base, names[i]);
        if (unlink(p) != 0)
            rmdir(p);
    }
    rmdir(base);
}

static void test_local_sources(void)
{
    make_tree();
    struct sbx_manifest_load_opts o = {.base_dir = base};
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load_opts("entries:\n  f: {type: local_file, src: file.txt}\n"
                       "  d: {type: local_dir, src: ./dir/}\n  e: {type: local_dir}\n",
                       &o, &m, &err),
             &err);
    if (m) {
        char want[128];
        snprintf(want, sizeof(want), "%s/file.txt", base);
        CHECK_EQ_STR(sbx_manifest_entry_at(m, 0)->src_path, want);
        CHECK_EQ_STR(sbx_manifest_entry_at(m, 0)->src, "file.txt");
        CHECK(sbx_manifest_entry_at(m, 2)->src == NULL);
        char *s = to_text(m, NULL);
        CHECK_CONTAINS(s, "\"src\":\"./dir/\"");
        CHECK(!strstr(s, base));
        free(s);
    }
    sbx_manifest_free(m);
    m = NULL;
    CHECK_ERR(load_opts("entries:\n  x: {type: local_dir, src: link}\n", &o, &m, &err), SBX_E_PERM,
              &err, "entry 'x': local source 'link' is or passes through a symlink");
    CHECK_ERR(load_opts("entries:\n  x: {type: local_file, src: link/passwd}\n", &o, &m, &err),
              SBX_E_PERM, &err, "symlink");
    CHECK_ERR(load_opts("entries:\n  x: {type: local_dir, src: dir2}\n", &o, &m, &err), SBX_E_PERM,
              &err, "entry 'x': local source 'dir2' contains a symlink 'inner'");
    CHECK_ERR(load_opts("entries:\n  x: {type: local_file, src: ../etc/passwd}\n", &o, &m, &err),
              SBX_E_PERM, &err, "is outside the base directory");
    CHECK_ERR(load_opts("entries:\n  x: {type: local_file, src: /etc/passwd}\n", &o, &m, &err),
              SBX_E_PERM, &err, "entry 'x': local source '/etc/passwd' is outside");
    CHECK_ERR(load_opts("entries:\n  x: {type: local_file, src: missing.txt}\n", &o, &m, &err),
              SBX_E_NOTFOUND, &err, "entry 'x': local source 'missing.txt' does not exist");
    CHECK_ERR(load_opts("entries:\n  x: {type: local_file, src: dir}\n", &o, &m, &err), SBX_E_INVAL,
              &err, "is not a regular file");
    CHECK_ERR(load_opts("entries:\n  x: {type: local_dir, src: file.txt}\n", &o, &m, &err),
              SBX_E_INVAL, &err, "is not a directory");
    CHECK(m == NULL);

    /* Builders check the source itself. */
    struct sbx_manifest *b = sbx_manifest_new();
    char p[256];
    snprintf(p, sizeof(p), "%s/dir", base);
    CHECK_OK(sbx_manifest_add_local_dir(b, "in", p, NULL, &err), &err);
    snprintf(p, sizeof(p), "%s/link", base);
    CHECK_ERR(sbx_manifest_add_local_dir(b, "bad", p, NULL, &err), SBX_E_PERM, &err,
              "entry 'bad': local source");
    snprintf(p, sizeof(p), "%s/file.txt", base);
    CHECK_OK(sbx_manifest_add_local_file(b, "f.txt", p, NULL, &err), &err);
    CHECK_EQ_INT(sbx_manifest_entry_count(b), 2);
    sbx_manifest_free(b);
    remove_tree();
}

static void test_builders(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new();
    struct sbx_manifest_entry_opts o = {.mode = 0600, .ephemeral = 1, .description = "notes"};
    CHECK_OK(sbx_manifest_set_root(m, "/home/agent/ws", &err), &err);
    CHECK_ERR(sbx_manifest_set_root(m, "/", &err), SBX_E_INVAL, &err, "field 'root'");
    CHECK_OK(sbx_manifest_add_dir(m, "output", NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "output/notes.md", "n", 1, &o, &err), &err);
    CHECK_OK(sbx_manifest_add_git_repo(m, "repo", "openai/openai-agents-python", "main", NULL, NULL,
                                       &err),
             &err);
    CHECK_ERR(sbx_manifest_add_file(m, "output/notes.md/x", "n", 1, NULL, &err), SBX_E_INVAL, &err,
              "entry 'output/notes.md/x': lies under file entry 'output/notes.md'");
    CHECK_ERR(sbx_manifest_add_dir(m, "./output", NULL, &err), SBX_E_INVAL, &err, "declared twice");
    CHECK_ERR(sbx_manifest_add_dir(m, "../x", NULL, &err), SBX_E_INVAL, &err,
              "entry '../x': path must not contain '..'");
    CHECK_ERR(sbx_manifest_add_git_repo(m, "r2", "bad", NULL, NULL, NULL, &err), SBX_E_INVAL, &err,
              "entry 'r2': field 'repo'");
    CHECK_EQ_INT(sbx_manifest_entry_count(m), 3);
    CHECK_OK(sbx_manifest_set_env(m, "A", "1", 0, &err), &err);
    CHECK_OK(sbx_manifest_set_env(m, "A", "2", 0, &err), &err);
    CHECK_OK(sbx_manifest_set_env(m, "KEY", "sekrit", SBX_MANIFEST_ENV_SECRET, &err), &err);
    CHECK_ERR(sbx_manifest_set_env(m, "A=B", "x", 0, &err), SBX_E_INVAL, &err, "A=B");
    CHECK_EQ_INT(sbx_manifest_env_count(m), 2);
    CHECK_OK(sbx_manifest_add_user(m, "agent", &err), &err);
    const char *members[] = {"agent", NULL};
    CHECK_OK(sbx_manifest_add_group(m, "work", members, &err), &err);
    const struct sbx_manifest_entry *e = sbx_manifest_find(m, "output/notes.md");
    CHECK(e && e->mode == 0600 && e->ephemeral && strcmp(e->description, "notes") == 0);
    size_t omitted = 0;
    char *s = to_text(m, &omitted);
    CHECK_EQ_INT(omitted, 1);
    CHECK_CONTAINS(s, "\"root\":\"/home/agent/ws\"");
    CHECK_CONTAINS(s, "\"environment\":{\"A\":\"2\"}");
    CHECK_CONTAINS(s, "\"output/notes.md\":{\"type\":\"file\",\"description\":\"notes\","
                      "\"ephemeral\":true");
    /* What the builders made loads back to the same document. */
    json_t *doc = NULL;
    struct sbx_manifest *m2 = NULL;
    CHECK_OK(sbx_json_parse(s, strlen(s), NULL, &doc, &err), &err);
    CHECK_OK(sbx_manifest_from_json(doc, &no_host, &m2, &err), &err);
    char *s2 = m2 ? to_text(m2, NULL) : NULL;
    CHECK_EQ_STR(s2, s);
    free(s2);
    free(s);
    json_decref(doc);
    sbx_manifest_free(m2);
    sbx_manifest_free(m);
}

static void test_render_tree(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("entries:\n"
                  "  brief.md: {type: file, content: \"12345\", description: \"the brief\\nx\"}\n"
                  "  data/q3/report.csv: {type: file, content: x}\n"
                  "  data: {type: dir, children: {q4: {type: dir}}}\n"
                  "  repo: {type: git_repo, repo: o/n, ref: main}\n"
                  "  local: {type: git_repo, repo: /srv/secret/path}\n"
                  "  in: {type: local_dir, src: /home/me/private}\n"
                  "  bucket: {type: s3_mount, bucket: b, secret_access_key: k, access_key_id: "
                  "i}\n",
                  &m, &err),
             &err);
    if (!m)
        return;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_manifest_render_tree(m, 0, 0, &b, &err), &err);
    CHECK_EQ_STR(b.data, "/workspace\n"
                         "├── brief.md  (5 bytes)  # the brief x\n"
                         "├── data/\n"
                         "│   ├── q3/\n"
                         "│   │   └── report.csv  (1 byte)\n"
                         "│   └── q4/\n"
                         "├── repo/  (git repository o/n at main)\n"
                         "├── local/  (git repository)\n"
                         "├── in/  (copied from the host)\n"
                         "└── bucket/  (S3 mount, read-only)\n");
    sbx_buf_reset(&b);
    CHECK_OK(sbx_manifest_render_tree(m, 1, 0, &b, &err), &err);
    CHECK_CONTAINS(b.data, "├── data/  (3 entries not shown)\n");
    CHECK(!strstr(b.data, "q3"));
    int fits = 1;
    for (size_t max = 20; max < 400; max += 37) {
        sbx_buf_reset(&b);
        fits &= sbx_manifest_render_tree(m, 0, max, &b, &err) == 0 && b.len <= max;
    }
    CHECK(fits);
    sbx_buf_reset(&b);
    CHECK_OK(sbx_manifest_render_tree(m, 0, 200, &b, &err), &err);
    CHECK_CONTAINS(b.data, "... (truncated, ");
    CHECK_CONTAINS(b.data, "more lines; use ls to see them)\n");
    sbx_buf_release(&b);
    sbx_manifest_free(m);
}

/* A session keeps a copy of the manifest it was made from (sbx__manifest_dup): every part, the
 * secrets too, and nothing shared with the original, which its creator frees. */
static void test_dup(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    CHECK_OK(load("root: /work\n"
                  "entries:\n"
                  "  docs: {type: dir, description: the docs, children: {\n"
                  "    a.md: {type: file, content: hello, mode: \"0600\", group: team},\n"
                  "    bin: {type: file, content: {type: base64, data: AAEC}}}}\n"
                  "  repo: {type: git_repo, repo: owner/name, ref: main, subpath: sub,\n"
                  "         ephemeral: true}\n"
                  "  data: {type: s3_mount, bucket: b1, access_key_id: AK, secret_access_key: SK,\n"
                  "         mount_strategy: {type: in_container, pattern: {type: rclone}}}\n"
                  "environment: {PLAIN: v, TOKEN: {value: s3cret, secret: true},\n"
                  "              FROM_HOST: {type: secret, env: HOME}}\n"
                  "users: [alice, bob]\n"
                  "root_owner: bob\n"
                  "groups: [{name: team, users: [alice]}]\n"
                  "remote_mount_command_allowlist: [ls]\n",
                  &m, &err),
             &err);
    if (!m)
        return;
    struct sbx_manifest *c = sbx__manifest_dup(m);
    char a[65], b[65];
    char *ta = to_text(m, NULL);
    CHECK_OK(sbx__manifest_digest(m, a, &err), &err);
    sbx_manifest_free(m); /* the copy must not need it */
    CHECK_OK(sbx__manifest_digest(c, b, &err), &err);
    CHECK_EQ_STR(a, b);
    char *tc = to_text(c, NULL);
    CHECK_EQ_STR(ta, tc);
    CHECK_EQ_STR(sbx_manifest_root(c), "/work");
    const struct sbx_manifest_entry *e = sbx_manifest_find(c, "docs/a.md");
    CHECK(e && e->parent == 0 && e->mode == 0600 && strcmp(e->group, "team") == 0);
    CHECK(e && e->content_len == 5 && memcmp(e->content, "hello", 6) == 0);
    CHECK_EQ_INT(sbx_manifest_entry_at(c, 0)->nchildren, 2);
    const struct sbx_manifest_entry *d = sbx_manifest_find(c, "data");
    const struct sbx_secret *sk = d ? sbx_manifest_entry_secret(d, "secret_access_key") : NULL;
    CHECK(sk && strcmp(sbx_secret_reveal(sk, NULL), "SK") == 0);
    CHECK(d && d->mount_strategy && strcmp(sbx_manifest_entry_field(d, "bucket"), "b1") == 0);
    CHECK(sbx_manifest_find(c, "repo") && sbx_manifest_find(c, "repo")->ephemeral);
    CHECK_EQ_INT(sbx_manifest_env_count(c), 3);
    const struct sbx_manifest_env *v = sbx_manifest_env_at(c, 1);
    CHECK(v && v->secret && strcmp(sbx_secret_reveal(v->secret, NULL), "s3cret") == 0);
    CHECK_EQ_INT(sbx_manifest_users(c)->n, 2);
    CHECK(sbx_manifest_group_count(c) == 1 &&
          strcmp(sbx_manifest_group_at(c, 0)->users->v[0], "alice") == 0);
    /* The copy is a manifest of its own: it grows without touching anything else. */
    CHECK_OK(sbx_manifest_add_dir(c, "more", NULL, &err), &err);
    CHECK(sbx_manifest_find(c, "more") != NULL);
    free(ta);
    free(tc);
    sbx_manifest_free(c);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_basic_load);
    TAP_RUN(test_preorder_and_children);
    TAP_RUN(test_path_rules);
    TAP_RUN(test_duplicates_and_overlap);
    TAP_RUN(test_schema_errors);
    TAP_RUN(test_permissions);
    TAP_RUN(test_content_limits);
    TAP_RUN(test_deep_yaml);
    TAP_RUN(test_binary_round_trip);
    TAP_RUN(test_secrets);
    TAP_RUN(test_environment_forms);
    TAP_RUN(test_accounts);
    TAP_RUN(test_root_owner);
    TAP_RUN(test_git_repo);
    TAP_RUN(test_mounts);
    TAP_RUN(test_mount_credential_refs);
    TAP_RUN(test_copy_mount_secrets);
    TAP_RUN(test_secret_values);
    TAP_RUN(test_local_sources);
    TAP_RUN(test_builders);
    TAP_RUN(test_content_digests);
    TAP_RUN(test_render_tree);
    TAP_RUN(test_dup);
    return TAP_DONE();
}
