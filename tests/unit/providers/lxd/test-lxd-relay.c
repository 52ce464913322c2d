/* The LXD provider's exec relay (src/providers/lxd/relay.c) against a fake LXD exec endpoint
 * (tests/lxd/fake-exec.py, on a unix socket), with a reader slower than the command so that the
 * relay pauses its streams: a stderr that ends with its end message gives every byte and the
 * exit status; one that LXD closes without it (what LXD before 5.14 does to a reader that fell
 * behind, canonical/lxd#11422) makes the command fail saying its output is incomplete, instead
 * of a clean exit with a short stderr. Skips without python3. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "providers/lxd/lxd.h"
#include "sbx/lxd.h"
#include "sbx/session.h"
#include "tap.h"

#define SIZE (4 << 20)

static const char *python = "/usr/bin/python3";
static char script[4096];
static char dir[64];
static pid_t fake_pid = -1;
static int fake_stdin = -1;

static void stop_fake(void)
{
    if (fake_stdin >= 0)
        close(fake_stdin);
    fake_stdin = -1;
    if (fake_pid > 0) {
        kill(fake_pid, SIGKILL);
        waitpid(fake_pid, NULL, 0);
    }
    fake_pid = -1;
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/lxd.sock", dir);
    unlink(sock);
}

static void cleanup(void)
{
    stop_fake();
    if (dir[0])
        rmdir(dir);
}

/* The fake on dir/lxd.sock in mode ("whole" or "cut"); 0 once it said "ready". */
static int start_fake(const char *mode)
{
    int out[2], in[2];
    char sock[128], size[32];
    snprintf(sock, sizeof(sock), "%s/lxd.sock", dir);
    snprintf(size, sizeof(size), "%d", SIZE);
    if (pipe2(out, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(in, O_CLOEXEC) < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    fake_pid = fork();
    if (fake_pid == 0) {
        dup2(out[1], 1);
        dup2(in[0], 0);
        execl(python, python, script, sock, mode, size, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    fake_stdin = in[1];
    /* Up to its newline: the pipe stays open until the fake wrote all of the line. */
    char line[16] = {0};
    size_t n = 0;
    while (n < sizeof(line) - 1 && !memchr(line, '\n', n)) {
        struct pollfd pf = {.fd = out[0], .events = POLLIN};
        if (poll(&pf, 1, 30000) != 1)
            break;
        ssize_t r = read(out[0], line + n, sizeof(line) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(out[0]);
    return fake_pid > 0 && strcmp(line, "ready\n") == 0 ? 0 : -1;
}

/* Run a command through the relay on a session made by hand; read stdout at once and stderr
 * slowly (4 KiB at a time, with a pause); the bytes read and what sbx_proc_wait said. */
static int run(size_t *err_bytes, struct sbx_exit *st, struct sbx_error *err)
{
    struct sbx__lxd_session s;
    memset(&s, 0, sizeof(s));
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/lxd.sock", dir);
    struct sbx_lxd_options o = {.endpoint = sock};
    int rc = sbx__lxd_server_init(&s.sv, &o, err);
    if (rc < 0)
        return rc;
    s.base.id = sbx_xstrdup("fake");
    s.base.root = sbx_xstrdup("/work");
    s.name = sbx_xstrdup("sbx-fake");
    s.owner = (struct sbx__lxd_account){.name = "root", .uid = 0, .gid = 0, .home = "/root"};
    const char *const argv[] = {"sh", "-c", "head -c 4194304 /dev/zero | tr '\\0' e >&2", NULL};
    struct sbx_exec_spec spec = {.argv = argv};
    struct sbx_proc *p = NULL;
    rc = sbx__lxd_exec_start(&s.base, &spec, "", &p, err);
    *err_bytes = 0;
    if (rc == 0) {
        int fds[2] = {p->stdout_fd, p->stderr_fd};
        char buf[4096];
        while (fds[0] >= 0 || fds[1] >= 0) {
            struct pollfd pf[2] = {{.fd = fds[0], .events = POLLIN},
                                   {.fd = fds[1], .events = POLLIN}};
            if (poll(pf, 2, 30000) <= 0)
                break;
            for (int i = 0; i < 2; i++) {
                if (fds[i] < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t n = read(fds[i], buf, sizeof(buf));
                if (n <= 0) {
                    fds[i] = -1;
                    continue;
                }
                if (i == 1) {
                    *err_bytes += (size_t)n;
                    struct timespec pause = {0, 100000};
                    nanosleep(&pause, NULL);
                }
            }
        }
        rc = sbx_proc_wait(p, 30000, st, err);
        sbx_proc_free(p);
    }
    sbx__lxd_server_release(&s.sv);
    free(s.base.id);
    free(s.base.root);
    free(s.name);
    return rc;
}

static void test_whole_stream(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st = {0};
    size_t got = 0;
    CHECK(start_fake("whole") == 0);
    CHECK_OK(run(&got, &st, &err), &err);
    CHECK_EQ_INT(got, SIZE);
    CHECK_EQ_INT(st.code, 0);
    stop_fake();
}

static void test_cut_stream(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st = {0};
    size_t got = 0;
    CHECK(start_fake("cut") == 0);
    CHECK_ERR(run(&got, &st, &err), SBX_E_IO, &err, "is incomplete");
    CHECK_CONTAINS(err.msg, "LXD closed its stderr after 2097152 bytes without the stream's end");
    CHECK_CONTAINS(err.msg, "'sh' in sandbox 'fake'");
    CHECK_CONTAINS(err.msg, "canonical/lxd#11422");
    CHECK_EQ_INT(got, SIZE / 2);
    stop_fake();
}

int main(void)
{
    TAP_START();
    const char *src = getenv("SBX_SRCDIR");
    if (access(python, X_OK) != 0)
        TAP_SKIP_ALL("no python3 (/usr/bin/python3) for the fake LXD server");
    snprintf(script, sizeof(script), "%s/tests/lxd/fake-exec.py", src ? src : ".");
    if (access(script, R_OK) != 0)
        TAP_SKIP_ALL("tests/lxd/fake-exec.py not found (set SBX_SRCDIR)");
    snprintf(dir, sizeof(dir), "/tmp/sbx-lxd-relay.XXXXXX");
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    atexit(cleanup);
    TAP_RUN(test_whole_stream);
    TAP_RUN(test_cut_stream);
    return TAP_DONE();
}
