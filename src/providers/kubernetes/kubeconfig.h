/* The Kubernetes provider's credentials: a kubeconfig (the files of $KUBECONFIG merged as
 * kubectl merges them, or ~/.kube/config) or the service account of the pod sbx runs in.
 * Private to src/providers/kubernetes/ and its unit tests.
 *
 * What is read: of the chosen context its cluster (server, certificate-authority[-data],
 * insecure-skip-tls-verify), its user (token, tokenFile, client-certificate[-data],
 * client-key[-data]) and its namespace. What needs a program to run (exec plugins, the old
 * auth-provider entries) or another transport (proxy-url, tls-server-name, impersonation,
 * basic auth) is refused with a message naming it: sbx never runs a kubeconfig's commands and
 * never sends a credential another way than the kubeconfig says. */
#ifndef SBX_PROVIDERS_KUBERNETES_KUBECONFIG_H
#define SBX_PROVIDERS_KUBERNETES_KUBECONFIG_H

#include <stddef.h>

#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/secret.h"

/* Where the service account of a pod is mounted. */
#define SBX__KUBE_SA_DIR        "/var/run/secrets/kubernetes.io/serviceaccount"
#define SBX__KUBE_IN_CLUSTER    "in-cluster" /* the context name of a service account */
#define SBX__KUBE_CONFIG_MAX    ((size_t)4 << 20)
#define SBX__KUBE_CRED_FILE_MAX ((size_t)1 << 20)

struct sbx__kube_config {
    char *source;  /* the kubeconfig file the context came from, or the service account dir */
    char *context; /* the context's name (SBX__KUBE_IN_CLUSTER for a service account) */
    char *cluster; /* names, for messages */
    char *user;
    char *server;             /* "https://host:port[/prefix]", without a trailing '/' */
    char *namespace;          /* the context's namespace, or NULL */
    struct sbx_buf ca;        /* the CA bundle (PEM); empty: the system's trust store */
    struct sbx_buf cert;      /* the client certificate (PEM); empty: none */
    struct sbx_secret *key;   /* the client key (PEM), with cert; NULL: none */
    struct sbx_secret *token; /* the bearer token; NULL: none */
    char *token_file;         /* where the token is read again when it is rotated, or NULL */
    int insecure; /* insecure-skip-tls-verify: the server's certificate is not checked */
};

/* Which credentials to read. All-zero: $KUBECONFIG, else ~/.kube/config, else (in a pod, with
 * no kubeconfig at all) the service account; the kubeconfig's current context. */
struct sbx__kube_config_opts {
    const char *kubeconfig; /* a file, or a ':'-separated list merged as kubectl does */
    const char *context;    /* a context of it instead of current-context */
    int in_cluster;         /* the service account, whatever kubeconfig there is */
    const char *sa_dir;     /* tests: the service account directory (SBX__KUBE_SA_DIR) */
};

void sbx__kube_config_init(struct sbx__kube_config *c);
void sbx__kube_config_release(struct sbx__kube_config *c);

/* Read the credentials opts names into c (initialised). Errors say what is missing or refused:
 * SBX_E_NOTFOUND for no kubeconfig, no such context, cluster or user; SBX_E_UNSUPPORTED for an
 * exec plugin (naming its command), an auth-provider, basic auth, impersonation, proxy-url or
 * tls-server-name; SBX_E_INVAL for a malformed file or a credential that would go over plain
 * HTTP; SBX_E_PARSE for bad base64. */
int sbx__kube_config_load(const struct sbx__kube_config_opts *opts, struct sbx__kube_config *c,
                          struct sbx_error *err);

/* Read the token again from token_file (a rotated service account token). 0 when there is no
 * file to read. */
int sbx__kube_config_reload_token(struct sbx__kube_config *c, struct sbx_error *err);

#endif
