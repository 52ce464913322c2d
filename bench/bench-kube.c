/* bench-kube: the kubernetes provider against the fake API server (tests/kubernetes/), in two
 * parts. Numbers only: nothing here passes or fails.
 *
 *   bench-kube [--runs N] [--load N] [--figures FILE]
 *
 * Costs (SBX_TEST_KUBECONFIG_FAKE: a fake whose pods run in a private dockerd; image
 * SBX_TEST_DOCKER_IMAGE): create (empty manifest: Sandbox -> Ready -> session), exec of `true`,
 * create with a 200-file manifest, snapshot of a 32 MiB workspace (tar streamed out through
 * exec into a store: MiB/s), a sandbox from that snapshot, rm; medians of RUNS (default 5).
 * Then 60 commands running at once on one client: the harness's descriptors and threads.
 *
 * Load (SBX_BENCH_KUBE_LOAD: the kubeconfig of a second fake started with --kubelet none, pods
 * only pretend to run): N (default 10000) Sandbox objects made as sbx makes them, then what the
 * harness pays with N in the cluster: sbx_client_list, attach by id and by prefix, the shared
 * watch's start and its event throughput while 1000 pods change.
 *
 * --figures FILE writes the measured figures as JSON for bench/k8s-model.py --figures. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/resource.h>

#include "providers/kubernetes/api.h"
#include "sandbox/wire/ndjson.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/kubernetes.h"
#include "sbx/manifest.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

#define MAX_RUNS      50
#define CONCURRENT    60
#define WATCH_CHANGES 1000
#define THREADS       4

static json_t *figures;

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double ms_since(int64_t t0)
{
    return (double)(sbx_time_mono_ns() - t0) / 1e6;
}

static void figure(const char *key, double v)
{
    sbx_json_set(figures, key, json_real(v));
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - (d != NULL); /* the opendir's own fd, when counting fds */
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            v = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static int count_event(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    (void)line;
    (void)err;
    (*(size_t *)ud) += json_object_get(v, "object") != NULL;
    return 0;
}

/* What decoding a watch stream costs the harness: every listed object as a MODIFIED event
 * through the NDJSON decoder and the JSON reader, as the shared watch reads them. */
static void decode_capacity(struct sbx__kube_api *api)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *items = NULL, *v;
    size_t i, seen = 0;
    if (sbx__kube_list(api, SBX__KUBE_SANDBOX, "sbx.io/id", NULL, &items, NULL, &err) < 0) {
        fprintf(stderr, "bench-kube: decode: %s\n", err.msg);
        exit(1);
    }
    struct sbx_buf text;
    sbx_buf_init(&text, SBX_BUF_NOLIMIT);
    json_array_foreach(items, i, v)
    {
        json_t *ev = json_pack("{s:s,s:O}", "type", "MODIFIED", "object", v);
        char *line = sbx_json_dumps(ev, SBX_JSON_COMPACT);
        (void)sbx_buf_addf(&text, NULL, "%s\n", line);
        free(line);
        json_decref(ev);
    }
    struct sbx__ndjson nd;
    sbx__ndjson_init(&nd, (size_t)8 << 20, 0, count_event, &seen);
    int64_t t0 = sbx_time_mono_ns();
    for (size_t off = 0; off < text.len; off += 65536) {
        size_t k = text.len - off < 65536 ? text.len - off : 65536;
        if (sbx__ndjson_feed(&nd, text.data + off, k, &err) < 0)
            break;
    }
    double s = ms_since(t0) / 1000.0;
    printf("watch decoding: %zu events (%.1f MiB) in %.2f s: %.0f events/s on one core\n", seen,
           text.len / 1048576.0, s, seen / s);
    figure("load_decode_events_s", seen / s);
    sbx__ndjson_release(&nd);
    sbx_buf_release(&text);
    json_decref(items);
}

static struct sbx_client *client_of(const char *kubeconfig, const char *image, const char *ns)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_kube_options o = {.kubeconfig = kubeconfig,
                                 .context = "fake",
                                 .namespace_name = ns,
                                 .image = image,
                                 .ready_timeout_ms = 120000};
    if (sbx_client_new("kubernetes", &o, &c, &err) < 0) {
        fprintf(stderr, "bench-kube: %s\n", err.msg);
        exit(1);
    }
    return c;
}

/* ---- costs ---- */

static struct sbx_manifest *files_manifest(void)
{
    struct sbx_manifest *m = sbx_manifest_new();
    char content[4096], name[64];
    memset(content, 'x', sizeof(content));
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof(name), "data/f%d.txt", i);
        if (sbx_manifest_add_file(m, name, content, sizeof(content), NULL, NULL) < 0)
            exit(1);
    }
    return m;
}

static int exec_true(struct sbx_session *s, struct sbx_error *err)
{
    const char *const tru[] = {"true", NULL};
    struct sbx_exec_spec spec = {.argv = tru};
    struct sbx_exec_result r;
    int rc = sbx_session_exec(s, &spec, &r, err);
    if (rc == 0)
        sbx_exec_result_release(&r);
    return rc;
}

/* A 32 MiB file of random bytes in the workspace (made in the pod: no upload measured). */
static int fill_workspace(struct sbx_session *s, struct sbx_error *err)
{
    struct sbx_exec_spec spec = {.command = "head -c 33554432 /dev/urandom > big.bin"};
    struct sbx_exec_result r;
    int rc = sbx_session_exec(s, &spec, &r, err);
    if (rc == 0)
        sbx_exec_result_release(&r);
    return rc;
}

static void costs(struct sbx_client *c, int runs)
{
    struct sbx_error err = SBX_ERROR_INIT;
    double create[MAX_RUNS], ex[MAX_RUNS], man[MAX_RUNS], snap[MAX_RUNS], restore[MAX_RUNS],
            rm[MAX_RUNS];
    char dir[] = "/tmp/bench-kube-store.XXXXXX";
    struct sbx_snapshot_store *st = NULL;
    struct sbx_manifest *m = files_manifest();
    if (!mkdtemp(dir) || sbx_snapshot_store_open(dir, &st, &err) < 0)
        goto fail;
    setenv("SBX_SNAPSHOTS", dir, 1);
    for (int i = 0; i < runs; i++) {
        struct sbx_session *s = NULL, *s2 = NULL, *s3 = NULL;
        char *ref = NULL;
        int64_t t0 = sbx_time_mono_ns();
        if (sbx_client_create(c, NULL, &s, &err) < 0)
            goto fail;
        create[i] = ms_since(t0);
        t0 = sbx_time_mono_ns();
        if (exec_true(s, &err) < 0)
            goto fail;
        ex[i] = ms_since(t0);
        struct sbx_create_spec ms = {.manifest = m};
        t0 = sbx_time_mono_ns();
        if (sbx_client_create(c, &ms, &s2, &err) < 0)
            goto fail;
        man[i] = ms_since(t0);
        if (fill_workspace(s, &err) < 0)
            goto fail;
        t0 = sbx_time_mono_ns();
        if (sbx_session_snapshot(s, st, &ref, &err) < 0)
            goto fail;
        snap[i] = 32.0 / (ms_since(t0) / 1000.0);
        struct sbx_create_spec from = {.snapshot = ref};
        t0 = sbx_time_mono_ns();
        if (sbx_client_create(c, &from, &s3, &err) < 0)
            goto fail;
        restore[i] = ms_since(t0);
        t0 = sbx_time_mono_ns();
        if (sbx_session_delete(s, &err) < 0)
            goto fail;
        rm[i] = ms_since(t0);
        (void)sbx_session_delete(s2, &err);
        (void)sbx_session_delete(s3, &err);
        sbx_session_free(s);
        sbx_session_free(s2);
        sbx_session_free(s3);
        free(ref);
        fprintf(stderr, "bench-kube: run %d done\n", i + 1);
    }
    printf("costs against the fake (medians of %d): create %.0f ms, exec true %.1f ms, create "
           "with 200 files %.0f ms, snapshot of 32 MiB %.1f MiB/s, create from it %.0f ms, rm "
           "%.0f ms\n",
           runs, median(create, runs), median(ex, runs), median(man, runs), median(snap, runs),
           median(restore, runs), median(rm, runs));
    figure("fake_create_ms", median(create, runs));
    figure("fake_exec_ms", median(ex, runs));
    figure("fake_manifest200_ms", median(man, runs));
    figure("fake_snapshot_mib_s", median(snap, runs));
    figure("fake_restore_ms", median(restore, runs));
    figure("fake_rm_ms", median(rm, runs));
    sbx_snapshot_store_free(st);
    sbx_manifest_free(m);
    return;
fail:
    fprintf(stderr, "bench-kube: costs: %s\n", err.msg);
    exit(1);
}

/* CONCURRENT commands running at once on one session: the harness's fds and threads. */
static void concurrency(struct sbx_client *c)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    int ids[CONCURRENT], n = 0;
    if (sbx_client_create(c, NULL, &s, &err) < 0)
        goto fail;
    int fds0 = count_dir("/proc/self/fd"), th0 = count_dir("/proc/self/task") + 1;
    for (; n < CONCURRENT; n++) {
        struct sbx_pty_update u;
        struct sbx_exec_spec spec = {.command = "exec sleep 30"};
        if (sbx_session_pty_start(s, &spec, 0, &u, &err) < 0)
            goto fail;
        ids[n] = u.id;
        sbx_pty_update_release(&u);
    }
    int fds1 = count_dir("/proc/self/fd"), th1 = count_dir("/proc/self/task") + 1;
    printf("%d commands running: %d fds (%d before, %.1f per command), %d threads (%d before)\n",
           CONCURRENT, fds1, fds0, (double)(fds1 - fds0) / CONCURRENT, th1, th0);
    figure("harness_fds_per_command", (double)(fds1 - fds0) / CONCURRENT);
    figure("harness_threads", th1);
    for (int i = 0; i < n; i++)
        (void)sbx_session_pty_kill(s, ids[i], &err);
    (void)sbx_session_delete(s, &err);
    sbx_session_free(s);
    return;
fail:
    fprintf(stderr, "bench-kube: concurrency (%d started): %s\n", n, err.msg);
    exit(1);
}

/* ---- load ---- */

struct maker {
    struct sbx__kube_api *api;
    int from, to;
    const char *image;
    int errors;
    char last[SBX_ERROR_MSG_MAX];
};

static void *make_objects(void *arg)
{
    struct maker *mk = arg;
    json_t *ann = json_pack("{s:s,s:s,s:s}", "sbx.io/root", "/workspace", "sbx.io/container",
                            "sandbox", "sbx.io/created", "2026-12-03T00:00:00Z");
    for (int i = mk->from; i < mk->to; i++) {
        char id[17], name[32];
        snprintf(id, sizeof(id), "%016x", (unsigned)i + 0x10000000u);
        snprintf(name, sizeof(name), "sbx-%s", id);
        struct sbx__kube_spec sp = {.id = id,
                                    .name = name,
                                    .namespace_name = mk->api->namespace_name,
                                    .root = "/workspace",
                                    .image = mk->image,
                                    .memory = (uint64_t)1 << 30,
                                    .cpu_millis = 1000,
                                    .disk = (uint64_t)1 << 30,
                                    .run_as_user = 1000,
                                    .annotations = ann};
        json_t *obj = sbx__kube_sandbox_object(&sp);
        struct sbx_error err = SBX_ERROR_INIT;
        if (sbx__kube_create(mk->api, SBX__KUBE_SANDBOX, obj, NULL, &err) < 0) {
            mk->errors++;
            snprintf(mk->last, sizeof(mk->last), "%s", err.msg);
        }
        json_decref(obj);
    }
    json_decref(ann);
    return NULL;
}

struct patcher {
    struct sbx__kube_api *api;
    json_t *names;
    size_t from, to;
};

static void *patch_pods(void *arg)
{
    struct patcher *p = arg;
    json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "bench", "changed");
    for (size_t i = p->from; i < p->to; i++) {
        struct sbx_error err = SBX_ERROR_INIT;
        (void)sbx__kube_patch(p->api, SBX__KUBE_POD, json_string_value(json_array_get(p->names, i)),
                              patch, NULL, &err);
    }
    json_decref(patch);
    return NULL;
}

static int true_now(const json_t *objs, void *ud, struct sbx_error *err)
{
    (void)objs;
    (void)ud;
    (void)err;
    return 1;
}

static void load_watch(struct sbx__kube_api *api)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *pods = NULL, *v, *names = json_array();
    size_t i;
    if (sbx__kube_list(api, SBX__KUBE_POD, "sbx.io/id", NULL, &pods, NULL, &err) < 0)
        goto fail;
    json_array_foreach(pods, i, v) if (json_array_size(names) < WATCH_CHANGES)
            json_array_append_new(names, json_string(sbx__kube_name_of(v)));
    json_decref(pods);
    struct sbx__kube_watch *w = sbx__kube_watch_new(api, SBX__KUBE_POD);
    int64_t t0 = sbx_time_mono_ns();
    if (sbx__kube_watch_wait(w, "1000000000000000", true_now, NULL, sbx_deadline_after_ms(60000),
                             NULL, &err) < 0)
        goto fail;
    double start_ms = ms_since(t0);
    size_t n = json_array_size(names);
    pthread_t th[THREADS];
    struct patcher ps[THREADS];
    t0 = sbx_time_mono_ns();
    for (int k = 0; k < THREADS; k++) {
        ps[k] = (struct patcher){api, names, n * (size_t)k / THREADS,
                                 n * (size_t)(k + 1) / THREADS};
        pthread_create(&th[k], NULL, patch_pods, &ps[k]);
    }
    for (int k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
    double patch_s = ms_since(t0) / 1000.0;
    struct sbx__kube_watch_stats st;
    int64_t deadline = sbx_deadline_after_ms(120000);
    do {
        sbx_sleep_ms(20);
        sbx__kube_watch_stats(w, &st);
    } while (st.events < n && sbx_deadline_poll_ms(deadline) > 0);
    double all_s = ms_since(t0) / 1000.0;
    printf("shared watch: started in %.0f ms (a list of one item, then the stream); %llu of %zu "
           "changes seen %.2f s after the first (the patches took %.2f s): %.0f events/s, %zu "
           "objects held\n",
           start_ms, (unsigned long long)st.events, n, all_s, patch_s, st.events / all_s,
           st.objects);
    figure("load_watch_start_ms", start_ms);
    figure("load_watch_events_s", st.events / all_s);
    sbx__kube_watch_free(w);
    json_decref(names);
    return;
fail:
    fprintf(stderr, "bench-kube: watch: %s\n", err.msg);
    exit(1);
}

static void load(const char *kubeconfig, const char *image, int n)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__kube_api *api = NULL;
    struct sbx_kube_options o = {
            .kubeconfig = kubeconfig, .context = "fake", .namespace_name = "default"};
    if (sbx__kube_api_new(&o, &api, &err) < 0)
        goto fail;
    pthread_t th[THREADS];
    struct maker mk[THREADS];
    int64_t t0 = sbx_time_mono_ns();
    /* Made already (a second run against the same fake): the last one is there. */
    char last[32];
    json_t *have = NULL;
    snprintf(last, sizeof(last), "sbx-%016x", (unsigned)(n - 1) + 0x10000000u);
    int made = sbx__kube_get(api, SBX__KUBE_SANDBOX, last, &have, &err) == 0;
    json_decref(have);
    sbx_error_clear(&err);
    for (int k = 0; k < THREADS && !made; k++) {
        mk[k] = (struct maker){
                .api = api, .from = n * k / THREADS, .to = n * (k + 1) / THREADS, .image = image};
        pthread_create(&th[k], NULL, make_objects, &mk[k]);
    }
    int errors = 0;
    for (int k = 0; k < THREADS && !made; k++) {
        pthread_join(th[k], NULL);
        errors += mk[k].errors;
        if (mk[k].errors)
            fprintf(stderr, "bench-kube: create: %s\n", mk[k].last);
    }
    if (made)
        printf("load: %d Sandboxes were there already\n", n);
    else
        printf("load: %d Sandboxes made in %.1f s (%d failed; 4 threads, one connection per "
               "request)\n",
               n, ms_since(t0) / 1000.0, errors);
    struct sbx_client *c = client_of(kubeconfig, image, "default");
    double l[3], a[20], cpu = cpu_s();
    long rss0 = rss_kib(), rss1 = 0;
    size_t listed = 0;
    for (int i = 0; i < 3; i++) {
        json_t *list = NULL;
        t0 = sbx_time_mono_ns();
        if (sbx_client_list(c, &list, &err) < 0)
            goto fail;
        l[i] = ms_since(t0);
        listed = json_array_size(list);
        long r = rss_kib();
        rss1 = r > rss1 ? r : rss1;
        json_decref(list);
    }
    cpu = (cpu_s() - cpu) / 3;
    for (int i = 0; i < 20; i++) {
        char id[17];
        struct sbx_session *s = NULL;
        snprintf(id, sizeof(id), "%016x", (unsigned)((i * 7919) % n) + 0x10000000u);
        t0 = sbx_time_mono_ns();
        if (sbx_client_attach(c, id, &s, &err) < 0)
            goto fail;
        a[i] = ms_since(t0);
        sbx_session_free(s);
    }
    struct sbx_session *s = NULL;
    t0 = sbx_time_mono_ns();
    /* A prefix that 16 ids share: every sandbox is listed, the answer is "ambiguous". */
    if (sbx_client_attach(c, "000000001000270", &s, &err) < 0 && err.code != SBX_E_INVAL)
        goto fail;
    double prefix_ms = ms_since(t0);
    sbx_session_free(s);
    printf("with %d in the cluster: list %.2f s (%.2f s of it sbx's CPU; %zu sandboxes, %ld MiB "
           "more resident), attach by id %.1f ms, attach by a prefix %.0f ms\n",
           n, median(l, 3) / 1000.0, cpu, listed, (rss1 - rss0) / 1024, median(a, 20), prefix_ms);
    figure("load_list_cpu_s", cpu);
    figure("load_objects", n);
    figure("load_list_s", median(l, 3) / 1000.0);
    figure("load_attach_ms", median(a, 20));
    figure("load_attach_prefix_ms", prefix_ms);
    load_watch(api);
    decode_capacity(api);
    sbx_client_free(c);
    sbx__kube_api_free(api);
    return;
fail:
    fprintf(stderr, "bench-kube: load: %s\n", err.msg);
    exit(1);
}

int main(int argc, char **argv)
{
    int runs = 5, n = 10000;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--load") == 0 && i + 1 < argc)
            n = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--figures") == 0 && i + 1 < argc)
            out = argv[++i];
        else {
            fprintf(stderr, "usage: bench-kube [--runs N] [--load N] [--figures FILE]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > MAX_RUNS || n < 1) {
        fprintf(stderr, "bench-kube: --runs 1..%d, --load 1 and up\n", MAX_RUNS);
        return 2;
    }
    figures = json_object();
    const char *kc = getenv("SBX_TEST_KUBECONFIG_FAKE");
    const char *img = getenv("SBX_TEST_DOCKER_IMAGE");
    const char *lkc = getenv("SBX_BENCH_KUBE_LOAD");
    img = img && img[0] ? img : "sbx-test:1";
    if (kc && kc[0]) {
        struct sbx_client *c = client_of(kc, img, "default");
        costs(c, runs);
        concurrency(c);
        sbx_client_free(c);
    } else {
        printf("costs: skipped (SBX_TEST_KUBECONFIG_FAKE names no fake)\n");
    }
    if (lkc && lkc[0])
        load(lkc, img, n);
    else
        printf("load: skipped (SBX_BENCH_KUBE_LOAD names no fake with --kubelet none)\n");
    if (out) {
        char *text = sbx_json_dumps(figures, SBX_JSON_PRETTY);
        FILE *f = fopen(out, "we");
        int bad = !f || fputs(text, f) < 0;
        if ((f && fclose(f) != 0) || bad)
            fprintf(stderr, "bench-kube: cannot write '%s'\n", out);
        free(text);
    }
    json_decref(figures);
    return 0;
}
