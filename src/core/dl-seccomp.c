/* libseccomp, opened on first use (src/core/dl-seccomp.h). */
#include <pthread.h>
#include <string.h>

#include "core/dl-seccomp.h"

struct sbx__seccomp_fns sbx__seccomp;

static const char *const names[] = {SBX__SECCOMP_FUNCS(SBX__DL_NAME)};
#define N (sizeof(names) / sizeof(names[0]))
/* The table is filled from an array of pointers: it must be exactly that. */
_Static_assert(sizeof(struct sbx__seccomp_fns) == N * sizeof(void *), "a table of pointers");

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sbx_error load_err;
static int load_rc;

static void load(void)
{
    void *syms[N];
    load_rc = sbx__dl_load("libseccomp.so.2", "to build a sandbox's seccomp filter", names, N, syms,
                           &load_err);
    if (load_rc < 0)
        return;
    memcpy(&sbx__seccomp, syms, sizeof(sbx__seccomp));
}

int sbx__seccomp_lib_load(struct sbx_error *err)
{
    pthread_once(&once, load);
    if (load_rc < 0 && err)
        *err = load_err;
    return load_rc;
}
