/* sbx: the host git checkout (materialize/git.c), shared by materialisation (git_repo entries)
 * and the skills capability (skills from a git repository). Not installed. */
#ifndef SBX_SANDBOX_MATERIALIZE_GIT_H
#define SBX_SANDBOX_MATERIALIZE_GIT_H

#include "sbx/error.h"
#include "sbx/manifest.h"

/* Fetch the repository of git_repo entry e (its url, ref) on the host into a new temporary
 * directory: a shallow clone of the ref, or exactly the commit when ref is one. *out_dir: the
 * checkout, caller owns (sbx__git_checkout_remove, then free); *out_commit: the commit checked
 * out (caller frees). Nothing is left on failure. Blocks while git runs. */
int sbx__git_checkout(const struct sbx_manifest_entry *e, char **out_dir, char **out_commit,
                      struct sbx_error *err);
/* Remove a checkout sbx__git_checkout made (sbx__fs_remove_tree); best effort: a failure is
 * logged as a warning. */
void sbx__git_checkout_remove(const char *dir);
/* Remove the remote of the checkout in dir, so that nothing in it can fetch again (the URL may
 * be a host path). */
int sbx__git_forget_remote(const char *dir, struct sbx_error *err);

#endif
