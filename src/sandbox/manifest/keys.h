/* sbx: the keys of a manifest document (keys.c), the bottom of src/sandbox/manifest/: what
 * every file that reads a document shares, and nothing of the manifest's layout. Only files in
 * this folder include it (keys.c itself, the others through model.h). */
#ifndef SBX_SANDBOX_MANIFEST_KEYS_H
#define SBX_SANDBOX_MANIFEST_KEYS_H

#include <jansson.h>
#include <stddef.h>

#include "sbx/error.h"

/* Fields every entry may carry. `is_dir` is written by the Python SDK and ignored here. */
#define SBX__MANIFEST_COMMON_KEYS \
    "type", "description", "ephemeral", "group", "is_dir", "permissions", "mode"

/* Copy obj with camelCase keys renamed to snake_case ("mountPath" -> "mount_path"), so a
 * manifest written by the JS SDK reads like one written by the Python SDK. Both spellings of
 * one field is an error. *out: new reference. */
int sbx__manifest_snake_keys(const json_t *obj, json_t **out, struct sbx_error *err);
/* A printable rendering of a name from outside for messages: control bytes, NUL and invalid
 * UTF-8 become \xNN, long names are cut with "...". */
void sbx__manifest_quote_name(const char *s, size_t len, char *out, size_t outsz);
/* Rewrite a path-module message "path '<p>' <rule>" to "path <rule>": the caller names the
 * entry already. */
void sbx__manifest_strip_path_quote(struct sbx_error *err);

#endif
