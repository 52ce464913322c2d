/* sbx: materialisation (materialize/materialize.c): a manifest's entries made into a session's
 * workspace, through the session operations only, so every provider shares it. Providers call
 * it when they create a sandbox. Not installed. */
#ifndef SBX_SANDBOX_MATERIALIZE_MATERIALIZE_H
#define SBX_SANDBOX_MATERIALIZE_MATERIALIZE_H

#include <jansson.h>

#include "sbx/error.h"
#include "sbx/manifest.h"
#include "sbx/progress.h"
#include "sbx/session.h"

enum {
    /* Only the ephemeral entries (and what lies beneath them): the rest of the workspace came
     * from a snapshot. */
    SBX__MATERIALIZE_EPHEMERAL_ONLY = 1 << 0,
    /* A file already in the workspace is never replaced: an entry that would is an error
     * (SBX_E_EXISTS "'path' is already in the workspace ..."). Directories are shared. */
    SBX__MATERIALIZE_KEEP = 1 << 1,
};

/* Materialise manifest m into the fresh workspace of s, entry by entry in declared order.
 * *out_records: a JSON array describing what was fetched (git_repo: path, repo, ref, resolved
 * commit); caller owns. Errors name the entry. On failure what it created (files, directories,
 * missing parents) is removed and the modes it changed on existing directories are put back,
 * so a given workspace is left as it was; a pre-existing file that an entry replaced keeps the
 * new content (SBX__MATERIALIZE_KEEP: no entry replaces one). */
int sbx__materialize(struct sbx_session *s, const struct sbx_manifest *m, int flags,
                     struct sbx_progress_sink *progress, json_t **out_records,
                     struct sbx_error *err);

#endif
