/* sbx internal: the built-in capabilities and what the sandbox run needs of a capability. */
#ifndef SBX_CAPABILITY_INTERNAL_H
#define SBX_CAPABILITY_INTERNAL_H

#include "sbx/capability.h"

/* Constructors of the built-in capabilities from their agent-file object (NULL: defaults). */
int sbx__capability_filesystem(const json_t *spec, struct sbx_capability **out,
                               struct sbx_error *err);
int sbx__capability_shell(const json_t *spec, struct sbx_capability **out, struct sbx_error *err);
int sbx__capability_memory(const json_t *spec, struct sbx_capability **out, struct sbx_error *err);

const struct sbx_capability_ops *sbx__capability_ops(const struct sbx_capability *c);

#endif
