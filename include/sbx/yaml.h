/* sbx: YAML documents loaded as JSON values (over libyaml).
 *
 * Agent files and manifests may be written in YAML or JSON; both become a json_t and are
 * validated by the same code. The loader takes exactly one document and follows the YAML 1.2
 * core schema for plain scalars (null, true/false, integers, floats; everything else a string).
 * Quoted scalars are always strings. Mapping keys must be scalars and unique. Anchors and aliases
 * are expanded, with the total node count bounded, so an alias bomb fails with SBX_E_TOOBIG. */
#ifndef SBX_YAML_H
#define SBX_YAML_H

#include <jansson.h>

#include "common.h"
#include "error.h"
#include "json.h"

struct sbx_yaml_limits {
    size_t max_bytes; /* 0: SBX_JSON_DEFAULT_MAX_BYTES */
    int max_depth;    /* 0: SBX_JSON_DEFAULT_MAX_DEPTH */
    size_t max_nodes; /* 0: 1,000,000 (after alias expansion) */
};

/* Parse YAML text. lim may be NULL for the defaults. *out: caller owns (json_decref); an empty
 * stream gives JSON null. Plain scalars: "", "~", null/Null/NULL -> null; true/True/TRUE,
 * false/False/FALSE -> booleans; [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+ -> integers (outside
 * int64: SBX_E_INVAL); decimal floats -> reals; .inf and .nan cannot be JSON: SBX_E_INVAL.
 * "yes", "on", "1_000" are strings. Tags: !!str, !!int, !!float, !!bool, !!null, !!seq, !!map
 * and "!" are honoured; any other tag is SBX_E_INVAL. Keys keep their text ("1: x" has the key
 * "1"); an alias may be a key when it names a scalar. Merge keys ("<<") are not special.
 * Errors name the line and column: SBX_E_PARSE (syntax, alias to an unknown anchor),
 * SBX_E_TOOBIG (size, depth, node count), SBX_E_INVAL (duplicate key, non-scalar key, more than
 * one document, invalid UTF-8 or a NUL character, unsupported tag, unrepresentable number). */
SBX_API int sbx_yaml_parse(const char *data, size_t len, const struct sbx_yaml_limits *lim,
                           json_t **out, struct sbx_error *err);

/* Load a document file: JSON when the name ends in ".json" or the first non-blank byte is '{' or
 * '[', otherwise YAML. Reads at most the size limit. Parse errors are prefixed with the quoted
 * path; read errors name it ("cannot open 'p': ..."). JSON documents get the byte and depth
 * limits of lim (max_nodes applies to YAML only: JSON has no aliases). */
SBX_API int sbx_doc_load_file(const char *path, const struct sbx_yaml_limits *lim, json_t **out,
                              struct sbx_error *err);
/* The same for text already in memory; name (may be NULL) is used only in messages and for the
 * suffix test. */
SBX_API int sbx_doc_parse(const char *name, const char *data, size_t len,
                          const struct sbx_yaml_limits *lim, json_t **out, struct sbx_error *err);

#endif
