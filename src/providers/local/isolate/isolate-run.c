/* sbx __isolate-run: hidden test driver of the local sandbox isolation. Runs one command in a
 * freshly isolated sandbox (the same namespaces, root, seccomp and limits a local sandbox gets)
 * and exits with its status. Documented in docs/internals/isolation.md; used by the escape
 * suite in tests/security/. It lives in the local provider's folder, so the CLI reaches the
 * isolation code only through the registry (providers/local/program.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <stdarg.h>
#include <unistd.h>

#include "providers/local/isolate/isolate.h"
#include "providers/local/program.h"
#include "sbx/term.h"

#define RUN_OK    0
#define RUN_FAIL  1
#define RUN_USAGE 2

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...)
{
    va_list ap;
    fputs("sbx: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'sbx __isolate-run --help'.\n", stderr);
    return RUN_USAGE;
}

static int fail(const struct sbx_error *err)
{
    const char *msg = err->msg[0] ? err->msg : sbx_strerror(err->code);
    char *safe = isatty(2) ? sbx_term_escape(msg, strlen(msg), 0, NULL) : NULL;
    fprintf(stderr, "sbx: %s\n", safe ? safe : msg);
    free(safe);
    return RUN_FAIL;
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    if (*end == 'k' || *end == 'K')
        v *= 1024ull, end++;
    else if (*end == 'm' || *end == 'M')
        v *= 1024ull * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        v *= 1024ull * 1024 * 1024, end++;
    if (*end)
        return -1;
    *out = v;
    return 0;
}

static const char usage_text[] =
        "usage: sbx __isolate-run --workspace DIR [options] -- COMMAND [ARG...]\n"
        "  --workspace DIR      host directory shown read-write at the root\n"
        "  --root PATH          sandbox path of the workspace (default /workspace)\n"
        "  --net none|full      network mode (default none)\n"
        "  --users A,B          declare users (the first is the default)\n"
        "  --group G:A,B        declare group G with members\n"
        "  --user NAME          run the command as NAME\n"
        "  --env K=V            manifest environment (repeatable)\n"
        "  --grant SRC[:DST][:rw]  extra path grant (repeatable)\n"
        "  --memory SIZE --pids N --cpu MILLIS --fsize SIZE --nofile N --tmp SIZE\n"
        "  --cgroup NAME        leaf name of the sandbox cgroups\n"
        "  --hostname NAME\n";

int sbx_local_isolate_run_main(int argc, char **argv)
{
    struct sbx__isolation_spec spec = {0};
    struct sbx__isolation_user users[SBX__ISOLATION_MAX_USERS];
    struct sbx__isolation_group groups[SBX__ISOLATION_MAX_GROUPS];
    struct sbx__isolation_grant grants[SBX__ISOLATION_MAX_GRANTS];
    const char *members[SBX__ISOLATION_MAX_GROUPS][SBX__ISOLATION_MAX_USERS + 1];
    struct sbx_strv env, words;
    const char *run_as = NULL;
    int i, ret = RUN_USAGE;
    sbx_strv_init(&env);
    sbx_strv_init(&words);

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            ret = RUN_OK;
            goto out;
        }
        if (!v) {
            ret = usage("option '%s' needs a value", a);
            goto out;
        }
        i++;
        if (strcmp(a, "--workspace") == 0)
            spec.workspace = v;
        else if (strcmp(a, "--root") == 0)
            spec.root = v;
        else if (strcmp(a, "--hostname") == 0)
            spec.hostname = v;
        else if (strcmp(a, "--cgroup") == 0)
            spec.cgroup_name = v;
        else if (strcmp(a, "--user") == 0)
            run_as = v;
        else if (strcmp(a, "--env") == 0)
            sbx_strv_push(&env, v);
        else if (strcmp(a, "--net") == 0) {
            if (strcmp(v, "none") == 0)
                spec.net = SBX__NET_NONE;
            else if (strcmp(v, "full") == 0)
                spec.net = SBX__NET_FULL;
            else {
                ret = usage("unknown network mode '%s' (none, full)", v);
                goto out;
            }
        } else if (strcmp(a, "--users") == 0) {
            char *copy = (char *)sbx_strv_push(&words, v), *save = copy, *tok;
            spec.nusers = 0;
            while ((tok = strsep(&save, ",")) && spec.nusers < SBX__ISOLATION_MAX_USERS)
                users[spec.nusers++].name = tok;
            spec.users = users;
        } else if (strcmp(a, "--group") == 0) {
            if (spec.ngroups == SBX__ISOLATION_MAX_GROUPS) {
                ret = usage("too many groups");
                goto out;
            }
            char *copy = (char *)sbx_strv_push(&words, v), *colon = strchr(copy, ':');
            size_t g = spec.ngroups++, m = 0;
            groups[g].name = copy;
            groups[g].members = members[g];
            if (colon) {
                *colon = '\0';
                char *save = colon + 1, *tok;
                while ((tok = strsep(&save, ",")) && m < SBX__ISOLATION_MAX_USERS)
                    members[g][m++] = tok;
            }
            members[g][m] = NULL;
            spec.groups = groups;
        } else if (strcmp(a, "--grant") == 0) {
            if (spec.ngrants == SBX__ISOLATION_MAX_GRANTS) {
                ret = usage("too many grants");
                goto out;
            }
            char *copy = (char *)sbx_strv_push(&words, v);
            struct sbx__isolation_grant *g = &grants[spec.ngrants++];
            memset(g, 0, sizeof(*g));
            g->src = strsep(&copy, ":");
            char *dst = copy ? strsep(&copy, ":") : NULL;
            g->dst = dst && *dst ? dst : NULL;
            if (copy && strcmp(copy, "rw") == 0)
                g->writable = 1;
            else if (copy) {
                ret = usage("grant mode '%s' must be 'rw'", copy);
                goto out;
            }
            spec.grants = grants;
        } else {
            uint64_t *lim = strcmp(a, "--memory") == 0   ? &spec.limits.memory_bytes
                            : strcmp(a, "--pids") == 0   ? &spec.limits.pids
                            : strcmp(a, "--cpu") == 0    ? &spec.limits.cpu_millis
                            : strcmp(a, "--fsize") == 0  ? &spec.limits.fsize_bytes
                            : strcmp(a, "--nofile") == 0 ? &spec.limits.nofile
                            : strcmp(a, "--tmp") == 0    ? &spec.limits.tmp_bytes
                                                         : NULL;
            if (!lim) {
                ret = usage("unknown option '%s'", a);
                goto out;
            }
            if (parse_size(v, lim) < 0) {
                ret = usage("option '%s' needs a size or count, not '%s'", a, v);
                goto out;
            }
        }
    }
    if (!spec.workspace) {
        ret = usage("missing --workspace");
        goto out;
    }
    if (i >= argc) {
        ret = usage("missing command after '--'");
        goto out;
    }
    spec.env = (const char *const *)env.v;
    spec.host_home = getenv("HOME");

    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf describe;
    sbx_buf_init(&describe, 1024);
    int status = 0;
    fflush(stdout);
    fflush(stderr);
    if (sbx__isolation_run(&spec, run_as, argv + i, &status, &describe, &err) < 0) {
        ret = fail(&err);
    } else if (WIFEXITED(status)) {
        /* a plain "exited with status N" needs no words; a limit that was hit does */
        if (strchr(describe.data, '('))
            fprintf(stderr, "sbx: %s\n", describe.data);
        ret = WEXITSTATUS(status);
    } else {
        fprintf(stderr, "sbx: %s\n", describe.data);
        ret = 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    sbx_buf_release(&describe);
out:
    sbx_strv_release(&env);
    sbx_strv_release(&words);
    return ret;
}
