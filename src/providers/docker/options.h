/* The Docker provider's declared options (options.c): what its entry in the registry
 * (sbx__provider_docker, client.c) names besides the typed constructor. */
#ifndef SBX_PROVIDERS_DOCKER_OPTIONS_H
#define SBX_PROVIDERS_DOCKER_OPTIONS_H

#include <jansson.h>

#include "sandbox/provider.h"

extern const struct sbx_provider_option sbx__dk_options[];
/* Checked options into struct sbx_docker_options, then the typed constructor. */
int sbx__dk_client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err);
int sbx__dk_options_check(const json_t *options, struct sbx_error *err);
/* The engine by-id commands and ps may ask unconfigured: $DOCKER_HOST, else
 * /var/run/docker.sock when it is a socket; -SBX_E_NOTFOUND when neither. */
int sbx__dk_probe(json_t **out, struct sbx_error *err);

#endif
