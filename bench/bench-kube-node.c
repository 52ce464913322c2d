/* bench-kube-node: the kubernetes provider's two ways to a sandbox, side by side on the fake API
 * server (tests/kubernetes/): a bare pod driven through pods/exec (the default) and a pod running
 * sbx-node driven through one port-forward with mutual TLS (--node sbx-node). Numbers only:
 * nothing here passes or fails.
 *
 *   bench-kube-node [--runs N] [--write-rounds N]
 *
 * Needs (else it says it is skipped) SBX_TEST_KUBECONFIG_FAKE (a fake from
 * tests/kubernetes/fake.sh, as root: its host pods run the daemon), SBX_TEST_KUBE_HOST_IMAGE,
 * SBX_TEST_DOCKER_IMAGE and SBX_BUILD_DIR (sbx-node). For each way: create (empty manifest), then
 * RUNS times (default 20), interleaved between the two sandboxes, the round trip of `true` and of
 * writing 200 small files; medians. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx/json.h"
#include "sbx/node.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "sbx/time.h"

#define MAX_RUNS 200
#define FILES    200

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

static void die(const char *what, const struct sbx_error *err)
{
    fprintf(stderr, "bench-kube-node: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static const char *need(const char *name)
{
    const char *v = getenv(name);
    if (!v || !v[0]) {
        printf("bench-kube-node: skipped: %s is not set (see the head of bench-kube-node.c)\n",
               name);
        exit(0);
    }
    return v;
}

/* The certificates of a deployment in dir: ca/, pod.{pem,key} (127.0.0.1), harness.{pem,key}. */
static void certificates(const char *dir)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char ca[512];
    snprintf(ca, sizeof(ca), "%s/ca", dir);
    const char *hosts[] = {"127.0.0.1"};
    struct sbx_node_cert_opts node = {
            .kind = SBX_NODE_CERT_NODE, .hosts = hosts, .n_hosts = 1, .out_dir = dir};
    struct sbx_node_cert_opts harness = {.kind = SBX_NODE_CERT_HARNESS, .out_dir = dir};
    if (sbx_node_ca_init(ca, NULL, NULL, &err) < 0 ||
        sbx_node_cert_issue(ca, "pod", &node, NULL, &err) < 0 ||
        sbx_node_cert_issue(ca, "harness", &harness, NULL, &err) < 0)
        die("certificates", &err);
}

static struct sbx_client *client(const char *label, json_t *opts)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    if (sbx_client_new_json("kubernetes", opts, &c, &err) < 0)
        die(label, &err);
    return c;
}

static struct sbx_session *make(const char *label, struct sbx_client *c, double *create_ms)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    struct sbx_create_spec spec = {0};
    int64_t t0 = sbx_time_mono_ns();
    if (sbx_client_create(c, &spec, &s, &err) < 0)
        die(label, &err);
    *create_ms = ms_since(t0);
    sbx_client_free(c);
    return s;
}

static double exec_true(struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *argv[] = {"true", NULL};
    struct sbx_exec_spec spec = {.argv = argv};
    struct sbx_exec_result r;
    int64_t t0 = sbx_time_mono_ns();
    if (sbx_session_exec(s, &spec, &r, &err) < 0)
        die("exec", &err);
    double ms = ms_since(t0);
    sbx_exec_result_release(&r);
    return ms;
}

static double write_files(struct sbx_session *s, int round)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char path[64], body[64];
    int64_t t0 = sbx_time_mono_ns();
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "f%d-%d.txt", round, i);
        int n = snprintf(body, sizeof(body), "file %d of round %d\n", i, round);
        if (sbx_session_write(s, path, body, (size_t)n, 0644, 0, &err) < 0)
            die("write", &err);
    }
    return ms_since(t0);
}

int main(int argc, char **argv)
{
    int runs = 20, wr = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--write-rounds") == 0 && i + 1 < argc)
            wr = (int)strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench-kube-node [--runs N] [--write-rounds N]\n");
            return 2;
        }
    }
    runs = runs < 1 ? 1 : runs > MAX_RUNS ? MAX_RUNS : runs;
    wr = wr < 1 ? 1 : wr > runs ? runs : wr;
    const char *kcfg = need("SBX_TEST_KUBECONFIG_FAKE"), *host = need("SBX_TEST_KUBE_HOST_IMAGE");
    const char *image = need("SBX_TEST_DOCKER_IMAGE"), *build = need("SBX_BUILD_DIR");
    char dir[] = "/tmp/sbx-bench-kube-node.XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", NULL);
    certificates(dir);
    char *program = sbx_xasprintf("%s/sbx-node", build);
    char *f[5];
    const char *names[] = {"ca/ca.pem", "harness.pem", "harness.key", "pod.pem", "pod.key"};
    for (int i = 0; i < 5; i++)
        f[i] = sbx_xasprintf("%s/%s", dir, names[i]);
    json_t *pod = json_pack("{s:s, s:s, s:s, s:s, s:i}", "kubeconfig", kcfg, "context", "fake",
                            "image", image, "workload", "pod", "ready_timeout", 120);
    json_t *node =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i}", "kubeconfig", kcfg,
                      "context", "fake", "image", host, "node", "sbx-node", "node_program", program,
                      "node_ca", f[0], "node_cert", f[1], "node_key", f[2], "node_tls_cert", f[3],
                      "node_tls_key", f[4], "ready_timeout", 120);
    double cp, cn, ep[MAX_RUNS], en[MAX_RUNS], wp[MAX_RUNS], wn[MAX_RUNS];
    /* Both clients first: bad options stop the bench before anything is made. */
    struct sbx_client *kp = client("pods/exec client", pod), *kn = client("sbx-node client", node);
    struct sbx_session *sp = make("pods/exec sandbox", kp, &cp);
    struct sbx_session *sn = make("sbx-node sandbox", kn, &cn);
    for (int i = 0; i < runs; i++) { /* interleaved: each round runs both ways */
        ep[i] = exec_true(sp);
        en[i] = exec_true(sn);
    }
    for (int i = 0; i < wr; i++) {
        wp[i] = write_files(sp, i);
        wn[i] = write_files(sn, i);
    }
    printf("create (empty manifest): pods/exec %.0f ms, sbx-node %.0f ms (one run each)\n", cp, cn);
    double mep = median(ep, runs), men = median(en, runs);
    double mwp = median(wp, wr), mwn = median(wn, wr);
    printf("exec of true, median of %d: pods/exec %.1f ms, sbx-node %.1f ms\n", runs, mep, men);
    printf("%d files written, median of %d: pods/exec %.0f ms, sbx-node %.0f ms\n", FILES, wr, mwp,
           mwn);
    printf("TABLE|kubernetes, sbx-node mode: exec of true|%.1f ms|pods/exec mode|%.1f ms|%.2fx|"
           "below 1|%s\n",
           men, mep, men / mep, men < mep ? "met" : "missed");
    printf("TABLE|kubernetes, sbx-node mode: %d files written|%.0f ms|pods/exec mode|%.0f ms|"
           "%.2fx|below 1|%s\n",
           FILES, mwn, mwp, mwn / mwp, mwn < mwp ? "met" : "missed");
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_session_delete(sp, &err) < 0)
        fprintf(stderr, "bench-kube-node: remove: %s\n", err.msg);
    if (sbx_session_delete(sn, &err) < 0)
        fprintf(stderr, "bench-kube-node: remove: %s\n", err.msg);
    sbx_session_free(sp);
    sbx_session_free(sn);
    json_decref(pod);
    json_decref(node);
    for (int i = 0; i < 5; i++) {
        unlink(f[i]);
        free(f[i]);
    }
    char *cadir = sbx_xasprintf("%s/ca", dir);
    char *cakey = sbx_xasprintf("%s/ca/ca.key", dir);
    unlink(cakey);
    rmdir(cadir);
    rmdir(dir);
    free(cadir);
    free(cakey);
    free(program);
    return 0;
}
