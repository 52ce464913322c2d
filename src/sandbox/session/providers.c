/* The registry's table of providers. It is compiled into libsbx and not into sbx-base (the
 * supervisor's library): naming the docker provider pulls in its libcurl client. */
#include "sandbox/provider.h"

const struct sbx__provider_def *const sbx__providers[] = {
        &sbx__provider_local,
        &sbx__provider_docker,
};

const size_t sbx__n_providers = sizeof(sbx__providers) / sizeof(sbx__providers[0]);
