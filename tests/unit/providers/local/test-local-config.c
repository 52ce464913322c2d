/* The local supervisor's configuration (providers/local/config.h): every field survives the trip
 * through JSON text, and every bad input is refused with a message naming its field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "providers/local/config.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/json.h"

/* A configuration with every field set to something other than its default. */
static void fill(struct sbx__local_config *c)
{
    sbx__local_config_init(c);
    c->id = sbx_xstrdup("0123456789abcdef");
    c->dir = sbx_xstrdup("/run/sbx/0123456789abcdef");
    c->workspace = sbx_xstrdup("/home/u/.local/state/sbx/workspaces/0123456789abcdef");
    c->root = sbx_xstrdup("/work");
    c->workspace_owned = 1;
    c->isolated = 1;
    sbx_strv_push(&c->env, "PATH=/bin");
    sbx_strv_push(&c->env, "TOKEN=s3cret");
    c->ports[0] = 8080;
    c->ports[1] = 65535;
    c->n_ports = 2;
    c->test_delay_ms = 250;
    c->tied = 1;
    c->net = SBX__LOCAL_CONFIG_NET_ALLOW;
    c->host_home = sbx_xstrdup("/home/u");
    sbx_strv_push(&c->users, "dev");
    sbx_strv_push(&c->users, "ci");
    c->n_groups = 2;
    c->groups = sbx_xcalloc(2, sizeof(*c->groups));
    c->groups[0].name = sbx_xstrdup("staff");
    sbx_strv_init(&c->groups[0].members);
    sbx_strv_push(&c->groups[0].members, "dev");
    sbx_strv_push(&c->groups[0].members, "ci");
    c->groups[1].name = sbx_xstrdup("empty");
    sbx_strv_init(&c->groups[1].members);
    c->n_grants = 2;
    c->grants = sbx_xcalloc(2, sizeof(*c->grants));
    c->grants[0].src = sbx_xstrdup("/opt/data");
    c->grants[0].dst = sbx_xstrdup("/data");
    c->grants[0].writable = 1;
    c->grants[1].src = sbx_xstrdup("/run/thing");
    c->grants[1].dangerous = 1;
    c->limits.memory_bytes = (uint64_t)3 << 30;
    c->limits.pids = 77;
    c->limits.cpu_millis = SBX_LOCAL_LIMIT_NONE;
    c->limits.file_size_bytes = (uint64_t)INT64_MAX;
    c->limits.open_files = 1;
    sbx_strv_push(&c->allow, "pypi.org");
    sbx_strv_push(&c->allow, "*.pythonhosted.org");
    sbx_strv_push(&c->test_hosts, "pypi.org=127.0.0.1");
    c->port_bind = sbx_xstrdup("::1");
    c->allow_ports[0] = 443;
    c->allow_ports[1] = 8443;
    c->n_allow_ports = 2;
    c->n_mounts = 1;
    c->mounts = sbx_xcalloc(1, sizeof(*c->mounts));
    c->mounts[0].entry = sbx_xstrdup("'data' (s3_mount)");
    c->mounts[0].dst = sbx_xstrdup("/work/data");
    c->mounts[0].remote = sbx_xstrdup("m:bucket/prefix");
    c->mounts[0].check = sbx_xstrdup("m:bucket");
    c->mounts[0].config = sbx_xstrdup("[m]\ntype = s3\nsecret_access_key = k\n");
    c->mounts[0].writable = 1;
}

static void check_strv(const struct sbx_strv *a, const struct sbx_strv *b, const char *what)
{
    if (!tap__result(a->n == b->n, __FILE__, __LINE__, what))
        printf("#   %zu vs %zu entries\n", a->n, b->n);
    for (size_t i = 0; i < a->n && i < b->n; i++)
        CHECK_EQ_STR(a->v[i], b->v[i]);
}

static void check_same(const struct sbx__local_config *a, const struct sbx__local_config *b)
{
    CHECK_EQ_STR(a->id, b->id);
    CHECK_EQ_STR(a->dir, b->dir);
    CHECK_EQ_STR(a->workspace, b->workspace);
    CHECK_EQ_STR(a->root, b->root);
    CHECK_EQ_INT(a->workspace_owned, b->workspace_owned);
    CHECK_EQ_INT(a->isolated, b->isolated);
    check_strv(&a->env, &b->env, "env");
    CHECK_EQ_INT(a->n_ports, b->n_ports);
    for (size_t i = 0; i < a->n_ports && i < b->n_ports; i++)
        CHECK_EQ_INT(a->ports[i], b->ports[i]);
    CHECK_EQ_INT(a->test_delay_ms, b->test_delay_ms);
    CHECK_EQ_INT(a->tied, b->tied);
    CHECK_EQ_INT(a->net, b->net);
    CHECK_EQ_STR(a->host_home, b->host_home);
    check_strv(&a->users, &b->users, "users");
    CHECK_EQ_INT(a->n_groups, b->n_groups);
    for (size_t i = 0; i < a->n_groups && i < b->n_groups; i++) {
        CHECK_EQ_STR(a->groups[i].name, b->groups[i].name);
        check_strv(&a->groups[i].members, &b->groups[i].members, "group members");
    }
    CHECK_EQ_INT(a->n_grants, b->n_grants);
    for (size_t i = 0; i < a->n_grants && i < b->n_grants; i++) {
        CHECK_EQ_STR(a->grants[i].src, b->grants[i].src);
        CHECK_EQ_STR(a->grants[i].dst, b->grants[i].dst);
        CHECK_EQ_INT(a->grants[i].writable, b->grants[i].writable);
        CHECK_EQ_INT(a->grants[i].dangerous, b->grants[i].dangerous);
    }
    CHECK_EQ_INT(a->n_mounts, b->n_mounts);
    for (size_t i = 0; i < a->n_mounts && i < b->n_mounts; i++) {
        CHECK_EQ_STR(a->mounts[i].entry, b->mounts[i].entry);
        CHECK_EQ_STR(a->mounts[i].dst, b->mounts[i].dst);
        CHECK_EQ_STR(a->mounts[i].remote, b->mounts[i].remote);
        CHECK_EQ_STR(a->mounts[i].check, b->mounts[i].check);
        CHECK_EQ_STR(a->mounts[i].config, b->mounts[i].config);
        CHECK_EQ_INT(a->mounts[i].writable, b->mounts[i].writable);
    }
    CHECK(a->limits.memory_bytes == b->limits.memory_bytes);
    CHECK(a->limits.pids == b->limits.pids);
    CHECK(a->limits.cpu_millis == b->limits.cpu_millis);
    CHECK(a->limits.file_size_bytes == b->limits.file_size_bytes);
    CHECK(a->limits.open_files == b->limits.open_files);
    check_strv(&a->allow, &b->allow, "allow");
    check_strv(&a->test_hosts, &b->test_hosts, "test_hosts");
    CHECK_EQ_STR(a->port_bind, b->port_bind);
    CHECK_EQ_INT(a->n_allow_ports, b->n_allow_ports);
    for (size_t i = 0; i < a->n_allow_ports && i < b->n_allow_ports; i++)
        CHECK_EQ_INT(a->allow_ports[i], b->allow_ports[i]);
}

/* c to JSON text (as the supervisor reads it from its stdin) and back. */
static void round_trip(const struct sbx__local_config *c)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__local_config back;
    json_t *j = NULL, *parsed = NULL;
    CHECK_OK(sbx__local_config_to_json(c, &j, &err), &err);
    if (!j)
        return;
    char *text = sbx_json_dumps(j, SBX_JSON_COMPACT);
    CHECK_OK(sbx_json_parse(text, strlen(text), NULL, &parsed, &err), &err);
    CHECK_OK(sbx__local_config_from_json(parsed, &back, &err), &err);
    if (err.code == 0) {
        check_same(c, &back);
        sbx__local_config_release(&back);
    }
    free(text);
    json_decref(j);
    json_decref(parsed);
}

static void test_round_trip_isolated(void)
{
    struct sbx__local_config c;
    fill(&c);
    round_trip(&c);
    /* The other network modes, and nothing optional. */
    c.net = SBX__LOCAL_CONFIG_NET_FULL;
    sbx_strv_release(&c.allow);
    sbx_strv_init(&c.allow);
    round_trip(&c);
    struct sbx__local_config bare;
    sbx__local_config_init(&bare);
    bare.id = sbx_xstrdup("fedcba9876543210");
    bare.dir = sbx_xstrdup("/run/sbx/fedcba9876543210");
    bare.workspace = sbx_xstrdup("/srv/ws");
    bare.root = sbx_xstrdup("/workspace");
    bare.isolated = 1;
    round_trip(&bare);
    sbx__local_config_release(&bare);
    sbx__local_config_release(&c);
    CHECK(c.id == NULL && c.env.n == 0 && c.n_grants == 0);
}

static void test_round_trip_unconfined(void)
{
    struct sbx__local_config c;
    sbx__local_config_init(&c);
    c.id = sbx_xstrdup("00000000000000ff");
    c.dir = sbx_xstrdup("/tmp/run/00000000000000ff");
    c.workspace = sbx_xstrdup("/tmp/ws");
    c.root = sbx_xstrdup("/tmp/ws");
    sbx_strv_push(&c.env, "HOME=/tmp/ws");
    c.ports[0] = 1;
    c.n_ports = 1;
    c.tied = 1;
    round_trip(&c);
    /* Isolation-only fields are refused without isolation. */
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *j = NULL;
    c.n_allow_ports = 1;
    c.allow_ports[0] = 80;
    CHECK_ERR(sbx__local_config_to_json(&c, &j, &err), SBX_E_INVAL, &err,
              "field 'sandbox' needs isolation");
    CHECK(j == NULL);
    sbx__local_config_release(&c);
}

/* The serialiser refuses what the parser would. */
static void test_to_json_checks(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__local_config c;
    json_t *j = NULL;
    fill(&c);
    free(c.grants[1].src);
    c.grants[1].src = sbx_xstrdup("relative/path");
    CHECK_ERR(sbx__local_config_to_json(&c, &j, &err), SBX_E_INVAL, &err,
              "field 'sandbox.grants[1].src' must be an absolute path");
    free(c.grants[1].src);
    c.grants[1].src = sbx_xstrdup("/ok");
    c.limits.memory_bytes = (uint64_t)INT64_MAX + 1;
    CHECK_ERR(sbx__local_config_to_json(&c, &j, &err), SBX_E_INVAL, &err,
              "field 'sandbox.limits.memory' is out of range");
    c.limits.memory_bytes = 1;
    free(c.id);
    c.id = sbx_xstrdup("../../etc");
    CHECK_ERR(sbx__local_config_to_json(&c, &j, &err), SBX_E_INVAL, &err, "field 'id'");
    CHECK(j == NULL);
    sbx__local_config_release(&c);
}

/* The object at path in root: "" the top, else names and array indexes joined by dots. */
static json_t *at(json_t *root, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *o = root;
    for (char *p = buf, *next; o && *p; p = next) {
        next = strchr(p, '.');
        if (next)
            *next++ = '\0';
        else
            next = p + strlen(p);
        o = json_is_array(o) ? json_array_get(o, strtoul(p, NULL, 10)) : json_object_get(o, p);
    }
    return o;
}

/* A JSON value from text; "#N:ITEM" is an array of N copies of the JSON ITEM, "!nul" a path
 * with a NUL byte in it (which the JSON parser refuses before this one sees it). */
static json_t *value(const char *text)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    if (strcmp(text, "!nul") == 0)
        return json_stringn("/run/a\0b", 8);
    if (text[0] == '#') {
        char *colon = strchr(text, ':');
        long n = strtol(text + 1, NULL, 10);
        json_t *item = value(colon + 1);
        v = json_array();
        for (long i = 0; i < n; i++)
            sbx_json_append(v, json_deep_copy(item));
        json_decref(item);
        return v;
    }
    if (sbx_json_parse(text, strlen(text), NULL, &v, &err) < 0)
        printf("# bad test value %s: %s\n", text, err.msg);
    return v;
}

struct bad_case {
    const char *path;  /* the object to change */
    const char *key;   /* the field to set */
    const char *value; /* JSON text (see value()); NULL: remove the field */
    int code;
    const char *needle;
};

static const struct bad_case bad_cases[] = {
        {"", "bogus", "1", SBX_E_INVAL, "unknown field 'bogus'"},
        {"sandbox", "bogus", "1", SBX_E_INVAL, "unknown field 'sandbox.bogus'"},
        {"sandbox.limits", "swap", "1", SBX_E_INVAL, "unknown field 'sandbox.limits.swap'"},
        {"sandbox.grants.0", "mode", "\"rw\"", SBX_E_INVAL,
         "unknown field 'sandbox.grants[0].mode'"},
        {"sandbox.groups.0", "gid", "1", SBX_E_INVAL, "unknown field 'sandbox.groups[0].gid'"},
        {"sandbox.mounts.0", "args", "1", SBX_E_INVAL, "unknown field 'sandbox.mounts[0].args'"},
        {"sandbox.mounts.0", "config", NULL, SBX_E_INVAL,
         "field 'sandbox.mounts[0].config' is missing"},
        {"sandbox.mounts.0", "dst", "\"data\"", SBX_E_INVAL,
         "field 'sandbox.mounts[0].dst' must be an absolute path"},
        {"", "id", "42", SBX_E_INVAL, "field 'id' must be a string"},
        {"", "id", "\"../../etc\"", SBX_E_INVAL, "field 'id' must be a sandbox id"},
        {"", "id", "\"0123456789ABCDEF\"", SBX_E_INVAL, "field 'id' must be a sandbox id"},
        {"", "id", NULL, SBX_E_INVAL, "field 'id' is missing"},
        {"", "dir", "\"run/x\"", SBX_E_INVAL, "field 'dir' must be an absolute path"},
        {"", "dir", "!nul", SBX_E_INVAL, "field 'dir' must not contain NUL"},
        {"", "dir", NULL, SBX_E_INVAL, "field 'dir' is missing"},
        {"", "workspace", "\"ws\"", SBX_E_INVAL, "field 'workspace' must be an absolute path"},
        {"", "root", "\"\"", SBX_E_INVAL, "field 'root' must be an absolute path"},
        {"", "root", "[]", SBX_E_INVAL, "field 'root' must be a string"},
        {"", "workspace_owned", "1", SBX_E_INVAL, "field 'workspace_owned' must be a boolean"},
        {"", "isolation", "\"chroot\"", SBX_E_INVAL, "field 'isolation' must be"},
        {"", "isolation", NULL, SBX_E_INVAL, "field 'isolation' is missing"},
        {"", "isolation", "\"none\"", SBX_E_INVAL, "field 'sandbox' needs isolation"},
        {"", "env", "\"A=1\"", SBX_E_INVAL, "field 'env' must be an array"},
        {"", "env", "[\"A=1\", 2]", SBX_E_INVAL, "field 'env[1]' must be a string"},
        {"", "env", "#4097:\"A=1\"", SBX_E_TOOBIG, "field 'env' has more than 4096"},
        {"", "ports", "[0]", SBX_E_INVAL, "field 'ports[0]' must be in 1..65535"},
        {"", "ports", "[80, 70000]", SBX_E_INVAL, "field 'ports[1]' must be in 1..65535"},
        {"", "ports", "[1.5]", SBX_E_INVAL, "field 'ports[0]' must be an integer"},
        {"", "ports", "#65:80", SBX_E_TOOBIG, "field 'ports' has more than 64"},
        {"", "test_delay_ms", "10001", SBX_E_INVAL, "field 'test_delay_ms' must be in 0..10000"},
        {"", "test_delay_ms", "-1", SBX_E_INVAL, "field 'test_delay_ms' must be in 0..10000"},
        {"", "tied", "\"yes\"", SBX_E_INVAL, "field 'tied' must be a boolean"},
        {"", "sandbox", "[]", SBX_E_INVAL, "field 'sandbox' must be an object"},
        {"", "sandbox", NULL, SBX_E_INVAL, "field 'sandbox' is missing"},
        {"sandbox", "net", "\"host\"", SBX_E_INVAL, "field 'sandbox.net' must be"},
        {"sandbox", "net", "1", SBX_E_INVAL, "field 'sandbox.net' must be a string"},
        {"sandbox", "host_home", "\"home\"", SBX_E_INVAL,
         "field 'sandbox.host_home' must be an absolute path"},
        {"sandbox", "users", "[null]", SBX_E_INVAL, "field 'sandbox.users[0]' must be a string"},
        {"sandbox", "users", "#65:\"u\"", SBX_E_TOOBIG, "field 'sandbox.users' has more than 64"},
        {"sandbox", "groups", "#65:{\"name\":\"g\"}", SBX_E_TOOBIG,
         "field 'sandbox.groups' has more than 64"},
        {"sandbox", "groups", "[1]", SBX_E_INVAL, "field 'sandbox.groups[0]' must be an object"},
        {"sandbox.groups.0", "name", NULL, SBX_E_INVAL,
         "field 'sandbox.groups[0].name' is missing"},
        {"sandbox.groups.0", "members", "[3]", SBX_E_INVAL,
         "field 'sandbox.groups[0].members[0]' must be a string"},
        {"sandbox.groups.0", "members", "#65:\"u\"", SBX_E_TOOBIG,
         "field 'sandbox.groups[0].members' has more than 64"},
        {"sandbox", "grants", "#65:{\"src\":\"/x\"}", SBX_E_TOOBIG,
         "field 'sandbox.grants' has more than 64"},
        {"sandbox.grants.0", "src", "\"etc\"", SBX_E_INVAL,
         "field 'sandbox.grants[0].src' must be an absolute path"},
        {"sandbox.grants.1", "src", NULL, SBX_E_INVAL, "field 'sandbox.grants[1].src' is missing"},
        {"sandbox.grants.0", "dst", "\"data\"", SBX_E_INVAL,
         "field 'sandbox.grants[0].dst' must be an absolute path"},
        {"sandbox.grants.0", "rw", "\"true\"", SBX_E_INVAL,
         "field 'sandbox.grants[0].rw' must be a boolean"},
        {"sandbox.grants.1", "dangerous", "1", SBX_E_INVAL,
         "field 'sandbox.grants[1].dangerous' must be a boolean"},
        {"sandbox", "limits", "5", SBX_E_INVAL, "field 'sandbox.limits' must be an object"},
        {"sandbox.limits", "memory", "-1", SBX_E_INVAL,
         "field 'sandbox.limits.memory' must be in 1"},
        {"sandbox.limits", "pids", "0", SBX_E_INVAL, "field 'sandbox.limits.pids' must be in 1"},
        {"sandbox.limits", "cpu_millis", "1.8446744073709552e19", SBX_E_INVAL,
         "field 'sandbox.limits.cpu_millis' must be a positive integer or 'none'"},
        {"sandbox.limits", "file_size", "\"all\"", SBX_E_INVAL,
         "field 'sandbox.limits.file_size' must be a positive integer or 'none'"},
        {"sandbox.limits", "open_files", "true", SBX_E_INVAL,
         "field 'sandbox.limits.open_files' must be"},
        {"sandbox", "allow", NULL, SBX_E_INVAL, "field 'sandbox.allow' needs at least one domain"},
        {"sandbox", "net", "\"none\"", SBX_E_INVAL, "field 'sandbox.allow' needs network 'allow'"},
        {"sandbox", "allow", "#257:\"a.org\"", SBX_E_TOOBIG,
         "field 'sandbox.allow' has more than 256"},
        {"sandbox", "test_proxy_hosts", "#65:\"a=1.2.3.4\"", SBX_E_TOOBIG,
         "field 'sandbox.test_proxy_hosts' has more than 64"},
        {"sandbox", "port_bind", "1", SBX_E_INVAL, "field 'sandbox.port_bind' must be a string"},
        {"sandbox", "allow_ports", "[443, 0]", SBX_E_INVAL,
         "field 'sandbox.allow_ports[1]' must be in 1..65535"},
        {"sandbox", "allow_ports", "#65:443", SBX_E_TOOBIG,
         "field 'sandbox.allow_ports' has more than 64"},
};

static void test_bad_input(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__local_config c, out;
    json_t *good = NULL;
    fill(&c);
    CHECK_OK(sbx__local_config_to_json(&c, &good, &err), &err);
    sbx__local_config_release(&c);
    if (!good)
        return;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *b = &bad_cases[i];
        json_t *j = json_deep_copy(good), *o = at(j, b->path);
        if (!tap__result(json_is_object(o), __FILE__, __LINE__, b->path)) {
            json_decref(j);
            continue;
        }
        if (b->value)
            sbx_json_set(o, b->key, value(b->value));
        else
            json_object_del(o, b->key);
        memset(&out, 0x5a, sizeof(out));
        CHECK_ERR(sbx__local_config_from_json(j, &out, &err), b->code, &err, b->needle);
        CHECK(out.id == (char *)(uintptr_t)0x5a5a5a5a5a5a5a5aull); /* untouched */
        json_decref(j);
    }
    json_t *arr = json_array();
    CHECK_ERR(sbx__local_config_from_json(arr, &out, &err), SBX_E_INVAL, &err,
              "the configuration must be an object");
    json_decref(arr);
    json_decref(good);
}

/* -p: "[ADDR:]HOST:PORT" or PORT into its canonical form; anything else refused. */
static void test_publish_parse(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char bind[64], canon[SBX__LOCAL_PUBLISH_TEXT_MAX];
    int hp = -1, port = -1;
    CHECK_OK(sbx__local_publish_parse("8080:8000", bind, &hp, &port, canon, &err), &err);
    CHECK_EQ_STR(canon, "127.0.0.1:8080:8000");
    CHECK(hp == 8080 && port == 8000);
    CHECK_OK(sbx__local_publish_parse("0.0.0.0:80:8000", bind, &hp, &port, canon, &err), &err);
    CHECK_EQ_STR(bind, "0.0.0.0");
    CHECK_OK(sbx__local_publish_parse("[::1]:8081:81", bind, &hp, &port, canon, &err), &err);
    CHECK_EQ_STR(bind, "::1");
    CHECK_EQ_STR(canon, "[::1]:8081:81");
    CHECK_OK(sbx__local_publish_parse("9000", bind, &hp, &port, canon, &err), &err);
    CHECK(hp == 0 && port == 9000);
    CHECK_EQ_STR(canon, "127.0.0.1::9000");
    CHECK_OK(sbx__local_publish_parse(canon, bind, &hp, &port, canon, &err), &err);
    CHECK(hp == 0 && port == 9000);
    static const char *const bad[] = {"",           ":80",      "80:",         "0:80",
                                      "80:0",       "70000:80", "a:b",         "1.2.3:80:80",
                                      "[::1:80:80", "x:80:80",  "80:80:80:80", "-1:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_ERR(sbx__local_publish_parse(bad[i], bind, &hp, &port, canon, &err), SBX_E_INVAL,
                  &err, NULL);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_round_trip_isolated);
    TAP_RUN(test_round_trip_unconfined);
    TAP_RUN(test_to_json_checks);
    TAP_RUN(test_bad_input);
    TAP_RUN(test_publish_parse);
    return TAP_DONE();
}
