/* Tracing: ids, traceparent, spans and the exporter threads. See docs/internals/tracing.md. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/buf.h"
#include "sbx/json.h"
#include "sbx/time.h"
#include "sbx/scrub.h"
#include "sbx/trace.h"

#define MAX_EXPORTERS 4
/* Bytes of a string attribute that is not content (paths, names, error messages). */
#define META_MAX 1024

struct exporter {
    struct sbx_trace_exporter ex;
    struct sbx_trace *t;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sbx_span_data **q; /* ring of queue_max */
    size_t head, count;
    int stop;
    uint64_t dropped;
};

struct sbx_trace {
    uint8_t trace_id[SBX_TRACE_ID_LEN];
    uint8_t remote_parent[SBX_SPAN_ID_LEN];
    int content;
    size_t content_max;
    struct sbx_strv secrets;
    pthread_mutex_t mu; /* attribute writes: a span may be touched from a tool thread */
    struct exporter *ex[MAX_EXPORTERS];
    size_t nex;
};

struct sbx_span {
    struct sbx_trace *t;
    struct sbx_span_data *d;
};

static __thread struct sbx_span *current;

/* ------------------------------------------------------------------------------------------ */
/* Ids */

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

void sbx_trace_random_id(uint8_t *id, size_t n)
{
    do {
        size_t got = 0;
        while (got < n) {
            ssize_t r = getrandom(id + got, n - got, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                SBX_BUG("getrandom failed: %s", strerror(errno));
            got += (size_t)r;
        }
    } while (all_zero(id, n));
}

void sbx_trace_hex(const uint8_t *id, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
    out[2 * n] = '\0';
}

static int unhex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(v << 4);
        else
            out[i / 2] |= (uint8_t)v;
    }
    return 0;
}

int sbx_traceparent_parse(const char *s, uint8_t trace_id[SBX_TRACE_ID_LEN],
                          uint8_t parent_id[SBX_SPAN_ID_LEN], uint8_t *flags, struct sbx_error *err)
{
    const char *why = NULL;
    uint8_t ver, fl, tid[SBX_TRACE_ID_LEN], pid[SBX_SPAN_ID_LEN];
    size_t n = s ? strlen(s) : 0;
    if (n != SBX_TRACEPARENT_LEN - 1)
        why = "it must be 55 characters: 00-<32 hex digits>-<16 hex digits>-<2 hex digits>";
    else if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        why = "its fields must be separated by '-'";
    else if (unhex(s, 1, &ver) < 0 || unhex(s + 3, SBX_TRACE_ID_LEN, tid) < 0 ||
             unhex(s + 36, SBX_SPAN_ID_LEN, pid) < 0 || unhex(s + 53, 1, &fl) < 0)
        why = "it must be lowercase hexadecimal";
    else if (ver != 0)
        why = "only version 00 is supported";
    else if (all_zero(tid, sizeof(tid)))
        why = "its trace id is all zero";
    else if (all_zero(pid, sizeof(pid)))
        why = "its parent id is all zero";
    if (why) {
        char shown[80];
        size_t k = 0;
        for (size_t i = 0; s && s[i] && k + 4 < sizeof(shown); i++)
            shown[k++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
        shown[k] = '\0';
        return sbx_error_set(err, SBX_E_INVAL, 0, "bad traceparent '%s%s': %s", shown,
                             s && strlen(s) > k ? "..." : "", why);
    }
    memcpy(trace_id, tid, sizeof(tid));
    memcpy(parent_id, pid, sizeof(pid));
    if (flags)
        *flags = fl;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Spans */

static void data_unref(struct sbx_span_data *d)
{
    if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    free(d->name);
    free(d->status_message);
    json_decref(d->attrs);
    free(d);
}

static struct sbx_span *span_new(struct sbx_trace *t, const uint8_t *parent, const char *name,
                                 enum sbx_span_kind kind)
{
    struct sbx_span *s = sbx_xcalloc(1, sizeof(*s));
    struct sbx_span_data *d = sbx_xcalloc(1, sizeof(*d));
    s->t = t;
    s->d = d;
    memcpy(d->trace_id, t->trace_id, SBX_TRACE_ID_LEN);
    sbx_trace_random_id(d->span_id, SBX_SPAN_ID_LEN);
    if (parent)
        memcpy(d->parent_id, parent, SBX_SPAN_ID_LEN);
    d->name = sbx_xstrdup(name);
    d->kind = kind;
    d->start_ns = sbx_time_real_ns();
    d->attrs = json_object();
    d->refs = 1;
    return s;
}

struct sbx_span *sbx_trace_root(struct sbx_trace *t, const char *name)
{
    if (!t)
        return NULL;
    int remote = !all_zero(t->remote_parent, SBX_SPAN_ID_LEN);
    return span_new(t, remote ? t->remote_parent : NULL, name, SBX_SPAN_INTERNAL);
}

struct sbx_span *sbx_span_start(struct sbx_span *parent, const char *name, enum sbx_span_kind kind)
{
    return parent ? span_new(parent->t, parent->d->span_id, name, kind) : NULL;
}

struct sbx_span *sbx_trace_current(void)
{
    return current;
}

struct sbx_span *sbx_trace_set_current(struct sbx_span *s)
{
    struct sbx_span *prev = current;
    current = s;
    return prev;
}

struct sbx_trace *sbx_span_tracer(const struct sbx_span *s)
{
    return s ? s->t : NULL;
}

int sbx_trace_content(const struct sbx_trace *t)
{
    return t && t->content;
}

/* s[0..n) cut to max bytes at a UTF-8 boundary with secrets replaced: a fresh string. */
static char *clean_text(const struct sbx_trace *t, const char *s, size_t n, size_t max)
{
    int cut = n > max;
    if (cut) {
        n = max;
        while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    size_t sn = 0;
    char *scrubbed = sbx_scrub_text(&t->secrets, s, n, NULL, &sn);
    if (sbx_buf_add(&b, scrubbed ? scrubbed : s, scrubbed ? sn : n, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    free(scrubbed);
    /* A secret cut in half at the bound must not survive as its prefix. */
    if (cut)
        sbx_buf_setlen(&b, b.len - sbx_scrub_tail(&t->secrets, b.data, b.len));
    if (cut && sbx_buf_adds(&b, "\xe2\x80\xa6[truncated]", NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    return sbx_buf_detach(&b, NULL);
}

static void set_attr(struct sbx_span *s, const char *key, json_t *v)
{
    pthread_mutex_lock(&s->t->mu);
    sbx_json_set(s->d->attrs, key, v);
    pthread_mutex_unlock(&s->t->mu);
}

static void set_text(struct sbx_span *s, const char *key, const char *value, size_t n, size_t max)
{
    char *c = clean_text(s->t, value, n, max);
    set_attr(s, key, sbx_json_str(c));
    free(c);
}

void sbx_span_set_str(struct sbx_span *s, const char *key, const char *value)
{
    if (s && value)
        set_text(s, key, value, strlen(value), META_MAX);
}

void sbx_span_set_strs(struct sbx_span *s, const char *key, const char *const *values, size_t n)
{
    if (!s)
        return;
    json_t *a = json_array();
    for (size_t i = 0; i < n && i < 64; i++) {
        if (!values[i])
            continue;
        char *c = clean_text(s->t, values[i], strlen(values[i]), META_MAX);
        sbx_json_append(a, sbx_json_str(c));
        free(c);
    }
    set_attr(s, key, a);
}

void sbx_span_set_int(struct sbx_span *s, const char *key, int64_t value)
{
    if (s)
        set_attr(s, key, json_integer((json_int_t)value));
}

void sbx_span_set_bool(struct sbx_span *s, const char *key, int value)
{
    if (s)
        set_attr(s, key, json_boolean(value));
}

void sbx_span_set_content(struct sbx_span *s, const char *key, const char *value, size_t n)
{
    if (s && value && s->t->content)
        set_text(s, key, value, n, s->t->content_max);
}

void sbx_span_set_status(struct sbx_span *s, int ok, const char *msg)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->t->mu);
    free(s->d->status_message);
    s->d->status_message = NULL;
    s->d->status = ok && !msg ? SBX_SPAN_OK : SBX_SPAN_ERROR;
    if (s->d->status == SBX_SPAN_ERROR)
        s->d->status_message = clean_text(s->t, msg ? msg : "", msg ? strlen(msg) : 0, META_MAX);
    pthread_mutex_unlock(&s->t->mu);
}

void sbx_span_set_start(struct sbx_span *s, int64_t start_ns)
{
    if (s)
        s->d->start_ns = start_ns;
}

void sbx_span_traceparent(const struct sbx_span *s, char out[SBX_TRACEPARENT_LEN])
{
    char tid[2 * SBX_TRACE_ID_LEN + 1], sid[2 * SBX_SPAN_ID_LEN + 1];
    sbx_trace_hex(s->d->trace_id, SBX_TRACE_ID_LEN, tid);
    sbx_trace_hex(s->d->span_id, SBX_SPAN_ID_LEN, sid);
    memcpy(out, "00-", 3);
    memcpy(out + 3, tid, 32);
    out[35] = '-';
    memcpy(out + 36, sid, 16);
    memcpy(out + 52, "-01", 4);
}

static void enqueue(struct exporter *e, struct sbx_span_data *d)
{
    pthread_mutex_lock(&e->mu);
    if (e->stop || e->count >= e->ex.queue_max) {
        e->dropped++;
    } else {
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
        e->q[(e->head + e->count) % e->ex.queue_max] = d;
        e->count++;
        if (e->count == 1 || e->count >= e->ex.batch_max)
            pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

void sbx_span_end_at(struct sbx_span *s, int64_t end_ns)
{
    if (!s)
        return;
    if (current == s)
        current = NULL;
    struct sbx_span_data *d = s->d;
    d->end_ns = end_ns ? end_ns : sbx_time_real_ns();
    if (d->end_ns < d->start_ns)
        d->end_ns = d->start_ns;
    for (size_t i = 0; i < s->t->nex; i++)
        enqueue(s->t->ex[i], d);
    data_unref(d);
    free(s);
}

void sbx_span_end(struct sbx_span *s)
{
    sbx_span_end_at(s, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Tracer and exporter threads */

int sbx_trace_new(const struct sbx_trace_options *opt, struct sbx_trace **out,
                  struct sbx_error *err)
{
    static const struct sbx_trace_options none;
    if (!opt)
        opt = &none;
    struct sbx_trace *t = sbx_xcalloc(1, sizeof(*t));
    if (opt->traceparent) {
        int rc = sbx_traceparent_parse(opt->traceparent, t->trace_id, t->remote_parent, NULL, err);
        if (rc < 0) {
            free(t);
            return rc;
        }
    } else {
        sbx_trace_random_id(t->trace_id, SBX_TRACE_ID_LEN);
    }
    t->content = opt->content;
    t->content_max = opt->content_max ? opt->content_max : SBX_TRACE_CONTENT_MAX;
    sbx_strv_init(&t->secrets);
    for (size_t i = 0; opt->secrets && i < opt->secrets->n; i++)
        sbx_strv_push(&t->secrets, opt->secrets->v[i]);
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return 0;
}

static void take_batch(struct exporter *e, struct sbx_span_data **batch, size_t *n)
{
    *n = 0;
    while (e->count && *n < e->ex.batch_max) {
        batch[(*n)++] = e->q[e->head];
        e->head = (e->head + 1) % e->ex.queue_max;
        e->count--;
    }
}

static void timed_wait(struct exporter *e, int64_t deadline_mono_ns)
{
    struct timespec ts = {.tv_sec = deadline_mono_ns / SBX_NS_PER_S,
                          .tv_nsec = deadline_mono_ns % SBX_NS_PER_S};
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

static void *exporter_main(void *p)
{
    struct exporter *e = p;
    struct sbx_span_data **batch = sbx_xcalloc(e->ex.batch_max, sizeof(*batch));
    int64_t drain_until = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->count && !e->stop)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->ex.batch_wait_ms > 0 && !e->stop && e->count < e->ex.batch_max) {
            int64_t until = sbx_time_mono_ns() + e->ex.batch_wait_ms * SBX_NS_PER_MS;
            while (!e->stop && e->count < e->ex.batch_max && sbx_time_mono_ns() < until)
                timed_wait(e, until);
        }
        if (e->stop && !drain_until)
            drain_until = e->ex.drain_ms > 0 ? sbx_time_mono_ns() + e->ex.drain_ms * SBX_NS_PER_MS
                                             : INT64_MAX;
        if (!e->count)
            break;
        if (e->stop && sbx_time_mono_ns() >= drain_until) {
            /* Past the drain bound: what is left is dropped, not sent late. */
            e->dropped += e->count;
            while (e->count) {
                data_unref(e->q[e->head]);
                e->head = (e->head + 1) % e->ex.queue_max;
                e->count--;
            }
            break;
        }
        size_t n;
        take_batch(e, batch, &n);
        pthread_mutex_unlock(&e->mu);
        int failed = e->ex.export_batch(e->ex.data, (const struct sbx_span_data *const *)batch, n);
        for (size_t i = 0; i < n; i++)
            data_unref(batch[i]);
        pthread_mutex_lock(&e->mu);
        if (failed > 0)
            e->dropped += (uint64_t)failed;
    }
    pthread_mutex_unlock(&e->mu);
    free(batch);
    if (e->ex.close)
        e->ex.close(e->ex.data);
    e->ex.close = NULL;
    return NULL;
}

int sbx_trace_add_exporter(struct sbx_trace *t, const struct sbx_trace_exporter *ex,
                           struct sbx_error *err)
{
    if (t->nex >= MAX_EXPORTERS) {
        if (ex->close)
            ex->close(ex->data);
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "too many trace exporters (at most %d)",
                             MAX_EXPORTERS);
    }
    struct exporter *e = sbx_xcalloc(1, sizeof(*e));
    e->ex = *ex;
    e->t = t;
    if (!e->ex.queue_max)
        e->ex.queue_max = 4096;
    if (!e->ex.batch_max)
        e->ex.batch_max = 512;
    e->q = sbx_xcalloc(e->ex.queue_max, sizeof(*e->q));
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    int r = pthread_create(&e->thread, NULL, exporter_main, e);
    if (r != 0) {
        if (ex->close)
            ex->close(ex->data);
        free(e->q);
        free(e);
        return sbx_error_errno(err, r, "cannot start the '%s' trace exporter", ex->name);
    }
    e->started = 1;
    t->ex[t->nex++] = e;
    return 0;
}

void sbx_trace_shutdown(struct sbx_trace *t, char **report)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (report)
        *report = NULL;
    if (!t)
        return;
    for (size_t i = 0; i < t->nex; i++) {
        struct exporter *e = t->ex[i];
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
    for (size_t i = 0; i < t->nex; i++) {
        struct exporter *e = t->ex[i];
        if (e->started)
            pthread_join(e->thread, NULL);
        e->started = 0;
        if (e->dropped && sbx_buf_addf(&b, NULL, "%s%s=%llu", b.len ? " " : "", e->ex.name,
                                       (unsigned long long)e->dropped) < 0)
            SBX_BUG("unbounded buffer refused data");
        e->dropped = 0;
    }
    if (report && b.len)
        *report = sbx_buf_detach(&b, NULL);
    sbx_buf_release(&b);
}

void sbx_trace_free(struct sbx_trace *t)
{
    if (!t)
        return;
    sbx_trace_shutdown(t, NULL);
    for (size_t i = 0; i < t->nex; i++) {
        struct exporter *e = t->ex[i];
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e->q);
        free(e);
    }
    for (size_t i = 0; i < t->secrets.n; i++)
        explicit_bzero(t->secrets.v[i], strlen(t->secrets.v[i]));
    sbx_strv_release(&t->secrets);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ------------------------------------------------------------------------------------------ */
/* JSONL */

static const char *status_name(enum sbx_span_status s)
{
    return s == SBX_SPAN_OK ? "ok" : s == SBX_SPAN_ERROR ? "error" : "unset";
}

json_t *sbx_span_data_json(const struct sbx_span_data *d)
{
    char tid[2 * SBX_TRACE_ID_LEN + 1], sid[2 * SBX_SPAN_ID_LEN + 1], pid[2 * SBX_SPAN_ID_LEN + 1];
    sbx_trace_hex(d->trace_id, SBX_TRACE_ID_LEN, tid);
    sbx_trace_hex(d->span_id, SBX_SPAN_ID_LEN, sid);
    sbx_trace_hex(d->parent_id, SBX_SPAN_ID_LEN, pid);
    json_t *o = json_object();
    sbx_json_set(o, "trace_id", sbx_json_str(tid));
    sbx_json_set(o, "span_id", sbx_json_str(sid));
    sbx_json_set(o, "parent_span_id",
                 all_zero(d->parent_id, SBX_SPAN_ID_LEN) ? json_null() : sbx_json_str(pid));
    sbx_json_set(o, "name", sbx_json_str(d->name));
    sbx_json_set(o, "kind", sbx_json_str(d->kind == SBX_SPAN_CLIENT ? "client" : "internal"));
    sbx_json_set(o, "start_unix_nano", json_integer((json_int_t)d->start_ns));
    sbx_json_set(o, "end_unix_nano", json_integer((json_int_t)d->end_ns));
    sbx_json_set(o, "status", sbx_json_str(status_name(d->status)));
    if (d->status_message)
        sbx_json_set(o, "status_message", sbx_json_str(d->status_message));
    sbx_json_set(o, "attributes", json_incref(d->attrs));
    return o;
}

struct jsonl {
    int fd;
    struct sbx_buf buf;
};

static int jsonl_export(void *data, const struct sbx_span_data *const *spans, size_t n)
{
    struct jsonl *j = data;
    sbx_buf_reset(&j->buf);
    for (size_t i = 0; i < n; i++) {
        json_t *o = sbx_span_data_json(spans[i]);
        if (sbx_json_dump(o, SBX_JSON_COMPACT, &j->buf, NULL) < 0 ||
            sbx_buf_addch(&j->buf, '\n', NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
        json_decref(o);
    }
    size_t off = 0;
    while (off < j->buf.len) {
        ssize_t w = write(j->fd, j->buf.data + off, j->buf.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return (int)n;
        off += (size_t)w;
    }
    return 0;
}

static void jsonl_close(void *data)
{
    struct jsonl *j = data;
    close(j->fd);
    sbx_buf_release(&j->buf);
    free(j);
}

int sbx_trace_jsonl_exporter(const char *path, struct sbx_trace_exporter *out,
                             struct sbx_error *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot create trace file '%s'", path);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sbx_error_set(err, SBX_E_INVAL, 0, "trace file '%s' is not a regular file", path);
    }
    if ((st.st_mode & 0777) != 0600 && fchmod(fd, 0600) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_errno(err, e, "cannot make trace file '%s' private", path);
    }
    struct jsonl *j = sbx_xcalloc(1, sizeof(*j));
    j->fd = fd;
    sbx_buf_init(&j->buf, SBX_BUF_NOLIMIT);
    *out = (struct sbx_trace_exporter){.name = "jsonl",
                                       .export_batch = jsonl_export,
                                       .close = jsonl_close,
                                       .data = j,
                                       .queue_max = 65536,
                                       .batch_max = 1024,
                                       .batch_wait_ms = 50};
    return 0;
}
