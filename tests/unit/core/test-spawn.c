/* The spawn helper (src/core/spawn.c): exit codes, signals, the environment is exactly the one
 * given, cwd, fds, bounded capture, timeouts that kill the group, errors that name the program,
 * and a child that dies with its parent (the parent-death signal, started by fork). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "core/spawn.h"
#include "sbx/buf.h"
#include "sbx/fs.h"

static char tmp[256];

/* Run /bin/sh -c script with spawn options *base (program and argv filled in here). */
static int sh(struct sbx__spawn *sp, const char *script, struct sbx_buf *out,
              struct sbx__spawn_capture *cap, struct sbx_error *err)
{
    const char *const argv[] = {"sh", "-c", script, NULL};
    sp->program = "/bin/sh";
    sp->argv = argv;
    sp->out.how = SBX__SPAWN_PIPE;
    cap->out = out;
    cap->err = NULL;
    int rc = sbx__spawn_run(sp, 10000, cap, err);
    sp->argv = NULL;
    return rc;
}

static void test_status(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    struct sbx__spawn sp = {.program = "sh",
                            .argv = (const char *const[]){"sh", "-c", "exit 3", NULL}};
    CHECK_OK(sbx__spawn_run(&sp, -1, &cap, &err), &err);
    CHECK(WIFEXITED(cap.status));
    CHECK_EQ_INT(WEXITSTATUS(cap.status), 3);

    sp.argv = (const char *const[]){"sh", "-c", "kill -9 $$", NULL};
    CHECK_OK(sbx__spawn_run(&sp, -1, &cap, &err), &err);
    CHECK(WIFSIGNALED(cap.status));
    CHECK_EQ_INT(WTERMSIG(cap.status), SIGKILL);
    char what[32];
    sbx__spawn_describe(cap.status, what, sizeof(what));
    CHECK_EQ_STR(what, "signal 9");
}

static void test_env(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    struct sbx_buf out;
    sbx_buf_init(&out, 65536);
    setenv("SBX_SPAWN_SECRET", "leaked", 1);

    /* Nothing given: nothing at all. */
    struct sbx__spawn sp = {.program = "env"};
    sp.out.how = SBX__SPAWN_PIPE;
    cap.out = &out;
    CHECK_OK(sbx__spawn_run(&sp, 10000, &cap, &err), &err);
    CHECK_EQ_INT(cap.status, 0);
    CHECK_EQ_STR(out.data, "");

    /* Exactly what was given. */
    sbx_buf_reset(&out);
    sp.env = (const char *const[]){"A=1", "B=two words", NULL};
    CHECK_OK(sbx__spawn_run(&sp, 10000, &cap, &err), &err);
    CHECK_EQ_STR(out.data, "A=1\nB=two words\n");

    /* The caller's only when asked. */
    sbx_buf_reset(&out);
    sp.inherit_env = 1;
    CHECK_OK(sbx__spawn_run(&sp, 10000, &cap, &err), &err);
    CHECK_CONTAINS(out.data, "SBX_SPAWN_SECRET=leaked");
    unsetenv("SBX_SPAWN_SECRET");
    sbx_buf_release(&out);
}

static void test_cwd(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    struct sbx_buf out;
    sbx_buf_init(&out, 4096);
    struct sbx__spawn sp = {.cwd = tmp};
    CHECK_OK(sh(&sp, "pwd -P", &out, &cap, &err), &err);
    char *real = realpath(tmp, NULL);
    char *want = sbx_xasprintf("%s\n", real);
    CHECK_EQ_STR(out.data, want);
    free(want);
    free(real);

    char *missing = sbx_xasprintf("%s/missing", tmp);
    sp.cwd = missing;
    sbx_buf_reset(&out);
    CHECK_ERR(sh(&sp, "pwd", &out, &cap, &err), SBX_E_NOTFOUND, &err, "in '");
    free(missing);
    sbx_buf_release(&out);
}

static void test_fds(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    struct sbx_buf out;
    sbx_buf_init(&out, 4096);
    /* Opened without O_CLOEXEC on purpose: the child must not see it all the same. */
    int leaky = open("/dev/null", O_RDONLY);
    CHECK(leaky >= 3);
    char script[128];
    snprintf(script, sizeof(script), "test -e /proc/self/fd/%d && echo open || echo closed", leaky);
    struct sbx__spawn sp = {0};
    CHECK_OK(sh(&sp, script, &out, &cap, &err), &err);
    CHECK_EQ_STR(out.data, "closed\n");

    /* Kept fds land at their numbers, even when they trade places; the gaps below the
     * highest one are closed too. */
    int a[2], b[2];
    CHECK(pipe2(a, O_CLOEXEC) == 0);
    CHECK(pipe2(b, O_CLOEXEC) == 0);
    sp.keep[0] = (struct sbx__spawn_keep){.fd = a[1], .at = leaky + 5};
    sp.keep[1] = (struct sbx__spawn_keep){.fd = b[1], .at = a[1]};
    sp.nkeep = 2;
    snprintf(script, sizeof(script),
             "echo A >&%d; echo B >&%d; test -e /proc/self/fd/%d && echo open || echo closed",
             leaky + 5, a[1], leaky);
    sbx_buf_reset(&out);
    CHECK_OK(sh(&sp, script, &out, &cap, &err), &err);
    CHECK_EQ_STR(out.data, "closed\n");
    close(a[1]);
    close(b[1]);
    char got[8] = "";
    CHECK_EQ_INT(read(a[0], got, sizeof(got)), 2);
    CHECK(memcmp(got, "A\n", 2) == 0);
    CHECK_EQ_INT(read(b[0], got, sizeof(got)), 2);
    CHECK(memcmp(got, "B\n", 2) == 0);
    close(a[0]);
    close(b[0]);

    /* stdin is /dev/null by default; a given fd is used as it is. */
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    struct sbx__spawn cat = {.program = "cat"};
    cat.out = (struct sbx__spawn_stdio){.how = SBX__SPAWN_FD, .fd = p[1]};
    CHECK_OK(sbx__spawn_run(&cat, 10000, &cap, &err), &err);
    CHECK_EQ_INT(cap.status, 0);
    close(p[1]);
    CHECK_EQ_INT(read(p[0], got, sizeof(got)), 0);
    close(p[0]);
    close(leaky);

    struct sbx__spawn bad = {.program = "/bin/true", .nkeep = 1, .keep = {{.fd = 0, .at = 2}}};
    CHECK_ERR(sbx__spawn_run(&bad, 1000, &cap, &err), SBX_E_INVAL, &err, "'/bin/true'");
    sbx_buf_release(&out);
}

static void test_capture(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    struct sbx_buf out, errout;
    sbx_buf_init(&out, 1000);
    sbx_buf_init(&errout, 100);
    const char *const argv[] = {"sh", "-c", "head -c 1000000 /dev/zero; echo oops >&2; exit 4",
                                NULL};
    struct sbx__spawn sp = {.program = "/bin/sh", .argv = argv};
    sp.out.how = sp.err.how = SBX__SPAWN_PIPE;
    cap.out = &out;
    cap.err = &errout;
    CHECK_OK(sbx__spawn_run(&sp, 30000, &cap, &err), &err);
    CHECK_EQ_INT(WEXITSTATUS(cap.status), 4);
    CHECK_EQ_INT(out.len, 1000);
    CHECK(cap.out_cut);
    CHECK_EQ_STR(errout.data, "oops\n");
    CHECK(!cap.err_cut);
    sbx_buf_release(&out);
    sbx_buf_release(&errout);
}

/* 'Z' or gone: the process is dead. */
static int dead(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && (p[2] == 'Z' || p[2] == 'X');
}

static void test_timeout(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    struct sbx_buf out;
    sbx_buf_init(&out, 4096);
    /* The background sleep keeps stdout open, so only the timeout ends the run. */
    const char *const argv[] = {"sh", "-c", "sleep 100 & echo $!; exec sleep 100", NULL};
    struct sbx__spawn sp = {.program = "/bin/sh", .argv = argv, .new_group = 1, .name = "sleeper"};
    sp.out.how = SBX__SPAWN_PIPE;
    cap.out = &out;
    CHECK_ERR(sbx__spawn_run(&sp, 200, &cap, &err), SBX_E_TIMEOUT, &err,
              "'sleeper' did not finish within 200 ms");
    pid_t bg0 = (pid_t)strtol(out.data, NULL, 10);
    CHECK(bg0 > 0);
    /* The same through start and wait. */
    struct sbx__child c;
    CHECK_OK(sbx__spawn_start(&sp, &c, &err), &err);
    char line[32] = "";
    ssize_t n = read(c.out, line, sizeof(line) - 1);
    CHECK(n > 1);
    pid_t bg = (pid_t)strtol(line, NULL, 10);
    CHECK(bg > 0);
    CHECK_ERR(sbx__child_wait(&c, 200, NULL, &err), SBX_E_TIMEOUT, &err,
              "'sleeper' did not finish within 200 ms");
    CHECK_EQ_INT(c.pid, -1);
    /* SIGKILL went to the whole group: the background sleep dies too (bounded wait). */
    int gone = 0;
    for (int i = 0; i < 500 && !(gone = dead(bg) && dead(bg0)); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK(gone);
    sbx_buf_release(&out);
}

static void test_session(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__child c;
    const char *const argv[] = {"sh", "-c", "exec cut -d' ' -f6 /proc/self/stat", NULL};
    struct sbx__spawn sp = {.program = "/bin/sh", .argv = argv, .new_session = 1};
    sp.out.how = SBX__SPAWN_PIPE;
    CHECK_OK(sbx__spawn_start(&sp, &c, &err), &err);
    char line[32] = "";
    CHECK(read(c.out, line, sizeof(line) - 1) > 0);
    int st = -1;
    pid_t pid = c.pid;
    CHECK_OK(sbx__child_wait(&c, -1, &st, &err), &err);
    CHECK_EQ_INT(st, 0);
    CHECK_EQ_INT(strtol(line, NULL, 10), pid);
}

static void test_missing(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    struct sbx__spawn sp = {.program = "sbx-no-such-program"};
    CHECK_ERR(sbx__spawn_run(&sp, 1000, &cap, &err), SBX_E_NOTFOUND, &err,
              "cannot run 'sbx-no-such-program': not found in '");
    sp.program = "/nonexistent/prog";
    CHECK_ERR(sbx__spawn_run(&sp, 1000, &cap, &err), SBX_E_NOTFOUND, &err,
              "cannot run '/nonexistent/prog'");
    sp.program = "bin/sh";
    CHECK_ERR(sbx__spawn_run(&sp, 1000, &cap, &err), SBX_E_INVAL, &err, "not an absolute path");

    /* A bare name is never looked up in $PATH: only in the search path given. */
    char *prog = sbx_xasprintf("%s/sbx-fake-tool", tmp);
    int fd = open(prog, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    CHECK(fd >= 0);
    CHECK(write(fd, "#!/bin/sh\nexit 7\n", 17) == 17);
    close(fd);
    const char *old = getenv("PATH");
    char *saved = old ? sbx_xstrdup(old) : NULL;
    setenv("PATH", tmp, 1);
    sp.program = "sbx-fake-tool";
    CHECK_ERR(sbx__spawn_run(&sp, 1000, &cap, &err), SBX_E_NOTFOUND, &err, "'sbx-fake-tool'");
    sp.search_path = tmp;
    CHECK_OK(sbx__spawn_run(&sp, 10000, &cap, &err), &err);
    CHECK_EQ_INT(WEXITSTATUS(cap.status), 7);
    if (saved)
        setenv("PATH", saved, 1);
    free(saved);
    unlink(prog);
    free(prog);
}

/* The wait status of child pid (ours: this process is a subreaper), waiting at most about 10 s;
 * -1 if it is still running then (it is killed and reaped). */
static int status_of(pid_t pid)
{
    int st = 0;
    for (int i = 0; i < 1000; i++) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return st;
        if (w < 0)
            return -1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* A process that starts `sleep 100` with the given parent-death signal and exits: the pid of the
 * sleep (now this process's child: a subreaper adopts orphans), or -1. */
static pid_t orphan_sleep(int sig)
{
    int p[2];
    pid_t child = -1;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t mid = fork();
    if (mid == 0) {
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx__child c;
        struct sbx__spawn sp = {.program = "/bin/sleep",
                                .argv = (const char *const[]){"sleep", "100", NULL},
                                .parent_death_signal = sig};
        pid_t got = sbx__spawn_start(&sp, &c, &err) == 0 ? c.pid : -1;
        _exit(write(p[1], &got, sizeof(got)) == (ssize_t)sizeof(got) ? 0 : 1);
    }
    close(p[1]);
    if (mid > 0 && read(p[0], &child, sizeof(child)) != (ssize_t)sizeof(child))
        child = -1;
    close(p[0]);
    if (mid > 0)
        waitpid(mid, NULL, 0);
    return child;
}

static void test_parent_death(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__spawn_capture cap = {0};
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        CHECK(!"cannot become a subreaper to wait for orphans");
        return;
    }
    /* With the signal: the child gets it once its parent is gone. */
    pid_t child = orphan_sleep(SIGTERM);
    CHECK(child > 0);
    int st = child > 0 ? status_of(child) : -1;
    CHECK(st != -1 && WIFSIGNALED(st));
    CHECK_EQ_INT(st != -1 && WIFSIGNALED(st) ? WTERMSIG(st) : 0, SIGTERM);
    /* Without: it outlives its parent, until we end it. */
    child = orphan_sleep(0);
    CHECK(child > 0);
    CHECK(child > 0 && kill(child, 0) == 0);
    if (child > 0)
        kill(child, SIGKILL);
    st = child > 0 ? status_of(child) : -1;
    CHECK_EQ_INT(st != -1 && WIFSIGNALED(st) ? WTERMSIG(st) : 0, SIGKILL);
    prctl(PR_SET_CHILD_SUBREAPER, 0);

    /* Started by fork, the child gets what posix_spawn gives: stdio, kept fds at their numbers,
     * the cwd, nothing else of ours. */
    struct sbx_buf out, errout;
    sbx_buf_init(&out, 4096);
    sbx_buf_init(&errout, 4096);
    /* The shell takes single-digit fds in redirections: keep at 9, leak something below. */
    int leaky = open("/dev/null", O_RDONLY), k[2];
    CHECK(leaky >= 3 && leaky < 9 && pipe2(k, O_CLOEXEC) == 0);
    char script[256];
    snprintf(script, sizeof(script),
             "echo out; echo err >&2; pwd -P; echo kept >&9; "
             "test -e /proc/self/fd/%d && echo leaked || echo closed",
             leaky);
    const char *const argv[] = {"sh", "-c", script, NULL};
    struct sbx__spawn sp = {.program = "/bin/sh",
                            .argv = argv,
                            .cwd = tmp,
                            .new_group = 1,
                            .parent_death_signal = SIGKILL};
    sp.out.how = sp.err.how = SBX__SPAWN_PIPE;
    sp.keep[sp.nkeep++] = (struct sbx__spawn_keep){.fd = k[1], .at = 9};
    cap.out = &out;
    cap.err = &errout;
    CHECK_OK(sbx__spawn_run(&sp, 10000, &cap, &err), &err);
    CHECK_EQ_INT(cap.status, 0);
    char *real = realpath(tmp, NULL);
    char *want = sbx_xasprintf("out\n%s\nclosed\n", real);
    CHECK_EQ_STR(out.data, want);
    CHECK_EQ_STR(errout.data, "err\n");
    close(k[1]);
    char got[8] = "";
    CHECK_EQ_INT(read(k[0], got, sizeof(got)), 5);
    CHECK(memcmp(got, "kept\n", 5) == 0);
    close(k[0]);
    close(leaky);
    free(want);
    free(real);

    /* An exec that fails is the error of the start, as with posix_spawn. */
    char *prog = sbx_xasprintf("%s/sbx-not-a-program", tmp);
    int fd = open(prog, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    CHECK(fd >= 0 && write(fd, "\x01\x02\x03\x04", 4) == 4);
    if (fd >= 0)
        close(fd);
    struct sbx__spawn bad = {.program = prog, .parent_death_signal = SIGKILL};
    CHECK_ERR(sbx__spawn_run(&bad, 1000, &cap, &err), SBX_E_SYS, &err, "cannot run '");
    bad.parent_death_signal = 0;
    /* posix_spawn learns of the failed exec through memory its vfork child shares; valgrind
     * runs that child as a plain fork, so the failure arrives as exit status 127 instead. */
    if (getenv("SBX_TEST_VALGRIND")) {
        CHECK_OK(sbx__spawn_run(&bad, 1000, &cap, &err), &err);
        CHECK(WIFEXITED(cap.status) && WEXITSTATUS(cap.status) == 127);
    } else {
        CHECK_ERR(sbx__spawn_run(&bad, 1000, &cap, &err), SBX_E_SYS, &err, "cannot run '");
    }
    unlink(prog);
    free(prog);
    sbx_buf_release(&out);
    sbx_buf_release(&errout);
}

int main(void)
{
    TAP_START();
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/sbx-test-spawn.XXXXXX", t && t[0] == '/' ? t : "/tmp");
    if (!mkdtemp(tmp))
        TAP_SKIP_ALL("cannot create a temporary directory");
    TAP_RUN_FORKED(test_status);
    TAP_RUN_FORKED(test_env);
    TAP_RUN_FORKED(test_cwd);
    TAP_RUN_FORKED(test_fds);
    TAP_RUN_FORKED(test_capture);
    TAP_RUN_FORKED(test_timeout);
    TAP_RUN_FORKED(test_session);
    TAP_RUN_FORKED(test_missing);
    TAP_RUN_FORKED(test_parent_death);
    rmdir(tmp);
    return TAP_DONE();
}
