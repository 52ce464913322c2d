/* The local provider, client side: the client (the sbx_client_ops of sbx__provider_local) and
 * what it does itself — attach, list, prune, remove — over the files of this room (client.h):
 * create.c makes sandboxes, ops.c serves their sessions, stopped.c and rebuild.c stop and bring
 * them back. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "providers/local/client/client.h"
#include "providers/local/config.h"
#include "providers/local/isolate/isolate.h"
#include "providers/local/net/net.h"
#include "sandbox/host/host.h"
#include "sbx/json.h"
#include "sbx/log.h"

#define IDRANGE_WAIT_MS 10000
/* Create waits for the supervisor's report, which comes (ok or an error) or the socket closes
 * when it died: this is only a safety bound, so creates under load queue rather than fail. */
#define START_TIMEOUT_MS 300000

static int lc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    return sbx__local_create((struct sbx__local_client *)bc, spec, 0, out, err);
}

static int attach(struct sbx_client *bc, const char *prefix, int probe, struct sbx_session **out,
                  struct sbx_error *err)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    char *rundir = NULL, *id = NULL, *dir = NULL;
    json_t *state = NULL, *req = NULL, *reply = NULL;
    int rc;
    if ((rc = sbx__runtime_base(c->runtime_dir, &rundir, err)) < 0)
        goto out;
    if ((rc = sbx__local_resolve_id(rundir, prefix, &id, err)) == -SBX_E_NOTFOUND) {
        char *sdir = NULL, *sid = NULL;
        if (sbx__local_stopped_dir(0, &sdir, NULL) == 0 &&
            sbx__local_stopped_find(sdir, prefix, &sid, NULL) == 1)
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                               "sandbox '%s' is stopped (sbx sandbox start %s)", sid, sid);
        free(sdir);
        free(sid);
    }
    if (rc < 0)
        goto out;
    dir = sbx_xasprintf("%s/%s", rundir, id);
    if ((rc = sbx__local_read_state(dir, id, &state, err)) < 0 ||
        (rc = sbx__local_check_state(state, id, err)) < 0)
        goto out;
    /* The probe: a supervisor that answers. Without it (one command), the command's own
     * connect finds a dead one and fails with the same "is gone". */
    if (probe) {
        req = json_pack("{s:s}", "op", "info");
        rc = sbx__local_request(dir, id, req, &reply, NULL, 0, NULL, c->request_idle_ms, err);
        if (rc < 0)
            goto out;
    }
    struct sbx__local_session *ls = sbx__local_session_new(rundir, dir, state);
    ls->idle_ms = c->request_idle_ms;
    *out = &ls->base;
    state = NULL;
out:
    json_decref(state);
    json_decref(req);
    json_decref(reply);
    free(rundir);
    free(id);
    free(dir);
    return rc;
}

int sbx__local_attach(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                      struct sbx_error *err)
{
    return attach(bc, prefix, 1, out, err);
}

int sbx__local_attach_once(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                           struct sbx_error *err)
{
    return attach(bc, prefix, 0, out, err);
}

static int cmp_created(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "created"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "created"));
    if (!x)
        x = json_string_value(
                json_object_get(json_object_get(*(json_t *const *)a, "state"), "created"));
    if (!y)
        y = json_string_value(
                json_object_get(json_object_get(*(json_t *const *)b, "state"), "created"));
    return strcmp(x ? x : "", y ? y : "");
}

/* arr sorted by creation time again, after the stopped records were added. */
static void sort_created(json_t *arr)
{
    size_t n = json_array_size(arr);
    if (n < 2)
        return;
    json_t **items = sbx_xcalloc(n, sizeof(*items));
    for (size_t i = 0; i < n; i++)
        items[i] = json_incref(json_array_get(arr, i));
    qsort(items, n, sizeof(*items), cmp_created);
    json_array_clear(arr);
    for (size_t i = 0; i < n; i++)
        sbx_json_append(arr, items[i]);
    free(items);
}

/* One runtime dir entry as sbx_client_list_all describes it; *dead says prune may take it, and
 * *ws_out (borrowed from the result) is the workspace prune removes, NULL for none. NULL when
 * the entry is not a directory of ours. */
static json_t *describe(const char *rundir, const char *id, int *dead, const char **ws_out)
{
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    json_t *state = NULL, *out = NULL, *req = NULL, *reply = NULL;
    struct sbx__local_record rec;
    struct sbx_error ignored = SBX_ERROR_INIT;
    struct stat st;
    int stopped = 0, alive = 0;
    const char *status = "dead";
    sbx__local_record_init(&rec);
    *dead = 0;
    *ws_out = NULL;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        goto out;
    if (sbx__local_read_state(dir, id, &state, &ignored) < 0 ||
        sbx__local_check_state(state, id, &ignored) < 0) {
        json_decref(state);
        state = NULL;
    }
    if (sbx__local_record_read(dir, id, &rec) == 0)
        alive = sbx__local_record_alive(&rec, id, &stopped);
    req = json_pack("{s:s}", "op", "info");
    if (sbx__local_lease_busy(dir))
        status = "creating";
    else if (stopped)
        status = "suspended"; /* SIGSTOPped: it would not answer, do not wait for it */
    else if (state && sbx__local_request(dir, id, req, &reply, NULL, 0, NULL,
                                         SBX__LOCAL_REQUEST_IDLE_MS, &ignored) == 0)
        status = "live";
    else if (alive && sbx__local_record_alive(&rec, id, &stopped) && stopped)
        status = "suspended"; /* stopped while we asked: a SIGSTOP takes effect when the
                               * process next runs, which on a busy host is after kill(2) */
    else if (alive)
        status = "unresponsive"; /* a process of it runs: rm, not prune, decides */
    if (strcmp(status, "live") == 0) {
        out = json_deep_copy(state);
        sbx_json_set(out, "status", sbx_json_str(status));
        goto out;
    }
    json_t *left = json_object(), *cgs = json_array();
    const char *ws = state ? json_string_value(json_object_get(state, "workspace")) : NULL;
    int owned = state && json_is_true(json_object_get(state, "workspace_owned"));
    sbx_json_set(left, "runtime_dir", sbx_json_str(dir));
    sbx_json_set(left, "workspace", ws && lstat(ws, &st) == 0 ? sbx_json_str(ws) : json_null());
    sbx_json_set(left, "workspace_owned", json_boolean(owned));
    for (size_t i = 0; i < rec.cgroups.n; i++)
        if (lstat(rec.cgroups.v[i], &st) == 0)
            sbx_json_append(cgs, sbx_json_str(rec.cgroups.v[i]));
    sbx_json_set(left, "cgroups", cgs);
    const char *image =
            state ? json_string_value(json_object_get(json_object_get(state, "disk"), "image"))
                  : NULL;
    sbx_json_set(left, "disk_image",
                 image && lstat(image, &st) == 0 ? sbx_json_str(image) : json_null());
    sbx_json_set(left, "supervisor_pid", alive ? json_integer(rec.pid) : json_null());
    out = json_object();
    sbx_json_set(out, "id", sbx_json_str(id));
    sbx_json_set(out, "status", sbx_json_str(status));
    if (state && json_object_get(state, "created"))
        sbx_json_set(out, "created", json_deep_copy(json_object_get(state, "created")));
    sbx_json_set(out, "state", state ? json_incref(state) : json_null());
    sbx_json_set(out, "leftovers", left);
    *dead = strcmp(status, "dead") == 0;
    if (owned)
        *ws_out = json_string_value(json_object_get(state, "workspace"));
out:
    sbx__local_record_release(&rec);
    json_decref(state);
    json_decref(req);
    json_decref(reply);
    free(dir);
    return out;
}

/* Each sandbox id of the runtime base rundir through fn (NULL: not listed), into *out sorted by
 * creation time. */
/* Describing a sandbox takes a few descriptors at a time, and one that cannot be read is
 * taken for dead; without them a listing would quietly lose the live ones. */
#define SCAN_FDS 4

static int scan_runtime(const char *rundir, json_t *(*fn)(const char *rundir, const char *id),
                        json_t **out, struct sbx_error *err)
{
    int rc = sbx__local_fd_headroom("list sandboxes", SCAN_FDS, err);
    if (rc < 0)
        return rc;
    sbx__local_reclaim(rundir);
    DIR *d = opendir(rundir);
    if (!d) {
        rc = sbx_error_errno(err, errno, "cannot list '%s'", rundir);
        sbx__proto_fd_hint(err);
        return rc;
    }
    json_t **items = NULL;
    size_t n = 0, alloc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        json_t *item = sbx__local_valid_id(e->d_name) ? fn(rundir, e->d_name) : NULL;
        if (!item)
            continue;
        SBX_ALLOC_GROW(items, n + 1, alloc);
        items[n++] = item;
    }
    closedir(d);
    if (n)
        qsort(items, n, sizeof(*items), cmp_created);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        sbx_json_append(arr, items[i]);
    free(items);
    *out = arr;
    return 0;
}

static json_t *describe_entry(const char *rundir, const char *id)
{
    int dead;
    const char *ws;
    return describe(rundir, id, &dead, &ws);
}

/* Every entry of the runtime base, described; *out sorted by creation time. */
static int list_entries(struct sbx__local_client *c, char **rundir_out, json_t **out,
                        struct sbx_error *err)
{
    char *rundir = NULL;
    int rc = sbx__runtime_base(c->runtime_dir, &rundir, err);
    if (rc == 0)
        rc = scan_runtime(rundir, describe_entry, out, err);
    if (rc == 0)
        *rundir_out = rundir;
    else
        free(rundir);
    return rc;
}

static int lc_list_all(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    char *rundir = NULL;
    int rc = list_entries((struct sbx__local_client *)bc, &rundir, out, err);
    if (rc == 0) {
        sbx__local_stopped_list(*out);
        sort_created(*out);
    }
    free(rundir);
    return rc;
}

#define STALE_CGROUP_AGE_S 60 /* younger ones may belong to a create in progress */

static int lc_prune(struct sbx_client *bc, int keep_workspace, json_t **out, struct sbx_error *err)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    char *rundir = NULL;
    json_t *all = NULL, *removed = json_array(), *v;
    size_t i;
    int rc = list_entries(c, &rundir, &all, err);
    if (rc < 0) {
        json_decref(removed);
        return rc;
    }
    json_array_foreach(all, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        int dead;
        const char *ws;
        /* Described again: it may have come to life (or died) since the listing. */
        json_t *now = id ? describe(rundir, id, &dead, &ws) : NULL;
        if (now && dead) {
            struct sbx_error e = SBX_ERROR_INIT;
            char *dir = sbx_xasprintf("%s/%s", rundir, id);
            const json_t *disk = json_object_get(json_object_get(now, "state"), "disk");
            if (sbx__local_stop_and_clean(dir, id, ws, ws && !keep_workspace, disk, ws != NULL,
                                          removed, &e) < 0 &&
                rc == 0)
                rc = sbx_error_copy(err, &e);
            free(dir);
        }
        json_decref(now);
    }
    /* Empty sandbox cgroups nobody records any more (rmdir refuses one with processes). */
    struct sbx_strv stale;
    struct sbx_error e = SBX_ERROR_INIT;
    sbx_strv_init(&stale);
    if (sbx__cgroup_remove_stale("sbx-", STALE_CGROUP_AGE_S, NULL, &stale, &e) == 0)
        for (size_t k = 0; k < stale.n; k++)
            sbx_json_append(removed, json_pack("{s:n,s:s,s:s}", "sandbox", "kind", "cgroup", "path",
                                               stale.v[k]));
    sbx_strv_release(&stale);
    /* Host id range slot files nobody holds: a supervisor's release leaves its file for the
     * slot's next holder, and one killed leaves it too. Allocation takes them again anyway;
     * this removes the clutter. */
    unsigned slots = 0;
    if (geteuid() == 0 && sbx__idrange_prune(NULL, &slots, &e) == 0)
        for (unsigned k = 0; k < slots; k++)
            sbx_json_append(removed, json_pack("{s:n,s:s,s:s}", "sandbox", "kind", "id_range_slot",
                                               "path", SBX__IDRANGE_DIR));
    json_decref(all);
    free(rundir);
    if (rc == 0 && out)
        *out = removed;
    else
        json_decref(removed);
    return rc;
}

/* The state of sandbox id when its supervisor answers, with the host ids it holds; else NULL.
 * A stopped supervisor would not answer: it is not asked (ps --all shows it). */
static json_t *live_state(const char *rundir, const char *id)
{
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    json_t *state = NULL, *req = json_pack("{s:s}", "op", "info"), *reply = NULL, *out = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    struct sbx__local_record rec;
    int stopped = 0;
    sbx__local_record_init(&rec);
    if (sbx__local_record_read(dir, id, &rec) == 0)
        sbx__local_record_alive(&rec, id, &stopped);
    sbx__local_record_release(&rec);
    if (!stopped && sbx__local_read_state(dir, id, &state, &ignored) == 0 &&
        sbx__local_check_state(state, id, &ignored) == 0 &&
        sbx__local_request(dir, id, req, &reply, NULL, 0, NULL, SBX__LOCAL_REQUEST_IDLE_MS,
                           &ignored) == 0) {
        /* Live facts come from the supervisor: the host ids it holds (root runners). */
        json_t *ids = json_object_get(reply, "host_ids");
        if (json_is_object(ids))
            sbx_json_set(state, "host_ids", json_incref(ids));
        out = state;
        state = NULL;
    }
    json_decref(state);
    json_decref(req);
    json_decref(reply);
    free(dir);
    return out;
}

static int lc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    char *rundir = NULL;
    int rc = sbx__runtime_base(c->runtime_dir, &rundir, err);
    if (rc == 0)
        rc = scan_runtime(rundir, live_state, out, err);
    if (rc == 0) {
        sbx__local_stopped_list(*out);
        sort_created(*out);
    }
    free(rundir);
    return rc;
}

static int lc_remove(struct sbx_client *bc, const char *prefix, int keep_workspace,
                     struct sbx_error *err)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    char *rundir = NULL, *id = NULL, *dir = NULL;
    json_t *state = NULL;
    int rc;
    if ((rc = sbx__runtime_base(c->runtime_dir, &rundir, err)) < 0)
        goto out;
    if ((rc = sbx__local_resolve_id(rundir, prefix, &id, err)) == -SBX_E_NOTFOUND) {
        /* A stopped sandbox is its record and the hold on its snapshot. */
        char *sdir = NULL, *sid = NULL;
        if (sbx__local_stopped_dir(0, &sdir, NULL) == 0 &&
            sbx__local_stopped_find(sdir, prefix, &sid, NULL) == 1) {
            sbx__local_stopped_forget(sdir, sid);
            sbx_error_clear(err);
            rc = 0;
        }
        free(sdir);
        free(sid);
        goto out;
    }
    if (rc < 0)
        goto out;
    dir = sbx_xasprintf("%s/%s", rundir, id);
    const char *ws = NULL;
    int owned = 0;
    if (sbx__local_read_state(dir, id, &state, NULL) == 0 &&
        sbx__local_check_state(state, id, NULL) == 0) {
        ws = json_string_value(json_object_get(state, "workspace"));
        owned = json_is_true(json_object_get(state, "workspace_owned"));
    }
    /* The host id range is freed by the host-side supervisor, which may outlive PID 1 by a
     * moment: rm returns once the range is free. The supervisor names the range in its answer
     * to the shutdown request (one stopped with SIGSTOP is not asked, and names none). */
    uint32_t first = 0;
    rc = sbx__local_stop_and_clean_ids(dir, id, ws, owned && !keep_workspace,
                                       json_object_get(state, "disk"), owned, &first, err);
    if (rc == 0 && first > 0 && !sbx__idrange_wait_free(NULL, first, id, IDRANGE_WAIT_MS))
        sbx_log(SBX_LOG_WARN, "sandbox '%s': its host id range is still held", id);
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot remove sandbox '%s'", prefix);
    json_decref(state);
    free(rundir);
    free(id);
    free(dir);
    return rc;
}

static void lc_free(struct sbx_client *bc)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    free(c->supervisor_path);
    free(c->runtime_dir);
    free(c->workspace_dir);
    for (size_t i = 0; i < c->n_grants; i++) {
        free((char *)c->grants[i].src);
        free((char *)c->grants[i].dst);
    }
    free(c->grants);
    sbx_strv_release(&c->allow);
    sbx_strv_release(&c->test_hosts);
    sbx_strv_release(&c->publish);
    free(c->port_bind);
    free(c);
}

static int lc_tied(const struct sbx_client *c)
{
    return ((const struct sbx__local_client *)c)->tied;
}

static const struct sbx_client_ops client_ops = {
        .create = lc_create,
        .attach = sbx__local_attach,
        .attach_once = sbx__local_attach_once,
        .list = lc_list,
        .remove = lc_remove,
        .list_all = lc_list_all,
        .prune = lc_prune,
        .resume = sbx__local_resume,
        .stop = sbx__local_stop,
        .start = sbx__local_start,
        .stopped_state = sbx__local_stopped_state,
        .tied = lc_tied,
        .free = lc_free,
};

int sbx__local_addr_loopback(const char *addr)
{
    unsigned char a[16];
    if (inet_pton(AF_INET, addr, a) == 1)
        return a[0] == 127;
    return inet_pton(AF_INET6, addr, a) == 1 && memcmp(a, in6addr_loopback.s6_addr, 16) == 0;
}

/* addr (an IP address) is one of this host's, and port on it is free (0: any port): try to
 * listen there, for a clear error at create. */
static int can_listen(const char *addr, int port, const char *what, struct sbx_error *err)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    socklen_t len = sizeof(*s4);
    int one = 1;
    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        len = sizeof(*s6);
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s: '%s' is not an IP address", what, addr);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = 0;
    if (fd < 0)
        return sbx_error_errno(err, errno, "%s: cannot make a socket", what);
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
        if (errno == EADDRNOTAVAIL)
            rc = sbx_error_errno(err, errno, "%s: this host has no address '%s'", what, addr);
        else if (errno == EADDRINUSE)
            rc = sbx_error_errno(err, errno, "%s: port %d on '%s' is taken", what, port, addr);
        else
            rc = sbx_error_errno(err, errno, "%s: cannot listen on '%s' port %d", what, addr, port);
    }
    close(fd);
    return rc;
}

/* The fixed forwards (-p): each parsed into its canonical form, on a host address the host has,
 * on a free port, for a sandbox with a network of its own. */
static int check_publish(const struct sbx_local_options *o, int isolated, struct sbx_strv *out,
                         struct sbx_error *err)
{
    if (o->n_publish > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d published ports",
                             SBX_LOCAL_MAX_EXPOSED_PORTS);
    if (o->n_publish && (!isolated || o->network == SBX_LOCAL_NETWORK_HOST))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "-p %s needs a sandbox with a network of its own (isolation, "
                             "network none or allow): on the host's network a service listens "
                             "on the host's ports itself",
                             o->publish[0] ? o->publish[0] : "");
    for (size_t i = 0; i < o->n_publish; i++) {
        char bind[64], canon[SBX__LOCAL_PUBLISH_TEXT_MAX], what[96];
        int hp, port;
        int rc = sbx__local_publish_parse(o->publish[i] ? o->publish[i] : "", bind, &hp, &port,
                                          canon, err);
        snprintf(what, sizeof(what), "-p %s", canon);
        for (size_t k = 0; rc == 0 && k < out->n; k++) {
            char b2[64];
            int hp2, p2;
            (void)sbx__local_publish_parse(out->v[k], b2, &hp2, &p2, NULL, NULL);
            if (p2 == port || (hp && hp2 == hp && strcmp(b2, bind) == 0))
                rc = sbx_error_set(err, SBX_E_INVAL, 0, "-p %s and -p %s: one forward per port",
                                   out->v[k], canon);
        }
        if (rc == 0)
            rc = can_listen(bind, 0, what, err);
        if (rc < 0)
            return rc;
        sbx_strv_push(out, canon);
    }
    return 0;
}

/* Network mode allow and the forwarders' address: checked here, so a bad pattern fails the
 * client, not the supervisor. *allow gets the normalized patterns. */
static int check_network_options(const struct sbx_local_options *o, int isolated,
                                 struct sbx_strv *allow, struct sbx_error *err)
{
    struct in6_addr a6;
    if (o->port_bind && inet_pton(AF_INET, o->port_bind, &a6) != 1 &&
        inet_pton(AF_INET6, o->port_bind, &a6) != 1)
        return sbx_error_set(err, SBX_E_INVAL, 0, "port bind address '%s' is not an IP address",
                             o->port_bind);
    /* An address the host does not have fails now, not at the first forward. */
    if (o->port_bind && can_listen(o->port_bind, 0, "--port-bind", err) < 0)
        return -err->code;
    if (o->network != SBX_LOCAL_NETWORK_ALLOW) {
        if (o->n_allow_domains || o->n_allow_ports)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "allowed domains and ports need network 'allow'");
        return 0;
    }
    if (!isolated)
        return sbx_error_set(err, SBX_E_INVAL, 0, "network 'allow' needs isolation, not 'none'");
    if (o->n_allow_domains == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "network 'allow' needs at least one domain");
    if (o->n_allow_domains > SBX_LOCAL_MAX_ALLOW_DOMAINS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d allowed domains",
                             SBX_LOCAL_MAX_ALLOW_DOMAINS);
    for (size_t i = 0; i < o->n_allow_domains; i++) {
        char *p = NULL;
        int rc = sbx__proxy_pattern_normalize(o->allow_domains[i] ? o->allow_domains[i] : "", &p,
                                              err);
        if (rc < 0)
            return rc;
        sbx_strv_push_take(allow, p);
    }
    if (o->n_allow_ports > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d allowed ports",
                             SBX_LOCAL_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < o->n_allow_ports; i++)
        if (o->allow_ports[i] < 1 || o->allow_ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "allowed port %d is not in 1..65535",
                                 o->allow_ports[i]);
    return 0;
}

int sbx__local_client_new(const void *opts, struct sbx_client **out, struct sbx_error *err)
{
    return sbx__local_client_new_test(opts, NULL, out, err);
}

int sbx__local_client_new_test(const struct sbx_local_options *o, const struct sbx__local_test *t,
                               struct sbx_client **out, struct sbx_error *err)
{
    struct sbx_local_options dflt = {0};
    struct sbx__local_test none = {0};
    if (!o)
        o = &dflt;
    if (!t)
        t = &none;
    if (o->isolation != SBX_LOCAL_ISOLATION_DEFAULT &&
        o->isolation != SBX_LOCAL_ISOLATION_NAMESPACES && o->isolation != SBX_LOCAL_ISOLATION_NONE)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown isolation mode %d", (int)o->isolation);
    if (o->network != SBX_LOCAL_NETWORK_DEFAULT && o->network != SBX_LOCAL_NETWORK_HOST &&
        o->network != SBX_LOCAL_NETWORK_NONE && o->network != SBX_LOCAL_NETWORK_ALLOW)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown network mode %d", (int)o->network);
    int isolated = o->isolation != SBX_LOCAL_ISOLATION_NONE;
    const struct sbx_local_limits *l = &o->limits;
    if (!isolated &&
        (l->memory_bytes || l->pids || l->cpu_millis || l->file_size_bytes || l->open_files))
        return sbx_error_set(err, SBX_E_INVAL, 0, "resource limits need isolation, not 'none'");
    if (!isolated && o->network == SBX_LOCAL_NETWORK_NONE)
        return sbx_error_set(err, SBX_E_INVAL, 0, "network 'none' needs isolation, not 'none'");
    if (!isolated && o->n_grants)
        return sbx_error_set(err, SBX_E_INVAL, 0, "path grants need isolation, not 'none'");
    if (o->n_grants > SBX_LOCAL_MAX_GRANTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d path grants",
                             SBX_LOCAL_MAX_GRANTS);
    for (size_t i = 0; i < o->n_grants; i++)
        if (!o->grants[i].src || o->grants[i].src[0] != '/' ||
            (o->grants[i].dst && o->grants[i].dst[0] != '/'))
            return sbx_error_set(err, SBX_E_INVAL, 0, "path grant '%s' must be an absolute path",
                                 o->grants[i].src ? o->grants[i].src : "");
    if (o->n_exposed_ports > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d exposed ports",
                             SBX_LOCAL_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        if (o->exposed_ports[i] < 1 || o->exposed_ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "exposed port %d is not in 1..65535",
                                 o->exposed_ports[i]);
    if (o->disk_bytes && o->disk_bytes != SBX_LOCAL_LIMIT_NONE &&
        (o->disk_bytes < SBX_LOCAL_DISK_MIN || o->disk_bytes > SBX_LOCAL_DISK_MAX))
        return sbx_error_set(
                err, SBX_E_INVAL, 0, "disk limit %llu bytes is outside %llu MiB .. %llu TiB",
                (unsigned long long)o->disk_bytes, (unsigned long long)(SBX_LOCAL_DISK_MIN >> 20),
                (unsigned long long)(SBX_LOCAL_DISK_MAX >> 40));
    struct sbx_strv allow;
    sbx_strv_init(&allow);
    struct sbx_strv publish;
    sbx_strv_init(&publish);
    int rc = check_network_options(o, isolated, &allow, err);
    if (rc == 0)
        rc = check_publish(o, isolated, &publish, err);
    if (rc < 0) {
        sbx_strv_release(&allow);
        sbx_strv_release(&publish);
        return rc;
    }
    struct sbx__local_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "local";
    c->supervisor_path = o->supervisor_path ? sbx_xstrdup(o->supervisor_path) : NULL;
    c->runtime_dir = o->runtime_dir ? sbx_xstrdup(o->runtime_dir) : NULL;
    c->workspace_dir = o->workspace_dir ? sbx_xstrdup(o->workspace_dir) : NULL;
    c->isolated = isolated;
    c->network = o->network;
    c->limits = o->limits;
    c->n_grants = o->n_grants;
    c->grants = o->n_grants ? sbx_xcalloc(o->n_grants, sizeof(*c->grants)) : NULL;
    for (size_t i = 0; i < o->n_grants; i++) {
        c->grants[i].src = sbx_xstrdup(o->grants[i].src);
        c->grants[i].dst = o->grants[i].dst ? sbx_xstrdup(o->grants[i].dst) : NULL;
        c->grants[i].writable = o->grants[i].writable;
        c->grants[i].dangerous = o->grants[i].dangerous;
    }
    c->n_ports = o->n_exposed_ports;
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        c->ports[i] = o->exposed_ports[i];
    c->start_timeout_ms = o->start_timeout_ms > 0 ? o->start_timeout_ms : START_TIMEOUT_MS;
    c->request_idle_ms = o->request_idle_ms > 0 ? o->request_idle_ms : SBX__LOCAL_REQUEST_IDLE_MS;
    c->test_delay_ms = t->request_delay_ms > 0 ? t->request_delay_ms : 0;
    c->allow = allow;
    c->port_bind = o->port_bind ? sbx_xstrdup(o->port_bind) : NULL;
    c->publish = publish;
    /* A published port is an exposed one when the client names those. */
    for (size_t i = 0; c->n_ports && i < publish.n; i++) {
        char bind[64];
        int hp, port;
        size_t k = 0;
        (void)sbx__local_publish_parse(publish.v[i], bind, &hp, &port, NULL, NULL);
        while (k < c->n_ports && c->ports[k] != port)
            k++;
        if (k == c->n_ports && c->n_ports < SBX_LOCAL_MAX_EXPOSED_PORTS)
            c->ports[c->n_ports++] = port;
    }
    c->n_allow_ports = o->n_allow_ports;
    for (size_t i = 0; i < o->n_allow_ports; i++)
        c->allow_ports[i] = o->allow_ports[i];
    sbx_strv_init(&c->test_hosts);
    sbx_strv_pushv(&c->test_hosts, t->proxy_hosts);
    c->tied = o->tied != 0;
    c->allow_host_uid = o->allow_host_uid != 0;
    c->dangerous_workspace = o->allow_dangerous_workspace != 0;
    c->disk_bytes = o->disk_bytes ? o->disk_bytes : SBX_LOCAL_DISK_DEFAULT;
    c->disk_explicit = o->disk_bytes != 0 && o->disk_bytes != SBX_LOCAL_LIMIT_NONE;
    *out = &c->base;
    return 0;
}
