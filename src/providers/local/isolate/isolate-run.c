/* sbx __isolate-run: hidden test driver of the local sandbox isolation. Runs one command in a
 * freshly isolated sandbox (the same namespaces, root, seccomp and limits a local sandbox gets)
 * and exits with its status. Documented in docs/internals/isolation.md; used by the escape
 * suite in tests/security/. It lives in the local provider's folder, so the CLI reaches the
 * isolation code only through the registry (providers/local/program.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/local/isolate/executor.h"
#include "providers/local/program.h"
#include "sbx/fs.h"
#include "sbx/local.h"
#include "sbx/term.h"

/* ---------------------------------------------------------------------------------------------
 * The sandbox: sbx__isolation_run */

/* execve argv[0], searching PATH of env when it has no '/'. Returns only on failure. */
static void exec_path(char *const *argv, char *const *env)
{
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, env);
        return;
    }
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], "PATH=", 5) == 0)
            path = env[i] + 5;
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        char full[PATH_MAX];
        if (len &&
            (size_t)snprintf(full, sizeof(full), "%.*s/%s", (int)len, path, argv[0]) < sizeof(full))
            execve(full, argv, env);
        path += len + (colon ? 1 : 0);
    }
    errno = ENOENT;
}

struct run_result {
    int status;
    char describe[256];
};

/* PID 1 of the test sandbox: run one command, report, end. */
static SBX_NORETURN void run_inner(struct sbx__isolation *iso, const char *user, char *const *argv,
                                   int res_fd)
{
    struct sbx_error e = SBX_ERROR_INIT;
    struct run_result r = {0};
    struct sbx__run_as ra;
    struct sbx__cgroup_events before = {0}, after = {0};
    struct sbx_strv env;
    sbx_strv_init(&env);
    if (sbx__isolation_user(iso, user, &ra, &e) < 0 ||
        sbx__isolation_env(iso, &ra, NULL, NULL, &env, &e) < 0) {
        r.status = 127 << 8;
        snprintf(r.describe, sizeof(r.describe), "%.250s", e.msg);
        goto report;
    }
    sbx__isolation_events(iso, &before, NULL);
    pid_t pid = fork();
    if (pid < 0) {
        r.status = 127 << 8;
        snprintf(r.describe, sizeof(r.describe), "cannot fork: %s", strerror(errno));
        goto report;
    }
    if (pid == 0) {
        if (sbx__isolation_child(iso, &ra, &e) < 0) {
            dprintf(2, "sbx: %s\n", e.msg);
            _exit(126);
        }
        exec_path(argv, env.v);
        dprintf(2, "sbx: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    for (;;) {
        int st;
        pid_t w = wait(&st);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            break;
        if (w == pid) {
            r.status = st;
            kill(-1, SIGKILL); /* whatever the command left behind */
        }
    }
    sbx__isolation_events(iso, &after, NULL);
    struct sbx_buf d;
    sbx_buf_init(&d, sizeof(r.describe) - 1);
    if (sbx__isolation_describe_exit(iso, r.status, &before, &after, &d, NULL) == 0)
        memcpy(r.describe, d.data, d.len + 1);
    sbx_buf_release(&d);
report:
    if (write(res_fd, &r, sizeof(r)) < 0)
        _exit(1);
    _exit(0);
}

int sbx__isolation_run(const struct sbx__isolation_spec *spec, const char *user, char *const *argv,
                       int *status, struct sbx_buf *describe, struct sbx_error *err)
{
    struct sbx__isolation *iso = NULL;
    enum sbx__isolation_role role;
    int res[2] = {-1, -1};
    int rc;
    if (!argv || !argv[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "no command to run");
    if ((rc = sbx__isolation_new(spec, &iso, err)) < 0)
        return rc;
    struct sbx__run_as ra;
    if ((rc = sbx__isolation_user(iso, user, &ra, err)) < 0)
        goto out;
    if (pipe2(res, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "cannot create a pipe");
        goto out;
    }
    if ((rc = sbx__isolation_enter(iso, &role, err)) < 0)
        goto out;
    if (role == SBX__ISOLATION_INNER) {
        close(res[0]);
        run_inner(iso, user, argv, res[1]);
    }
    sbx_fd_close(&res[1]);
    struct run_result r;
    ssize_t n = sbx__iso_read_full(res[0], &r, sizeof(r));
    int st;
    if ((rc = sbx__isolation_outer_wait(iso, &st, err)) < 0)
        goto out;
    if (n != (ssize_t)sizeof(r)) {
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the sandbox ended without a result (status %d)",
                           st);
        goto out;
    }
    r.describe[sizeof(r.describe) - 1] = '\0';
    *status = r.status;
    if (describe)
        rc = sbx_buf_adds(describe, r.describe, err);
out:
    sbx_fd_close(&res[0]);
    sbx_fd_close(&res[1]);
    sbx__isolation_free(iso);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The verb: sbx_local_isolate_run_main */

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

/* What the options build: the spec and the arrays it points into. */
struct run_args {
    struct sbx__isolation_spec spec;
    struct sbx__isolation_user users[SBX__ISOLATION_MAX_USERS];
    struct sbx__isolation_group groups[SBX__ISOLATION_MAX_GROUPS];
    struct sbx__isolation_grant grants[SBX__ISOLATION_MAX_GRANTS];
    const char *members[SBX__ISOLATION_MAX_GROUPS][SBX__ISOLATION_MAX_USERS + 1];
    struct sbx_strv env, words; /* words: the option values cut up in place */
    const char *run_as;
};

/* --users A,B */
static void parse_users(struct run_args *r, const char *v)
{
    char *copy = (char *)sbx_strv_push(&r->words, v), *save = copy, *tok;
    r->spec.nusers = 0;
    while ((tok = strsep(&save, ",")) && r->spec.nusers < SBX__ISOLATION_MAX_USERS)
        r->users[r->spec.nusers++].name = tok;
    r->spec.users = r->users;
}

/* --group G:A,B */
static int parse_group(struct run_args *r, const char *v)
{
    if (r->spec.ngroups == SBX__ISOLATION_MAX_GROUPS)
        return usage("too many groups");
    char *copy = (char *)sbx_strv_push(&r->words, v), *colon = strchr(copy, ':');
    size_t g = r->spec.ngroups++, m = 0;
    r->groups[g].name = copy;
    r->groups[g].members = r->members[g];
    if (colon) {
        *colon = '\0';
        char *save = colon + 1, *tok;
        while ((tok = strsep(&save, ",")) && m < SBX__ISOLATION_MAX_USERS)
            r->members[g][m++] = tok;
    }
    r->members[g][m] = NULL;
    r->spec.groups = r->groups;
    return RUN_OK;
}

/* --grant SRC[:DST][:rw] */
static int parse_grant(struct run_args *r, const char *v)
{
    if (r->spec.ngrants == SBX__ISOLATION_MAX_GRANTS)
        return usage("too many grants");
    char *copy = (char *)sbx_strv_push(&r->words, v);
    struct sbx__isolation_grant *g = &r->grants[r->spec.ngrants++];
    memset(g, 0, sizeof(*g));
    g->src = strsep(&copy, ":");
    char *dst = copy ? strsep(&copy, ":") : NULL;
    g->dst = dst && *dst ? dst : NULL;
    if (copy && strcmp(copy, "rw") == 0)
        g->writable = 1;
    else if (copy)
        return usage("grant mode '%s' must be 'rw'", copy);
    r->spec.grants = r->grants;
    return RUN_OK;
}

/* --memory, --pids, --cpu, --fsize, --nofile, --tmp */
static int parse_limit(struct run_args *r, const char *a, const char *v)
{
    struct sbx__isolation_limits *l = &r->spec.limits;
    uint64_t *lim = strcmp(a, "--memory") == 0   ? &l->memory_bytes
                    : strcmp(a, "--pids") == 0   ? &l->pids
                    : strcmp(a, "--cpu") == 0    ? &l->cpu_millis
                    : strcmp(a, "--fsize") == 0  ? &l->fsize_bytes
                    : strcmp(a, "--nofile") == 0 ? &l->nofile
                    : strcmp(a, "--tmp") == 0    ? &l->tmp_bytes
                                                 : NULL;
    if (!lim)
        return usage("unknown option '%s'", a);
    if (parse_size(v, lim) < 0)
        return usage("option '%s' needs a size or count, not '%s'", a, v);
    return RUN_OK;
}

/* One option a with its value v. */
static int parse_option(struct run_args *r, const char *a, const char *v)
{
    if (strcmp(a, "--workspace") == 0)
        r->spec.workspace = v;
    else if (strcmp(a, "--root") == 0)
        r->spec.root = v;
    else if (strcmp(a, "--hostname") == 0)
        r->spec.hostname = v;
    else if (strcmp(a, "--cgroup") == 0)
        r->spec.cgroup_name = v;
    else if (strcmp(a, "--user") == 0)
        r->run_as = v;
    else if (strcmp(a, "--env") == 0)
        sbx_strv_push(&r->env, v);
    else if (strcmp(a, "--net") == 0 && strcmp(v, "none") == 0)
        r->spec.net = SBX__NET_NONE;
    else if (strcmp(a, "--net") == 0 && strcmp(v, "full") == 0)
        r->spec.net = SBX__NET_FULL;
    else if (strcmp(a, "--net") == 0)
        return usage("unknown network mode '%s' (none, full)", v);
    else if (strcmp(a, "--users") == 0)
        parse_users(r, v);
    else if (strcmp(a, "--group") == 0)
        return parse_group(r, v);
    else if (strcmp(a, "--grant") == 0)
        return parse_grant(r, v);
    else
        return parse_limit(r, a, v);
    return RUN_OK;
}

/* Run argv in a fresh sandbox of r: its exit status, or 128 + the signal that ended it, with
 * the reason on stderr when a limit explains the end. */
static int run(struct run_args *r, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf describe;
    int status = 0, ret;
    r->spec.env = (const char *const *)r->env.v;
    r->spec.host_home = getenv("HOME");
    sbx_buf_init(&describe, 1024);
    fflush(stdout);
    fflush(stderr);
    if (sbx__isolation_run(&r->spec, r->run_as, argv, &status, &describe, &err) < 0) {
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
    return ret;
}

int sbx_local_isolate_run_main(int argc, char **argv)
{
    struct run_args r;
    int i, ret = RUN_OK;
    memset(&r, 0, sizeof(r));
    sbx_strv_init(&r.env);
    sbx_strv_init(&r.words);
    for (i = 1; i < argc && ret == RUN_OK; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            goto out;
        }
        if (i + 1 >= argc)
            ret = usage("option '%s' needs a value", a);
        else
            ret = parse_option(&r, a, argv[++i]);
    }
    if (ret != RUN_OK)
        goto out;
    if (!r.spec.workspace)
        ret = usage("missing --workspace");
    else if (i >= argc)
        ret = usage("missing command after '--'");
    else
        ret = run(&r, argv + i);
out:
    sbx_strv_release(&r.env);
    sbx_strv_release(&r.words);
    return ret;
}
