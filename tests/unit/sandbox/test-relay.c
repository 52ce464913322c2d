/* Port relays into another network namespace (sandbox/host/relay.h) through the Docker
 * provider's entry point (providers/docker/relay.h): a child in a network namespace of its own
 * stands in for a container's init. Needs the right to make and enter one (root). */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/docker/relay.h"
#include "sbx/fs.h"
#include "tap.h"

#define PORT 8123
#define BIG  (1 << 20)

static char rundir[256];

/* The stand-in init: a fresh network namespace with loopback up and a server on 127.0.0.1:PORT
 * that answers each connection with "pong:" and what it read. Reports on ready[1]. */
static pid_t start_server(void)
{
    int ready[2];
    if (pipe(ready) < 0)
        return -1;
    pid_t pid = fork();
    if (pid != 0) {
        char c = 0;
        close(ready[1]);
        if (pid < 0 || read(ready[0], &c, 1) != 1 || c != 'y') {
            close(ready[0]);
            if (pid > 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
            }
            return -1;
        }
        close(ready[0]);
        return pid;
    }
    close(ready[0]);
    struct ifreq ifr = {0};
    int s = -1;
    if (unshare(CLONE_NEWNET) < 0 || (s = socket(AF_INET, SOCK_DGRAM, 0)) < 0)
        _exit(1);
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        _exit(1);
    close(s);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(PORT),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 8) < 0)
        _exit(1);
    if (write(ready[1], "y", 1) != 1)
        _exit(1);
    close(ready[1]);
    /* Everything up to the client's end of input, then the answer: the relay must pass a
     * half-close on. */
    static char buf[5 + BIG + 1];
    memcpy(buf, "pong:", 5);
    for (;;) {
        int c = accept(l, NULL, NULL);
        size_t len = 5;
        ssize_t n = 1;
        while (c >= 0 && len < sizeof(buf) && (n = read(c, buf + len, sizeof(buf) - len)) > 0)
            len += (size_t)n;
        for (size_t off = 0; c >= 0 && n == 0 && off < len; off += (size_t)n)
            if ((n = write(c, buf + off, len - off)) <= 0)
                break;
        if (c >= 0)
            close(c);
    }
}

static int url_port(const char *url)
{
    const char *p = url ? strrchr(url, ':') : NULL;
    return p ? (int)strtol(p + 1, NULL, 10) : -1;
}

/* Send msg (n bytes) through 127.0.0.1:port and read the answer into out (NUL-terminated),
 * *got its length. */
static int ask_n(int port, const char *msg, size_t n, char *out, size_t max, size_t *got);

static int ask(int port, const char *msg, char *out, size_t max)
{
    size_t got;
    return ask_n(port, msg, strlen(msg), out, max, &got);
}

static int ask_n(int port, const char *msg, size_t mlen, char *out, size_t max, size_t *got)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    size_t len = 0;
    ssize_t n;
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        sbx_fd_write_all(s, msg, mlen, NULL) < 0) {
        if (s >= 0)
            close(s);
        return -1;
    }
    shutdown(s, SHUT_WR);
    while (len < max - 1 && (n = read(s, out + len, max - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    *got = len;
    close(s);
    return 0;
}

/* Whether the relay of PORT of sandbox id still holds its record's lock. */
static int relay_alive(const char *id)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/docker/%s/ports/%d", rundir, id, PORT);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int held = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd);
    return held;
}

static void test_relay(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *url = NULL, *again = NULL, answer[256];
    pid_t pid = start_server();
    if (!CHECK(pid > 0))
        return;
    CHECK_OK(sbx__docker_relay_start("abc123", pid, PORT, &url, &err), &err);
    CHECK(url && strncmp(url, "http://127.0.0.1:", 17) == 0);
    CHECK(ask(url_port(url), "ping", answer, sizeof(answer)) == 0);
    CHECK_EQ_STR(answer, "pong:ping");
    /* The same port again: the same relay. */
    CHECK_OK(sbx__docker_relay_start("abc123", pid, PORT, &again, &err), &err);
    CHECK_EQ_STR(again, url);
    CHECK(ask(url_port(again), "twice", answer, sizeof(answer)) == 0);
    CHECK_EQ_STR(answer, "pong:twice");
    CHECK(relay_alive("abc123"));
    /* A megabyte each way, past every buffer of the relay. */
    char *big = malloc(BIG), *back = malloc(BIG + 16);
    size_t got = 0;
    for (size_t i = 0; big && i < BIG; i++)
        big[i] = (char)('a' + i % 26);
    CHECK(big && back && ask_n(url_port(url), big, BIG, back, BIG + 16, &got) == 0);
    CHECK_EQ_INT(got, BIG + 5);
    CHECK(back && got == BIG + 5 && memcmp(back + 5, big, BIG) == 0);
    free(big);
    free(back);
    /* Its init gone, the relay ends (bounded wait for the exit to be seen). */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int i = 0; i < 500 && relay_alive("abc123"); i++)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    CHECK(!relay_alive("abc123"));
    CHECK(ask(url_port(url), "late", answer, sizeof(answer)) < 0 || answer[0] == '\0');
    /* A dead init: a clear error, no relay. */
    CHECK_ERR(sbx__docker_relay_start("abc123", pid, PORT, &again, &err), SBX_E_SANDBOX, &err,
              "exited");
    CHECK_OK(sbx__docker_relay_forget("abc123", &err), &err);
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/docker/abc123", rundir);
    CHECK(stat(path, &st) < 0 && errno == ENOENT);
    CHECK_OK(sbx__docker_relay_forget("abc123", &err), &err);
    free(url);
    free(again);
}

static void test_bad_input(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *url = NULL;
    CHECK_ERR(sbx__docker_relay_start("../x", getpid(), PORT, &url, &err), SBX_E_INVAL, &err,
              "bad sandbox id");
    CHECK_ERR(sbx__docker_relay_start("abc", getpid(), 0, &url, &err), SBX_E_INVAL, &err,
              "bad port");
    CHECK_ERR(sbx__docker_relay_forget("a/b", &err), SBX_E_INVAL, &err, "bad sandbox id");
    CHECK(url == NULL);
    CHECK_OK(sbx__docker_relay_forget("abc", &err), &err);
}

/* Unprivileged: another user's namespace (PID 1's) is refused with a clear error, no relay. */
static void test_not_allowed(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *url = NULL;
    CHECK_ERR(sbx__docker_relay_start("abc", 1, PORT, &url, &err), SBX_E_PERM, &err,
              "network namespace");
    CHECK(url == NULL);
    CHECK(!relay_alive("abc"));
    CHECK_OK(sbx__docker_relay_forget("abc", &err), &err);
}

int main(void)
{
    snprintf(rundir, sizeof(rundir), "/tmp/sbx-test-relay-%d", (int)getpid());
    if (mkdir(rundir, 0700) < 0)
        TAP_SKIP_ALL("cannot make a runtime directory");
    setenv("XDG_RUNTIME_DIR", rundir, 1);
    /* The runtime base is XDG_RUNTIME_DIR/sbx. */
    size_t n = strlen(rundir);
    snprintf(rundir + n, sizeof(rundir) - n, "/sbx");
    TAP_START();
    TAP_RUN(test_bad_input);
    /* Making and entering a network namespace needs root. */
    if (geteuid() == 0)
        TAP_RUN_FORKED(test_relay);
    else
        TAP_RUN_FORKED(test_not_allowed);
    char path[512];
    snprintf(path, sizeof(path), "%s/docker", rundir);
    rmdir(path);
    rmdir(rundir);
    rundir[n] = '\0';
    rmdir(rundir);
    return TAP_DONE();
}
