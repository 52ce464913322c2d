/* sbx internal: the built-in capabilities and what the sandbox run needs of a capability. */
#ifndef SBX_CAPABILITY_INTERNAL_H
#define SBX_CAPABILITY_INTERNAL_H

#include "sbx/capability.h"

/* Constructors of the built-in capabilities from their agent-file object (NULL: defaults). */
int sbx__capability_filesystem(const json_t *spec, struct sbx_capability **out,
                               struct sbx_error *err);
int sbx__capability_shell(const json_t *spec, struct sbx_capability **out, struct sbx_error *err);
/* Relative host sources resolve against base_dir (NULL: the current directory). */
int sbx__capability_skills(const json_t *spec, const char *base_dir, struct sbx_capability **out,
                           struct sbx_error *err);

/* sbx_capability_from_json for an agent file in base_dir (NULL: the current directory): the
 * folder relative host paths in capability fields resolve against. */
int sbx__capability_from_json_at(const json_t *spec, const char *base_dir,
                                 struct sbx_capability **out, struct sbx_error *err);
int sbx__capability_memory(const json_t *spec, struct sbx_capability **out, struct sbx_error *err);

const struct sbx_capability_ops *sbx__capability_ops(const struct sbx_capability *c);

#endif
