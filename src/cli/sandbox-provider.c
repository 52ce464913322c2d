/* Which provider: the options of a new sandbox (--provider and each provider's own options),
 * and the provider that has an existing sandbox id (by-id commands). The one place of the CLI
 * that knows there is more than one provider. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "sbx/session.h"

#define DEFAULT_DOCKER_SOCKET "/var/run/docker.sock"

static const char *const providers[] = {"local", "docker"};

void cli_sandbox_opts_init(struct cli_sandbox_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->docker.cap_add = o->caps;
}

const char *cli_sandbox_provider(const struct cli_sandbox_opts *o)
{
    return o->provider ? o->provider : providers[0];
}

int cli_sandbox_option(int argc, char **argv, int *i, struct cli_sandbox_opts *o)
{
    const char *a = argv[*i];
    char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    static const char *const docker_valued[] = {"--image", "--docker-host", "--user", "--cap-add"};
    static const char *const shared[] = {"--memory", "--pids", "--cpus"};
    if (strcmp(a, "--allow-cap-add") == 0) {
        o->docker.allow_cap_add = 1;
        o->docker_only = o->docker_only ? o->docker_only : "--allow-cap-add";
        return 1;
    }
    size_t k = 0;
    while (k < SBX_ARRAY_LEN(docker_valued) && strcmp(docker_valued[k], a) != 0)
        k++;
    int is_docker = k < SBX_ARRAY_LEN(docker_valued);
    if (is_docker || strcmp(a, "--provider") == 0 || strcmp(a, "--network") == 0) {
        if (!v)
            return cli_usage("sandbox ", "option '%s' needs a value", a);
        (*i)++;
        if (strcmp(a, "--provider") == 0)
            o->provider = v;
        else if (strcmp(a, "--network") == 0)
            o->network = v;
        else if (k == 0)
            o->docker.image = v;
        else if (k == 1)
            o->docker.host = v;
        else if (k == 2)
            o->docker.user = v;
        else if (o->docker.n_cap_add >= SBX_DOCKER_MAX_CAPS)
            return cli_usage("sandbox ", "more than %d --cap-add", SBX_DOCKER_MAX_CAPS);
        else
            o->caps[o->docker.n_cap_add++] = v;
        if (is_docker && !o->docker_only)
            o->docker_only = docker_valued[k];
        return 1;
    }
    int r = cli_local_option(argc, argv, i, &o->local, o->grants);
    if (r == 1 && !o->local_only) {
        int both = 0;
        for (size_t s = 0; s < SBX_ARRAY_LEN(shared); s++)
            both |= strcmp(shared[s], a) == 0;
        if (!both)
            o->local_only = a;
    }
    return r;
}

static int docker_network(const char *v, enum sbx_docker_network *out)
{
    static const struct {
        const char *name;
        enum sbx_docker_network mode;
    } modes[] = {{"none", SBX_DOCKER_NETWORK_NONE},
                 {"bridge", SBX_DOCKER_NETWORK_BRIDGE},
                 {"host", SBX_DOCKER_NETWORK_HOST}};
    for (size_t i = 0; i < SBX_ARRAY_LEN(modes); i++)
        if (strcmp(modes[i].name, v) == 0) {
            *out = modes[i].mode;
            return 0;
        }
    return -1;
}

int cli_sandbox_finish(struct cli_sandbox_opts *o, const char *verb)
{
    const char *p = cli_sandbox_provider(o);
    if (strcmp(p, "local") != 0 && strcmp(p, "docker") != 0)
        return cli_usage(verb, "unknown provider '%s' (local, docker)", p);
    int docker = strcmp(p, "docker") == 0;
    if (docker && o->local_only)
        return cli_usage(verb, "option '%s' is for the local provider, not --provider docker",
                         o->local_only);
    if (!docker && o->docker_only)
        return cli_usage(verb, "option '%s' is for --provider docker", o->docker_only);
    if (!docker) {
        if (o->network) {
            char *pair[] = {"--network", o->network};
            int j = 0, r = cli_local_option(2, pair, &j, &o->local, o->grants);
            if (r != 1)
                return r ? r : CLI_USAGE;
        }
        return cli_local_finish(&o->local, o->grants);
    }
    if (o->network && docker_network(o->network, &o->docker.network) < 0)
        return cli_usage(verb, "unknown docker network mode '%s' (none, bridge, host)", o->network);
    o->docker.memory_bytes = o->local.limits.memory_bytes;
    o->docker.pids = o->local.limits.pids;
    o->docker.cpu_millis = o->local.limits.cpu_millis;
    o->docker.exposed_ports = o->local.exposed_ports;
    o->docker.n_exposed_ports = o->local.n_exposed_ports;
    return CLI_OK;
}

int cli_sandbox_client(struct cli_sandbox_opts *o, struct sbx_client **out, struct sbx_error *err)
{
    const char *p = cli_sandbox_provider(o);
    return sbx_client_new(p, strcmp(p, "docker") == 0 ? (const void *)&o->docker : &o->local, out,
                          err);
}

/* ---------------------------------------------------------------------------------------------
 * By id */

static const char *docker_host_given;

int cli_docker_host_option(int argc, char **argv, int *i, const char *verb)
{
    if (strcmp(argv[*i], "--docker-host") != 0)
        return 0;
    if (*i + 1 >= argc)
        return cli_usage(verb, "option '--docker-host' needs a value");
    docker_host_given = argv[++*i];
    return 1;
}

const char *cli_docker_host(void)
{
    const char *env = getenv("DOCKER_HOST");
    struct stat st;
    if (docker_host_given)
        return docker_host_given;
    if (env && env[0])
        return env;
    if (stat(DEFAULT_DOCKER_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode))
        return DEFAULT_DOCKER_SOCKET;
    return NULL;
}

int cli_client_new(const char *provider, struct sbx_client **out, struct sbx_error *err)
{
    if (strcmp(provider, "docker") == 0) {
        struct sbx_docker_options d = {.host = cli_docker_host()};
        return sbx_client_new(provider, &d, out, err);
    }
    return sbx_client_new(provider, NULL, out, err);
}

int cli_sandbox_by_id(const char *id, cli_sandbox_op *op, void *data, struct sbx_client **out,
                      struct sbx_error *err)
{
    struct sbx_error first = SBX_ERROR_INIT;
    int rc = 0;
    *out = NULL;
    for (size_t i = 0; i < SBX_ARRAY_LEN(providers); i++) {
        struct sbx_client *c = NULL;
        struct sbx_error e = SBX_ERROR_INIT;
        if (i > 0 && !cli_docker_host())
            break;
        rc = cli_client_new(providers[i], &c, &e);
        if (rc == 0)
            rc = op(c, id, data, &e);
        if (rc == 0 || (rc != -SBX_E_NOTFOUND && i == 0)) {
            *out = c;
            return rc < 0 ? sbx_error_copy(err, &e) : 0;
        }
        sbx_client_free(c);
        if (i == 0) {
            sbx_error_copy(&first, &e);
        } else if (rc != -SBX_E_NOTFOUND) {
            /* Not a local one, and the engine cannot say: both halves matter. */
            sbx_error_prefix(&e, "no local sandbox '%s', and the docker engine '%s'", id,
                             cli_docker_host());
            return sbx_error_copy(err, &e);
        }
    }
    return sbx_error_copy(err, &first);
}

static int attach_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    return sbx_client_attach(c, id, data, err);
}

int cli_sandbox_attach(const char *id, struct sbx_client **c, struct sbx_session **s,
                       struct sbx_error *err)
{
    return cli_sandbox_by_id(id, attach_op, s, c, err);
}
