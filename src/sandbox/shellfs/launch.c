/* Starting a command through a shell preamble: shellfs.h. */
#include <errno.h>
#include <string.h>

#include "sandbox/shellfs/shellfs.h"

int sbx__shellfs_start_error(char mark, const char *name, const char *cwd, struct sbx_error *err)
{
    switch (mark) {
    case 'N':
        return sbx_error_set(err, SBX_E_EXEC, ENOENT, "command '%s' not found", name);
    case 'X':
        return sbx_error_set(err, SBX_E_EXEC, EACCES, "cannot run '%s': %s", name,
                             strerror(EACCES));
    case 'C':
        return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                             "working directory '%s' is not a directory of the sandbox",
                             cwd[0] ? cwd : ".");
    case 'P':
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "working directory '%s' leads out of the workspace", cwd);
    case 'E':
        return sbx_error_set(err, SBX_E_INVAL, 0, "an environment entry of '%s' was refused", name);
    default:
        return 0;
    }
}
