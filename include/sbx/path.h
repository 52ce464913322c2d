/* sbx: workspace path rules.
 *
 * Every workspace-relative path that arrives from outside (a manifest key, a tool argument, a
 * CLI operand, an archive member) goes through sbx_path_normalize() once. The normalised form is:
 * relative, components separated by single '/', no "." or ".." component, no leading or trailing
 * '/', each component 1..255 bytes of valid UTF-8 without control characters, total at most 4095
 * bytes. The empty string "" denotes the workspace root itself and is produced only when
 * SBX_PATH_ALLOW_ROOT is given. */
#ifndef SBX_PATH_H
#define SBX_PATH_H

#include <stddef.h>

#include "common.h"
#include "error.h"

#define SBX_PATH_MAX 4095
#define SBX_NAME_MAX 255

enum sbx_path_flags {
    SBX_PATH_ALLOW_ROOT = 1 << 0,     /* "" and "." normalise to "" instead of failing */
    SBX_PATH_ALLOW_ABSOLUTE = 1 << 1, /* strip a leading "/" (after checking it is under root) */
};

/* Normalise in[0..len) (len may include no NUL; a NUL byte inside is an error). root, used only
 * with SBX_PATH_ALLOW_ABSOLUTE, is the absolute in-sandbox workspace root ("/workspace"): an
 * absolute path must be root itself or below it, and is turned into the relative remainder.
 * *out: caller owns (free). Errors are SBX_E_INVAL naming the rule:
 *   "path 'a/../b' must not contain '..'", "path '/etc' must be relative", ... */
SBX_API int sbx_path_normalize(const char *in, size_t len, int flags, const char *root, char **out,
                               struct sbx_error *err);

/* True when a (normalised) equals b or lies below it: ("a/b", "a") and ("a", "a") are true,
 * ("ab", "a") is false. "" contains everything. */
SBX_API int sbx_path_within(const char *a, const char *b);

/* True when data[0..n) is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
SBX_API int sbx_utf8_valid(const char *data, size_t n);

/* True when data[0..n) holds a C0 control character (NUL included) or DEL. */
SBX_API int sbx_text_has_control(const char *data, size_t n);

/* Check an absolute in-sandbox root such as "/workspace": absolute, normalised, not "/", no
 * "..", valid UTF-8. */
SBX_API int sbx_path_check_root(const char *root, struct sbx_error *err);

#endif
