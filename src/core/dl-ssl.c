/* OpenSSL libssl, opened on first use (src/core/dl-ssl.h). */
#include <pthread.h>
#include <string.h>

#include "core/dl-ssl.h"

struct sbx__ssl_fns sbx__ssl;

static const char *const names[] = {SBX__SSL_FUNCS(SBX__DL_NAME)};
#define N (sizeof(names) / sizeof(names[0]))
/* The table is filled from an array of pointers: it must be exactly that. */
_Static_assert(sizeof(struct sbx__ssl_fns) == N * sizeof(void *), "a table of pointers");

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sbx_error load_err;
static int load_rc;

static void load(void)
{
    void *syms[N];
    load_rc = sbx__crypto_load(&load_err);
    if (load_rc < 0)
        return;
    load_rc = sbx__dl_load("libssl.so.3",
                           "for pinned certificates, half-closed tls connections and tls servers",
                           names, N, syms, &load_err);
    if (load_rc < 0)
        return;
    memcpy(&sbx__ssl, syms, sizeof(sbx__ssl));
}

int sbx__ssl_load(struct sbx_error *err)
{
    pthread_once(&once, load);
    if (load_rc < 0 && err)
        *err = load_err;
    return load_rc;
}
