/* Cancellation and ties: a cancel flag set while a command runs (sbx_session_exec, the
 * interactive-process calls, a sandbox run's tool call) kills the command and fails the call at
 * once; a sandbox tied to its creator (sbx_local_options.tied) is removed when that process is
 * SIGKILLed, an owned workspace with it, a given one left as it is. Against the local provider,
 * isolated and unconfined. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "replay-model.h"
#include "sbx/capability.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/runner.h"
#include "sbx/sandbox-run.h"
#include "sbx/time.h"

/* The commands sleep far longer than any bound checked here: a call that returns in time was
 * cancelled, not finished. */
#define NAP_S        20
#define CANCEL_AT_MS 300
#define PROMPT_MS    ((int64_t)(NAP_S / 2) * 1000)

static char tmp[] = "/tmp/sbx-test-cancel.XXXXXX";
static struct sbx_client *client;
static int file_no;
static volatile sig_atomic_t flag;

/* Sets flag after CANCEL_AT_MS from another thread: no signal interrupts the wait, so this
 * checks that the wait looks at the flag by itself. */
static void *set_later(void *unused)
{
    (void)unused;
    sbx_sleep_ms(CANCEL_AT_MS);
    flag = 1;
    return NULL;
}

static pthread_t cancel_later(void)
{
    pthread_t t;
    flag = 0;
    if (pthread_create(&t, NULL, set_later, NULL) != 0)
        abort();
    return t;
}

static int64_t ms_since(int64_t t0)
{
    return (sbx_time_mono_ns() - t0) / SBX_NS_PER_MS;
}

/* The command that wrote its pid to "pid" in s's workspace is gone (bounded wait). */
static int gone(struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (int i = 0; i < 100; i++) {
        struct sbx_exec_result r = {0};
        struct sbx_exec_spec spec = {.command = "kill -0 \"$(cat pid)\" 2>/dev/null"};
        if (sbx_session_exec(s, &spec, &r, &err) < 0)
            return 0;
        int code = r.status.code;
        sbx_exec_result_release(&r);
        if (code != 0)
            return 1;
        sbx_sleep_ms(50);
    }
    return 0;
}

static const char nap_cmd[] = "echo $$ > pid; exec sleep 20";

static void test_exec(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){0}, &s, &err), &err);
    if (!s)
        return;
    struct sbx_exec_result r = {0};
    struct sbx_exec_spec spec = {.command = nap_cmd, .cancel = &flag};
    pthread_t t = cancel_later();
    int64_t t0 = sbx_time_mono_ns();
    CHECK_ERR(sbx_session_exec(s, &spec, &r, &err), SBX_E_CANCELLED, &err, "command cancelled");
    CHECK(ms_since(t0) < PROMPT_MS);
    pthread_join(t, NULL);
    CHECK(gone(s));

    /* A flag that stays clear changes nothing. */
    flag = 0;
    struct sbx_exec_spec quick = {.command = "echo fine", .cancel = &flag};
    CHECK_OK(sbx_session_exec(s, &quick, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "fine\n");
    sbx_exec_result_release(&r);
    CHECK_OK(sbx_session_delete(s, &err), &err);
    sbx_session_free(s);
}

static void test_pty(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    struct sbx_pty_update u = {0};
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){0}, &s, &err), &err);
    if (!s)
        return;
    struct sbx_exec_spec spec = {.command = nap_cmd, .cancel = &flag};

    /* Cancelled while the start call waits out its yield time. */
    pthread_t t = cancel_later();
    int64_t t0 = sbx_time_mono_ns();
    CHECK_ERR(sbx_session_pty_start(s, &spec, SBX_PTY_YIELD_MAX_MS, &u, &err), SBX_E_CANCELLED,
              &err, "command cancelled");
    CHECK(ms_since(t0) < PROMPT_MS);
    pthread_join(t, NULL);
    CHECK_EQ_INT((int)sbx_session_pty_count(s), 0);
    CHECK(gone(s));

    /* Cancelled while a later write waits for output: the process is killed and forgotten. */
    flag = 0;
    CHECK_OK(sbx_session_pty_start(s, &spec, SBX_PTY_YIELD_MIN_MS, &u, &err), &err);
    int id = u.id;
    sbx_pty_update_release(&u);
    CHECK(id > 0);
    t = cancel_later();
    t0 = sbx_time_mono_ns();
    CHECK_ERR(sbx_session_pty_write(s, id, "", 0, SBX_PTY_YIELD_MAX_MS, 0, &u, &err),
              SBX_E_CANCELLED, &err, "command cancelled");
    CHECK(ms_since(t0) < PROMPT_MS);
    pthread_join(t, NULL);
    CHECK_EQ_INT((int)sbx_session_pty_count(s), 0);
    CHECK(gone(s));
    CHECK_OK(sbx_session_delete(s, &err), &err);
    sbx_session_free(s);
}

/* The runner: a cancelled run does not wait for its tool call. */
static void test_run(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    struct sbx_agent *a = NULL;
    struct sbx_sandbox_run *sr = NULL;
    struct sbx_run_result *res = NULL;
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){0}, &s, &err), &err);
    if (!s)
        return;
    CHECK_OK(sbx_agent_new("napper", &a, &err), &err);
    json_t *spec = json_loads("{\"capabilities\":[\"shell\"]}", 0, NULL);
    sbx_agent_set_sandbox_spec(a, spec);
    json_decref(spec);
    static const char *const r[] = {
            "{\"id\":\"r1\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
            "\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"echo $$ > pid; exec sleep "
            "20\\\",\\\"yield_time_ms\\\":30000}\"}]}",
            "{\"id\":\"r2\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":"
            "[{\"type\":\"output_text\",\"text\":\"slept\"}]}]}",
            NULL};
    struct sbx_model *m = test_model_from_responses(tmp, &file_no, r);
    struct sbx_run_config cfg = {.client = client, .session = s};
    CHECK_OK(sbx_sandbox_run_new(&cfg, &sr, &err), &err);
    struct sbx_run_options o = {.model = m, .cancel = &flag};
    json_t *in = json_string("nap");
    pthread_t t = cancel_later();
    int64_t t0 = sbx_time_mono_ns();
    CHECK_ERR(sbx_sandbox_run(sr, a, in, &o, &res, &err), SBX_E_CANCELLED, &err,
              "run cancelled at turn 1 of agent 'napper' while running tool 'exec_command'");
    CHECK(ms_since(t0) < PROMPT_MS);
    pthread_join(t, NULL);
    CHECK(res == NULL);
    flag = 0;
    CHECK(gone(s));
    json_decref(in);
    sbx_sandbox_run_free(sr);
    sbx_model_free(m);
    sbx_agent_free(a);
    CHECK_OK(sbx_session_delete(s, &err), &err);
    sbx_session_free(s);
}

/* ---- ties ------------------------------------------------------------------------------------ */

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A child creates a tied sandbox (in workspace, or a fresh one), tells its id and waits to be
 * killed. Returns the child's pid, the id in id. */
static pid_t tied_creator(enum sbx_local_isolation iso, const char *workspace, char *id,
                          size_t idlen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        struct sbx_error err = SBX_ERROR_INIT;
        char *run_dir = sbx_xasprintf("%s/run", tmp), *ws_dir = sbx_xasprintf("%s/ws", tmp);
        struct sbx_local_options lo = {
                .runtime_dir = run_dir, .workspace_dir = ws_dir, .isolation = iso, .tied = 1};
        struct sbx_client *c = NULL;
        struct sbx_session *s = NULL;
        struct sbx_create_spec cs = {.workspace = workspace, .existing = SBX_WORKSPACE_KEEP};
        if (sbx_client_new("local", &lo, &c, &err) < 0 || sbx_client_create(c, &cs, &s, &err) < 0) {
            printf("# %s\n", err.msg);
            _exit(1);
        }
        (void)!write(p[1], sbx_session_id(s), strlen(sbx_session_id(s)));
        close(p[1]);
        pause();
        _exit(0);
    }
    close(p[1]);
    ssize_t n = read(p[0], id, idlen - 1);
    close(p[0]);
    id[n > 0 ? n : 0] = '\0';
    return pid;
}

static int wait_gone(const char *path)
{
    for (int i = 0; i < 200 && exists(path); i++)
        sbx_sleep_ms(50);
    return !exists(path);
}

static void tie_case(enum sbx_local_isolation iso)
{
    char id[64];
    pid_t pid = tied_creator(iso, NULL, id, sizeof(id));
    CHECK_EQ_INT((int)strlen(id), 16);
    char *rdir = sbx_xasprintf("%s/run/%s", tmp, id), *ws = sbx_xasprintf("%s/ws/%s", tmp, id);
    CHECK(exists(rdir));
    CHECK(exists(ws));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(wait_gone(rdir));
    CHECK(wait_gone(ws));
    free(rdir);
    free(ws);

    /* A given workspace is never removed. */
    char *given = sbx_xasprintf("%s/given", tmp), *mark = sbx_xasprintf("%s/given/keep", tmp);
    mkdir(given, 0755);
    int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    pid = tied_creator(iso, given, id, sizeof(id));
    CHECK_EQ_INT((int)strlen(id), 16);
    rdir = sbx_xasprintf("%s/run/%s", tmp, id);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(wait_gone(rdir));
    CHECK(exists(mark));
    free(rdir);
    free(given);
    free(mark);

    /* Untied (the default), the sandbox outlives its creator. */
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    pid = fork();
    if (pid == 0) {
        char *run_dir = sbx_xasprintf("%s/run", tmp), *ws_dir = sbx_xasprintf("%s/ws", tmp);
        struct sbx_local_options lo = {
                .runtime_dir = run_dir, .workspace_dir = ws_dir, .isolation = iso};
        struct sbx_client *c = NULL;
        _exit(sbx_client_new("local", &lo, &c, &err) < 0 ||
              sbx_client_create(c, &(struct sbx_create_spec){0}, &s, &err) < 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    json_t *list = NULL;
    CHECK_OK(sbx_client_list(client, &list, &err), &err);
    CHECK_EQ_INT((int)json_array_size(list), 1);
    const char *left = json_string_value(json_object_get(json_array_get(list, 0), "id"));
    if (left)
        CHECK_OK(sbx_client_remove(client, left, 0, &err), &err);
    json_decref(list);
}

static void test_tie_isolated(void)
{
    tie_case(SBX_LOCAL_ISOLATION_DEFAULT);
}

static void test_tie_unconfined(void)
{
    tie_case(SBX_LOCAL_ISOLATION_NONE);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(tmp))
        abort();
    char *run_dir = sbx_xasprintf("%s/run", tmp), *ws_dir = sbx_xasprintf("%s/ws", tmp);
    struct sbx_local_options lo = {.runtime_dir = run_dir, .workspace_dir = ws_dir};
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_client_new("local", &lo, &client, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    TAP_RUN_FORKED(test_tie_isolated);
    TAP_RUN_FORKED(test_tie_unconfined);
    TAP_RUN_FORKED(test_exec);
    TAP_RUN_FORKED(test_pty);
    TAP_RUN_FORKED(test_run);
    sbx_client_free(client);
    rm_tree(tmp);
    free(run_dir);
    free(ws_dir);
    return TAP_DONE();
}
