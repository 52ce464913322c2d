/* sbx manifest: check a workspace manifest and show the tree the agent will see. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"

static int parse_num(const char *s, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Which mount types sbx's own test suite mounts against a real server (tests/storage/): the
 * rest are configured as the reference describes them and never exercised here. */
static const char *mount_tested_against(enum sbx_entry_type t)
{
    switch (t) {
    case SBX_ENTRY_S3_MOUNT:
        return "s3rver";
    case SBX_ENTRY_R2_MOUNT:
        return "s3rver, through an R2 endpoint setting";
    case SBX_ENTRY_GCS_MOUNT:
        return "s3rver, through the GCS S3-interoperability path";
    case SBX_ENTRY_AZURE_BLOB_MOUNT:
        return "azurite";
    case SBX_ENTRY_BOX_MOUNT:
    case SBX_ENTRY_S3_FILES_MOUNT:
    case SBX_ENTRY_FILE:
    case SBX_ENTRY_DIR:
    case SBX_ENTRY_LOCAL_FILE:
    case SBX_ENTRY_LOCAL_DIR:
    case SBX_ENTRY_GIT_REPO:
        break;
    }
    return NULL;
}

/* One line per mount entry on stderr (stdout stays the manifest): its type, where it appears,
 * the access mode and whether that type is tested against a real server. */
static void report_mounts(const struct sbx_manifest *m)
{
    const char *root = sbx_manifest_root(m);
    size_t rl = strlen(root);
    for (size_t i = 0; i < sbx_manifest_entry_count(m); i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        if (!sbx_entry_type_is_mount(e->type))
            continue;
        const char *t = e->mount_path ? e->mount_path : e->path;
        const char *tested = mount_tested_against(e->type);
        fprintf(stderr, "mount '%s': %s at %s%s%s, %s; %s%s%s\n", e->path,
                sbx_entry_type_name(e->type), t[0] == '/' ? "" : root,
                t[0] == '/' || (rl && root[rl - 1] == '/') ? "" : "/", t,
                e->read_only ? "read-only" : "read-write",
                tested ? "tested against a real server in sbx's test suite ("
                       : "configured only, not tested against a real server",
                tested ? tested : "", tested ? ")" : "");
    }
}

int cmd_manifest(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("manifest ", "missing subcommand (check or tree)");
    const char *sub = argv[1];
    int is_tree = strcmp(sub, "tree") == 0;
    if (!is_tree && strcmp(sub, "check") != 0)
        return cli_usage("manifest ", "unknown subcommand '%s'", sub);

    struct sbx_manifest_load_opts opts = {0};
    long depth = 4, max_bytes = SBX_MANIFEST_TREE_DEFAULT_MAX_BYTES;
    const char *file = NULL, *provider = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--no-host-checks") == 0) {
            opts.flags |= SBX_MANIFEST_NO_HOST_CHECKS;
        } else if (strcmp(a, "--base-dir") == 0) {
            if (++i >= argc)
                return cli_usage("manifest ", "--base-dir needs a directory");
            opts.base_dir = argv[i];
        } else if (!is_tree && strcmp(a, "--provider") == 0) {
            if (++i >= argc)
                return cli_usage("manifest ", "--provider needs a provider's name");
            provider = argv[i];
        } else if (is_tree && strcmp(a, "--depth") == 0) {
            if (++i >= argc || parse_num(argv[i], 1000, &depth))
                return cli_usage("manifest ", "--depth needs a number from 0 to 1000");
        } else if (is_tree && strcmp(a, "--max-bytes") == 0) {
            if (++i >= argc || parse_num(argv[i], 1L << 30, &max_bytes) || max_bytes == 0)
                return cli_usage("manifest ", "--max-bytes needs a positive number");
        } else if (a[0] == '-' && a[1]) {
            return cli_usage("manifest ", "unknown option '%s'", a);
        } else if (file) {
            return cli_usage("manifest ", "more than one FILE given");
        } else {
            file = a;
        }
    }
    if (!file)
        return cli_usage("manifest ", "missing FILE");

    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    json_t *doc = NULL;
    struct sbx_buf out;
    sbx_buf_init(&out, SBX_BUF_NOLIMIT);
    size_t omitted = 0;
    int status = CLI_OK;
    int rc = sbx_manifest_load_file(file, &opts, &m, &err);
    /* What the manifest asks that the provider cannot do is refused here, not at create. */
    if (rc == 0 && !is_tree && (rc = sbx_provider_check_mounts(provider, m, &err)) < 0 &&
        rc == -SBX_E_NOTFOUND) {
        status = cli_usage("manifest ", "%s", err.msg);
        goto out;
    }
    if (rc == 0 && is_tree) {
        rc = sbx_manifest_render_tree(m, (int)depth, (size_t)max_bytes, &out, &err);
    } else if (rc == 0) {
        rc = sbx_manifest_to_json(m, 0, &doc, &omitted, &err);
        if (rc == 0)
            rc = sbx_json_dump(doc, SBX_JSON_PRETTY, &out, &err);
        if (rc == 0)
            rc = sbx_buf_addch(&out, '\n', &err);
    }
    if (rc) {
        sbx_error_prefix(&err, "manifest '%s'", file);
        status = cli_fail(&err);
        goto out;
    }
    fwrite(out.data, 1, out.len, stdout);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "sbx: cannot write the output: %s\n", strerror(errno));
        status = CLI_FAIL;
        goto out;
    }
    if (omitted)
        fprintf(stderr, "sbx: note: %zu secret value%s left out of the output\n", omitted,
                omitted == 1 ? " was" : "s were");
    if (!is_tree)
        report_mounts(m);
out:
    json_decref(doc);
    sbx_manifest_free(m);
    sbx_buf_release(&out);
    return status;
}
