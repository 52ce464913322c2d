/* bench-docker: create / exec `true` / remove, for the Docker provider against dockerd and
 * podman, next to the local provider and next to the docker CLI doing the same
 * (`docker run -d`, `docker exec`, `docker rm -f`) against the same engines. Prints the median
 * of each step in milliseconds and the ratios, from one run: the columns' runs interleaved
 * (round i of every column, then round i+1), the load average printed with them.
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
/* A column: the session API of a provider, or the docker CLI against an engine. Its runs are
 * interleaved with the other columns' (one round of each column in turn), so a load swing on
 * this shared machine falls on every column alike. */
struct column {
    char name[64];
    int ok;     /* 1 while its rounds succeed */
    int failed; /* a round failed: why says what */
    double med[S_COUNT];
    double *v[S_COUNT];
    char why[SBX_ERROR_MSG_MAX];
    struct sbx_client *cl; /* API columns */
    const char *prog;      /* CLI columns: the program, the engine, the image */
    char host[200];
    const char *image;
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

static struct column *add_column(const char *name, int runs)
{
    struct column *c = &cols[ncols++];
    snprintf(c->name, sizeof(c->name), "%s", name);
    for (int s = 0; s < S_COUNT; s++)
        c->v[s] = calloc((size_t)runs, sizeof(double));
    return c;
}

/* A column through the session API: client from provider + options. */
static void add_api(const char *name, const char *provider, const void *opts, int runs)
{
    struct column *c = add_column(name, runs);
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_client_new(provider, opts, &c->cl, &err) < 0) {
        c->failed = 1;
        snprintf(c->why, sizeof(c->why), "%s", err.msg);
    }
}

/* Round i of an API column: create, exec `true`, delete. */
static int round_api(struct column *c, int i)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *const tru[] = {"true", NULL};
    struct sbx_exec_spec spec = {.argv = tru};
    struct sbx_session *s = NULL;
    int64_t t0 = sbx_time_mono_ns();
    if (sbx_client_create(c->cl, NULL, &s, &err) < 0)
        goto fail;
    c->v[S_CREATE][i] = ms_since(t0);
    struct sbx_exec_result r;
    t0 = sbx_time_mono_ns();
    int rc = sbx_session_exec(s, &spec, &r, &err);
    c->v[S_EXEC][i] = ms_since(t0);
    if (rc == 0)
        sbx_exec_result_release(&r);
    struct sbx_error derr = SBX_ERROR_INIT;
    t0 = sbx_time_mono_ns();
    int drc = sbx_session_delete(s, &derr);
    c->v[S_RM][i] = ms_since(t0);
    sbx_session_free(s);
    if (rc == 0 && drc < 0)
        err = derr;
    if (rc == 0 && drc == 0)
        return 0;
fail:
    snprintf(c->why, sizeof(c->why), "%s", err.msg);
    return -1;
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

static void add_cli(const char *name, const char *prog, const char *sock, const char *image,
                    int runs)
{
    struct column *c = add_column(name, runs);
    c->prog = prog;
    c->image = image;
    snprintf(c->host, sizeof(c->host), "unix://%s", sock);
}

/* Round i of a CLI column: `run -d`, `exec true`, `rm -f`. */
static int round_cli(struct column *c, int i)
{
    char cname[64];
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
                         c->image,
                         "sleep",
                         "infinity",
                         NULL};
    const char *ex[] = {"exec", cname, "true", NULL};
    const char *rm[] = {"rm", "-f", cname, NULL};
    int64_t t0 = sbx_time_mono_ns();
    int rc = cli(c->prog, c->host, run);
    c->v[S_CREATE][i] = ms_since(t0);
    if (rc < 0) {
        (void)cli(c->prog, c->host, rm);
        snprintf(c->why, sizeof(c->why), "'%s run' failed", c->prog);
        return -1;
    }
    t0 = sbx_time_mono_ns();
    rc = cli(c->prog, c->host, ex);
    c->v[S_EXEC][i] = ms_since(t0);
    t0 = sbx_time_mono_ns();
    int rrc = cli(c->prog, c->host, rm);
    c->v[S_RM][i] = ms_since(t0);
    if (rc < 0 || rrc < 0) {
        snprintf(c->why, sizeof(c->why), "'%s %s' failed", c->prog, rc < 0 ? "exec" : "rm -f");
        return -1;
    }
    return 0;
}

/* Every column's round i, in turn, then the next i; a column that fails stops there. */
static void run_interleaved(int runs)
{
    for (int i = 0; i < runs; i++)
        for (int k = 0; k < ncols; k++) {
            struct column *c = &cols[k];
            if (!c->failed && (c->prog ? round_cli(c, i) : round_api(c, i)) < 0)
                c->failed = 1;
        }
    for (int k = 0; k < ncols; k++) {
        struct column *c = &cols[k];
        c->ok = !c->failed;
        for (int s = 0; s < S_COUNT; s++) {
            if (c->ok)
                c->med[s] = median(c->v[s], runs);
            free(c->v[s]);
        }
        sbx_client_free(c->cl);
    }
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
    add_api("local", "local", &lo, runs);
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
        add_api(name, "docker", &dopt, runs);
        snprintf(name, sizeof(name), "docker CLI/%s", engines[e].engine);
        add_cli(name, prog, sock, image, runs);
    }
    char load[64] = "?";
    FILE *lf = fopen("/proc/loadavg", "re");
    if (lf) {
        if (fgets(load, sizeof(load), lf))
            load[strcspn(load, " ")] = '\0'; /* the 1-minute figure */
        fclose(lf);
    }
    run_interleaved(runs);

    printf("median ms over %d runs (image %s), the columns interleaved round by round, load %s\n",
           runs, image, load);
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
