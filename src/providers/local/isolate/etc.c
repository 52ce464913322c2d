/* sbx local provider: the generated files of the sandbox's /etc (passwd, group, hosts,
 * nsswitch.conf). Pure text generation; the executor writes them into the new root. Only the
 * manifest's users and groups exist inside, plus root and nobody so that files owned by unmapped
 * host ids have a name. No shadow file is ever generated or bound. */
#include <string.h>

#include "providers/local/isolate/isolate.h"

int sbx__isolation_check_name(const char *what, const char *name, struct sbx_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s name must not be empty", what);
    if (n > 32)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s name '%.40s' is longer than 32 bytes", what,
                             name);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || c == '_' ||
                 (i > 0 && ((c >= '0' && c <= '9') || c == '-'));
        if (!ok)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "%s name '%s' must match [a-z_][a-z0-9_-]{0,31}", what, name);
    }
    return 0;
}

static const char *user_name(const struct sbx__isolation_spec *spec, size_t i)
{
    return spec->nusers ? spec->users[i].name : SBX__ISOLATION_DEFAULT_USER;
}

int sbx__etc_passwd(const struct sbx__isolation_spec *spec, const char *home, struct sbx_buf *out,
                    struct sbx_error *err)
{
    int rc = sbx_buf_adds(out, "root:x:0:0:root:/root:/bin/sh\n", err);
    size_t n = spec->nusers ? spec->nusers : 1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        unsigned id = SBX__ISOLATION_FIRST_UID + (unsigned)i;
        const char *name = user_name(spec, i);
        rc = sbx_buf_addf(out, err, "%s:x:%u:%u:%s:%s:/bin/sh\n", name, id, id, name, home);
    }
    if (rc == 0)
        rc = sbx_buf_adds(out, "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", err);
    return rc;
}

/* Members of group g as a comma-separated list. */
static int add_members(const struct sbx__isolation_group *g, struct sbx_buf *out,
                       struct sbx_error *err)
{
    int rc = 0;
    for (size_t j = 0; rc == 0 && g->members && g->members[j]; j++)
        rc = sbx_buf_addf(out, err, "%s%s", j ? "," : "", g->members[j]);
    return rc;
}

int sbx__etc_group(const struct sbx__isolation_spec *spec, struct sbx_buf *out,
                   struct sbx_error *err)
{
    int rc = sbx_buf_adds(out, "root:x:0:\n", err);
    size_t n = spec->nusers ? spec->nusers : 1;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = sbx_buf_addf(out, err, "%s:x:%u:\n", user_name(spec, i),
                          SBX__ISOLATION_FIRST_UID + (unsigned)i);
    for (size_t i = 0; rc == 0 && i < spec->ngroups; i++) {
        rc = sbx_buf_addf(out, err, "%s:x:%u:", spec->groups[i].name,
                          SBX__ISOLATION_FIRST_GID + (unsigned)i);
        if (rc == 0)
            rc = add_members(&spec->groups[i], out, err);
        if (rc == 0)
            rc = sbx_buf_addch(out, '\n', err);
    }
    if (rc == 0)
        rc = sbx_buf_adds(out, "nogroup:x:65534:\n", err);
    return rc;
}

int sbx__etc_hosts(const char *hostname, struct sbx_buf *out, struct sbx_error *err)
{
    return sbx_buf_addf(out, err,
                        "127.0.0.1\tlocalhost\n"
                        "127.0.1.1\t%s\n"
                        "::1\tlocalhost ip6-localhost ip6-loopback\n",
                        hostname);
}

int sbx__etc_nsswitch(struct sbx_buf *out, struct sbx_error *err)
{
    /* Only the files module: the host's nsswitch may name sss, systemd or ldap modules that
     * would try to reach host services. */
    return sbx_buf_adds(out,
                        "passwd: files\n"
                        "group: files\n"
                        "shadow: files\n"
                        "hosts: files dns\n"
                        "networks: files\n"
                        "protocols: files\n"
                        "services: files\n"
                        "ethers: files\n"
                        "rpc: files\n",
                        err);
}
