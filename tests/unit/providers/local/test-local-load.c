/* The local provider under load: requests queued behind others at a busy supervisor wait, a
 * supervisor that answers nobody still fails them (SBX_SUPERVISOR names the built sbx). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "sbx/local.h"
#include "providers/local/local.h"
#include "sbx/session.h"

/* The supervisor pauses DELAY_MS before each request and serves one at a time, so the last of
 * CLIENTS concurrent requests waits at least (CLIENTS - 1) * DELAY_MS, well past IDLE_MS: a
 * fixed IDLE_MS deadline fails some of them on any machine, however fast. The supervisor moves
 * every DELAY_MS, far inside IDLE_MS, so waiting on progress fails none. */
#define CLIENTS  32
#define DELAY_MS 100
#define IDLE_MS  2000

static char tmp[256];
static char run_dir[300], ws_dir[300];
static struct sbx_client *client;
static struct sbx_session *sess;

struct worker_arg {
    int n;
    pthread_barrier_t *go;
    int ok;
    char why[SBX_ERROR_MSG_MAX];
};

static void *worker(void *p)
{
    struct worker_arg *a = p;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    char cmd[32], want[32];
    snprintf(cmd, sizeof(cmd), "echo %d", a->n);
    snprintf(want, sizeof(want), "%d\n", a->n);
    struct sbx_exec_spec spec = {.command = cmd};
    pthread_barrier_wait(a->go);
    if (sbx_session_exec(sess, &spec, &r, &err) < 0) {
        snprintf(a->why, sizeof(a->why), "%s", err.msg);
        return NULL;
    }
    a->ok = strcmp(r.out.data, want) == 0 && r.status.code == 0;
    if (!a->ok)
        snprintf(a->why, sizeof(a->why), "output '%s', status %d", r.out.data, r.status.code);
    sbx_exec_result_release(&r);
    return NULL;
}

static void test_queue_behind_busy_supervisor(void)
{
    pthread_t t[CLIENTS];
    struct worker_arg a[CLIENTS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, CLIENTS);
    for (int i = 0; i < CLIENTS; i++) {
        a[i] = (struct worker_arg){.n = i, .go = &go};
        if (pthread_create(&t[i], NULL, worker, &a[i]) != 0)
            abort();
    }
    int ok = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        ok += a[i].ok;
        if (!a[i].ok)
            printf("# client %d: %s\n", i, a[i].why);
    }
    pthread_barrier_destroy(&go);
    CHECK_EQ_INT(ok, CLIENTS);
}

/* The serving process (PID 1 of an isolated sandbox) as a host pid, from the record. */
static pid_t serving_pid(void)
{
    struct sbx__local_record rec;
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/%s", run_dir, sbx_session_id(sess));
    sbx__local_record_init(&rec);
    pid_t pid = 0;
    if (sbx__local_record_read(dir, sbx_session_id(sess), &rec) == 0)
        pid = rec.inner > 0 ? rec.inner : rec.pid;
    sbx__local_record_release(&rec);
    return pid;
}

static void test_stopped_supervisor_times_out(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    struct sbx_exec_spec spec = {.command = "true"};
    pid_t pid = serving_pid();
    CHECK(pid > 0);
    if (pid <= 0)
        return;
    CHECK(kill(pid, SIGSTOP) == 0);
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_TIMEOUT, &err, "did not answer");
    kill(pid, SIGCONT);
    /* It answers again once it runs. */
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    sbx_exec_result_release(&r);
}

struct exec_arg {
    int rc;
    enum sbx_errcode code;
    int done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

static void *one_exec(void *p)
{
    struct exec_arg *a = p;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    struct sbx_exec_spec spec = {.command = "true"};
    int rc = sbx_session_exec(sess, &spec, &r, &err);
    if (rc == 0)
        sbx_exec_result_release(&r);
    pthread_mutex_lock(&a->lock);
    a->rc = rc;
    a->code = err.code;
    a->done = 1;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/* A supervisor that accepts nothing, with its listen backlog full: a request fails after the idle
 * time instead of blocking in connect() for ever. */
static void test_full_backlog(void)
{
    enum { MAX_FILL = 512 };
    static int fill[MAX_FILL];
    int nfill = 0, full = 0;
    pid_t pid = serving_pid();
    CHECK(pid > 0);
    if (pid <= 0)
        return;
    CHECK(kill(pid, SIGSTOP) == 0);
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/%s", run_dir, sbx_session_id(sess));
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(dfd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, SBX_PROTO_SOCKNAME);
    while (nfill < MAX_FILL) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            break;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            full = errno == EAGAIN;
            close(fd);
            break;
        }
        fill[nfill++] = fd;
    }
    CHECK(full);

    struct exec_arg a = {.done = 0};
    pthread_mutex_init(&a.lock, NULL);
    pthread_cond_init(&a.cond, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, one_exec, &a) != 0)
        abort();
    /* A bound far past the idle time: a blocking connect would still be waiting. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5 * IDLE_MS / 1000;
    pthread_mutex_lock(&a.lock);
    while (!a.done && pthread_cond_timedwait(&a.cond, &a.lock, &until) == 0)
        ;
    int done = a.done;
    pthread_mutex_unlock(&a.lock);
    CHECK(done);
    /* Let it run again (which also frees a request still stuck), then clean up. */
    kill(pid, SIGCONT);
    pthread_join(t, NULL);
    CHECK(a.rc < 0);
    CHECK_EQ_INT(a.code, SBX_E_TIMEOUT);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    if (dfd >= 0)
        close(dfd);
    pthread_mutex_destroy(&a.lock);
    pthread_cond_destroy(&a.cond);
}

int main(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    TAP_START();
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/sbx-test-local-load.XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(tmp))
        abort();
    snprintf(run_dir, sizeof(run_dir), "%s/run", tmp);
    snprintf(ws_dir, sizeof(ws_dir), "%s/ws", tmp);
    mkdir(run_dir, 0700);
    struct sbx_local_options o = {
            .runtime_dir = run_dir, .workspace_dir = ws_dir, .request_idle_ms = IDLE_MS};
    struct sbx__local_test slow = {.request_delay_ms = DELAY_MS};
    CHECK_OK(sbx__local_client_new_test(&o, &slow, &client, &err), &err);
    if (client)
        CHECK_OK(sbx_client_create(client, NULL, &sess, &err), &err);
    if (!sess) {
        printf("Bail out! cannot create a sandbox: %s\n", err.msg);
        sbx_client_free(client);
        rm_tree(tmp);
        return 1;
    }
    TAP_RUN_FORKED(test_queue_behind_busy_supervisor);
    TAP_RUN_FORKED(test_stopped_supervisor_times_out);
    TAP_RUN_FORKED(test_full_backlog);
    CHECK_OK(sbx_session_delete(sess, &err), &err);
    sbx_session_free(sess);
    sbx_client_free(client);
    rm_tree(tmp);
    return TAP_DONE();
}
