/* bench-node: sandboxes through sbx-node daemons (the remote provider) against the local
 * provider on this host, from the same run. bench/bench-node.sh makes the daemons (each in a
 * network namespace of its own) and runs this in a third; by itself it skips.
 *
 *   bench-node pair REPS EXECS   exec round trip (EXECS runs of `true` in one sandbox) and a
 *                                create from a manifest of 200 files of 1 KiB, local and remote
 *                                interleaved (the order alternates per repetition); medians.
 *   bench-node spread N THREADS  N sandboxes spread over the nodes at once by THREADS threads:
 *                                the time to create all, exec in all, remove all, and this
 *                                process's peak resident memory.
 *
 * SBX_BENCH_NODES: a JSON array of the remote provider's options, one object per node (pair
 * uses the first). Prints the figures and TABLE lines (scripts/bench). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <jansson.h>

#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/session.h"

#define FILES 200

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fail(const char *what, const struct sbx_error *err)
{
    fprintf(stderr, "bench-node: %s: %s\n", what, err->msg);
    return -1;
}

static int client(const json_t *opts, struct sbx_client **out)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = opts ? sbx_client_new_json("remote", opts, out, &err)
                  : sbx_client_new("local", NULL, out, &err);
    return rc < 0 ? fail("client", &err) : 0;
}

static int run_true(struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *argv[] = {"true", NULL};
    struct sbx_exec_spec spec = {.argv = argv};
    struct sbx_exec_result res;
    if (sbx_session_exec(s, &spec, &res, &err) < 0)
        return fail("exec", &err);
    int code = res.status.code;
    sbx_exec_result_release(&res);
    return code == 0 ? 0 : -1;
}

/* The manifest of FILES inline files of 1 KiB in 10 directories. */
static struct sbx_manifest *manifest_200(void)
{
    char content[1025], path[64];
    memset(content, 'x', 1024);
    content[1024] = 0;
    json_t *entries = json_object();
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "src/dir%d/file%d.txt", i % 10, i);
        json_object_set_new(entries, path,
                            json_pack("{s:s, s:s}", "type", "file", "content", content));
    }
    json_t *doc = json_pack("{s:i, s:o}", "version", 1, "entries", entries);
    struct sbx_manifest *m = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest_load_opts o = {.flags = SBX_MANIFEST_NO_HOST_CHECKS};
    if (sbx_manifest_from_json(doc, &o, &m, &err) < 0)
        fail("manifest", &err);
    json_decref(doc);
    return m;
}

/* One repetition on one client: EXECS round trips into ex[], a 200-file create into *cr. */
static int pair_rep(struct sbx_client *c, struct sbx_session *s, const struct sbx_manifest *m,
                    int execs, double *ex, double *cr)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (int i = 0; i < execs; i++) {
        double t0 = now_ms();
        if (run_true(s) < 0)
            return -1;
        ex[i] = now_ms() - t0;
    }
    struct sbx_create_spec spec = {.manifest = m};
    struct sbx_session *n = NULL;
    double t0 = now_ms();
    if (sbx_client_create(c, &spec, &n, &err) < 0)
        return fail("create", &err);
    *cr = now_ms() - t0;
    sbx_session_delete(n, NULL);
    sbx_session_free(n);
    return 0;
}

static int pair(const json_t *opts, int reps, int execs)
{
    struct sbx_client *c[2] = {NULL, NULL};
    struct sbx_session *s[2] = {NULL, NULL};
    struct sbx_create_spec empty = {0};
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = manifest_200();
    double *ex[2], *cr[2], *tmp = calloc((size_t)execs, sizeof(double));
    int rc = m ? 0 : -1;
    for (int k = 0; k < 2; k++) {
        ex[k] = calloc((size_t)reps, sizeof(double));
        cr[k] = calloc((size_t)reps, sizeof(double));
        if (rc == 0 && (rc = client(k ? opts : NULL, &c[k])) == 0 &&
            (rc = sbx_client_create(c[k], &empty, &s[k], &err)) < 0)
            fail("create", &err);
    }
    for (int r = 0; r < reps && rc == 0; r++) {
        for (int j = 0; j < 2 && rc == 0; j++) {
            int k = (r + j) % 2; /* local first on even repetitions, remote first on odd */
            if ((rc = pair_rep(c[k], s[k], m, execs, tmp, &cr[k][r])) == 0)
                ex[k][r] = median(tmp, (size_t)execs);
        }
    }
    if (rc == 0) {
        double el = median(ex[0], (size_t)reps), er = median(ex[1], (size_t)reps);
        double cl = median(cr[0], (size_t)reps), crr = median(cr[1], (size_t)reps);
        printf("exec round trip (true): local %.2f ms, via sbx-node %.2f ms (%d x %d)\n", el, er,
               reps, execs);
        printf("create from %d files: local %.1f ms, via sbx-node %.1f ms\n", FILES, cl, crr);
        printf("TABLE|exec round trip via sbx-node|%.2f ms|local provider|%.2f ms|%.2fx|-|-\n", er,
               el, er / el);
        printf("TABLE|%d-file create via sbx-node|%.1f ms|local provider|%.1f ms|%.2fx|-|-\n",
               FILES, crr, cl, crr / cl);
    }
    for (int k = 0; k < 2; k++) {
        if (s[k])
            sbx_session_delete(s[k], NULL);
        sbx_session_free(s[k]);
        sbx_client_free(c[k]);
        free(ex[k]);
        free(cr[k]);
    }
    free(tmp);
    sbx_manifest_free(m);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * spread */

struct spread {
    const json_t *nodes;
    int n, threads;
    struct sbx_session **s;
    int phase; /* 0 create, 1 exec, 2 remove */
    int failed;
};

struct worker {
    struct spread *sp;
    int idx;
    struct sbx_client **c; /* one per node: clients are not shared between threads */
};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct spread *sp = w->sp;
    size_t nn = json_array_size(sp->nodes);
    for (int i = w->idx; i < sp->n; i += sp->threads) {
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_create_spec spec = {0};
        int rc = 0;
        if (sp->phase == 0)
            rc = sbx_client_create(w->c[(size_t)i % nn], &spec, &sp->s[i], &err) < 0
                         ? fail("create", &err)
                         : 0;
        else if (sp->phase == 1)
            rc = sp->s[i] ? run_true(sp->s[i]) : -1;
        else if (sp->s[i]) {
            rc = sbx_session_delete(sp->s[i], &err) < 0 ? fail("remove", &err) : 0;
            sbx_session_free(sp->s[i]);
            sp->s[i] = NULL;
        }
        if (rc < 0)
            __atomic_store_n(&sp->failed, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static double phase(struct spread *sp, struct worker *w, int which)
{
    pthread_t *t = calloc((size_t)sp->threads, sizeof(*t));
    sp->phase = which;
    double t0 = now_ms();
    for (int i = 0; i < sp->threads; i++)
        pthread_create(&t[i], NULL, work, &w[i]);
    for (int i = 0; i < sp->threads; i++)
        pthread_join(t[i], NULL);
    free(t);
    return now_ms() - t0;
}

static int spread(const json_t *nodes, int n, int threads)
{
    size_t nn = json_array_size(nodes);
    struct spread sp = {.nodes = nodes, .n = n, .threads = threads};
    struct worker *w = calloc((size_t)threads, sizeof(*w));
    sp.s = calloc((size_t)n, sizeof(*sp.s));
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    int rc = 0;
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){.sp = &sp, .idx = i, .c = calloc(nn, sizeof(*w[i].c))};
        for (size_t k = 0; k < nn && rc == 0; k++)
            rc = client(json_array_get(nodes, k), &w[i].c[k]);
    }
    double tc = rc == 0 ? phase(&sp, w, 0) : 0;
    double te = rc == 0 && !sp.failed ? phase(&sp, w, 1) : 0;
    int ok = rc == 0 && !sp.failed;
    double tr = phase(&sp, w, 2);
    getrusage(RUSAGE_SELF, &ru1);
    if (ok && !sp.failed) {
        printf("%d sandboxes over %zu nodes, %d threads: create all %.0f ms, exec in all %.0f ms, "
               "remove all %.0f ms; harness peak RSS %ld KiB (%ld KiB before)\n",
               n, nn, threads, tc, te, tr, ru1.ru_maxrss, ru0.ru_maxrss);
        printf("TABLE|%d sandboxes on %zu nodes: create all|%.0f ms|-|-|-|-|-\n", n, nn, tc);
        printf("TABLE|%d sandboxes on %zu nodes: exec in all|%.0f ms|-|-|-|-|-\n", n, nn, te);
        printf("TABLE|%d sandboxes on %zu nodes: remove all|%.0f ms|-|-|-|-|-\n", n, nn, tr);
        printf("TABLE|%d sandboxes on %zu nodes: harness peak RSS|%ld KiB|-|-|-|-|-\n", n, nn,
               ru1.ru_maxrss);
    }
    for (int i = 0; i < threads; i++) {
        for (size_t k = 0; k < nn; k++)
            sbx_client_free(w[i].c[k]);
        free(w[i].c);
    }
    free(w);
    free(sp.s);
    return ok && !sp.failed ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *env = getenv("SBX_BENCH_NODES");
    if (!env || argc < 3) {
        printf("bench-node: skipped (run bench/bench-node.sh: it makes the nodes)\n");
        return 0;
    }
    json_t *nodes = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    char *end1 = NULL, *end2 = NULL;
    long a = argc == 4 ? strtol(argv[2], &end1, 10) : 0;
    long b = argc == 4 ? strtol(argv[3], &end2, 10) : 0;
    if (argc != 4 || *end1 || *end2 || a < 1 || b < 1 || a > 100000 || b > 100000) {
        fprintf(stderr, "usage: bench-node pair REPS EXECS | spread N THREADS\n");
        return 2;
    }
    if (sbx_json_parse(env, strlen(env), NULL, &nodes, &err) < 0 || !json_is_array(nodes) ||
        json_array_size(nodes) == 0) {
        fprintf(stderr, "bench-node: SBX_BENCH_NODES is not a JSON array of options\n");
        return 2;
    }
    int rc;
    if (strcmp(argv[1], "pair") == 0)
        rc = pair(json_array_get(nodes, 0), (int)a, (int)b);
    else if (strcmp(argv[1], "spread") == 0)
        rc = spread(nodes, (int)a, (int)b);
    else {
        fprintf(stderr, "usage: bench-node pair REPS EXECS | spread N THREADS\n");
        rc = 2;
    }
    json_decref(nodes);
    return rc ? 1 : 0;
}
