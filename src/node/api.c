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
#include "sbx/session.h"

#define PREV_GRACE_S 60

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
    char th[SBX_SHA256_HEX_LEN + 1], ph[SBX_SHA256_HEX_LEN + 1], name[NODE_ID_MAX + 8];
    sbx_hex(r->token_hash, sizeof(r->token_hash), th);
    sbx_hex(r->prev_hash, sizeof(r->prev_hash), ph);
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:s, s:I}", "id", r->id, "owner", r->owner,
                          "token_sha256", th, "expires", (json_int_t)r->expires, "prev_sha256", ph,
                          "prev_expires", (json_int_t)r->prev_expires);
    char *text = sbx_json_dumps(j, JSON_COMPACT);
    json_decref(j);
    int dfd = open(d->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(name, sizeof(name), "%s.json", r->id);
    int rc = dfd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", d->state_dir)
                     : sbx_fs_write_state(dfd, name, text, strlen(text), 0600, err);
    if (dfd >= 0)
        close(dfd);
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
    sbx_buf_init(&b, 4096);
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    json_t *j = NULL;
    if (fd >= 0 && sbx_fd_read_all(fd, 4096, &b, &err) == 0)
        sbx_json_parse(b.data, b.len, NULL, &j, &err);
    if (fd >= 0)
        close(fd);
    sbx_buf_release(&b);
    struct node_record r = {0};
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *owner = json_string_value(json_object_get(j, "owner"));
    if (id && owner && strlen(id) <= NODE_ID_MAX && strlen(owner) == SBX_SHA256_HEX_LEN &&
        unhex(json_string_value(json_object_get(j, "token_sha256")), r.token_hash, 32) == 0 &&
        unhex(json_string_value(json_object_get(j, "prev_sha256")), r.prev_hash, 32) == 0 &&
        d->n_recs < NODE_SANDBOX_MAX) {
        snprintf(r.id, sizeof(r.id), "%s", id);
        snprintf(r.owner, sizeof(r.owner), "%s", owner);
        r.expires = json_integer_value(json_object_get(j, "expires"));
        r.prev_expires = json_integer_value(json_object_get(j, "prev_expires"));
        SBX_ALLOC_GROW(d->recs, d->n_recs + 1, d->cap_recs);
        d->recs[d->n_recs++] = r;
    }
    json_decref(j);
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
        if (r)
            ok = (CRYPTO_memcmp(h, r->token_hash, sizeof(h)) == 0 && now < r->expires) ||
                 (CRYPTO_memcmp(h, r->prev_hash, sizeof(h)) == 0 && now < r->prev_expires);
        pthread_mutex_unlock(&d->mu);
    }
    if (ok)
        return 0;
    sbx_error_clear(err);
    return sbx_error_set(err, SBX_E_PERM, 0, "the token does not open sandbox '%.64s'", id);
}

static json_t *token_json(const struct node_record *r, const char *token)
{
    return json_pack("{s:s, s:s, s:I}", "id", r->id, "token", token, "token_expires",
                     (json_int_t)r->expires);
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
    if (body && (!json_is_object(body) || json_object_size(body) > 0)) {
        /* A manifest needs its local sources refused first (they would name this host's
         * files): not taken yet. */
        sbx_error_set(&err, SBX_E_UNSUPPORTED, 0,
                      "this node makes empty sandboxes only (no manifest or options yet)");
        goto out;
    }
    pthread_mutex_lock(&d->mu);
    int full = d->n_recs >= d->max_sandboxes;
    pthread_mutex_unlock(&d->mu);
    if (full) {
        sbx_error_set(&err, SBX_E_TOOBIG, 0, "this node holds %u sandboxes, its most",
                      d->max_sandboxes);
        goto out;
    }
    struct sbx_create_spec spec = {0};
    if (sbx_client_new("local", NULL, &cl, &err) < 0 || sbx_client_create(cl, &spec, &s, &err) < 0)
        goto out;
    struct node_record r = {.prev_expires = 0};
    char token[NODE_TOKEN_LEN + 1];
    snprintf(r.id, sizeof(r.id), "%s", sbx_session_id(s));
    memcpy(r.owner, c->owner, sizeof(r.owner));
    r.expires = now_s() + d->token_ttl_s;
    if (mint(token, r.token_hash, &err) < 0 || save(d, &r, &err) < 0) {
        sbx_session_delete(s, NULL);
        goto out;
    }
    pthread_mutex_lock(&d->mu);
    SBX_ALLOC_GROW(d->recs, d->n_recs + 1, d->cap_recs);
    d->recs[d->n_recs++] = r;
    pthread_mutex_unlock(&d->mu);
    json_t *ans = token_json(&r, token);
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
    if (r)
        *r = d->recs[--d->n_recs];
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

/* A new token for the owner's certificate; the previous one stays valid for PREV_GRACE_S. */
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
    pthread_mutex_lock(&d->mu);
    struct node_record *r = find(d, id);
    struct node_record copy = {0};
    if (r && strcmp(r->owner, c->owner) == 0) {
        memcpy(r->prev_hash, r->token_hash, sizeof(h));
        r->prev_expires = now_s() + PREV_GRACE_S < r->expires ? now_s() + PREV_GRACE_S : r->expires;
        memcpy(r->token_hash, h, sizeof(h));
        r->expires = now_s() + d->token_ttl_s;
        copy = *r;
    }
    pthread_mutex_unlock(&d->mu);
    if (!copy.id[0])
        sbx_error_set(&err, SBX_E_PERM, 0, "the token does not open sandbox '%.64s'", id);
    else if (save(d, &copy, &err) == 0) {
        json_t *ans = token_json(&copy, token);
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
        json_t *ans =
                json_pack("{s:s, s:i, s:s}", "name", c->d->name, "version", 1, "provider", "local");
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
    else if (strcmp(rest, "exec") == 0 && get && r->upgrade_ws)
        node_exec(c, r, id);
    else {
        sbx_error_set(&err, SBX_E_NOTFOUND, 0, "no such resource");
        node_respond_error(c, &err);
    }
}
