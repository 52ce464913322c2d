/* Port relays into the network namespace of a process on this host: how a provider whose
 * sandboxes have their own network namespace here (the Docker provider's containers) offers
 * sbx_session_resolve_port without publishing ports on a bridge.
 *
 * A relay is a small detached process (the sbx-supervisor program run with SBX__RELAY_VERB)
 * that listens on 127.0.0.1:HOSTPORT of this host, enters the namespace and connects each
 * accepted connection to 127.0.0.1:PORT there. It watches the namespace's process (through a
 * pidfd; where that is refused, by its start time once a second) and ends when that process
 * does. Each relay has a record file in a private directory,
 * locked by the relay for as long as it runs, so a second resolve of the same port finds it. */
#ifndef SBX_SANDBOX_SESSION_RELAY_H
#define SBX_SANDBOX_SESSION_RELAY_H

#include <sys/types.h>

#include "sbx/error.h"

#define SBX__RELAY_VERB "__relay"

/* The URL ("http://127.0.0.1:HOSTPORT") of a relay to 127.0.0.1:port in the network namespace
 * of pid, started unless dir (an existing directory private to the caller) records a live one
 * for that port and pid. tag names the relay in its command line (a sandbox id). Needs the
 * right to enter the namespace (SBX_E_PERM otherwise). *out_url: caller owns (free). */
int sbx__relay_start(const char *dir, const char *tag, pid_t pid, int port, char **out_url,
                     struct sbx_error *err);

/* The relay process: argv = {SBX__RELAY_VERB, TAG, PORT, PID, START} (START: the start time
 * of process PID), with its descriptors set up by sbx__relay_start. Returns the exit status. */
int sbx__relay_main(int argc, char **argv);

#endif
