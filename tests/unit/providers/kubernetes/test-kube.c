/* The Kubernetes provider without a cluster: kubeconfig files (merging, contexts, relative
 * paths, inline data, tokens from files, what is refused and how it is said), in-cluster
 * credentials, the objects sbx sends (checked against agent-sandbox's CRD schemas by
 * tests/kubernetes/crdcheck.py when python3 is there) and what it reads back from pods. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/spawn.h"
#include "providers/kubernetes/kube.h"
#include "providers/kubernetes/api.h"
#include "providers/kubernetes/kubeconfig.h"
#include "rmtree.h"
#include "sbx/b64.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

static char dir[256];

static char *path_in(const char *name)
{
    return sbx_xasprintf("%s/%s", dir, name);
}

static void put(const char *name, const char *text)
{
    char *p = path_in(name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    free(p);
}

static char *b64(const char *s)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_b64_encode(s, strlen(s), &b, NULL) < 0)
        return NULL;
    return sbx_buf_detach(&b, NULL);
}

static int load(const char *kubeconfig, const char *context, struct sbx__kube_config *c,
                struct sbx_error *err)
{
    struct sbx__kube_config_opts o = {.kubeconfig = kubeconfig, .context = context};
    sbx__kube_config_init(c);
    return sbx__kube_config_load(&o, c, err);
}

static const char *reveal(const struct sbx_secret *s)
{
    return s ? sbx_secret_reveal(s, NULL) : NULL;
}

static void test_kubeconfig(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__kube_config c;
    char *ca = b64("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n");
    char *text = sbx_xasprintf(
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n"
            "- name: one\n  cluster:\n    server: https://10.0.0.1:6443/\n"
            "    certificate-authority-data: %s\n"
            "- name: two\n  cluster:\n    server: https://two.example:443\n"
            "    certificate-authority: certs/ca.pem\n    insecure-skip-tls-verify: true\n"
            "users:\n"
            "- name: tok\n  user:\n    token: abc.def\n"
            "- name: file\n  user:\n    tokenFile: tok.txt\n"
            "- name: cert\n  user:\n    client-certificate: certs/c.pem\n"
            "    client-key-data: %s\n"
            "contexts:\n"
            "- name: a\n  context: {cluster: one, user: tok, namespace: team}\n"
            "- name: b\n  context: {cluster: two, user: file}\n"
            "- name: c\n  context: {cluster: two, user: cert}\n"
            "current-context: a\n",
            ca, "S0VZ");
    put("config", text);
    free(text);
    char *certs = path_in("certs");
    mkdir(certs, 0700);
    free(certs);
    put("certs/ca.pem", "CA FILE\n");
    put("certs/c.pem", "CERT FILE\n");
    put("tok.txt", "  from-file\n\n");
    char *cfg = path_in("config");

    CHECK_OK(load(cfg, NULL, &c, &err), &err);
    CHECK_EQ_STR(c.context, "a");
    CHECK_EQ_STR(c.server, "https://10.0.0.1:6443");
    CHECK_EQ_STR(c.namespace, "team");
    CHECK_EQ_STR(reveal(c.token), "abc.def");
    CHECK_CONTAINS(c.ca.data, "BEGIN CERTIFICATE");
    CHECK(!c.insecure && !c.cert.len && !c.key && !c.token_file);
    CHECK_EQ_STR(c.source, cfg);
    sbx__kube_config_release(&c);

    /* relative paths are the file's directory's; a token file is trimmed */
    CHECK_OK(load(cfg, "b", &c, &err), &err);
    CHECK_EQ_STR(c.ca.data, "CA FILE\n");
    CHECK(c.insecure);
    CHECK_EQ_STR(reveal(c.token), "from-file");
    CHECK(c.token_file && strstr(c.token_file, "/tok.txt"));
    CHECK(c.namespace == NULL);
    put("tok.txt", "rotated");
    CHECK_OK(sbx__kube_config_reload_token(&c, &err), &err);
    CHECK_EQ_STR(reveal(c.token), "rotated");
    sbx__kube_config_release(&c);

    CHECK_OK(load(cfg, "c", &c, &err), &err);
    CHECK_EQ_STR(c.cert.data, "CERT FILE\n");
    CHECK_EQ_STR(reveal(c.key), "KEY");
    CHECK(c.token == NULL);
    sbx__kube_config_release(&c);

    CHECK_ERR(load(cfg, "zz", &c, &err), SBX_E_NOTFOUND, &err, "no context 'zz' (a, b, c)");

    /* a list: the first file that names something wins; current-context from the first */
    put("first", "current-context: b\nusers:\n- name: file\n  user: {token: first-wins}\n");
    char *list = sbx_xasprintf("%s/missing:%s/first:%s", dir, dir, cfg);
    CHECK_OK(load(list, NULL, &c, &err), &err);
    CHECK_EQ_STR(c.context, "b");
    CHECK_EQ_STR(reveal(c.token), "first-wins");
    CHECK_EQ_STR(c.server, "https://two.example:443");
    sbx__kube_config_release(&c);
    free(list);

    /* $KUBECONFIG when no option */
    setenv("KUBECONFIG", cfg, 1);
    CHECK_OK(load(NULL, "a", &c, &err), &err);
    CHECK_EQ_STR(c.context, "a");
    sbx__kube_config_release(&c);
    char *none = path_in("none:also-none");
    setenv("KUBECONFIG", none, 1);
    CHECK_ERR(load(NULL, NULL, &c, &err), SBX_E_NOTFOUND, &err,
              "none of the files of $KUBECONFIG exists");
    unsetenv("KUBECONFIG");
    free(none);
    char *missing = path_in("nope");
    CHECK_ERR(load(missing, NULL, &c, &err), SBX_E_NOTFOUND, &err, NULL);
    free(missing);
    free(cfg);
    free(ca);
}

static void test_refused(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__kube_config c;
    char *cfg = path_in("bad");
    static const struct {
        const char *user, *cluster, *want;
        int code;
    } cases[] = {
            {"{exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, args: [eks]}}",
             "{server: 'https://x'}", "the exec plugin 'aws', which sbx does not run",
             SBX_E_UNSUPPORTED},
            {"{auth-provider: {name: gcp}}", "{server: 'https://x'}", "auth-provider 'gcp'",
             SBX_E_UNSUPPORTED},
            {"{username: u, password: p}", "{server: 'https://x'}", "basic authentication",
             SBX_E_UNSUPPORTED},
            {"{token: t, as: admin}", "{server: 'https://x'}", "impersonation", SBX_E_UNSUPPORTED},
            {"{token: t}", "{server: 'https://x', proxy-url: 'http://p:3128'}", "'proxy-url'",
             SBX_E_UNSUPPORTED},
            {"{token: t}", "{server: 'http://plain:8080'}", "does not send a token", SBX_E_INVAL},
            {"{token: t}", "{insecure-skip-tls-verify: true}", "server URL", SBX_E_INVAL},
            {"{client-certificate-data: Q0VSVA==}", "{server: 'https://x'}", "without its key",
             SBX_E_INVAL},
            {"{token: t}", "{server: 'https://x', certificate-authority-data: '!!'}", "offset",
             SBX_E_PARSE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *text = sbx_xasprintf("clusters:\n- name: k\n  cluster: %s\nusers:\n- name: u\n"
                                   "  user: %s\ncontexts:\n- name: x\n  context: {cluster: k, "
                                   "user: u}\ncurrent-context: x\n",
                                   cases[i].cluster, cases[i].user);
        put("bad", text);
        free(text);
        CHECK_ERR(load(cfg, NULL, &c, &err), cases[i].code, &err, cases[i].want);
    }
    /* no current context: the message lists what there is */
    put("bad", "clusters: []\ncontexts:\n- name: only\n  context: {cluster: k}\n");
    CHECK_ERR(load(cfg, NULL, &c, &err), SBX_E_NOTFOUND, &err, "no current-context");
    CHECK_CONTAINS(err.msg, "(only)");
    put("bad", "- a list\n");
    CHECK_ERR(load(cfg, NULL, &c, &err), SBX_E_INVAL, &err, "not a mapping");
    free(cfg);
}

static void test_in_cluster(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__kube_config c;
    char *sa = path_in("sa");
    mkdir(sa, 0700);
    put("sa/token", "sa-token\n");
    put("sa/ca.crt", "SA CA\n");
    put("sa/namespace", "agents\n");
    struct sbx__kube_config_opts o = {.in_cluster = 1, .sa_dir = sa};
    unsetenv("KUBERNETES_SERVICE_HOST");
    sbx__kube_config_init(&c);
    CHECK_ERR(sbx__kube_config_load(&o, &c, &err), SBX_E_NOTFOUND, &err, "not inside a pod");
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    sbx__kube_config_init(&c);
    CHECK_OK(sbx__kube_config_load(&o, &c, &err), &err);
    CHECK_EQ_STR(c.server, "https://[fd00::1]:443");
    CHECK_EQ_STR(c.context, SBX__KUBE_IN_CLUSTER);
    CHECK_EQ_STR(c.namespace, "agents");
    CHECK_EQ_STR(reveal(c.token), "sa-token");
    CHECK_EQ_STR(c.ca.data, "SA CA\n");
    sbx__kube_config_release(&c);
    /* no kubeconfig anywhere, inside a pod: its service account, as client-go does */
    char *none = path_in("no-such-config");
    setenv("KUBECONFIG", none, 1);
    struct sbx__kube_config_opts d = {.sa_dir = sa};
    sbx__kube_config_init(&c);
    CHECK_OK(sbx__kube_config_load(&d, &c, &err), &err);
    CHECK_EQ_STR(c.context, SBX__KUBE_IN_CLUSTER);
    sbx__kube_config_release(&c);
    unsetenv("KUBECONFIG");
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    free(none);
    free(sa);
}

static void test_quantities(void)
{
    char *q;
    CHECK_EQ_STR(q = sbx__kube_bytes_quantity((uint64_t)2 << 30), "2Gi");
    free(q);
    CHECK_EQ_STR(q = sbx__kube_bytes_quantity((uint64_t)1536 << 20), "1536Mi");
    free(q);
    CHECK_EQ_STR(q = sbx__kube_bytes_quantity(1000), "1000");
    free(q);
    CHECK_EQ_STR(q = sbx__kube_cpu_quantity(1500), "1500m");
    free(q);
    CHECK_EQ_STR(q = sbx__kube_cpu_quantity(2000), "2");
    free(q);
}

/* crdcheck.py KIND on obj: 1 valid, 0 not (its message printed), -1 cannot run. */
static int crdcheck(const char *kind, const json_t *obj, int quiet)
{
    const char *src = getenv("SBX_SRCDIR");
    if (!src)
        return -1;
    char *script = sbx_xasprintf("%s/tests/kubernetes/crdcheck.py", src);
    char *file = path_in("obj.json");
    char *text = sbx_json_dumps(obj, SBX_JSON_PRETTY);
    put("obj.json", text);
    const char *argv[] = {"python3", script, kind, file, NULL};
    struct sbx__spawn sp = {.program = "python3", .argv = argv};
    struct sbx_buf errb;
    sbx_buf_init(&errb, 65536);
    sp.err.how = SBX__SPAWN_PIPE;
    struct sbx__spawn_capture cap = {.err = &errb};
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = sbx__spawn_run(&sp, 60000, &cap, &err);
    int ok = rc < 0 ? -1 : WIFEXITED(cap.status) && WEXITSTATUS(cap.status) == 0;
    if (rc == 0 && !ok && !quiet)
        printf("#   crdcheck %s: %s\n#   %s\n", kind, errb.data ? errb.data : "", text);
    sbx_buf_release(&errb);
    free(text);
    free(file);
    free(script);
    return ok;
}

static void check_crd(const char *kind, const json_t *obj)
{
    int r = crdcheck(kind, obj, 0);
    if (r < 0) {
        tap_count++;
        printf("ok %d # SKIP crdcheck.py cannot run (python3, SBX_SRCDIR)\n", tap_count);
        return;
    }
    CHECK(r == 1);
}

static void test_objects(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *env = json_pack("[{s:s,s:s}]", "name", "GREETING", "value", "hi");
    json_t *ann = json_pack("{s:s}", "sbx.io/root", "/workspace");
    struct sbx__kube_spec s = {.id = "0123456789abcdef",
                               .name = "sbx-0123456789abcdef",
                               .namespace_name = "team",
                               .root = "/workspace",
                               .image = "busybox:1.36",
                               .runtime_class = "gvisor",
                               .memory = (uint64_t)1 << 30,
                               .cpu_millis = 1500,
                               .disk = (uint64_t)5 << 30,
                               .storage_class = "fast",
                               .run_as_user = 1000,
                               .env = env,
                               .annotations = ann};
    json_t *sb = sbx__kube_sandbox_object(&s);
    check_crd("Sandbox", sb);
    /* the check itself refuses what the server would */
    json_t *wrong = json_deep_copy(sb);
    sbx_json_set(json_object_get(wrong, "spec"), "operatingMode", sbx_json_str("Paused"));
    int verdict = crdcheck("Sandbox", wrong, 1);
    if (verdict >= 0)
        CHECK_EQ_INT(verdict, 0);
    json_decref(wrong);
    json_t *ps =
            json_object_get(json_object_get(json_object_get(sb, "spec"), "podTemplate"), "spec");
    CHECK(json_is_false(json_object_get(ps, "automountServiceAccountToken")));
    CHECK_EQ_STR(json_string_value(json_object_get(ps, "runtimeClassName")), "gvisor");
    CHECK_EQ_INT(json_integer_value(
                         json_object_get(json_object_get(ps, "securityContext"), "runAsUser")),
                 1000);
    json_t *c0 = json_array_get(json_object_get(ps, "containers"), 0);
    json_t *lim = json_object_get(json_object_get(c0, "resources"), "limits");
    CHECK_EQ_STR(json_string_value(json_object_get(lim, "memory")), "1Gi");
    CHECK_EQ_STR(json_string_value(json_object_get(lim, "cpu")), "1500m");
    json_t *vct =
            json_array_get(json_object_get(json_object_get(sb, "spec"), "volumeClaimTemplates"), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(vct, "metadata"), "name")),
                 "workspace");
    CHECK_EQ_STR(json_string_value(json_object_get(
                         json_object_get(json_object_get(sb, "metadata"), "labels"), "sbx.io/id")),
                 "0123456789abcdef");

    /* without a volume, as the image's user, no limits */
    struct sbx__kube_spec t = s;
    t.disk = SBX_KUBE_LIMIT_NONE;
    t.run_as_user = SBX_KUBE_IMAGE_USER;
    t.memory = t.cpu_millis = SBX_KUBE_LIMIT_NONE;
    t.runtime_class = NULL;
    json_t *sb2 = sbx__kube_sandbox_object(&t);
    check_crd("Sandbox", sb2);
    CHECK(json_object_get(json_object_get(sb2, "spec"), "volumeClaimTemplates") == NULL);

    json_t *claim = sbx__kube_claim_object(&s, "python-pool");
    check_crd("SandboxClaim", claim);
    CHECK_EQ_STR(json_string_value(json_object_get(
                         json_object_get(json_object_get(claim, "spec"), "warmPoolRef"), "name")),
                 "python-pool");

    json_t *tmpl =
            json_pack("{s:{s:s},s:{s:{s:{s:[{s:s,s:s}]}},s:[{s:{s:s},s:{}}]}}", "metadata", "name",
                      "py", "spec", "podTemplate", "spec", "containers", "name", "main", "image",
                      "python:3", "volumeClaimTemplates", "metadata", "name", "data", "spec");
    json_t *from = NULL;
    CHECK_OK(sbx__kube_sandbox_from_template(tmpl, &s, &from, &err), &err);
    check_crd("Sandbox", from);
    json_t *bad = json_pack("{s:{s:s},s:{}}", "metadata", "name", "empty", "spec");
    json_t *none = NULL;
    CHECK_ERR(sbx__kube_sandbox_from_template(bad, &s, &none, &err), SBX_E_INVAL, &err,
              "'empty' has no pod template");

    json_t *pod = sbx__kube_pod_object(&s);
    json_t *pvc = sbx__kube_pvc_object(&s);
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(pvc, "metadata"), "name")),
                 "workspace-sbx-0123456789abcdef");
    json_t *vol = json_array_get(json_object_get(json_object_get(pod, "spec"), "volumes"), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(vol, "persistentVolumeClaim"),
                                                   "claimName")),
                 "workspace-sbx-0123456789abcdef");
    CHECK_EQ_STR(json_string_value(json_object_get(
                         json_object_get(json_object_get(pod, "metadata"), "labels"),
                         SBX__KUBE_LABEL_BARE)),
                 "pod");
    json_decref(sb);
    json_decref(sb2);
    json_decref(claim);
    json_decref(tmpl);
    json_decref(from);
    json_decref(bad);
    json_decref(pod);
    json_decref(pvc);
    json_decref(env);
    json_decref(ann);
}

static void test_pod_status(void)
{
    char why[512];
    json_t *ready = json_loads("{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":"
                               "\"Ready\",\"status\":\"True\"}]}}",
                               0, NULL);
    CHECK(sbx__kube_pod_ready(ready));
    CHECK(!sbx__kube_pod_failure(ready, why, sizeof(why)));
    json_t *pull = json_loads(
            "{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":[{\"name\":\"sandbox\","
            "\"image\":\"nope:1\",\"state\":{\"waiting\":{\"reason\":\"ImagePullBackOff\","
            "\"message\":\"Back-off pulling image \\\"nope:1\\\"\"}}}]}}",
            0, NULL);
    CHECK(!sbx__kube_pod_ready(pull));
    CHECK(sbx__kube_pod_failure(pull, why, sizeof(why)));
    CHECK_CONTAINS(why, "image 'nope:1' cannot be pulled (ImagePullBackOff");
    json_t *pending = json_loads(
            "{\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"PodScheduled\","
            "\"status\":\"False\",\"reason\":\"Unschedulable\",\"message\":\"0/1 nodes are "
            "available: 1 Insufficient memory.\"}]}}",
            0, NULL);
    json_t *events = json_loads("{\"items\":[{\"type\":\"Normal\",\"reason\":\"X\"},{\"type\":"
                                "\"Warning\",\"reason\":\"FailedScheduling\",\"message\":\"no "
                                "room\"}]}",
                                0, NULL);
    CHECK(!sbx__kube_pod_failure(pending, why, sizeof(why)));
    sbx__kube_pod_pending_why(pending, events, why, sizeof(why));
    CHECK_CONTAINS(why, "pod phase Pending; not scheduled (Unschedulable: 0/1 nodes");
    CHECK_CONTAINS(why, "event FailedScheduling: no room");
    json_decref(ready);
    json_decref(pull);
    json_decref(pending);
    json_decref(events);
}

static void test_entries(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_dirlist l = {0};
    static const char good[] = "81a4 12 1000 1000 1700000000\nfile.txt\0"
                               "41ed 4096 0 0 1700000001\nsub dir\0"
                               "a1ff 5 0 0 1\nlink\0target\0"
                               "81a4 0 0 0 1\nnew\nline\0";
    CHECK_OK(sbx__kube_parse_entries(good, sizeof(good) - 1, &l, &err), &err);
    CHECK_EQ_INT(l.n, 4);
    if (l.n == 4) {
        CHECK_EQ_STR(l.v[0].name, "file.txt");
        CHECK(l.v[0].type == SBX_FILE_REGULAR);
        CHECK_EQ_INT(l.v[0].mode, 0644);
        CHECK_EQ_INT(l.v[0].size, 12);
        CHECK_EQ_INT(l.v[0].uid, 1000);
        CHECK(l.v[1].type == SBX_FILE_DIR);
        CHECK_EQ_STR(l.v[1].name, "sub dir");
        CHECK(l.v[2].type == SBX_FILE_SYMLINK);
        CHECK_EQ_STR(l.v[2].target, "target");
        CHECK_EQ_STR(l.v[3].name, "new\nline"); /* a name cannot forge a record */
    }
    sbx_dirlist_release(&l);
    static const struct {
        const char *text;
        size_t n;
    } bad[] = {
            {"81a4 12 0 0 1\nno-nul", 20},
            {"garbage\nx\0", 10},
            {"81a4 12 0 0 1\n\0", 15},
            {"81a4 1 0 0 1\na/b\0", 17},
            {"a1ff 5 0 0 1\nlink\0no-target-nul", 31},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        struct sbx_dirlist b = {0};
        CHECK(sbx__kube_parse_entries(bad[i].text, bad[i].n, &b, &err) == -SBX_E_PARSE);
        sbx_dirlist_release(&b);
    }
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *o = json_pack("{s:s,s:s}", "image", "busybox", "warm_pool", "pool");
    CHECK_ERR(sbx_provider_options_check("kubernetes", o, NULL, &err), SBX_E_INVAL, &err,
              "give one of image, warm_pool and template");
    json_decref(o);
    o = json_pack("{s:s}", "template", "Not_A_Name");
    CHECK_ERR(sbx_provider_options_check("kubernetes", o, NULL, &err), SBX_E_INVAL, &err,
              "template 'Not_A_Name' is not a Kubernetes object name");
    json_decref(o);
    o = json_pack("{s:s,s:s}", "warm_pool", "p", "workload", "pod");
    CHECK_ERR(sbx_provider_options_check("kubernetes", o, NULL, &err), SBX_E_INVAL, &err,
              "not a bare pod");
    json_decref(o);
    json_t *canon = NULL;
    o = json_pack("{s:s,s:s,s:s,s:s}", "memory", "512M", "cpus", "none", "run_as_user", "none",
                  "disk", "none");
    CHECK_OK(sbx_provider_options_check("kubernetes", o, &canon, &err), &err);
    CHECK_EQ_INT(json_integer_value(json_object_get(canon, "memory")), 512 << 20);
    json_decref(canon);
    json_decref(o);
    /* a client is only the credentials read: nothing is sent */
    put("client-config", "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"
                         "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n"
                         "  context: {cluster: c, user: u, namespace: ns1}\ncurrent-context: x\n");
    char *cfg = path_in("client-config");
    o = json_pack("{s:s,s:s}", "kubeconfig", cfg, "image", "busybox");
    struct sbx_client *c = NULL;
    CHECK_OK(sbx_client_new_json("kubernetes", o, &c, &err), &err);
    sbx_client_free(c);
    json_decref(o);
    o = json_pack("{s:s,s:s}", "kubeconfig", cfg, "namespace", "Bad_NS");
    CHECK_ERR(sbx_client_new_json("kubernetes", o, &c, &err), SBX_E_INVAL, &err,
              "'Bad_NS' is not a namespace name");
    json_decref(o);
    free(cfg);
}

static void test_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    static const char good[] =
            "{\"version\":1,\"provider\":\"kubernetes\",\"id\":\"0123456789abcdef\","
            "\"created\":\"2026-12-03T00:00:00Z\",\"root\":\"/workspace\",\"namespace\":"
            "\"team\",\"kind\":\"Sandbox\",\"name\":\"sbx-0123456789abcdef\",\"context\":"
            "\"fake\",\"options\":{},\"exposed_ports\":[],\"workspace_owned\":true,"
            "\"manifest\":null,\"snapshot\":null}";
    CHECK_OK(sbx_session_state_parse(good, strlen(good), &st, &err), &err);
    json_decref(st);
    char *bad = sbx_xstrdup(good);
    char *k = strstr(bad, "\"Sandbox\"");
    memcpy(k, "\"Service\"", 9);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "field 'kind' must be Sandbox, SandboxClaim or Pod");
    free(bad);
}

int main(void)
{
    TAP_START();
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/sbx-kube.XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    TAP_RUN(test_kubeconfig);
    TAP_RUN(test_refused);
    TAP_RUN(test_in_cluster);
    TAP_RUN(test_quantities);
    TAP_RUN(test_objects);
    TAP_RUN(test_pod_status);
    TAP_RUN(test_entries);
    TAP_RUN(test_options);
    TAP_RUN(test_state);
    rm_tree(dir);
    return TAP_DONE();
}
