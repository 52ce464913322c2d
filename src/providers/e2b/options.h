/* The e2b provider's declared options (options.c) and their checked, typed form. */
#ifndef SBX_PROVIDERS_E2B_OPTIONS_H
#define SBX_PROVIDERS_E2B_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"

#define SBX__E2B_MAX_PORTS 64

extern const struct sbx_provider_option sbx__e2b_options[];

/* Checked options; the strings and objects are borrowed from the JSON, except envs and
 * metadata (objects of strings, owned: sbx__e2b_opts_release). */
struct sbx__e2b_opts {
    const char *template;
    int64_t timeout_s; /* 0: default */
    int auto_pause, secure, internet;
    const char *root;
    const json_t *key_ref; /* or NULL: env E2B_API_KEY */
    const char *api_url, *sandbox_url, *domain, *ca_file;
    int ports[SBX__E2B_MAX_PORTS];
    size_t n_ports;
    json_t *envs, *metadata;
};

int sbx__e2b_options_parse(const json_t *options, struct sbx__e2b_opts *out, struct sbx_error *err);
void sbx__e2b_opts_release(struct sbx__e2b_opts *o);
int sbx__e2b_options_check(const json_t *options, struct sbx_error *err);

#endif
