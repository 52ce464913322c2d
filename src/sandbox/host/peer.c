/* Who is on the other end of a loopback TCP connection: the kernel's socket table
 * (NETLINK_SOCK_DIAG, the interface of ss) looked up for the exact connecting socket. A port
 * forward on 127.0.0.1 is otherwise open to every local user; with this it serves its owner. */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/host/host.h"

/* The request: the connecting socket is the one whose source is our peer and whose
 * destination is our local end. */
static void fill_id(struct inet_diag_sockid *id, const struct sockaddr_storage *peer,
                    const struct sockaddr_storage *local)
{
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *p = (const struct sockaddr_in *)peer;
        const struct sockaddr_in *l = (const struct sockaddr_in *)local;
        id->idiag_sport = p->sin_port;
        id->idiag_dport = l->sin_port;
        memcpy(id->idiag_src, &p->sin_addr, 4);
        memcpy(id->idiag_dst, &l->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *p = (const struct sockaddr_in6 *)peer;
        const struct sockaddr_in6 *l = (const struct sockaddr_in6 *)local;
        id->idiag_sport = p->sin6_port;
        id->idiag_dport = l->sin6_port;
        memcpy(id->idiag_src, &p->sin6_addr, 16);
        memcpy(id->idiag_dst, &l->sin6_addr, 16);
    }
    id->idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    id->idiag_cookie[1] = INET_DIAG_NOCOOKIE;
}

int sbx__host_diag_open(void)
{
    return socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
}

int sbx__host_peer_uid(int diag, int fd, uid_t *out)
{
    struct sockaddr_storage peer, local;
    socklen_t pl = sizeof(peer), ll = sizeof(local);
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 ||
        getsockname(fd, (struct sockaddr *)&local, &ll) < 0 || peer.ss_family != local.ss_family ||
        (peer.ss_family != AF_INET && peer.ss_family != AF_INET6))
        return -1;
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } msg = {.nlh = {.nlmsg_len = sizeof(msg),
                     .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                     .nlmsg_flags = NLM_F_REQUEST,
                     .nlmsg_seq = 1},
             .req = {.sdiag_family = (__u8)peer.ss_family,
                     .sdiag_protocol = IPPROTO_TCP,
                     .idiag_states = ~0u}};
    fill_id(&msg.req.id, &peer, &local);
    int nl = diag >= 0 ? diag : sbx__host_diag_open();
    if (nl < 0)
        return -1;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    struct timeval tv = {.tv_sec = 2};
    union {
        struct nlmsghdr h;
        char b[8192];
    } buf;
    int rc = -1;
    ssize_t n;
    if (setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        goto out;
    while ((n = recv(nl, &buf, sizeof(buf), 0)) < 0 && errno == EINTR)
        ;
    for (struct nlmsghdr *h = &buf.h; n > 0 && NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
            h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
            break; /* NLMSG_ERROR (no such socket), NLMSG_DONE */
        const struct inet_diag_msg *m = NLMSG_DATA(h);
        *out = (uid_t)m->idiag_uid;
        rc = 0;
        break;
    }
out:
    if (nl != diag)
        close(nl);
    return rc;
}

int sbx__host_peer_is_owner(int diag, int fd)
{
    uid_t uid;
    return sbx__host_peer_uid(diag, fd, &uid) == 0 && (uid == geteuid() || uid == 0);
}
