/* The local provider's teardown helpers: the supervisor record and the checks that keep rm from
 * signalling a reused pid or touching a cgroup that is not the sandbox's. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "tap.h"
#include "providers/local/local.h"
#include "sbx/fs.h"

static char dir[64];

static void test_proc_stat(void)
{
    unsigned long long a = 0, b = 0;
    char st = 0;
    CHECK_EQ_INT(sbx__proc_stat(getpid(), &a, &st), 0);
    CHECK(a > 0);
    CHECK(st == 'R' || st == 'S');
    CHECK_EQ_INT(sbx__proc_stat(getpid(), &b, NULL), 0);
    CHECK(a == b);
    CHECK_EQ_INT(sbx__proc_stat(0, &a, NULL), -1);
    /* A command name with spaces and parentheses does not shift the fields. */
    pid_t p = fork();
    if (p == 0) {
        char *argv[] = {"sleep", "30", NULL};
        int fd = open("/proc/self/comm", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, "a) b (c", 7);
            close(fd);
        }
        pause();
        (void)argv;
        _exit(0);
    }
    usleep(100 * 1000);
    unsigned long long s1 = 0;
    CHECK_EQ_INT(sbx__proc_stat(p, &s1, &st), 0);
    CHECK(s1 >= a);
    CHECK(st == 'S');
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    CHECK_EQ_INT(sbx__proc_stat(p, &s1, NULL), -1);
}

static void test_record_round_trip(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__local_record r, back;
    const char *id = "0123456789abcdef";
    sbx__local_record_init(&r);
    sbx__local_record_init(&back);
    r.pid = getpid();
    CHECK_EQ_INT(sbx__proc_stat(r.pid, &r.start, NULL), 0);
    sbx_strv_push(&r.cgroups, "/sys/fs/cgroup/pids/sbx-0123456789abcdef");
    /* Not this sandbox's, or not a cgroup path: dropped on reading, never removed. */
    sbx_strv_push(&r.cgroups, "/sys/fs/cgroup/pids/sbx-fedcba9876543210");
    sbx_strv_push(&r.cgroups, "/home/user/sbx-0123456789abcdef");
    sbx_strv_push(&r.cgroups, "/sys/fs/cgroup/../../home/sbx-0123456789abcdef");
    sbx_strv_push(&r.cgroups, "/sys/fs/cgroup/pids/sbx-0123456789abcdefg");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK_OK(sbx__local_record_write(dfd, &r, &err), &err);
    close(dfd);
    CHECK_EQ_INT(sbx__local_record_read(dir, id, &back), 0);
    CHECK_EQ_INT(back.pid, r.pid);
    CHECK(back.start == r.start);
    CHECK_EQ_INT(back.inner, 0);
    CHECK_EQ_INT(back.cgroups.n, 1);
    if (back.cgroups.n == 1)
        CHECK_EQ_STR(back.cgroups.v[0], "/sys/fs/cgroup/pids/sbx-0123456789abcdef");
    /* This process is not "__supervise <id>": never taken for the supervisor. */
    CHECK_EQ_INT(sbx__local_record_alive(&back, id, NULL), 0);
    sbx__local_record_release(&back);
    sbx__local_record_release(&r);
    CHECK_EQ_INT(sbx__local_record_read("/nonexistent", id, &back), -1);
}

/* A process whose command line looks like sandbox id's supervisor ("sh __supervise ID"). */
static pid_t fake_supervisor(const char *id)
{
    char *script = sbx_xasprintf("%s/__supervise", dir);
    int fd = open(script, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    (void)!write(fd, "sleep 30\n", 9);
    close(fd);
    free(script);
    pid_t p = fork();
    if (p == 0) {
        setpgid(0, 0); /* so that the test kills its sleep too */
        if (chdir(dir) == 0)
            execl("/bin/sh", "sh", "__supervise", id, (char *)NULL);
        _exit(127);
    }
    /* Wait (bounded) for the exec to show in /proc. */
    for (int i = 0; i < 200; i++) {
        struct sbx__local_record r;
        sbx__local_record_init(&r);
        r.pid = p;
        int ok = sbx__proc_stat(p, &r.start, NULL) == 0 && sbx__local_record_alive(&r, id, NULL);
        sbx__local_record_release(&r);
        if (ok)
            break;
        usleep(10 * 1000);
    }
    return p;
}

/* A pid in the record that now names another process (other start time) is left alone. */
static void test_reused_pid_untouched(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *id = "0123456789abcdef";
    pid_t p = fake_supervisor(id);
    struct sbx__local_record r;
    sbx__local_record_init(&r);
    r.pid = p;
    CHECK_EQ_INT(sbx__proc_stat(p, &r.start, NULL), 0);
    CHECK_EQ_INT(sbx__local_record_alive(&r, id, NULL), 1);
    CHECK_EQ_INT(sbx__local_record_alive(&r, "fedcba9876543210", NULL), 0);
    r.start += 1; /* as if the pid had been reused since */
    CHECK_EQ_INT(sbx__local_record_alive(&r, id, NULL), 0);
    char *sub = sbx_xasprintf("%s/%s", dir, id);
    CHECK_EQ_INT(mkdir(sub, 0700), 0);
    int dfd = open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK_OK(sbx__local_record_write(dfd, &r, &err), &err);
    close(dfd);
    struct sbx__teardown t = {.dir = sub, .id = id};
    CHECK_OK(sbx__local_teardown(&t, &err), &err);
    struct stat st;
    CHECK(lstat(sub, &st) < 0);
    char state = 0;
    CHECK_EQ_INT(sbx__proc_stat(p, NULL, &state), 0);
    CHECK(state != 'Z'); /* still running: not signalled */
    kill(-p, SIGKILL);
    waitpid(p, NULL, 0);
    sbx__local_record_release(&r);
    free(sub);
}

int main(void)
{
    TAP_START();
    snprintf(dir, sizeof(dir), "/tmp/sbx-teardown-XXXXXX");
    if (!mkdtemp(dir))
        TAP_SKIP_ALL("cannot make a temporary directory");
    TAP_RUN_FORKED(test_proc_stat);
    TAP_RUN_FORKED(test_record_round_trip);
    TAP_RUN_FORKED(test_reused_pid_untouched);
    struct sbx_error err = SBX_ERROR_INIT;
    sbx__fs_remove_tree(dir, &err);
    return TAP_DONE();
}
