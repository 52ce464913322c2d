/* The supervisor control protocol: length-prefixed JSON with descriptors as SCM_RIGHTS. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "providers/local/local.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

/* A full backlog is tried again this often. */
#define CONNECT_RETRY_MS 20

int sbx__proto_frame(const json_t *msg, struct sbx_buf *out, struct sbx_error *err)
{
    char *text = sbx_json_dumps(msg, SBX_JSON_COMPACT);
    size_t n = strlen(text);
    int rc = 0;
    if (n > SBX_PROTO_MAX_MSG) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "message of %zu bytes exceeds the limit of %zu", n,
                           SBX_PROTO_MAX_MSG);
        goto out;
    }
    unsigned char hdr[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8), (unsigned char)n};
    rc = sbx_buf_add(out, hdr, 4, err);
    if (rc == 0)
        rc = sbx_buf_add(out, text, n, err);
out:
    free(text);
    return rc;
}

int sbx__proto_parse(const char *data, size_t len, json_t **out, size_t *used,
                     struct sbx_error *err)
{
    if (len < 4)
        return 0;
    const unsigned char *u = (const unsigned char *)data;
    size_t n = ((size_t)u[0] << 24) | ((size_t)u[1] << 16) | ((size_t)u[2] << 8) | u[3];
    if (n > SBX_PROTO_MAX_MSG)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "message of %zu bytes exceeds the limit of %zu",
                             n, SBX_PROTO_MAX_MSG);
    if (len - 4 < n)
        return 0;
    struct sbx_json_limits lim = {.max_bytes = SBX_PROTO_MAX_MSG, .max_depth = 16};
    json_t *v = NULL;
    int rc = sbx_json_parse(data + 4, n, &lim, &v, err);
    if (rc < 0)
        return rc;
    if (!json_is_object(v)) {
        json_decref(v);
        return sbx_error_set(err, SBX_E_PARSE, 0, "message is not a JSON object");
    }
    *out = v;
    *used = 4 + n;
    return 1;
}

int sbx__proto_wait_more(struct sbx__proto_wait *w)
{
    if (sbx_time_mono_ns() < w->deadline)
        return 1;
    uint64_t now = 0;
    if (w->progress_fd < 0 || sbx__proto_progress_read(w->progress_fd, &now) < 0 ||
        now == w->seen || w->deadline >= w->limit)
        return 0;
    /* The peer moved since the last look: alive and busy (answering others first). */
    w->seen = now;
    w->deadline = sbx_deadline_after_ms(w->idle_ms);
    if (w->deadline > w->limit)
        w->deadline = w->limit;
    return 1;
}

static int wait_fd(int fd, short events, struct sbx__proto_wait *w, struct sbx_error *err)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        int r = poll(&pfd, 1, sbx_deadline_poll_ms(w->deadline));
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
        if (!sbx__proto_wait_more(w))
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "the sandbox did not answer in time");
    }
}

void sbx__proto_wait_init(struct sbx__proto_wait *w, int64_t deadline)
{
    *w = (struct sbx__proto_wait){.deadline = deadline, .limit = deadline, .progress_fd = -1};
}

int sbx__proto_progress_read(int fd, uint64_t *out)
{
    uint64_t v;
    ssize_t n;
    do
        n = pread(fd, &v, sizeof(v), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(v))
        return -1;
    *out = v;
    return 0;
}

int sbx__proto_send(int sock, const json_t *msg, const int *fds, size_t nfds, int64_t deadline,
                    struct sbx_error *err)
{
    struct sbx__proto_wait w;
    sbx__proto_wait_init(&w, deadline);
    return sbx__proto_send_wait(sock, msg, fds, nfds, &w, err);
}

int sbx__proto_send_wait(int sock, const json_t *msg, const int *fds, size_t nfds,
                         struct sbx__proto_wait *w, struct sbx_error *err)
{
    struct sbx_buf b;
    int rc;
    size_t off = 0;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * SBX_PROTO_MAX_FDS)];
    } cm;

    if (nfds > SBX_PROTO_MAX_FDS)
        SBX_BUG("too many descriptors in one message: %zu", nfds);
    sbx_buf_init(&b, SBX_PROTO_MAX_MSG + 4);
    rc = sbx__proto_frame(msg, &b, err);
    if (rc < 0)
        goto out;
    while (off < b.len) {
        struct iovec iov = {.iov_base = b.data + off, .iov_len = b.len - off};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (off == 0 && nfds > 0) {
            memset(&cm, 0, sizeof(cm));
            mh.msg_control = cm.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
            memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        ssize_t sent = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent > 0) {
            off += (size_t)sent;
            continue;
        }
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            rc = wait_fd(sock, POLLOUT, w, err);
            if (rc < 0)
                goto out;
            continue;
        }
        if (sent < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            rc = sbx_error_set(err, SBX_E_SANDBOX, errno, "connection closed");
            goto out;
        }
        rc = sbx_error_errno(err, errno, "send");
        goto out;
    }
    rc = 0;
out:
    sbx_buf_release(&b);
    return rc;
}

void sbx__proto_fd_hint(struct sbx_error *err)
{
    if (!err || (err->sys_errno != EMFILE && err->sys_errno != ENFILE))
        return;
    size_t len = strlen(err->msg);
    struct rlimit rl;
    if (err->sys_errno == ENFILE)
        snprintf(err->msg + len, sizeof(err->msg) - len,
                 " (the system's table of open files is full)");
    else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        snprintf(err->msg + len, sizeof(err->msg) - len,
                 " (this process may have at most %llu open: raise it with ulimit -n)",
                 (unsigned long long)rl.rlim_cur);
}

/* Read exactly n bytes; descriptors that come along are appended to fds. */
static int recv_exact(int sock, char *p, size_t n, int *fds, size_t max_fds, size_t *nfds,
                      struct sbx__proto_wait *w, struct sbx_error *err)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * SBX_PROTO_MAX_FDS)];
    } cm;
    size_t off = 0;
    while (off < n) {
        struct iovec iov = {.iov_base = p + off, .iov_len = n - off};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof(cm.buf);
        ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(sock, POLLIN, w, err);
            if (rc < 0)
                return rc;
            continue;
        }
        if (r < 0 && errno != ECONNRESET)
            return sbx_error_errno(err, errno, "receive");
        /* The kernel drops descriptors it cannot install: our descriptor table is full. The
         * ones that did arrive are closed by the caller with the error. */
        int truncated = r > 0 && (mh.msg_flags & MSG_CTRUNC);
        for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (fds && nfds && *nfds < max_fds)
                    fds[(*nfds)++] = fd;
                else
                    close(fd);
            }
        }
        if (truncated) {
            sbx_error_set(err, SBX_E_SYS, EMFILE,
                          "descriptors sent along with the answer were lost: too many open files");
            sbx__proto_fd_hint(err);
            return -SBX_E_SYS;
        }
        if (r <= 0)
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "connection closed");
        off += (size_t)r;
    }
    return 0;
}

int sbx__proto_recv(int sock, json_t **out, int *fds, size_t max_fds, size_t *nfds,
                    int64_t deadline, struct sbx_error *err)
{
    struct sbx__proto_wait w;
    sbx__proto_wait_init(&w, deadline);
    return sbx__proto_recv_wait(sock, out, fds, max_fds, nfds, &w, err);
}

int sbx__proto_recv_wait(int sock, json_t **out, int *fds, size_t max_fds, size_t *nfds,
                         struct sbx__proto_wait *w, struct sbx_error *err)
{
    unsigned char hdr[4];
    size_t got = 0;
    char *body = NULL;
    json_t *v = NULL;
    int rc;

    if (!nfds)
        nfds = &got;
    *nfds = 0;
    rc = recv_exact(sock, (char *)hdr, 4, fds, max_fds, nfds, w, err);
    if (rc < 0)
        goto out;
    size_t n = ((size_t)hdr[0] << 24) | ((size_t)hdr[1] << 16) | ((size_t)hdr[2] << 8) | hdr[3];
    if (n > SBX_PROTO_MAX_MSG) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "message of %zu bytes exceeds the limit of %zu", n,
                           SBX_PROTO_MAX_MSG);
        goto out;
    }
    body = sbx_xmalloc(n + 1);
    rc = recv_exact(sock, body, n, fds, max_fds, nfds, w, err);
    if (rc < 0)
        goto out;
    struct sbx_json_limits lim = {.max_bytes = SBX_PROTO_MAX_MSG, .max_depth = 16};
    rc = sbx_json_parse(body, n, &lim, &v, err);
    if (rc < 0)
        goto out;
    if (!json_is_object(v)) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "message is not a JSON object");
        goto out;
    }
    *out = v;
    v = NULL;
out:
    if (rc < 0) {
        for (size_t i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
    }
    json_decref(v);
    free(body);
    return rc;
}

json_t *sbx__proto_error(const struct sbx_error *e)
{
    json_t *r = json_object();
    sbx_json_set(r, "ok", json_false());
    sbx_json_set(r, "code", json_integer(e->code));
    sbx_json_set(r, "errno", json_integer(e->sys_errno));
    sbx_json_set(r, "error", sbx_json_str(e->msg));
    return r;
}

int sbx__proto_check(const json_t *reply, struct sbx_error *err)
{
    json_t *ok = json_object_get(reply, "ok");
    if (json_is_true(ok))
        return 0;
    json_int_t code = json_integer_value(json_object_get(reply, "code"));
    const char *msg = json_string_value(json_object_get(reply, "error"));
    if (code <= 0 || code > SBX_E_LAST)
        code = SBX_E_SANDBOX;
    return sbx_error_set(err, (enum sbx_errcode)code,
                         (int)json_integer_value(json_object_get(reply, "errno")), "%s",
                         msg ? msg : "the sandbox refused the request");
}

int sbx__local_connect(const char *dir, const char *id, struct sbx__proto_wait *w, int *out_fd,
                       struct sbx_error *err)
{
    int dfd = -1, sock = -1, rc;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct sbx__proto_wait plain;
    if (!w) {
        sbx__proto_wait_init(&plain, sbx_deadline_after_ms(SBX_PROTO_CONNECT_MS));
        w = &plain;
    }

    dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0) {
        if (errno == ENOENT) /* removed since the caller found or attached it */
            rc = sbx_error_set(err, SBX_E_SANDBOX, ENOENT, "sandbox '%s' is gone", id);
        else
            rc = sbx_error_errno(err, errno, "cannot open the runtime directory of sandbox '%s'",
                                 id);
        sbx__proto_fd_hint(err);
        goto out;
    }
    /* Through the directory fd the address stays short whatever the runtime path's length. */
    int len = snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd,
                       SBX_PROTO_SOCKNAME);
    if (len < 0 || (size_t)len >= sizeof(sa.sun_path))
        SBX_BUG("socket address too long");
    /* Non-blocking: a blocking connect to a full backlog (a stopped or hung supervisor with
     * many clients queued) waits without any bound. EAGAIN is retried as long as w allows. */
    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (sock < 0) {
        rc = sbx_error_errno(err, errno, "cannot connect to sandbox '%s'", id);
        sbx__proto_fd_hint(err);
        goto out;
    }
    while (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            if (!sbx__proto_wait_more(w)) {
                rc = sbx_error_set(err, SBX_E_TIMEOUT, EAGAIN,
                                   "sandbox '%s' accepts no connection (its queue is full)", id);
                goto out;
            }
            sbx_sleep_ms(CONNECT_RETRY_MS);
            continue;
        }
        if (errno == ENOENT || errno == ECONNREFUSED)
            rc = sbx_error_set(err, SBX_E_SANDBOX, errno, "sandbox '%s' is gone", id);
        else
            rc = sbx_error_errno(err, errno, "cannot connect to sandbox '%s'", id);
        goto out;
    }
    int fl = fcntl(sock, F_GETFL);
    if (fl < 0 || fcntl(sock, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        rc = sbx_error_errno(err, errno, "fcntl");
        goto out;
    }
    *out_fd = sock;
    sock = -1;
    rc = 0;
out:
    sbx_fd_close(&sock);
    sbx_fd_close(&dfd);
    return rc;
}
