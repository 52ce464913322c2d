/* The scrubber (sbx/scrub.h): secret values out of text and JSON. */
#include <string.h>

#include "sbx/buf.h"
#include "sbx/scrub.h"

/* The length of the longest secret starting at s[0..n), or 0. */
static size_t match_at(const struct sbx_strv *secrets, const char *s, size_t n)
{
    size_t best = 0;
    for (size_t k = 0; k < secrets->n; k++) {
        size_t sl = strlen(secrets->v[k]);
        if (sl >= SBX_SCRUB_MIN && sl <= n && sl > best && memcmp(s, secrets->v[k], sl) == 0)
            best = sl;
    }
    return best;
}

char *sbx_scrub_text(const struct sbx_strv *secrets, const char *text, size_t n, const char *mark,
                     size_t *outn)
{
    int hit = 0;
    for (size_t k = 0; secrets && k < secrets->n && !hit; k++) {
        size_t sl = strlen(secrets->v[k]);
        hit = sl >= SBX_SCRUB_MIN && memmem(text, n, secrets->v[k], sl) != NULL;
    }
    if (!hit)
        return NULL;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < n;) {
        size_t m = match_at(secrets, text + i, n - i);
        int rc = m ? sbx_buf_adds(&b, mark ? mark : SBX_SCRUB_MARK, NULL)
                   : sbx_buf_add(&b, text + i, 1, NULL);
        if (rc < 0)
            SBX_BUG("unbounded buffer refused data");
        i += m ? m : 1;
    }
    return sbx_buf_detach(&b, outn);
}

/* Whether a secret shows in text [s, s + n). */
static int has_secret_text(const struct sbx_strv *secrets, const char *s, size_t n)
{
    for (size_t k = 0; k < secrets->n; k++) {
        size_t sl = strlen(secrets->v[k]);
        if (sl >= SBX_SCRUB_MIN && sl <= n && memmem(s, n, secrets->v[k], sl))
            return 1;
    }
    return 0;
}

/* Whether a secret shows in any string or key of v: most documents have none, and then the
 * scrub is the document itself, found without building a copy. (A subtree that has one is
 * walked again by each level of the copy: documents are a few levels deep.) */
static int has_secret(const struct sbx_strv *secrets, const json_t *v)
{
    size_t i;
    const char *k;
    json_t *e;
    if (json_is_string(v))
        return has_secret_text(secrets, json_string_value(v), json_string_length(v));
    if (json_is_array(v)) {
        json_array_foreach(v, i, e)
        {
            if (has_secret(secrets, e))
                return 1;
        }
    } else if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, e)
        {
            if (has_secret_text(secrets, k, strlen(k)) || has_secret(secrets, e))
                return 1;
        }
    }
    return 0;
}

json_t *sbx_scrub_json(const struct sbx_strv *secrets, const json_t *v, const char *mark)
{
    if (!secrets || !secrets->n || !has_secret(secrets, v))
        return json_incref((json_t *)v);
    if (json_is_string(v)) {
        size_t n = 0;
        char *s = sbx_scrub_text(secrets, json_string_value(v), json_string_length(v), mark, &n);
        if (!s)
            return json_incref((json_t *)v);
        json_t *r = json_stringn_nocheck(s, n);
        free(s);
        return r;
    }
    int changed = 0;
    json_t *out = NULL;
    size_t i;
    json_t *e;
    if (json_is_array(v)) {
        out = json_array();
        json_array_foreach(v, i, e)
        {
            json_t *c = sbx_scrub_json(secrets, e, mark);
            changed |= c != e;
            json_array_append_new(out, c);
        }
    } else if (json_is_object(v)) {
        const char *k;
        out = json_object();
        json_object_foreach((json_t *)v, k, e)
        {
            char *sk = sbx_scrub_text(secrets, k, strlen(k), mark, NULL);
            json_t *c = sbx_scrub_json(secrets, e, mark);
            changed |= c != e || sk;
            json_object_set_new_nocheck(out, sk ? sk : k, c);
            free(sk);
        }
    } else {
        return json_incref((json_t *)v);
    }
    if (!changed) {
        json_decref(out);
        return json_incref((json_t *)v);
    }
    return out;
}

size_t sbx_scrub_tail(const struct sbx_strv *secrets, const char *text, size_t n)
{
    size_t best = 0;
    for (size_t k = 0; secrets && k < secrets->n; k++) {
        size_t sl = strlen(secrets->v[k]);
        if (sl < SBX_SCRUB_MIN)
            continue;
        for (size_t p = sl - 1; p >= SBX_SCRUB_MIN - 1 && p > best; p--) {
            if (n >= p && memcmp(text + n - p, secrets->v[k], p) == 0) {
                best = p;
                break;
            }
        }
    }
    return best;
}
