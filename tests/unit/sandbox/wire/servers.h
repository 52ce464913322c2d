/* Tests of the remote layer's I/O: local servers written in Python (the scripts of tests/wire) and
 * TLS certificates made by openssl at test time (tests/wire/mkcerts.sh). Servers listen on
 * 127.0.0.1 on a port the kernel picks and stop when the test's end of their stdin closes;
 * tserver_stop kills and reaps them anyway. */
#ifndef SBX_TEST_WIRE_SERVERS_H
#define SBX_TEST_WIRE_SERVERS_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rmtree.h"
#include "sbx/common.h"

#define TSERVER_WAIT_MS 20000

struct tserver {
    pid_t pid;
    int stdin_fd;
    int port;
};

/* The source tree's path of a file (SBX_SRCDIR, else the current directory's ".."). */
static inline char *src_path(const char *rel)
{
    const char *top = getenv("SBX_SRCDIR");
    return sbx_xasprintf("%s/%s", top && top[0] ? top : "..", rel);
}

/* Run argv (argv[0] from $PATH); its exit status, or -1. stdout and stderr go to /dev/null. */
static inline int run_argv(const char *const *argv)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline int have_python(void)
{
    const char *argv[] = {"python3", "-c", "pass", NULL};
    return run_argv(argv) == 0;
}

/* Start tests/wire/SCRIPT with args (NULL-terminated, may be NULL). 0, or -1. */
static inline int tserver_start(struct tserver *s, const char *script, const char *const *args)
{
    int out[2], in[2];
    s->pid = -1;
    s->stdin_fd = -1;
    s->port = 0;
    if (pipe2(out, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(in, O_CLOEXEC) < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    char *path = src_path(script);
    const char *argv[16] = {"python3", path};
    size_t n = 2;
    for (const char *const *a = args; a && *a && n < 15; a++)
        argv[n++] = *a;
    argv[n] = NULL;
    s->pid = fork();
    if (s->pid == 0) {
        dup2(out[1], 1);
        dup2(in[0], 0);
        execvp("python3", (char *const *)argv);
        _exit(127);
    }
    free(path);
    close(out[1]);
    close(in[0]);
    s->stdin_fd = in[1];
    char line[32] = {0};
    size_t got = 0;
    while (s->pid > 0 && got < sizeof(line) - 1 && !memchr(line, '\n', got)) {
        struct pollfd pf = {.fd = out[0], .events = POLLIN};
        if (poll(&pf, 1, TSERVER_WAIT_MS) <= 0)
            break;
        ssize_t r = read(out[0], line + got, sizeof(line) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(out[0]);
    s->port = (int)strtol(line, NULL, 10);
    return s->port > 0 ? 0 : -1;
}

static inline void tserver_stop(struct tserver *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = -1;
    }
    if (s->stdin_fd >= 0) {
        close(s->stdin_fd);
        s->stdin_fd = -1;
    }
}

/* Certificates into a fresh directory (tests/wire/mkcerts.sh); dir: a buffer of 64 bytes. */
static inline int make_certs(char dir[64])
{
    snprintf(dir, 64, "/tmp/sbx-certs-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char *script = src_path("tests/wire/mkcerts.sh");
    const char *argv[] = {"bash", script, dir, NULL};
    int rc = run_argv(argv);
    free(script);
    return rc == 0 ? 0 : -1;
}

/* dir/name, for the certificates. */
static inline const char *cert_path(const char *dir, const char *name)
{
    static char buf[8][128];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
    return buf[k];
}

#endif
