/* The registry's table of providers: one line per provider, the first the default. It is
 * compiled into libsbx and not into sbx-base (the supervisor's library): naming the docker
 * provider pulls in its libcurl client. Each provider defines its struct sbx__provider_def,
 * named sbx__provider_<NAME>, in its own folder (docs/internals/providers.md). */
#include "sandbox/provider.h"

/* clang-format off */
#define SBX__PROVIDER_LIST(X) \
    X(local)                  \
    X(docker)                 \
    X(lxd)                    \
    X(kubernetes)             \
    X(e2b)                    \
    X(daytona)                \
    X(cloudflare)             \
    X(runloop)                \
    X(vercel)                 \
    X(blaxel)                 \
    X(remote)                 \
    /* a new provider: one line above this one */
/* clang-format on */

#define SBX__DECLARE(name) extern const struct sbx__provider_def sbx__provider_##name;
#define SBX__ENTRY(name)   &sbx__provider_##name,

SBX__PROVIDER_LIST(SBX__DECLARE)

const struct sbx__provider_def *const sbx__providers[] = {SBX__PROVIDER_LIST(SBX__ENTRY)};

const size_t sbx__n_providers = sizeof(sbx__providers) / sizeof(sbx__providers[0]);
