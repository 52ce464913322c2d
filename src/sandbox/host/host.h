/* Where sbx keeps its per-user runtime files on this host and finds its helper program: shared
 * by every provider that runs something here (the local provider's supervisors, the Docker
 * provider's port relays). */
#ifndef SBX_SANDBOX_SESSION_HOST_H
#define SBX_SANDBOX_SESSION_HOST_H

#include <sys/types.h>

#include "sbx/error.h"

/* The base runtime directory per the rules in sbx/local.h (configured: an explicit base or
 * NULL), created 0700 and checked to be ours. *out: caller owns (free). */
int sbx__runtime_base(const char *configured, char **out, struct sbx_error *err);

/* The sbx-supervisor program (configured: an explicit path or NULL) per the rules of
 * sbx_local_options.supervisor_path. *out: caller owns (free). */
int sbx__supervisor_program(const char *configured, char **out, struct sbx_error *err);

/* The sbx program, which serves the providers' hidden verbs (their port relays): this one when
 * it is sbx, else sbx next to the supervisor program, else the installed one. *out: caller
 * owns (free). SBX_E_NOTFOUND when there is none. */
int sbx__sbx_program(char **out, struct sbx_error *err);

/* A NETLINK_SOCK_DIAG socket (close-on-exec), or -1: it asks about the sockets of the network
 * namespace it was made in, so a process that moves to another one makes it first. */
int sbx__host_diag_open(void);
/* The uid owning the socket at the other end of the accepted TCP connection fd, when that
 * socket is on this host in diag's network namespace (diag -1: one made for the call, in the
 * caller's): 0 with *out, else -1 (a remote peer, a peer already gone, no sock_diag). Asks the
 * kernel's socket table; never blocks more than two seconds. */
int sbx__host_peer_uid(int diag, int fd, uid_t *out);

/* 1 when the peer of fd may use a port forward of the calling process: its uid is this
 * process's effective uid or root; 0 for anyone else or a peer the kernel cannot name. */
int sbx__host_peer_is_owner(int diag, int fd);

#endif
