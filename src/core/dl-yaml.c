/* libyaml, opened on first use (src/core/dl-yaml.h). */
#include <pthread.h>
#include <string.h>

#include "core/dl-yaml.h"

struct sbx__yaml_fns sbx__yaml;

static const char *const names[] = {SBX__YAML_FUNCS(SBX__DL_NAME)};
#define N (sizeof(names) / sizeof(names[0]))
/* The table is filled from an array of pointers: it must be exactly that. */
_Static_assert(sizeof(struct sbx__yaml_fns) == N * sizeof(void *), "a table of pointers");

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sbx_error load_err;
static int load_rc;

static void load(void)
{
    void *syms[N];
    load_rc = sbx__dl_load("libyaml-0.so.2", "to read yaml documents", names, N, syms, &load_err);
    if (load_rc < 0)
        return;
    memcpy(&sbx__yaml, syms, sizeof(sbx__yaml));
}

int sbx__yaml_load(struct sbx_error *err)
{
    pthread_once(&once, load);
    if (load_rc < 0 && err)
        *err = load_err;
    return load_rc;
}
