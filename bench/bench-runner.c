/* bench-runner: harness overhead per turn and JSON cost of a large history.
 *
 *   1. sbx_run against an in-process HTTP server that answers instantly with a canned
 *      Responses API answer (a tool call each turn), plain JSON and SSE: wall time per turn,
 *      and the same minus the time the server thread spent per request.
 *   2. The same loop over a replay model: no network at all, the harness alone.
 *   3. Building, serialising and parsing a ~1 MB conversation history.
 * Prints numbers; asserts nothing. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/time.h"

#define TURNS 200

static const char *answer_json =
        "{\"id\":\"r\",\"object\":\"response\",\"status\":\"completed\",\"output\":[{\"type\":"
        "\"function_call\",\"id\":\"fc\",\"call_id\":\"c\",\"name\":\"add\",\"arguments\":"
        "\"{\\\"a\\\":1,\\\"b\\\":2}\",\"status\":\"completed\"}],\"usage\":{\"input_tokens\":1,"
        "\"output_tokens\":1,\"total_tokens\":2}}";

struct server {
    int fd;
    int stream;
    int64_t busy_ns; /* time spent handling requests */
    long requests;
    char *sse;
};

static void *serve(void *p)
{
    struct server *s = p;
    char buf[1 << 16];
    for (;;) {
        int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        int64_t t0 = sbx_time_mono_ns();
        size_t have = 0;
        long body_len = -1;
        char *hdr_end = NULL;
        for (;;) {
            ssize_t n = read(c, buf + have, sizeof(buf) - have - 1);
            if (n <= 0)
                break;
            have += (size_t)n;
            buf[have] = '\0';
            if (!hdr_end && (hdr_end = strstr(buf, "\r\n\r\n"))) {
                char *cl = strcasestr(buf, "content-length:");
                body_len = cl ? strtol(cl + 15, NULL, 10) : 0;
            }
            if (hdr_end && (long)(have - (size_t)(hdr_end + 4 - buf)) >= body_len) {
                /* The request body is consumed but not kept: only its arrival matters. */
                break;
            }
            if (have > sizeof(buf) - 2)
                have = (size_t)(hdr_end ? hdr_end + 4 - buf : 0);
        }
        const char *body = s->stream ? s->sse : answer_json;
        char head[256];
        int hl = snprintf(head, sizeof(head),
                          "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                          "Connection: close\r\n\r\n",
                          s->stream ? "text/event-stream" : "application/json", strlen(body));
        if (write(c, head, (size_t)hl) < 0 || write(c, body, strlen(body)) < 0)
            perror("write");
        close(c);
        __atomic_add_fetch(&s->busy_ns, sbx_time_mono_ns() - t0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&s->requests, 1, __ATOMIC_RELAXED);
    }
}

/* With a path: every checkpoint of the run is written there as `sbx run --state` does
 * (serialised with its digest, written beside, fsynced, renamed). */
static int write_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    return sbx_run_state_write_file(data, state, NULL, err);
}

static double run_turns_state(struct sbx_model *m, int turns, const char *state_path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    struct sbx_tool *t = NULL;
    struct sbx_run_result *res = NULL;
    if (sbx_agent_new("bench", &a, &err) < 0 || sbx_tool_builtin("add", &t, &err) < 0 ||
        sbx_agent_add_tool(a, t, &err) < 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        exit(1);
    }
    struct sbx_run_options o = {.model = m, .max_turns = turns, .stream = 1};
    if (state_path) {
        o.checkpoint = write_checkpoint;
        o.checkpoint_data = (void *)state_path;
    }
    json_t *input = sbx_json_str("add forever");
    int64_t t0 = sbx_time_mono_ns();
    int rc = sbx_run(a, input, &o, &res, &err);
    int64_t dt = sbx_time_mono_ns() - t0;
    if (rc != -SBX_E_MAXTURNS) {
        fprintf(stderr, "bench: unexpected end: %s\n", err.msg);
        exit(1);
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_tool_unref(t);
    sbx_agent_free(a);
    return (double)dt / turns / 1e6;
}

static double run_turns(struct sbx_model *m, int turns)
{
    return run_turns_state(m, turns, NULL);
}

static void bench_http(int stream)
{
    struct server s = {.stream = stream};
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(addr);
    s.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s.fd < 0 || bind(s.fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
        listen(s.fd, 64) < 0 || getsockname(s.fd, (struct sockaddr *)&addr, &alen) < 0) {
        perror("bench: socket");
        exit(1);
    }
    json_t *resp = NULL;
    if (sbx_json_parse(answer_json, strlen(answer_json), NULL, &resp, NULL) < 0)
        exit(1);
    char *done = sbx_json_dumps(resp, 0);
    char *item = sbx_json_dumps(json_array_get(json_object_get(resp, "output"), 0), 0);
    s.sse = sbx_xasprintf(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":"
            "\"r\"}}\n\nevent: response.output_item.done\ndata: {\"type\":\"response.output_"
            "item.done\",\"output_index\":0,\"item\":%s}\n\nevent: response.completed\ndata: "
            "{\"type\":\"response.completed\",\"response\":%s}\n\n",
            item, done);
    pthread_t th;
    pthread_create(&th, NULL, serve, &s);
    char *url = sbx_xasprintf("http://127.0.0.1:%d/v1", ntohs(addr.sin_port));
    struct sbx_model_options mo = {.base_url = url, .api_key = "bench-key", .no_stream = !stream};
    struct sbx_model *m = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_model_new("bench-model", &mo, &m, &err) < 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        exit(1);
    }
    run_turns(m, 10); /* warm up */
    s.busy_ns = 0;
    s.requests = 0;
    double per_turn = run_turns(m, TURNS);
    double server_ms = (double)s.busy_ns / (double)s.requests / 1e6;
    printf("http %-6s  %d turns: %.3f ms/turn wall, server %.3f ms/turn, harness+loopback %.3f "
           "ms/turn\n",
           stream ? "sse" : "json", TURNS, per_turn, server_ms, per_turn - server_ms);
    sbx_model_free(m);
    shutdown(s.fd, SHUT_RDWR);
    close(s.fd);
    pthread_join(th, NULL);
    json_decref(resp);
    free(done);
    free(item);
    free(s.sse);
    free(url);
}

static void bench_replay(void)
{
    char path[] = "/tmp/sbx-bench-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < TURNS; i++)
        fprintf(f, "%s\n", answer_json);
    fclose(f);
    char *name = sbx_xasprintf("replay:%s", path);
    struct sbx_model *m = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_model_new(name, NULL, &m, &err) < 0) {
        fprintf(stderr, "bench: %s\n", err.msg);
        exit(1);
    }
    double per_turn = run_turns(m, TURNS);
    printf("replay       %d turns: %.3f ms/turn (harness only, growing history)\n", TURNS,
           per_turn);
    sbx_model_free(m);
    unlink(path);
    free(name);
}

/* The cost of checkpoints (`sbx run --state`): the same replayed run with and without a run
 * state written at every checkpoint (two per turn), interleaved, in dir. */
static void bench_checkpoints(int turns, const char *dir)
{
    char path[] = "/tmp/sbx-bench-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < turns; i++)
        fprintf(f, "%s\n", answer_json);
    fclose(f);
    char *name = sbx_xasprintf("replay:%s", path);
    char *state = sbx_xasprintf("%s/sbx-bench-state-%d.json", dir, (int)getpid());
    double with = 1e30, without = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        for (int k = 0; k < 2; k++) {
            struct sbx_model *m = NULL;
            struct sbx_error err = SBX_ERROR_INIT;
            if (sbx_model_new(name, NULL, &m, &err) < 0) {
                fprintf(stderr, "bench: %s\n", err.msg);
                exit(1);
            }
            double t = run_turns_state(m, turns, k ? state : NULL);
            if (k && t < with)
                with = t;
            if (!k && t < without)
                without = t;
            sbx_model_free(m);
        }
    }
    struct stat st;
    long long size = stat(state, &st) == 0 ? (long long)st.st_size : -1;
    printf("checkpoints  %d turns in %s: %.3f ms/turn with, %.3f without (x%.1f); last state "
           "%lld bytes\n",
           turns, dir, with, without, with / without, size);
    unlink(state);
    unlink(path);
    free(state);
    free(name);
}

static void bench_json(void)
{
    json_t *items = json_array();
    char text[1024];
    memset(text, 'x', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    int64_t t0 = sbx_time_mono_ns();
    size_t n = 0;
    char *s = NULL;
    for (;; n++) {
        if (n % 3 == 0)
            sbx_json_append(items,
                            json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "type", "message", "role",
                                      "assistant", "content", "type", "output_text", "text", text));
        else if (n % 3 == 1)
            sbx_json_append(items, json_pack("{s:s, s:s, s:s, s:s}", "type", "function_call",
                                             "call_id", "call_0123456789", "name", "exec_command",
                                             "arguments", "{\"cmd\":\"ls -la /workspace\"}"));
        else
            sbx_json_append(items, json_pack("{s:s, s:s, s:s}", "type", "function_call_output",
                                             "call_id", "call_0123456789", "output", text));
        if (n % 64 == 0) {
            free(s);
            s = sbx_json_dumps(items, 0);
            if (strlen(s) >= (1u << 20))
                break;
        }
    }
    int64_t t1 = sbx_time_mono_ns();
    const int reps = 20;
    size_t len = strlen(s);
    int64_t dump_ns = 0, parse_ns = 0;
    for (int i = 0; i < reps; i++) {
        int64_t a = sbx_time_mono_ns();
        char *d = sbx_json_dumps(items, 0);
        int64_t b = sbx_time_mono_ns();
        json_t *v = NULL;
        if (sbx_json_parse(d, strlen(d), NULL, &v, NULL) < 0)
            exit(1);
        int64_t c = sbx_time_mono_ns();
        dump_ns += b - a;
        parse_ns += c - b;
        json_decref(v);
        free(d);
    }
    printf("history      %zu items, %zu bytes: build %.2f ms (with size probes), serialise %.2f "
           "ms, parse %.2f ms\n",
           json_array_size(items), len, (double)(t1 - t0) / 1e6, (double)dump_ns / reps / 1e6,
           (double)parse_ns / reps / 1e6);
    free(s);
    json_decref(items);
}

int main(void)
{
    bench_replay();
    bench_http(0);
    bench_http(1);
    bench_json();
    const char *dir = getenv("SBX_BENCH_DIR");
    bench_checkpoints(20, dir ? dir : "/tmp");
    bench_checkpoints(TURNS, dir ? dir : "/tmp");
    return 0;
}
