/* sbx: the keys of a manifest document, shared by every file that reads one: camelCase keys
 * read as snake_case (the JS SDK's spelling of the Python SDK's fields), and how a name from
 * outside (a key, a path) is shown in a message. The keys every entry may carry are
 * SBX__MANIFEST_COMMON_KEYS (keys.h). Nothing here knows the manifest's layout: the loader,
 * the environment, sources and mounts all sit above it. */
#include <string.h>

#include "sandbox/manifest/keys.h"
#include "sbx/json.h"
#include "sbx/path.h"

/* Copy obj with camelCase keys renamed to snake_case ("mountPath" -> "mount_path"), so a
 * manifest written by the JS SDK reads like one written by the Python SDK. Both spellings of
 * one field is an error. *out: new reference. */
int sbx__manifest_snake_keys(const json_t *obj, json_t **out, struct sbx_error *err)
{
    json_t *res = json_object();
    const char *key;
    size_t klen;
    json_t *v;
    if (!res)
        SBX_BUG("out of memory");
    json_object_keylen_foreach((json_t *)obj, key, klen, v)
    {
        char buf[128];
        size_t o = 0;
        int changed = 0;
        for (size_t i = 0; i < klen && o + 2 < sizeof(buf); i++) {
            unsigned char c = (unsigned char)key[i];
            if (c >= 'A' && c <= 'Z') {
                if (o)
                    buf[o++] = '_';
                buf[o++] = (char)(c - 'A' + 'a');
                changed = 1;
            } else {
                buf[o++] = (char)c;
            }
        }
        if (!changed || o + 2 >= sizeof(buf)) {
            if (json_object_getn(res, key, klen)) {
                char q[160];
                sbx__manifest_quote_name(key, klen, q, sizeof(q));
                json_decref(res);
                return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' is given twice", q);
            }
            json_object_setn_nocheck(res, key, klen, v);
            continue;
        }
        if (json_object_getn(obj, buf, o) || json_object_getn(res, buf, o)) {
            char q[160];
            sbx__manifest_quote_name(key, klen, q, sizeof(q));
            json_decref(res);
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' repeats '%.*s'", q, (int)o, buf);
        }
        json_object_setn_nocheck(res, buf, o, v);
    }
    *out = res;
    return 0;
}

/* A printable rendering of a name from outside for messages: control bytes, NUL and invalid
 * UTF-8 become \xNN, long names are cut with "...". */
void sbx__manifest_quote_name(const char *s, size_t len, char *out, size_t outsz)
{
    size_t o = 0;
    size_t i = 0;
    while (i < len && o + 8 < outsz) {
        unsigned char c = (unsigned char)s[i];
        size_t n = 1;
        if (c >= 0x80) {
            n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
            if (i + n > len || !sbx_utf8_valid(s + i, n))
                n = 0;
        }
        if (c < 0x20 || c == 0x7f || n == 0) {
            static const char hex[] = "0123456789abcdef";
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
            i++;
            continue;
        }
        if (o + n + 4 >= outsz)
            break;
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
    }
    if (i < len && o + 4 <= outsz) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

/* Rewrite a path-module message "path '<p>' <rule>" to "path <rule>": the caller names the
 * entry already. */
void sbx__manifest_strip_path_quote(struct sbx_error *err)
{
    if (!err || strncmp(err->msg, "path '", 6) != 0)
        return;
    char *last = NULL;
    for (char *p = strstr(err->msg + 6, "' "); p; p = strstr(p + 1, "' "))
        last = p;
    if (!last)
        return;
    memmove(err->msg + 5, last + 2, strlen(last + 2) + 1);
}
