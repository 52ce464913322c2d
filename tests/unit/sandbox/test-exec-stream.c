/* sbx_session_exec_stream against a real local sandbox (SBX_SUPERVISOR names the supervisor). */
#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "tap.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/local.h"
#include "sbx/session.h"

static char tmp[256];
static struct sbx_client *client;
static struct sbx_session *sess;

static void rm_rf(const char *path)
{
    pid_t p = fork();
    if (p == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
}

static void setup(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char run_dir[300], ws_dir[300];
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/sbx-test-exec-stream.XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(tmp))
        abort();
    snprintf(run_dir, sizeof(run_dir), "%s/run", tmp);
    snprintf(ws_dir, sizeof(ws_dir), "%s/ws", tmp);
    mkdir(run_dir, 0700);
    struct sbx_local_options o = {.runtime_dir = run_dir, .workspace_dir = ws_dir};
    CHECK_OK(sbx_client_new("local", &o, &client, &err), &err);
    CHECK_OK(sbx_client_create(client, NULL, &sess, &err), &err);
    if (!sess) {
        printf("Bail out! cannot create a sandbox: %s\n", err.msg);
        rm_rf(tmp);
        exit(1);
    }
}

static void teardown(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_session_delete(sess, &err), &err);
    sbx_session_free(sess);
    sbx_client_free(client);
    rm_rf(tmp);
}

/* What the callbacks saw, and what they do. */
struct sink {
    struct sbx_buf out, err;
    size_t max_chunk;
    uint64_t counted; /* bytes of stdout counted, not kept (count_only) */
    int count_only;
    const char *trigger; /* once stdout contains it: */
    int trigger_fd;      /* write "\n" here and close it (-1: no) */
    volatile sig_atomic_t *cancel_on_trigger;
    int fail_on_trigger; /* return an error */
    int fired;
    int resize_calls;
    int resize_pipe;        /* read end, drained by the resize callback */
    int stdin_after_resize; /* written "\n" by the resize callback */
};

static void sink_init(struct sink *k)
{
    memset(k, 0, sizeof(*k));
    sbx_buf_init(&k->out, 64 << 20);
    sbx_buf_init(&k->err, 64 << 20);
    k->trigger_fd = k->resize_pipe = k->stdin_after_resize = -1;
}

static void sink_release(struct sink *k)
{
    sbx_buf_release(&k->out);
    sbx_buf_release(&k->err);
}

static int on_output(void *ctx, int stream, const void *p, size_t n, struct sbx_error *err)
{
    struct sink *k = ctx;
    if (n > k->max_chunk)
        k->max_chunk = n;
    if (stream == 1 && k->count_only) {
        k->counted += n;
        return 0;
    }
    int rc = sbx_buf_add(stream == 2 ? &k->err : &k->out, p, n, err);
    if (rc < 0)
        return rc;
    if (stream == 1 && k->trigger && !k->fired && strstr(k->out.data, k->trigger)) {
        k->fired = 1;
        if (k->trigger_fd >= 0) {
            (void)!write(k->trigger_fd, "\n", 1);
            close(k->trigger_fd);
            k->trigger_fd = -1;
        }
        if (k->cancel_on_trigger)
            *k->cancel_on_trigger = 1;
        if (k->fail_on_trigger)
            return sbx_error_set(err, SBX_E_IO, 0, "the consumer gave up");
    }
    return 0;
}

static int on_resize(void *ctx, unsigned short *rows, unsigned short *cols)
{
    struct sink *k = ctx;
    char c;
    while (read(k->resize_pipe, &c, 1) == 1)
        ;
    k->resize_calls++;
    *rows = 40;
    *cols = 100;
    if (k->stdin_after_resize >= 0) {
        (void)!write(k->stdin_after_resize, "\n", 1);
        close(k->stdin_after_resize);
        k->stdin_after_resize = -1;
    }
    return 1;
}

static int run(const struct sbx_exec_spec *spec, int stdin_fd, struct sink *k, struct sbx_exit *st,
               struct sbx_error *err)
{
    struct sbx_exec_stream io = {
            .output = on_output, .stdin_fd = stdin_fd, .resize_fd = -1, .ctx = k};
    memset(st, 0, sizeof(*st));
    return sbx_session_exec_stream(sess, spec, &io, st, err);
}

/* The sandbox pid in "PID\n..." is no longer alive (the kill is asynchronous: bounded wait). */
static int dead_in_sandbox(const char *out)
{
    struct sbx_error err = SBX_ERROR_INIT;
    long pid = strtol(out, NULL, 10);
    if (pid <= 1)
        return 0;
    char cmd[128];
    snprintf(cmd, sizeof(cmd),
             "for i in $(seq 100); do kill -0 %ld 2>/dev/null || exit 0; "
             "sleep 0.05; done; exit 1",
             pid);
    struct sbx_exec_spec spec = {.command = cmd};
    struct sbx_exec_result r = {0};
    if (sbx_session_exec(sess, &spec, &r, &err) < 0)
        return 0;
    int dead = r.status.code == 0;
    sbx_exec_result_release(&r);
    return dead;
}

static void test_order(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st;
    struct sink k;
    sink_init(&k);
    struct sbx_exec_spec spec = {
            .command = "i=0; while [ $i -lt 300 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done; "
                       "exit 3"};
    CHECK_OK(run(&spec, -1, &k, &st, &err), &err);
    CHECK_EQ_INT(st.code, 3);
    struct sbx_buf wo, we;
    sbx_buf_init(&wo, SBX_BUF_NOLIMIT);
    sbx_buf_init(&we, SBX_BUF_NOLIMIT);
    for (int i = 0; i < 300; i++) {
        sbx_buf_addf(&wo, NULL, "o%d\n", i);
        sbx_buf_addf(&we, NULL, "e%d\n", i);
    }
    CHECK_EQ_STR(k.out.data, wo.data);
    CHECK_EQ_STR(k.err.data, we.data);
    sbx_buf_release(&wo);
    sbx_buf_release(&we);
    sink_release(&k);

    /* Merged: one stream, nothing on 2. */
    sink_init(&k);
    struct sbx_exec_spec merged = {.command = "echo a; echo b >&2; echo c",
                                   .flags = SBX_EXEC_MERGE_STDERR};
    CHECK_OK(run(&merged, -1, &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "a\nb\nc\n");
    CHECK_EQ_INT(k.err.len, 0);
    sink_release(&k);

    /* No callback: output discarded, status still reported. */
    struct sbx_exec_stream none = {.stdin_fd = -1, .resize_fd = -1};
    CHECK_OK(sbx_session_exec_stream(sess, &spec, &none, &st, &err), &err);
    CHECK_EQ_INT(st.code, 3);

    const char *const missing[] = {"no-such-command-sbx", NULL};
    struct sbx_exec_spec m = {.argv = missing};
    sink_init(&k);
    CHECK_ERR(run(&m, -1, &k, &st, &err), SBX_E_EXEC, &err, "not found");
    CHECK_ERR(sbx_session_exec_stream(sess, &spec, NULL, &st, &err), SBX_E_INVAL, &err, NULL);
    sink_release(&k);
}

static void test_stdin(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st;
    struct sink k;
    struct sbx_exec_spec spec = {.command = "cat; echo \"end $?\""};

    /* A pipe: forwarded, then EOF. */
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    CHECK(write(p[1], "hello\nworld\n", 12) == 12);
    close(p[1]);
    sink_init(&k);
    CHECK_OK(run(&spec, p[0], &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "hello\nworld\nend 0\n");
    close(p[0]);
    sink_release(&k);

    /* A regular file, several chunks long. */
    char path[300];
    snprintf(path, sizeof(path), "%s/input", tmp);
    int f = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(f >= 0);
    for (int i = 0; i < 20000; i++)
        dprintf(f, "line %d\n", i);
    lseek(f, 0, SEEK_SET);
    struct sbx_exec_spec count = {.command = "wc -l"};
    sink_init(&k);
    CHECK_OK(run(&count, f, &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "20000\n");
    close(f);
    sink_release(&k);

    /* /dev/null: EOF at once. */
    int dn = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sink_init(&k);
    CHECK_OK(run(&spec, dn, &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "end 0\n");
    close(dn);
    sink_release(&k);

    /* None: the command's stdin is /dev/null. */
    sink_init(&k);
    CHECK_OK(run(&spec, -1, &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "end 0\n");
    sink_release(&k);

    /* A terminal as the source: its lines, and its EOF character ends the input. */
    int master, slave;
    CHECK(openpty(&master, &slave, NULL, NULL, NULL) == 0);
    struct termios t;
    tcgetattr(slave, &t);
    t.c_lflag &= ~(tcflag_t)ECHO;
    tcsetattr(slave, TCSANOW, &t);
    CHECK(write(master, "typed\n\004", 7) == 7);
    sink_init(&k);
    CHECK_OK(run(&spec, slave, &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "typed\nend 0\n");
    close(master);
    close(slave);
    sink_release(&k);

    /* Input that depends on output: streamed both ways while the command runs. */
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    struct sbx_exec_spec ask = {.command = "echo ready; read x; echo \"got [$x]\""};
    sink_init(&k);
    k.trigger = "ready\n";
    k.trigger_fd = p[1];
    CHECK_OK(run(&ask, p[0], &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "ready\ngot []\n");
    close(p[0]);
    if (k.trigger_fd >= 0)
        close(k.trigger_fd);
    sink_release(&k);
}

/* A command that stops reading an endless stdin still gets its output out and ends; one that
 * closes its stdin ends the forwarding. */
static void test_stdin_not_read(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st;
    struct sink k;
    int z = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    struct sbx_exec_spec spec = {.command = "head -c 10 >/dev/null; "
                                            "head -c 3000000 /dev/zero | tr '\\0' x; echo"};
    sink_init(&k);
    k.count_only = 1;
    CHECK_OK(run(&spec, z, &k, &st, &err), &err);
    CHECK_EQ_INT(st.code, 0);
    CHECK_EQ_INT(k.counted, 3000001);
    sink_release(&k);

    struct sbx_exec_spec closes = {.command = "exec 0<&-; echo closed; sleep 0.2; echo still"};
    sink_init(&k);
    CHECK_OK(run(&closes, z, &k, &st, &err), &err);
    CHECK_EQ_STR(k.out.data, "closed\nstill\n");
    sink_release(&k);
    close(z);
}

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_large(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st;
    struct sink k;
    sink_init(&k);
    k.count_only = 1;
    long before = maxrss_kib();
    struct sbx_exec_spec spec = {.command = "head -c 67108864 /dev/zero; echo done >&2"};
    CHECK_OK(run(&spec, -1, &k, &st, &err), &err);
    CHECK_EQ_INT(st.code, 0);
    CHECK_EQ_INT(k.counted, 67108864);
    CHECK_EQ_STR(k.err.data, "done\n");
    /* Delivered in chunks, never gathered: 64 MiB went through and we grew by far less. */
    CHECK(k.max_chunk <= 65536);
    long grew = maxrss_kib() - before;
    if (!CHECK(grew < 16 * 1024))
        printf("# grew by %ld KiB\n", grew);
    sink_release(&k);
}

static void test_timeout_cancel_fail(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st;
    struct sink k;

    struct sbx_exec_spec slow = {.command = "echo before; exec sleep 100", .timeout_ms = 300};
    sink_init(&k);
    CHECK_OK(run(&slow, -1, &k, &st, &err), &err);
    CHECK(st.timed_out);
    CHECK_EQ_STR(k.out.data, "before\n");
    sink_release(&k);

    volatile sig_atomic_t cancel = 0;
    struct sbx_exec_spec c = {.command = "echo $$; echo go; exec sleep 100", .cancel = &cancel};
    sink_init(&k);
    k.trigger = "go\n";
    k.cancel_on_trigger = &cancel;
    CHECK_ERR(run(&c, -1, &k, &st, &err), SBX_E_CANCELLED, &err, "command cancelled");
    CHECK(dead_in_sandbox(k.out.data));
    sink_release(&k);

    struct sbx_exec_spec f = {.command = "echo $$; echo go; exec sleep 100"};
    sink_init(&k);
    k.trigger = "go\n";
    k.fail_on_trigger = 1;
    CHECK_ERR(run(&f, -1, &k, &st, &err), SBX_E_IO, &err, "the consumer gave up");
    CHECK(dead_in_sandbox(k.out.data));
    sink_release(&k);
}

/* A background process holding the output open does not keep the call once the command ends. */
static void test_background(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st;
    struct sink k;
    struct sbx_exec_spec spec = {.command = "sleep 100 & echo bye",
                                 .flags = SBX_EXEC_KEEP_BACKGROUND};
    sink_init(&k);
    CHECK_OK(run(&spec, -1, &k, &st, &err), &err);
    CHECK_EQ_INT(st.code, 0);
    CHECK_EQ_STR(k.out.data, "bye\n");
    sink_release(&k);
}

static void test_tty(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st;
    struct sink k;
    int in[2], wake[2];
    CHECK(pipe2(in, O_CLOEXEC) == 0);
    CHECK(pipe2(wake, O_CLOEXEC | O_NONBLOCK) == 0);
    /* The size it starts with, then the one the resize callback gives once woken. */
    struct sbx_exec_spec spec = {.command = "stty size; read x; stty size",
                                 .flags = SBX_EXEC_TTY,
                                 .rows = 30,
                                 .cols = 90};
    sink_init(&k);
    k.trigger = "30 90";
    k.trigger_fd = wake[1];
    k.resize_pipe = wake[0];
    k.stdin_after_resize = in[1];
    struct sbx_exec_stream io = {.output = on_output,
                                 .stdin_fd = in[0],
                                 .resize_fd = wake[0],
                                 .resize = on_resize,
                                 .ctx = &k};
    CHECK_OK(sbx_session_exec_stream(sess, &spec, &io, &st, &err), &err);
    CHECK_EQ_INT(st.code, 0);
    CHECK(k.resize_calls >= 1);
    CHECK_CONTAINS(k.out.data, "30 90");
    CHECK_CONTAINS(k.out.data, "40 100");
    close(in[0]);
    close(wake[0]);
    if (k.trigger_fd >= 0)
        close(k.trigger_fd);
    if (k.stdin_after_resize >= 0)
        close(k.stdin_after_resize);
    sink_release(&k);

    /* The end of a piped source is the terminal's EOF character. */
    CHECK(pipe2(in, O_CLOEXEC) == 0);
    CHECK(write(in[1], "abc\n", 4) == 4);
    close(in[1]);
    struct sbx_exec_spec cat = {.command = "cat; echo end", .flags = SBX_EXEC_TTY};
    sink_init(&k);
    CHECK_OK(run(&cat, in[0], &k, &st, &err), &err);
    CHECK_EQ_INT(st.code, 0);
    CHECK_CONTAINS(k.out.data, "abc");
    CHECK_CONTAINS(k.out.data, "end");
    close(in[0]);
    sink_release(&k);
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL); /* prove the library never raises it */
    TAP_START();
    setup();
    TAP_RUN_FORKED(test_order);
    TAP_RUN_FORKED(test_stdin);
    TAP_RUN_FORKED(test_stdin_not_read);
    TAP_RUN_FORKED(test_large);
    TAP_RUN_FORKED(test_timeout_cancel_fail);
    TAP_RUN_FORKED(test_background);
    TAP_RUN_FORKED(test_tty);
    teardown();
    return TAP_DONE();
}
