/* The LXD provider's client (client.c, create.c). */
#ifndef SBX_PROVIDERS_LXD_CLIENT_H
#define SBX_PROVIDERS_LXD_CLIENT_H

#include "providers/lxd/lxd.h"

struct lx_client {
    struct sbx_client base;
    struct sbx__lxd_server sv;
    char *image, *user, *target, *port_bind;
    struct sbx_strv profiles;
    enum sbx_lxd_network network;
    uint64_t memory, pids, cpu_millis, disk;
    int privileged, nesting;
    int ports[SBX_LXD_MAX_EXPOSED_PORTS];
    size_t n_ports;
};

/* client.c */
/* The instance of sandbox prefix (exact id or unique prefix): *inst its description. */
int sbx__lxd_find(struct lx_client *c, const char *prefix, json_t **inst, struct sbx_error *err);
/* The options a sandbox records (user.sbx.options, the state's "options"). */
json_t *sbx__lxd_options_json(const struct lx_client *c);

/* create.c */
int sbx__lxd_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                    struct sbx_session **out, struct sbx_error *err);

#endif
