/* One TCP connection carried over a port-forward WebSocket, the client's side (channel.h):
 * what a harness's port relay does for each connection it accepts, whether the server is a
 * Kubernetes API server or an sbx-node daemon. */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "sandbox/wire/channel.h"
#include "sandbox/wire/conn.h"
#include "sbx/fs.h"

#define CHUNK 65536

/* The server's messages now complete: data to fd; 0 to go on, 1 at the end (its close, text
 * on the error channel past the port prefix, a broken frame, fd gone). */
static int drain_server(struct sbx__wsconn *w, struct sbx__pf *pf, int fd, struct sbx_error *e)
{
    struct sbx__ws_msg m;
    int got;
    while ((got = sbx__wsconn_next(w, &m, e)) == 1) {
        if (m.opcode == SBX__WS_CLOSE)
            return 1;
        if (m.opcode != SBX__WS_BINARY)
            continue;
        struct sbx__pf_frame f;
        if (sbx__pf_decode(pf, m.data, m.len, &f, e) < 0 || (f.is_error && f.len) ||
            (!f.is_error && f.len && sbx_fd_write_all(fd, f.data, f.len, e) < 0))
            return 1;
    }
    return got != 0 || sbx__wsconn_flush(w, e) < 0 ? 1 : 0;
}

void sbx__pf_pump(struct sbx__wsconn *w, uint16_t port, int fd)
{
    struct sbx_error e = SBX_ERROR_INIT;
    struct sbx__pf pf;
    uint8_t buf[CHUNK];
    if (sbx__pf_init(&pf, &port, 1, 0, &e) < 0)
        return;
    while (drain_server(w, &pf, fd, &e) == 0) {
        struct pollfd pfd[2] = {{.fd = sbx__conn_fd(w->conn), .events = POLLIN},
                                {.fd = fd, .events = POLLIN}};
        if (w->ws.out.len)
            pfd[0].events |= POLLOUT;
        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
            return;
        if (!(pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* no half-close in this protocol: the connection ends */
        struct sbx_buf msg;
        sbx_buf_init(&msg, SBX_BUF_NOLIMIT);
        int rc = sbx__pf_encode(&pf, 0, 0, buf, (size_t)n, &msg, &e);
        if (rc == 0)
            rc = sbx__ws_send(&w->ws, SBX__WS_BINARY, msg.data, msg.len, &e);
        sbx_buf_release(&msg);
        if (rc < 0)
            return;
    }
}
