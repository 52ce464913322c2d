/* The host-side network loop of a sandbox (net/), private to it: the loop's state and what its
 * two files share. netloop.c runs the loop (its thread, the control channel, the forwarders'
 * listeners, the API of net.h); conn.c is one connection of it, a proxy client or a port
 * forward, from accept to close. */
#ifndef SBX_PROVIDERS_LOCAL_NET_LOOP_H
#define SBX_PROVIDERS_LOCAL_NET_LOOP_H

#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "providers/local/net/net.h"

#define BUFSZ     (64 * 1024)
#define MAX_ADDRS 8
#define LINGER_MS 2000

enum kind { K_PROXY_LISTEN, K_FWD_LISTEN, K_CONN, K_WAKE, K_RESOLVED, K_CONTROL };
enum state { C_HEAD, C_RESOLVE, C_CONNECT, C_SPLICE, C_REFUSE, C_LINGER };

struct sbx__netloop_conn;

/* What epoll's data.ptr points at. */
struct sbx__netloop_handle {
    enum kind kind;
    struct sbx__netloop_conn *conn; /* K_CONN */
    int side;                       /* K_CONN: 0 client, 1 upstream */
    int fd;
    int port;        /* K_FWD_LISTEN: the sandbox port */
    int v6;          /* K_FWD_LISTEN: the sandbox address is ::1, not 127.0.0.1 */
    uint32_t events; /* registered events, 0 = not registered */
};

struct sbx__netloop_pipebuf {
    char *data;
    size_t off, len;
    int eof;  /* the source reached end of file */
    int shut; /* the destination was shut down for writing */
};

struct sbx__netloop_job {
    struct sbx__netloop_conn
            *conn; /* NULL once the connection is gone (only the loop touches it) */
    char *host;
    struct addrinfo *res;
    int rc;
    int pipe_w; /* where the thread hands the job back */
};

struct sbx__netloop_conn {
    struct sbx__net *net;
    struct sbx__netloop_conn *prev, *next;
    int forward; /* 1: a port forward, 0: a proxy client */
    enum state state;
    struct sbx__netloop_handle h[2];
    struct sbx__netloop_pipebuf up;   /* client -> upstream; in C_HEAD it holds the request head */
    struct sbx__netloop_pipebuf down; /* upstream -> client */
    struct sbx__proxy_request req;
    int have_req;
    struct sbx__netloop_job *job;
    struct sockaddr_storage addrs[MAX_ADDRS];
    size_t naddrs, next_addr;
    int64_t deadline;
    int dead; /* closed, freed after the current batch of events */
};

struct sbx__netloop_fwd {
    struct sbx__netloop_handle h;
    int host_port;
    int unix_sock;
    char path[108]; /* unix_sock: host path, for answers */
};

struct sbx__net {
    pthread_t thread;
    int started;
    int epfd;
    struct sbx__netloop_handle wake;     /* eventfd: forwards added, stop */
    struct sbx__netloop_handle resolved; /* read end of the resolver pipe */
    int resolve_w;
    int stop; /* under lock */
    pthread_mutex_t lock;
    struct sbx__netloop_fwd fwds[SBX__NET_MAX_FORWARDS];
    size_t nfwds;
    size_t nfwds_loop; /* forwards registered with epoll (loop only) */
    int userns_fd, netns_fd;
    struct sbx__netloop_handle proxy;
    struct sbx__netloop_handle control;
    char *forward_bind;
    int unix_dir_fd;
    char *unix_dir;
    char **patterns;
    size_t npatterns;
    int *ports;
    size_t nports;
    char **test_names;
    struct sockaddr_storage *test_addrs;
    size_t ntest;
    int allow_loopback;
    size_t max_conns, nconns;
    int head_timeout_ms, idle_timeout_ms;
    struct sbx__netloop_conn *conns;
    struct sbx__netloop_conn *dead; /* closed connections, linked by next */
    size_t pending_jobs;
};

/* netloop.c */
int64_t sbx__netloop_now_ms(void);
/* Register (ev != 0), change or remove h in the loop's epoll set. */
void sbx__netloop_set_events(struct sbx__net *net, struct sbx__netloop_handle *h, uint32_t ev);
/* Remove h from the loop and close its fd (-1 afterwards). */
void sbx__netloop_close_handle(struct sbx__net *net, struct sbx__netloop_handle *h);

/* conn.c */
/* Accept on the proxy's listener: a proxy client (503 past max_conns). */
void sbx__netloop_accept_proxy(struct sbx__net *net);
/* Accept on a forwarder's listener h: a connection to its port inside the sandbox. */
void sbx__netloop_accept_forward(struct sbx__net *net, struct sbx__netloop_handle *h);
/* Events ev on side (0 client, 1 upstream) of c. */
void sbx__netloop_conn_event(struct sbx__netloop_conn *c, int side, uint32_t ev);
/* A name lookup came back (the connection may be gone: j->conn NULL). */
void sbx__netloop_job_done(struct sbx__net *net, struct sbx__netloop_job *j);
/* Connections past their deadline: answered (504, 400) or closed. */
void sbx__netloop_sweep(struct sbx__net *net);
/* Close c; its memory stays until sbx__netloop_free_dead, as later events of the same epoll
 * batch may still point at it. */
void sbx__netloop_conn_free(struct sbx__netloop_conn *c);
void sbx__netloop_free_dead(struct sbx__net *net);

#endif
