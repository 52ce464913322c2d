/* bench-cli-startup: what a short sbx command costs, against the floors it is judged by.
 *   posix_spawn /bin/true                      the bare spawn floor
 *   bwrap --unshare-all --ro-bind / / true     bubblewrap in fresh namespaces (row skipped
 *                                              when bwrap is not installed)
 *   sbx version                                the CLI's own start-up
 *   sbx sandbox exec ID -- true                exec on a warm sandbox (made here, default
 *                                              isolation, removed at the end)
 *   the same, --isolation none                 what of it is the isolation's (no target)
 *   the same, previous sbx                     with SBX_PREV set to another build's sbx: the
 *                                              same exec on a sandbox that sbx made (so its own
 *                                              supervisor, the sbx-supervisor beside it unless
 *                                              SBX_SUPERVISOR says otherwise), interleaved with
 *                                              the others, for a before/after ratio of client
 *                                              and supervisor together
 * Each sample is one posix_spawn + waitpid timed by the monotonic clock; the rows run
 * interleaved (A B C D A B C D ...) and report medians, so a machine that slows down mid-run
 * slows every row alike. Prints TABLE lines for issue 15's targets (bench/README.md).
 * Usage: bench-cli-startup [SBX [N]]; SBX defaults to $SBX, N to 200 (30 with
 * SBX_BENCH_QUICK); SBX_PREV (optional) a previous build's sbx. Runs in a private XDG_RUNTIME_DIR /
 * SBX_WORKSPACES under /tmp. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define ROWS 6

static volatile sig_atomic_t stop;
static char tmp[] = "/tmp/sbx-bench-cli.XXXXXX";

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

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

/* Run argv with stdin, stdout and stderr on /dev/null (or stdout into out_fd when >= 0);
 * the exit status, or -1 when it could not be spawned. */
static int run(char *const *argv, int out_fd)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* sbx sandbox create [--isolation ISOLATION] into id (size 128); 0 or -1. */
static int create(char *sbx, char *isolation, const char *idfile, char *id)
{
    char *argv[] = {sbx, "sandbox", "create", isolation ? "--isolation" : NULL, isolation, NULL};
    int fd = open(idfile, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || run(argv, fd) != 0) {
        fprintf(stderr, "bench-cli-startup: '%s sandbox create' (isolation %s) failed\n", sbx,
                isolation ? isolation : "default");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    ssize_t got = pread(fd, id, 127, 0);
    close(fd);
    id[got > 0 ? got : 0] = '\0';
    id[strcspn(id, "\n")] = '\0';
    return id[0] ? 0 : -1;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[4096];
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, prog);
        if (access(buf, X_OK) == 0)
            return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

int main(int argc, char **argv)
{
    char *sbx = argc > 1 ? argv[1] : getenv("SBX");
    int n = argc > 2 ? (int)strtol(argv[2], NULL, 10) : getenv("SBX_BENCH_QUICK") ? 30 : 200;
    if (!sbx || !sbx[0] || n < 1) {
        fprintf(stderr, "usage: bench-cli-startup [SBX [N]] (or SBX in the environment)\n");
        return 2;
    }
    if (!mkdtemp(tmp)) {
        perror("bench-cli-startup: mkdtemp");
        return 1;
    }
    char run_dir[64], ws[64], stopped[64], snaps[64], idfile[64];
    snprintf(run_dir, sizeof(run_dir), "%s/run", tmp);
    snprintf(ws, sizeof(ws), "%s/ws", tmp);
    snprintf(stopped, sizeof(stopped), "%s/stopped", tmp);
    snprintf(snaps, sizeof(snaps), "%s/snapshots", tmp);
    snprintf(idfile, sizeof(idfile), "%s/id", tmp);
    mkdir(run_dir, 0700);
    setenv("XDG_RUNTIME_DIR", run_dir, 1);
    setenv("SBX_WORKSPACES", ws, 1);
    setenv("SBX_STOPPED", stopped, 1);
    setenv("SBX_SNAPSHOTS", snaps, 1);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    int status = 1;
    char id[128] = "", id_none[128] = "", id_prev[128] = "";
    char *prev = getenv("SBX_PREV");
    int have_prev = prev && prev[0];
    if (create(sbx, NULL, idfile, id) < 0 || create(sbx, "none", idfile, id_none) < 0 ||
        (have_prev && create(prev, NULL, idfile, id_prev) < 0))
        goto out;

    int have_bwrap = on_path("bwrap");
    char *bwrap[] = {"bwrap", "--unshare-all", "--ro-bind", "/", "/", "/bin/true", NULL};
    if (have_bwrap && run(bwrap, -1) != 0) {
        fprintf(stderr, "bench-cli-startup: bwrap cannot make namespaces here; its row is "
                        "skipped\n");
        have_bwrap = 0;
    } else if (!have_bwrap) {
        fprintf(stderr, "bench-cli-startup: bwrap not installed (apt-get install bubblewrap); "
                        "its row is skipped\n");
    }
    char *truecmd[] = {"/bin/true", NULL};
    char *version[] = {sbx, "version", NULL};
    char *exec[] = {sbx, "sandbox", "exec", id, "--", "true", NULL};
    char *exec_none[] = {sbx, "sandbox", "exec", id_none, "--", "true", NULL};
    char *exec_prev[] = {prev, "sandbox", "exec", id_prev, "--", "true", NULL};
    char *const *cmds[ROWS] = {truecmd, bwrap, version, exec, exec_none, exec_prev};
    const char *names[ROWS] = {"posix_spawn /bin/true",
                               "bwrap --unshare-all /bin/true",
                               "sbx version",
                               "sbx sandbox exec ID -- true",
                               "  the same, --isolation none",
                               "  the same, previous sbx"};
    /* Rows this run leaves out: bwrap when it cannot run, the previous sbx when none is given. */
#define SKIP(r) (((r) == 1 && !have_bwrap) || ((r) == 5 && !have_prev))
    double *t[ROWS];
    for (int r = 0; r < ROWS; r++)
        t[r] = calloc((size_t)n, sizeof(double));
    for (int r = 0; r < ROWS; r++)
        for (int w = 0; w < 5 && !SKIP(r); w++)
            if (run(cmds[r], -1) != 0) {
                fprintf(stderr, "bench-cli-startup: '%s' failed\n", names[r]);
                goto out;
            }
    int done = 0;
    for (; done < n && !stop; done++)
        for (int r = 0; r < ROWS; r++) {
            if (SKIP(r))
                continue;
            double t0 = now_ms();
            int rc = run(cmds[r], -1);
            t[r][done] = now_ms() - t0;
            if (rc != 0) {
                fprintf(stderr, "bench-cli-startup: '%s' failed (status %d)\n", names[r], rc);
                goto out;
            }
        }
    if (stop)
        goto out;
    double med[ROWS] = {0};
    for (int r = 0; r < ROWS; r++) {
        if (SKIP(r))
            continue;
        qsort(t[r], (size_t)n, sizeof(double), cmp);
        med[r] = t[r][n / 2];
        printf("%-32s n=%-4d median %7.3f ms   p95 %7.3f ms\n", names[r], n, med[r],
               t[r][(int)(n * 0.95)]);
    }
    printf("sbx version / posix_spawn: %.2fx\n", med[2] / med[0]);
    double r0 = med[3] / med[0];
    printf("TABLE|sbx sandbox exec ID -- true (warm sandbox)|%.2f ms|posix_spawn /bin/true|%.2f "
           "ms|%.2fx|<= 3x|%s\n",
           med[3], med[0], r0, r0 <= 3 ? "met" : "missed");
    if (have_prev) {
        double rp = med[5] / med[0];
        printf("TABLE|previous sbx: sandbox exec ID -- true (warm sandbox)|%.2f ms|posix_spawn "
               "/bin/true|%.2f ms|%.2fx|<= 3x|%s\n",
               med[5], med[0], rp, rp <= 3 ? "met" : "missed");
        printf("sbx sandbox exec: this sbx / previous sbx: %.2fx\n", med[3] / med[5]);
    }
    if (have_bwrap) {
        double r1 = med[3] / med[1];
        printf("TABLE|sbx sandbox exec ID -- true (warm sandbox)|%.2f ms|bwrap --unshare-all "
               "/bin/true|%.2f ms|%.2fx|<= 1x|%s\n",
               med[3], med[1], r1, r1 <= 1 ? "met" : "missed");
    }
    status = 0;
out:
    for (char *ids[] = {id, id_none, id_prev, NULL}, **p = ids; *p; p++) {
        char *rm[] = {*p == id_prev ? prev : sbx, "sandbox", "rm", *p, NULL};
        if ((*p)[0] && run(rm, -1) != 0)
            fprintf(stderr, "bench-cli-startup: cannot remove sandbox '%s'\n", *p);
    }
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return stop ? 130 : status;
}
