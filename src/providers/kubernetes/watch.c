/* The shared watch of a Kubernetes client (api.h): one streamed `watch` request per client and
 * kind (pods, or claims), over every object carrying sbx's id label in the namespace, run on
 * the remote layer's event loop. Every wait of the client (a sandbox becoming ready, a pod
 * going away) reads the same stream: a harness waiting on a thousand sandboxes holds one
 * connection, not a thousand.
 *
 * It starts at the collection's current resourceVersion (a list of one item tells it), so
 * nothing is listed in bulk; a wait reads its own sandbox's objects once, directly, then
 * follows the events. Only the objects of sandboxes someone waits for are kept. The stream is
 * restarted where it stopped when the server ends it (timeoutSeconds), after a short pause when
 * it failed, and from a fresh resourceVersion after a 410 (the history it asked for is gone),
 * when every waiter reads its objects again. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/kubernetes/api.h"
#include "sandbox/wire/loop.h"
#include "sandbox/wire/ndjson.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define STREAM_TIMEOUT_S 290  /* the server ends each stream after this; it is restarted */
#define RETRY_MS         1000 /* after a stream failed */
#define EVENT_MAX        ((size_t)8 << 20)

enum { IDLE, STARTING, RUNNING, FAILED };

struct sbx__kube_watch {
    struct sbx__kube_api *api;
    enum sbx__kube_kind kind;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    json_t *waited;  /* id -> number of waits on it */
    json_t *objects; /* id -> {name -> object}, for waited ids */
    char *rv;        /* the stream resumes here; NULL: a fresh one is needed */
    uint64_t gen;    /* bumped on every change a waiter may care about */
    uint64_t relist; /* bumped when waiters must read their objects again */
    int state;
    struct sbx_error failure;
    struct sbx__kube_watch_stats stats;
    /* the loop's thread only */
    struct sbx__loop *loop;
    struct sbx__xfer *x;
    struct sbx__timer *retry;
    struct sbx__ndjson nd;
    int nd_live;
    int gone_410;
};

static const char *rv_of(const json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
}

/* Whether resourceVersion a is older than b (both decimal, as etcd's are; else "not older"). */
static int rv_older(const char *a, const char *b)
{
    char *ea, *eb;
    if (!a || !b)
        return 0;
    unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
    return !*ea && !*eb && x < y;
}

/* Keep obj as the newest of its name (caller holds the lock). */
static void keep(struct sbx__kube_watch *w, const char *id, json_t *obj, int deleted)
{
    json_t *byname = json_object_get(w->objects, id);
    const char *name = sbx__kube_name_of(obj);
    if (!byname || !name)
        return;
    json_t *cur = json_object_get(byname, name);
    if (cur && rv_older(rv_of(obj), rv_of(cur)))
        return;
    if (deleted)
        json_object_del(byname, name);
    else
        json_object_set(byname, name, obj);
}

/* ---- the stream, on the loop's thread ---- */

static void start_stream(void *ud);

static int on_event(json_t *ev, size_t line, void *ud, struct sbx_error *err)
{
    struct sbx__kube_watch *w = ud;
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *obj = json_object_get(ev, "object");
    (void)line;
    (void)err;
    if (!type || !json_is_object(obj))
        return 0;
    pthread_mutex_lock(&w->lock);
    w->stats.events++;
    if (strcmp(type, "ERROR") == 0) {
        long code = (long)json_integer_value(json_object_get(obj, "code"));
        if (code == 410) {
            free(w->rv);
            w->rv = NULL;
            w->gone_410 = 1;
        }
    } else {
        const char *rv = rv_of(obj);
        if (rv && rv[0]) {
            free(w->rv);
            w->rv = sbx_xstrdup(rv);
        }
        const char *id = sbx__kube_label_of(obj, SBX__KUBE_LABEL_ID);
        if (strcmp(type, "BOOKMARK") != 0 && id && json_object_get(w->waited, id)) {
            keep(w, id, obj, strcmp(type, "DELETED") == 0);
            w->gen++;
            pthread_cond_broadcast(&w->cond);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return 0;
}

static int on_data(struct sbx__xfer *x, const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct sbx__kube_watch *w = ud;
    (void)x;
    return sbx__ndjson_feed(&w->nd, (const char *)p, n, err);
}

static void fail(struct sbx__kube_watch *w, const struct sbx_error *e)
{
    pthread_mutex_lock(&w->lock);
    w->state = FAILED;
    sbx_error_copy(&w->failure, e);
    w->gen++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void on_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                    const struct sbx_error *err, void *ud)
{
    struct sbx__kube_watch *w = ud;
    (void)x;
    w->x = NULL;
    if (w->nd_live) {
        sbx__ndjson_release(&w->nd);
        w->nd_live = 0;
    }
    if (rc == 0 && resp->status == 410) {
        pthread_mutex_lock(&w->lock);
        free(w->rv);
        w->rv = NULL;
        pthread_mutex_unlock(&w->lock);
    } else if (rc == 0 && resp->status >= 400) {
        /* Refused outright (RBAC, a namespace that went away): waiters learn why. */
        struct sbx_error e = SBX_ERROR_INIT;
        (void)sbx__http_status_error(w->api->ep, resp->status, resp->body.data, resp->body.len,
                                     "GET (watch)", &e);
        if (resp->status == 403)
            (void)sbx__kube_forbidden(w->api, "watch", sbx__kube_kind_resource(w->kind), &e);
        fail(w, &e);
        return;
    }
    /* Ended by the server (its timeout), cut, or 410: again, at once or after a pause. */
    sbx__timer_after(w->retry, rc < 0 ? RETRY_MS : 0);
    (void)err;
}

static void on_list_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                         const struct sbx_error *err, void *ud)
{
    struct sbx__kube_watch *w = ud;
    (void)x;
    (void)err;
    w->x = NULL;
    json_t *list = NULL;
    if (rc == 0 && resp->status < 300)
        (void)sbx_json_parse(resp->body.data, resp->body.len, NULL, &list, NULL);
    const char *rv = json_string_value(
            json_object_get(json_object_get(list, "metadata"), "resourceVersion"));
    if (!rv) {
        json_decref(list);
        sbx__timer_after(w->retry, RETRY_MS);
        return;
    }
    pthread_mutex_lock(&w->lock);
    free(w->rv);
    w->rv = sbx_xstrdup(rv);
    w->relist++;
    w->stats.relists++;
    w->gen++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    json_decref(list);
    start_stream(w);
}

static const struct sbx__xfer_ops stream_ops = {.data = on_data, .done = on_done};
static const struct sbx__xfer_ops list_ops = {.done = on_list_done};

static char *selector_query(const char *extra)
{
    return sbx_xasprintf("labelSelector=%s%s", "sbx.io%2Fid", extra);
}

static void start_stream(void *ud)
{
    struct sbx__kube_watch *w = ud;
    struct sbx_error e = SBX_ERROR_INIT;
    pthread_mutex_lock(&w->lock);
    char *rv = w->rv ? sbx_xstrdup(w->rv) : NULL;
    pthread_mutex_unlock(&w->lock);
    char *query, *path;
    int rc;
    if (!rv) {
        /* A fresh resourceVersion: a list of one item says what it is. */
        query = selector_query("&limit=1");
        path = sbx__kube_path(w->api, w->kind, NULL, NULL, query);
        struct sbx__http_req req = {.method = "GET", .path = path};
        rc = sbx__xfer_start(w->loop, w->api->ep, &req, &list_ops, w, &w->x, &e);
    } else {
        char *rest = sbx_xasprintf("&watch=1&allowWatchBookmarks=true&timeoutSeconds=%d"
                                   "&resourceVersion=%s",
                                   STREAM_TIMEOUT_S, rv);
        query = selector_query(rest);
        free(rest);
        path = sbx__kube_path(w->api, w->kind, NULL, NULL, query);
        sbx__ndjson_init(&w->nd, EVENT_MAX, 0, on_event, w);
        w->nd_live = 1;
        struct sbx__http_req req = {.method = "GET", .path = path, .timeout_ms = -1};
        rc = sbx__xfer_start(w->loop, w->api->ep, &req, &stream_ops, w, &w->x, &e);
        if (rc == 0) {
            pthread_mutex_lock(&w->lock);
            w->stats.streams++;
            pthread_mutex_unlock(&w->lock);
        }
    }
    if (rc < 0) {
        if (w->nd_live) {
            sbx__ndjson_release(&w->nd);
            w->nd_live = 0;
        }
        fail(w, &e);
    }
    free(rv);
    free(query);
    free(path);
}

static void on_retry(struct sbx__timer *t, void *ud)
{
    (void)t;
    start_stream(ud);
}

static void setup_on_loop(void *ud)
{
    struct sbx__kube_watch *w = ud;
    w->retry = sbx__timer_new(w->loop, on_retry, w);
    start_stream(w);
}

static void stop_on_loop(void *ud)
{
    struct sbx__kube_watch *w = ud;
    if (w->x)
        sbx__xfer_cancel(w->x);
    w->x = NULL;
    sbx__timer_free(w->retry);
    w->retry = NULL;
    if (w->nd_live) {
        sbx__ndjson_release(&w->nd);
        w->nd_live = 0;
    }
}

/* ---- the callers' side ---- */

struct sbx__kube_watch *sbx__kube_watch_new(struct sbx__kube_api *a, enum sbx__kube_kind k)
{
    struct sbx__kube_watch *w = sbx_xcalloc(1, sizeof(*w));
    w->api = sbx__kube_api_ref(a);
    w->kind = k;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    w->waited = json_object();
    w->objects = json_object();
    return w;
}

void sbx__kube_watch_free(struct sbx__kube_watch *w)
{
    if (!w)
        return;
    if (w->loop)
        sbx__loop_call(w->loop, stop_on_loop, w);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    json_decref(w->waited);
    json_decref(w->objects);
    free(w->rv);
    sbx__kube_api_free(w->api);
    free(w);
}

/* Start the stream once: the collection's resourceVersion now, then the loop. */
static int ensure_started(struct sbx__kube_watch *w, struct sbx_error *err)
{
    pthread_mutex_lock(&w->lock);
    int st = w->state;
    if (st == IDLE)
        w->state = STARTING;
    pthread_mutex_unlock(&w->lock);
    if (st == RUNNING)
        return 0;
    if (st == FAILED)
        return sbx_error_copy(err, &w->failure);
    if (st == STARTING) {
        /* Another thread is starting it. */
        pthread_mutex_lock(&w->lock);
        while (w->state == STARTING)
            pthread_cond_wait(&w->cond, &w->lock);
        int rc = w->state == FAILED ? sbx_error_copy(err, &w->failure) : 0;
        pthread_mutex_unlock(&w->lock);
        return rc;
    }
    struct sbx__kube_req r = {.method = "GET",
                              .verb = "list",
                              .kind = w->kind,
                              .query = "labelSelector=sbx.io%2Fid&limit=1"};
    json_t *list = NULL;
    int rc = sbx__kube_call(w->api, &r, &list, err);
    const char *rv = json_string_value(
            json_object_get(json_object_get(list, "metadata"), "resourceVersion"));
    if (rc == 0 && !rv)
        rc = sbx_error_set(err, SBX_E_API, 0, "the API server's list has no resourceVersion");
    struct sbx__loop *loop = NULL;
    if (rc == 0)
        rc = sbx__loop_default(&loop, err);
    pthread_mutex_lock(&w->lock);
    if (rc == 0) {
        w->rv = sbx_xstrdup(rv);
        w->loop = loop;
        w->state = RUNNING;
    } else {
        w->state = IDLE;
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    json_decref(list);
    if (rc == 0)
        sbx__loop_post(loop, setup_on_loop, w);
    return rc;
}

/* Read the objects of id directly, into the cache. */
static int read_direct(struct sbx__kube_watch *w, const char *id, struct sbx_error *err)
{
    char *sel = sbx_xasprintf("%s=%s", SBX__KUBE_LABEL_ID, id);
    json_t *items = NULL, *v;
    size_t i;
    int rc = sbx__kube_list(w->api, w->kind, sel, NULL, &items, NULL, err);
    free(sel);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&w->lock);
    json_t *byname = json_object_get(w->objects, id);
    json_t *seen = json_object();
    json_array_foreach(items, i, v)
    {
        const char *name = sbx__kube_name_of(v);
        if (name)
            sbx_json_set(seen, name, json_true());
        keep(w, id, v, 0);
    }
    /* Gone since: what the list lacks and the stream has not told yet. */
    const char *name;
    json_t *obj, *tmp;
    json_object_foreach_safe(byname, tmp, name, obj)
    {
        if (!json_object_get(seen, name))
            json_object_del(byname, name);
    }
    json_decref(seen);
    pthread_mutex_unlock(&w->lock);
    json_decref(items);
    return 0;
}

static void hold(struct sbx__kube_watch *w, const char *id, int delta)
{
    pthread_mutex_lock(&w->lock);
    json_int_t n = json_integer_value(json_object_get(w->waited, id)) + delta;
    if (n > 0) {
        sbx_json_set(w->waited, id, json_integer(n));
        if (!json_object_get(w->objects, id))
            sbx_json_set(w->objects, id, json_object());
    } else {
        json_object_del(w->waited, id);
        json_object_del(w->objects, id);
    }
    pthread_mutex_unlock(&w->lock);
}

static json_t *objects_of(struct sbx__kube_watch *w, const char *id)
{
    json_t *out = json_array(), *v;
    const char *k;
    json_object_foreach(json_object_get(w->objects, id), k, v) json_array_append(out, v);
    return out;
}

int sbx__kube_watch_wait(struct sbx__kube_watch *w, const char *id, sbx__kube_wait_fn *fn, void *ud,
                         int64_t deadline, json_t **last, struct sbx_error *err)
{
    int rc = ensure_started(w, err);
    if (rc < 0)
        return rc;
    hold(w, id, 1);
    uint64_t relist = UINT64_MAX;
    json_t *seen = NULL;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        uint64_t want = w->relist;
        pthread_mutex_unlock(&w->lock);
        if (want != relist) {
            relist = want;
            if ((rc = read_direct(w, id, err)) < 0)
                break;
        }
        pthread_mutex_lock(&w->lock);
        if (w->state == FAILED) {
            rc = sbx_error_copy(err, &w->failure);
            pthread_mutex_unlock(&w->lock);
            break;
        }
        uint64_t gen = w->gen;
        json_decref(seen);
        seen = objects_of(w, id);
        pthread_mutex_unlock(&w->lock);
        if ((rc = fn(seen, ud, err)) != 0)
            break;
        int64_t ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "timed out");
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t wait_ms = ms < 0 || ms > 1000 ? 1000 : ms;
        ts.tv_sec += wait_ms / 1000;
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&w->lock);
        while (w->gen == gen && w->relist == relist) {
            if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) == ETIMEDOUT)
                break;
        }
        pthread_mutex_unlock(&w->lock);
    }
    hold(w, id, -1);
    if (rc > 0)
        rc = 0;
    if (last)
        *last = seen;
    else
        json_decref(seen);
    return rc;
}

void sbx__kube_watch_stats(struct sbx__kube_watch *w, struct sbx__kube_watch_stats *out)
{
    pthread_mutex_lock(&w->lock);
    *out = w->stats;
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(w->objects, k, v) n += json_object_size(v);
    out->objects = n;
    pthread_mutex_unlock(&w->lock);
}
