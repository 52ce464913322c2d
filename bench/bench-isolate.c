/* bench-isolate: the cost of the local sandbox isolation, in isolation from the supervisor.
 *   create+close: sbx__isolation_new + enter (namespaces, cgroups, root, pivot) + end + wait
 *   command:      inside one sandbox, fork + sbx__isolation_child + execve /bin/true + wait
 * Prints median and p95 in milliseconds. Numbers, not pass/fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "providers/local/isolate/isolate.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    printf("%-34s n=%-4d median %7.3f ms   p95 %7.3f ms\n", what, n, v[n / 2], v[(int)(n * 0.95)]);
}

static int fail(const struct sbx_error *err)
{
    fprintf(stderr, "bench-isolate: %s\n", err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 50, ncmd = 200;
    if (n < 1)
        n = 1;
    char ws[] = "/tmp/sbx-bench-XXXXXX";
    if (!mkdtemp(ws))
        return 1;
    chmod(ws, 0755);
    for (int i = 0; i < 200; i++) {
        char p[64];
        snprintf(p, sizeof(p), "%s/f%03d", ws, i);
        FILE *f = fopen(p, "w");
        if (f) {
            fputs("x\n", f);
            fclose(f);
        }
    }
    struct sbx__isolation_spec spec = {0};
    spec.workspace = ws;
    if (geteuid() == 0)
        spec.cgroup_name = "sbx-bench";
    struct sbx_error err = SBX_ERROR_INIT;
    double *t = calloc((size_t)(n > 3 * ncmd ? n : 3 * ncmd), sizeof(double));

    for (int i = 0; i < n; i++) {
        struct sbx__isolation *iso = NULL;
        enum sbx__isolation_role role;
        double t0 = now_ms();
        if (sbx__isolation_new(&spec, &iso, &err) < 0 || sbx__isolation_enter(iso, &role, &err) < 0)
            return fail(&err);
        if (role == SBX__ISOLATION_INNER)
            _exit(0);
        int st;
        if (sbx__isolation_outer_wait(iso, &st, &err) < 0)
            return fail(&err);
        sbx__isolation_free(iso);
        t[i] = now_ms() - t0;
    }
    report("create + close (200-file workspace)", t, n);

    int res[2];
    if (pipe(res) < 0)
        return 1;
    struct sbx__isolation *iso = NULL;
    enum sbx__isolation_role role;
    if (sbx__isolation_new(&spec, &iso, &err) < 0 || sbx__isolation_enter(iso, &role, &err) < 0)
        return fail(&err);
    if (role == SBX__ISOLATION_INNER) {
        struct sbx__run_as ra;
        struct sbx_strv env;
        sbx_strv_init(&env);
        if (sbx__isolation_user(iso, NULL, &ra, &err) < 0 ||
            sbx__isolation_env(iso, &ra, NULL, NULL, &env, &err) < 0)
            _exit(1);
        char *args[] = {"/bin/true", NULL};
        /* mode 0: the full command path; 1: without the isolation child (baseline);
         * 2: the isolation child alone (no exec) */
        for (int mode = 0; mode < 3; mode++) {
            for (int i = 0; i < ncmd; i++) {
                double t0 = now_ms();
                pid_t p = fork();
                if (p == 0) {
                    if (mode != 1 && sbx__isolation_child(iso, &ra, &err) < 0)
                        _exit(126);
                    if (mode != 2)
                        execve(args[0], args, env.v);
                    _exit(mode == 2 ? 0 : 127);
                }
                int st;
                waitpid(p, &st, 0);
                t[mode * ncmd + i] = now_ms() - t0;
            }
        }
        if (write(res[1], t, sizeof(double) * 3 * (size_t)ncmd) < 0)
            _exit(1);
        _exit(0);
    }
    close(res[1]);
    size_t got = 0, want = sizeof(double) * 3 * (size_t)ncmd;
    while (got < want) {
        ssize_t r = read(res[0], (char *)t + got, want - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    int st;
    sbx__isolation_outer_wait(iso, &st, &err);
    sbx__isolation_free(iso);
    if (got == want) {
        report("command: fork+child+exec true+wait", t, ncmd);
        report("baseline: fork+exec true+wait", t + ncmd, ncmd);
        report("isolation child alone: fork+child", t + 2 * ncmd, ncmd);
    }
    free(t);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "%s", ws);
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/rm", "rm", "-rf", cmd, (char *)NULL);
        _exit(127);
    }
    waitpid(p, NULL, 0);
    return 0;
}
