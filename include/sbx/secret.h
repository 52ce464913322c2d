/* sbx: secret values (mount credentials, secret environment values).
 *
 * A secret is a named byte string that sbx never writes anywhere by itself: the type has no
 * serializer, no formatter and no accessor that hands the value out implicitly. The only way to
 * read the value is sbx_secret_reveal(), so every place that uses a credential is greppable.
 * Code that serializes a structure holding secrets (the manifest, session state) skips them and
 * reports how many it skipped. The memory holding the value is wiped when the secret is freed. */
#ifndef SBX_SECRET_H
#define SBX_SECRET_H

#include <stddef.h>

#include "common.h"

struct sbx_secret; /* opaque */

/* Copy name (what the secret is, e.g. "secret_access_key"; shown in messages) and value[0..len)
 * into a new secret. The value may hold any bytes; a NUL is kept after it for C strings.
 * Caller owns the result (sbx_secret_free). Never fails (aborts on OOM). */
SBX_API struct sbx_secret *sbx_secret_new(const char *name, const void *value, size_t len);
/* A copy of s; caller owns it. */
SBX_API struct sbx_secret *sbx_secret_dup(const struct sbx_secret *s);
/* Wipe the value and free s. Accepts NULL. */
SBX_API void sbx_secret_free(struct sbx_secret *s);

/* The name given at creation; borrowed, valid while s lives. Not secret. */
SBX_API const char *sbx_secret_name(const struct sbx_secret *s);
/* Length of the value in bytes. Not secret. */
SBX_API size_t sbx_secret_len(const struct sbx_secret *s);
/* The value: borrowed, NUL-terminated, valid while s lives. *len (may be NULL) receives the
 * length. Call this only where the credential is handed to its consumer (an environment block,
 * a mount helper's 0600 config file); never log or copy it into an error message. */
SBX_API const char *sbx_secret_reveal(const struct sbx_secret *s, size_t *len);

#endif
