/* bench-remote: N concurrent remote commands on one client, and what they cost this process:
 * threads and file descriptors, measured while all of them stream.
 *
 * The commands are docker commands (the provider's real code: exec, hijacked connection, the
 * verdict, the remote layer's event loop, exit status) against bench/fake-engine.py, a stand-in
 * engine on a unix socket written with Python's asyncio, so that the engine is not what limits
 * the count: each command writes LINES lines of 64 bytes, INTERVAL_MS apart, then exits 0. One
 * thread of this program reads every command's output (one poll over all their descriptors)
 * while the commands stream.
 *
 * Usage: bench-remote [N [LINES [INTERVAL_MS]]]   (defaults 1000 50 100; N 200 with
 * SBX_BENCH_QUICK=1). Needs python3; SBX_SRCDIR or the current directory's ".." for the engine's
 * script. Prints the figures and a TABLE line (threads against a thread per command). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbx/docker.h"
#include "sbx/session.h"
#include "sbx/time.h"

#define SID "0123456789abcdef"

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - (d && strcmp(path, "/proc/self/fd") == 0); /* opendir's own */
}

static pid_t engine_pid = -1;
static int engine_in = -1;

static int start_engine(const char *sock, int lines, int interval)
{
    const char *top = getenv("SBX_SRCDIR");
    char script[4096], l[16], iv[16];
    snprintf(script, sizeof(script), "%s/bench/fake-engine.py", top && top[0] ? top : "..");
    snprintf(l, sizeof(l), "%d", lines);
    snprintf(iv, sizeof(iv), "%d", interval);
    int out[2], in[2];
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(in, O_CLOEXEC) < 0)
        return -1;
    engine_pid = fork();
    if (engine_pid == 0) {
        dup2(out[1], 1);
        dup2(in[0], 0);
        execlp("python3", "python3", script, sock, l, iv, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    engine_in = in[1];
    char buf[16] = {0};
    struct pollfd pf = {.fd = out[0], .events = POLLIN};
    int ok = poll(&pf, 1, 20000) == 1 && read(out[0], buf, sizeof(buf) - 1) > 0 &&
             strncmp(buf, "ready", 5) == 0;
    close(out[0]);
    return ok ? 0 : -1;
}

static void stop_engine(void)
{
    if (engine_in >= 0)
        close(engine_in);
    if (engine_pid > 0) {
        kill(engine_pid, SIGKILL);
        waitpid(engine_pid, NULL, 0);
    }
}

struct cmd {
    struct sbx_proc *p;
    size_t bytes;
    int out_open, err_open, done;
};

/* Read everything until every command ended; the peak threads and descriptors seen. */
static void drain(struct cmd *c, int n, int *peak_threads, int *peak_fds)
{
    struct pollfd *pf = calloc((size_t)n * 3, sizeof(*pf));
    int *who = calloc((size_t)n * 3, sizeof(int));
    int left = n;
    int64_t next_sample = 0;
    char buf[65536];
    while (left > 0) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (c[i].out_open) {
                pf[k] = (struct pollfd){.fd = c[i].p->stdout_fd, .events = POLLIN};
                who[k++] = i;
            }
            if (c[i].err_open) {
                pf[k] = (struct pollfd){.fd = c[i].p->stderr_fd, .events = POLLIN};
                who[k++] = i;
            }
            if (!c[i].out_open && !c[i].err_open && !c[i].done) {
                pf[k] = (struct pollfd){.fd = c[i].p->status_fd, .events = POLLIN};
                who[k++] = i;
            }
        }
        if (sbx_time_mono_ns() >= next_sample) {
            int t = count_dir("/proc/self/task"), f = count_dir("/proc/self/fd");
            *peak_threads = t > *peak_threads ? t : *peak_threads;
            *peak_fds = f > *peak_fds ? f : *peak_fds;
            next_sample = sbx_time_mono_ns() + 100 * SBX_NS_PER_MS;
        }
        if (poll(pf, (nfds_t)k, 100) <= 0)
            continue;
        for (int j = 0; j < k; j++) {
            if (!pf[j].revents)
                continue;
            struct cmd *x = &c[who[j]];
            if (pf[j].fd == x->p->status_fd) {
                x->done = 1;
                left--;
                continue;
            }
            ssize_t r = read(pf[j].fd, buf, sizeof(buf));
            if (r > 0) {
                x->bytes += (size_t)r;
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                if (pf[j].fd == x->p->stdout_fd)
                    x->out_open = 0;
                else
                    x->err_open = 0;
            }
        }
    }
    free(pf);
    free(who);
}

int main(int argc, char **argv)
{
    int quick = getenv("SBX_BENCH_QUICK") && strcmp(getenv("SBX_BENCH_QUICK"), "1") == 0;
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : quick ? 200 : 1000;
    int lines = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 50;
    int interval = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 100;
    struct sbx_error err = SBX_ERROR_INIT;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if ((rlim_t)n * 8 + 64 > rl.rlim_cur) {
        fprintf(stderr, "bench-remote: %d commands need %d descriptors, the limit is %llu\n", n,
                n * 8 + 64, (unsigned long long)rl.rlim_cur);
        return 1;
    }
    char dir[] = "/tmp/sbx-bench-remote-XXXXXX", sock[128];
    if (!mkdtemp(dir))
        return 1;
    snprintf(sock, sizeof(sock), "%s/engine.sock", dir);
    if (start_engine(sock, lines, interval) < 0) {
        fprintf(stderr, "bench-remote: the fake engine did not start (python3?)\n");
        stop_engine();
        return 1;
    }
    struct sbx_docker_options o = {.host = sock};
    struct sbx_client *client = NULL;
    struct sbx_session *s = NULL;
    int rc = 1;
    if (sbx_client_new("docker", &o, &client, &err) < 0 ||
        sbx_client_attach(client, SID, &s, &err) < 0) {
        fprintf(stderr, "bench-remote: %s\n", err.msg);
        goto out;
    }
    int threads0 = count_dir("/proc/self/task"), fds0 = count_dir("/proc/self/fd");
    struct cmd *c = calloc((size_t)n, sizeof(*c));
    const char *const argv_[] = {"emit", NULL};
    int64_t t0 = sbx_time_mono_ns();
    int started = 0;
    for (; started < n; started++) {
        struct sbx_exec_spec spec = {.argv = argv_};
        if (sbx_session_exec_start(s, &spec, &c[started].p, &err) < 0) {
            fprintf(stderr, "bench-remote: command %d: %s\n", started, err.msg);
            break;
        }
        c[started].out_open = c[started].err_open = 1;
        fcntl(c[started].p->stdout_fd, F_SETFL, O_NONBLOCK);
        fcntl(c[started].p->stderr_fd, F_SETFL, O_NONBLOCK);
    }
    int64_t t1 = sbx_time_mono_ns();
    int peak_threads = count_dir("/proc/self/task"), peak_fds = count_dir("/proc/self/fd");
    drain(c, started, &peak_threads, &peak_fds);
    int64_t t2 = sbx_time_mono_ns();
    size_t bytes = 0;
    int ok = 0;
    for (int i = 0; i < started; i++) {
        struct sbx_exit st;
        bytes += c[i].bytes;
        ok += sbx_proc_wait(c[i].p, 0, &st, &err) == 0 && st.code == 0 &&
              c[i].bytes == (size_t)lines * 64;
        sbx_proc_free(c[i].p);
    }
    free(c);
    int threads1 = count_dir("/proc/self/task"), fds1 = count_dir("/proc/self/fd");
    printf("commands            %d started, %d ended with all their output and code 0\n", started,
           ok);
    printf("each                %d lines of 64 bytes, %d ms apart (%.1f s)\n", lines, interval,
           lines * interval / 1000.0);
    printf("start all           %.2f s (%.2f ms per command, one after another)\n",
           (double)(t1 - t0) / 1e9, (double)(t1 - t0) / 1e6 / (started ? started : 1));
    printf("all ended after     %.2f s\n", (double)(t2 - t0) / 1e9);
    printf("output              %zu bytes\n", bytes);
    printf("threads             %d before, %d at the peak, %d after\n", threads0, peak_threads,
           threads1);
    printf("descriptors         %d before, %d at the peak (%.2f per command), %d after\n", fds0,
           peak_fds, (double)(peak_fds - fds0) / (started ? started : 1), fds1);
    printf("TABLE|%d concurrent remote commands: threads|%d threads|a thread per command|%d "
           "threads|%.2fx|bounded|%s\n",
           started, peak_threads, started + threads0, (double)peak_threads / (started + threads0),
           peak_threads <= threads0 + 2 ? "met" : "missed");
    rc = ok == n ? 0 : 1;
out:
    sbx_session_free(s);
    sbx_client_free(client);
    stop_engine();
    unlink(sock);
    rmdir(dir);
    return rc;
}
