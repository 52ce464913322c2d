/* The configuration the local client hands to the supervisor it starts: one JSON object on the
 * supervisor's stdin (docs/internals/local-provider.md, "Supervisor configuration"). The client
 * fills the struct and serialises it; the supervisor parses it strictly (it checks everything
 * again: the bytes cross a process boundary) and reads only the struct. */
#ifndef SBX_SANDBOX_LOCAL_CONFIG_H
#define SBX_SANDBOX_LOCAL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sbx/error.h"
#include "sbx/local.h"
#include "sbx/strv.h"

/* Bounds of what from_json accepts. */
#define SBX__LOCAL_CONFIG_MAX_ENV        4096 /* SBX_EXEC_MAX_ENV */
#define SBX__LOCAL_CONFIG_MAX_USERS      64   /* SBX__ISOLATION_MAX_USERS */
#define SBX__LOCAL_CONFIG_MAX_GROUPS     64   /* SBX__ISOLATION_MAX_GROUPS */
#define SBX__LOCAL_CONFIG_MAX_MEMBERS    64   /* members of one group: at most every user */
#define SBX__LOCAL_CONFIG_MAX_GRANTS     64   /* SBX__ISOLATION_MAX_GRANTS, SBX_LOCAL_MAX_GRANTS */
#define SBX__LOCAL_CONFIG_MAX_TEST_HOSTS 64
#define SBX__LOCAL_CONFIG_MAX_DELAY_MS   10000
#define SBX__LOCAL_CONFIG_MAX_PATH       4096 /* bytes of one path */
#define SBX__LOCAL_CONFIG_ID_LEN         16   /* hex digits of a sandbox id */

/* The network of an isolated sandbox. */
enum sbx__local_config_net {
    SBX__LOCAL_CONFIG_NET_NONE = 0, /* an empty namespace, loopback only */
    SBX__LOCAL_CONFIG_NET_ALLOW,    /* the empty namespace plus the proxy to allow */
    SBX__LOCAL_CONFIG_NET_FULL,     /* the host's network */
};

struct sbx__local_config_group {
    char *name;
    struct sbx_strv members; /* user names */
};

struct sbx__local_config_grant {
    char *src; /* absolute host path */
    char *dst; /* absolute sandbox path; NULL: the same as src */
    int writable;
    int dangerous;
};

/* Every string is owned by the struct (sbx__local_config_release frees them). Fields marked
 * "isolated" are only carried (and only accepted) when isolated is set. */
/* A storage mount, docs/internals/mounts.md: rclone, started by the supervisor on the host. */
struct sbx__local_config_mount {
    char *entry;  /* the manifest entry's path and type, for messages: 'data' (s3_mount)" */
    char *dst;    /* absolute sandbox path of the mount point */
    char *remote; /* what rclone mounts: "m:bucket/prefix" */
    char *check;  /* what is listed first to check endpoint, credentials, bucket: "m:bucket" */
    char *config; /* rclone config text; holds credentials */
    int writable;
};
#define SBX__LOCAL_CONFIG_MAX_MOUNTS 16

struct sbx__local_config {
    char *id;            /* the sandbox id: SBX__LOCAL_CONFIG_ID_LEN lowercase hex digits */
    char *dir;           /* its runtime directory, absolute */
    char *workspace;     /* the workspace on the host, absolute */
    char *root;          /* where commands see the workspace, absolute */
    int workspace_owned; /* the create made the workspace (rm and a tie remove it) */
    int isolated;        /* isolation "namespaces"; 0: "none" */
    struct sbx_strv env; /* base environment of every command, "KEY=VALUE"; may hold secrets */
    int ports[SBX_LOCAL_MAX_EXPOSED_PORTS]; /* exposed ports, 1..65535 */
    size_t n_ports;
    int64_t test_delay_ms; /* test only: pause before each request, 0..MAX_DELAY_MS */
    int tied;              /* a pidfd of the creator is at SBX_PROTO_TIE_FD */
    /* isolated */
    enum sbx__local_config_net net;
    char *host_home; /* the creator's home (refused as a grant source), absolute; may be NULL */
    struct sbx_strv users; /* the manifest's account users, users[0] the default one */
    struct sbx__local_config_group *groups;
    size_t n_groups;
    struct sbx__local_config_grant *grants;
    size_t n_grants;
    struct sbx__local_config_mount *mounts;
    size_t n_mounts;
    /* 0: the default, SBX_LOCAL_LIMIT_NONE: no limit; otherwise at most INT64_MAX. */
    struct sbx_local_limits limits;
    struct sbx_strv allow;      /* net allow: the normalized patterns (at least one); else none */
    struct sbx_strv test_hosts; /* test only: "name=ip" the proxy resolves without DNS */
    char *port_bind;            /* the forwarders' host address; NULL: 127.0.0.1 */
    struct sbx_strv publish;    /* fixed forwards made at start, canonical "ADDR:HOST:PORT" */
    int allow_host_uid;         /* sbx_local_options.allow_host_uid */
    int allow_ports[SBX_LOCAL_MAX_EXPOSED_PORTS]; /* net allow: 1..65535; none: 80 and 443 */
    size_t n_allow_ports;
};

/* A fixed port forward ("-p"): "[ADDR:]HOST:PORT", ADDR an IPv4 address or an IPv6 one in
 * brackets (default 127.0.0.1), HOST the host port and PORT the sandbox's, 1..65535. bind gets
 * ADDR without brackets; canon (may be NULL) the canonical "ADDR:HOST:PORT" (brackets kept).
 * SBX_E_INVAL naming text and what it wants. */
#define SBX__LOCAL_PUBLISH_TEXT_MAX 80
int sbx__local_publish_parse(const char *text, char bind[64], int *host_port, int *port,
                             char canon[SBX__LOCAL_PUBLISH_TEXT_MAX], struct sbx_error *err);

/* An empty configuration (cannot fail). */
void sbx__local_config_init(struct sbx__local_config *c);
/* Free what c owns (env wiped first: it may carry secrets) and leave it empty. */
void sbx__local_config_release(struct sbx__local_config *c);

/* The JSON of c; *out: caller owns (json_decref). Fails (SBX_E_INVAL, naming the field) on what
 * from_json would refuse, so a client bug shows at the client. */
int sbx__local_config_to_json(const struct sbx__local_config *c, json_t **out,
                              struct sbx_error *err);
/* Parse and check j: unknown fields, wrong types, values out of range, counts above the bounds
 * and relative paths are SBX_E_INVAL (SBX_E_TOOBIG for counts) naming the field. *out is set only
 * on success (the caller releases it); it must not hold anything before. */
int sbx__local_config_from_json(const json_t *j, struct sbx__local_config *out,
                                struct sbx_error *err);

#endif
