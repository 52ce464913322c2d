/* The certificates of an sbx-node deployment (include/sbx/node.h, docs/internals/node.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "core/dl-crypto.h"
#include "sbx/b64.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/node.h"

#define PEM_MAX      ((size_t)64 << 10)
#define DAYS_MAX     36500u
#define CA_DAYS      3650u
#define LEAF_DAYS    365u
#define BACKDATE_S   300L /* clocks of a deployment may differ by a few minutes */
#define HOST_MAX     253
#define SAN_TEXT_MAX (SBX_NODE_HOSTS_MAX * (HOST_MAX + 8) + SBX_NODE_NAME_MAX + 8)

int sbx_node_name_check(const char *name, struct sbx_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SBX_NODE_NAME_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "name '%.64s' must have 1 to %d characters",
                             name ? name : "", SBX_NODE_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "name '%s' may only have letters, digits, '.', '_' and '-', "
                                 "and must begin with a letter or digit",
                                 name);
    }
    return 0;
}

/* "IP:a.b.c.d" or "DNS:name" for one host of a node certificate; nothing in a host can add a
 * name of its own (no ',' or ':' outside an IPv6 address). */
static int host_entry(const char *h, struct sbx_buf *san, struct sbx_error *err)
{
    unsigned char addr[16];
    if (inet_pton(AF_INET, h, addr) == 1 || inet_pton(AF_INET6, h, addr) == 1)
        return sbx_buf_addf(san, err, ",IP:%s", h);
    size_t n = strlen(h);
    int ok = n > 0 && n <= HOST_MAX && h[0] != '.' && h[0] != '-';
    for (size_t i = 0; ok && i < n; i++) {
        char c = h[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '-';
    }
    if (!ok)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "host '%.253s' is neither an IP address nor a DNS name", h);
    return sbx_buf_addf(san, err, ",DNS:%s", h);
}

static int crypto_fail(struct sbx_error *err, const char *what)
{
    return sbx_error_set(err, SBX_E_SYS, 0, "libcrypto could not %s", what);
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value, struct sbx_error *err)
{
    X509V3_CTX ctx;
    memset(&ctx, 0, sizeof(ctx));
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    int ok = e && X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    if (!ok)
        return sbx_error_set(err, SBX_E_SYS, 0, "libcrypto could not add the extension '%s'",
                             value);
    return 0;
}

/* A 127-bit random serial (positive, never zero in practice). */
static int set_serial(X509 *x, struct sbx_error *err)
{
    unsigned char r[16];
    if (sbx_random_bytes(r, sizeof(r), err) < 0)
        return -err->code;
    r[0] &= 0x7f;
    r[0] |= 0x40;
    BIGNUM *bn = BN_bin2bn(r, sizeof(r), NULL);
    ASN1_INTEGER *ai = bn ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
    int ok = ai && X509_set_serialNumber(x, ai);
    ASN1_INTEGER_free(ai);
    BN_free(bn);
    return ok ? 0 : crypto_fail(err, "set a serial number");
}

static int set_name(X509_NAME *nm, const char *ou, const char *cn, struct sbx_error *err)
{
    const unsigned char *o = (const unsigned char *)"sbx-node";
    if (!X509_NAME_add_entry_by_txt(nm, "O", MBSTRING_UTF8, o, -1, -1, 0) ||
        (ou && !X509_NAME_add_entry_by_txt(nm, "OU", MBSTRING_UTF8, (const unsigned char *)ou, -1,
                                           -1, 0)) ||
        !X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0))
        return crypto_fail(err, "set a certificate's name");
    return 0;
}

/* A certificate for key with subject (ou, cn), valid for days, not yet signed; issuer NULL makes
 * it self-issued. */
static int cert_base(EVP_PKEY *key, X509 *issuer, const char *ou, const char *cn, unsigned days,
                     X509 **out, struct sbx_error *err)
{
    X509 *x = X509_new();
    if (!x)
        return crypto_fail(err, "make a certificate");
    int rc = set_serial(x, err);
    if (rc < 0)
        goto out;
    if (!X509_set_version(x, 2) || !X509_gmtime_adj(X509_getm_notBefore(x), -BACKDATE_S) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400L) || !X509_set_pubkey(x, key)) {
        rc = crypto_fail(err, "set a certificate's fields");
        goto out;
    }
    if ((rc = set_name(X509_get_subject_name(x), ou, cn, err)) < 0)
        goto out;
    if (!X509_set_issuer_name(x, X509_get_subject_name(issuer ? issuer : x))) {
        rc = crypto_fail(err, "set a certificate's issuer");
        goto out;
    }
    if ((rc = add_ext(x, issuer ? issuer : x, NID_subject_key_identifier, "hash", err)) < 0)
        goto out;
    if (issuer && (rc = add_ext(x, issuer, NID_authority_key_identifier, "keyid:always", err)) < 0)
        goto out;
    *out = x;
    x = NULL;
out:
    X509_free(x);
    return rc;
}

static int new_key(EVP_PKEY **out, struct sbx_error *err)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (!k)
        return crypto_fail(err, "make an ecdsa p-256 key");
    *out = k;
    return 0;
}

/* PEM of a certificate (key NULL) or of a private key (PKCS#8) into out. */
static int to_pem(X509 *x, EVP_PKEY *key, struct sbx_buf *out, struct sbx_error *err)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *p = NULL;
    int ok = b && (key ? PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL)
                       : PEM_write_bio_X509(b, x));
    long n = ok ? BIO_get_mem_data(b, &p) : -1;
    int rc = n > 0 ? sbx_buf_add(out, p, (size_t)n, err) : crypto_fail(err, "write pem");
    BIO_free(b);
    return rc;
}

/* dir/name written atomically and never over an existing file: name.tmp, fsync, then a rename
 * that refuses to replace. */
static int write_new(const char *dir, const char *name, const struct sbx_buf *data, mode_t mode,
                     struct sbx_error *err)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", dir);
    char tmp[SBX_NODE_NAME_MAX + 16];
    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    int rc = 0;
    unlinkat(dfd, tmp, 0);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot create '%s/%s'", dir, tmp);
        goto out;
    }
    if (fchmod(fd, mode) < 0 || (rc = sbx_fd_write_all(fd, data->data, data->len, err)) < 0 ||
        fsync(fd) < 0) {
        rc = rc < 0 ? rc : sbx_error_errno(err, errno, "cannot write '%s/%s'", dir, tmp);
        close(fd);
        unlinkat(dfd, tmp, 0);
        goto out;
    }
    close(fd);
    if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) < 0) {
        int e = errno;
        unlinkat(dfd, tmp, 0);
        rc = e == EEXIST ? sbx_error_set(err, SBX_E_EXISTS, e, "'%s/%s' already exists", dir, name)
                         : sbx_error_errno(err, e, "cannot rename '%s/%s'", dir, tmp);
        goto out;
    }
    fsync(dfd);
out:
    close(dfd);
    return rc;
}

static int absent(const char *dir, const char *name, struct sbx_error *err)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    struct stat st;
    if (lstat(p, &st) == 0)
        return sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' already exists", p);
    if (errno != ENOENT)
        return sbx_error_errno(err, errno, "cannot look at '%s'", p);
    return 0;
}

static void fill_info(const char *dir, const char *stem, X509 *x, struct sbx_node_cert_info *info)
{
    memset(info, 0, sizeof(*info));
    snprintf(info->cert_path, sizeof(info->cert_path), "%s/%s.pem", dir, stem);
    snprintf(info->key_path, sizeof(info->key_path), "%s/%s.key", dir, stem);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    if (X509_digest(x, EVP_sha256(), md, &mdn) && mdn == SBX_SHA256_LEN)
        sbx_hex(md, mdn, info->fingerprint);
    X509_PUBKEY *pk = X509_get_X509_PUBKEY(x);
    int len = pk ? i2d_X509_PUBKEY(pk, NULL) : -1;
    if (len <= 0 || len > 4096)
        return;
    unsigned char der[4096], *w = der;
    uint8_t d[SBX_SHA256_LEN];
    struct sbx_buf b;
    struct sbx_error e = SBX_ERROR_INIT;
    sbx_buf_init(&b, 128);
    if (i2d_X509_PUBKEY(pk, &w) == len && sbx_sha256(der, (size_t)len, d, &e) == 0 &&
        sbx_b64_encode(d, sizeof(d), &b, &e) == 0)
        snprintf(info->pin, sizeof(info->pin), "sha256//%s", b.data);
    sbx_buf_release(&b);
}

/* Sign x with key, write stem.key and stem.pem into dir (the key first: a certificate never
 * exists without its key). */
static int sign_and_write(const char *dir, const char *stem, X509 *x, EVP_PKEY *key,
                          EVP_PKEY *signer, struct sbx_node_cert_info *info, struct sbx_error *err)
{
    if (!X509_sign(x, signer, EVP_sha256()))
        return crypto_fail(err, "sign a certificate");
    struct sbx_buf kp, cp;
    sbx_buf_init(&kp, PEM_MAX);
    sbx_buf_init(&cp, PEM_MAX);
    char kname[SBX_NODE_NAME_MAX + 8], cname[SBX_NODE_NAME_MAX + 8];
    snprintf(kname, sizeof(kname), "%s.key", stem);
    snprintf(cname, sizeof(cname), "%s.pem", stem);
    int rc = to_pem(NULL, key, &kp, err);
    if (rc == 0)
        rc = to_pem(x, NULL, &cp, err);
    if (rc == 0)
        rc = write_new(dir, kname, &kp, 0600, err);
    if (rc == 0 && (rc = write_new(dir, cname, &cp, 0644, err)) < 0) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, kname);
        unlink(p);
    }
    if (rc == 0 && info)
        fill_info(dir, stem, x, info);
    sbx_buf_release(&kp);
    sbx_buf_release(&cp);
    return rc;
}

static int ca_name_check(const char *name, struct sbx_error *err)
{
    size_t n = strlen(name);
    if (n == 0 || n > SBX_NODE_NAME_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a ca name must have 1 to %d characters",
                             SBX_NODE_NAME_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] >= 0x7f)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "a ca name may only have printable ascii characters");
    return 0;
}

int sbx_node_ca_init(const char *dir, const struct sbx_node_ca_opts *o,
                     struct sbx_node_cert_info *info, struct sbx_error *err)
{
    static const struct sbx_node_ca_opts none;
    o = o ? o : &none;
    const char *name = o->name ? o->name : "sbx-node CA";
    unsigned days = o->days ? o->days : CA_DAYS;
    int rc;
    if ((rc = ca_name_check(name, err)) < 0)
        return rc;
    if (days > DAYS_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a validity of %u days is over %u", days,
                             DAYS_MAX);
    if ((rc = sbx__crypto_load(err)) < 0)
        return rc;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return sbx_error_errno(err, errno, "cannot make '%s'", dir);
    if ((rc = absent(dir, "ca.pem", err)) < 0 || (rc = absent(dir, "ca.key", err)) < 0)
        return rc;
    EVP_PKEY *key = NULL;
    X509 *x = NULL;
    if ((rc = new_key(&key, err)) < 0 || (rc = cert_base(key, NULL, NULL, name, days, &x, err)) < 0)
        goto out;
    if ((rc = add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0", err)) < 0 ||
        (rc = add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign", err)) < 0)
        goto out;
    rc = sign_and_write(dir, "ca", x, key, key, info, err);
out:
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

static int read_pem(const char *dir, const char *name, struct sbx_buf *out, int secret,
                    struct sbx_error *err)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    struct stat st;
    if (stat(p, &st) < 0)
        return errno == ENOENT ? sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                                               "'%s' is not there (make a ca with 'sbx node ca "
                                               "init %s')",
                                               p, dir)
                               : sbx_error_errno(err, errno, "cannot look at '%s'", p);
    if (secret && (st.st_mode & 077))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "'%s' may be read by others (mode %04o): 'chmod 600' it first", p,
                             (unsigned)(st.st_mode & 07777));
    return sbx_fs_read_path(p, PEM_MAX, out, err);
}

/* The CA of ca_dir: its certificate and key, checked to belong together and to be a CA. */
static int load_ca(const char *ca_dir, X509 **cert, EVP_PKEY **key, struct sbx_error *err)
{
    struct sbx_buf c, k;
    sbx_buf_init(&c, PEM_MAX);
    sbx_buf_init(&k, PEM_MAX);
    X509 *x = NULL;
    EVP_PKEY *pk = NULL;
    int rc = read_pem(ca_dir, "ca.pem", &c, 0, err);
    if (rc == 0)
        rc = read_pem(ca_dir, "ca.key", &k, 1, err);
    if (rc < 0)
        goto out;
    BIO *b = BIO_new_mem_buf(c.data, (int)c.len);
    x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    b = BIO_new_mem_buf(k.data, (int)k.len);
    pk = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    if (!x || !pk)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s/%s' holds no pem %s", ca_dir,
                           x ? "ca.key" : "ca.pem", x ? "private key" : "certificate");
    else if (X509_check_ca(x) != 1)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s/ca.pem' is not a ca certificate", ca_dir);
    else if (X509_check_private_key(x, pk) != 1)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "'%s/ca.key' is not the key of the certificate '%s/ca.pem'", ca_dir,
                           ca_dir);
    if (rc == 0) {
        *cert = x;
        *key = pk;
        x = NULL;
        pk = NULL;
    }
out:
    X509_free(x);
    EVP_PKEY_free(pk);
    sbx_buf_release(&c);
    sbx_buf_release(&k);
    return rc;
}

static int issue_check(const char *name, const struct sbx_node_cert_opts *o, struct sbx_buf *san,
                       struct sbx_error *err)
{
    int rc = sbx_node_name_check(name, err);
    if (rc < 0)
        return rc;
    if (o->kind != SBX_NODE_CERT_NODE && o->kind != SBX_NODE_CERT_HARNESS)
        return sbx_error_set(err, SBX_E_INVAL, 0, "certificate '%s' is for a node or a harness",
                             name);
    if (o->days > DAYS_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a validity of %u days is over %u", o->days,
                             DAYS_MAX);
    if (o->kind == SBX_NODE_CERT_HARNESS && o->n_hosts)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "harness certificate '%s' takes no hosts (only a node's does)", name);
    if (o->n_hosts > SBX_NODE_HOSTS_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "%zu hosts are more than %d", o->n_hosts,
                             SBX_NODE_HOSTS_MAX);
    if (o->kind == SBX_NODE_CERT_HARNESS)
        return 0;
    if ((rc = sbx_buf_addf(san, err, "DNS:%s", name)) < 0)
        return rc;
    for (size_t i = 0; i < o->n_hosts; i++)
        if ((rc = host_entry(o->hosts[i], san, err)) < 0)
            return rc;
    return 0;
}

static int leaf_exts(X509 *x, X509 *ca, const struct sbx_node_cert_opts *o, const char *san,
                     struct sbx_error *err)
{
    int node = o->kind == SBX_NODE_CERT_NODE;
    int rc = add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE", err);
    if (rc == 0)
        rc = add_ext(x, ca, NID_key_usage, "critical,digitalSignature", err);
    if (rc == 0)
        rc = add_ext(x, ca, NID_ext_key_usage, node ? "serverAuth" : "clientAuth", err);
    if (rc == 0 && node)
        rc = add_ext(x, ca, NID_subject_alt_name, san, err);
    return rc;
}

int sbx_node_cert_issue(const char *ca_dir, const char *name, const struct sbx_node_cert_opts *o,
                        struct sbx_node_cert_info *info, struct sbx_error *err)
{
    const char *dir = o->out_dir ? o->out_dir : ".";
    struct sbx_buf san;
    sbx_buf_init(&san, SAN_TEXT_MAX);
    X509 *ca = NULL, *x = NULL;
    EVP_PKEY *ca_key = NULL, *key = NULL;
    char kname[SBX_NODE_NAME_MAX + 8], cname[SBX_NODE_NAME_MAX + 8];
    int rc = sbx__crypto_load(err); /* first: the frees at out: are libcrypto's */
    if (rc < 0 || (rc = issue_check(name, o, &san, err)) < 0)
        goto out;
    snprintf(kname, sizeof(kname), "%s.key", name);
    snprintf(cname, sizeof(cname), "%s.pem", name);
    if ((rc = absent(dir, kname, err)) < 0 || (rc = absent(dir, cname, err)) < 0)
        goto out;
    if ((rc = load_ca(ca_dir, &ca, &ca_key, err)) < 0)
        goto out;
    const char *ou = o->kind == SBX_NODE_CERT_NODE ? "node" : "harness";
    if ((rc = new_key(&key, err)) < 0 ||
        (rc = cert_base(key, ca, ou, name, o->days ? o->days : LEAF_DAYS, &x, err)) < 0 ||
        (rc = leaf_exts(x, ca, o, san.data, err)) < 0)
        goto out;
    /* A certificate never outlives its CA: it would be refused from then on anyway. */
    int pday = 0, psec = 0;
    if (ASN1_TIME_diff(&pday, &psec, X509_get0_notAfter(ca), X509_get0_notAfter(x)) &&
        (pday > 0 || psec > 0) && !X509_set1_notAfter(x, X509_get0_notAfter(ca))) {
        rc = crypto_fail(err, "set a certificate's end");
        goto out;
    }
    rc = sign_and_write(dir, name, x, key, ca_key, info, err);
out:
    X509_free(x);
    X509_free(ca);
    EVP_PKEY_free(key);
    EVP_PKEY_free(ca_key);
    sbx_buf_release(&san);
    return rc;
}
