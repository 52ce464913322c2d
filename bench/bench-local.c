/* bench-local: latency of local sandbox operations. Prints median and p95 over N runs.
 *
 *   bench-local [N [DIR [MODE]]]  N runs (default 30); runtime and workspaces under DIR
 *                                 (default /tmp); MODE isolated, none or both (default);
 *                                 SBX_SUPERVISOR names the supervisor program
 *
 * Numbers only: nothing here passes or fails. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/local/program.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/session.h"
#include "sbx/time.h"

enum {
    M_CREATE_EMPTY,
    M_CREATE_200,
    M_CREATE_2000,
    M_FIRST_EXEC,
    M_EXEC_ECHO,
    M_PTY_FIRST_OUTPUT,
    M_FILE_1MB,
    M_CLOSE,
    M_COUNT,
};

static const char *const names[M_COUNT] = {
        "create (empty manifest)",    "create (200 files x 4 KB)",
        "create (2000 files x 4 KB)", "first exec after create",
        "exec round trip (echo)",     "PTY start + first output",
        "write + read 1 MB file",     "close (delete)",
};

static double *samples[M_COUNT];
static int nsamples[M_COUNT];

static void record(int m, int64_t ns)
{
    samples[m][nsamples[m]++] = (double)ns / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, const struct sbx_error *err)
{
    fprintf(stderr, "bench-local: %s: %s\n", what, err->msg);
    exit(1);
}

static struct sbx_manifest *files_manifest(int n)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new();
    char data[4096];
    memset(data, 'x', sizeof(data));
    for (int i = 0; i < n; i++) {
        char path[64];
        snprintf(path, sizeof(path), "d%02d/f%04d.txt", i % 20, i);
        if (sbx_manifest_add_file(m, path, data, sizeof(data), NULL, &err) < 0)
            die("manifest", &err);
    }
    return m;
}

/* RSS in KiB of the processes whose cmdline is "… __supervise <id>" (an isolated sandbox has
 * three: host side, middle, PID 1), summed. */
static long supervisor_rss(const char *id)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    long rss = 0;
    while (d && (e = readdir(d))) {
        char path[300], buf[4096];
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        const char *verb = buf + strlen(buf) + 1;
        if (verb >= buf + n || strcmp(verb, SBX_LOCAL_SUPERVISE_VERB) != 0 ||
            strcmp(verb + strlen(verb) + 1, id) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "re");
        long one;
        while (f && fgets(buf, sizeof(buf), f))
            if (sscanf(buf, "VmRSS: %ld", &one) == 1) {
                rss += one;
                break;
            }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return rss;
}

static int bench(int runs, const char *under, enum sbx_local_isolation iso)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    char tmp[256];
    snprintf(tmp, sizeof(tmp), "%s/sbx-bench.XXXXXX", under);
    if (!mkdtemp(tmp))
        return 2;
    char run[300], ws[300];
    snprintf(run, sizeof(run), "%s/run", tmp);
    snprintf(ws, sizeof(ws), "%s/ws", tmp);
    mkdir(run, 0700);
    struct sbx_local_options o = {.runtime_dir = run, .workspace_dir = ws, .isolation = iso};
    if (sbx_client_new("local", &o, &c, &err) < 0)
        die("client", &err);
    for (int m = 0; m < M_COUNT; m++) {
        samples[m] = calloc((size_t)runs, sizeof(double));
        nsamples[m] = 0;
    }
    struct sbx_manifest *m200 = files_manifest(200), *m2000 = files_manifest(2000);
    char *mb = malloc(1 << 20);
    memset(mb, 'y', 1 << 20);
    long rss = -1;

    for (int r = 0; r < runs; r++) {
        struct sbx_session *s = NULL, *s2 = NULL;
        struct sbx_exec_result res;
        struct sbx_exec_spec echo = {.argv = (const char *const[]){"echo", "hi", NULL}};

        int64_t t0 = sbx_time_mono_ns();
        if (sbx_client_create(c, NULL, &s, &err) < 0)
            die("create", &err);
        record(M_CREATE_EMPTY, sbx_time_mono_ns() - t0);

        t0 = sbx_time_mono_ns();
        if (sbx_session_exec(s, &echo, &res, &err) < 0)
            die("exec", &err);
        record(M_FIRST_EXEC, sbx_time_mono_ns() - t0);
        sbx_exec_result_release(&res);

        t0 = sbx_time_mono_ns();
        if (sbx_session_exec(s, &echo, &res, &err) < 0)
            die("exec", &err);
        record(M_EXEC_ECHO, sbx_time_mono_ns() - t0);
        sbx_exec_result_release(&res);

        struct sbx_proc *p = NULL;
        struct sbx_exec_spec tty = {.command = "echo ready; exec sleep 100", .flags = SBX_EXEC_TTY};
        t0 = sbx_time_mono_ns();
        if (sbx_session_exec_start(s, &tty, &p, &err) < 0)
            die("pty", &err);
        struct pollfd pfd = {.fd = p->stdout_fd, .events = POLLIN};
        char b[256];
        if (poll(&pfd, 1, 10000) != 1 || read(p->stdout_fd, b, sizeof(b)) <= 0) {
            fprintf(stderr, "bench-local: no terminal output\n");
            return 1;
        }
        record(M_PTY_FIRST_OUTPUT, sbx_time_mono_ns() - t0);
        sbx_proc_free(p);

        struct sbx_buf back;
        sbx_buf_init(&back, 2 << 20);
        t0 = sbx_time_mono_ns();
        if (sbx_session_write(s, "mb.bin", mb, 1 << 20, 0, 0, &err) < 0 ||
            sbx_session_read(s, "mb.bin", 0, &back, &err) < 0)
            die("file", &err);
        record(M_FILE_1MB, sbx_time_mono_ns() - t0);
        sbx_buf_release(&back);

        if (r == 0)
            rss = supervisor_rss(sbx_session_id(s));

        t0 = sbx_time_mono_ns();
        if (sbx_session_delete(s, &err) < 0)
            die("close", &err);
        record(M_CLOSE, sbx_time_mono_ns() - t0);
        sbx_session_free(s);

        struct sbx_create_spec spec = {.manifest = m200};
        t0 = sbx_time_mono_ns();
        if (sbx_client_create(c, &spec, &s2, &err) < 0)
            die("create 200", &err);
        record(M_CREATE_200, sbx_time_mono_ns() - t0);
        sbx_session_delete(s2, &err);
        sbx_session_free(s2);

        spec.manifest = m2000;
        t0 = sbx_time_mono_ns();
        if (sbx_client_create(c, &spec, &s2, &err) < 0)
            die("create 2000", &err);
        record(M_CREATE_2000, sbx_time_mono_ns() - t0);
        sbx_session_delete(s2, &err);
        sbx_session_free(s2);
    }

    printf("%-30s %10s %10s   (ms, %d runs, under %s, isolation %s)\n", "operation", "median",
           "p95", runs, under, iso == SBX_LOCAL_ISOLATION_NONE ? "none" : "namespaces");
    for (int m = 0; m < M_COUNT; m++) {
        qsort(samples[m], (size_t)nsamples[m], sizeof(double), cmp);
        int n = nsamples[m];
        double med = n % 2 ? samples[m][n / 2] : (samples[m][n / 2 - 1] + samples[m][n / 2]) / 2;
        int i95 = (int)(0.95 * (n - 1) + 0.5);
        printf("%-30s %10.3f %10.3f\n", names[m], med, samples[m][i95]);
        free(samples[m]);
    }
    printf("%-30s %10ld KiB\n", "idle supervisor RSS", rss);

    sbx_manifest_free(m200);
    sbx_manifest_free(m2000);
    free(mb);
    sbx_client_free(c);
    rmdir(ws);
    rmdir(run);
    rmdir(tmp);
    return 0;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 30;
    const char *under = argc > 2 ? argv[2] : "/tmp", *mode = argc > 3 ? argv[3] : "both";
    int rc = 0;
    if (runs < 1)
        return 2;
    if (strcmp(mode, "isolated") == 0 || strcmp(mode, "both") == 0)
        rc = bench(runs, under, SBX_LOCAL_ISOLATION_DEFAULT);
    if (rc == 0 && (strcmp(mode, "none") == 0 || strcmp(mode, "both") == 0)) {
        if (strcmp(mode, "both") == 0)
            printf("\n");
        rc = bench(runs, under, SBX_LOCAL_ISOLATION_NONE);
    }
    return rc;
}
