/* The providers' table (sbx/provider.h): the rules every entry keeps (a key two providers
 * declare means the same, no credential is ever recorded), option values typed into their
 * canonical JSON, unknown keys with the near one, the sandbox records, secrets by reference
 * and the hidden program entry points. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "providers/programs.h"
#include "sandbox/provider.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/secret.h"

static char tmp[256];

/* Every entry: a summary, a constructor from declared options, options with keys, help and
 * the value names of their types; a key or flag two providers declare is the same option. */
static void test_table_rules(void)
{
    struct sbx_provider_info p, q;
    size_t bad = 0;
    CHECK(sbx_provider_count() >= 2);
    CHECK_EQ_INT(sbx_provider_at(sbx_provider_count(), &p), -SBX_E_NOTFOUND);
    for (size_t i = 0; i < sbx__n_providers; i++) {
        const struct sbx__provider_def *d = sbx__providers[i];
        if (!d->summary || !d->client_new_json || !d->check_state) {
            printf("#   provider '%s' lacks a required member\n", d->name);
            bad++;
        }
    }
    for (size_t i = 0; sbx_provider_at(i, &p) == 0; i++) {
        for (size_t k = 0; k < p.n_options; k++) {
            const struct sbx_provider_option *o = &p.options[k];
            int ok = o->help && (o->type == SBX_OPTION_BOOL || o->arg) &&
                     strspn(o->key, "abcdefghijklmnopqrstuvwxyz_") == strlen(o->key) &&
                     !(o->type == SBX_OPTION_SECRET &&
                       (o->flags & (SBX_OPTION_STATE | SBX_OPTION_LOCATOR))) &&
                     !(o->type == SBX_OPTION_CHOICE && !strchr(o->arg, '|')) &&
                     !(o->danger && !o->warning);
            for (size_t j = 0; sbx_provider_at(j, &q) == 0; j++) {
                for (size_t m = 0; m < q.n_options; m++) {
                    const struct sbx_provider_option *r = &q.options[m];
                    unsigned shape = SBX_OPTION_LIST | SBX_OPTION_NONE_OK;
                    int same_key = strcmp(r->key, o->key) == 0;
                    int same_flag = r->flag && o->flag && strcmp(r->flag, o->flag) == 0;
                    int no_flags = !r->flag && !o->flag;
                    if ((same_key || same_flag) &&
                        (!same_key || (!same_flag && !no_flags) || r->type != o->type ||
                         (r->flags & shape) != (o->flags & shape) ||
                         r->short_flag != o->short_flag))
                        ok = 0;
                    if (same_key && !!r->flag != !!o->flag)
                        ok = 0;
                }
            }
            if (!ok) {
                printf("#   option '%s' of provider '%s' breaks a rule of the table\n", o->key,
                       p.name);
                bad++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_STR(sbx_provider_trait_name(SBX_PROVIDER_MOUNTS), "mounts");
    CHECK_EQ_STR(sbx_provider_trait_name(SBX_PROVIDER_HOST_WORKSPACE), "host-workspace");
    CHECK_EQ_STR(sbx_provider_trait_name(SBX_PROVIDER_RESUME), "resume");
    CHECK(sbx_provider_trait_name(3) == NULL);
    CHECK(sbx_provider_trait_name(0) == NULL);
}

static void test_find(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_provider_info p, first;
    CHECK_OK(sbx_provider_find(NULL, &p, &err), &err);
    CHECK_OK(sbx_provider_at(0, &first), &err);
    CHECK_EQ_STR(p.name, first.name);
    CHECK_ERR(sbx_provider_find("cloud", &p, &err), SBX_E_NOTFOUND, &err,
              "unknown provider 'cloud' (local, docker");
    struct sbx_client *c = NULL;
    CHECK_ERR(sbx_client_new("cloud", NULL, &c, &err), SBX_E_NOTFOUND, &err,
              "unknown provider 'cloud'");
    CHECK_ERR(sbx_client_new_json("cloud", NULL, &c, &err), SBX_E_NOTFOUND, &err, NULL);
    /* A provider without a typed options struct (no client_new) takes none through it. */
    int dummy = 0;
    CHECK(sbx__provider_def("e2b")->client_new == NULL);
    CHECK_ERR(sbx_client_new("e2b", &dummy, &c, &err), SBX_E_INVAL, &err,
              "the e2b provider takes its options as JSON (sbx_client_new_json)");
    /* The id and root every hosted state has (sbx__state_check_id_root), in the provider's
     * words. */
    const struct sbx__provider_def *rl = sbx__provider_def("runloop");
    json_t *st = json_pack("{s:s, s:s}", "id", "a/b", "root", "/home/user");
    CHECK_ERR(rl->check_state(st, &err), SBX_E_INVAL, &err,
              "field 'id': 'a/b' is not a runloop devbox id");
    json_object_set_new(st, "id", json_string("dbx_1"));
    json_object_set_new(st, "root", json_string("home/user"));
    CHECK_ERR(rl->check_state(st, &err), SBX_E_INVAL, &err,
              "field 'root' must be an absolute path");
    json_object_set_new(st, "root", json_string("/home/user"));
    CHECK_OK(rl->check_state(st, &err), &err);
    json_object_del(st, "root");
    CHECK_ERR(rl->check_state(st, &err), SBX_E_INVAL, &err, "root");
    json_decref(st);
    CHECK(sbx__provider_traits("local") & SBX_PROVIDER_MOUNTS);
    CHECK(!(sbx__provider_traits("docker") & SBX_PROVIDER_MOUNTS));
    CHECK_EQ_INT(sbx__provider_traits("cloud"), 0);
    CHECK_EQ_INT(sbx__provider_traits(NULL), 0);
}

/* text through option key of provider; the canonical JSON as compact text, or the error. */
static char *parsed(const char *provider, const char *key, const char *text)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_provider_info p;
    json_t *v = NULL;
    if (sbx_provider_find(provider, &p, &err) < 0)
        return sbx_xstrdup(err.msg);
    const struct sbx_provider_option *o = sbx_provider_option(&p, key);
    if (!o)
        return sbx_xstrdup("no such option");
    if (sbx_provider_option_parse(o, text, &v, &err) < 0)
        return sbx_xstrdup(err.msg);
    char *s = sbx_json_dumps(v, SBX_JSON_COMPACT);
    json_decref(v);
    return s;
}

#define CHECK_PARSED(prov, key, text, want)           \
    do {                                              \
        char *tap_p_ = parsed((prov), (key), (text)); \
        CHECK_EQ_STR(tap_p_, (want));                 \
        free(tap_p_);                                 \
    } while (0)

static void test_option_parse(void)
{
    CHECK_PARSED("local", "memory", "512M", "536870912");
    CHECK_PARSED("local", "memory", "2g", "2147483648");
    CHECK_PARSED("local", "memory", "none", "--memory wants a size such as 512M, not 'none'");
    CHECK_PARSED("local", "memory", "-1", "--memory wants a size such as 512M, not '-1'");
    CHECK_PARSED("local", "memory", "0", "--memory wants a size such as 512M, not '0'");
    CHECK_PARSED("local", "disk", "none", "\"none\"");
    CHECK_PARSED("local", "disk", "1k",
                 "--disk wants a size from 16M to 16T (or 'none'), not '1k'");
    CHECK_PARSED("local", "disk", "16M", "16777216");
    CHECK_PARSED("local", "pids", "100", "100");
    CHECK_PARSED("local", "pids", "0", "--pids wants a positive count, not '0'");
    CHECK_PARSED("local", "pids", " 5", "--pids wants a positive count, not ' 5'");
    CHECK_PARSED("local", "cpus", "1.5", "1.5");
    CHECK_PARSED("local", "cpus", "0", "\"none\"");
    CHECK_PARSED("local", "cpus", "5000",
                 "--cpus wants a number of CPUs such as 1.5 (or none), not '5000'");
    CHECK_PARSED("local", "cpus", "nan",
                 "--cpus wants a number of CPUs such as 1.5 (or none), not 'nan'");
    CHECK_PARSED("local", "ports", "8080", "8080");
    CHECK_PARSED("local", "ports", "0", "--port wants a port number, not '0'");
    CHECK_PARSED("local", "isolation", "none", "\"none\"");
    CHECK_PARSED("local", "isolation", "weak", "unknown isolation 'weak' (namespaces, none)");
    CHECK_PARSED("local", "ro", "/srv:/data", "\"/srv:/data\"");
    CHECK_PARSED("local", "ro", "srv", "--ro wants an absolute path, not 'srv'");
    CHECK_PARSED("local", "network", "a\nb", "--network must not contain control characters");
    CHECK_PARSED("docker", "allow_cap_add", "yes", "true");
    CHECK_PARSED("docker", "allow_cap_add", "perhaps",
                 "--allow-cap-add wants true or false, not 'perhaps'");
    CHECK_PARSED("docker", "image", "", "--image wants a value, not ''");
}

/* options (JSON text) checked for provider: canonical compact text, or the error. */
static char *checked(const char *provider, const char *options)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *in = json_loads(options, 0, NULL), *out = NULL;
    char *s;
    if (sbx_provider_options_check(provider, in, &out, &err) < 0)
        s = sbx_xstrdup(err.msg);
    else
        s = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(in);
    json_decref(out);
    return s;
}

#define CHECK_CHECKED(prov, opts, want)         \
    do {                                        \
        char *tap_c_ = checked((prov), (opts)); \
        CHECK_EQ_STR(tap_c_, (want));           \
        free(tap_c_);                           \
    } while (0)

static void test_options_check(void)
{
    CHECK_CHECKED("local", "{}", "{}");
    CHECK_CHECKED("local", "{\"memory\": \"1G\", \"cpus\": 2, \"ports\": 8080}",
                  "{\"cpus\":2.0,\"memory\":1073741824,\"ports\":[8080]}");
    CHECK_CHECKED("local", "{\"ports\": [\"8080\", 8081], \"cpus\": \"none\"}",
                  "{\"cpus\":\"none\",\"ports\":[8080,8081]}");
    CHECK_CHECKED("local", "{\"memry\": \"1G\"}",
                  "provider 'local' has no option 'memry' (did you mean 'memory'?)");
    CHECK_CHECKED("local", "{\"port\": 80}",
                  "provider 'local' has no option 'port' (did you mean 'ports'?)");
    CHECK_CHECKED("local", "{\"zzz\": 1}", "provider 'local' has no option 'zzz'");
    CHECK_CHECKED("docker", "{\"docker_host\": \"/x\"}",
                  "provider 'docker' has no option 'docker_host' (did you mean 'host'?)");
    CHECK_CHECKED("local", "{\"memory\": true}",
                  "option 'memory' wants a size such as 512M, not a boolean");
    CHECK_CHECKED("local", "{\"memory\": [1]}",
                  "option 'memory' wants a size such as 512M, not an array");
    CHECK_CHECKED("local", "{\"pids\": 0}", "option 'pids' wants a positive count, not '0'");
    CHECK_CHECKED("local", "{\"disk\": 1024}",
                  "option 'disk' wants a size from 16M to 16T (or 'none'), not '1024'");
    CHECK_CHECKED("local", "[]", "the options of provider 'local' must be an object, not array");
    /* the provider's own rules */
    CHECK_CHECKED("local", "{\"network\": \"bridge\"}",
                  "unknown network mode 'bridge' (none, full, allow:DOMAINS)");
    CHECK_CHECKED("local", "{\"network\": \"allow:,\"}",
                  "--network allow: wants domains, such as allow:pypi.org,*.pypi.org");
    CHECK_CHECKED("local", "{\"allow_dangerous_grant\": \"/proc\"}",
                  "--allow-dangerous-grant '/proc' names no --ro or --rw source");
    CHECK_CHECKED("docker", "{\"network\": \"full\"}",
                  "unknown docker network mode 'full' (none, bridge, host)");
    CHECK_CHECKED("docker", "{\"image\": \"img\", \"allow_cap_add\": \"no\"}",
                  "{\"allow_cap_add\":false,\"image\":\"img\"}");
}

static void test_client_new_json(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    char *ws = sbx_xasprintf("%s/ws", tmp);
    setenv("SBX_WORKSPACES", ws, 1);
    json_t *o = json_pack("{s:s, s:[i]}", "memory", "256M", "ports", 8080);
    CHECK_OK(sbx_client_new_json("local", o, &c, &err), &err);
    if (c)
        CHECK_EQ_STR(sbx_client_provider(c), "local");
    sbx_client_free(c);
    c = NULL;
    json_decref(o);
    /* the client's own checks still apply */
    o = json_pack("{s:s, s:s}", "isolation", "none", "memory", "1G");
    CHECK_ERR(sbx_client_new_json(NULL, o, &c, &err), SBX_E_INVAL, &err,
              "resource limits need isolation");
    json_decref(o);
    o = json_pack("{s:s}", "colour", "blue");
    CHECK_ERR(sbx_client_new_json("docker", o, &c, &err), SBX_E_INVAL, &err,
              "provider 'docker' has no option 'colour'");
    json_decref(o);
    json_t *probe = NULL;
    CHECK_OK(sbx_provider_probe("local", &probe, &err), &err);
    CHECK(json_is_object(probe) && json_object_size(probe) == 0);
    json_decref(probe);
    probe = NULL;
    setenv("DOCKER_HOST", "unix:///x/docker.sock", 1);
    CHECK_OK(sbx_provider_probe("docker", &probe, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(probe, "host")), "unix:///x/docker.sock");
    json_decref(probe);
    unsetenv("DOCKER_HOST");
    free(ws);
}

static void test_describe(void)
{
    struct sbx_provider_info p;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_provider_find("docker", &p, &err), &err);
    json_t *d = sbx_provider_describe(&p);
    CHECK_EQ_STR(json_string_value(json_object_get(d, "name")), "docker");
    CHECK(json_is_false(json_object_get(d, "default")));
    int host_locator = 0, image_required_listed = 0;
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(d, "options"), i, o)
    {
        const char *key = json_string_value(json_object_get(o, "key"));
        host_locator |= strcmp(key, "host") == 0 && json_is_true(json_object_get(o, "locator"));
        image_required_listed |= strcmp(key, "image") == 0;
    }
    CHECK(host_locator);
    CHECK(image_required_listed);
    json_decref(d);
}

static void test_records(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *dir = sbx_xasprintf("%s/records", tmp);
    json_t *rec = NULL, *all = NULL;
    setenv("SBX_RECORDS", dir, 1);
    CHECK_OK(sbx_sandbox_records(&all, &err), &err); /* no directory yet: none */
    CHECK_EQ_INT(json_array_size(all), 0);
    json_decref(all);
    CHECK_ERR(sbx_sandbox_record_read("abc", &rec, &err), SBX_E_NOTFOUND, &err, NULL);
    json_t *o =
            json_pack("{s:s, s:s, s:s}", "host", "unix:///e.sock", "image", "img", "user", "me");
    CHECK_OK(sbx_sandbox_record_write("docker", "0123456789abcdef", o, &err), &err);
    CHECK_OK(sbx_sandbox_record_write("docker", "0123ffff00000000", o, &err), &err);
    CHECK_ERR(sbx_sandbox_record_write("docker", "../x", o, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_sandbox_record_write("cloud", "abc", o, &err), SBX_E_NOTFOUND, &err, NULL);
    json_decref(o);
    struct stat st;
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700);
    CHECK_OK(sbx_sandbox_record_read("0123456789", &rec, &err), &err);
    if (rec) {
        CHECK_EQ_STR(json_string_value(json_object_get(rec, "id")), "0123456789abcdef");
        CHECK_EQ_STR(json_string_value(json_object_get(rec, "provider")), "docker");
        /* only what reaches it again: the engine, not the image or the user */
        char *opts = sbx_json_dumps(json_object_get(rec, "options"), SBX_JSON_COMPACT);
        CHECK_EQ_STR(opts, "{\"host\":\"unix:///e.sock\"}");
        free(opts);
    }
    json_decref(rec);
    rec = NULL;
    CHECK_ERR(sbx_sandbox_record_read("0123", &rec, &err), SBX_E_INVAL, &err, "ambiguous");
    CHECK_OK(sbx_sandbox_records(&all, &err), &err);
    CHECK_EQ_INT(json_array_size(all), 2);
    json_decref(all);
    /* a file that is not a record of its name is not one */
    char *odd = sbx_xasprintf("%s/feedfeedfeedfeed.json", dir);
    FILE *f = fopen(odd, "w");
    fputs("{\"version\":1,\"id\":\"other\",\"provider\":\"docker\",\"options\":{}}", f);
    fclose(f);
    CHECK_OK(sbx_sandbox_records(&all, &err), &err);
    CHECK_EQ_INT(json_array_size(all), 2);
    json_decref(all);
    /* nor is it found by its file's name (an exact id is read from its file alone) */
    CHECK_ERR(sbx_sandbox_record_read("feedfeedfeedfeed", &rec, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_sandbox_record_read("0123ffff00000000", &rec, &err), &err);
    CHECK_EQ_STR(rec ? json_string_value(json_object_get(rec, "id")) : "", "0123ffff00000000");
    json_decref(rec);
    rec = NULL;
    CHECK_OK(sbx_sandbox_record_remove("0123456789abcdef", &err), &err);
    CHECK_OK(sbx_sandbox_record_remove("0123456789abcdef", &err), &err); /* gone: fine */
    CHECK_OK(sbx_sandbox_record_read("0123", &rec, &err), &err);
    json_decref(rec);
    rec = NULL;
    /* a directory others may write is not trusted: a record says where to connect */
    chmod(dir, 0777);
    CHECK_ERR(sbx_sandbox_record_read("0123", &rec, &err), SBX_E_PERM, &err, "only you");
    chmod(dir, 0700);
    unsetenv("SBX_RECORDS");
    free(odd);
    free(dir);
}

/* Names and labels ride on the records: one name, one sandbox; an id found by its name; a
 * record written again (a resume, a run's claim) keeps them. */
static void test_record_names(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *dir = sbx_xasprintf("%s/named", tmp);
    json_t *rec = NULL, *o = json_object();
    json_t *labels = json_pack("{s:s, s:s}", "team", "a", "env", "");
    setenv("SBX_RECORDS", dir, 1);
    CHECK_OK(sbx_sandbox_record_name("local", "aaaa000011112222", o, "web", labels, &err), &err);
    CHECK_ERR(sbx_sandbox_record_name("local", "bbbb000011112222", o, "web", NULL, &err),
              SBX_E_EXISTS, &err, "the name 'web' is in use by sandbox 'aaaa000011112222'");
    CHECK_ERR(sbx_sandbox_record_read("bbbb000011112222", &rec, &err), SBX_E_NOTFOUND, &err, NULL);
    /* the same sandbox may be named again */
    CHECK_OK(sbx_sandbox_record_name("local", "aaaa000011112222", o, "web", labels, &err), &err);
    CHECK_OK(sbx_sandbox_record_claim("local", "aaaa000011112222", o, "run-1", &err), &err);
    CHECK_OK(sbx_sandbox_record_read("web", &rec, &err), &err);
    if (rec) {
        CHECK_EQ_STR(json_string_value(json_object_get(rec, "id")), "aaaa000011112222");
        CHECK_EQ_STR(json_string_value(json_object_get(rec, "run")), "run-1");
        CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(rec, "labels"), "team")),
                     "a");
    }
    json_decref(rec);
    rec = NULL;
    CHECK_OK(sbx_sandbox_record_named("web", &rec, &err), &err);
    json_decref(rec);
    rec = NULL;
    CHECK_ERR(sbx_sandbox_record_named("aaaa", &rec, &err), SBX_E_NOTFOUND, &err,
              "no sandbox named 'aaaa'");
    /* a name that is also an id's prefix: the name wins; the exact id wins over a name */
    CHECK_OK(sbx_sandbox_record_name("local", "cccc000011112222", o, "aaaa", NULL, &err), &err);
    CHECK_OK(sbx_sandbox_record_read("aaaa", &rec, &err), &err);
    CHECK_EQ_STR(rec ? json_string_value(json_object_get(rec, "id")) : "", "cccc000011112222");
    json_decref(rec);
    rec = NULL;
    CHECK_OK(sbx_sandbox_record_remove("cccc000011112222", &err), &err);
    CHECK_OK(sbx_sandbox_record_read("aaaa", &rec, &err), &err);
    CHECK_EQ_STR(rec ? json_string_value(json_object_get(rec, "id")) : "", "aaaa000011112222");
    json_decref(rec);
    rec = NULL;
    /* rules */
    CHECK_ERR(sbx_sandbox_name_check("-x", &err), SBX_E_INVAL, &err, "bad sandbox name '-x'");
    CHECK_ERR(sbx_sandbox_name_check("a/b", &err), SBX_E_INVAL, &err, NULL);
    CHECK_OK(sbx_sandbox_name_check("web-1.prod_2", &err), &err);
    json_t *bad = json_pack("{s:s}", "a b", "x");
    CHECK_ERR(sbx_sandbox_labels_check(bad, &err), SBX_E_INVAL, &err, "bad label key 'a b'");
    json_decref(bad);
    bad = json_pack("{s:s}", "k", "a\nb");
    CHECK_ERR(sbx_sandbox_labels_check(bad, &err), SBX_E_INVAL, &err, "control character");
    json_decref(bad);
    bad = json_pack("{s:i}", "k", 1);
    CHECK_ERR(sbx_sandbox_labels_check(bad, &err), SBX_E_INVAL, &err, "wants a string");
    json_decref(bad);
    CHECK_ERR(sbx_sandbox_record_name("local", "dddd000011112222", o, "x y", NULL, &err),
              SBX_E_INVAL, &err, NULL);
    CHECK_OK(sbx_sandbox_record_remove("aaaa000011112222", &err), &err);
    json_decref(labels);
    json_decref(o);
    unsetenv("SBX_RECORDS");
    free(dir);
}

static void test_secret(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_secret *s = NULL;
    json_t *ref = json_pack("{s:s}", "env", "SBX_TEST_PROVIDER_SECRET");
    CHECK_ERR(sbx_provider_secret(ref, "api_key", &s, &err), SBX_E_NOTFOUND, &err,
              "api_key: variable 'SBX_TEST_PROVIDER_SECRET' is not set");
    setenv("SBX_TEST_PROVIDER_SECRET", "tok-1", 1);
    CHECK_OK(sbx_provider_secret(ref, "api_key", &s, &err), &err);
    CHECK_EQ_STR(s ? sbx_secret_reveal(s, NULL) : NULL, "tok-1");
    sbx_secret_free(s);
    s = NULL;
    json_decref(ref);
    char *file = sbx_xasprintf("%s/token", tmp);
    FILE *f = fopen(file, "w");
    fputs("tok-2\n", f);
    fclose(f);
    ref = json_pack("{s:s}", "file", file);
    CHECK_OK(sbx_provider_secret(ref, "api_key", &s, &err), &err);
    CHECK_EQ_STR(s ? sbx_secret_reveal(s, NULL) : NULL, "tok-2");
    sbx_secret_free(s);
    json_decref(ref);
    free(file);
    /* a secret option takes references only, and never repeats what it was given */
    struct sbx_provider_option o = {.key = "api_key",
                                    .type = SBX_OPTION_SECRET,
                                    .arg = "REF",
                                    .help = "x",
                                    .flag = "api-key"};
    json_t *v = NULL;
    CHECK_OK(sbx_provider_option_parse(&o, "env:E2B_KEY", &v, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(v, "env")), "E2B_KEY");
    json_decref(v);
    v = NULL;
    CHECK_ERR(sbx_provider_option_parse(&o, "sk-live-123", &v, &err), SBX_E_INVAL, &err,
              "never the secret itself");
    CHECK(!strstr(err.msg, "sk-live-123"));
    CHECK_ERR(sbx_provider_option_parse(&o, "file:relative", &v, &err), SBX_E_INVAL, &err, NULL);
}

static void test_programs(void)
{
    char *argv[] = {"__no-such-verb", NULL};
    int status = -1;
    CHECK_EQ_INT(sbx__program_main(1, argv, &status), 0);
    CHECK_EQ_INT(status, -1);
    int found = 0;
    for (size_t i = 0; i < sbx__n_providers; i++)
        for (const struct sbx__program *p = sbx__providers[i]->programs; p && p->verb; p++)
            found += strcmp(p->verb, "__supervise") == 0;
    CHECK_EQ_INT(found, 1);
}

int main(void)
{
    TAP_START();
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/sbx-test-providers.XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(tmp))
        abort();
    TAP_RUN(test_table_rules);
    TAP_RUN(test_find);
    TAP_RUN(test_option_parse);
    TAP_RUN(test_options_check);
    TAP_RUN(test_client_new_json);
    TAP_RUN(test_describe);
    TAP_RUN(test_records);
    TAP_RUN(test_record_names);
    TAP_RUN(test_secret);
    TAP_RUN(test_programs);
    rm_tree(tmp);
    return TAP_DONE();
}
