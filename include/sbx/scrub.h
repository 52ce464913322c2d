/* sbx: the scrubber — the one place that removes secret values from what sbx writes (run
 * states, traces, conversations, recordings of model answers, memory files). A run gathers
 * every secret it knows into one list (the model's key, --pass-secret values, manifest secrets,
 * provider credentials: sbx_sandbox_run_secrets) and hands that list to each writer. */
#ifndef SBX_SCRUB_H
#define SBX_SCRUB_H

#include <stddef.h>
#include <jansson.h>

#include "common.h"
#include "strv.h"

/* Values shorter than this are not scrubbed (they would blank ordinary text). */
#define SBX_SCRUB_MIN  4
#define SBX_SCRUB_MARK "[redacted]"

/* text[0..n) with every occurrence of each value of secrets replaced by mark (NULL:
 * SBX_SCRUB_MARK), the longest value first where several start at one place. Returns NULL when
 * no value occurs (nothing to replace), else a new string whose length goes to *outn (may be
 * NULL); caller frees. secrets may be NULL. */
SBX_API char *sbx_scrub_text(const struct sbx_strv *secrets, const char *text, size_t n,
                             const char *mark, size_t *outn);
/* v with every string and object key scrubbed (sbx_scrub_text): a new reference, which is v
 * itself when nothing in it changed. */
SBX_API json_t *sbx_scrub_json(const struct sbx_strv *secrets, const json_t *v, const char *mark);
/* Whether text[0..n) ends with a prefix of a secret (at least SBX_SCRUB_MIN - 1 bytes of it):
 * the length of the longest such prefix, else 0. For text cut at a bound, where half a secret
 * must not survive. */
SBX_API size_t sbx_scrub_tail(const struct sbx_strv *secrets, const char *text, size_t n);

#endif
