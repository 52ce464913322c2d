/* sbx: the certificates of an sbx-node deployment (docs/internals/node.md): one private CA per
 * deployment, certificates for nodes (TLS servers) and harnesses (TLS clients). Keys are ECDSA
 * P-256, made and signed with OpenSSL's libcrypto (loaded on first use). Every call blocks on
 * file I/O only. */
#ifndef SBX_NODE_H
#define SBX_NODE_H

#include <stddef.h>

#include "common.h"
#include "error.h"

/* Longest name of a CA, node or harness: 1-64 characters of [A-Za-z0-9._-], beginning with a
 * letter or digit (it is a file name and a certificate's common name). */
#define SBX_NODE_NAME_MAX 64
/* Most alternative names (--host) of a node certificate. */
#define SBX_NODE_HOSTS_MAX 32

enum sbx_node_cert_kind {
    SBX_NODE_CERT_NODE = 1,    /* serverAuth, OU=node, DNS:name plus the hosts */
    SBX_NODE_CERT_HARNESS = 2, /* clientAuth, OU=harness */
};

/* An all-zero struct is the default. */
struct sbx_node_ca_opts {
    const char *name; /* the CA's common name (NULL: "sbx-node CA"); any printable text ≤ 64 */
    unsigned days;    /* validity (0: 3650), at most 36500 */
};

struct sbx_node_cert_opts {
    enum sbx_node_cert_kind kind; /* required */
    const char *const *hosts;     /* node only: IP addresses or DNS names for the certificate */
    size_t n_hosts;               /* at most SBX_NODE_HOSTS_MAX */
    unsigned days;                /* validity (0: 365), at most 36500; never past the CA's end */
    const char *out_dir;          /* where NAME.pem and NAME.key go (NULL: the current folder) */
};

/* What a call wrote. Paths are as the caller named the folder, plus the file name. */
struct sbx_node_cert_info {
    char cert_path[4096];
    char key_path[4096];
    char fingerprint[65]; /* lowercase hex SHA-256 of the certificate (DER): --revoked lists */
    char pin[64];         /* "sha256//BASE64" of the public key (SPKI): the remote layer's pins */
};

/* Make a new CA in dir: dir/ca.pem (0644) and dir/ca.key (0600). dir is made (0700) when
 * missing. SBX_E_EXISTS when either file is already there (a CA is never replaced);
 * SBX_E_INVAL for bad options; SBX_E_UNSUPPORTED without libcrypto. info may be NULL. */
SBX_API int sbx_node_ca_init(const char *dir, const struct sbx_node_ca_opts *o,
                             struct sbx_node_cert_info *info, struct sbx_error *err);

/* Issue a certificate named name, signed by the CA in ca_dir: NAME.pem (0644) and NAME.key
 * (0600) in o->out_dir. SBX_E_EXISTS when either file is there (nothing is written then);
 * SBX_E_NOTFOUND for a CA folder without its files; SBX_E_PERM for a CA key that others may
 * read; SBX_E_INVAL for a bad name, host or option, or a CA key that does not match its
 * certificate, or a certificate that is no CA. info may be NULL. */
SBX_API int sbx_node_cert_issue(const char *ca_dir, const char *name,
                                const struct sbx_node_cert_opts *o, struct sbx_node_cert_info *info,
                                struct sbx_error *err);

/* 0 when name is a valid node or harness name, else SBX_E_INVAL naming it. */
SBX_API int sbx_node_name_check(const char *name, struct sbx_error *err);

#endif
