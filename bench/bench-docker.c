/* bench-docker: create / exec `true` / remove, for the Docker provider against dockerd and
 * podman, next to the local provider and next to the docker CLI doing the same
 * (`docker run -d`, `docker exec`, `docker rm -f`) against the same engines. Prints the median
 * of each step in milliseconds and the ratios, from one run.
 *
 *   bench-docker [RUNS]   RUNS per column (default 10)
 *   SBX_TEST_DOCKER_HOST, SBX_TEST_PODMAN_HOST  engine sockets (a missing one is left out)
 *   SBX_TEST_DOCKER_IMAGE                       image (default sbx-test:1)
 *   SBX_BENCH_DOCKER_CLI                        the docker program (default: docker on PATH)
 *   SBX_SUPERVISOR                              the local provider's supervisor
 *
 * Numbers only: nothing here passes or fails. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbx/docker.h"
#include "sbx/fs.h"
#include "sbx/local.h"
#include "sbx/session.h"
#include "sbx/time.h"

enum { S_CREATE, S_EXEC, S_RM, S_COUNT };
static const char *const step_names[S_COUNT] = {"create", "exec true", "rm"};

#define MAX_COLS 5
struct column {
    char name[64];
    int ok;
    double med[S_COUNT];
    char why[SBX_ERROR_MSG_MAX];
};
static struct column cols[MAX_COLS];
static int ncols;

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double ms_since(int64_t t0)
{
    return (double)(sbx_time_mono_ns() - t0) / 1e6;
}

/* One column through the session API: client from provider + options. */
static void bench_api(const char *name, const char *provider, const void *opts, int runs)
{
    struct column *c = &cols[ncols++];
    snprintf(c->name, sizeof(c->name), "%s", name);
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    double *v[S_COUNT];
    for (int s = 0; s < S_COUNT; s++)
        v[s] = calloc((size_t)runs, sizeof(double));
    if (sbx_client_new(provider, opts, &cl, &err) < 0)
        goto fail;
    const char *const tru[] = {"true", NULL};
    struct sbx_exec_spec spec = {.argv = tru};
    for (int i = 0; i < runs; i++) {
        struct sbx_session *s = NULL;
        int64_t t0 = sbx_time_mono_ns();
        if (sbx_client_create(cl, NULL, &s, &err) < 0)
            goto fail;
        v[S_CREATE][i] = ms_since(t0);
        struct sbx_exec_result r;
        t0 = sbx_time_mono_ns();
        int rc = sbx_session_exec(s, &spec, &r, &err);
        v[S_EXEC][i] = ms_since(t0);
        if (rc == 0)
            sbx_exec_result_release(&r);
        t0 = sbx_time_mono_ns();
        int drc = sbx_session_delete(s, &err);
        v[S_RM][i] = ms_since(t0);
        sbx_session_free(s);
        if (rc < 0 || drc < 0)
            goto fail;
    }
    for (int s = 0; s < S_COUNT; s++)
        c->med[s] = median(v[s], runs);
    c->ok = 1;
    goto out;
fail:
    snprintf(c->why, sizeof(c->why), "%s", err.msg);
out:
    sbx_client_free(cl);
    for (int s = 0; s < S_COUNT; s++)
        free(v[s]);
}

/* Run the docker CLI with argv (after the program and -H), output to /dev/null; 0 if it
 * exited 0. */
static int cli(const char *prog, const char *host, const char *const *args)
{
    const char *argv[24];
    int n = 0;
    argv[n++] = prog;
    argv[n++] = "-H";
    argv[n++] = host;
    for (int i = 0; args[i] && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(prog, (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void bench_cli(const char *name, const char *prog, const char *sock, const char *image,
                      int runs)
{
    struct column *c = &cols[ncols++];
    snprintf(c->name, sizeof(c->name), "%s", name);
    char host[200], cname[64];
    snprintf(host, sizeof(host), "unix://%s", sock);
    double *v[S_COUNT];
    for (int s = 0; s < S_COUNT; s++)
        v[s] = calloc((size_t)runs, sizeof(double));
    for (int i = 0; i < runs; i++) {
        snprintf(cname, sizeof(cname), "sbx-bench-%d-%d", (int)getpid(), i);
        /* Explicit rlimits: podman's compat API otherwise asks for nofile 1048576 and a large
         * nproc, which fail (EPERM) under a lower hard limit such as this machine's. */
        const char *run[] = {"run",
                             "-d",
                             "--init",
                             "--network",
                             "none",
                             "--ulimit",
                             "nofile=1024:1024",
                             "--ulimit",
                             "nproc=1024:1024",
                             "--name",
                             cname,
                             image,
                             "sleep",
                             "infinity",
                             NULL};
        const char *ex[] = {"exec", cname, "true", NULL};
        const char *rm[] = {"rm", "-f", cname, NULL};
        int64_t t0 = sbx_time_mono_ns();
        int rc = cli(prog, host, run);
        v[S_CREATE][i] = ms_since(t0);
        if (rc < 0) {
            (void)cli(prog, host, rm);
            snprintf(c->why, sizeof(c->why), "'%s run' failed", prog);
            goto out;
        }
        t0 = sbx_time_mono_ns();
        rc = cli(prog, host, ex);
        v[S_EXEC][i] = ms_since(t0);
        t0 = sbx_time_mono_ns();
        int rrc = cli(prog, host, rm);
        v[S_RM][i] = ms_since(t0);
        if (rc < 0 || rrc < 0) {
            snprintf(c->why, sizeof(c->why), "'%s %s' failed", prog, rc < 0 ? "exec" : "rm -f");
            goto out;
        }
    }
    for (int s = 0; s < S_COUNT; s++)
        c->med[s] = median(v[s], runs);
    c->ok = 1;
out:
    for (int s = 0; s < S_COUNT; s++)
        free(v[s]);
}

static struct column *col(const char *name)
{
    for (int i = 0; i < ncols && i < MAX_COLS; i++)
        if (cols[i].ok && strcmp(cols[i].name, name) == 0)
            return &cols[i];
    return NULL;
}

static void ratio_line(const char *a, const char *b)
{
    struct column *x = col(a), *y = col(b);
    if (!x || !y)
        return;
    printf("  %s / %s:", a, b);
    for (int s = 0; s < S_COUNT; s++)
        printf("  %s %.2fx", step_names[s], x->med[s] / y->med[s]);
    printf("  total %.2fx\n",
           (x->med[0] + x->med[1] + x->med[2]) / (y->med[0] + y->med[1] + y->med[2]));
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 10;
    if (runs < 1 || runs > 1000) {
        fprintf(stderr, "usage: bench-docker [RUNS (1..1000)]\n");
        return 2;
    }
    const char *image = getenv("SBX_TEST_DOCKER_IMAGE");
    image = image && image[0] ? image : "sbx-test:1";
    const char *prog = getenv("SBX_BENCH_DOCKER_CLI");
    prog = prog && prog[0] ? prog : "docker";
    char tmp[] = "/tmp/sbx-bench-docker.XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    char run_dir[64], ws_dir[64];
    snprintf(run_dir, sizeof(run_dir), "%s/run", tmp);
    snprintf(ws_dir, sizeof(ws_dir), "%s/ws", tmp);
    mkdir(run_dir, 0700);

    struct sbx_local_options lo = {.runtime_dir = run_dir, .workspace_dir = ws_dir};
    bench_api("local", "local", &lo, runs);
    const struct {
        const char *engine, *env;
    } engines[] = {{"dockerd", "SBX_TEST_DOCKER_HOST"}, {"podman", "SBX_TEST_PODMAN_HOST"}};
    for (size_t e = 0; e < 2; e++) {
        const char *sock = getenv(engines[e].env);
        if (!sock || !sock[0])
            continue;
        char name[64];
        snprintf(name, sizeof(name), "sbx docker/%s", engines[e].engine);
        struct sbx_docker_options dopt = {.host = sock, .image = image};
        bench_api(name, "docker", &dopt, runs);
        snprintf(name, sizeof(name), "docker CLI/%s", engines[e].engine);
        bench_cli(name, prog, sock, image, runs);
    }

    printf("median ms over %d runs (image %s)\n", runs, image);
    printf("%-34s %10s %10s %10s %10s\n", "", step_names[0], step_names[1], step_names[2], "total");
    for (int i = 0; i < ncols; i++) {
        struct column *c = &cols[i];
        if (!c->ok) {
            printf("%-34s unavailable: %s\n", c->name, c->why);
            continue;
        }
        printf("%-34s %10.1f %10.1f %10.1f %10.1f\n", c->name, c->med[0], c->med[1], c->med[2],
               c->med[0] + c->med[1] + c->med[2]);
    }
    printf("ratios:\n");
    ratio_line("sbx docker/dockerd", "docker CLI/dockerd");
    ratio_line("sbx docker/podman", "docker CLI/podman");
    ratio_line("sbx docker/dockerd", "local");
    ratio_line("sbx docker/podman", "local");
    ratio_line("docker CLI/dockerd", "local");
    ratio_line("docker CLI/podman", "local");

    int dfd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct sbx_error err = SBX_ERROR_INIT;
    if (dfd >= 0) {
        (void)sbx_fs_remove(dfd, tmp + 5, SBX_FS_RECURSIVE, &err);
        close(dfd);
    }
    return 0;
}
