/* Where sbx keeps its per-user runtime files on this host and finds its helper program: shared
 * by every provider that runs something here (the local provider's supervisors, the Docker
 * provider's port relays). */
#ifndef SBX_SANDBOX_SESSION_HOST_H
#define SBX_SANDBOX_SESSION_HOST_H

#include "sbx/error.h"

/* The base runtime directory per the rules in sbx/local.h (configured: an explicit base or
 * NULL), created 0700 and checked to be ours. *out: caller owns (free). */
int sbx__runtime_base(const char *configured, char **out, struct sbx_error *err);

/* The sbx-supervisor program (configured: an explicit path or NULL) per the rules of
 * sbx_local_options.supervisor_path. *out: caller owns (free). */
int sbx__supervisor_program(const char *configured, char **out, struct sbx_error *err);

#endif
