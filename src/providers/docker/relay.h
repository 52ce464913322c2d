/* The Docker provider's port relays (private to src/providers/docker/). */
#ifndef SBX_SANDBOX_DOCKER_RELAY_H
#define SBX_SANDBOX_DOCKER_RELAY_H

#include <sys/types.h>

#include "sbx/error.h"

/* resolve_port of a docker sandbox: the URL ("http://127.0.0.1:HOSTPORT") of the relay to
 * 127.0.0.1:port inside container id (the sandbox id), whose init has host pid init_pid
 * (State.Pid of GET /containers/{id}/json; the engine must run on this host). A live relay of
 * that port and init is reused; one is started otherwise, recorded in
 * <runtime base>/docker/<id>/ports/<port>, and ends when the init does. *out_url: caller owns. */
int sbx__docker_relay_start(const char *id, pid_t init_pid, int port, char **out_url,
                            struct sbx_error *err);

/* Forget the relay records of sandbox id (its removal: the relays end with its init). Missing
 * records are no error. */
int sbx__docker_relay_forget(const char *id, struct sbx_error *err);

#endif
