/* Sockets inside the sandbox's network namespace, made from the host side.
 *
 * Joining a network namespace needs CAP_SYS_ADMIN both in the namespace's owning user namespace
 * and in one's own; an unprivileged outer process has the first (it created the sandbox's user
 * namespace) but not the second, so the helper joins the sandbox's user namespace first. A
 * multi-threaded process may not change its user namespace, hence a child process, not a
 * thread: it joins, creates the socket, passes it back with SCM_RIGHTS and exits. */
#include "providers/local/net/net.h"
#include "sandbox/host/priv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void child_make(int chan, int userns_fd, int netns_fd, int family)
{
    int e = 0;
    int s = -1;
    if (userns_fd >= 0 && sbx__priv_setns(userns_fd, CLONE_NEWUSER) < 0)
        e = errno;
    if (!e && sbx__priv_setns(netns_fd, CLONE_NEWNET) < 0)
        e = errno;
    if (!e) {
        s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            e = errno;
    }
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = &e, .iov_len = sizeof(e)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    memset(&ctl, 0, sizeof(ctl));
    if (s >= 0) {
        msg.msg_control = ctl.b;
        msg.msg_controllen = sizeof(ctl.b);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &s, sizeof(int));
    }
    _exit(sendmsg(chan, &msg, MSG_NOSIGNAL) < 0 ? 1 : 0);
}

int sbx__netns_socket(int userns_fd, int netns_fd, int family, int *out, struct sbx_error *err)
{
    int sv[2] = {-1, -1};
    int fd = -1;
    int rc = 0;
    pid_t pid = -1;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx_error_errno(err, errno, "cannot create a socket pair");
    pid = fork();
    if (pid < 0) {
        rc = sbx_error_errno(err, errno, "cannot fork the network namespace helper");
        goto out;
    }
    if (pid == 0) {
        close(sv[0]);
        child_make(sv[1], userns_fd, netns_fd, family);
    }
    close(sv[1]);
    sv[1] = -1;

    int e = 0;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = &e, .iov_len = sizeof(e)};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.b,
                         .msg_controllen = sizeof(ctl.b)};
    ssize_t n;
    do
        n = recvmsg(sv[0], &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        rc = sbx_error_errno(err, errno, "cannot read from the network namespace helper");
        goto out;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(c), sizeof(int));
    }
    if (n != (ssize_t)sizeof(e) || e != 0 || fd < 0) {
        rc = sbx_error_errno(err, e ? e : EPROTO,
                             "cannot create a socket in the sandbox's network namespace");
        goto out;
    }
    *out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    if (pid > 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    return rc;
}

int sbx__netns_open(pid_t pid, int *userns, int *netns, struct sbx_error *err)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
    int u = open(path, O_RDONLY | O_CLOEXEC);
    if (u < 0)
        return sbx_error_errno(err, errno, "cannot open the sandbox user namespace");
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
    int n = open(path, O_RDONLY | O_CLOEXEC);
    if (n < 0) {
        int rc = sbx_error_errno(err, errno, "cannot open the sandbox network namespace");
        close(u);
        return rc;
    }
    *userns = u;
    *netns = n;
    return 0;
}
