/* libcurl, opened on first use (src/core/dl-curl.h). */
#include <pthread.h>
#include <string.h>

#include "core/dl-curl.h"

struct sbx__curl_fns sbx__curl;

static const char *const names[] = {SBX__CURL_FUNCS(SBX__DL_NAME)};
#define N (sizeof(names) / sizeof(names[0]))
/* The table is filled from an array of pointers: it must be exactly that. */
_Static_assert(sizeof(struct sbx__curl_fns) == N * sizeof(void *), "a table of pointers");

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sbx_error load_err;
static int load_rc;

static void load(void)
{
    void *syms[N];
    load_rc = sbx__dl_load("libcurl.so.4", "to talk HTTP: models, trace exporters, docker engines",
                           names, N, syms, &load_err);
    if (load_rc < 0)
        return;
    memcpy(&sbx__curl, syms, sizeof(sbx__curl));
    /* Not thread-safe in older libcurl: once, here, before any handle exists. */
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int sbx__curl_load(struct sbx_error *err)
{
    pthread_once(&once, load);
    if (load_rc < 0 && err)
        *err = load_err;
    return load_rc;
}
