/* The local provider, client side: a sandbox brought back from a session state. Resume (a state
 * from anywhere, checked against this client) and start (the user's own stopped record, whose
 * options stand as recorded) take one path, bring_back; they differ in where the state comes
 * from, whether it is trusted, and which id the sandbox takes again. */
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/local/client/client.h"
#include "providers/local/isolate/isolate.h"
#include "sandbox/host/host.h"
#include "sandbox/manifest/internal.h"
#include "sandbox/session/internal.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/secret.h"

static enum sbx_local_network network_of(const char *name)
{
    return strcmp(name, "full") == 0    ? SBX_LOCAL_NETWORK_HOST
           : strcmp(name, "allow") == 0 ? SBX_LOCAL_NETWORK_ALLOW
                                        : SBX_LOCAL_NETWORK_NONE;
}

static uint64_t amount_of(const json_t *v)
{
    if (json_is_string(v))
        return SBX_LOCAL_LIMIT_NONE;
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

static int same_grant(const struct sbx_local_grant *g, const json_t *j)
{
    const char *src = json_string_value(json_object_get(j, "src"));
    const char *dst = json_string_value(json_object_get(j, "dst"));
    return src && strcmp(g->src, src) == 0 &&
           (g->dst && dst ? strcmp(g->dst, dst) == 0 : !g->dst == !dst) &&
           !!g->writable == json_is_true(json_object_get(j, "writable"));
}

/* 1 when path lies beneath (or is) base; both absolute and normalised. */
static int host_within(const char *path, const char *base)
{
    size_t n = strlen(base);
    if (n == 1)
        return 1;
    return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* A state file is no opt-in: what weakens the sandbox (no isolation, the host's network, a
 * network allow list) is rebuilt only when the resuming client itself asks for as much. */
static int check_opt_in(const struct sbx__local_client *c, const json_t *o, struct sbx_error *err)
{
    const char *iso = json_string_value(json_object_get(o, "isolation"));
    const char *net = json_string_value(json_object_get(o, "network"));
    const json_t *v;
    size_t i;
    if (strcmp(iso, "none") == 0 && c->isolated)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox ran without isolation; a session state cannot ask for "
                             "that by itself: resume with --isolation none to accept it");
    if (strcmp(iso, "none") == 0)
        return 0;
    if (strcmp(net, "full") == 0 && c->network != SBX_LOCAL_NETWORK_HOST)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox had the host's network; a session state cannot ask for "
                             "that by itself: resume with --network full to accept it");
    if (strcmp(net, "allow") != 0)
        return 0;
    if (c->network == SBX_LOCAL_NETWORK_HOST)
        return 0;
    json_array_foreach(json_object_get(o, "allow_domains"), i, v)
    {
        if (c->network != SBX_LOCAL_NETWORK_ALLOW ||
            sbx_strv_find(&c->allow, json_string_value(v)) < 0)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox's network allowed '%s'; a session state cannot allow "
                                 "a domain by itself: resume with --network allow:%s (and the "
                                 "others it allowed) to accept it",
                                 json_string_value(v), json_string_value(v));
    }
    json_array_foreach(json_object_get(o, "allow_ports"), i, v)
    {
        int port = (int)json_integer_value(v),
            found = c->n_allow_ports == 0 && (port == 80 || port == 443);
        for (size_t k = 0; k < c->n_allow_ports && !found; k++)
            found = c->allow_ports[k] == port;
        if (!found)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox's network allowed port %d; resume with "
                                 "--allow-port %d to accept it",
                                 port, port);
    }
    return 0;
}

/* The numbered limits of a state and of a client, in the order of limit_names. */
enum { N_LIMITS = 5 };
static const char *const limit_names[N_LIMITS] = {"memory", "pids", "cpu_millis", "file_size",
                                                  "open_files"};
/* How the command line asks for each (file size and open files: only the C API can). */
static const char *const limit_flags[N_LIMITS] = {"--memory", "--pids", "--cpus", NULL, NULL};

/* What a limit amounts to once the default is filled in (0: the default; "none" in a state and
 * SBX_LOCAL_LIMIT_NONE: unlimited, the widest). */
static uint64_t limit_in_force(size_t k, uint64_t v)
{
    const uint64_t defaults[N_LIMITS] = {(uint64_t)2 << 30, SBX__ISOLATION_DEFAULT_PIDS,
                                         sbx__isolation_default_cpu_millis(), (uint64_t)16 << 30,
                                         4096};
    return v ? v : defaults[k];
}

static void describe_amount(size_t k, uint64_t v, char *out, size_t n)
{
    if (v == SBX_LOCAL_LIMIT_NONE)
        snprintf(out, n, "none");
    else if (k == 2)
        snprintf(out, n, "%g", (double)v / 1000);
    else
        snprintf(out, n, "%llu", (unsigned long long)v);
}

/* A state may narrow the limits the resuming client gives, never widen them: each limit (and
 * the workspace's disk size) of the state is at most what the client would give a sandbox it
 * creates, else the same flag the create needed must be given again. Untrusted states only;
 * without isolation there are no limits but the disk's. */
static int check_limits(const struct sbx__local_client *c, const json_t *o, int isolated,
                        struct sbx_error *err)
{
    const json_t *lim = json_object_get(o, "limits");
    const uint64_t mine[N_LIMITS] = {c->limits.memory_bytes, c->limits.pids, c->limits.cpu_millis,
                                     c->limits.file_size_bytes, c->limits.open_files};
    char want[32];
    for (size_t k = 0; isolated && k < N_LIMITS; k++) {
        uint64_t theirs = limit_in_force(k, amount_of(json_object_get(lim, limit_names[k])));
        if (theirs <= limit_in_force(k, mine[k]))
            continue;
        describe_amount(k, theirs, want, sizeof(want));
        if (theirs == SBX_LOCAL_LIMIT_NONE)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox had no %s limit; a session state cannot lift a limit "
                                 "by itself: resume with %s none to accept it",
                                 limit_names[k], limit_flags[k] ? limit_flags[k] : "the limit");
        if (limit_flags[k])
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox's %s limit was %s, above what this command gives; "
                                 "a session state cannot raise a limit by itself: resume with "
                                 "%s %s to accept it",
                                 limit_names[k], want, limit_flags[k], want);
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox's %s limit was %s, above what this client gives; a "
                             "session state cannot raise a limit by itself: give the client that "
                             "limit to accept it",
                             limit_names[k], want);
    }
    const json_t *disk = json_object_get(o, "disk");
    uint64_t theirs = json_is_null(disk) || !disk ? SBX_LOCAL_DISK_DEFAULT : amount_of(disk);
    if (theirs > c->disk_bytes) {
        if (theirs == SBX_LOCAL_LIMIT_NONE)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox's workspace had no size limit; a session state "
                                 "cannot lift it by itself: resume with --disk none to accept it");
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox's workspace size limit was %llu bytes, above what "
                             "this command gives; resume with --disk %llu to accept it",
                             (unsigned long long)theirs, (unsigned long long)theirs);
    }
    return 0;
}

/* Where the host reaches the sandbox: a forward of the default address serves the owner only,
 * one on an address given with --port-bind every local user (and beyond loopback, whoever
 * reaches the address). A state's address needs --port-bind on the resuming command too (the
 * same one, or any when the state's is loopback); only the ports the client exposes (when it
 * limits them) may be exposed by the state. */
static int check_ports(const struct sbx__local_client *c, const json_t *state, const json_t *o,
                       struct sbx_error *err)
{
    const char *bind = json_string_value(json_object_get(o, "port_bind"));
    const json_t *v;
    size_t i;
    if (bind &&
        (!c->port_bind || (strcmp(c->port_bind, bind) != 0 && !sbx__local_addr_loopback(bind))))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox's port forwards listened on '%s' for %s; a session "
                             "state cannot open them by itself: resume with --port-bind %s to "
                             "accept it",
                             bind,
                             sbx__local_addr_loopback(bind) ? "every local user"
                                                            : "whoever reaches that address",
                             bind);
    if (c->n_ports == 0)
        return 0;
    const json_t *ports = json_object_get(state, "exposed_ports");
    if (json_array_size(ports) == 0)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the sandbox exposed every port; this command exposes only some "
                             "(--port): resume without --port to accept it");
    json_array_foreach(ports, i, v)
    {
        int port = (int)json_integer_value(v), found = 0;
        for (size_t k = 0; k < c->n_ports && !found; k++)
            found = c->ports[k] == port;
        if (!found)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox exposed port %d; resume with --port %d to accept it",
                                 port, port);
    }
    return 0;
}

/* Copy the ephemeral environment variables of the trusted manifest from into to: a session
 * state never holds their values. */
static int ephemeral_env(const struct sbx_manifest *from, struct sbx_manifest *to,
                         struct sbx_error *err)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sbx_manifest_env_count(from); i++) {
        const struct sbx_manifest_env *v = sbx_manifest_env_at(from, i);
        if (!v->ephemeral)
            continue;
        int flags = SBX_MANIFEST_ENV_EPHEMERAL;
        const char *value = v->value;
        if (v->host_env) {
            flags |= SBX_MANIFEST_ENV_HOST;
            value = v->host_env;
        } else if (v->secret) {
            flags |= SBX_MANIFEST_ENV_SECRET;
            value = sbx_secret_reveal(v->secret, NULL);
        }
        rc = sbx_manifest_set_env(to, v->name, value, flags, err);
    }
    if (rc < 0)
        sbx_error_prefix(err, "the ephemeral environment of the given manifest");
    return rc;
}

/* What a rebuild hands sbx__local_client_new: the options and the arrays they point into. */
struct rebuild_options {
    struct sbx_local_options lo;
    struct sbx__local_test test;
    struct sbx_local_grant grants[SBX_LOCAL_MAX_GRANTS];
    const char *domains[SBX_LOCAL_MAX_ALLOW_DOMAINS];
    int aports[SBX_LOCAL_MAX_EXPOSED_PORTS], eports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    const char *publish[SBX_LOCAL_MAX_EXPOSED_PORTS];
};

/* Host paths are trusted configuration: a state file from anywhere must not open the host to
 * the sandbox. Trusted (the user's own stopped record), the recorded grants stand; else the
 * caller grants again what the sandbox had, and the client's grants are used. */
static int grants_from_state(const struct sbx__local_client *c, const json_t *ga, int trusted,
                             struct rebuild_options *r, struct sbx_error *err)
{
    const json_t *v;
    size_t i;
    if (trusted) {
        json_array_foreach(ga, i, v)
        {
            r->grants[i] = (struct sbx_local_grant){
                    .src = json_string_value(json_object_get(v, "src")),
                    .dst = json_string_value(json_object_get(v, "dst")),
                    .writable = json_is_true(json_object_get(v, "writable")),
                    .dangerous = json_is_true(json_object_get(v, "dangerous"))};
        }
        r->lo.grants = r->grants;
        r->lo.n_grants = json_array_size(ga);
        return 0;
    }
    json_array_foreach(ga, i, v)
    {
        size_t k = 0;
        while (k < c->n_grants && !same_grant(&c->grants[k], v))
            k++;
        if (k == c->n_grants) {
            int w = json_is_true(json_object_get(v, "writable"));
            const char *src = json_string_value(json_object_get(v, "src"));
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "the sandbox had %s grant of host path '%s'; a session state "
                                 "never grants host paths: give it again (--%s %s) to resume",
                                 w ? "a writable" : "a read-only", src, w ? "rw" : "ro", src);
        }
    }
    r->lo.grants = c->grants;
    r->lo.n_grants = c->n_grants;
    return 0;
}

/* The state's options with this client's own places, programs and tie. Untrusted, what weakens
 * the sandbox must be asked for by this client too (check_opt_in). */
static int options_from_state(const struct sbx__local_client *c, const json_t *state, int trusted,
                              struct rebuild_options *r, struct sbx_error *err)
{
    const json_t *o = json_object_get(state, "options"), *v;
    struct sbx_local_options *lo = &r->lo;
    size_t i;
    int rc;
    lo->supervisor_path = c->supervisor_path;
    lo->runtime_dir = c->runtime_dir;
    lo->workspace_dir = c->workspace_dir;
    lo->start_timeout_ms = c->start_timeout_ms;
    lo->tied = c->tied;
    r->test.proxy_hosts = c->test_hosts.n ? (const char *const *)c->test_hosts.v : NULL;
    r->test.request_delay_ms = c->test_delay_ms;
    lo->isolation = strcmp(json_string_value(json_object_get(o, "isolation")), "none") == 0
                            ? SBX_LOCAL_ISOLATION_NONE
                            : SBX_LOCAL_ISOLATION_NAMESPACES;
    lo->network = network_of(json_string_value(json_object_get(o, "network")));
    if (lo->isolation == SBX_LOCAL_ISOLATION_NONE)
        lo->network = SBX_LOCAL_NETWORK_DEFAULT;
    if (!trusted &&
        ((rc = check_opt_in(c, o, err)) < 0 || (rc = check_ports(c, state, o, err)) < 0 ||
         (rc = check_limits(c, o, lo->isolation != SBX_LOCAL_ISOLATION_NONE, err)) < 0))
        return rc;
    const json_t *lim = json_object_get(o, "limits");
    lo->limits.memory_bytes = amount_of(json_object_get(lim, "memory"));
    lo->limits.pids = amount_of(json_object_get(lim, "pids"));
    lo->limits.cpu_millis = amount_of(json_object_get(lim, "cpu_millis"));
    lo->limits.file_size_bytes = amount_of(json_object_get(lim, "file_size"));
    lo->limits.open_files = amount_of(json_object_get(lim, "open_files"));
    lo->disk_bytes = amount_of(json_object_get(o, "disk"));
    json_array_foreach(json_object_get(o, "allow_domains"), i, v) r->domains[i] =
            json_string_value(v);
    lo->allow_domains = r->domains;
    lo->n_allow_domains = json_array_size(json_object_get(o, "allow_domains"));
    json_array_foreach(json_object_get(o, "allow_ports"), i, v) r->aports[i] =
            (int)json_integer_value(v);
    lo->allow_ports = r->aports;
    lo->n_allow_ports = json_array_size(json_object_get(o, "allow_ports"));
    lo->port_bind = json_string_value(json_object_get(o, "port_bind"));
    /* Fixed host ports are host configuration: the user's own stopped record keeps them; from
     * any other state only what this client publishes itself. */
    if (trusted) {
        json_array_foreach(json_object_get(o, "publish"), i, v)
        {
            if (i < SBX_LOCAL_MAX_EXPOSED_PORTS)
                r->publish[lo->n_publish++] = json_string_value(v);
        }
    } else {
        for (i = 0; i < c->publish.n; i++)
            r->publish[lo->n_publish++] = c->publish.v[i];
    }
    lo->publish = r->publish;
    json_array_foreach(json_object_get(state, "exposed_ports"), i, v) r->eports[i] =
            (int)json_integer_value(v);
    lo->exposed_ports = r->eports;
    lo->n_exposed_ports = json_array_size(json_object_get(state, "exposed_ports"));
    return grants_from_state(c, json_object_get(o, "grants"), trusted, r, err);
}

/* The directory a state's manifest is as trusted as a manifest file in: ro->base_dir, else the
 * current directory; resolved (*out: caller frees). */
static int base_dir(const struct sbx_resume_opts *ro, char **out, struct sbx_error *err)
{
    char cwd[PATH_MAX];
    if (!ro->base_dir && !getcwd(cwd, sizeof(cwd)))
        return sbx_error_errno(err, errno, "cannot find the current directory");
    *out = realpath(ro->base_dir ? ro->base_dir : cwd, NULL);
    if (!*out)
        return sbx_error_errno(err, errno, "base directory '%s'",
                               ro->base_dir ? ro->base_dir : cwd);
    return 0;
}

/* The ephemeral entries of m (those materialised again) take host sources only from beneath
 * base. */
static int check_ephemeral_sources(const struct sbx_manifest *m, const char *base,
                                   struct sbx_error *err)
{
    struct sbx_strv eph;
    int rc = 0;
    sbx_strv_init(&eph);
    sbx__manifest_ephemeral_paths(m, &eph);
    for (size_t k = 0; k < sbx_manifest_entry_count(m) && rc == 0; k++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, k);
        int covered = 0;
        for (size_t j = 0; j < eph.n && !covered; j++) {
            size_t n = strlen(eph.v[j]);
            covered =
                    strncmp(e->path, eph.v[j], n) == 0 && (e->path[n] == '\0' || e->path[n] == '/');
        }
        if (covered && e->src_path && !host_within(e->src_path, base))
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "session state manifest: entry '%s': local source '%s' is "
                               "outside the base directory '%s'",
                               e->path, e->src, base);
        /* A repository on the host is a local source too: git reads it as this user. */
        if (rc == 0 && covered && e->type == SBX_ENTRY_GIT_REPO &&
            (rc = sbx__manifest_check_git_local(base, e->url, e->repo, err)) < 0)
            sbx_error_prefix(err, "session state manifest: entry '%s'", e->path);
    }
    sbx_strv_release(&eph);
    return rc;
}

/* The state's manifest (NULL without one and without ro->manifest), with what a state never
 * holds taken from the trusted ro->manifest: the ephemeral environment, the mount secrets.
 * *out: caller frees. */
static int state_manifest(const json_t *state, const struct sbx_resume_opts *ro, const char *base,
                          struct sbx_manifest **out, struct sbx_error *err)
{
    const json_t *mj = json_object_get(state, "manifest");
    struct sbx_manifest *m = NULL;
    int rc = 0;
    if (json_is_object(mj)) {
        struct sbx_manifest_load_opts mo = {.base_dir = base,
                                            .flags = SBX_MANIFEST_NO_HOST_CHECKS |
                                                     SBX_MANIFEST_CONTENT_DIGESTS};
        if ((rc = sbx_manifest_from_json(mj, &mo, &m, err)) < 0) {
            sbx_error_prefix(err, "session state manifest");
            return rc;
        }
        rc = check_ephemeral_sources(m, base, err);
    }
    if (rc == 0 && ro->manifest &&
        (rc = ephemeral_env(ro->manifest, m ? m : (m = sbx_manifest_new()), err)) == 0)
        sbx_manifest_copy_mount_secrets(ro->manifest, m);
    if (rc < 0)
        sbx_manifest_free(m);
    else
        *out = m;
    return rc;
}

/* A new sandbox from state: its options (options_from_state), its manifest, its snapshot's
 * content. id: the id to use, NULL for a fresh one. */
static int rebuild(struct sbx__local_client *c, const json_t *state,
                   const struct sbx_resume_opts *ro, int trusted, const char *id,
                   struct sbx_session **out, struct sbx_error *err)
{
    struct rebuild_options r = {0};
    struct sbx_client *tmp = NULL;
    struct sbx_manifest *m = NULL;
    char *base = NULL;
    int rc = options_from_state(c, state, trusted, &r, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx__local_client_new_test(&r.lo, &r.test, &tmp, err)) < 0) {
        sbx_error_prefix(err, "session state options");
        return rc;
    }
    /* The state's manifest is as trusted as a manifest file: its ephemeral host sources are
     * materialised again only from beneath the base directory. */
    if ((rc = base_dir(ro, &base, err)) == 0 &&
        (rc = state_manifest(state, ro, base, &m, err)) == 0) {
        struct sbx_create_spec spec = {
                .manifest = m,
                .base_dir = base,
                .pass_secrets = ro->pass_secrets,
                .snapshot = json_string_value(json_object_get(state, "snapshot")),
                .id = id,
                .progress = ro->progress,
                .progress_data = ro->progress_data};
        rc = sbx__local_create((struct sbx__local_client *)tmp, &spec, 1, out, err);
    }
    sbx_manifest_free(m);
    sbx_client_free(tmp);
    free(base);
    return rc;
}

/* Resume and start, one path: the sandbox built again from state (trusted: the user's own
 * stopped record) under id (NULL: a fresh one). Once it is back under its id, a stopped record
 * of that id goes, with the hold on its snapshot. */
static int bring_back(struct sbx__local_client *c, const json_t *state, int trusted, const char *id,
                      const struct sbx_resume_opts *ro, struct sbx_session **out,
                      struct sbx_error *err)
{
    char *sdir = NULL;
    int rc = rebuild(c, state, ro, trusted, id, out, err);
    if (rc == 0 && id && sbx__local_stopped_exists(id) &&
        sbx__local_stopped_dir(0, &sdir, NULL) == 0)
        sbx__local_stopped_forget(sdir, id);
    free(sdir);
    return rc;
}

/* *present: sandbox id has a runtime directory (live, or what a dead one left). */
static int runtime_present(const struct sbx__local_client *c, const char *id, int *present,
                           struct sbx_error *err)
{
    char *rundir = NULL;
    struct stat st;
    int rc = sbx__runtime_base(c->runtime_dir, &rundir, err);
    if (rc < 0)
        return rc;
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    *present = lstat(dir, &st) == 0;
    free(dir);
    free(rundir);
    return 0;
}

int sbx__local_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *ro,
                      struct sbx_session **out, struct sbx_error *err)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    int present = 0;
    int rc = runtime_present(c, id, &present, err);
    if (rc < 0)
        return rc;
    if (present) {
        struct sbx_error aerr = SBX_ERROR_INIT;
        rc = sbx__local_attach(bc, id, out, &aerr);
        if (rc == 0 || rc != -SBX_E_SANDBOX) {
            if (rc < 0)
                sbx_error_copy(err, &aerr);
            goto out;
        }
    }
    if (!json_is_string(json_object_get(state, "snapshot")))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "sandbox '%s' is gone and its state has no snapshot", id);
    else /* What a dead one left keeps the id: the rebuild then gets a fresh one. */
        rc = bring_back(c, state, 0, present ? NULL : id, ro, out, err);
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot resume sandbox '%s'", id);
    return rc;
}

int sbx__local_start(struct sbx_client *bc, const char *prefix, const struct sbx_resume_opts *ro,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    char *sdir = NULL, *id = NULL;
    json_t *rec = NULL;
    int present = 0;
    int rc = sbx__local_stopped_dir(0, &sdir, err);
    if (rc == 0 && (rc = sbx__local_stopped_find(sdir, prefix, &id, err)) == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no stopped sandbox '%s'", prefix);
    enum sbx__half what = SBX__HALF_NONE;
    /* A stop or start that did not finish: finished first. A sandbox that still runs is the
     * one to start (its record goes); what a dead one left is removed. */
    if (rc < 0 || (rc = sbx__local_finish_half(bc, id, &what, err)) < 0 ||
        (rc = runtime_present(c, id, &present, err)) < 0)
        goto out;
    if (what == SBX__HALF_LIVE)
        rc = sbx__local_attach(bc, id, out, err);
    else if (present)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' still has a runtime directory", id);
    else if ((rc = sbx__local_stopped_read(sdir, id, &rec, err)) == 0)
        rc = bring_back(c, rec, 1, id, ro, out, err);
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot start sandbox '%s'", prefix);
    json_decref(rec);
    free(sdir);
    free(id);
    return rc;
}
