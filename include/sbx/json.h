/* sbx: JSON helpers over jansson.
 *
 * Everything that parses JSON from outside the process goes through sbx_json_parse(), our own
 * reader (src/core/json-parse.c, built for megabyte strings) producing jansson values: it applies
 * a size limit and a nesting-depth limit, rejects duplicate object keys and NUL characters in
 * strings, and reports errors with the line and column.
 * The typed getters produce messages that name the field: "field 'mode' must be an integer". */
#ifndef SBX_JSON_H
#define SBX_JSON_H

#include <stdint.h>
#include <jansson.h>

#include "buf.h"
#include "common.h"
#include "error.h"

struct sbx_json_limits {
    size_t max_bytes; /* 0: SBX_JSON_DEFAULT_MAX_BYTES */
    int max_depth;    /* 0: SBX_JSON_DEFAULT_MAX_DEPTH */
};

#define SBX_JSON_DEFAULT_MAX_BYTES ((size_t)64 << 20)
#define SBX_JSON_DEFAULT_MAX_DEPTH 64

/* Parse exactly one JSON value from data[0..len). lim may be NULL for the defaults.
 * *out: caller owns (json_decref). Errors: SBX_E_TOOBIG (size or depth), SBX_E_PARSE with the
 * line and column. */
SBX_API int sbx_json_parse(const char *data, size_t len, const struct sbx_json_limits *lim,
                           json_t **out, struct sbx_error *err);

/* Depth of the deepest nesting in data, counting only brackets outside strings. Stops counting
 * (returns limit + 1) once limit is exceeded. Used before handing text to any parser. */
SBX_API int sbx_json_scan_depth(const char *data, size_t len, int limit);

enum sbx_json_dump_flags {
    SBX_JSON_COMPACT = 0,     /* one line, no spaces */
    SBX_JSON_PRETTY = 1 << 0, /* two-space indentation */
    SBX_JSON_SORTED = 1 << 1, /* object keys sorted */
};

/* Serialise v and append it to out. Never fails for valid values except on out's limit. */
SBX_API int sbx_json_dump(const json_t *v, int flags, struct sbx_buf *out, struct sbx_error *err);
/* Serialise v to a fresh string; caller owns (free). Aborts only on OOM. */
SBX_API char *sbx_json_dumps(const json_t *v, int flags);

/* A short name of v's type for messages: "object", "array", "string", "integer", "number",
 * "boolean", "null". */
SBX_API const char *sbx_json_typename(const json_t *v);

/* Typed field access on an object. Each returns 0 and sets *out when the field is present with
 * the right type; when absent it returns 0 and leaves *out unchanged if !required, else fails
 * with SBX_E_INVAL "missing required field 'k'"; with the wrong type it fails with SBX_E_INVAL
 * "field 'k' must be a string, not an integer". Returned pointers are borrowed from obj. */
SBX_API int sbx_json_get_string(const json_t *obj, const char *key, int required, const char **out,
                                struct sbx_error *err);
SBX_API int sbx_json_get_int(const json_t *obj, const char *key, int required, int64_t *out,
                             struct sbx_error *err);
SBX_API int sbx_json_get_number(const json_t *obj, const char *key, int required, double *out,
                                struct sbx_error *err);
SBX_API int sbx_json_get_bool(const json_t *obj, const char *key, int required, int *out,
                              struct sbx_error *err);
SBX_API int sbx_json_get_object(const json_t *obj, const char *key, int required, json_t **out,
                                struct sbx_error *err);
SBX_API int sbx_json_get_array(const json_t *obj, const char *key, int required, json_t **out,
                               struct sbx_error *err);

/* Flags of sbx_json_get_text. */
enum sbx_json_text_flags {
    SBX_JSON_REQUIRED = 1 << 0,      /* absent or null: "missing required field 'k'" */
    SBX_JSON_NONEMPTY = 1 << 1,      /* "": "field 'k' must not be empty" */
    SBX_JSON_ALLOW_CONTROL = 1 << 2, /* control characters allowed (a multi-line description) */
};

/* A string field that is text to be used elsewhere (a name, a URL, an option for a helper):
 * sbx_json_get_string, but a NUL byte inside fails "field 'k' must not contain a NUL byte", and
 * unless SBX_JSON_ALLOW_CONTROL a control character (C0 or DEL) fails "field 'k' must not
 * contain control characters" -- such a value could inject lines into a configuration file or
 * a terminal. *len (may be NULL) gets the length; both are set only when the field is there. */
SBX_API int sbx_json_get_text(const json_t *obj, const char *key, int flags, const char **out,
                              size_t *len, struct sbx_error *err);

/* An optional array field of text strings: "field 'k' must be an array, not an object" for
 * another type, "field 'k' must be an array of strings without control characters" for a bad
 * item. *out is borrowed from obj and left unchanged when the field is absent or null. */
SBX_API int sbx_json_get_text_array(const json_t *obj, const char *key, json_t **out,
                                    struct sbx_error *err);

/* Fail with SBX_E_INVAL "unknown field 'k'" when obj has a key not in the NULL-terminated list
 * allowed. Catches typos in hand-written documents. */
SBX_API int sbx_json_check_keys(const json_t *obj, const char *const *allowed,
                                struct sbx_error *err);

/* json_object_set_new that aborts on OOM instead of silently failing. */
SBX_API void sbx_json_set(json_t *obj, const char *key, json_t *take_value);
/* json_array_append_new that aborts on OOM. */
SBX_API void sbx_json_append(json_t *arr, json_t *take_value);
/* json_string/json_stringn that abort on OOM (s must be valid UTF-8; invalid bytes are
 * replaced with U+FFFD rather than failing). */
SBX_API json_t *sbx_json_str(const char *s);
SBX_API json_t *sbx_json_strn(const char *s, size_t n);

#endif
