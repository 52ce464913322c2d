/* Private: libyaml, opened on first use (src/core/dl.h). Include this instead of <yaml.h>;
 * call sbx__yaml_load() before the first call. Only YAML documents need it (manifests, agent
 * files written as YAML): `sbx sandbox exec` and most other commands never parse one. */
#ifndef SBX_CORE_DL_YAML_H
#define SBX_CORE_DL_YAML_H

#include <yaml.h>

#include "core/dl.h"

#define SBX__YAML_FUNCS(X)      \
    X(yaml_event_delete)        \
    X(yaml_parser_delete)       \
    X(yaml_parser_initialize)   \
    X(yaml_parser_parse)        \
    X(yaml_parser_set_encoding) \
    X(yaml_parser_set_input_string)

struct sbx__yaml_fns {
    SBX__YAML_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__yaml_fns sbx__yaml;

/* Load libyaml-0.so.2 once per process; SBX_E_UNSUPPORTED naming it when it is missing.
 * Thread-safe. */
int sbx__yaml_load(struct sbx_error *err);

#define yaml_event_delete            (sbx__yaml.yaml_event_delete)
#define yaml_parser_delete           (sbx__yaml.yaml_parser_delete)
#define yaml_parser_initialize       (sbx__yaml.yaml_parser_initialize)
#define yaml_parser_parse            (sbx__yaml.yaml_parser_parse)
#define yaml_parser_set_encoding     (sbx__yaml.yaml_parser_set_encoding)
#define yaml_parser_set_input_string (sbx__yaml.yaml_parser_set_input_string)

#endif
