/* The supervisor's configuration and its JSON (config.h). One table of names per object, one
 * typed reader per kind of value: every message names the field by its full path
 * ("sandbox.grants[2].src"). */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/local/config.h"
#include "providers/local/isolate/isolate.h"
#include "sbx/common.h"
#include "sbx/json.h"
#include "sbx/session.h"

/* What the parser lets through, the isolation and the exec code accept. */
_Static_assert(SBX__LOCAL_CONFIG_MAX_ENV == SBX_EXEC_MAX_ENV, "env bound");
_Static_assert(SBX__LOCAL_CONFIG_MAX_USERS == SBX__ISOLATION_MAX_USERS, "users bound");
_Static_assert(SBX__LOCAL_CONFIG_MAX_GROUPS == SBX__ISOLATION_MAX_GROUPS, "groups bound");
_Static_assert(SBX__LOCAL_CONFIG_MAX_GRANTS == SBX__ISOLATION_MAX_GRANTS, "grants bound");
_Static_assert(SBX__LOCAL_CONFIG_MAX_GRANTS == SBX_LOCAL_MAX_GRANTS, "grants bound");
_Static_assert(SBX_LOCAL_LIMIT_NONE == SBX__LIMIT_NONE, "no limit");

#define NAME_MAX_LEN 96

static const char *const top_keys[] = {
        "id",    "dir",           "workspace", "workspace_owned", "root", "isolation", "env",
        "ports", "test_delay_ms", "tied",      "sandbox",         NULL,
};
static const char *const sandbox_keys[] = {
        "net",       "host_home",   "users",  "groups",
        "grants",    "limits",      "allow",  "test_proxy_hosts",
        "port_bind", "allow_ports", "mounts", "allow_host_uid",
        "publish",   NULL,
};
static const char *const group_keys[] = {"name", "members", NULL};
static const char *const grant_keys[] = {"src", "dst", "rw", "dangerous", NULL};
static const char *const mount_keys[] = {"entry", "dst", "remote", "check", "config", "rw", NULL};
static const char *const limit_keys[] = {"memory",    "pids",       "cpu_millis",
                                         "file_size", "open_files", NULL};
static const char *const net_names[] = {
        [SBX__LOCAL_CONFIG_NET_NONE] = "none",
        [SBX__LOCAL_CONFIG_NET_ALLOW] = "allow",
        [SBX__LOCAL_CONFIG_NET_FULL] = "full",
};

void sbx__local_config_init(struct sbx__local_config *c)
{
    memset(c, 0, sizeof(*c));
    sbx_strv_init(&c->env);
    sbx_strv_init(&c->users);
    sbx_strv_init(&c->allow);
    sbx_strv_init(&c->test_hosts);
    sbx_strv_init(&c->publish);
}

void sbx__local_config_release(struct sbx__local_config *c)
{
    for (size_t i = 0; i < c->env.n; i++)
        explicit_bzero(c->env.v[i], strlen(c->env.v[i]));
    sbx_strv_release(&c->env);
    sbx_strv_release(&c->users);
    sbx_strv_release(&c->allow);
    sbx_strv_release(&c->test_hosts);
    for (size_t i = 0; i < c->n_groups; i++) {
        free(c->groups[i].name);
        sbx_strv_release(&c->groups[i].members);
    }
    free(c->groups);
    for (size_t i = 0; i < c->n_grants; i++) {
        free(c->grants[i].src);
        free(c->grants[i].dst);
    }
    free(c->grants);
    for (size_t i = 0; i < c->n_mounts; i++) {
        struct sbx__local_config_mount *m = &c->mounts[i];
        if (m->config)
            explicit_bzero(m->config, strlen(m->config));
        free(m->entry);
        free(m->dst);
        free(m->remote);
        free(m->check);
        free(m->config);
    }
    free(c->mounts);
    free(c->id);
    free(c->dir);
    free(c->workspace);
    free(c->root);
    free(c->host_home);
    free(c->port_bind);
    sbx_strv_release(&c->publish);
    sbx__local_config_init(c);
}

int sbx__local_publish_parse(const char *text, char bind[64], int *host_port, int *port,
                             char canon[SBX__LOCAL_PUBLISH_TEXT_MAX], struct sbx_error *err)
{
    const char *p = text, *addr_end = NULL;
    char num[2][8];
    int v6 = 0, vals[2] = {0, 0}, k = 0;
    snprintf(bind, 64, "127.0.0.1");
    /* The address: "[v6]:" or "a.b.c.d:" before the last two numbers. */
    if (*p == '[') {
        addr_end = strchr(p, ']');
        if (!addr_end || addr_end[1] != ':' || addr_end - p - 1 >= 64)
            goto bad;
        snprintf(bind, 64, "%.*s", (int)(addr_end - p - 1), p + 1);
        v6 = 1;
        p = addr_end + 2;
    } else {
        const char *last = strrchr(p, ':');
        const char *first = strchr(p, ':');
        if (first && last && first != last) {
            if (first - p >= 64)
                goto bad;
            snprintf(bind, 64, "%.*s", (int)(first - p), p);
            p = first + 1;
        }
    }
    /* PORT alone: any free host port, as docker's -p PORT. */
    k = addr_end == NULL && !strchr(p, ':') ? 1 : 0;
    for (; k < 2; k++) {
        size_t n = strspn(p, "0123456789");
        /* ADDR::PORT: any free host port on ADDR (docker's form). */
        if (k == 0 && n == 0 && *p == ':' && p != text) {
            p++;
            continue;
        }
        if (n == 0 || n > 5 || (k == 0 && p[n] != ':') || (k == 1 && p[n] != '\0'))
            goto bad;
        snprintf(num[k], sizeof(num[k]), "%.*s", (int)n, p);
        vals[k] = (int)strtol(num[k], NULL, 10);
        if (vals[k] < 1 || vals[k] > 65535)
            goto bad;
        p += n + 1;
    }
    unsigned char a[16];
    if (inet_pton(v6 ? AF_INET6 : AF_INET, bind, a) != 1)
        return sbx_error_set(err, SBX_E_INVAL, 0, "-p '%s': '%s' is not an IP%s address", text,
                             bind, v6 ? "v6" : "v4 (or [IPv6])");
    *host_port = vals[0];
    *port = vals[1];
    if (canon) {
        char host[8] = "";
        if (vals[0])
            snprintf(host, sizeof(host), "%d", vals[0]);
        snprintf(canon, SBX__LOCAL_PUBLISH_TEXT_MAX, "%s%s%s:%s:%d", v6 ? "[" : "", bind,
                 v6 ? "]" : "", host, vals[1]);
    }
    return 0;
bad:
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "-p wants PORT, HOST:PORT or ADDR:HOST:PORT (ports 1..65535), not '%s'",
                         text);
}

static int check_publish(const struct sbx_strv *pub, struct sbx_error *err)
{
    char bind[64];
    int hp, p;
    for (size_t i = 0; i < pub->n; i++) {
        int rc = sbx__local_publish_parse(pub->v[i], bind, &hp, &p, NULL, err);
        if (rc < 0) {
            sbx_error_prefix(err, "sandbox.publish[%zu]", i);
            return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Checks shared by both directions */

static int bad(struct sbx_error *err, const char *name, const char *what)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' %s", name, what);
}

static int check_id(const char *id, struct sbx_error *err)
{
    size_t n = id ? strlen(id) : 0;
    if (n != SBX__LOCAL_CONFIG_ID_LEN)
        return bad(err, "id", "must be a sandbox id (16 hex digits)");
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return bad(err, "id", "must be a sandbox id (16 hex digits)");
    return 0;
}

static int check_path(const char *name, const char *p, int required, struct sbx_error *err)
{
    if (!p)
        return required ? bad(err, name, "is missing") : 0;
    if (p[0] != '/')
        return bad(err, name, "must be an absolute path");
    if (strlen(p) > SBX__LOCAL_CONFIG_MAX_PATH)
        return bad(err, name, "is too long");
    return 0;
}

static int check_port(const char *name, int64_t p, struct sbx_error *err)
{
    return p < 1 || p > 65535 ? bad(err, name, "must be a port in 1..65535") : 0;
}

static int too_many(struct sbx_error *err, const char *name, size_t max)
{
    return sbx_error_set(err, SBX_E_TOOBIG, 0, "field '%s' has more than %zu entries", name, max);
}

/* What both directions require beyond the types: bounds, paths, and that the network fields
 * agree with the mode. */
static int check_config(const struct sbx__local_config *c, struct sbx_error *err)
{
    char name[NAME_MAX_LEN];
    int rc;
    if ((rc = check_id(c->id, err)) < 0 || (rc = check_path("dir", c->dir, 1, err)) < 0 ||
        (rc = check_path("workspace", c->workspace, 1, err)) < 0 ||
        (rc = check_path("root", c->root, 1, err)) < 0)
        return rc;
    if (c->env.n > SBX__LOCAL_CONFIG_MAX_ENV)
        return too_many(err, "env", SBX__LOCAL_CONFIG_MAX_ENV);
    if (c->n_ports > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return too_many(err, "ports", SBX_LOCAL_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < c->n_ports; i++) {
        snprintf(name, sizeof(name), "ports[%zu]", i);
        if ((rc = check_port(name, c->ports[i], err)) < 0)
            return rc;
    }
    if (c->test_delay_ms < 0 || c->test_delay_ms > SBX__LOCAL_CONFIG_MAX_DELAY_MS)
        return bad(err, "test_delay_ms", "must be in 0..10000");
    if (!c->isolated) {
        if (c->host_home || c->users.n || c->n_groups || c->n_grants || c->n_mounts || c->allow.n ||
            c->test_hosts.n || c->port_bind || c->n_allow_ports || c->net != 0 || c->publish.n ||
            c->limits.memory_bytes || c->limits.pids || c->limits.cpu_millis ||
            c->limits.file_size_bytes || c->limits.open_files)
            return bad(err, "sandbox", "needs isolation 'namespaces'");
        return 0;
    }
    if ((unsigned)c->net > SBX__LOCAL_CONFIG_NET_FULL)
        return bad(err, "sandbox.net", "must be 'none', 'allow' or 'full'");
    if ((rc = check_path("sandbox.host_home", c->host_home, 0, err)) < 0)
        return rc;
    if (c->users.n > SBX__LOCAL_CONFIG_MAX_USERS)
        return too_many(err, "sandbox.users", SBX__LOCAL_CONFIG_MAX_USERS);
    if (c->n_groups > SBX__LOCAL_CONFIG_MAX_GROUPS)
        return too_many(err, "sandbox.groups", SBX__LOCAL_CONFIG_MAX_GROUPS);
    for (size_t i = 0; i < c->n_groups; i++) {
        snprintf(name, sizeof(name), "sandbox.groups[%zu].name", i);
        if (!c->groups[i].name)
            return bad(err, name, "is missing");
        snprintf(name, sizeof(name), "sandbox.groups[%zu].members", i);
        if (c->groups[i].members.n > SBX__LOCAL_CONFIG_MAX_MEMBERS)
            return too_many(err, name, SBX__LOCAL_CONFIG_MAX_MEMBERS);
    }
    if (c->n_grants + c->n_mounts > SBX__LOCAL_CONFIG_MAX_GRANTS)
        return too_many(err, "sandbox.grants", SBX__LOCAL_CONFIG_MAX_GRANTS);
    for (size_t i = 0; i < c->n_mounts; i++) {
        snprintf(name, sizeof(name), "sandbox.mounts[%zu].dst", i);
        if ((rc = check_path(name, c->mounts[i].dst, 1, err)) < 0)
            return rc;
    }
    for (size_t i = 0; i < c->n_grants; i++) {
        snprintf(name, sizeof(name), "sandbox.grants[%zu].src", i);
        if ((rc = check_path(name, c->grants[i].src, 1, err)) < 0)
            return rc;
        snprintf(name, sizeof(name), "sandbox.grants[%zu].dst", i);
        if ((rc = check_path(name, c->grants[i].dst, 0, err)) < 0)
            return rc;
    }
    const uint64_t lim[] = {c->limits.memory_bytes, c->limits.pids, c->limits.cpu_millis,
                            c->limits.file_size_bytes, c->limits.open_files};
    for (size_t i = 0; i < 5; i++)
        if (lim[i] != SBX_LOCAL_LIMIT_NONE && lim[i] > (uint64_t)INT64_MAX) {
            snprintf(name, sizeof(name), "sandbox.limits.%s", limit_keys[i]);
            return bad(err, name, "is out of range");
        }
    if (c->allow.n > SBX_LOCAL_MAX_ALLOW_DOMAINS)
        return too_many(err, "sandbox.allow", SBX_LOCAL_MAX_ALLOW_DOMAINS);
    if (c->net == SBX__LOCAL_CONFIG_NET_ALLOW && c->allow.n == 0)
        return bad(err, "sandbox.allow", "needs at least one domain for network 'allow'");
    if (c->net != SBX__LOCAL_CONFIG_NET_ALLOW && c->allow.n)
        return bad(err, "sandbox.allow", "needs network 'allow'");
    if (c->test_hosts.n > SBX__LOCAL_CONFIG_MAX_TEST_HOSTS)
        return too_many(err, "sandbox.test_proxy_hosts", SBX__LOCAL_CONFIG_MAX_TEST_HOSTS);
    if (c->n_allow_ports > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return too_many(err, "sandbox.allow_ports", SBX_LOCAL_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < c->n_allow_ports; i++) {
        snprintf(name, sizeof(name), "sandbox.allow_ports[%zu]", i);
        if ((rc = check_port(name, c->allow_ports[i], err)) < 0)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * To JSON */

static json_t *strv_json(const struct sbx_strv *sv)
{
    json_t *a = json_array();
    for (size_t i = 0; i < sv->n; i++)
        sbx_json_append(a, sbx_json_str(sv->v[i]));
    return a;
}

static json_t *ports_json(const int *ports, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        sbx_json_append(a, json_integer(ports[i]));
    return a;
}

static json_t *sandbox_json(const struct sbx__local_config *c)
{
    json_t *sb = json_object(), *groups = json_array(), *grants = json_array();
    json_t *lim = json_object();
    sbx_json_set(sb, "net", sbx_json_str(net_names[c->net]));
    if (c->host_home)
        sbx_json_set(sb, "host_home", sbx_json_str(c->host_home));
    sbx_json_set(sb, "users", strv_json(&c->users));
    for (size_t i = 0; i < c->n_groups; i++) {
        json_t *g = json_object();
        sbx_json_set(g, "name", sbx_json_str(c->groups[i].name));
        sbx_json_set(g, "members", strv_json(&c->groups[i].members));
        sbx_json_append(groups, g);
    }
    sbx_json_set(sb, "groups", groups);
    for (size_t i = 0; i < c->n_grants; i++) {
        json_t *g = json_object();
        sbx_json_set(g, "src", sbx_json_str(c->grants[i].src));
        if (c->grants[i].dst)
            sbx_json_set(g, "dst", sbx_json_str(c->grants[i].dst));
        sbx_json_set(g, "rw", json_boolean(c->grants[i].writable));
        sbx_json_set(g, "dangerous", json_boolean(c->grants[i].dangerous));
        sbx_json_append(grants, g);
    }
    sbx_json_set(sb, "grants", grants);
    if (c->n_mounts) {
        json_t *mounts = json_array();
        for (size_t i = 0; i < c->n_mounts; i++) {
            const struct sbx__local_config_mount *m = &c->mounts[i];
            json_t *o = json_object();
            sbx_json_set(o, "entry", sbx_json_str(m->entry));
            sbx_json_set(o, "dst", sbx_json_str(m->dst));
            sbx_json_set(o, "remote", sbx_json_str(m->remote));
            sbx_json_set(o, "check", sbx_json_str(m->check));
            sbx_json_set(o, "config", sbx_json_str(m->config));
            sbx_json_set(o, "rw", json_boolean(m->writable));
            sbx_json_append(mounts, o);
        }
        sbx_json_set(sb, "mounts", mounts);
    }
    const uint64_t vals[] = {c->limits.memory_bytes, c->limits.pids, c->limits.cpu_millis,
                             c->limits.file_size_bytes, c->limits.open_files};
    for (size_t i = 0; i < 5; i++) {
        if (!vals[i])
            continue;
        /* "No limit" does not fit a JSON integer (jansson's are signed): it is a word. */
        sbx_json_set(lim, limit_keys[i],
                     vals[i] == SBX_LOCAL_LIMIT_NONE ? sbx_json_str("none")
                                                     : json_integer((json_int_t)vals[i]));
    }
    sbx_json_set(sb, "limits", lim);
    if (c->allow.n)
        sbx_json_set(sb, "allow", strv_json(&c->allow));
    if (c->test_hosts.n)
        sbx_json_set(sb, "test_proxy_hosts", strv_json(&c->test_hosts));
    if (c->port_bind)
        sbx_json_set(sb, "port_bind", sbx_json_str(c->port_bind));
    if (c->publish.n)
        sbx_json_set(sb, "publish", strv_json(&c->publish));
    if (c->n_allow_ports)
        sbx_json_set(sb, "allow_ports", ports_json(c->allow_ports, c->n_allow_ports));
    if (c->allow_host_uid)
        sbx_json_set(sb, "allow_host_uid", json_true());
    return sb;
}

int sbx__local_config_to_json(const struct sbx__local_config *c, json_t **out,
                              struct sbx_error *err)
{
    int rc = check_config(c, err);
    if (rc < 0)
        return rc;
    json_t *j = json_object();
    sbx_json_set(j, "id", sbx_json_str(c->id));
    sbx_json_set(j, "dir", sbx_json_str(c->dir));
    sbx_json_set(j, "workspace", sbx_json_str(c->workspace));
    sbx_json_set(j, "workspace_owned", json_boolean(c->workspace_owned));
    sbx_json_set(j, "root", sbx_json_str(c->root));
    sbx_json_set(j, "isolation", sbx_json_str(c->isolated ? "namespaces" : "none"));
    sbx_json_set(j, "env", strv_json(&c->env));
    sbx_json_set(j, "ports", ports_json(c->ports, c->n_ports));
    if (c->test_delay_ms)
        sbx_json_set(j, "test_delay_ms", json_integer(c->test_delay_ms));
    if (c->tied)
        sbx_json_set(j, "tied", json_true());
    if (c->isolated)
        sbx_json_set(j, "sandbox", sandbox_json(c));
    *out = j;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * From JSON: each reader takes the field's value (NULL when absent) and its full name */

static int check_keys(const json_t *o, const char *where, const char *const *allowed,
                      struct sbx_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], k) != 0)
            i++;
        if (!allowed[i])
            return sbx_error_set(err, SBX_E_INVAL, 0, "unknown field '%s%s%.64s'", where,
                                 where[0] ? "." : "", k);
    }
    return 0;
}

static int wrong_type(struct sbx_error *err, const char *name, const char *want, const json_t *v)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be %s, not %s", name, want,
                         sbx_json_typename(v));
}

static int read_object(const json_t *v, const char *name, struct sbx_error *err)
{
    if (!v)
        return bad(err, name, "is missing");
    return json_is_object(v) ? 0 : wrong_type(err, name, "an object", v);
}

/* A string without NUL bytes; *out (a copy) untouched when absent. */
static int read_string(const json_t *v, const char *name, int required, char **out,
                       struct sbx_error *err)
{
    if (!v)
        return required ? bad(err, name, "is missing") : 0;
    if (!json_is_string(v))
        return wrong_type(err, name, "a string", v);
    const char *s = json_string_value(v);
    if (strlen(s) != json_string_length(v))
        return bad(err, name, "must not contain NUL bytes");
    *out = sbx_xstrdup(s);
    return 0;
}

static int read_bool(const json_t *v, const char *name, int *out, struct sbx_error *err)
{
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return wrong_type(err, name, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

static int read_int(const json_t *v, const char *name, int64_t lo, int64_t hi, int64_t *out,
                    struct sbx_error *err)
{
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return wrong_type(err, name, "an integer", v);
    int64_t n = json_integer_value(v);
    if (n < lo || n > hi)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be in %" PRId64 "..%" PRId64,
                             name, lo, hi);
    *out = n;
    return 0;
}

/* An array of at most max entries: its size, or -code. */
static int read_array(const json_t *v, const char *name, size_t max, struct sbx_error *err)
{
    if (!json_is_array(v))
        return wrong_type(err, name, "an array", v);
    if (json_array_size(v) > max)
        return too_many(err, name, max);
    return (int)json_array_size(v);
}

static int read_strv(const json_t *v, const char *name, size_t max, struct sbx_strv *out,
                     struct sbx_error *err)
{
    if (!v)
        return 0;
    int n = read_array(v, name, max, err);
    char item[NAME_MAX_LEN];
    for (int i = 0; i < n; i++) {
        char *s = NULL;
        snprintf(item, sizeof(item), "%s[%d]", name, i);
        int rc = read_string(json_array_get(v, (size_t)i), item, 1, &s, err);
        if (rc < 0)
            return rc;
        sbx_strv_push_take(out, s);
    }
    return n < 0 ? n : 0;
}

static int read_ports(const json_t *v, const char *name, int *ports, size_t *n_out,
                      struct sbx_error *err)
{
    if (!v)
        return 0;
    int n = read_array(v, name, SBX_LOCAL_MAX_EXPOSED_PORTS, err);
    char item[NAME_MAX_LEN];
    for (int i = 0; i < n; i++) {
        int64_t p = 0;
        snprintf(item, sizeof(item), "%s[%d]", name, i);
        const json_t *pv = json_array_get(v, (size_t)i);
        int rc = read_int(pv, item, 1, 65535, &p, err);
        if (rc < 0)
            return rc;
        ports[(*n_out)++] = (int)p;
    }
    return n < 0 ? n : 0;
}

/* A limit: a positive integer or "none". */
static int read_limit(const json_t *v, const char *name, uint64_t *out, struct sbx_error *err)
{
    int64_t n = 0;
    if (!v)
        return 0;
    if (json_is_string(v)) {
        if (strcmp(json_string_value(v), "none") != 0)
            return bad(err, name, "must be a positive integer or 'none'");
        *out = SBX_LOCAL_LIMIT_NONE;
        return 0;
    }
    if (!json_is_integer(v))
        return wrong_type(err, name, "a positive integer or 'none'", v);
    int rc = read_int(v, name, 1, INT64_MAX, &n, err);
    if (rc == 0)
        *out = (uint64_t)n;
    return rc;
}

static int read_groups(const json_t *v, struct sbx__local_config *c, struct sbx_error *err)
{
    char name[NAME_MAX_LEN];
    if (!v)
        return 0;
    int n = read_array(v, "sandbox.groups", SBX__LOCAL_CONFIG_MAX_GROUPS, err);
    if (n <= 0)
        return n;
    c->groups = sbx_xcalloc((size_t)n, sizeof(*c->groups));
    for (int i = 0; i < n; i++) {
        const json_t *g = json_array_get(v, (size_t)i);
        struct sbx__local_config_group *out = &c->groups[c->n_groups++];
        int rc;
        sbx_strv_init(&out->members);
        snprintf(name, sizeof(name), "sandbox.groups[%d]", i);
        if ((rc = read_object(g, name, err)) < 0 || (rc = check_keys(g, name, group_keys, err)) < 0)
            return rc;
        snprintf(name, sizeof(name), "sandbox.groups[%d].name", i);
        if ((rc = read_string(json_object_get(g, "name"), name, 1, &out->name, err)) < 0)
            return rc;
        snprintf(name, sizeof(name), "sandbox.groups[%d].members", i);
        if ((rc = read_strv(json_object_get(g, "members"), name, SBX__LOCAL_CONFIG_MAX_MEMBERS,
                            &out->members, err)) < 0)
            return rc;
    }
    return 0;
}

static int read_grants(const json_t *v, struct sbx__local_config *c, struct sbx_error *err)
{
    char name[NAME_MAX_LEN];
    if (!v)
        return 0;
    int n = read_array(v, "sandbox.grants", SBX__LOCAL_CONFIG_MAX_GRANTS, err);
    if (n <= 0)
        return n;
    c->grants = sbx_xcalloc((size_t)n, sizeof(*c->grants));
    for (int i = 0; i < n; i++) {
        const json_t *g = json_array_get(v, (size_t)i);
        struct sbx__local_config_grant *out = &c->grants[c->n_grants++];
        int rc;
        snprintf(name, sizeof(name), "sandbox.grants[%d]", i);
        if ((rc = read_object(g, name, err)) < 0 || (rc = check_keys(g, name, grant_keys, err)) < 0)
            return rc;
        snprintf(name, sizeof(name), "sandbox.grants[%d].src", i);
        if ((rc = read_string(json_object_get(g, "src"), name, 1, &out->src, err)) < 0)
            return rc;
        snprintf(name, sizeof(name), "sandbox.grants[%d].dst", i);
        if ((rc = read_string(json_object_get(g, "dst"), name, 0, &out->dst, err)) < 0)
            return rc;
        snprintf(name, sizeof(name), "sandbox.grants[%d].rw", i);
        if ((rc = read_bool(json_object_get(g, "rw"), name, &out->writable, err)) < 0)
            return rc;
        snprintf(name, sizeof(name), "sandbox.grants[%d].dangerous", i);
        if ((rc = read_bool(json_object_get(g, "dangerous"), name, &out->dangerous, err)) < 0)
            return rc;
    }
    return 0;
}

static int read_mounts(const json_t *v, struct sbx__local_config *c, struct sbx_error *err)
{
    char name[NAME_MAX_LEN];
    if (!v)
        return 0;
    int n = read_array(v, "sandbox.mounts", SBX__LOCAL_CONFIG_MAX_MOUNTS, err);
    if (n <= 0)
        return n;
    c->mounts = sbx_xcalloc((size_t)n, sizeof(*c->mounts));
    for (int i = 0; i < n; i++) {
        const json_t *o = json_array_get(v, (size_t)i);
        struct sbx__local_config_mount *out = &c->mounts[c->n_mounts++];
        char **strs[] = {&out->entry, &out->dst, &out->remote, &out->check, &out->config};
        int rc;
        snprintf(name, sizeof(name), "sandbox.mounts[%d]", i);
        if ((rc = read_object(o, name, err)) < 0 || (rc = check_keys(o, name, mount_keys, err)) < 0)
            return rc;
        for (size_t k = 0; k < SBX_ARRAY_LEN(strs); k++) {
            snprintf(name, sizeof(name), "sandbox.mounts[%d].%s", i, mount_keys[k]);
            if ((rc = read_string(json_object_get(o, mount_keys[k]), name, 1, strs[k], err)) < 0)
                return rc;
        }
        snprintf(name, sizeof(name), "sandbox.mounts[%d].rw", i);
        if ((rc = read_bool(json_object_get(o, "rw"), name, &out->writable, err)) < 0)
            return rc;
    }
    return 0;
}

static int read_net(const json_t *v, enum sbx__local_config_net *out, struct sbx_error *err)
{
    if (!v)
        return 0;
    if (!json_is_string(v))
        return wrong_type(err, "sandbox.net", "a string", v);
    for (size_t i = 0; i < sizeof(net_names) / sizeof(net_names[0]); i++)
        if (strcmp(json_string_value(v), net_names[i]) == 0) {
            *out = (enum sbx__local_config_net)i;
            return 0;
        }
    return bad(err, "sandbox.net", "must be 'none', 'allow' or 'full'");
}

static int read_sandbox(const json_t *sb, struct sbx__local_config *c, struct sbx_error *err)
{
    const json_t *lim = json_object_get(sb, "limits");
    uint64_t *const limv[] = {&c->limits.memory_bytes, &c->limits.pids, &c->limits.cpu_millis,
                              &c->limits.file_size_bytes, &c->limits.open_files};
    char name[NAME_MAX_LEN];
    int rc;
    if ((rc = read_object(sb, "sandbox", err)) < 0 ||
        (rc = check_keys(sb, "sandbox", sandbox_keys, err)) < 0 ||
        (rc = read_net(json_object_get(sb, "net"), &c->net, err)) < 0 ||
        (rc = read_string(json_object_get(sb, "host_home"), "sandbox.host_home", 0, &c->host_home,
                          err)) < 0 ||
        (rc = read_strv(json_object_get(sb, "users"), "sandbox.users", SBX__LOCAL_CONFIG_MAX_USERS,
                        &c->users, err)) < 0 ||
        (rc = read_groups(json_object_get(sb, "groups"), c, err)) < 0 ||
        (rc = read_grants(json_object_get(sb, "grants"), c, err)) < 0 ||
        (rc = read_mounts(json_object_get(sb, "mounts"), c, err)) < 0 ||
        (rc = read_strv(json_object_get(sb, "allow"), "sandbox.allow", SBX_LOCAL_MAX_ALLOW_DOMAINS,
                        &c->allow, err)) < 0 ||
        (rc = read_strv(json_object_get(sb, "test_proxy_hosts"), "sandbox.test_proxy_hosts",
                        SBX__LOCAL_CONFIG_MAX_TEST_HOSTS, &c->test_hosts, err)) < 0 ||
        (rc = read_string(json_object_get(sb, "port_bind"), "sandbox.port_bind", 0, &c->port_bind,
                          err)) < 0 ||
        (rc = read_strv(json_object_get(sb, "publish"), "sandbox.publish",
                        SBX_LOCAL_MAX_EXPOSED_PORTS, &c->publish, err)) < 0 ||
        (rc = check_publish(&c->publish, err)) < 0 ||
        (rc = read_ports(json_object_get(sb, "allow_ports"), "sandbox.allow_ports", c->allow_ports,
                         &c->n_allow_ports, err)) < 0 ||
        (rc = read_bool(json_object_get(sb, "allow_host_uid"), "sandbox.allow_host_uid",
                        &c->allow_host_uid, err)) < 0)
        return rc;
    if (!lim)
        return 0;
    if ((rc = read_object(lim, "sandbox.limits", err)) < 0 ||
        (rc = check_keys(lim, "sandbox.limits", limit_keys, err)) < 0)
        return rc;
    for (size_t i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "sandbox.limits.%s", limit_keys[i]);
        if ((rc = read_limit(json_object_get(lim, limit_keys[i]), name, limv[i], err)) < 0)
            return rc;
    }
    return 0;
}

static int read_isolation(const json_t *v, int *out, struct sbx_error *err)
{
    if (!v)
        return bad(err, "isolation", "is missing");
    if (!json_is_string(v))
        return wrong_type(err, "isolation", "a string", v);
    if (strcmp(json_string_value(v), "namespaces") == 0)
        *out = 1;
    else if (strcmp(json_string_value(v), "none") != 0)
        return bad(err, "isolation", "must be 'none' or 'namespaces'");
    return 0;
}

int sbx__local_config_from_json(const json_t *j, struct sbx__local_config *out,
                                struct sbx_error *err)
{
    struct sbx__local_config c;
    const json_t *sb = json_object_get(j, "sandbox");
    int rc;
    sbx__local_config_init(&c);
    if (!json_is_object(j)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "the configuration must be an object, not %s",
                           sbx_json_typename(j));
        goto out;
    }
    if ((rc = check_keys(j, "", top_keys, err)) < 0 ||
        (rc = read_string(json_object_get(j, "id"), "id", 1, &c.id, err)) < 0 ||
        (rc = read_string(json_object_get(j, "dir"), "dir", 1, &c.dir, err)) < 0 ||
        (rc = read_string(json_object_get(j, "workspace"), "workspace", 1, &c.workspace, err)) <
                0 ||
        (rc = read_string(json_object_get(j, "root"), "root", 1, &c.root, err)) < 0 ||
        (rc = read_bool(json_object_get(j, "workspace_owned"), "workspace_owned",
                        &c.workspace_owned, err)) < 0 ||
        (rc = read_isolation(json_object_get(j, "isolation"), &c.isolated, err)) < 0 ||
        (rc = read_strv(json_object_get(j, "env"), "env", SBX__LOCAL_CONFIG_MAX_ENV, &c.env, err)) <
                0 ||
        (rc = read_ports(json_object_get(j, "ports"), "ports", c.ports, &c.n_ports, err)) < 0 ||
        (rc = read_int(json_object_get(j, "test_delay_ms"), "test_delay_ms", 0,
                       SBX__LOCAL_CONFIG_MAX_DELAY_MS, &c.test_delay_ms, err)) < 0 ||
        (rc = read_bool(json_object_get(j, "tied"), "tied", &c.tied, err)) < 0)
        goto out;
    if (c.isolated)
        rc = read_sandbox(sb, &c, err);
    else if (sb)
        rc = bad(err, "sandbox", "needs isolation 'namespaces'");
    if (rc == 0)
        rc = check_config(&c, err);
out:
    if (rc < 0) {
        sbx__local_config_release(&c);
        return rc;
    }
    *out = c;
    return 0;
}
