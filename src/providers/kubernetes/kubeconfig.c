/* Kubeconfig files and in-cluster credentials (kubeconfig.h). The files are YAML read through
 * the project's YAML loader; a list of files is merged as kubectl merges them: the first file
 * that names a cluster, user or context wins for that name, and the first current-context set
 * is the one used. Paths inside a file are relative to that file's directory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "providers/kubernetes/kubeconfig.h"
#include "sbx/b64.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/yaml.h"

#define LIST_MAX 64 /* files in $KUBECONFIG */

void sbx__kube_config_init(struct sbx__kube_config *c)
{
    memset(c, 0, sizeof(*c));
    sbx_buf_init(&c->ca, SBX__KUBE_CRED_FILE_MAX);
    sbx_buf_init(&c->cert, SBX__KUBE_CRED_FILE_MAX);
}

void sbx__kube_config_release(struct sbx__kube_config *c)
{
    free(c->source);
    free(c->context);
    free(c->cluster);
    free(c->user);
    free(c->server);
    free(c->namespace);
    free(c->token_file);
    sbx_buf_release(&c->ca);
    sbx_buf_release(&c->cert);
    sbx_secret_free(c->key);
    sbx_secret_free(c->token);
    sbx__kube_config_init(c);
}

/* The merged view of the files: name -> {"v": the entry's body, "file": where it was}. */
struct merged {
    json_t *clusters, *users, *contexts;
    char *current;      /* current-context, from the first file that sets it */
    char *current_file; /* that file */
    char *first_file;   /* the first file read (for messages) */
};

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Add the named entries of list (an array of {"name", key: {...}}) that are not known yet. */
static int merge_list(json_t *into, const json_t *doc, const char *list, const char *key,
                      const char *file, struct sbx_error *err)
{
    const json_t *arr = json_object_get(doc, list), *v;
    size_t i;
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return sbx_error_set(err, SBX_E_INVAL, 0, "kubeconfig '%s': '%s' must be a list", file,
                             list);
    json_array_foreach(arr, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        const json_t *body = json_object_get(v, key);
        if (!name || !name[0] || !json_is_object(body))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "kubeconfig '%s': entry %zu of '%s' needs a 'name' and a '%s' "
                                 "mapping",
                                 file, i + 1, list, key);
        if (json_object_get(into, name))
            continue;
        sbx_json_set(into, name, json_pack("{s:O,s:s}", "v", body, "file", file));
    }
    return 0;
}

static int merge_file(struct merged *m, const char *file, struct sbx_error *err)
{
    struct sbx_yaml_limits lim = {.max_bytes = SBX__KUBE_CONFIG_MAX};
    json_t *doc = NULL;
    int rc = sbx_doc_load_file(file, &lim, &doc, err);
    if (rc < 0)
        return rc;
    if (!m->first_file)
        m->first_file = sbx_xstrdup(file);
    if (json_is_null(doc)) {
        json_decref(doc);
        return 0; /* an empty file: kubectl reads it as an empty config */
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        return sbx_error_set(err, SBX_E_INVAL, 0, "kubeconfig '%s' is not a mapping", file);
    }
    if ((rc = merge_list(m->clusters, doc, "clusters", "cluster", file, err)) == 0 &&
        (rc = merge_list(m->users, doc, "users", "user", file, err)) == 0)
        rc = merge_list(m->contexts, doc, "contexts", "context", file, err);
    const char *cur = json_string_value(json_object_get(doc, "current-context"));
    if (rc == 0 && !m->current && cur && cur[0]) {
        m->current = sbx_xstrdup(cur);
        m->current_file = sbx_xstrdup(file);
    }
    json_decref(doc);
    return rc;
}

/* The kubeconfig files to read: the option (a file or a list), else $KUBECONFIG, else
 * ~/.kube/config. *none set when no file exists (the caller may try a service account). */
static int read_files(struct merged *m, const char *given, int *none, struct sbx_error *err)
{
    const char *env = getenv("KUBECONFIG");
    const char *home = getenv("HOME");
    char *list = given && given[0] ? sbx_xstrdup(given)
                 : env && env[0]   ? sbx_xstrdup(env)
                                   : sbx_xasprintf("%s/.kube/config", home ? home : "");
    int rc = 0, read = 0, count = 0, list_of_files = strchr(list, ':') != NULL;
    for (char *p = list, *next; p && rc == 0; p = next) {
        next = strchr(p, ':');
        if (next)
            *next++ = '\0';
        if (!p[0])
            continue;
        if (++count > LIST_MAX) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d kubeconfig files", LIST_MAX);
            break;
        }
        /* The one file the option names must exist; missing ones of a list are skipped, as
         * kubectl skips those of $KUBECONFIG. */
        if (!file_exists(p) && (list_of_files || !(given && given[0])))
            continue;
        if ((rc = merge_file(m, p, err)) == 0)
            read++;
    }
    *none = rc == 0 && read == 0;
    free(list);
    return rc;
}

/* A file an entry names, relative to the kubeconfig that holds it. */
static char *entry_path(const char *path, const char *file)
{
    if (path[0] == '/')
        return sbx_xstrdup(path);
    const char *slash = strrchr(file, '/');
    if (!slash)
        return sbx_xstrdup(path);
    return sbx_xasprintf("%.*s/%s", (int)(slash - file), file, path);
}

/* PEM bytes from "<key>-data" (base64) or "<key>" (a file), into out (left empty when neither
 * is there). */
static int pem_of(const json_t *body, const char *key, const char *file, struct sbx_buf *out,
                  struct sbx_error *err)
{
    char *data_key = sbx_xasprintf("%s-data", key);
    const json_t *data = json_object_get(body, data_key);
    const char *path = json_string_value(json_object_get(body, key));
    int rc = 0;
    if (json_is_string(data) && json_string_length(data) > 0) {
        rc = sbx_b64_decode(json_string_value(data), json_string_length(data), out, err);
        if (rc < 0)
            sbx_error_prefix(err, "kubeconfig '%s': %s", file, data_key);
    } else if (path && path[0]) {
        char *p = entry_path(path, file);
        rc = sbx_fs_read_path(p, SBX__KUBE_CRED_FILE_MAX, out, err);
        if (rc < 0)
            sbx_error_prefix(err, "kubeconfig '%s': %s", file, key);
        free(p);
    }
    free(data_key);
    return rc;
}

/* The parts of a cluster entry sbx cannot honour. */
static int check_cluster(const char *name, const json_t *cl, const char *file,
                         struct sbx_error *err)
{
    static const char *const refused[] = {"proxy-url", "tls-server-name", NULL};
    for (const char *const *k = refused; *k; k++)
        if (json_object_get(cl, *k) && !json_is_null(json_object_get(cl, *k)))
            return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                 "kubeconfig '%s': cluster '%s' sets '%s', which sbx does not "
                                 "support",
                                 file, name, *k);
    return 0;
}

/* The parts of a user entry that need a program run, or another way of authenticating. */
static int check_user(const char *name, const json_t *u, const char *file, struct sbx_error *err)
{
    const json_t *ex = json_object_get(u, "exec");
    if (json_is_object(ex)) {
        const char *cmd = json_string_value(json_object_get(ex, "command"));
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "kubeconfig '%s': user '%s' gets its credentials from the exec "
                             "plugin '%s', which sbx does not run: give the context a token "
                             "(token, tokenFile) or a client certificate, such as a service "
                             "account's token",
                             file, name, cmd ? cmd : "?");
    }
    const json_t *ap = json_object_get(u, "auth-provider");
    if (json_is_object(ap)) {
        const char *pn = json_string_value(json_object_get(ap, "name"));
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "kubeconfig '%s': user '%s' uses the auth-provider '%s', which sbx "
                             "does not run: give the context a token or a client certificate",
                             file, name, pn ? pn : "?");
    }
    if (json_object_get(u, "username") || json_object_get(u, "password"))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "kubeconfig '%s': user '%s' has a username and password (basic "
                             "authentication, removed from Kubernetes): use a token",
                             file, name);
    static const char *const imp[] = {"as", "as-groups", "as-uid", "as-user-extra", NULL};
    for (const char *const *k = imp; *k; k++)
        if (json_object_get(u, *k))
            return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                 "kubeconfig '%s': user '%s' sets '%s' (impersonation), which sbx "
                                 "does not support",
                                 file, name, *k);
    return 0;
}

static int secret_of_buf(struct sbx_buf *b, const char *what, struct sbx_secret **out)
{
    if (b->len)
        *out = sbx_secret_new(what, b->data, b->len);
    if (b->data)
        explicit_bzero(b->data, b->len);
    sbx_buf_release(b);
    return 0;
}

/* A token read from a file: surrounding white space dropped. */
static int read_token(const char *path, struct sbx_secret **out, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX__KUBE_CRED_FILE_MAX);
    int rc = sbx_fs_read_path(path, SBX__KUBE_CRED_FILE_MAX, &b, err);
    if (rc < 0) {
        sbx_buf_release(&b);
        return rc;
    }
    size_t s = 0, e = b.len;
    while (s < e && strchr(" \t\r\n", b.data[s]))
        s++;
    while (e > s && strchr(" \t\r\n", b.data[e - 1]))
        e--;
    if (e == s) {
        sbx_buf_release(&b);
        return sbx_error_set(err, SBX_E_INVAL, 0, "token file '%s' is empty", path);
    }
    sbx_secret_free(*out);
    *out = sbx_secret_new("kubernetes token", b.data + s, e - s);
    explicit_bzero(b.data, b.len);
    sbx_buf_release(&b);
    return 0;
}

static int load_user(struct sbx__kube_config *c, const char *name, const json_t *ent,
                     struct sbx_error *err)
{
    const json_t *u = json_object_get(ent, "v");
    const char *file = json_string_value(json_object_get(ent, "file"));
    int rc = check_user(name, u, file, err);
    if (rc < 0)
        return rc;
    struct sbx_buf key;
    sbx_buf_init(&key, SBX__KUBE_CRED_FILE_MAX);
    if ((rc = pem_of(u, "client-certificate", file, &c->cert, err)) == 0)
        rc = pem_of(u, "client-key", file, &key, err);
    secret_of_buf(&key, "kubernetes client key", &c->key);
    if (rc < 0)
        return rc;
    if (!!c->cert.len != !!c->key)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "kubeconfig '%s': user '%s' has a client %s without its %s", file,
                             name, c->cert.len ? "certificate" : "key",
                             c->cert.len ? "key" : "certificate");
    const char *tok = json_string_value(json_object_get(u, "token"));
    const char *tf = json_string_value(json_object_get(u, "tokenFile"));
    if (tok && tok[0])
        c->token = sbx_secret_new("kubernetes token", tok, strlen(tok));
    else if (tf && tf[0]) {
        c->token_file = entry_path(tf, file);
        if ((rc = read_token(c->token_file, &c->token, err)) < 0) {
            sbx_error_prefix(err, "kubeconfig '%s': user '%s'", file, name);
            return rc;
        }
    }
    return 0;
}

static int load_cluster(struct sbx__kube_config *c, const char *name, const json_t *ent,
                        struct sbx_error *err)
{
    const json_t *cl = json_object_get(ent, "v");
    const char *file = json_string_value(json_object_get(ent, "file"));
    const char *server = json_string_value(json_object_get(cl, "server"));
    int rc = check_cluster(name, cl, file, err);
    if (rc < 0)
        return rc;
    if (!server || (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "kubeconfig '%s': cluster '%s' needs a server URL (https://HOST:PORT)",
                             file, name);
    size_t n = strlen(server);
    while (n > 0 && server[n - 1] == '/')
        n--;
    c->server = sbx_xstrndup(server, n);
    c->insecure = json_is_true(json_object_get(cl, "insecure-skip-tls-verify"));
    return pem_of(cl, "certificate-authority", file, &c->ca, err);
}

static const json_t *entry(const json_t *map, const char *kind, const char *name, const char *file,
                           struct sbx_error *err)
{
    const json_t *e = json_object_get(map, name);
    if (!e)
        sbx_error_set(err, SBX_E_NOTFOUND, 0, "kubeconfig '%s' has no %s '%s'", file, kind, name);
    return e;
}

/* The names of the contexts, for the message about a missing one. */
static void context_names(const json_t *contexts, char *out, size_t n)
{
    const char *k;
    const json_t *v;
    size_t used = 0;
    out[0] = '\0';
    json_object_foreach((json_t *)contexts, k, v)
    {
        int w = snprintf(out + used, n - used, "%s%s", used ? ", " : "", k);
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
}

static int from_merged(struct merged *m, const char *want, struct sbx__kube_config *c,
                       struct sbx_error *err)
{
    const char *name = want && want[0] ? want : m->current;
    char names[512];
    context_names(m->contexts, names, sizeof(names));
    if (!name)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "kubeconfig '%s' has no current-context: name one with --context "
                             "(%s)",
                             m->first_file, names[0] ? names : "it has no contexts");
    const json_t *ctx = json_object_get(m->contexts, name);
    if (!ctx)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "kubeconfig '%s' has no context '%s' (%s)",
                             m->first_file, name, names[0] ? names : "it has no contexts");
    const json_t *body = json_object_get(ctx, "v");
    const char *file = json_string_value(json_object_get(ctx, "file"));
    const char *cl = json_string_value(json_object_get(body, "cluster"));
    const char *us = json_string_value(json_object_get(body, "user"));
    const char *ns = json_string_value(json_object_get(body, "namespace"));
    if (!cl || !cl[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "kubeconfig '%s': context '%s' names no cluster",
                             file, name);
    c->source = sbx_xstrdup(file);
    c->context = sbx_xstrdup(name);
    c->cluster = sbx_xstrdup(cl);
    c->user = sbx_xstrdup(us ? us : "");
    c->namespace = ns && ns[0] ? sbx_xstrdup(ns) : NULL;
    const json_t *ce = entry(m->clusters, "cluster", cl, file, err);
    if (!ce)
        return -SBX_E_NOTFOUND;
    int rc = load_cluster(c, cl, ce, err);
    if (rc == 0 && us && us[0]) {
        const json_t *ue = entry(m->users, "user", us, file, err);
        rc = ue ? load_user(c, us, ue, err) : -SBX_E_NOTFOUND;
    }
    return rc;
}

static int in_cluster(const char *dir, struct sbx__kube_config *c, struct sbx_error *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !host[0] || !port || !port[0])
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "not inside a pod: KUBERNETES_SERVICE_HOST and "
                             "KUBERNETES_SERVICE_PORT are not set");
    int v6 = strchr(host, ':') != NULL;
    c->server = sbx_xasprintf("https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
    c->source = sbx_xstrdup(dir);
    c->context = sbx_xstrdup(SBX__KUBE_IN_CLUSTER);
    c->cluster = sbx_xstrdup(SBX__KUBE_IN_CLUSTER);
    c->user = sbx_xstrdup("serviceaccount");
    c->token_file = sbx_xasprintf("%s/token", dir);
    char *ca = sbx_xasprintf("%s/ca.crt", dir);
    char *nsf = sbx_xasprintf("%s/namespace", dir);
    int rc = read_token(c->token_file, &c->token, err);
    if (rc == 0)
        rc = sbx_fs_read_path(ca, SBX__KUBE_CRED_FILE_MAX, &c->ca, err);
    struct sbx_buf ns;
    sbx_buf_init(&ns, 256);
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (rc == 0 && sbx_fs_read_path(nsf, 256, &ns, &ignored) == 0 && ns.len) {
        size_t n = strcspn(ns.data, " \t\r\n");
        if (n)
            c->namespace = sbx_xstrndup(ns.data, n);
    }
    if (rc < 0)
        sbx_error_prefix(err, "in-cluster credentials");
    sbx_buf_release(&ns);
    free(ca);
    free(nsf);
    return rc;
}

/* A credential must not travel in clear. */
static int check_transport(const struct sbx__kube_config *c, struct sbx_error *err)
{
    if (strncmp(c->server, "http://", 7) == 0 && (c->token || c->key))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "context '%s': server '%s' is plain HTTP, and sbx does not send a "
                             "token or a client key in clear",
                             c->context, c->server);
    return 0;
}

int sbx__kube_config_load(const struct sbx__kube_config_opts *opts, struct sbx__kube_config *c,
                          struct sbx_error *err)
{
    const char *sa = opts->sa_dir ? opts->sa_dir : SBX__KUBE_SA_DIR;
    int rc;
    if (opts->in_cluster) {
        rc = in_cluster(sa, c, err);
    } else {
        struct merged m = {json_object(), json_object(), json_object(), NULL, NULL, NULL};
        int none = 0;
        rc = read_files(&m, opts->kubeconfig, &none, err);
        if (rc == 0 && none) {
            char *tok = sbx_xasprintf("%s/token", sa);
            int pod = getenv("KUBERNETES_SERVICE_HOST") && file_exists(tok);
            free(tok);
            /* As client-go: no kubeconfig at all inside a pod is the pod's service account. */
            if (pod && !opts->context)
                rc = in_cluster(sa, c, err);
            else
                rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                                   "no kubeconfig: %s (give --kubeconfig PATH, or --in-cluster "
                                   "in a pod)",
                                   getenv("KUBECONFIG") && getenv("KUBECONFIG")[0]
                                           ? "none of the files of $KUBECONFIG exists"
                                           : "$KUBECONFIG is not set and ~/.kube/config does not "
                                             "exist");
        } else if (rc == 0) {
            rc = from_merged(&m, opts->context, c, err);
        }
        json_decref(m.clusters);
        json_decref(m.users);
        json_decref(m.contexts);
        free(m.current);
        free(m.current_file);
        free(m.first_file);
    }
    if (rc == 0)
        rc = check_transport(c, err);
    if (rc < 0)
        sbx__kube_config_release(c);
    return rc;
}

int sbx__kube_config_reload_token(struct sbx__kube_config *c, struct sbx_error *err)
{
    if (!c->token_file)
        return 0;
    return read_token(c->token_file, &c->token, err);
}
