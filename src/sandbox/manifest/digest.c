/* sbx: what a provider asks of the manifest it materialises or snapshots, from the public view
 * of it only: a stable fingerprint of the whole manifest (recorded in a session state and in the
 * snapshots of its workspace), and the paths of its ephemeral entries (what a snapshot leaves
 * out and a start from a snapshot materialises again). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sandbox/manifest/internal.h"
#include "sbx/hash.h"
#include "sbx/manifest.h"
#include "sbx/strv.h"

/* One length-prefixed field: unambiguous however the bytes look. NULL and "" differ. */
static int digest_field(struct sbx_sha256 *h, const void *p, size_t n, int present,
                        struct sbx_error *err)
{
    uint8_t hdr[9];
    uint64_t len = present ? (uint64_t)n : 0;
    hdr[0] = present ? 1 : 0;
    for (int i = 0; i < 8; i++)
        hdr[1 + i] = (uint8_t)(len >> (56 - 8 * i));
    int rc = sbx_sha256_update(h, hdr, sizeof(hdr), err);
    if (rc == 0 && present && n)
        rc = sbx_sha256_update(h, p, n, err);
    return rc;
}

static int digest_str(struct sbx_sha256 *h, const char *s, struct sbx_error *err)
{
    return digest_field(h, s, s ? strlen(s) : 0, s != NULL, err);
}

static int digest_int(struct sbx_sha256 *h, uint64_t v, struct sbx_error *err)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return digest_field(h, buf, (size_t)n, 1, err);
}

/* A file's bytes count by their SHA-256, so a manifest whose files a session state records by
 * digest only (SBX_MANIFEST_CONTENT_DIGESTS) has the digest of the one it came from. */
static int digest_content(struct sbx_sha256 *h, const struct sbx_manifest_entry *e,
                          struct sbx_error *err)
{
    uint8_t d[SBX_SHA256_LEN];
    int rc = 0;
    if (!e->content && !e->content_sha256)
        return digest_field(h, NULL, 0, 0, err);
    if (e->content_sha256) {
        for (size_t i = 0; i < SBX_SHA256_LEN; i++) {
            const char *x = e->content_sha256 + 2 * i;
            d[i] = (uint8_t)(((x[0] <= '9' ? x[0] - '0' : x[0] - 'a' + 10) << 4) |
                             (x[1] <= '9' ? x[1] - '0' : x[1] - 'a' + 10));
        }
    } else if ((rc = sbx_sha256(e->content, e->content_len, d, err)) < 0) {
        return rc;
    }
    if ((rc = digest_int(h, e->content_len, err)) < 0)
        return rc;
    return digest_field(h, d, sizeof(d), 1, err);
}

int sbx__manifest_digest(const struct sbx_manifest *m, char out[SBX_SHA256_HEX_LEN + 1],
                         struct sbx_error *err)
{
    struct sbx_sha256 *h = NULL;
    uint8_t d[SBX_SHA256_LEN];
    int rc = sbx_sha256_new(&h, err);
    if (rc < 0)
        return rc;
    rc = digest_str(h, "sbx-manifest-digest-v2", err);
    if (rc == 0)
        rc = digest_str(h, sbx_manifest_root(m), err);
    /* Only when set, so the digests of manifests without it stay what they were. */
    if (rc == 0 && sbx_manifest_root_owner(m) && (rc = digest_str(h, "root_owner", err)) == 0)
        rc = digest_str(h, sbx_manifest_root_owner(m), err);
    size_t n = sbx_manifest_entry_count(m);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        if ((rc = digest_str(h, sbx_entry_type_name(e->type), err)) < 0 ||
            (rc = digest_str(h, e->path, err)) < 0 || (rc = digest_int(h, e->mode, err)) < 0 ||
            (rc = digest_int(h, (uint64_t)e->ephemeral, err)) < 0 ||
            (rc = digest_str(h, e->group, err)) < 0 || (rc = digest_content(h, e, err)) < 0 ||
            (rc = digest_str(h, e->src, err)) < 0 || (rc = digest_str(h, e->url, err)) < 0 ||
            (rc = digest_str(h, e->ref, err)) < 0 || (rc = digest_str(h, e->subpath, err)) < 0 ||
            (rc = digest_str(h, e->mount_path, err)) < 0)
            break;
    }
    /* Environment: names, plain values and host references; a secret counts by its name only,
     * so the digest reveals nothing about it. */
    size_t ne = sbx_manifest_env_count(m);
    for (size_t i = 0; rc == 0 && i < ne; i++) {
        const struct sbx_manifest_env *v = sbx_manifest_env_at(m, i);
        if ((rc = digest_str(h, v->name, err)) < 0 || (rc = digest_str(h, v->value, err)) < 0 ||
            (rc = digest_str(h, v->host_env, err)) < 0)
            break;
        rc = digest_int(h, v->secret != NULL, err);
    }
    const struct sbx_strv *users = sbx_manifest_users(m);
    for (size_t i = 0; rc == 0 && users && i < users->n; i++)
        rc = digest_str(h, users->v[i], err);
    size_t ng = sbx_manifest_group_count(m);
    for (size_t i = 0; rc == 0 && i < ng; i++) {
        const struct sbx_manifest_group *g = sbx_manifest_group_at(m, i);
        rc = digest_str(h, g->name, err);
        for (size_t k = 0; rc == 0 && g->users && k < g->users->n; k++)
            rc = digest_str(h, g->users->v[k], err);
    }
    if (rc == 0)
        rc = sbx_sha256_final(h, d, err);
    sbx_sha256_free(h);
    if (rc == 0)
        sbx_hex(d, sizeof(d), out);
    return rc;
}

/* ---- ephemeral entries ---------------------------------------------------------------------- */

int sbx__manifest_path_under(const char *path, const struct sbx_strv *tops)
{
    for (size_t k = 0; k < tops->n; k++) {
        size_t n = strlen(tops->v[k]);
        if (strncmp(path, tops->v[k], n) == 0 && (path[n] == '\0' || path[n] == '/'))
            return 1;
    }
    return 0;
}

void sbx__manifest_ephemeral_paths(const struct sbx_manifest *m, struct sbx_strv *out)
{
    size_t n = m ? sbx_manifest_entry_count(m) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        if (!e->ephemeral)
            continue;
        if (!sbx__manifest_path_under(e->path, out))
            sbx_strv_push(out, e->path);
    }
}
