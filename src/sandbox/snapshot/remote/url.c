/* Remote snapshot stores: the store URL, and opening a store (its endpoint and the credentials
 * its URL refers to). */
#include <stdlib.h>
#include <string.h>

#include "sandbox/snapshot/remote/remote.h"
#include "sbx/b64.h"

#define URL_MAX 2048

int sbx_snapshot_remote_is_url(const char *s)
{
    return s && (strncmp(s, "s3://", 5) == 0 || strncmp(s, "gs://", 5) == 0 ||
                 strncmp(s, "azure://", 8) == 0);
}

void sbx__rstore_url_release(struct sbx__rstore_url *u)
{
    free(u->account);
    free(u->bucket);
    free(u->prefix);
    free(u->endpoint);
    free(u->region);
    free(u->key_env);
    free(u->secret_env);
    free(u->token_env);
    free(u->sas_env);
    free(u->name);
    memset(u, 0, sizeof(*u));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The percent-decoded s[0..n); NULL when an escape is bad or decodes to a control byte. */
static char *pct_decode(const char *s, size_t n)
{
    char *out = sbx_xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int a = i + 2 < n ? hexval(s[i + 1]) : -1;
            int b = a < 0 ? -1 : hexval(s[i + 2]);
            if (b < 0) {
                free(out);
                return NULL;
            }
            c = (unsigned char)(a * 16 + b);
            i += 2;
        }
        if (c < 0x20 || c == 0x7f) {
            free(out);
            return NULL;
        }
        *o++ = (char)c;
    }
    *o = 0;
    return out;
}

static int charset(const char *s, const char *extra)
{
    for (; *s; s++) {
        int ok = (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr(extra, *s);
        if (!ok)
            return 0;
    }
    return 1;
}

/* A bucket as S3 and GCS name them (3-63 of a-z 0-9 . -), an Azure container (3-63 of
 * a-z 0-9 -) or account (3-24 of a-z 0-9). */
static int check_names(struct sbx__rstore_url *u, struct sbx_error *err)
{
    size_t n = strlen(u->bucket);
    int azure = u->kind == SBX__RSTORE_AZURE;
    if (n < 3 || n > 63 || !charset(u->bucket, azure ? "-" : ".-") || u->bucket[0] == '-' ||
        u->bucket[0] == '.')
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a valid %s name", u->bucket,
                             azure ? "container" : "bucket");
    if (azure) {
        size_t a = strlen(u->account);
        if (a < 3 || a > 24 || !charset(u->account, ""))
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a valid storage account name",
                                 u->account);
    }
    return 0;
}

/* A prefix of plain components (letters, digits, . _ -), none empty, "." or "..": it goes into
 * object keys and request paths as it is. */
static int check_prefix(const char *p, struct sbx_error *err)
{
    const char *c = p;
    while (*c) {
        size_t k = strcspn(c, "/");
        int ok = k > 0 && !(k == 1 && c[0] == '.') && !(k == 2 && c[0] == '.' && c[1] == '.');
        for (size_t i = 0; ok && i < k; i++) {
            char ch = c[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        }
        if (!ok)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "prefix '%s': components are letters, digits, '.', '_' and '-'",
                                 p);
        c += k;
        if (*c == '/')
            c++;
    }
    return 0;
}

/* An endpoint is a plain http(s) URL: no user:password@, no query, no fragment. */
static int check_endpoint(char *ep, struct sbx_error *err)
{
    size_t n = strlen(ep);
    while (n && ep[n - 1] == '/')
        ep[--n] = 0;
    const char *host = strncmp(ep, "http://", 7) == 0    ? ep + 7
                       : strncmp(ep, "https://", 8) == 0 ? ep + 8
                                                         : NULL;
    if (!host || !*host || host[0] == '/' || strpbrk(ep, "@?# \\"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "endpoint '%s' is not a plain http(s) URL (no user@, query or "
                             "fragment)",
                             ep);
    return 0;
}

static int is_env_name(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++) {
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    }
    return 1;
}

static int set_param(struct sbx__rstore_url *u, const char *k, size_t kn, char *v,
                     struct sbx_error *err)
{
    static const char *const names[] = {"endpoint",  "region",  "key_env", "secret_env",
                                        "token_env", "sas_env", NULL};
    char **slots[] = {&u->endpoint,   &u->region,    &u->key_env,
                      &u->secret_env, &u->token_env, &u->sas_env};
    for (size_t i = 0; names[i]; i++) {
        if (strlen(names[i]) != kn || strncmp(names[i], k, kn) != 0)
            continue;
        if (*slots[i]) {
            free(v);
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is given twice", names[i]);
        }
        *slots[i] = v;
        if (i >= 2 && !is_env_name(v))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "%s names an environment variable, '%s' is not one (the URL "
                                 "never holds a credential)",
                                 names[i], v);
        if (i == 1 && !charset(v, "-"))
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a region", v);
        if ((i == 3 || i == 4) && u->kind == SBX__RSTORE_AZURE)
            return sbx_error_set(err, SBX_E_INVAL, 0, "%s is for s3:// and gs:// stores", names[i]);
        if (i == 5 && u->kind != SBX__RSTORE_AZURE)
            return sbx_error_set(err, SBX_E_INVAL, 0, "sas_env is for azure:// stores");
        return i == 0 ? check_endpoint(v, err) : 0;
    }
    free(v);
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "unknown parameter '%.*s' (endpoint, region, key_env, secret_env, "
                         "token_env, sas_env)",
                         (int)(kn > 64 ? 64 : kn), k);
}

static int parse_query(struct sbx__rstore_url *u, const char *q, struct sbx_error *err)
{
    while (*q) {
        size_t n = strcspn(q, "&");
        const char *eq = memchr(q, '=', n);
        if (!eq)
            return sbx_error_set(err, SBX_E_INVAL, 0, "parameter '%.*s' has no value",
                                 (int)(n > 64 ? 64 : n), q);
        char *v = pct_decode(eq + 1, (size_t)(q + n - eq - 1));
        if (!v || !*v) {
            free(v);
            return sbx_error_set(err, SBX_E_INVAL, 0, "parameter '%.*s' has a bad value",
                                 (int)(eq - q), q);
        }
        int rc = set_param(u, q, (size_t)(eq - q), v, err);
        if (rc < 0)
            return rc;
        q += n;
        if (*q == '&')
            q++;
    }
    return 0;
}

/* "first/second/rest" of the path: the bucket (and, for Azure, the account first). */
static int split_path(struct sbx__rstore_url *u, const char *p, size_t n, struct sbx_error *err)
{
    char *path = pct_decode(p, n);
    if (!path)
        return sbx_error_set(err, SBX_E_INVAL, 0, "bad escape or control character");
    char *rest = path;
    if (u->kind == SBX__RSTORE_AZURE) {
        size_t k = strcspn(rest, "/");
        u->account = sbx_xstrndup(rest, k);
        rest += k + (rest[k] == '/');
    }
    size_t k = strcspn(rest, "/");
    u->bucket = sbx_xstrndup(rest, k);
    rest += k + (rest[k] == '/');
    size_t pl = strlen(rest);
    while (pl && rest[pl - 1] == '/')
        pl--;
    u->prefix = pl ? sbx_xasprintf("%.*s/", (int)pl, rest) : sbx_xstrdup("");
    free(path);
    if (!u->bucket[0] || (u->account && !u->account[0]))
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s",
                             u->kind == SBX__RSTORE_AZURE
                                     ? "an azure store is azure://ACCOUNT/CONTAINER[/PREFIX]"
                                     : "no bucket (s3://BUCKET[/PREFIX])");
    int rc = check_names(u, err);
    if (rc == 0 && pl) {
        char *pre = sbx_xstrndup(u->prefix, pl);
        rc = check_prefix(pre, err);
        free(pre);
    }
    return rc;
}

int sbx__rstore_url_parse(const char *url, struct sbx__rstore_url *out, struct sbx_error *err)
{
    struct sbx__rstore_url u = {0};
    int rc;
    if (strlen(url) > URL_MAX) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "longer than %d bytes", URL_MAX);
        goto out;
    }
    const char *p;
    if (strncmp(url, "s3://", 5) == 0) {
        u.kind = SBX__RSTORE_S3;
        p = url + 5;
    } else if (strncmp(url, "gs://", 5) == 0) {
        u.kind = SBX__RSTORE_GCS;
        p = url + 5;
    } else if (strncmp(url, "azure://", 8) == 0) {
        u.kind = SBX__RSTORE_AZURE;
        p = url + 8;
    } else {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "not s3://, gs:// or azure://");
        goto out;
    }
    if (strchr(url, '#') || strchr(p, '@')) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "no user@ or fragment (credentials are given by reference)");
        goto out;
    }
    size_t n = strcspn(p, "?");
    if ((rc = split_path(&u, p, n, err)) < 0)
        goto out;
    if (p[n] == '?' && (rc = parse_query(&u, p + n + 1, err)) < 0)
        goto out;
    u.name = sbx_xstrndup(url, (size_t)(p - url) + n);
    *out = u;
    return 0;
out:
    sbx_error_prefix(err, "snapshot store '%.*s'", (int)strcspn(url, "?"), url);
    sbx__rstore_url_release(&u);
    return rc;
}

/* ---- opening a store ---- */

/* The secret in variable var (the URL's *_env or the default), NULL when unset or empty.
 * Set but needed and missing is the caller's check. */
static struct sbx_secret *env_secret(const char *var, const char *what)
{
    const char *v = getenv(var);
    return v && *v ? sbx_secret_new(what, v, strlen(v)) : NULL;
}

static const char *first_env(const char *a, const char *b)
{
    const char *v = a ? getenv(a) : NULL;
    if (v && *v)
        return v;
    v = b ? getenv(b) : NULL;
    return v && *v ? v : NULL;
}

static int open_s3(struct sbx_snapshot_remote *r, struct sbx_error *err)
{
    struct sbx__rstore_url *u = &r->u;
    const char *kv = u->key_env ? u->key_env : "AWS_ACCESS_KEY_ID";
    const char *sv = u->secret_env ? u->secret_env : "AWS_SECRET_ACCESS_KEY";
    const char *tv = u->token_env ? u->token_env : "AWS_SESSION_TOKEN";
    r->key = env_secret(kv, "access key id");
    r->secret = env_secret(sv, "secret access key");
    r->token = env_secret(tv, "session token");
    if ((u->key_env || u->secret_env || u->token_env) && (!r->key || !r->secret))
        return sbx_error_set(err, SBX_E_INVAL, 0, "the variable '%s' is not set",
                             !r->key ? kv : sv);
    if (!r->key != !r->secret)
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' and '%s' are set together or not at all",
                             kv, sv);
    const char *region = u->region ? u->region : first_env("AWS_REGION", "AWS_DEFAULT_REGION");
    if (!region)
        region = u->kind == SBX__RSTORE_GCS ? "auto" : "us-east-1";
    if (!charset(region, "-"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a region", region);
    r->region = sbx_xstrdup(region);
    const char *ep = u->endpoint;
    char *envep = NULL;
    if (!ep && u->kind == SBX__RSTORE_S3 && first_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")) {
        envep = sbx_xstrdup(first_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"));
        int rc = check_endpoint(envep, err);
        if (rc < 0) {
            free(envep);
            return rc;
        }
        ep = envep;
    }
    if (ep) {
        /* an S3-compatible server: path-style addressing, as rclone's force_path_style */
        r->base = sbx_xstrdup(ep);
        r->path0 = sbx_xasprintf("/%s", u->bucket);
    } else if (u->kind == SBX__RSTORE_GCS) {
        r->base = sbx_xstrdup("https://storage.googleapis.com");
        r->path0 = sbx_xasprintf("/%s", u->bucket);
    } else {
        /* AWS: virtual-hosted addressing (path-style is deprecated there) */
        r->base = sbx_xasprintf("https://%s.s3.%s.amazonaws.com", u->bucket, r->region);
        r->path0 = sbx_xstrdup("");
    }
    free(envep);
    return 0;
}

static int open_azure(struct sbx_snapshot_remote *r, struct sbx_error *err)
{
    struct sbx__rstore_url *u = &r->u;
    const char *kv = u->key_env ? u->key_env : "AZURE_STORAGE_KEY";
    const char *sv = u->sas_env ? u->sas_env : "AZURE_STORAGE_SAS_TOKEN";
    struct sbx_secret *key = env_secret(kv, "account key");
    r->sas = env_secret(sv, "shared access signature");
    int rc = 0;
    if ((u->key_env && !key) || (u->sas_env && !r->sas)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "the variable '%s' is not set",
                           u->key_env && !key ? kv : sv);
    } else if (key && !r->sas) {
        struct sbx_buf b;
        sbx_buf_init(&b, 256);
        const char *kval = sbx_secret_reveal(key, NULL);
        if (sbx_b64_decode(kval, strlen(kval), &b, err) < 0) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "the account key in '%s' is not base64", kv);
        } else {
            r->account_key = sbx_secret_new("account key", b.data, b.len);
        }
        sbx_buf_release(&b);
    } else if (r->sas) {
        const char *s = sbx_secret_reveal(r->sas, NULL);
        if (*s == '?') {
            struct sbx_secret *t = sbx_secret_new("shared access signature", s + 1, strlen(s + 1));
            sbx_secret_free(r->sas);
            r->sas = t;
        }
        if (strpbrk(sbx_secret_reveal(r->sas, NULL), " #\r\n"))
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "the SAS in '%s' is not a URL query", sv);
    }
    sbx_secret_free(key);
    if (rc < 0)
        return rc;
    if (u->endpoint) {
        /* Azurite and other emulators: the account is the first path component */
        r->base = sbx_xstrdup(u->endpoint);
    } else {
        r->base = sbx_xasprintf("https://%s.blob.core.windows.net", u->account);
    }
    r->path0 = sbx_xasprintf("/%s", u->bucket);
    r->region = sbx_xstrdup("");
    return 0;
}

int sbx_snapshot_remote_open(const char *url, struct sbx_snapshot_remote **out,
                             struct sbx_error *err)
{
    struct sbx_snapshot_remote *r = sbx_xcalloc(1, sizeof(*r));
    int rc = sbx__rstore_url_parse(url, &r->u, err);
    if (rc < 0) {
        free(r);
        return rc;
    }
    rc = r->u.kind == SBX__RSTORE_AZURE ? open_azure(r, err) : open_s3(r, err);
    if (rc < 0) {
        sbx_error_prefix(err, "snapshot store '%s'", r->u.name);
        sbx_snapshot_remote_free(r);
        return rc;
    }
    /* The Host header and the path part of the base ("http://h:1/devstoreaccount1"). */
    const char *h = strstr(r->base, "://") + 3;
    size_t hn = strcspn(h, "/");
    r->host = sbx_xstrndup(h, hn);
    if (h[hn]) {
        char *p0 = sbx_xasprintf("%s%s", h + hn, r->path0);
        free(r->path0);
        r->path0 = p0;
        r->base[h + hn - r->base] = 0;
    }
    *out = r;
    return 0;
}

void sbx_snapshot_remote_free(struct sbx_snapshot_remote *r)
{
    if (!r)
        return;
    sbx__rstore_url_release(&r->u);
    free(r->base);
    free(r->host);
    free(r->path0);
    free(r->region);
    sbx_secret_free(r->key);
    sbx_secret_free(r->secret);
    sbx_secret_free(r->token);
    sbx_secret_free(r->account_key);
    sbx_secret_free(r->sas);
    free(r);
}

const char *sbx_snapshot_remote_name(const struct sbx_snapshot_remote *r)
{
    return r->u.name;
}
