/* bench-loop: harness overhead per turn of an agent run against an instant model server, for
 * runs of 11, 51 and 101 turns (10, 50, 100 tool calls and a final message), interleaved.
 *
 * The server is a loopback HTTP/1.1 server in this process that keeps connections open and
 * answers each request as soon as its body has arrived (a canned Responses API stream). The
 * harness overhead of a run is the CPU time of the process (every thread: runner, tool jobs,
 * libcurl) minus the CPU time the server threads spent on its requests: on a shared machine
 * wall time mostly measures the other tenants. The wall time minus the server's time is shown
 * too. A flat overhead per turn means nothing the loop does grows with the history.
 *
 * With $SBX naming the sbx program (scripts/bench sets it), the CLI path too: `sbx run` of a
 * sandbox agent (an isolated sandbox, the default disk) whose model calls `exec_command`
 * (`echo N`) at every turn but the last, against the same server, interleaved with the
 * in-process runs. Its cost is the client's CPU (user + system of the `sbx run` process, from
 * wait4): per turn at each length, and the marginal cost per turn from 11 to 101 turns, which
 * leaves out the sandbox's create and removal. The sandbox's own processes (the supervisor,
 * the commands) are not the client's and are not counted.
 *
 * Usage: bench-loop [REPS [STATE_DIR [TURNS]]]   (REPS default 7, 3 with SBX_BENCH_QUICK=1)
 *   STATE_DIR: also run each length with a run state written at every checkpoint there (what
 *   `sbx run --state` does), reported on an info line; "-": none.
 *   TURNS: one run of that length and nothing else (for callgrind or perf stat).
 * Prints the medians and two TABLE lines, three with $SBX. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/time.h"

#define MAX_REPS 31

static const char call_item[] =
        "{\"type\":\"function_call\",\"id\":\"fc_%d\",\"call_id\":\"call_%d\",\"name\":\"add\","
        "\"arguments\":\"{\\\"a\\\":%d,\\\"b\\\":2}\",\"status\":\"completed\"}";
static const char exec_item[] =
        "{\"type\":\"function_call\",\"id\":\"fc_%d\",\"call_id\":\"call_%d\","
        "\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"echo %d\\\"}\","
        "\"status\":\"completed\"}";
static const char msg_item[] =
        "{\"type\":\"message\",\"id\":\"msg_%d\",\"role\":\"assistant\",\"status\":\"completed\","
        "\"content\":[{\"type\":\"output_text\",\"text\":\"done after %d calls\","
        "\"annotations\":[]}]}";

struct server {
    int fd;
    pthread_mutex_t lock;
    int left;        /* tool calls still to answer in this run */
    int served;      /* requests answered in this run */
    int conns;       /* connections accepted in this run */
    int64_t busy_ns; /* time between a request's first byte and the end of its answer */
    int64_t cpu_ns;  /* the server threads' CPU time over the same spans */
    int exec;        /* the calls are exec_command (the CLI runs), not add */
};

static int64_t cpu_now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The SSE answer to request n: a tool call, or the final message when none is left. */
static char *answer(int n, int call, int exec)
{
    char item[512];
    snprintf(item, sizeof(item), !call ? msg_item : exec ? exec_item : call_item, n, n, n);
    return sbx_xasprintf(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":"
            "\"r%d\",\"status\":\"in_progress\",\"output\":[]}}\n\nevent: response.output_item."
            "done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":%s}"
            "\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{"
            "\"id\":\"r%d\",\"object\":\"response\",\"status\":\"completed\",\"output\":[%s],"
            "\"usage\":{\"input_tokens\":1,\"output_tokens\":1,\"total_tokens\":2}}}\n\n",
            n, item, n, item);
}

struct conn {
    struct server *s;
    int fd;
};

/* One connection: requests one after the other until the client closes it. */
static void *serve_conn(void *p)
{
    struct conn *c = p;
    struct server *s = c->s;
    size_t cap = 1 << 16, have = 0;
    char *buf = sbx_xmalloc(cap + 1);
    for (;;) {
        char *hdr_end = NULL;
        long body_len = -1;
        int64_t t0 = 0, c0 = 0;
        for (;;) {
            buf[have] = '\0';
            if (!hdr_end && (hdr_end = strstr(buf, "\r\n\r\n"))) {
                char *cl = strcasestr(buf, "content-length:");
                body_len = cl ? strtol(cl + 15, NULL, 10) : 0;
            }
            if (hdr_end && have >= (size_t)(hdr_end + 4 - buf) + (size_t)body_len)
                break;
            if (have == cap) {
                cap *= 2;
                buf = sbx_xrealloc(buf, cap + 1);
                hdr_end = NULL;
            }
            ssize_t n = read(c->fd, buf + have, cap - have);
            if (n <= 0)
                goto out;
            if (!t0) {
                t0 = sbx_time_mono_ns();
                c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
            }
            have += (size_t)n;
        }
        size_t used = (size_t)(hdr_end + 4 - buf) + (size_t)body_len;
        pthread_mutex_lock(&s->lock);
        int n = ++s->served, call = s->left > 0, exec = s->exec;
        if (call)
            s->left--;
        pthread_mutex_unlock(&s->lock);
        char *body = answer(n, call, exec);
        /* One write: a second small one would wait for the client's delayed ACK (Nagle). */
        char *whole = sbx_xasprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                    "Content-Length: %zu\r\n\r\n%s",
                                    strlen(body), body);
        if (write(c->fd, whole, strlen(whole)) < 0)
            perror("bench: write");
        free(whole);
        free(body);
        __atomic_add_fetch(&s->busy_ns, sbx_time_mono_ns() - t0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&s->cpu_ns, cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0, __ATOMIC_RELAXED);
        memmove(buf, buf + used, have - used);
        have -= used;
    }
out:
    close(c->fd);
    free(buf);
    free(c);
    return NULL;
}

static void *serve(void *p)
{
    struct server *s = p;
    for (;;) {
        int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        __atomic_add_fetch(&s->conns, 1, __ATOMIC_RELAXED);
        struct conn *c = sbx_xcalloc(1, sizeof(*c));
        c->s = s;
        c->fd = fd;
        pthread_t th;
        pthread_create(&th, NULL, serve_conn, c);
        pthread_detach(th);
    }
}

static int write_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    return sbx_run_state_write_file(data, state, NULL, err);
}

/* One run of `turns` turns; returns the harness CPU per turn in ms, *wall the wall time
 * minus the server's, per turn. */
static double run_once(struct server *s, const char *url, int turns, const char *state_path,
                       int *conns, double *wall)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    struct sbx_tool *t = NULL;
    struct sbx_run_result *res = NULL;
    struct sbx_model *m = NULL;
    struct sbx_model_options mo = {.base_url = url, .api_key = "bench-key"};
    if (sbx_model_new("bench-model", &mo, &m, &err) < 0 || sbx_agent_new("bench", &a, &err) < 0 ||
        sbx_tool_builtin("add", &t, &err) < 0 || sbx_agent_add_tool(a, t, &err) < 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        exit(1);
    }
    struct sbx_run_options o = {.model = m, .max_turns = turns + 1, .stream = 1};
    if (state_path) {
        o.checkpoint = write_checkpoint;
        o.checkpoint_data = (void *)state_path;
    }
    pthread_mutex_lock(&s->lock);
    s->left = turns - 1;
    s->exec = 0;
    s->served = 0;
    s->busy_ns = 0;
    s->cpu_ns = 0;
    s->conns = 0;
    pthread_mutex_unlock(&s->lock);
    json_t *input = sbx_json_str("add until told to stop");
    int64_t t0 = sbx_time_mono_ns(), c0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
    int rc = sbx_run(a, input, &o, &res, &err);
    int64_t dt = sbx_time_mono_ns() - t0, dc = cpu_now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (rc < 0 || s->served != turns) {
        fprintf(stderr, "bench: run of %d turns: %s (%d requests)\n", turns,
                rc < 0 ? err.msg : "wrong number of turns", s->served);
        exit(1);
    }
    *conns = __atomic_load_n(&s->conns, __ATOMIC_RELAXED);
    sbx_run_result_free(res);
    json_decref(input);
    sbx_tool_unref(t);
    sbx_agent_free(a);
    sbx_model_free(m);
    *wall = (double)(dt - __atomic_load_n(&s->busy_ns, __ATOMIC_RELAXED)) / turns / 1e6;
    return (double)(dc - __atomic_load_n(&s->cpu_ns, __ATOMIC_RELAXED)) / turns / 1e6;
}

/* The CLI path: one `sbx run` of `turns` turns of a sandbox agent (agent: its file) whose
 * model calls exec_command; returns the client's CPU time in ms (user + system of the sbx
 * process), or a negative value when the run failed. */
static double run_cli(struct server *s, const char *sbx, const char *url, const char *agent,
                      int turns)
{
    extern char **environ;
    char max[16];
    snprintf(max, sizeof(max), "%d", turns + 5);
    char *const argv[] = {(char *)sbx,  (char *)"run",        (char *)"--max-turns",
                          max,          (char *)"--base-url", (char *)url,
                          (char *)"-a", (char *)agent,        (char *)"run the steps",
                          NULL};
    pthread_mutex_lock(&s->lock);
    s->left = turns - 1;
    s->exec = 1;
    s->served = 0;
    pthread_mutex_unlock(&s->lock);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, sbx, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "bench: cannot run '%s': %s\n", sbx, strerror(rc));
        return -1;
    }
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || s->served != turns) {
        fprintf(stderr, "bench: sbx run of %d turns failed (status 0x%x, %d requests)\n", turns,
                (unsigned)status, s->served);
        return -1;
    }
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* A private runtime and workspace directory for the CLI runs' sandboxes, and the agent file:
 * a sandbox agent with an empty out/ directory. NULL (with the reason printed) when it cannot
 * be made. Caller frees. */
static char *cli_setup(char *tmp)
{
    if (!mkdtemp(tmp)) {
        perror("bench: mkdtemp");
        return NULL;
    }
    char *run = sbx_xasprintf("%s/run", tmp), *ws = sbx_xasprintf("%s/ws", tmp);
    char *agent = sbx_xasprintf("%s/agent.yaml", tmp);
    FILE *f = mkdir(run, 0700) == 0 ? fopen(agent, "we") : NULL;
    if (f) {
        fputs("name: bench\nmodel: bench-model\ninstructions: bench\nmanifest:\n  entries:\n"
              "    out: {type: dir}\n",
              f);
        fclose(f);
        setenv("XDG_RUNTIME_DIR", run, 1);
        setenv("SBX_WORKSPACES", ws, 1);
        setenv("OPENAI_API_KEY", "bench-key", 1);
    } else {
        perror("bench: agent file");
        free(agent);
        agent = NULL;
    }
    free(run);
    free(ws);
    return agent;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    const char *quick = getenv("SBX_BENCH_QUICK");
    int reps = argc > 1 ? (int)strtol(argv[1], NULL, 10) : quick && quick[0] == '1' ? 3 : 7;
    const char *state_dir = argc > 2 && strcmp(argv[2], "-") != 0 ? argv[2] : NULL;
    int only = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 0;
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench-loop [REPS (1..%d) [STATE_DIR]]\n", MAX_REPS);
        return 2;
    }
    struct server s = {0};
    pthread_mutex_init(&s.lock, NULL);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(addr);
    s.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s.fd < 0 || bind(s.fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
        listen(s.fd, 64) < 0 || getsockname(s.fd, (struct sockaddr *)&addr, &alen) < 0) {
        perror("bench: socket");
        return 1;
    }
    pthread_t th;
    pthread_create(&th, NULL, serve, &s);
    char *url = sbx_xasprintf("http://127.0.0.1:%d/v1", ntohs(addr.sin_port));
    char *state =
            state_dir ? sbx_xasprintf("%s/bench-loop-%d.json", state_dir, (int)getpid()) : NULL;

    static const int lengths[] = {11, 51, 101};
    enum { NL = 3 };
    double plain[NL][MAX_REPS], wall[NL][MAX_REPS], with_state[NL][MAX_REPS], w;
    double cli[NL][MAX_REPS];
    int conns[NL] = {0};
    int c = 0;
    const char *sbx = getenv("SBX");
    char tmp[] = "/tmp/sbx-bench-loop.XXXXXX";
    char *agent = NULL;
    if (sbx && sbx[0] && access(sbx, X_OK) == 0 && only == 0)
        agent = cli_setup(tmp);
    else if (only == 0)
        printf("the CLI path is skipped: SBX does not name the sbx program\n");
    if (only > 0) {
        double cpu = run_once(&s, url, only, state, &c, &w);
        printf("%d turns: harness CPU %.4f ms/turn, wall minus server %.4f ms/turn\n", only, cpu,
               w);
        goto out;
    }
    run_once(&s, url, 11, NULL, &c, &w); /* warm up */
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < NL; i++) {
            plain[i][r] = run_once(&s, url, lengths[i], NULL, &c, &wall[i][r]);
            if (c > conns[i])
                conns[i] = c;
            if (state)
                with_state[i][r] = run_once(&s, url, lengths[i], state, &c, &w);
            if (agent && (cli[i][r] = run_cli(&s, sbx, url, agent, lengths[i])) < 0) {
                free(agent);
                agent = NULL;
            }
        }
    }
    double med[NL];
    for (int i = 0; i < NL; i++) {
        med[i] = median(plain[i], reps);
        printf("%3d turns: harness CPU %.4f ms/turn, wall minus server %.4f ms/turn (medians of "
               "%d), at most %d connection%s per run\n",
               lengths[i], med[i], median(wall[i], reps), reps, conns[i], conns[i] == 1 ? "" : "s");
        if (state)
            printf("%3d turns with a run state at every checkpoint: harness CPU %.4f ms/turn\n",
                   lengths[i], median(with_state[i], reps));
    }
    double budget = 0.2, ratio = med[2] / med[0];
    printf("TABLE|harness overhead (CPU) per turn at 101 turns, instant server|%.3f ms|budget|%.3f "
           "ms|%.2fx|<= 0.2 ms|%s\n",
           med[2], budget, med[2] / budget, med[2] <= budget ? "met" : "missed");
    printf("TABLE|per-turn overhead, 101 vs 11 turns|%.3f ms|11 turns|%.3f ms|%.2fx|<= 1.2x|%s\n",
           med[2], med[0], ratio, ratio <= 1.2 ? "met" : "missed");
    if (agent) {
        double cm[NL];
        for (int i = 0; i < NL; i++) {
            cm[i] = median(cli[i], reps);
            printf("%3d turns, sbx run (CLI) with exec_command: client CPU %.1f ms, %.3f ms/turn "
                   "(medians of %d)\n",
                   lengths[i], cm[i], cm[i] / lengths[i], reps);
        }
        double marginal = (cm[2] - cm[0]) / (lengths[2] - lengths[0]);
        printf("TABLE|sbx run (CLI) with exec_command: client CPU per turn, marginal 11 to 101 "
               "turns|%.3f ms|in-process harness (add tool), per turn at 101|%.3f ms|%.2fx|-|-\n",
               marginal, med[2], marginal / med[2]);
    }
out:
    if (agent) {
        /* A run that failed may have left its sandbox: removed first, then the directory. */
        char *const rm_all[] = {(char *)sbx,     (char *)"sandbox", (char *)"rm",
                                (char *)"--all", (char *)"--yes",   NULL};
        char *const rm[] = {(char *)"rm", (char *)"-rf", tmp, NULL};
        pid_t pid;
        extern char **environ;
        if (posix_spawn(&pid, sbx, NULL, NULL, rm_all, environ) == 0)
            waitpid(pid, NULL, 0);
        if (posix_spawnp(&pid, "rm", NULL, NULL, rm, environ) == 0)
            waitpid(pid, NULL, 0);
    }
    free(agent);
    if (state)
        unlink(state);
    free(state);
    free(url);
    shutdown(s.fd, SHUT_RDWR);
    close(s.fd);
    pthread_join(th, NULL);
    return 0;
}
