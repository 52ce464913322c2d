/* The local provider against the real supervisor (SBX_SUPERVISOR names the built sbx). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "providers/local/local.h"
#include "sandbox/manifest/internal.h"
#include "sandbox/session/internal.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

static char tmp[256];
static char run_dir[300], ws_dir[300];
static struct sbx_client *client;
static struct sbx_session *sess;

static void setup(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/sbx-test-local.XXXXXX", t && t[0] ? t : "/tmp");
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
        exit(1);
    }
    /* The session opens its workspace on its first file operation and keeps it open: opened
     * here, so that the forked case that happens to be first is not blamed for the fd. */
    struct sbx_dirlist l = {0};
    CHECK_OK(sbx_session_ls(sess, ".", &l, &err), &err);
    sbx_dirlist_release(&l);
}

static void teardown(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_session_delete(sess, &err), &err);
    sbx_session_free(sess);
    sbx_client_free(client);
    rm_tree(tmp);
}

/* Run a shell command, return the result (release it). */
static int sh(const char *cmd, struct sbx_exec_result *r, struct sbx_error *err)
{
    struct sbx_exec_spec spec = {.command = cmd};
    memset(r, 0, sizeof(*r));
    return sbx_session_exec(sess, &spec, r, err);
}

static void test_exec_basics(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    const char *const argv[] = {"printf", "%s-%s", "a b", "c", NULL};
    struct sbx_exec_spec spec = {.argv = argv};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "a b-c");
    CHECK_EQ_INT(r.status.code, 0);
    sbx_exec_result_release(&r);

    CHECK_OK(sh("echo out; echo err >&2; exit 7", &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "out\n");
    CHECK_EQ_STR(r.err.data, "err\n");
    CHECK_EQ_INT(r.status.code, 7);
    CHECK_EQ_INT(r.status.signal, 0);
    sbx_exec_result_release(&r);

    CHECK_OK(sh("kill -USR1 $$", &r, &err), &err);
    CHECK_EQ_INT(r.status.code, -1);
    CHECK_EQ_INT(r.status.signal, SIGUSR1);
    sbx_exec_result_release(&r);

    /* default cwd is the root; the harness environment does not leak in */
    setenv("SBX_TEST_SECRET", "leak", 1);
    CHECK_OK(sh("pwd; echo \"[$SBX_TEST_SECRET]\"", &r, &err), &err);
    char *want = sbx_xasprintf("%s\n[]\n", sbx_session_root(sess));
    CHECK_EQ_STR(r.out.data, want);
    free(want);
    sbx_exec_result_release(&r);
    unsetenv("SBX_TEST_SECRET");

    const char *const env[] = {"FOO=bar baz", "PATH=/usr/bin:/bin", NULL};
    struct sbx_exec_spec e = {.command = "echo \"$FOO\" \"$PATH\"", .env = env};
    CHECK_OK(sbx_session_exec(sess, &e, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "bar baz /usr/bin:/bin\n");
    sbx_exec_result_release(&r);

    const char *const missing[] = {"no-such-command-sbx", NULL};
    struct sbx_exec_spec m = {.argv = missing};
    CHECK_ERR(sbx_session_exec(sess, &m, &r, &err), SBX_E_EXEC, &err,
              "command 'no-such-command-sbx' not found");

    struct sbx_exec_spec both = {.argv = argv, .command = "x"};
    CHECK_ERR(sbx_session_exec(sess, &both, &r, &err), SBX_E_INVAL, &err, "exactly one");
    const char *const badenv[] = {"NOEQUALS", NULL};
    struct sbx_exec_spec be = {.command = "true", .env = badenv};
    CHECK_ERR(sbx_session_exec(sess, &be, &r, &err), SBX_E_INVAL, &err, "'NOEQUALS'");
}

static void test_stdin(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    /* More than a pipe buffer each way at once: the loop must not deadlock. */
    size_t n = 1 << 20;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)('a' + i % 26);
    const char *const argv[] = {"cat", NULL};
    struct sbx_exec_spec spec = {.argv = argv, .input = data, .input_len = n, .output_limit = n};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    CHECK_EQ_MEM(r.out.data, r.out.len, data, n);
    sbx_exec_result_release(&r);
    /* A command that never reads its input does not hang or kill us (no SIGPIPE). */
    const char *const tru[] = {"true", NULL};
    struct sbx_exec_spec t = {.argv = tru, .input = data, .input_len = n};
    CHECK_OK(sbx_session_exec(sess, &t, &r, &err), &err);
    CHECK_EQ_INT(r.status.code, 0);
    sbx_exec_result_release(&r);
    free(data);
}

static void test_cwd(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    CHECK_OK(sh("mkdir -p sub/dir", &r, &err), &err);
    sbx_exec_result_release(&r);
    struct sbx_exec_spec spec = {.command = "pwd", .cwd = "sub/dir"};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    char *want = sbx_xasprintf("%s/sub/dir\n", sbx_session_root(sess));
    CHECK_EQ_STR(r.out.data, want);
    sbx_exec_result_release(&r);
    /* absolute under the root is the same place */
    char *abs = sbx_xasprintf("%s/sub/dir", sbx_session_root(sess));
    spec.cwd = abs;
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, want);
    sbx_exec_result_release(&r);
    free(abs);
    free(want);

    spec.cwd = "../";
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_INVAL, &err, "'..'");
    spec.cwd = "/etc";
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_INVAL, &err, "working directory");
    spec.cwd = "nope";
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_NOTFOUND, &err, "nope");
    /* a symlink planted in the workspace that points out */
    CHECK_OK(sh("ln -s / escape && ln -s sub inside", &r, &err), &err);
    sbx_exec_result_release(&r);
    spec.cwd = "escape";
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_PERM, &err, "escape");
    spec.cwd = "escape/etc";
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_PERM, &err, NULL);
    /* a symlink that stays inside is fine */
    spec.cwd = "inside/dir";
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    sbx_exec_result_release(&r);
}

static void test_timeout(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    /* The process ignores SIGTERM: SIGKILL after the grace period ends it. */
    struct sbx_exec_spec spec = {.command = "trap '' TERM; echo ready; sleep 30; echo never",
                                 .timeout_ms = 1000,
                                 .kill_grace_ms = 200};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    CHECK(r.status.timed_out);
    CHECK_EQ_INT(r.status.signal, SIGKILL);
    CHECK_EQ_STR(r.out.data, "ready\n");
    sbx_exec_result_release(&r);
    /* One that honours SIGTERM ends with it. */
    struct sbx_exec_spec t = {.command = "exec sleep 30", .timeout_ms = 200};
    CHECK_OK(sbx_session_exec(sess, &t, &r, &err), &err);
    CHECK(r.status.timed_out);
    CHECK_EQ_INT(r.status.signal, SIGTERM);
    sbx_exec_result_release(&r);
    struct sbx_exec_spec neg = {.command = "true", .timeout_ms = -1};
    CHECK_ERR(sbx_session_exec(sess, &neg, &r, &err), SBX_E_INVAL, &err, "negative");
}

static long maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_huge_output(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    long before = maxrss_kb();
    /* 1 GiB of output: memory stays bounded and the result keeps head and tail. */
    struct sbx_exec_spec spec = {
            .command = "echo BEGIN; head -c 1073741824 /dev/zero | tr '\\0' x; echo; echo END",
            .output_limit = 65536};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    CHECK_EQ_INT(r.status.code, 0);
    CHECK_EQ_INT(r.out.total, 1073741824ull + 6 + 1 + 4);
    CHECK_EQ_INT(r.out.len, 65536);
    CHECK_EQ_INT(r.out.dropped, r.out.total - 65536);
    CHECK(strncmp(r.out.data, "BEGIN\nxxx", 9) == 0);
    CHECK(strcmp(r.out.data + r.out.len - 8, "xxx\nEND\n") == 0);
    sbx_exec_result_release(&r);
    long grown = maxrss_kb() - before;
    if (!tap__result(grown < 64 * 1024, __FILE__, __LINE__, "memory stays bounded"))
        printf("#   max RSS grew by %ld KiB\n", grown);
}

static pid_t read_pid(const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    const char *const argv[] = {"cat", path, NULL};
    struct sbx_exec_spec spec = {.argv = argv};
    pid_t pid = 0;
    if (sbx_session_exec(sess, &spec, &r, &err) == 0) {
        pid = (pid_t)strtol(r.out.data, NULL, 10);
        sbx_exec_result_release(&r);
    }
    return pid;
}

static int alive(pid_t pid)
{
    /* a zombie is as good as dead */
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z';
}

static void test_daemon_killed_on_close(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    struct sbx_session *s2 = NULL;
    struct sbx_client *plain = NULL;
    /* Host pids are compared: unconfined (isolated commands live in a pid namespace; the
     * integration test 1002 covers the isolated daemon). */
    struct sbx_local_options o = {
            .runtime_dir = run_dir, .workspace_dir = ws_dir, .isolation = SBX_LOCAL_ISOLATION_NONE};
    CHECK_OK(sbx_client_new("local", &o, &plain, &err), &err);
    CHECK_OK(sbx_client_create(plain, NULL, &s2, &err), &err);
    sbx_client_free(plain);
    if (!s2)
        return;
    struct sbx_session *keep = sess;
    sess = s2;
    /* A double-forked daemon in its own session, holding the output pipe open: by default it
     * dies when its command ends. */
    const char *daemon_cmd = "setsid sh -c 'echo $$ > daemon.pid; exec sleep 1000' & "
                             "while [ ! -s daemon.pid ]; do sleep 0.01; done; echo started";
    CHECK_OK(sh(daemon_cmd, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "started\n");
    sbx_exec_result_release(&r);
    pid_t daemon = read_pid("daemon.pid");
    CHECK(daemon > 0 && !alive(daemon));
    CHECK_OK(sbx_session_rm(s2, "daemon.pid", 0, &err), &err);
    /* Kept on purpose, it lives until the sandbox goes. */
    struct sbx_exec_spec kept = {.command = daemon_cmd, .flags = SBX_EXEC_KEEP_BACKGROUND};
    memset(&r, 0, sizeof(r));
    CHECK_OK(sbx_session_exec(s2, &kept, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "started\n");
    sbx_exec_result_release(&r);
    daemon = read_pid("daemon.pid");
    CHECK(daemon > 0 && alive(daemon));
    CHECK_OK(sbx_session_delete(s2, &err), &err);
    CHECK(!alive(daemon));
    sbx_session_free(s2);
    sess = keep;
}

static void test_files(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_session_write(sess, "f/a.txt", "hello", 5, 0640, SBX_WRITE_PARENTS, &err), &err);
    CHECK_OK(sbx_session_read(sess, "f/a.txt", 0, &b, &err), &err);
    CHECK_EQ_STR(b.data, "hello");
    sbx_buf_reset(&b);
    struct sbx_dirent d = {0};
    CHECK_OK(sbx_session_stat(sess, "f/a.txt", &d, &err), &err);
    CHECK_EQ_INT(d.mode, 0640);
    CHECK_EQ_INT(d.size, 5);
    CHECK_EQ_STR(d.name, "a.txt");
    CHECK(d.type == SBX_FILE_REGULAR);
    sbx_dirent_release(&d);

    CHECK_OK(sbx_session_write(sess, "f/a.txt", " world", 6, 0, SBX_WRITE_APPEND, &err), &err);
    CHECK_OK(sbx_session_read(sess, "f/a.txt", 0, &b, &err), &err);
    CHECK_EQ_STR(b.data, "hello world");
    sbx_buf_reset(&b);
    CHECK_ERR(sbx_session_write(sess, "f/a.txt", "x", 1, 0, SBX_WRITE_EXCL, &err), SBX_E_EXISTS,
              &err, "already exists");
    CHECK_ERR(sbx_session_write(sess, "g/b.txt", "x", 1, 0, 0, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_ERR(sbx_session_read(sess, "f/a.txt", 4, &b, &err), SBX_E_TOOBIG, &err, "larger");
    CHECK_ERR(sbx_session_read(sess, "f", 0, &b, &err), SBX_E_INVAL, &err, "not a regular file");
    CHECK_ERR(sbx_session_read(sess, "missing", 0, &b, &err), SBX_E_NOTFOUND, &err, NULL);
    struct sbx_exec_result fr;
    CHECK_OK(sh("mkfifo fifo", &fr, &err), &err);
    sbx_exec_result_release(&fr);
    CHECK_ERR(sbx_session_read(sess, "fifo", 0, &b, &err), SBX_E_INVAL, &err, "not a regular file");

    /* absolute under the root */
    char *abs = sbx_xasprintf("%s/f/a.txt", sbx_session_root(sess));
    CHECK_OK(sbx_session_read(sess, abs, 0, &b, &err), &err);
    CHECK_EQ_STR(b.data, "hello world");
    sbx_buf_reset(&b);
    free(abs);

    /* escapes */
    CHECK_ERR(sbx_session_read(sess, "../x", 0, &b, &err), SBX_E_INVAL, &err, "'..'");
    CHECK_ERR(sbx_session_read(sess, "/etc/passwd", 0, &b, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_write(sess, "/tmp/x", "x", 1, 0, 0, &err), SBX_E_INVAL, &err, NULL);
    struct sbx_exec_result r;
    CHECK_OK(sh("ln -s /etc/passwd pw; ln -s /tmp outdir", &r, &err), &err);
    sbx_exec_result_release(&r);
    CHECK_ERR(sbx_session_read(sess, "pw", 0, &b, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_write(sess, "outdir/x", "x", 1, 0, 0, &err), SBX_E_PERM, &err, NULL);
    /* writing over a planted symlink replaces the link, never the target */
    CHECK_OK(sbx_session_write(sess, "pw", "mine", 4, 0, 0, &err), &err);
    CHECK_OK(sbx_session_stat(sess, "pw", &d, &err), &err);
    CHECK(d.type == SBX_FILE_REGULAR);
    sbx_dirent_release(&d);

    /* streaming write from an fd with a limit */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "0123456789", 10) == 10);
    close(p[1]);
    CHECK_ERR(sbx_session_write_fd(sess, "big", p[0], 5, 0, 0, &err), SBX_E_TOOBIG, &err, NULL);
    close(p[0]);
    CHECK_ERR(sbx_session_stat(sess, "big", &d, &err), SBX_E_NOTFOUND, &err, NULL);

    /* ls: structured, sorted, symlinks not followed */
    CHECK_OK(sbx_session_mkdir(sess, "l", 0, &err), &err);
    CHECK_ERR(sbx_session_mkdir(sess, "l", 0, &err), SBX_E_EXISTS, &err, NULL);
    CHECK_OK(sbx_session_mkdir(sess, "l", SBX_MKDIR_PARENTS, &err), &err);
    CHECK_OK(sbx_session_write(sess, "l/b", "12", 2, 0, 0, &err), &err);
    CHECK_OK(sbx_session_mkdir(sess, "l/a", 0, &err), &err);
    CHECK_OK(sh("ln -s b l/c; printf x > 'l/new\nline'", &r, &err), &err);
    sbx_exec_result_release(&r);
    struct sbx_dirlist l = {0};
    CHECK_OK(sbx_session_ls(sess, "l", &l, &err), &err);
    CHECK_EQ_INT(l.n, 4);
    if (l.n == 4) {
        CHECK_EQ_STR(l.v[0].name, "a");
        CHECK(l.v[0].type == SBX_FILE_DIR);
        CHECK_EQ_STR(l.v[1].name, "b");
        CHECK_EQ_INT(l.v[1].size, 2);
        CHECK_EQ_STR(l.v[2].name, "c");
        CHECK(l.v[2].type == SBX_FILE_SYMLINK);
        CHECK_EQ_STR(l.v[2].target, "b");
        CHECK_EQ_STR(l.v[3].name, "new\nline");
    }
    sbx_dirlist_release(&l);
    CHECK_ERR(sbx_session_ls(sess, "outdir", &l, &err), SBX_E_PERM, &err, NULL);

    /* rm */
    CHECK_ERR(sbx_session_rm(sess, "l", 0, &err), SBX_E_INVAL, &err, NULL);
    CHECK_OK(sbx_session_rm(sess, "outdir", 0, &err), &err); /* the link, not /tmp */
    CHECK_OK(sbx_session_rm(sess, "l", SBX_RM_RECURSIVE, &err), &err);
    CHECK_ERR(sbx_session_rm(sess, "l", 0, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_session_rm(sess, "l", SBX_RM_FORCE, &err), &err);
    CHECK_ERR(sbx_session_rm(sess, "", SBX_RM_RECURSIVE, &err), SBX_E_PERM, &err, "root");
    CHECK_ERR(sbx_session_rm(sess, "..", SBX_RM_RECURSIVE, &err), SBX_E_INVAL, &err, NULL);
    struct stat st;
    CHECK(stat("/tmp", &st) == 0 && S_ISDIR(st.st_mode));
    sbx_buf_release(&b);
}

static void test_pty(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_pty_update u;
    const char *const shargv[] = {"/bin/sh", NULL};
    struct sbx_exec_spec spec = {.argv = shargv, .flags = SBX_EXEC_TTY};

    CHECK_OK(sbx_session_pty_start(sess, &spec, 300, &u, &err), &err);
    int id = u.id;
    CHECK(id >= 1000);
    CHECK(!u.exited);
    sbx_pty_update_release(&u);
    CHECK_EQ_INT(sbx_session_pty_count(sess), 1);

    const char *cmd = "echo $((6*7)); tty\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 1500, 0, &u, &err), &err);
    CHECK_CONTAINS(u.output.data, "42");
    CHECK_CONTAINS(u.output.data, "/dev/pts/");
    CHECK_EQ_INT(u.id, id);
    sbx_pty_update_release(&u);

    CHECK_OK(sbx_session_pty_resize(sess, id, 33, 111, &err), &err);
    cmd = "stty size\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 1500, 0, &u, &err), &err);
    CHECK_CONTAINS(u.output.data, "33 111");
    sbx_pty_update_release(&u);

    /* Ctrl-C reaches the foreground job */
    cmd = "echo sleep-$((2+2)); sleep 100; echo slept\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 1500, 0, &u, &err), &err);
    CHECK_CONTAINS(u.output.data, "sleep-4"); /* the job is running */
    sbx_pty_update_release(&u);
    CHECK_OK(sbx_session_pty_write(sess, id, "\003", 1, 250, 0, &u, &err), &err);
    sbx_pty_update_release(&u);
    cmd = "echo after-$((1+1))\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 1500, 0, &u, &err), &err);
    CHECK_CONTAINS(u.output.data, "after-2");
    CHECK(!strstr(u.output.data, "slept"));
    sbx_pty_update_release(&u);

    /* exit: the update reports it and the id is gone */
    cmd = "exit 5\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 5000, 0, &u, &err), &err);
    CHECK(u.exited);
    CHECK_EQ_INT(u.status.code, 5);
    CHECK_EQ_INT(u.id, 0);
    sbx_pty_update_release(&u);
    CHECK_ERR(sbx_session_pty_write(sess, id, "x", 1, 250, 0, &u, &err), SBX_E_NOTFOUND, &err,
              "no process with id");
    CHECK_EQ_INT(sbx_session_pty_count(sess), 0);

    /* writing to a terminal whose process exited meanwhile reports the exit */
    struct sbx_exec_spec quick = {.command = "read x; exit 3", .flags = SBX_EXEC_TTY};
    CHECK_OK(sbx_session_pty_start(sess, &quick, 250, &u, &err), &err);
    id = u.id;
    sbx_pty_update_release(&u);
    CHECK_OK(sbx_session_pty_write(sess, id, "\n", 1, 250, 0, &u, &err), &err);
    if (!u.exited) { /* not yet: the next call must see it */
        sbx_pty_update_release(&u);
        CHECK_OK(sbx_session_pty_write(sess, id, "more\n", 5, 2000, 0, &u, &err), &err);
    }
    CHECK(u.exited);
    CHECK_EQ_INT(u.status.code, 3);
    sbx_pty_update_release(&u);

    /* a command that finishes inside the yield window never gets an id */
    struct sbx_exec_spec fast = {.command = "echo done"};
    CHECK_OK(sbx_session_pty_start(sess, &fast, 5000, &u, &err), &err);
    CHECK(u.exited);
    CHECK_EQ_INT(u.id, 0);
    CHECK_EQ_STR(u.output.data, "done\n");
    sbx_pty_update_release(&u);

    /* a process that never stops writing still yields at the deadline, output bounded */
    struct sbx_exec_spec flood = {.command = "exec yes", .output_limit = 4096};
    CHECK_OK(sbx_session_pty_start(sess, &flood, 300, &u, &err), &err);
    CHECK(u.id > 0);
    CHECK_EQ_INT(u.output.len, 4096);
    CHECK(u.output.dropped > 0);
    int flood_id = u.id;
    sbx_pty_update_release(&u);
    CHECK_OK(sbx_session_pty_kill(sess, flood_id, &err), &err);

    /* without a tty: no stdin, output still pollable, stderr merged */
    struct sbx_exec_spec notty = {.command = "echo one; echo two >&2; sleep 100"};
    CHECK_OK(sbx_session_pty_start(sess, &notty, 300, &u, &err), &err);
    id = u.id;
    CHECK(id > 0);
    CHECK_CONTAINS(u.output.data, "one");
    CHECK_CONTAINS(u.output.data, "two");
    sbx_pty_update_release(&u);
    CHECK_ERR(sbx_session_pty_write(sess, id, "x", 1, 250, 0, &u, &err), SBX_E_INVAL, &err,
              "stdin is not available");
    CHECK_OK(sbx_session_pty_kill(sess, id, &err), &err);
    CHECK_ERR(sbx_session_pty_kill(sess, id, &err), SBX_E_NOTFOUND, &err, NULL);
}

static void test_pty_prune(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_pty_update u;
    struct sbx_exec_spec spec = {.command = "exec sleep 1000"};
    struct sbx_exec_spec brief = {.command = "exec sleep 1"};
    int ids[SBX_PTY_MAX + 2];
    for (int i = 0; i < SBX_PTY_MAX + 2; i++) {
        /* ids[5] exits on its own a second later, long before the table is full */
        CHECK_OK(sbx_session_pty_start(sess, i == 5 ? &brief : &spec, 0, &u, &err), &err);
        ids[i] = u.id;
        sbx_pty_update_release(&u);
        if (i == 10) /* touch the first one: now ids[1] and ids[2] are the oldest */
            CHECK_ERR(sbx_session_pty_resize(sess, ids[0], 0, 0, &err), SBX_E_INVAL, &err,
                      "no terminal");
    }
    CHECK_EQ_INT(sbx_session_pty_count(sess), SBX_PTY_MAX);
    /* The first prune took the exited one although older ones were live, the second the least
     * recently used live one; the touched one and the newest are all there. */
    CHECK_ERR(sbx_session_pty_kill(sess, ids[5], &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_ERR(sbx_session_pty_kill(sess, ids[1], &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_session_pty_kill(sess, ids[2], &err), &err);
    CHECK_OK(sbx_session_pty_kill(sess, ids[0], &err), &err);
    for (int i = SBX_PTY_MAX + 2 - SBX_PTY_PROTECTED; i < SBX_PTY_MAX + 2; i++)
        CHECK_OK(sbx_session_pty_kill(sess, ids[i], &err), &err);
    sbx_session_pty_kill_all(sess);
    CHECK_EQ_INT(sbx_session_pty_count(sess), 0);
}

struct thread_arg {
    int ok;
    int failed;
    char first[SBX_ERROR_MSG_MAX + 64]; /* the first failure, for the report */
};

static void thread_failed(struct thread_arg *a, const char *what, int i, const char *why)
{
    if (a->failed++ == 0)
        snprintf(a->first, sizeof(a->first), "%s %d: %s", what, i, why);
}

static void *worker(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < 20; i++) {
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_exec_result r;
        char *cmd = sbx_xasprintf("echo %d", i);
        struct sbx_exec_spec spec = {.command = cmd};
        if (sbx_session_exec(sess, &spec, &r, &err) == 0) {
            char *want = sbx_xasprintf("%d\n", i);
            if (strcmp(r.out.data, want) == 0 && r.status.code == 0)
                a->ok++;
            else
                thread_failed(a, "exec", i, r.out.data);
            free(want);
            sbx_exec_result_release(&r);
        } else {
            thread_failed(a, "exec", i, err.msg);
        }
        char *path = sbx_xasprintf("t/%p-%d", p, i);
        if (sbx_session_write(sess, path, cmd, strlen(cmd), 0, SBX_WRITE_PARENTS, &err) == 0)
            a->ok++;
        else
            thread_failed(a, "write", i, err.msg);
        free(path);
        free(cmd);
    }
    return NULL;
}

/* Isolation is the default: the workspace at /workspace, users from the manifest, run_as, the
 * terminal owned by the command's user, limits reported as such, bad options refused. */
static void test_isolation(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    CHECK_EQ_STR(sbx_session_root(sess), "/workspace");
    CHECK_OK(sh("pwd; id -un; cat /proc/1/cmdline >/dev/null 2>&1 && echo sees-pid1; "
                "ls /sys 2>&1 >/dev/null | head -c 0; test -e /sys || echo no-sys",
                &r, &err),
             &err);
    CHECK_EQ_STR(r.out.data, "/workspace\nsandbox\nno-sys\n");
    sbx_exec_result_release(&r);

    /* Users and run_as. */
    struct sbx_manifest *m = sbx_manifest_new();
    CHECK_OK(sbx_manifest_add_user(m, "alice", &err), &err);
    CHECK_OK(sbx_manifest_add_user(m, "bob", &err), &err);
    struct sbx_session *s2 = NULL;
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){.manifest = m}, &s2, &err), &err);
    sbx_manifest_free(m);
    if (!s2)
        return;
    struct sbx_exec_spec spec = {.command = "id -un; stat -c %U \"$(tty)\""};
    spec.flags = SBX_EXEC_TTY;
    CHECK_OK(sbx_session_exec(s2, &spec, &r, &err), &err);
    /* The provider's user runs commands; declared users only when named (the SDK's rule). */
    CHECK_EQ_STR(r.out.data, "sandbox\r\nsandbox\r\n");
    sbx_exec_result_release(&r);
    spec = (struct sbx_exec_spec){.command = "id -un", .user = "bob"};
    if (geteuid() == 0) {
        CHECK_OK(sbx_session_exec(s2, &spec, &r, &err), &err);
        CHECK_EQ_STR(r.out.data, "bob\n");
        sbx_exec_result_release(&r);
    } else {
        CHECK_ERR(sbx_session_exec(s2, &spec, &r, &err), SBX_E_UNSUPPORTED, &err, "maps only");
    }
    spec.user = "mallory";
    CHECK_ERR(sbx_session_exec(s2, &spec, &r, &err), SBX_E_NOTFOUND, &err, "mallory");
    CHECK_OK(sbx_session_delete(s2, &err), &err);
    sbx_session_free(s2);

    /* An OOM kill is reported as such (where this caller may create cgroups). */
    struct sbx_client *lim = NULL;
    struct sbx_local_options o = {.runtime_dir = run_dir,
                                  .workspace_dir = ws_dir,
                                  .limits = {.memory_bytes = 64ull << 20}};
    CHECK_OK(sbx_client_new("local", &o, &lim, &err), &err);
    s2 = NULL;
    int rc = sbx_client_create(lim, NULL, &s2, &err);
    if (rc < 0) {
        /* cgroup v1 has no delegation: an unprivileged caller cannot have an explicit limit */
        CHECK(geteuid() != 0 && strstr(err.msg, "cgroup"));
    } else {
        spec = (struct sbx_exec_spec){
                .command = "exec python3 -c 'a = []\nwhile True: a.append(bytearray(16 << 20))'"};
        CHECK_OK(sbx_session_exec(s2, &spec, &r, &err), &err);
        CHECK_EQ_INT(r.status.signal, SIGKILL);
        CHECK(r.status.oom);
        CHECK_EQ_STR(r.status.reason, "killed: out of memory (limit 64 MiB)");
        sbx_exec_result_release(&r);
        CHECK_OK(sbx_session_delete(s2, &err), &err);
        sbx_session_free(s2);
    }
    sbx_client_free(lim);

    /* Options that make no sense are refused when the client is made. */
    struct sbx_local_options bad = {.isolation = SBX_LOCAL_ISOLATION_NONE,
                                    .network = SBX_LOCAL_NETWORK_NONE};
    CHECK_ERR(sbx_client_new("local", &bad, &lim, &err), SBX_E_INVAL, &err, "network 'none'");
    bad = (struct sbx_local_options){.isolation = SBX_LOCAL_ISOLATION_NONE, .limits.pids = 5};
    CHECK_ERR(sbx_client_new("local", &bad, &lim, &err), SBX_E_INVAL, &err, "limits");
    bad = (struct sbx_local_options){.isolation = 42};
    CHECK_ERR(sbx_client_new("local", &bad, &lim, &err), SBX_E_INVAL, &err, "isolation mode 42");
    struct sbx_local_grant g = {.src = "relative"};
    bad = (struct sbx_local_options){.grants = &g, .n_grants = 1};
    CHECK_ERR(sbx_client_new("local", &bad, &lim, &err), SBX_E_INVAL, &err, "absolute");
    /* A grant the isolation refuses fails at create, naming it. */
    g.src = "/";
    bad = (struct sbx_local_options){
            .runtime_dir = run_dir, .workspace_dir = ws_dir, .grants = &g, .n_grants = 1};
    CHECK_OK(sbx_client_new("local", &bad, &lim, &err), &err);
    s2 = NULL;
    CHECK_ERR(sbx_client_create(lim, NULL, &s2, &err), SBX_E_INVAL, &err, "'/'");
    sbx_client_free(lim);
}

static void test_threads(void)
{
    pthread_t t[8];
    struct thread_arg a[8] = {{0}};
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, worker, &a[i]);
    int total = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        total += a[i].ok;
        if (a[i].failed)
            printf("# thread %d: %d failed, first: %s\n", i, a[i].failed, a[i].first);
    }
    CHECK_EQ_INT(total, 8 * 20 * 2);
}

static void test_attach_list_remove(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *a = NULL, *b = NULL;
    json_t *list = NULL, *state = NULL;
    CHECK_OK(sbx_client_create(client, NULL, &a, &err), &err);
    if (!a)
        return;
    char id[64];
    snprintf(id, sizeof(id), "%s", sbx_session_id(a));
    CHECK_EQ_INT(strlen(id), 16);
    struct sbx_exec_result r;
    struct sbx_exec_spec mark = {.command = "echo m > marker"};
    CHECK_OK(sbx_session_exec(a, &mark, &r, &err), &err);
    sbx_exec_result_release(&r);

    /* attach by a prefix, see the same workspace */
    char prefix[9];
    snprintf(prefix, sizeof(prefix), "%.8s", id);
    CHECK_OK(sbx_client_attach(client, prefix, &b, &err), &err);
    if (b) {
        CHECK_EQ_STR(sbx_session_id(b), id);
        struct sbx_exec_spec test = {.command = "test -f marker"};
        CHECK_OK(sbx_session_exec(b, &test, &r, &err), &err);
        CHECK_EQ_INT(r.status.code, 0);
        sbx_exec_result_release(&r);
        sbx_session_free(b);
        b = NULL;
    }
    /* resume from the state */
    CHECK_OK(sbx_session_state(a, &state, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(state, "provider")), "local");
    CHECK_EQ_INT(json_integer_value(json_object_get(state, "version")), 1);
    CHECK_OK(sbx_client_resume(client, state, &b, &err), &err);
    sbx_session_free(b);
    b = NULL;
    /* A valid state of another provider (docker's fields added) is still not local's. */
    json_object_set_new(state, "provider", json_string("docker"));
    json_object_set_new(state, "container",
                        json_string("0123456789abcdef0123456789abcdef"
                                    "0123456789abcdef0123456789abcdef"));
    json_object_set_new(state, "image", json_string("img"));
    CHECK_ERR(sbx_client_resume(client, state, &b, &err), SBX_E_INVAL, &err, "'docker'");
    json_decref(state);

    CHECK_OK(sbx_client_list(client, &list, &err), &err);
    int found = 0;
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) found +=
            strcmp(json_string_value(json_object_get(v, "id")), id) == 0;
    CHECK_EQ_INT(found, 1);
    json_decref(list);

    CHECK_ERR(sbx_client_attach(client, "../etc", &b, &err), SBX_E_INVAL, &err, "not a sandbox id");
    CHECK_ERR(sbx_client_attach(client, "ffffffffffffffff", &b, &err), SBX_E_NOTFOUND, &err,
              "no sandbox 'ffffffffffffffff'");

    CHECK_OK(sbx_client_remove(client, id, 0, &err), &err);
    CHECK_ERR(sbx_client_attach(client, id, &b, &err), SBX_E_NOTFOUND, &err, NULL);
    /* the old handle now reports the sandbox gone, it does not hang */
    struct sbx_exec_spec spec = {.command = "true"};
    CHECK_ERR(sbx_session_exec(a, &spec, &r, &err), SBX_E_SANDBOX, &err, "is gone");
    sbx_session_free(a);
    char *ws = sbx_xasprintf("%s/%s", ws_dir, id);
    struct stat st;
    CHECK(stat(ws, &st) < 0 && errno == ENOENT);
    free(ws);
}

/* The one-command attach (sbx_client_attach_once) skips asking the supervisor: the same ids
 * and errors as attach, and a sandbox whose supervisor was killed fails at its first exec with
 * the "is gone" that attach gives. */
static void test_attach_once(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_local_options o = {
            .runtime_dir = run_dir, .workspace_dir = ws_dir, .isolation = SBX_LOCAL_ISOLATION_NONE};
    struct sbx_client *c = NULL;
    struct sbx_session *a = NULL, *b = NULL;
    struct sbx_exec_result r;
    CHECK_OK(sbx_client_new("local", &o, &c, &err), &err);
    CHECK_OK(sbx_client_create(c, NULL, &a, &err), &err);
    if (!a) {
        sbx_client_free(c);
        return;
    }
    char *id = sbx_xstrdup(sbx_session_id(a));
    CHECK_ERR(sbx_client_attach_once(c, "ffffffffffffffff", &b, &err), SBX_E_NOTFOUND, &err,
              "no sandbox 'ffffffffffffffff'");
    CHECK_ERR(sbx_client_attach_once(c, "../etc", &b, &err), SBX_E_INVAL, &err, "not a sandbox id");
    CHECK_OK(sbx_client_attach_once(c, id, &b, &err), &err);
    struct sbx_exec_spec echo = {.command = "echo once"};
    memset(&r, 0, sizeof(r));
    CHECK_OK(sbx_session_exec(b, &echo, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "once\n");
    sbx_exec_result_release(&r);
    sbx_session_free(b);
    b = NULL;

    char *dir = sbx_xasprintf("%s/%s", run_dir, id);
    struct sbx__local_record rec;
    sbx__local_record_init(&rec);
    CHECK_EQ_INT(sbx__local_record_read(dir, id, &rec), 0);
    CHECK(rec.pid > 0 && kill(rec.pid, SIGKILL) == 0);
    sbx__local_record_release(&rec);
    free(dir);
    /* The probe of attach sees the death once the supervisor's socket is closed. */
    int rc = 0;
    for (int i = 0; i < 200; i++) {
        rc = sbx_client_attach(c, id, &b, &err);
        sbx_session_free(b);
        b = NULL;
        if (rc == -SBX_E_SANDBOX)
            break;
        sbx_sleep_ms(50);
    }
    CHECK_EQ_INT(rc, -SBX_E_SANDBOX);
    CHECK_CONTAINS(err.msg, "is gone");
    CHECK_OK(sbx_client_attach_once(c, id, &b, &err), &err);
    memset(&r, 0, sizeof(r));
    if (b)
        CHECK_ERR(sbx_session_exec(b, &echo, &r, &err), SBX_E_SANDBOX, &err, "is gone");
    sbx_session_free(b);
    sbx_session_free(a);
    CHECK_OK(sbx_client_remove(c, id, 0, &err), &err);
    free(id);
    sbx_client_free(c);
}

/* A create hands its sandbox over as its last step (the unclaimed marker goes); a runtime dir
 * whose create never did (marker still there, nobody holds the lease) is what a killed create
 * left, and the next listing removes it even while its supervisor serves. A handed-over one
 * stays. */
static void test_unclaimed_reclaimed(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *kept = NULL, *lost = NULL;
    json_t *list = NULL;
    struct stat st;
    CHECK_OK(sbx_client_create(client, NULL, &kept, &err), &err);
    CHECK_OK(sbx_client_create(client, NULL, &lost, &err), &err);
    if (!kept || !lost) {
        sbx_session_free(kept);
        sbx_session_free(lost);
        return;
    }
    char *kdir = sbx_xasprintf("%s/%s", run_dir, sbx_session_id(kept));
    char *ldir = sbx_xasprintf("%s/%s", run_dir, sbx_session_id(lost));
    char *lws = sbx_xasprintf("%s/%s", ws_dir, sbx_session_id(lost));
    char *kmark = sbx_xasprintf("%s/%s", kdir, SBX_PROTO_UNCLAIMED);
    char *lmark = sbx_xasprintf("%s/%s", ldir, SBX_PROTO_UNCLAIMED);
    CHECK(lstat(kmark, &st) < 0 && errno == ENOENT);
    /* As if the create of 'lost' had died after its supervisor reported. */
    int fd = open(lmark, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK_OK(sbx_client_list(client, &list, &err), &err);
    CHECK(lstat(ldir, &st) < 0 && errno == ENOENT);
    CHECK(lstat(lws, &st) < 0 && errno == ENOENT);
    int found_kept = 0, found_lost = 0;
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        found_kept += strcmp(id, sbx_session_id(kept)) == 0;
        found_lost += strcmp(id, sbx_session_id(lost)) == 0;
    }
    CHECK_EQ_INT(found_kept, 1);
    CHECK_EQ_INT(found_lost, 0);
    json_decref(list);
    struct sbx_exec_result r;
    struct sbx_exec_spec spec = {.command = "true"};
    CHECK_ERR(sbx_session_exec(lost, &spec, &r, &err), SBX_E_SANDBOX, &err, "is gone");
    CHECK_OK(sbx_session_exec(kept, &spec, &r, &err), &err);
    sbx_exec_result_release(&r);
    CHECK_OK(sbx_session_delete(kept, &err), &err);
    sbx_session_free(kept);
    sbx_session_free(lost);
    free(kdir);
    free(ldir);
    free(lws);
    free(kmark);
    free(lmark);
}

static void test_workspace_kept(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *a = NULL;
    char *dir = sbx_xasprintf("%s/mine", tmp);
    mkdir(dir, 0755);
    struct sbx_create_spec spec = {.workspace = dir};
    CHECK_OK(sbx_client_create(client, &spec, &a, &err), &err);
    if (a) {
        struct sbx_exec_result r;
        struct sbx_exec_spec touch = {.command = "echo k > kept"};
        CHECK_OK(sbx_session_exec(a, &touch, &r, &err), &err);
        sbx_exec_result_release(&r);
        CHECK_OK(sbx_session_delete(a, &err), &err);
        sbx_session_free(a);
    }
    char *f = sbx_xasprintf("%s/kept", dir);
    struct stat st;
    CHECK(stat(f, &st) == 0);
    free(f);
    spec.workspace = "/nonexistent/sbx";
    CHECK_ERR(sbx_client_create(client, &spec, &a, &err), SBX_E_NOTFOUND, &err, "workspace");
    free(dir);
}

/* The content of a small host file, or "" (caller frees). */
static char *host_text(const char *dir, const char *name)
{
    char *path = sbx_xasprintf("%s/%s", dir, name), buf[64] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : 0;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    free(path);
    return sbx_xstrdup(buf);
}

/* A given workspace that holds files: refused unless spec.existing says what to do; keep
 * never writes over a file that is there (and leaves the directory as it was), overwrite
 * replaces what the manifest names. */
static void test_workspace_existing(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *a = NULL;
    char *dir = sbx_xasprintf("%s/full", tmp), *path = sbx_xasprintf("%s/a.txt", dir);
    mkdir(dir, 0755);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "mine", 4) == 4);
    if (fd >= 0)
        close(fd);
    struct sbx_manifest *m = sbx_manifest_new();
    CHECK_OK(sbx_manifest_add_file(m, "new.txt", "n", 1, NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "a.txt", "theirs", 6, NULL, &err), &err);
    struct sbx_create_spec spec = {.workspace = dir, .manifest = m};
    CHECK_ERR(sbx_client_create(client, &spec, &a, &err), SBX_E_EXISTS, &err, "is not empty");
    spec.existing = SBX_WORKSPACE_KEEP;
    CHECK_ERR(sbx_client_create(client, &spec, &a, &err), SBX_E_EXISTS, &err,
              "entry 'a.txt': 'a.txt' is already in the workspace");
    char *t = host_text(dir, "a.txt");
    CHECK_EQ_STR(t, "mine");
    free(t);
    t = host_text(dir, "new.txt");
    CHECK_EQ_STR(t, ""); /* what the failed create wrote is gone */
    free(t);
    spec.existing = SBX_WORKSPACE_OVERWRITE;
    CHECK_OK(sbx_client_create(client, &spec, &a, &err), &err);
    if (a) {
        CHECK_OK(sbx_session_delete(a, &err), &err);
        sbx_session_free(a);
    }
    t = host_text(dir, "a.txt");
    CHECK_EQ_STR(t, "theirs");
    free(t);
    sbx_manifest_free(m);
    free(path);
    free(dir);
}

/* 1 when s is a port number and nothing else */
static int atoi_ok(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return end != s && *end == '\0' && v > 0 && v < 65536;
}

static void test_ports(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *url = NULL;
    CHECK_ERR(sbx_session_resolve_port(sess, 0, &url, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_resolve_port(sess, 1, &url, &err), SBX_E_NOTFOUND, &err,
              "nothing listens on port 1");
    /* a listener started inside the sandbox */
    struct sbx_pty_update u;
    struct sbx_exec_spec spec = {
            .command = "exec python3 -c 'import socket,sys,time; s=socket.socket(); "
                       "s.bind((\"127.0.0.1\",0)); s.listen(); print(s.getsockname()[1], "
                       "flush=True); time.sleep(100)'"};
    if (sbx_session_pty_start(sess, &spec, 2000, &u, &err) < 0 || u.id == 0) {
        printf("# skipping the listener check: python3 unavailable (%s)\n", err.msg);
        sbx_pty_update_release(&u);
        return;
    }
    int port = (int)strtol(u.output.data, NULL, 10);
    CHECK_OK(sbx_session_resolve_port(sess, port, &url, &err), &err);
    /* a host-side forward into the sandbox's network namespace: a host port of its own */
    CHECK(url && strncmp(url, "http://127.0.0.1:", 17) == 0 && atoi_ok(url + 17));
    free(url);
    CHECK_OK(sbx_session_pty_kill(sess, u.id, &err), &err);
    sbx_pty_update_release(&u);
}

static void digest_of(int variant, const char *secret, char out[65])
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new();
    CHECK_OK(sbx_manifest_add_file(m, "a.txt", variant ? "y" : "x", 1, NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_dir(m, "d", NULL, &err), &err);
    CHECK_OK(sbx_manifest_set_env(m, "TOKEN", secret, SBX_MANIFEST_ENV_SECRET, &err), &err);
    CHECK_OK(sbx__manifest_digest(m, out, &err), &err);
    sbx_manifest_free(m);
}

static void test_manifest_digest(void)
{
    char a[65], b[65], c[65], d[65];
    digest_of(0, "s1", a);
    digest_of(0, "s1", b);
    digest_of(1, "s1", c);
    digest_of(0, "s2", d);
    CHECK_EQ_INT(strlen(a), 64);
    CHECK_EQ_STR(a, b);
    CHECK(strcmp(a, c) != 0);
    CHECK_EQ_STR(a, d); /* a secret's value never shows in the digest */
    /* A session state's manifest (files by digest) has the digest of the one it came from. */
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new(), *m2 = NULL;
    CHECK_OK(sbx_manifest_add_file(m, "a.txt", "x", 1, NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_dir(m, "d", NULL, &err), &err);
    CHECK_OK(sbx_manifest_set_env(m, "TOKEN", "s1", SBX_MANIFEST_ENV_SECRET, &err), &err);
    json_t *doc = NULL;
    CHECK_OK(sbx_manifest_to_json(m, SBX_MANIFEST_JSON_CONTENT_DIGESTS, &doc, NULL, &err), &err);
    struct sbx_manifest_load_opts lo = {.flags = SBX_MANIFEST_NO_HOST_CHECKS |
                                                 SBX_MANIFEST_CONTENT_DIGESTS};
    CHECK_OK(sbx_manifest_from_json(doc, &lo, &m2, &err), &err);
    CHECK(m2 && sbx_manifest_find(m2, "a.txt")->content_sha256 != NULL);
    CHECK_OK(sbx_manifest_set_env(m2, "TOKEN", "s1", SBX_MANIFEST_ENV_SECRET, &err), &err);
    if (m2)
        CHECK_OK(sbx__manifest_digest(m2, c, &err), &err);
    CHECK_EQ_STR(c, a);
    json_decref(doc);
    sbx_manifest_free(m2);
    sbx_manifest_free(m);
}

/* A session hands out the manifest its sandbox was made from: the creator's copy (the caller
 * frees its own at once), and on an attached session the one its state keeps, read once. */
static void test_session_manifest(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new();
    struct sbx_session *a = NULL, *b = NULL;
    const struct sbx_manifest *got = NULL, *again = NULL;
    struct sbx_manifest_entry_opts o = {.description = "the notes", .ephemeral = 1};
    CHECK_OK(sbx_manifest_add_file(m, "notes.md", "n", 1, &o, &err), &err);
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){.manifest = m}, &a, &err), &err);
    sbx_manifest_free(m);
    if (!a)
        return;
    CHECK_OK(sbx__session_manifest(a, &got, &err), &err);
    const struct sbx_manifest_entry *e = got ? sbx_manifest_find(got, "notes.md") : NULL;
    CHECK(e && strcmp(e->description, "the notes") == 0 && e->content && e->ephemeral);
    CHECK_OK(sbx_client_attach(client, sbx_session_id(a), &b, &err), &err);
    if (b) {
        CHECK_OK(sbx__session_manifest(b, &got, &err), &err);
        e = got ? sbx_manifest_find(got, "notes.md") : NULL;
        CHECK(e && strcmp(e->description, "the notes") == 0);
        CHECK_OK(sbx__session_manifest(b, &again, &err), &err);
        CHECK(again == got); /* parsed once */
        sbx_session_free(b);
    }
    /* Without a manifest: an empty one. */
    CHECK_OK(sbx__session_manifest(sess, &got, &err), &err);
    CHECK(got && sbx_manifest_entry_count(got) == 0);
    CHECK_OK(sbx_session_delete(a, &err), &err);
    sbx_session_free(a);
}

/* Send raw bytes on a fresh control connection and return the reply (NULL if none). */
static json_t *raw_request(const void *bytes, size_t n)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *dir = sbx_xasprintf("%s/%s", run_dir, sbx_session_id(sess));
    int fd = -1;
    json_t *reply = NULL;
    if (sbx__local_connect(dir, sbx_session_id(sess), NULL, &fd, &err) == 0) {
        /* The half-close tells the supervisor nothing more is coming. */
        if (sbx_fd_write_all(fd, bytes, n, &err) == 0 && shutdown(fd, SHUT_WR) == 0)
            (void)sbx__proto_recv(fd, &reply, NULL, 0, NULL, sbx_deadline_after_ms(10000), &err);
        close(fd);
    }
    free(dir);
    return reply;
}

static void expect_refusal(const char *what, const void *bytes, size_t n, const char *needle)
{
    json_t *r = raw_request(bytes, n);
    const char *msg = json_string_value(json_object_get(r, "error"));
    int ok = r && json_is_false(json_object_get(r, "ok")) && msg && strstr(msg, needle);
    if (!tap__result(ok, __FILE__, __LINE__, what))
        printf("#   reply: %s\n", r ? sbx_json_dumps(r, 0) : "(none)");
    json_decref(r);
}

static void frame(const char *json, struct sbx_buf *b)
{
    size_t n = strlen(json);
    unsigned char h[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    sbx_buf_reset(b);
    if (sbx_buf_add(b, h, 4, NULL) < 0 || sbx_buf_add(b, json, n, NULL) < 0)
        abort();
}

static void test_protocol_abuse(void)
{
    struct sbx_buf b;
    sbx_buf_init(&b, 1 << 20);
    const unsigned char huge[4] = {0x7f, 0xff, 0xff, 0xff};
    expect_refusal("an oversized frame is refused", huge, 4, "exceeds the limit");
    frame("{not json", &b);
    expect_refusal("malformed JSON is refused", b.data, b.len, "");
    frame("[1,2]", &b);
    expect_refusal("a non-object is refused", b.data, b.len, "not a JSON object");
    frame("{\"op\":\"format-disk\"}", &b);
    expect_refusal("an unknown operation is refused", b.data, b.len, "unknown operation");
    frame("{\"nop\":1}", &b);
    expect_refusal("a missing op is refused", b.data, b.len, "'op'");
    frame("{\"op\":\"exec\",\"argv\":[1]}", &b);
    expect_refusal("argv of numbers is refused", b.data, b.len, "must hold strings");
    frame("{\"op\":\"exec\",\"argv\":[]}", &b);
    expect_refusal("an empty argv is refused", b.data, b.len, "empty command");
    frame("{\"op\":\"exec\",\"argv\":[\"true\"],\"cwd\":\"../..\"}", &b);
    expect_refusal("a cwd with '..' is refused", b.data, b.len, "'..'");
    frame("{\"op\":\"exec\",\"argv\":[\"true\"],\"rows\":70000}", &b);
    expect_refusal("a terminal size out of range is refused", b.data, b.len, "out of range");
    frame("{\"op\":\"exec\",\"argv\":[\"true\"],\"env\":[\"=x\"]}", &b);
    expect_refusal("a bad environment entry is refused", b.data, b.len, "environment entry '=x'");
    frame("{\"op\":\"port\",\"port\":0}", &b);
    expect_refusal("port 0 is refused", b.data, b.len, "1..65535");
    /* A half-sent frame then a hang-up leaves the supervisor serving. */
    frame("{\"op\":\"info\"}", &b);
    json_t *r = raw_request(b.data, 3);
    CHECK(r == NULL);
    json_decref(r);
    sbx_buf_release(&b);
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result res;
    CHECK_OK(sh("echo still here", &res, &err), &err);
    CHECK_EQ_STR(res.out.data, "still here\n");
    sbx_exec_result_release(&res);
}

static void collect_event(const struct sbx_session_event *ev, void *data)
{
    json_array_append_new((json_t *)data, sbx_session_event_json(ev));
}

static void test_events(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    json_t *events = json_array();
    sbx_session_set_event_fn(sess, collect_event, events);
    struct sbx_exec_spec spec = {.command = "exit 2"};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    sbx_exec_result_release(&r);
    struct sbx_buf b;
    sbx_buf_init(&b, 100);
    CHECK_ERR(sbx_session_read(sess, "../nope", 0, &b, &err), SBX_E_INVAL, &err, NULL);
    sbx_buf_release(&b);
    sbx_session_set_event_fn(sess, NULL, NULL);
    CHECK_EQ_INT(json_array_size(events), 4);
    char *text = sbx_json_dumps(events, SBX_JSON_SORTED);
    CHECK_CONTAINS(text, "\"op\":\"exec\",\"phase\":\"start\"");
    CHECK_CONTAINS(text, "\"exit_code\":2");
    CHECK_CONTAINS(text, "\"ok\":false");
    CHECK_CONTAINS(text, "\"command\":\"exit 2\"");
    CHECK_CONTAINS(text, "\"error_code\":\"invalid\"");
    CHECK_CONTAINS(text, "\"path\":\"../nope\"");
    json_t *last = json_array_get(events, 3), *first = json_array_get(events, 0);
    CHECK(json_integer_value(json_object_get(last, "seq")) >
          json_integer_value(json_object_get(first, "seq")));
    free(text);
    json_decref(events);
}

/* A session's state mark: the same while what state() returns stays the same (commands and
 * file operations do not change it), a new one after a snapshot is recorded in the state, and
 * another session's mark (the same sandbox attached again) is never the same number. */
static void test_state_gen(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    json_t *a = NULL, *b = NULL;
    uint64_t g0 = sbx_session_state_gen(sess);
    CHECK(g0 != 0);
    CHECK_OK(sbx_session_state(sess, &a, &err), &err);
    CHECK_OK(sh("echo hi > made.txt", &r, &err), &err);
    sbx_exec_result_release(&r);
    CHECK_OK(sbx_session_write(sess, "w.txt", "x", 1, 0644, 0, &err), &err);
    CHECK(sbx_session_state_gen(sess) == g0);
    CHECK_OK(sbx_session_state(sess, &b, &err), &err);
    CHECK(a && b && json_equal(a, b));
    json_decref(b);
    b = NULL;

    char store_dir[400], *ref = NULL;
    snprintf(store_dir, sizeof(store_dir), "%s/store", tmp);
    struct sbx_snapshot_store *st = NULL;
    CHECK_OK(sbx_snapshot_store_open(store_dir, &st, &err), &err);
    CHECK_OK(sbx_session_snapshot(sess, st, &ref, &err), &err);
    uint64_t g1 = sbx_session_state_gen(sess);
    CHECK(g1 != 0 && g1 != g0);
    CHECK_OK(sbx_session_state(sess, &b, &err), &err);
    CHECK(b && !json_equal(a, b));
    CHECK_EQ_STR(json_string_value(json_object_get(b, "snapshot")), ref ? ref : "?");

    struct sbx_session *again = NULL;
    CHECK_OK(sbx_client_attach(client, sbx_session_id(sess), &again, &err), &err);
    if (again) {
        uint64_t g2 = sbx_session_state_gen(again);
        CHECK(g2 != 0 && g2 != g0 && g2 != g1);
        sbx_session_free(again);
    }
    free(ref);
    sbx_snapshot_store_free(st);
    json_decref(a);
    json_decref(b);
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL); /* prove the library never raises it */
    TAP_START();
    setup();
    TAP_RUN_FORKED(test_exec_basics);
    TAP_RUN_FORKED(test_stdin);
    TAP_RUN_FORKED(test_cwd);
    TAP_RUN_FORKED(test_timeout);
    TAP_RUN_FORKED(test_huge_output);
    TAP_RUN_FORKED(test_daemon_killed_on_close);
    TAP_RUN_FORKED(test_files);
    TAP_RUN_FORKED(test_pty);
    TAP_RUN_FORKED(test_pty_prune);
    TAP_RUN_FORKED(test_isolation);
    TAP_RUN_FORKED(test_threads);
    TAP_RUN_FORKED(test_attach_list_remove);
    TAP_RUN_FORKED(test_attach_once);
    TAP_RUN_FORKED(test_unclaimed_reclaimed);
    TAP_RUN_FORKED(test_workspace_kept);
    TAP_RUN_FORKED(test_workspace_existing);
    TAP_RUN_FORKED(test_ports);
    TAP_RUN_FORKED(test_events);
    TAP_RUN_FORKED(test_protocol_abuse);
    TAP_RUN_FORKED(test_manifest_digest);
    TAP_RUN_FORKED(test_session_manifest);
    TAP_RUN_FORKED(test_state_gen);
    teardown();
    return TAP_DONE();
}
