/* bench-agent: a scripted sandbox agent run end to end.
 *
 * Each run: create a local sandbox from a 200-file manifest (4 KB each), run an agent with the
 * default capabilities for 11 model turns answered by a replay model (10 exec_command calls,
 * then a final message), then delete the sandbox. Prints the median and p95 wall time of the
 * whole run over RUNS runs, and the same for an empty manifest to show the part the files take.
 *
 *   SBX_SUPERVISOR=build/sbx build/bench/bench-agent [RUNS [DIR]]
 *
 * DIR (default /tmp) holds the runtime and workspace directories. Asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx/capability.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/sandbox-run.h"
#include "sbx/time.h"

#define FILES 200
#define CALLS 10

static const char *const cmds[CALLS] = {
        "ls | head -n 5",        "wc -c data/f001.txt",     "cat data/f002.txt | head -c 100",
        "ls data | wc -l",       "grep -c x data/f003.txt", "head -n 2 data/f004.txt",
        "test -f data/f199.txt", "echo done > out.txt",     "cat out.txt",
        "du -s data | cut -f1",
};

static char *write_replay(const char *dir)
{
    char *path = sbx_xasprintf("%s/bench-agent.jsonl", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    for (int i = 0; i < CALLS; i++) {
        json_t *args = json_pack("{s:s}", "cmd", cmds[i]);
        char *a = sbx_json_dumps(args, SBX_JSON_COMPACT);
        json_t *r = json_pack("{s:s, s:s, s:[{s:s, s:s, s:s, s:s}]}", "id", "r", "status",
                              "completed", "output", "type", "function_call", "call_id", "c",
                              "name", "exec_command", "arguments", a);
        char *line = sbx_json_dumps(r, SBX_JSON_COMPACT);
        fprintf(f, "%s\n", line);
        free(line);
        free(a);
        json_decref(r);
        json_decref(args);
    }
    fprintf(f, "{\"id\":\"r\",\"status\":\"completed\",\"output\":[{\"type\":\"message\","
               "\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":"
               "\"done\"}]}]}\n");
    fclose(f);
    return path;
}

static json_t *manifest_doc(int files)
{
    char content[4096];
    memset(content, 'x', sizeof(content) - 1);
    content[sizeof(content) - 1] = '\n';
    json_t *entries = json_object();
    for (int i = 0; i < files; i++) {
        char name[64];
        snprintf(name, sizeof(name), "data/f%03d.txt", i);
        sbx_json_set(
                entries, name,
                json_pack("{s:s, s:s#}", "type", "file", "content", content, (int)sizeof(content)));
    }
    return json_pack("{s:i, s:o}", "version", 1, "entries", entries);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(const char *label, struct sbx_client *client, const char *replay_path,
                    const json_t *doc, int runs)
{
    double *ms = sbx_xcalloc((size_t)runs, sizeof(*ms));
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    if (sbx_agent_new("bench", &a, &err) < 0)
        abort();
    json_t *spec = json_object(); /* a sandbox agent with the default capabilities */
    sbx_agent_set_sandbox_spec(a, spec);
    json_decref(spec);
    char *model_name = sbx_xasprintf("replay:%s", replay_path);
    json_t *input = json_string("look around");
    for (int i = 0; i < runs; i++) {
        struct sbx_model *m = NULL;
        struct sbx_sandbox_run *sr = NULL;
        struct sbx_run_result *res = NULL;
        if (sbx_model_new(model_name, NULL, &m, &err) < 0) { /* reads the file: not timed */
            fprintf(stderr, "%s\n", err.msg);
            exit(1);
        }
        struct sbx_run_config cfg = {.client = client, .manifest_doc = doc};
        struct sbx_run_options o = {.model = m, .max_turns = CALLS + 1};
        int64_t t0 = sbx_time_mono_ns();
        if (sbx_sandbox_run_new(&cfg, &sr, &err) < 0 ||
            sbx_sandbox_run(sr, a, input, &o, &res, &err) < 0) {
            fprintf(stderr, "run failed: %s\n", err.msg);
            exit(1);
        }
        ms[i] = (double)(sbx_time_mono_ns() - t0) / 1e6;
        if (sbx_run_result_turns(res) != CALLS + 1) {
            fprintf(stderr, "expected %d turns, got %d\n", CALLS + 1, sbx_run_result_turns(res));
            exit(1);
        }
        sbx_run_result_free(res);
        sbx_sandbox_run_free(sr);
        sbx_model_free(m);
    }
    qsort(ms, (size_t)runs, sizeof(*ms), cmp);
    printf("%-44s median %7.1f ms   p95 %7.1f ms   (%d runs)\n", label, ms[runs / 2],
           ms[(runs * 95 + 99) / 100 - 1], runs);
    json_decref(input);
    free(model_name);
    sbx_agent_free(a);
    free(ms);
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 20;
    const char *base = argc > 2 ? argv[2] : "/tmp";
    if (runs < 1)
        runs = 1;
    char *dir = sbx_xasprintf("%s/sbx-bench-agent.XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    char *run_dir = sbx_xasprintf("%s/run", dir), *ws_dir = sbx_xasprintf("%s/ws", dir);
    struct sbx_local_options lo = {.runtime_dir = run_dir, .workspace_dir = ws_dir};
    struct sbx_client *client = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_client_new("local", &lo, &client, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    char *replay_path = write_replay(dir);
    json_t *doc = manifest_doc(FILES), *empty = manifest_doc(0);
    measure("11 turns, 10 exec_command, 200-file manifest", client, replay_path, doc, runs);
    measure("11 turns, 10 exec_command, empty manifest", client, replay_path, empty, runs);
    json_decref(doc);
    json_decref(empty);
    sbx_client_free(client);
    unlink(replay_path);
    rmdir(ws_dir);
    char *rt = sbx_xasprintf("%s/sbx", run_dir);
    rmdir(rt);
    rmdir(run_dir);
    rmdir(dir);
    free(rt);
    free(replay_path);
    free(run_dir);
    free(ws_dir);
    free(dir);
    return 0;
}
