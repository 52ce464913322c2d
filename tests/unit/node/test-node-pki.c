/* sbx node ca init / cert issue (include/sbx/node.h): the files, their modes, what the
 * certificates are, and every refusal leaving nothing behind. The certificates' chains, purposes
 * and a real mutual TLS handshake with them are checked by openssl in
 * tests/integration/1801-node-certs.sh. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "core/dl-crypto.h"
#include "rmtree.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/node.h"
#include "tap.h"

static char tmp[1024];

static void path(char *out, const char *a, const char *b)
{
    snprintf(out, PATH_MAX, "%s/%s%s%s", tmp, a, b ? "/" : "", b ? b : "");
}

static int mode_of(const char *a, const char *b)
{
    char p[PATH_MAX];
    struct stat st;
    path(p, a, b);
    return stat(p, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

static X509 *load_cert(const char *a, const char *b)
{
    char p[PATH_MAX];
    struct sbx_buf buf;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&buf, 1 << 16);
    path(p, a, b);
    X509 *x = NULL;
    if (sbx_fs_read_path(p, 1 << 16, &buf, &err) == 0) {
        BIO *bio = BIO_new_mem_buf(buf.data, (int)buf.len);
        x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        BIO_free(bio);
    }
    sbx_buf_release(&buf);
    return x;
}

static EVP_PKEY *load_key(const char *a, const char *b)
{
    char p[PATH_MAX];
    struct sbx_buf buf;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&buf, 1 << 16);
    path(p, a, b);
    EVP_PKEY *k = NULL;
    if (sbx_fs_read_path(p, 1 << 16, &buf, &err) == 0) {
        BIO *bio = BIO_new_mem_buf(buf.data, (int)buf.len);
        k = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
        BIO_free(bio);
    }
    sbx_buf_release(&buf);
    return k;
}

static void test_names(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_EQ_INT(sbx_node_name_check("node-1.example_a", &err), 0);
    CHECK_EQ_INT(sbx_node_name_check("", &err), -SBX_E_INVAL);
    CHECK_EQ_INT(sbx_node_name_check("-node", &err), -SBX_E_INVAL);
    CHECK_EQ_INT(sbx_node_name_check("a/b", &err), -SBX_E_INVAL);
    CHECK_EQ_INT(sbx_node_name_check("a b", &err), -SBX_E_INVAL);
    CHECK_EQ_INT(sbx_node_name_check("..", &err), -SBX_E_INVAL);
    char long_name[SBX_NODE_NAME_MAX + 2];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    CHECK_EQ_INT(sbx_node_name_check(long_name, &err), -SBX_E_INVAL);
    long_name[SBX_NODE_NAME_MAX] = '\0';
    CHECK_EQ_INT(sbx_node_name_check(long_name, &err), 0);
}

static void test_ca_init(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_node_cert_info info;
    char dir[PATH_MAX];
    path(dir, "ca", NULL);
    struct sbx_node_ca_opts o = {.name = "test deployment", .days = 30};
    CHECK_EQ_INT(sbx_node_ca_init(dir, &o, &info, &err), 0);
    CHECK_EQ_INT(mode_of("ca", NULL), 0700);
    CHECK_EQ_INT(mode_of("ca", "ca.key"), 0600);
    CHECK_EQ_INT(mode_of("ca", "ca.pem"), 0644);
    CHECK_EQ_INT(strlen(info.fingerprint), 64);
    CHECK(strncmp(info.pin, "sha256//", 8) == 0 && strlen(info.pin) == 8 + 44);
    CHECK(strstr(info.key_path, "/ca/ca.key") != NULL);
    X509 *x = load_cert("ca", "ca.pem");
    EVP_PKEY *k = load_key("ca", "ca.key");
    CHECK(x && k);
    CHECK_EQ_INT(X509_check_ca(x), 1);
    CHECK_EQ_INT(X509_check_private_key(x, k), 1);
    X509_free(x);
    EVP_PKEY_free(k);
    /* A CA is never replaced. */
    CHECK_EQ_INT(sbx_node_ca_init(dir, NULL, NULL, &err), -SBX_E_EXISTS);
    CHECK(strstr(err.msg, "ca.pem' already exists") != NULL);
    struct sbx_node_ca_opts bad = {.days = 36501};
    char other[PATH_MAX];
    path(other, "ca-bad", NULL);
    CHECK_EQ_INT(sbx_node_ca_init(other, &bad, NULL, &err), -SBX_E_INVAL);
    bad = (struct sbx_node_ca_opts){.name = "bad\nname"};
    CHECK_EQ_INT(sbx_node_ca_init(other, &bad, NULL, &err), -SBX_E_INVAL);
    CHECK_EQ_INT(mode_of("ca-bad", NULL), -1);
}

static void test_issue(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_node_cert_info info;
    char ca[PATH_MAX], out[PATH_MAX];
    path(ca, "ca", NULL);
    path(out, "certs", NULL);
    CHECK_EQ_INT(mkdir(out, 0755), 0);
    const char *hosts[] = {"10.77.0.2", "fd00::2", "node-a.internal"};
    struct sbx_node_cert_opts o = {
            .kind = SBX_NODE_CERT_NODE, .hosts = hosts, .n_hosts = 3, .out_dir = out};
    if (sbx_node_cert_issue(ca, "node-a", &o, &info, &err) < 0)
        printf("# %s\n", err.msg);
    CHECK_EQ_INT(mode_of("certs", "node-a.key"), 0600);
    CHECK_EQ_INT(mode_of("certs", "node-a.pem"), 0644);
    X509 *x = load_cert("certs", "node-a.pem");
    EVP_PKEY *k = load_key("certs", "node-a.key");
    EVP_PKEY *cak = load_key("ca", "ca.key");
    CHECK(x && k && cak);
    CHECK_EQ_INT(X509_check_ca(x), 0);
    CHECK_EQ_INT(X509_check_private_key(x, k), 1);
    /* 365 days asked, the CA ends in 30: the certificate ends with the CA. */
    X509 *cax = load_cert("ca", "ca.pem");
    int pday = -1, psec = -1;
    CHECK(cax && ASN1_TIME_diff(&pday, &psec, X509_get0_notAfter(cax), X509_get0_notAfter(x)));
    CHECK_EQ_INT(pday, 0);
    CHECK_EQ_INT(psec, 0);
    X509_free(cax);
    CHECK(X509_check_private_key(x, cak) != 1);
    X509_free(x);
    EVP_PKEY_free(k);
    EVP_PKEY_free(cak);

    /* The same name again: refused, the files as they were. */
    char before[65];
    memcpy(before, info.fingerprint, sizeof(before));
    CHECK_EQ_INT(sbx_node_cert_issue(ca, "node-a", &o, &info, &err), -SBX_E_EXISTS);
    x = load_cert("certs", "node-a.pem");
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdn = 0;
    char hex[65];
    CHECK(x && X509_digest(x, EVP_sha256(), md, &mdn) && mdn == 32);
    sbx_hex(md, 32, hex);
    CHECK_EQ_STR(hex, before);
    X509_free(x);

    struct sbx_node_cert_opts h = {.kind = SBX_NODE_CERT_HARNESS, .out_dir = out};
    CHECK_EQ_INT(sbx_node_cert_issue(ca, "harness-1", &h, NULL, &err), 0);
    CHECK_EQ_INT(mode_of("certs", "harness-1.key"), 0600);
}

static void test_issue_refused(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char ca[PATH_MAX], out[PATH_MAX], p[PATH_MAX], q[PATH_MAX];
    path(ca, "ca", NULL);
    path(out, "certs", NULL);
    const char *one[] = {"10.0.0.1"};
    struct sbx_node_cert_opts h = {
            .kind = SBX_NODE_CERT_HARNESS, .hosts = one, .n_hosts = 1, .out_dir = out};
    CHECK_EQ_INT(sbx_node_cert_issue(ca, "h2", &h, NULL, &err), -SBX_E_INVAL);
    const char *inject[] = {"a.example,IP:1.2.3.4"};
    struct sbx_node_cert_opts n = {
            .kind = SBX_NODE_CERT_NODE, .hosts = inject, .n_hosts = 1, .out_dir = out};
    CHECK_EQ_INT(sbx_node_cert_issue(ca, "n2", &n, NULL, &err), -SBX_E_INVAL);
    CHECK(strstr(err.msg, "neither an IP address nor a DNS name") != NULL);
    CHECK_EQ_INT(mode_of("certs", "n2.key"), -1);
    struct sbx_node_cert_opts nokind = {.out_dir = out};
    CHECK_EQ_INT(sbx_node_cert_issue(ca, "n3", &nokind, NULL, &err), -SBX_E_INVAL);
    struct sbx_node_cert_opts plain = {.kind = SBX_NODE_CERT_NODE, .out_dir = out};
    CHECK_EQ_INT(sbx_node_cert_issue(ca, "../n4", &plain, NULL, &err), -SBX_E_INVAL);

    path(p, "nowhere", NULL);
    CHECK_EQ_INT(sbx_node_cert_issue(p, "n5", &plain, NULL, &err), -SBX_E_NOTFOUND);
    CHECK(strstr(err.msg, "sbx node ca init") != NULL);
    CHECK_EQ_INT(mode_of("certs", "n5.key"), -1);

    /* A CA key others may read is refused before it is used. */
    path(p, "ca", "ca.key");
    CHECK_EQ_INT(chmod(p, 0640), 0);
    CHECK_EQ_INT(sbx_node_cert_issue(ca, "n6", &plain, NULL, &err), -SBX_E_PERM);
    CHECK(strstr(err.msg, "mode 0640") != NULL);
    CHECK_EQ_INT(chmod(p, 0600), 0);

    /* A leaf certificate and its key are no CA. */
    path(p, "leaf-ca", NULL);
    CHECK_EQ_INT(mkdir(p, 0700), 0);
    path(p, "certs", "node-a.pem");
    path(q, "leaf-ca", "ca.pem");
    CHECK_EQ_INT(link(p, q), 0);
    path(p, "certs", "node-a.key");
    path(q, "leaf-ca", "ca.key");
    CHECK_EQ_INT(link(p, q), 0);
    path(p, "leaf-ca", NULL);
    CHECK_EQ_INT(sbx_node_cert_issue(p, "n7", &plain, NULL, &err), -SBX_E_INVAL);
    CHECK(strstr(err.msg, "is not a ca certificate") != NULL);

    /* Another CA's key with this CA's certificate. */
    path(p, "ca2", NULL);
    CHECK_EQ_INT(sbx_node_ca_init(p, NULL, NULL, &err), 0);
    path(p, "mixed", NULL);
    CHECK_EQ_INT(mkdir(p, 0700), 0);
    path(p, "ca", "ca.pem");
    path(q, "mixed", "ca.pem");
    CHECK_EQ_INT(link(p, q), 0);
    path(p, "ca2", "ca.key");
    path(q, "mixed", "ca.key");
    CHECK_EQ_INT(link(p, q), 0);
    path(p, "mixed", NULL);
    CHECK_EQ_INT(sbx_node_cert_issue(p, "n8", &plain, NULL, &err), -SBX_E_INVAL);
    CHECK(strstr(err.msg, "is not the key of the certificate") != NULL);
    CHECK_EQ_INT(mode_of("certs", "n8.key"), -1);
    CHECK_EQ_INT(mode_of("certs", "n8.pem"), -1);
}

int main(void)
{
    TAP_START();
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx__crypto_load(&err) < 0)
        TAP_SKIP_ALL(err.msg);
    snprintf(tmp, sizeof(tmp), "%s/sbx-node-pki.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp))
        return 1;
    TAP_RUN(test_names);
    TAP_RUN(test_ca_init);
    TAP_RUN(test_issue);
    TAP_RUN(test_issue_refused);
    rm_tree(tmp);
    return TAP_DONE();
}
