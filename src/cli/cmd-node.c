/* sbx node: the certificates of an sbx-node deployment (sbx/node.h, docs/internals/node.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sbx/node.h"

/* A validity in days: 1 to 36500 (the library says why a larger one is refused). */
static int parse_days(const char *verb, const char *s, unsigned *out)
{
    char *end = NULL;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || v == 0 || v > 36500 || s[0] == '-')
        return cli_usage(verb, "--days takes a number of days from 1 to 36500, not '%s'", s);
    *out = (unsigned)v;
    return CLI_OK;
}

static void print_info(const struct sbx_node_cert_info *info)
{
    cli_printf_safe(stdout, CLI_SAFE_ALWAYS,
                    "certificate: %s\nkey:         %s\nsha-256:     %s\npin:         %s\n",
                    info->cert_path, info->key_path, info->fingerprint, info->pin);
}

/* The options of these commands, exactly as spelt, anywhere on the line ("--" ends them):
 * "--name VALUE" or "--name=VALUE" for an option with a value. Returns the option's index
 * and sets *val, -1 for an operand, or -2 after printing a usage error. */
struct node_opt {
    const char *name;
    int has_value;
};

static int next_opt(const char *verb, const struct node_opt *opts, int argc, char **argv, int *i,
                    int *dashdash, const char **val)
{
    const char *a = argv[*i];
    *val = a;
    if (*dashdash || a[0] != '-' || a[1] == '\0')
        return -1;
    if (strcmp(a, "--") == 0) {
        *dashdash = 1;
        return -3;
    }
    size_t n = strcspn(a + 2, "=");
    for (int k = 0; a[1] == '-' && opts[k].name; k++) {
        if (strlen(opts[k].name) != n || strncmp(opts[k].name, a + 2, n) != 0)
            continue;
        if (!opts[k].has_value) {
            if (a[2 + n] == '=')
                break;
            *val = NULL;
            return k;
        }
        if (a[2 + n] == '=') {
            *val = a + 3 + n;
        } else if (*i + 1 < argc) {
            *val = argv[++*i];
        } else {
            cli_usage(verb, "option '%s' needs a value", a);
            return -2;
        }
        return k;
    }
    cli_unknown_option(verb, a);
    return -2;
}

static int cmd_ca_init(int argc, char **argv)
{
    static const char verb[] = "node ca ";
    static const struct node_opt opts[] = {{"name", 1}, {"days", 1}, {NULL, 0}};
    struct sbx_node_ca_opts o = {0};
    const char *dir = NULL, *v;
    int dashdash = 0, rc;
    for (int i = 1; i < argc; i++) {
        int k = next_opt(verb, opts, argc, argv, &i, &dashdash, &v);
        if (k == -2)
            return CLI_USAGE;
        if (k == 0)
            o.name = v;
        else if (k == 1 && (rc = parse_days(verb, v, &o.days)) != CLI_OK)
            return rc;
        else if (k == -1 && dir)
            return cli_usage(verb, "give one folder, not '%s' too", v);
        else if (k == -1)
            dir = v;
    }
    if (!dir)
        return cli_usage(verb, "give the folder of the new ca");
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_node_cert_info info;
    if (sbx_node_ca_init(dir, &o, &info, &err) < 0)
        return cli_fail(&err);
    print_info(&info);
    return CLI_OK;
}

static int cmd_cert_issue(int argc, char **argv)
{
    static const char verb[] = "node cert ";
    static const struct node_opt opts[] = {{"ca", 1},   {"node", 0}, {"harness", 0}, {"host", 1},
                                           {"days", 1}, {"out", 1},  {NULL, 0}};
    const char *hosts[SBX_NODE_HOSTS_MAX];
    struct sbx_node_cert_opts o = {.hosts = hosts};
    const char *ca = NULL, *name = NULL, *v;
    int dashdash = 0, rc;
    for (int i = 1; i < argc; i++) {
        int k = next_opt(verb, opts, argc, argv, &i, &dashdash, &v);
        enum sbx_node_cert_kind kind = k == 1 ? SBX_NODE_CERT_NODE : SBX_NODE_CERT_HARNESS;
        if (k == -2)
            return CLI_USAGE;
        if (k == 0)
            ca = v;
        else if ((k == 1 || k == 2) && o.kind && o.kind != kind)
            return cli_usage(verb, "give one of --node and --harness");
        else if (k == 1 || k == 2)
            o.kind = kind;
        else if (k == 3 && o.n_hosts == SBX_NODE_HOSTS_MAX)
            return cli_usage(verb, "at most %d --host", SBX_NODE_HOSTS_MAX);
        else if (k == 3)
            hosts[o.n_hosts++] = v;
        else if (k == 4 && (rc = parse_days(verb, v, &o.days)) != CLI_OK)
            return rc;
        else if (k == 5)
            o.out_dir = v;
        else if (k == -1 && name)
            return cli_usage(verb, "give one name, not '%s' too", v);
        else if (k == -1)
            name = v;
    }
    if (!name)
        return cli_usage(verb, "give the name of the node or harness");
    if (!ca)
        return cli_usage(verb, "--ca DIR names the ca that signs the certificate");
    if (!o.kind)
        return cli_usage(verb, "give --node (a daemon's certificate) or --harness (a client's)");
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_node_cert_info info;
    if (sbx_node_cert_issue(ca, name, &o, &info, &err) < 0)
        return cli_fail(&err);
    print_info(&info);
    return CLI_OK;
}

int cmd_node(int argc, char **argv)
{
    /* Two words each ("ca init", "cert issue"): the second is the first operand of the help
     * table's entry ("node ca", "node cert"), so that --help reaches it anywhere. */
    if (argc >= 3 && strcmp(argv[1], "ca") == 0 && strcmp(argv[2], "init") == 0)
        return cmd_ca_init(argc - 2, argv + 2);
    if (argc >= 3 && strcmp(argv[1], "cert") == 0 && strcmp(argv[2], "issue") == 0)
        return cmd_cert_issue(argc - 2, argv + 2);
    if (argc < 2)
        return cli_usage("node ", "missing command (ca init, cert issue)");
    return cli_usage("node ", "unknown command '%s%s%s' (ca init, cert issue)", argv[1],
                     argc >= 3 ? " " : "", argc >= 3 ? argv[2] : "");
}
