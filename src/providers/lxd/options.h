/* The LXD provider's declared options (options.c): what its entry in the registry
 * (sbx__provider_lxd, client.c) names besides the typed constructor. */
#ifndef SBX_PROVIDERS_LXD_OPTIONS_H
#define SBX_PROVIDERS_LXD_OPTIONS_H

#include <jansson.h>

#include "providers/lxd/lxd.h"

extern const struct sbx_provider_option sbx__lxd_options[];
/* Checked options into struct sbx_lxd_options, then the typed constructor. */
int sbx__lxd_client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err);
/* The provider's own rules (network modes, endpoint and certificates), without a client. */
int sbx__lxd_options_check(const json_t *options, struct sbx_error *err);
/* The server by-id commands and ps may ask unconfigured: $LXD_DIR/unix.socket, else
 * /var/lib/lxd/unix.socket (or the snap's) when it is a socket; -SBX_E_NOTFOUND otherwise. */
int sbx__lxd_probe(json_t **out, struct sbx_error *err);

#endif
