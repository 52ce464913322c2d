/* Ports of a remote sandbox on the harness's host (remote.h): the node is asked whether
 * something listens (GET /v1/sandboxes/ID/ports/P), then a detached relay process listens on
 * 127.0.0.1:HOSTPORT here and carries each connection it accepts over its own WebSocket
 * (GET /v1/sandboxes/ID/portforward?ports=P, portforward.k8s.io channels, the shared pump of
 * wire/conn.h). One relay per port and sandbox: its record, locked while it runs, says where it
 * listens, so resolving the port again gives the same URL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include "providers/remote/remote.h"
#include "sandbox/host/portrelay.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/conn.h"
#include "sbx/common.h"
#include "sbx/time.h"

#define CHECK_MS 5000 /* how often a relay asks whether its sandbox is still there */
#define OPEN_MS  15000

/* ---------------------------------------------------------------------------------------------
 * Records: <runtime base>/remote/<id>/ports/<port> (sandbox/host/portrelay.h) */

static int ports_dir(const char *id, int make, char **out, struct sbx_error *err)
{
    size_t n = strlen(id);
    if (n == 0 || n > 64 || strspn(id, "0123456789abcdef") != n)
        return sbx_error_set(err, SBX_E_INVAL, 0, "bad sandbox id '%.64s'", id);
    return sbx__portrelay_dir("remote", id, make, out, err);
}

/* ---------------------------------------------------------------------------------------------
 * Resolving a port */

int sbx__remote_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    char *dir = NULL, portarg[16];
    if (port < 1 || port > 65535)
        return sbx_error_set(err, SBX_E_INVAL, 0, "port %d is not in 1..65535", port);
    /* The node answers not_found when nothing listens there. */
    char *q = sbx_xasprintf("/v1/sandboxes/%s/ports/%d", s->base.id, port);
    int rc = sbx__remote_session_call(s, "GET", q, NULL, NULL, err);
    free(q);
    if (rc == 0)
        rc = ports_dir(s->base.id, 1, &dir, err);
    if (rc < 0)
        return rc;
    snprintf(portarg, sizeof(portarg), "%d", port);
    const char *opt[4];
    static const char *const keys[] = {"node", "node_ca", "node_cert", "node_key"};
    for (size_t i = 0; i < 4; i++) {
        opt[i] = json_string_value(json_object_get(s->conn, keys[i]));
        if (!opt[i])
            opt[i] = "";
    }
    const char *const args[] = {
            SBX__REMOTE_RELAY_VERB, s->base.id, portarg, opt[0], opt[1], opt[2], opt[3], NULL};
    /* Where the runtime files are. */
    static const char *const pass[] = {"HOME", "TMPDIR", "XDG_RUNTIME_DIR", NULL};
    struct sbx__portrelay_start st = {.dir = dir, .port = port, .args = args, .pass_env = pass};
    rc = sbx__portrelay_resolve(&st, out_url, err);
    free(dir);
    return rc;
}

void sbx__remote_forward_forget(const char *id)
{
    char *dir = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (ports_dir(id, 0, &dir, &err) < 0)
        return;
    (void)sbx__portrelay_forget(dir, &err);
    free(dir);
}

/* ---------------------------------------------------------------------------------------------
 * The relay process */

struct relay {
    struct sbx__endpoint *ep;
    const char *id;
    int port;
    pthread_mutex_t lock; /* token, renew_at */
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    int64_t renew_at; /* seconds since the epoch: mint a new token from then on */
};

/* A token minted with the harness's certificate (the owner's), renewed at half its life.
 * Called with r->lock held. */
static int token_fresh(struct relay *r, struct sbx_error *err)
{
    int64_t now = (int64_t)time(NULL);
    if (r->token[0] && now < r->renew_at)
        return 0;
    json_t *ans = NULL;
    char *path = sbx_xasprintf("/v1/sandboxes/%s/token", r->id);
    int rc = sbx__remote_call(r->ep, "POST", path, NULL, NULL, &ans, err);
    free(path);
    const char *t = json_string_value(json_object_get(ans, "token"));
    json_int_t until = json_integer_value(json_object_get(ans, "token_expires"));
    if (rc == 0 && (!t || strlen(t) > SBX__REMOTE_TOKEN_MAX))
        rc = sbx_error_set(err, SBX_E_API, 0, "the node sent no token for sandbox '%s'", r->id);
    if (rc == 0) {
        snprintf(r->token, sizeof(r->token), "%s", t);
        r->renew_at = now + (until > now ? (until - now) / 2 : 0);
    }
    json_decref(ans);
    return rc;
}

static void relay_one(void *ctx, int fd)
{
    static const char *const protocols[] = {SBX__PF_PROTOCOL, NULL};
    struct relay *r = ctx;
    char path[160], line[SBX__REMOTE_TOKEN_MAX + 16];
    struct sbx_error e = SBX_ERROR_INIT;
    struct sbx__wsconn *w = NULL;
    const char *headers[] = {SBX__REMOTE_VERSION_HEADER, line, NULL};
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/portforward?ports=%d", r->id, r->port);
    int rc = 0;
    /* The node keeps a few tokens of a sandbox and drops the oldest when another is minted
     * (every command of the harness mints one), so the relay's may be gone before its half
     * life: refused (403), it mints a fresh one and tries once more. */
    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_mutex_lock(&r->lock);
        if (attempt)
            r->renew_at = 0;
        rc = token_fresh(r, &e);
        snprintf(line, sizeof(line), "Sbx-Token: %s", r->token);
        pthread_mutex_unlock(&r->lock);
        if (rc == 0)
            rc = sbx__wsconn_open(r->ep, path, protocols, headers, 0, OPEN_MS, &w, &e);
        explicit_bzero(line, sizeof(line));
        if (rc != -SBX_E_PERM)
            break;
        sbx_error_clear(&e);
    }
    if (rc == 0)
        sbx__pf_pump(w, (uint16_t)r->port, fd);
    if (w) {
        (void)sbx__wsconn_close(w, SBX__WS_CLOSE_NORMAL, NULL, sbx_deadline_after_ms(1000), NULL);
        sbx__wsconn_free(w);
    }
}

/* Whether the relay should go on: the node still holds the sandbox for this harness (a node
 * that cannot be reached now may come back: go on). */
static int node_wanted(void *ctx)
{
    struct relay *r = ctx;
    struct sbx_error e = SBX_ERROR_INIT;
    pthread_mutex_lock(&r->lock);
    int rc = token_fresh(r, &e);
    pthread_mutex_unlock(&r->lock);
    return rc == 0 || (rc != -SBX_E_PERM && rc != -SBX_E_NOTFOUND);
}

int sbx__remote_relay_main(int argc, char **argv)
{
    if (argc != 7) {
        sbx__portrelay_say("the relay takes ID PORT NODE CA CERT KEY");
        return 2;
    }
    if (sbx__portrelay_detach() < 0)
        return 1;
    char *end = NULL;
    long port = strtol(argv[2], &end, 10);
    struct relay r = {.id = argv[1], .port = (int)port};
    struct sbx__endpoint_opts eo = {.url = argv[3],
                                    .name = "the sbx-node daemon",
                                    .ca_file = argv[4],
                                    .cert_file = argv[5],
                                    .key_file = argv[6],
                                    .http = SBX__HTTP_1_1};
    struct sbx_error e = SBX_ERROR_INIT;
    pthread_mutex_init(&r.lock, NULL);
    if (*end || port < 1 || port > 65535) {
        sbx__portrelay_say("bad port");
        return 1;
    }
    /* The first token now: a relay that cannot reach the node says so at once. */
    if (sbx__endpoint_new(&eo, &r.ep, &e) < 0 || token_fresh(&r, &e) < 0) {
        sbx__portrelay_say(e.msg);
        return 1;
    }
    struct sbx__portrelay_serve s = {
            .ctx = &r, .check_ms = CHECK_MS, .carry = relay_one, .wanted = node_wanted};
    int status = sbx__portrelay_run(&s);
    sbx__endpoint_free(r.ep);
    explicit_bzero(r.token, sizeof(r.token));
    return status;
}
