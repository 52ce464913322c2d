/* The daemon's REST requests: sandboxes made, listed and removed with the local provider, and
 * their capability tokens (src/node/daemon.h, docs/internals/node.md). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/dl-crypto.h"
#include "core/grow.h"
#include "node/daemon.h"
#include "sbx/b64.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"

static int64_t now_s(void)
{
    return (int64_t)time(NULL);
}

static struct node_record *find(struct node_daemon *d, const char *id)
{
    for (size_t i = 0; i < d->n_recs; i++)
        if (strcmp(d->recs[i].id, id) == 0)
            return &d->recs[i];
    return NULL;
}

static int save(struct node_daemon *d, const struct node_record *r, struct sbx_error *err)
{
    char name[NODE_ID_MAX + 8];
    json_t *toks = json_array();
    for (size_t i = 0; i < NODE_TOKENS; i++) {
        char h[SBX_SHA256_HEX_LEN + 1];
        if (!r->tok[i].expires)
            continue;
        sbx_hex(r->tok[i].hash, sizeof(r->tok[i].hash), h);
        json_array_append_new(toks, json_pack("{s:s, s:I}", "sha256", h, "expires",
                                              (json_int_t)r->tok[i].expires));
    }
    json_t *j = json_pack("{s:s, s:s, s:o, s:O}", "id", r->id, "owner", r->owner, "tokens", toks,
                          "env", r->env);
    char *text = sbx_json_dumps(j, JSON_COMPACT);
    json_decref(j);
    int dfd = open(d->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(name, sizeof(name), "%s.json", r->id);
    int rc = dfd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", d->state_dir)
                     : sbx_fs_write_state(dfd, name, text, strlen(text), 0600, err);
    if (dfd >= 0)
        close(dfd);
    explicit_bzero(text, strlen(text));
    free(text);
    return rc;
}

static int unhex(const char *s, uint8_t *out, size_t n)
{
    if (!s || strlen(s) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

/* One record file; a bad one is skipped (it opens nothing). */
static void load_one(struct node_daemon *d, int dfd, const char *name)
{
    struct sbx_buf b;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&b, NODE_BODY_MAX + 65536);
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    json_t *j = NULL, *t;
    if (fd >= 0 && sbx_fd_read_all(fd, NODE_BODY_MAX + 65536, &b, &err) == 0)
        sbx_json_parse(b.data, b.len, NULL, &j, &err);
    if (fd >= 0)
        close(fd);
    sbx_buf_release(&b);
    struct node_record r = {0};
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *owner = json_string_value(json_object_get(j, "owner"));
    json_t *env = json_object_get(j, "env");
    size_t i, n = 0;
    if (id && owner && strlen(id) <= NODE_ID_MAX && strlen(owner) == SBX_SHA256_HEX_LEN &&
        json_is_array(env) && d->n_recs < NODE_SANDBOX_MAX) {
        snprintf(r.id, sizeof(r.id), "%s", id);
        snprintf(r.owner, sizeof(r.owner), "%s", owner);
        json_array_foreach(json_object_get(j, "tokens"), i, t)
        {
            if (n < NODE_TOKENS &&
                unhex(json_string_value(json_object_get(t, "sha256")), r.tok[n].hash, 32) == 0)
                r.tok[n++].expires = json_integer_value(json_object_get(t, "expires"));
        }
        r.env = json_incref(env);
        SBX_ALLOC_GROW(d->recs, d->n_recs + 1, d->cap_recs);
        d->recs[d->n_recs++] = r;
    }
    json_decref(j);
}

json_t *node_record_env(struct node_daemon *d, const char *id)
{
    pthread_mutex_lock(&d->mu);
    struct node_record *r = find(d, id);
    json_t *env = r && r->env ? json_deep_copy(r->env) : json_array();
    pthread_mutex_unlock(&d->mu);
    return env;
}

/* Put a token's hash into r: an empty or expired slot, else the oldest. */
static void add_token(struct node_record *r, const uint8_t hash[SBX_SHA256_LEN], int64_t expires,
                      int64_t now)
{
    size_t at = 0;
    for (size_t i = 0; i < NODE_TOKENS; i++) {
        if (r->tok[i].expires <= now) {
            at = i;
            break;
        }
        if (r->tok[i].expires < r->tok[at].expires)
            at = i;
    }
    memcpy(r->tok[at].hash, hash, SBX_SHA256_LEN);
    r->tok[at].expires = expires;
}

int node_records_load(struct node_daemon *d, struct sbx_error *err)
{
    DIR *dir = opendir(d->state_dir);
    if (!dir)
        return sbx_error_errno(err, errno, "cannot open '%s'", d->state_dir);
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (n > 5 && strcmp(e->d_name + n - 5, ".json") == 0)
            load_one(d, dirfd(dir), e->d_name);
    }
    closedir(dir);
    return 0;
}

/* A fresh token into out (NODE_TOKEN_LEN + 1) and its hash. */
static int mint(char *out, uint8_t hash[SBX_SHA256_LEN], struct sbx_error *err)
{
    uint8_t raw[NODE_TOKEN_BYTES];
    struct sbx_buf b;
    sbx_buf_init(&b, 64);
    int rc = sbx_random_bytes(raw, sizeof(raw), err);
    if (rc == 0)
        rc = sbx_b64_encode(raw, sizeof(raw), &b, err);
    if (rc == 0) {
        for (size_t i = 0; i < b.len; i++)
            b.data[i] = b.data[i] == '+' ? '-' : b.data[i] == '/' ? '_' : b.data[i];
        snprintf(out, NODE_TOKEN_LEN + 1, "%s", b.data); /* drops the '=' */
        rc = sbx_sha256(out, NODE_TOKEN_LEN, hash, err);
    }
    sbx_buf_release(&b);
    return rc;
}

int node_token_check(struct node_daemon *d, const char *id, const char *token,
                     struct sbx_error *err)
{
    uint8_t h[SBX_SHA256_LEN];
    int ok = 0;
    if (strlen(token) == NODE_TOKEN_LEN && sbx_sha256(token, NODE_TOKEN_LEN, h, err) == 0) {
        pthread_mutex_lock(&d->mu);
        struct node_record *r = find(d, id);
        int64_t now = now_s();
        for (size_t i = 0; r && i < NODE_TOKENS; i++)
            ok |= CRYPTO_memcmp(h, r->tok[i].hash, sizeof(h)) == 0 && now < r->tok[i].expires;
        pthread_mutex_unlock(&d->mu);
    }
    if (ok)
        return 0;
    sbx_error_clear(err);
    return sbx_error_set(err, SBX_E_PERM, 0, "the token does not open sandbox '%.64s'", id);
}

static json_t *token_json(const char *id, const char *token, int64_t expires)
{
    return json_pack("{s:s, s:s, s:I}", "id", id, "token", token, "token_expires",
                     (json_int_t)expires);
}

/* The local sandbox's creation time into ans ("created", RFC 3339), when its state says. */
static void add_created(struct sbx_session *s, json_t *ans)
{
    json_t *st = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_session_state(s, &st, &err) == 0 && json_is_string(json_object_get(st, "created")))
        json_object_set(ans, "created", json_object_get(st, "created"));
    json_decref(st);
}

/* GET /v1/sandboxes/ID: the id, its status ("live", or "stopped" by POST .../stop), when it was
 * made, the workspace's root as commands in the sandbox see it, and the local sandbox's whole
 * state ("state"; a stopped one's is its stopped record's). */
static void describe(struct node_conn *c, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = NULL;
    json_t *st = NULL, *ans = NULL;
    if (sbx_client_new("local", NULL, &cl, &err) == 0 && sbx_client_attach(cl, id, &s, &err) == 0) {
        ans = json_pack("{s:s, s:s, s:s}", "id", id, "status", "live", "root", sbx_session_root(s));
        add_created(s, ans);
        if (sbx_session_state(s, &st, &err) == 0) /* the local sandbox's whole state */
            json_object_set(ans, "state", st);
    } else if (err.code == SBX_E_NOTFOUND && sbx_client_state(cl, id, 0, &st, NULL) == 0 &&
               json_is_string(json_object_get(st, "root"))) {
        ans = json_pack("{s:s, s:s, s:O, s:O}", "id", id, "status", "stopped", "root",
                        json_object_get(st, "root"), "state", st);
        if (json_is_string(json_object_get(st, "created")))
            json_object_set(ans, "created", json_object_get(st, "created"));
    }
    if (ans) {
        sbx_error_clear(&err);
        node_respond(c, 200, ans, &err);
    } else {
        node_respond_error(c, &err);
    }
    json_decref(ans);
    json_decref(st);
    sbx_session_free(s);
    sbx_client_free(cl);
}

/* A create's environment: at most NODE_ARGS_MAX strings "NAME=VALUE". */
static int env_check(const json_t *env, struct sbx_error *err)
{
    size_t i;
    json_t *v;
    if (!json_is_array(env) || json_array_size(env) > NODE_ARGS_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "\"env\" takes at most %d \"NAME=VALUE\"",
                             NODE_ARGS_MAX);
    json_array_foreach(env, i, v)
    {
        const char *e = json_string_value(v);
        if (!e || e[0] == '=' || !strchr(e, '='))
            return sbx_error_set(err, SBX_E_INVAL, 0, "\"env\" entries are \"NAME=VALUE\"");
    }
    return 0;
}

/* A create's "options": the local provider's limits and network, nothing that names this
 * host's paths or ports; checked by the local provider's own rules. The host's whole network
 * only when the daemon was started with --allow-network-full. */
static int options_check(const struct node_daemon *d, const json_t *o, struct sbx_error *err)
{
    static const char *const allowed[] = {"memory", "pids", "cpus", "disk", "network"};
    const char *key;
    json_t *v;
    if (!json_is_object(o))
        return sbx_error_set(err, SBX_E_INVAL, 0, "\"options\" is an object");
    json_object_foreach((json_t *)o, key, v)
    {
        size_t i = 0;
        while (i < sizeof(allowed) / sizeof(allowed[0]) && strcmp(key, allowed[i]) != 0)
            i++;
        if (i == sizeof(allowed) / sizeof(allowed[0]))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "a node's sandbox takes the options memory, pids, cpus, disk "
                                 "and network, not '%.64s'",
                                 key);
    }
    const char *net = json_string_value(json_object_get(o, "network"));
    if (net && strcmp(net, "full") == 0 && !d->allow_network_full)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "node '%s' gives no sandbox its whole network (network 'full'; "
                             "the daemon's --allow-network-full)",
                             d->name);
    return sbx_provider_options_check("local", o, NULL, err);
}

/* The create's body: {"env": [...], "options": {...}}, both optional. */
static int create_body(const struct node_daemon *d, const json_t *body, struct sbx_error *err)
{
    json_t *env = json_object_get(body, "env"), *opts = json_object_get(body, "options");
    if (body && !json_is_object(body))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a create's body is an object");
    /* A manifest is materialised by the harness through commands: the node never reads one
     * (its local sources would name this host's files). */
    if (json_object_size(body) > (env ? 1u : 0u) + (opts ? 1u : 0u))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a create takes only \"env\" and \"options\"");
    if (env && env_check(env, err) < 0)
        return -err->code;
    return opts ? options_check(d, opts, err) : 0;
}

static void create(struct node_conn *c, struct node_req *req)
{
    struct node_daemon *d = c->d;
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *body = NULL;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = NULL;
    if (req->body.len && sbx_json_parse(req->body.data, req->body.len, NULL, &body, &err) < 0)
        goto out;
    json_t *env = json_object_get(body, "env"), *opts = json_object_get(body, "options");
    if (create_body(d, body, &err) < 0)
        goto out;
    pthread_mutex_lock(&d->mu);
    int full = d->n_recs >= d->max_sandboxes;
    pthread_mutex_unlock(&d->mu);
    if (full) {
        sbx_error_set(&err, SBX_E_TOOBIG, 0, "this node holds %u sandboxes, its most",
                      d->max_sandboxes);
        goto out;
    }
    struct sbx_create_spec spec = {0};
    json_t *none = json_object();
    int made = sbx_client_new_json("local", opts ? opts : none, &cl, &err) == 0 &&
               sbx_client_create(cl, &spec, &s, &err) == 0;
    json_decref(none);
    if (!made)
        goto out;
    struct node_record r = {.env = env ? json_deep_copy(env) : json_array()};
    char token[NODE_TOKEN_LEN + 1];
    uint8_t h[SBX_SHA256_LEN];
    int64_t expires = now_s() + d->token_ttl_s;
    snprintf(r.id, sizeof(r.id), "%s", sbx_session_id(s));
    memcpy(r.owner, c->owner, sizeof(r.owner));
    if (mint(token, h, &err) == 0)
        add_token(&r, h, expires, now_s());
    if (err.code || save(d, &r, &err) < 0) {
        json_decref(r.env);
        sbx_session_delete(s, NULL);
        goto out;
    }
    pthread_mutex_lock(&d->mu);
    SBX_ALLOC_GROW(d->recs, d->n_recs + 1, d->cap_recs);
    d->recs[d->n_recs++] = r;
    pthread_mutex_unlock(&d->mu);
    json_t *ans = token_json(r.id, token, expires);
    json_object_set_new(ans, "root", json_string(sbx_session_root(s)));
    add_created(s, ans);
    node_respond(c, 201, ans, &err);
    json_decref(ans);
    explicit_bzero(token, sizeof(token));
out:
    if (err.code)
        node_respond_error(c, &err);
    sbx_session_free(s);
    sbx_client_free(cl);
    json_decref(body);
}

static void list(struct node_conn *c)
{
    json_t *a = json_array();
    pthread_mutex_lock(&c->d->mu);
    for (size_t i = 0; i < c->d->n_recs; i++)
        if (strcmp(c->d->recs[i].owner, c->owner) == 0)
            json_array_append_new(a, json_pack("{s:s}", "id", c->d->recs[i].id));
    pthread_mutex_unlock(&c->d->mu);
    json_t *ans = json_pack("{s:o}", "sandboxes", a);
    struct sbx_error err = SBX_ERROR_INIT;
    node_respond(c, 200, ans, &err);
    json_decref(ans);
}

static void forget(struct node_daemon *d, const char *id)
{
    pthread_mutex_lock(&d->mu);
    struct node_record *r = find(d, id);
    if (r) {
        json_decref(r->env);
        *r = d->recs[--d->n_recs];
    }
    pthread_mutex_unlock(&d->mu);
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s.json", d->state_dir, id);
    unlink(p);
}

static void remove_one(struct node_conn *c, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    if (sbx_client_new("local", NULL, &cl, &err) == 0 &&
        (sbx_client_remove(cl, id, 0, &err) == 0 || err.code == SBX_E_NOTFOUND)) {
        forget(c->d, id);
        json_t *ans = json_pack("{s:s}", "removed", id);
        sbx_error_clear(&err);
        node_respond(c, 200, ans, &err);
        json_decref(ans);
    } else {
        node_respond_error(c, &err);
    }
    sbx_client_free(cl);
}

/* A new token for the owner's certificate; the others stay valid to their own end. */
static void remint(struct node_conn *c, const char *id)
{
    struct node_daemon *d = c->d;
    struct sbx_error err = SBX_ERROR_INIT;
    char token[NODE_TOKEN_LEN + 1];
    uint8_t h[SBX_SHA256_LEN];
    if (mint(token, h, &err) < 0) {
        node_respond_error(c, &err);
        return;
    }
    int64_t expires = now_s() + d->token_ttl_s;
    pthread_mutex_lock(&d->mu);
    struct node_record *r = find(d, id);
    int mine = r && strcmp(r->owner, c->owner) == 0;
    if (mine) {
        add_token(r, h, expires, now_s());
        save(d, r, &err); /* under the lock: two mints never write the record at once */
    }
    pthread_mutex_unlock(&d->mu);
    if (!mine)
        sbx_error_set(&err, SBX_E_PERM, 0, "the token does not open sandbox '%.64s'", id);
    if (!err.code) {
        json_t *ans = token_json(id, token, expires);
        node_respond(c, 200, ans, &err);
        json_decref(ans);
    }
    if (err.code)
        node_respond_error(c, &err);
    explicit_bzero(token, sizeof(token));
}

/* "/v1/sandboxes/ID[/rest]": the id into id and the rest (without '/') into *rest. */
static int split_path(const char *path, char *id, const char **rest)
{
    static const char pre[] = "/v1/sandboxes/";
    if (strncmp(path, pre, sizeof(pre) - 1) != 0)
        return -1;
    const char *p = path + sizeof(pre) - 1;
    size_t n = strcspn(p, "/");
    if (n == 0 || n > NODE_ID_MAX)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-'))
            return -1;
    memcpy(id, p, n);
    id[n] = 0;
    *rest = p[n] == '/' ? p + n + 1 : "";
    return 0;
}

void node_handle(struct node_conn *c, struct node_req *r)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char id[NODE_ID_MAX + 1];
    const char *rest = NULL;
    int get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
    if (strcmp(r->path, "/v1/node") == 0 && get) {
        json_t *ans = json_pack("{s:s, s:i, s:s}", "name", c->d->name, "version",
                                NODE_VERSION_MAJOR, "provider", "local");
        node_respond(c, 200, ans, &err);
        json_decref(ans);
        return;
    }
    if (strcmp(r->path, "/v1/sandboxes") == 0 && (get || post)) {
        if (post)
            create(c, r);
        else
            list(c);
        return;
    }
    if (split_path(r->path, id, &rest) < 0) {
        sbx_error_set(&err, SBX_E_NOTFOUND, 0, "no such resource");
        node_respond_error(c, &err);
        return;
    }
    if (strcmp(rest, "token") == 0 && post) {
        remint(c, id);
        return;
    }
    if (node_token_check(c->d, id, r->token, &err) < 0) {
        node_respond_error(c, &err);
        return;
    }
    if (strcmp(rest, "") == 0 && strcmp(r->method, "DELETE") == 0)
        remove_one(c, id);
    else if (strcmp(rest, "") == 0 && get)
        describe(c, id);
    else if (strcmp(rest, "workspace") == 0 || strncmp(rest, "files", 5) == 0)
        node_files(c, r, id, rest);
    else if (strcmp(rest, "exec") == 0 && get && r->upgrade_ws)
        node_exec(c, r, id);
    else if (strcmp(rest, "portforward") == 0 && get && r->upgrade_ws)
        node_portforward(c, r, id);
    else if (strncmp(rest, "ports/", 6) == 0 && get)
        node_port_check(c, id, rest + 6);
    else if (node_sandbox_request(c, r, id, rest))
        ;
    else {
        sbx_error_set(&err, SBX_E_NOTFOUND, 0, "no such resource");
        node_respond_error(c, &err);
    }
}
