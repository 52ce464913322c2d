/* sbx_json_parse is our own reader; jansson's json_loadb (with the flags the old
 * sbx_json_parse passed) is the reference it must agree with: the same documents accepted, to
 * equal values, and the same refused. Then the cases a reader must get exactly right, checked
 * on their own: escapes, surrogate pairs, invalid UTF-8, control characters, numbers at the
 * int64 edges, nesting, duplicate and NUL keys, and strings whose special bytes fall at every
 * offset of the eight-byte scan. */
#include <dirent.h>
#include <stdlib.h>

#include "tap.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"

static const struct sbx_json_limits wide = {.max_bytes = 1 << 24, .max_depth = 2048};

/* 1 when both readers agree on doc. */
static int agree(const char *doc, size_t n, char *why, size_t whylen)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *ours = NULL;
    int rc = sbx_json_parse(doc, n, &wide, &ours, &err);
    json_error_t jerr;
    json_t *ref = json_loadb(doc, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    int ok = (rc == 0) == (ref != NULL) && (!ref || json_equal(ours, ref));
    /* The one difference, on purpose: jansson skips a NUL byte that follows a number ("[1\0]"
     * parses); a NUL is never JSON, and we refuse it. */
    if (!ok && rc != 0 && ref && memchr(doc, '\0', n))
        ok = 1;
    if (!ok)
        snprintf(why, whylen, "ours: %.300s; jansson: %.80s", rc ? err.msg : "accepted",
                 ref ? "accepted" : jerr.text);
    if (rc != 0 && err.msg[0] == '\0') {
        snprintf(why, whylen, "error without a message");
        ok = 0;
    }
    json_decref(ours);
    json_decref(ref);
    return ok;
}

static void check_agree(const char *doc)
{
    char why[400] = "";
    int ok = agree(doc, strlen(doc), why, sizeof(why));
    if (!ok)
        printf("# '%s': %s\n", doc, why);
    CHECK(ok);
}

static void test_agrees_with_jansson(void)
{
    static const char *const docs[] = {"{}",
                                       "[]",
                                       "  {\"a\" : [1, 2.5, -3, true, false, null, \"x\"]}\n",
                                       "\"s\"",
                                       "0",
                                       "-0",
                                       "-0.0",
                                       "1e5",
                                       "1E+5",
                                       "1e-400",
                                       "1e400",
                                       "-1e400",
                                       "01",
                                       "1.",
                                       ".5",
                                       "-",
                                       "1.e3",
                                       "9223372036854775807",
                                       "9223372036854775808",
                                       "-9223372036854775808",
                                       "-9223372036854775809",
                                       "123456789012345678901234567890.5",
                                       "tru",
                                       "truex",
                                       "nul",
                                       "[1,]",
                                       "{\"a\":1,}",
                                       "{,}",
                                       "[,1]",
                                       "{\"a\" 1}",
                                       "{\"a\":}",
                                       "{1:2}",
                                       "[1 2]",
                                       "[1]x",
                                       "[1] ",
                                       "",
                                       "   ",
                                       "\"abc",
                                       "\"\\",
                                       "\"\\x\"",
                                       "\"\\u12\"",
                                       "\"\\u12g4\"",
                                       "\"\\ud83d\\ude00\"",
                                       "\"\\ud83d\"",
                                       "\"\\ude00\"",
                                       "\"\\ud83d\\u0041\"",
                                       "\"\\ud83dx\"",
                                       "\"\\u0000\"",
                                       "{\"a\\u0000\":1}",
                                       "\"\\u00e9\\u20ac\"",
                                       "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
                                       "\"a\tb\"",
                                       "\"a\nb\"",
                                       "\"\x7f\"",
                                       "\"\xc3\xa9\"",
                                       "\"\xc0\x80\"",
                                       "\"\xc1\xbf\"",
                                       "\"\xe0\x80\x80\"",
                                       "\"\xed\xa0\x80\"",
                                       "\"\xef\xbf\xbf\"",
                                       "\"\xf0\x8f\xbf\xbf\"",
                                       "\"\xf4\x8f\xbf\xbf\"",
                                       "\"\xf4\x90\x80\x80\"",
                                       "\"\xf5\x80\x80\x80\"",
                                       "\"\xc3\"",
                                       "\"\xe2\x82\"",
                                       "\"\x80\"",
                                       "\xc3\xa9",
                                       "{\"a\":1,\"a\":2}",
                                       "{\"a\":{\"b\":1},\"b\":{\"b\":2}}",
                                       "{\"\\u0061\":1,\"a\":2}",
                                       "[\"\\u0061\", {\"\\n\": \"\\t\"}]",
                                       "\xef\xbb\xbf{}",
                                       "{}\x00",
                                       "\x00",
                                       "[1,\n2,\r\n3]\t",
                                       "[[[[[]]]]]",
                                       "{\"a\":[{\"b\":[{}]}]}"};
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        check_agree(docs[i]);
    char nul[] = "\"a\0b\"";
    char why[400] = "";
    CHECK(agree(nul, 5, why, sizeof(why)));
}

/* Every seed document under tests/fuzz/corpus/{json,manifest}, then each with one byte
 * replaced, inserted or removed at every offset (a deterministic walk, not random). */
static void test_corpus_and_mutations(void)
{
    const char *src = getenv("SBX_SRCDIR");
    if (!src) {
        printf("# SBX_SRCDIR not set; the corpus check needs the source tree\n");
        CHECK(src != NULL);
        return;
    }
    static const char *const dirs[] = {"tests/fuzz/corpus/json", "tests/fuzz/corpus/manifest"};
    static const char subst[] = "\"\\{}[]:,0-.eu \x80\xc3\xed\x00\x1f";
    size_t docs = 0, cases = 0, bad = 0;
    char first[600] = "";
    for (size_t d = 0; d < 2; d++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", src, dirs[d]);
        DIR *dir = opendir(path);
        CHECK(dir != NULL);
        if (!dir)
            continue;
        struct dirent *de;
        while ((de = readdir(dir))) {
            if (de->d_name[0] == '.')
                continue;
            char file[8192];
            snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
            struct sbx_buf b;
            sbx_buf_init(&b, SBX_BUF_NOLIMIT);
            if (sbx_fs_read_path(file, 1 << 20, &b, NULL) != 0 || b.len > 4096) {
                sbx_buf_release(&b);
                continue;
            }
            docs++;
            char *m = malloc(b.len + 2);
            for (size_t at = 0; at <= b.len; at++) {
                for (size_t s = 0; s < sizeof(subst) - 1; s++) {
                    for (int op = 0; op < 3; op++) {
                        size_t n = 0;
                        if (op == 0 && at < b.len) {
                            memcpy(m, b.data, b.len);
                            m[at] = subst[s];
                            n = b.len;
                        } else if (op == 1) {
                            memcpy(m, b.data, at);
                            m[at] = subst[s];
                            memcpy(m + at + 1, b.data + at, b.len - at);
                            n = b.len + 1;
                        } else if (op == 2 && s == 0 && at < b.len) {
                            memcpy(m, b.data, at);
                            memcpy(m + at, b.data + at + 1, b.len - at - 1);
                            n = b.len - 1;
                        } else {
                            continue;
                        }
                        char why[400];
                        cases++;
                        if (!agree(m, n, why, sizeof(why)) && bad++ == 0)
                            snprintf(first, sizeof(first),
                                     "%.100s, op %d at %zu with 0x%02x: %.390s", de->d_name, op, at,
                                     (unsigned char)subst[s], why);
                    }
                }
            }
            char why[400];
            cases++;
            if (!agree(b.data, b.len, why, sizeof(why)) && bad++ == 0)
                snprintf(first, sizeof(first), "%.100s: %.390s", de->d_name, why);
            free(m);
            sbx_buf_release(&b);
        }
        closedir(dir);
    }
    printf("# %zu seed documents, %zu cases\n", docs, cases);
    if (bad)
        printf("# %zu disagreements, the first: %s\n", bad, first);
    CHECK(docs > 0);
    CHECK_EQ_INT(bad, 0);
}

static void test_strings_at_every_offset(void)
{
    /* A special byte at each offset 0..40 of a long string, so it falls in every lane of the
     * eight-byte scan and in the byte-wise tail. */
    static const char *const specials[] = {"\\n",      "\\\"",           "\\\\", "\\u00e9",
                                           "\xc3\xa9", "\\ud83d\\ude00", "\t",   "\x01",
                                           "\xff",     "\xed\xa0\x80"};
    size_t bad = 0, total = 0;
    for (size_t s = 0; s < sizeof(specials) / sizeof(specials[0]); s++) {
        for (size_t off = 0; off < 41; off++) {
            for (size_t tail = 0; tail < 17; tail++) {
                char doc[200];
                int n = snprintf(doc, sizeof(doc), "[\"%.*s%s%.*s\"]", (int)off,
                                 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                 specials[s], (int)tail, "0123456789abcdefghij");
                char why[400];
                total++;
                if (!agree(doc, (size_t)n, why, sizeof(why)) && bad++ == 0)
                    printf("# '%s': %s\n", doc, why);
            }
        }
    }
    CHECK(total > 0);
    CHECK_EQ_INT(bad, 0);
}

static void test_exact_results(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    const char *doc = "[\"\\ud83d\\ude00\", \"a\\u00e9\\n\", -9223372036854775808, 2.5]";
    CHECK_OK(sbx_json_parse(doc, strlen(doc), NULL, &v, &err), &err);
    CHECK_EQ_STR(json_string_value(json_array_get(v, 0)), "\xf0\x9f\x98\x80");
    CHECK_EQ_STR(json_string_value(json_array_get(v, 1)), "a\xc3\xa9\n");
    CHECK(json_integer_value(json_array_get(v, 2)) == INT64_MIN);
    CHECK(json_real_value(json_array_get(v, 3)) == 2.5);
    json_decref(v);
    v = NULL;
    CHECK_ERR(sbx_json_parse("\"\\ud83d\"", 8, NULL, &v, &err), SBX_E_PARSE, &err,
              "invalid unicode '\\uD83D'");
    CHECK_ERR(sbx_json_parse("\"\xed\xa0\x80\"", 5, NULL, &v, &err), SBX_E_PARSE, &err,
              "unable to decode byte 0xed");
    CHECK_ERR(sbx_json_parse("\"a\x01\"", 4, NULL, &v, &err), SBX_E_PARSE, &err,
              "control character 0x1");
    CHECK_ERR(sbx_json_parse("9223372036854775808", 19, NULL, &v, &err), SBX_E_PARSE, &err,
              "too big integer");
    CHECK_ERR(sbx_json_parse("{\n \"a\": 1,\n \"a\": 2}", 19, NULL, &v, &err), SBX_E_INVAL, &err,
              "json line 3 column 4: duplicate object key");
    CHECK_ERR(sbx_json_parse("{\"\xc3\xa9\": 1, \"\xc3\xa9\": 2}", 18, NULL, &v, &err), SBX_E_INVAL,
              &err, "json line 1 column 12: duplicate object key");
    CHECK_ERR(sbx_json_parse("{\"a\\u0000\": 1}", 14, NULL, &v, &err), SBX_E_PARSE, &err,
              "json line 1 column 10: NUL byte in object key");
    CHECK_ERR(sbx_json_parse("[1\0]", 4, NULL, &v, &err), SBX_E_PARSE, &err, "']' expected");
    CHECK_ERR(sbx_json_parse("[1] [2]", 7, NULL, &v, &err), SBX_E_PARSE, &err,
              "json line 1 column 5: end of file expected");
    /* The depth limit counts brackets as the old pre-scan did: 3 levels pass a limit of 3. */
    struct sbx_json_limits three = {.max_depth = 3};
    CHECK_OK(sbx_json_parse("[{\"a\":[]}]", 10, &three, &v, &err), &err);
    json_decref(v);
    v = NULL;
    CHECK_ERR(sbx_json_parse("[{\"a\":[[]]}]", 12, &three, &v, &err), SBX_E_TOOBIG, &err,
              "depth limit of 3");
    /* Far past the reader's own recursion bound, whatever the caller allows. */
    struct sbx_json_limits huge = {.max_depth = 1 << 20};
    char *deep = malloc(200000);
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    CHECK_ERR(sbx_json_parse(deep, 200000, &huge, &v, &err), SBX_E_PARSE, &err,
              "maximum parsing depth reached");
    free(deep);
    CHECK(v == NULL);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_agrees_with_jansson);
    TAP_RUN(test_corpus_and_mutations);
    TAP_RUN(test_strings_at_every_offset);
    TAP_RUN(test_exact_results);
    return TAP_DONE();
}
