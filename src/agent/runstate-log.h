/* The run state's checkpoint log, as the reader sees it (runstate-log.c). */
#ifndef SBX_AGENT_RUNSTATE_LOG_H
#define SBX_AGENT_RUNSTATE_LOG_H

#include <jansson.h>

#include "sbx/error.h"

/* Whether name may be a log's file name: a plain name beside the state, not hidden. */
int sbx__run_state_log_name_ok(const char *name);
/* doc is a head (it has "log"): read the log it names from dfd, check every record against
 * the hash chain and the chain against the head's digest, and put the items (as "items") and
 * the fields the log sets in doc in place of "log". Records past the head's count are dropped. */
int sbx__run_state_load_log(json_t *doc, int dfd, struct sbx_error *err);

#endif
