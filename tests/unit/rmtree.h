/* Tests: remove a scratch tree with the library's own host tree remover, not an `rm` from $PATH.
 * A failure is reported as a TAP comment: the tree is scratch, the test's verdict stands. */
#ifndef SBX_TEST_RMTREE_H
#define SBX_TEST_RMTREE_H

#include <stdio.h>

#include "core/fs-internal.h"

static inline void rm_tree(const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx__fs_remove_tree(path, &err) < 0)
        printf("# %s\n", err.msg);
}

#endif
