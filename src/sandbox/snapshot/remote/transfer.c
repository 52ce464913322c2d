/* Push, pull and list between the local snapshot store and a remote one. The bucket's layout
 * is the local store's: PREFIX/blobs/xx/<hex>, PREFIX/trees/<hex>.json (the tree document as
 * the local store has it), and PREFIX/headers/<hex>.json (its header alone), which is written
 * last and is what makes a snapshot visible to ls and to pull by prefix. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/snapshot/internal.h"
#include "sandbox/snapshot/remote/remote.h"
#include "sbx/json.h"
#include "sbx/strv.h"

#define TREE_DOC_MAX  ((size_t)512 << 20)
#define HEADER_MAX    65536
#define LIST_PAGE_MAX ((size_t)4 << 20)
#define LIST_KEYS_MAX 1000000
/* From this many blobs a push lists the bucket's blobs once instead of asking for each. */
#define LIST_FROM 1000
/* One PUT carries at most 5 GiB on S3 (and here on Azure too): larger blobs would need
 * multipart uploads. */
#define PUT_MAX ((uint64_t)5 << 30)

/* ---- the work list, run by a few threads ---- */

/* What a push knows of a blob before it asks: the listing may have said. */
enum blob_known { BLOB_ASK = 0, BLOB_THERE, BLOB_ABSENT };

struct blob_job {
    const char *hex;
    uint64_t size;
    enum blob_known known;
};

struct pool {
    struct sbx_snapshot_store *st;
    struct sbx_snapshot_remote *r;
    struct blob_job *jobs;
    size_t n, next;
    pthread_mutex_t mu;
    int failed;
    struct sbx_error err;
    struct sbx_snapshot_transfer_stats stats;
    struct sbx_strv created; /* pull: blobs this pull added to the local store */
    struct sbx_progress_sink progress;
    const char *step;
    size_t done;
    int (*one)(struct pool *p, void **conn, const struct blob_job *j, struct sbx_error *err);
};

static void *worker(void *arg)
{
    struct pool *p = arg;
    void *conn = NULL;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t i = p->next++;
        int stop = p->failed || i >= p->n;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        struct sbx_error err = SBX_ERROR_INIT;
        int rc = p->one(p, &conn, &p->jobs[i], &err);
        pthread_mutex_lock(&p->mu);
        if (rc < 0 && !p->failed) {
            p->failed = 1;
            p->err = err;
        } else if (rc == 0) {
            char what[13];
            snprintf(what, sizeof(what), "%.12s", p->jobs[i].hex);
            p->done++;
            sbx_progress_report(&p->progress, p->step, what, p->done, p->n, 0);
        }
        pthread_mutex_unlock(&p->mu);
        if (rc < 0)
            break;
    }
    sbx__rstore_conn_free(conn);
    return NULL;
}

static int run_pool(struct pool *p, struct sbx_error *err)
{
    pthread_t t[SBX_SNAPSHOT_REMOTE_JOBS];
    size_t nt = p->n < SBX_SNAPSHOT_REMOTE_JOBS ? p->n : SBX_SNAPSHOT_REMOTE_JOBS, started = 0;
    for (; started < nt; started++) {
        if (pthread_create(&t[started], NULL, worker, p) != 0)
            break;
    }
    if (!started && nt)
        worker(p); /* no thread to be had: the work is done here, one at a time */
    for (size_t i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    sbx_progress_end(&p->progress, p->step, p->done, p->n);
    if (p->failed) {
        *err = p->err;
        return -(int)p->err.code;
    }
    return 0;
}

static int job_cmp(const void *a, const void *b)
{
    return strcmp(((const struct blob_job *)a)->hex, ((const struct blob_job *)b)->hex);
}

/* The distinct blobs of a tree (sorted by digest: a million files cost one sort). */
static struct blob_job *tree_blobs(const struct snap_tree *t, size_t *n)
{
    struct blob_job *v = sbx_xcalloc(t->n + 1, sizeof(*v));
    size_t k = 0, u = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i].type == SNAP_FILE)
            v[k++] = (struct blob_job){t->v[i].sha, t->v[i].size};
    }
    if (k)
        qsort(v, k, sizeof(*v), job_cmp);
    for (size_t i = 0; i < k; i++) {
        if (u == 0 || strcmp(v[u - 1].hex, v[i].hex) != 0)
            v[u++] = v[i];
    }
    *n = u;
    return v;
}

static char *blob_key(struct sbx_snapshot_remote *r, const char *hex)
{
    return sbx_xasprintf("%sblobs/%.2s/%s", r->u.prefix, hex, hex);
}

/* ---- requests ---- */

static int send_ok(struct sbx_snapshot_remote *r, void **conn, const struct sbx__rreq *q,
                   struct sbx__rresp *resp, const char *what, struct sbx_error *err)
{
    int rc = sbx__rstore_send(r, conn, q, resp, err);
    if (rc == 0 && resp->status / 100 != 2)
        rc = sbx__rstore_fail(r, resp, what, err);
    return rc;
}

/* One page of a listing under sub ("headers/"): the names after PREFIX+sub into out; *token
 * (owned) is the next page's marker or NULL. */
static int list_page(struct sbx_snapshot_remote *r, void **conn, const char *sub, char **token,
                     struct sbx_strv *out, struct sbx_error *err)
{
    int azure = r->u.kind == SBX__RSTORE_AZURE;
    char *prefix = sbx_xasprintf("%s%s", r->u.prefix, sub);
    char *qp = sbx_xasprintf("prefix=%s", prefix);
    char *qt =
            *token ? sbx_xasprintf("%s=%s", azure ? "marker" : "continuation-token", *token) : NULL;
    const char *q[6] = {qp};
    size_t nq = 1;
    if (azure) {
        q[nq++] = "restype=container";
        q[nq++] = "comp=list";
        /* S3's page size: Azure's default of 5000 could outgrow LIST_PAGE_MAX */
        q[nq++] = "maxresults=1000";
    } else {
        q[nq++] = "list-type=2";
    }
    if (qt)
        q[nq++] = qt;
    struct sbx__rreq rq = {"GET", NULL, q, NULL, 0, -1, 0, NULL, LIST_PAGE_MAX, NULL, NULL};
    struct sbx__rresp resp;
    sbx_buf_init(&resp.body, LIST_PAGE_MAX);
    char what[128];
    snprintf(what, sizeof(what), "cannot list '%s'", r->u.name);
    int rc = send_ok(r, conn, &rq, &resp, what, err);
    free(*token);
    *token = NULL;
    if (rc == 0) {
        const char *open = azure ? "<Name>" : "<Key>", *close = azure ? "</Name>" : "</Key>";
        const char *s = sbx_buf_cstr(&resp.body);
        size_t pl = strlen(prefix);
        while ((s = strstr(s, open))) {
            s += strlen(open);
            const char *e = strstr(s, close);
            if (!e)
                break;
            if ((size_t)(e - s) > pl && strncmp(s, prefix, pl) == 0 && out->n < LIST_KEYS_MAX)
                sbx_strv_push_take(out, sbx_xstrndup(s + pl, (size_t)(e - s) - pl));
            s = e;
        }
        const char *nt = azure ? "<NextMarker>" : "<NextContinuationToken>";
        const char *ntc = azure ? "</NextMarker>" : "</NextContinuationToken>";
        const char *b = strstr(sbx_buf_cstr(&resp.body), nt);
        const char *e = b ? strstr(b, ntc) : NULL;
        if (b && e && e > b + strlen(nt))
            *token = sbx_xstrndup(b + strlen(nt), (size_t)(e - b - strlen(nt)));
    }
    sbx_buf_release(&resp.body);
    free(prefix);
    free(qp);
    free(qt);
    return rc;
}

/* Every name under sub, up to LIST_KEYS_MAX; *complete (may be NULL): 0 when that limit cut
 * the listing short. */
static int list_keys(struct sbx_snapshot_remote *r, void **conn, const char *sub,
                     struct sbx_strv *out, int *complete, struct sbx_error *err)
{
    char *token = NULL;
    int rc;
    do {
        rc = list_page(r, conn, sub, &token, out, err);
    } while (rc == 0 && token && out->n < LIST_KEYS_MAX);
    if (complete)
        *complete = !token;
    free(token);
    return rc;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A push of many blobs: one listing of the bucket's blobs says which it has, instead of a HEAD
 * each. A listing that fails (a key without the right to list, a server that cannot page)
 * changes nothing: every blob is asked for as usual. */
static void mark_listed(struct sbx_snapshot_remote *r, void **conn, struct blob_job *jobs, size_t n)
{
    struct sbx_strv keys;
    struct sbx_error ignored = SBX_ERROR_INIT;
    int complete = 0;
    sbx_strv_init(&keys);
    if (list_keys(r, conn, "blobs/", &keys, &complete, &ignored) == 0) {
        if (keys.n)
            qsort(keys.v, keys.n, sizeof(char *), str_cmp);
        for (size_t i = 0; i < n; i++) {
            char name[SBX_SHA256_HEX_LEN + 4];
            const char *key = name;
            snprintf(name, sizeof(name), "%.2s/%s", jobs[i].hex, jobs[i].hex);
            int there = keys.n && bsearch(&key, keys.v, keys.n, sizeof(char *), str_cmp);
            jobs[i].known = there ? BLOB_THERE : complete ? BLOB_ABSENT : BLOB_ASK;
        }
    }
    sbx_strv_release(&keys);
}

/* The snapshots the bucket holds whose hex starts with p (headers/ names). */
static int match_refs(struct sbx_snapshot_remote *r, void **conn, const char *p,
                      struct sbx_strv *out, struct sbx_error *err)
{
    struct sbx_strv names;
    sbx_strv_init(&names);
    int rc = list_keys(r, conn, "headers/", &names, NULL, err);
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        const char *nm = names.v[i];
        if (strlen(nm) == SBX_SHA256_HEX_LEN + 5 && strcmp(nm + SBX_SHA256_HEX_LEN, ".json") == 0 &&
            strncmp(nm, p, strlen(p)) == 0)
            sbx_strv_push_take(out, sbx_xstrndup(nm, SBX_SHA256_HEX_LEN));
    }
    sbx_strv_release(&names);
    return rc;
}

/* ---- push ---- */

static int push_one(struct pool *p, void **conn, const struct blob_job *j, struct sbx_error *err)
{
    struct sbx_snapshot_remote *r = p->r;
    char *key = blob_key(r, j->hex);
    char what[160];
    snprintf(what, sizeof(what), "blob '%.12s' in '%s'", j->hex, r->u.name);
    struct sbx__rresp resp;
    sbx_buf_init(&resp.body, 65536);
    struct sbx__rreq head = {"HEAD", key, NULL, NULL, 0, -1, 0, NULL, 65536, NULL, NULL};
    int fd = -1, rc = 0;
    char *data = NULL;
    resp.status = j->known == BLOB_THERE ? 200 : 404;
    if (j->known == BLOB_ASK && (rc = sbx__rstore_send(r, conn, &head, &resp, err)) < 0)
        goto out;
    if (resp.status / 100 == 2) {
        pthread_mutex_lock(&p->mu);
        p->stats.present++;
        pthread_mutex_unlock(&p->mu);
        goto out;
    }
    if (resp.status != 404) {
        rc = sbx__rstore_fail(r, &resp, what, err);
        goto out;
    }
    if (j->size > PUT_MAX) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "%s: %llu bytes, over the 5 GiB a remote store takes in one piece", what,
                           (unsigned long long)j->size);
        goto out;
    }
    if ((rc = sbx__snap_blob_get(p->st, j->hex, j->size, &data, &fd, err)) < 0)
        goto out;
    /* a packed blob is sent from memory (read whole and checked), a blob file from its fd */
    struct sbx__rreq put = {"PUT",  key,   NULL, data, data ? (size_t)j->size : 0, fd, j->size,
                            j->hex, 65536, NULL, NULL};
    if ((rc = send_ok(r, conn, &put, &resp, what, err)) < 0)
        goto out;
    pthread_mutex_lock(&p->mu);
    p->stats.sent++;
    p->stats.sent_bytes += j->size;
    pthread_mutex_unlock(&p->mu);
out:
    if (fd >= 0)
        close(fd);
    free(data);
    sbx_buf_release(&resp.body);
    free(key);
    return rc;
}

/* PUT of a small document (tree or header) from memory. */
static int put_doc(struct sbx_snapshot_remote *r, void **conn, const char *key, const char *data,
                   size_t len, struct sbx_error *err)
{
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    int rc = sbx_sha256(data, len, d, err);
    if (rc < 0)
        return rc;
    sbx_hex(d, sizeof(d), hex);
    struct sbx__rreq put = {"PUT", key, NULL, data, len, -1, 0, hex, 65536, NULL, NULL};
    struct sbx__rresp resp;
    sbx_buf_init(&resp.body, 65536);
    char what[160];
    snprintf(what, sizeof(what), "cannot write '%s/%s'", r->u.name, key + strlen(r->u.prefix));
    rc = send_ok(r, conn, &put, &resp, what, err);
    sbx_buf_release(&resp.body);
    return rc;
}

/* Whether the bucket answers at all (HEAD of the bucket or container): a missing bucket and
 * bad credentials are said once, before any blob. */
static int probe(struct sbx_snapshot_remote *r, void **conn, struct sbx_error *err)
{
    const char *q[2] = {r->u.kind == SBX__RSTORE_AZURE ? "restype=container" : NULL, NULL};
    struct sbx__rreq rq = {"HEAD", NULL, q, NULL, 0, -1, 0, NULL, 65536, NULL, NULL};
    struct sbx__rresp resp;
    sbx_buf_init(&resp.body, 65536);
    char what[160];
    snprintf(what, sizeof(what), "snapshot store '%s'", r->u.name);
    int rc = sbx__rstore_send(r, conn, &rq, &resp, err);
    if (rc == 0 && resp.status == 404 && !resp.code[0])
        snprintf(resp.code, sizeof(resp.code), "NoSuchBucket"); /* a HEAD has no body */
    if (rc == 0 && resp.status / 100 != 2)
        rc = sbx__rstore_fail(r, &resp, what, err);
    sbx_buf_release(&resp.body);
    return rc;
}

static int push_tree(struct sbx_snapshot_store *st, struct sbx_snapshot_remote *r, const char *hex,
                     const struct sbx_snapshot_transfer_opts *o, struct sbx_error *err)
{
    struct sbx_buf doc;
    struct snap_tree t = {0};
    json_t *header = NULL;
    void *conn = NULL;
    char *key = NULL, *htext = NULL;
    struct pool p = {st, r, NULL, 0, 0, PTHREAD_MUTEX_INITIALIZER, 0, SBX_ERROR_INIT, {0}};
    int rc = sbx__snap_tree_read_doc(st, hex, &doc, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx__snap_tree_parse(doc.data, doc.len, hex, &t, &header, err)) < 0 ||
        (rc = probe(r, &conn, err)) < 0)
        goto out;
    p.jobs = tree_blobs(&t, &p.n);
    p.stats.blobs = p.n;
    p.one = push_one;
    p.step = "push";
    if (p.n >= LIST_FROM)
        mark_listed(r, &conn, p.jobs, p.n);
    sbx_progress_sink_init(&p.progress, o->progress, o->progress_data);
    if ((rc = run_pool(&p, err)) < 0)
        goto out;
    /* every blob is in the bucket: the tree, then the header that makes it visible */
    key = sbx_xasprintf("%strees/%s.json", r->u.prefix, hex);
    if ((rc = put_doc(r, &conn, key, doc.data, doc.len, err)) < 0)
        goto out;
    free(key);
    key = sbx_xasprintf("%sheaders/%s.json", r->u.prefix, hex);
    htext = sbx_json_dumps(header, SBX_JSON_COMPACT | SBX_JSON_SORTED);
    if ((rc = put_doc(r, &conn, key, htext, strlen(htext), err)) < 0)
        goto out;
    if (o->out_stats)
        *o->out_stats = p.stats;
out:
    sbx__rstore_conn_free(conn);
    free(p.jobs);
    free(key);
    free(htext);
    json_decref(header);
    sbx__snap_tree_release(&t);
    sbx_buf_release(&doc);
    return rc;
}

int sbx_snapshot_push(struct sbx_snapshot_store *st, struct sbx_snapshot_remote *r, const char *ref,
                      char **out_ref, const struct sbx_snapshot_transfer_opts *o,
                      struct sbx_error *err)
{
    static const struct sbx_snapshot_transfer_opts none;
    char hex[SBX_SHA256_HEX_LEN + 1];
    o = o ? o : &none;
    int rc = sbx__snap_lock(st, 0, err);
    if (rc < 0)
        return rc;
    rc = sbx__snap_resolve_ref(st, ref, hex, err);
    if (rc == 0)
        rc = push_tree(st, r, hex, o, err);
    sbx__snap_unlock(st);
    if (rc < 0) {
        sbx_error_prefix(err, "cannot push '%s' to '%s'", ref, r->u.name);
        return rc;
    }
    if (out_ref)
        *out_ref = sbx_xasprintf("sha256:%s", hex);
    return 0;
}

/* ---- pull ---- */

struct blob_sink {
    struct snap_blob_writer *w;
    uint64_t max, got;
    const char *hex;
};

static int to_blob(void *ctx, const void *p, size_t n, struct sbx_error *err)
{
    struct blob_sink *s = ctx;
    if (n > s->max - s->got)
        return sbx_error_set(err, SBX_E_IO, 0, "it is larger than the %llu bytes the tree says",
                             (unsigned long long)s->max);
    s->got += n;
    return sbx__snap_blob_write(s->w, p, n, err);
}

static int pull_one(struct pool *p, void **conn, const struct blob_job *j, struct sbx_error *err)
{
    if (sbx__snap_blob_exists(p->st, j->hex, j->size)) {
        pthread_mutex_lock(&p->mu);
        p->stats.present++;
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    struct sbx_snapshot_remote *r = p->r;
    struct snap_blob_writer w;
    int rc = sbx__snap_blob_begin(p->st, &w, err);
    if (rc < 0)
        return rc;
    char *key = blob_key(r, j->hex);
    struct blob_sink s = {&w, j->size, 0, j->hex};
    struct sbx__rreq get = {"GET", key, NULL, NULL, 0, -1, 0, NULL, 65536, to_blob, &s};
    struct sbx__rresp resp;
    sbx_buf_init(&resp.body, 65536);
    char what[160], hex[SBX_SHA256_HEX_LEN + 1];
    snprintf(what, sizeof(what), "blob '%.12s' in '%s'", j->hex, r->u.name);
    rc = sbx__rstore_send(r, conn, &get, &resp, err);
    if (rc == 0 && resp.status == 404 && !resp.code[0])
        snprintf(resp.code, sizeof(resp.code), "NoSuchKey");
    if (rc == 0 && resp.status == 404 &&
        (strcmp(resp.code, "NoSuchKey") == 0 || strcmp(resp.code, "BlobNotFound") == 0)) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "%s is missing (the bucket lost it)", what);
    } else if (rc == 0 && resp.status / 100 != 2) {
        rc = sbx__rstore_fail(r, &resp, what, err);
    }
    int created = 0;
    if (rc == 0) {
        rc = sbx__snap_blob_finish_expect(p->st, &w, j->hex, hex, &created, err);
        if (rc < 0)
            sbx_error_prefix(err, "%s is corrupt", what);
    } else {
        if (rc == -SBX_E_IO)
            sbx_error_prefix(err, "%s is corrupt", what);
        sbx__snap_blob_abort(p->st, &w);
    }
    pthread_mutex_lock(&p->mu);
    if (created)
        sbx_strv_push(&p->created, j->hex);
    if (rc == 0) {
        p->stats.sent++;
        p->stats.sent_bytes += j->size;
    }
    pthread_mutex_unlock(&p->mu);
    sbx_buf_release(&resp.body);
    free(key);
    return rc;
}

static int get_doc(struct sbx_snapshot_remote *r, void **conn, const char *key, size_t max,
                   struct sbx_buf *out, struct sbx_error *err)
{
    struct sbx__rreq get = {"GET", key, NULL, NULL, 0, -1, 0, NULL, max, NULL, NULL};
    struct sbx__rresp resp;
    sbx_buf_init(&resp.body, max);
    char what[200];
    snprintf(what, sizeof(what), "cannot read '%s/%s'", r->u.name, key + strlen(r->u.prefix));
    int rc = sbx__rstore_send(r, conn, &get, &resp, err);
    if (rc == 0 && resp.status == 404 &&
        (!resp.code[0] || strcmp(resp.code, "NoSuchKey") == 0 ||
         strcmp(resp.code, "BlobNotFound") == 0))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "%s: not in the store", what);
    else if (rc == 0 && resp.status / 100 != 2)
        rc = sbx__rstore_fail(r, &resp, what, err);
    if (rc == 0)
        *out = resp.body;
    else
        sbx_buf_release(&resp.body);
    return rc;
}

/* The full hex of ref among the bucket's snapshots. */
static int remote_resolve(struct sbx_snapshot_remote *r, void **conn, const char *ref,
                          char hex[SBX_SHA256_HEX_LEN + 1], struct sbx_error *err)
{
    const char *p = strncmp(ref, "sha256:", 7) == 0 ? ref + 7 : ref;
    size_t n = strlen(p);
    int ok = n >= 12 && n <= SBX_SHA256_HEX_LEN;
    for (size_t i = 0; ok && i < n; i++)
        ok = (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f');
    if (!ok)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%s' is not a snapshot reference (sha256: and at least 12 hex)", ref);
    if (n == SBX_SHA256_HEX_LEN) {
        memcpy(hex, p, n + 1);
        return 0;
    }
    struct sbx_strv m;
    sbx_strv_init(&m);
    int rc = match_refs(r, conn, p, &m, err);
    if (rc == 0 && m.n == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no snapshot '%s' in '%s'", ref, r->u.name);
    else if (rc == 0 && m.n > 1)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "snapshot reference '%s' is ambiguous in '%s' (%zu snapshots match)",
                           ref, r->u.name, m.n);
    else if (rc == 0)
        memcpy(hex, m.v[0], SBX_SHA256_HEX_LEN + 1);
    sbx_strv_release(&m);
    return rc;
}

static int pull_tree(struct sbx_snapshot_store *st, struct sbx_snapshot_remote *r, const char *ref,
                     char hex[SBX_SHA256_HEX_LEN + 1], const struct sbx_snapshot_transfer_opts *o,
                     struct sbx_error *err)
{
    struct sbx_buf doc = {0};
    struct snap_tree t = {0};
    void *conn = NULL;
    char *key = NULL;
    struct pool p = {st, r, NULL, 0, 0, PTHREAD_MUTEX_INITIALIZER, 0, SBX_ERROR_INIT, {0}};
    sbx_strv_init(&p.created);
    int rc = probe(r, &conn, err);
    if (rc < 0 || (rc = remote_resolve(r, &conn, ref, hex, err)) < 0)
        goto out;
    key = sbx_xasprintf("%strees/%s.json", r->u.prefix, hex);
    if ((rc = get_doc(r, &conn, key, TREE_DOC_MAX, &doc, err)) < 0) {
        if (rc == -SBX_E_NOTFOUND)
            sbx_error_set(err, SBX_E_NOTFOUND, 0, "no snapshot 'sha256:%s' in '%s'", hex,
                          r->u.name);
        goto out;
    }
    if ((rc = sbx__snap_tree_parse(doc.data, doc.len, hex, &t, NULL, err)) < 0)
        goto out;
    p.jobs = tree_blobs(&t, &p.n);
    p.stats.blobs = p.n;
    p.one = pull_one;
    p.step = "pull";
    sbx_progress_sink_init(&p.progress, o->progress, o->progress_data);
    if ((rc = run_pool(&p, err)) < 0 || (rc = sbx__snap_sync(st, err)) < 0 ||
        (rc = sbx__snap_tree_store_doc(st, hex, doc.data, doc.len, err)) < 0)
        goto out;
    if (o->out_stats)
        *o->out_stats = p.stats;
out:
    if (rc < 0) {
        sbx__snap_discard(st);
        for (size_t i = 0; i < p.created.n; i++)
            sbx__snap_blob_unlink(st, p.created.v[i]);
    }
    sbx_strv_release(&p.created);
    sbx__rstore_conn_free(conn);
    free(p.jobs);
    free(key);
    sbx__snap_tree_release(&t);
    sbx_buf_release(&doc);
    return rc;
}

int sbx_snapshot_pull(struct sbx_snapshot_store *st, struct sbx_snapshot_remote *r, const char *ref,
                      char **out_ref, const struct sbx_snapshot_transfer_opts *o,
                      struct sbx_error *err)
{
    static const struct sbx_snapshot_transfer_opts none;
    char hex[SBX_SHA256_HEX_LEN + 1];
    o = o ? o : &none;
    int rc = sbx__snap_lock(st, 0, err);
    if (rc < 0)
        return rc;
    rc = pull_tree(st, r, ref, hex, o, err);
    sbx__snap_unlock(st);
    if (rc < 0) {
        sbx_error_prefix(err, "cannot pull '%s' from '%s'", ref, r->u.name);
        return rc;
    }
    if (out_ref)
        *out_ref = sbx_xasprintf("sha256:%s", hex);
    return 0;
}

/* ---- list ---- */

static int by_created(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "created"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "created"));
    return strcmp(x ? x : "", y ? y : "");
}

int sbx_snapshot_remote_list(struct sbx_snapshot_remote *r, json_t **out, struct sbx_error *err)
{
    void *conn = NULL;
    struct sbx_strv refs;
    sbx_strv_init(&refs);
    json_t *list = json_array();
    int rc = probe(r, &conn, err);
    if (rc == 0)
        rc = match_refs(r, &conn, "", &refs, err);
    for (size_t i = 0; rc == 0 && i < refs.n; i++) {
        char *key = sbx_xasprintf("%sheaders/%s.json", r->u.prefix, refs.v[i]);
        struct sbx_buf b = {0};
        json_t *h = NULL;
        struct sbx_json_limits jl = {HEADER_MAX, 8};
        struct sbx_error e2 = SBX_ERROR_INIT;
        rc = get_doc(r, &conn, key, HEADER_MAX, &b, err);
        if (rc == 0 && sbx_json_parse(b.data, b.len, &jl, &h, &e2) == 0 && json_is_object(h)) {
            /* pull goes by the name: a header is only what ls shows */
            char *d = sbx_xasprintf("sha256:%s", refs.v[i]);
            sbx_json_set(h, "content_digest", sbx_json_str(d));
            free(d);
            sbx_json_append(list, h);
        } else if (rc == 0) {
            json_decref(h);
            char *d = sbx_xasprintf("sha256:%s", refs.v[i]);
            sbx_json_append(list, json_pack("{s:s,s:s}", "content_digest", d, "error",
                                            "its header is not a JSON object"));
            free(d);
        }
        sbx_buf_release(&b);
        free(key);
    }
    sbx__rstore_conn_free(conn);
    sbx_strv_release(&refs);
    if (rc < 0) {
        json_decref(list);
        sbx_error_prefix(err, "cannot list '%s'", r->u.name);
        return rc;
    }
    size_t n = json_array_size(list);
    json_t **v = sbx_xcalloc(n + 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(list, i));
    qsort(v, n, sizeof(*v), by_created);
    json_array_clear(list);
    for (size_t i = 0; i < n; i++)
        sbx_json_append(list, v[i]);
    free(v);
    *out = list;
    return 0;
}
