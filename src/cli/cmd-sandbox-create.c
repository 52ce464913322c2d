/* sbx sandbox create and sbx sandbox resume: the subcommands that take a provider and its
 * options (cli/options.c). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/help.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/sandbox-run.h"
#include "sbx/session.h"
#include "sbx/snapshot-remote.h"
#include "sbx/strv.h"

#define VERB "sandbox "

enum { OPT_SNAPSHOT = 256, OPT_JSON, OPT_PASS, OPT_EXISTING, OPT_NAME, OPT_LABEL, OPT_STORE };

static const struct option create_options[] = {
        {"manifest", required_argument, NULL, 'm'},
        {"workspace", required_argument, NULL, 'w'},
        {"workspace-existing", required_argument, NULL, OPT_EXISTING},
        {"snapshot", required_argument, NULL, OPT_SNAPSHOT},
        {"store", required_argument, NULL, OPT_STORE},
        {"json", no_argument, NULL, OPT_JSON},
        {"pass-secret", required_argument, NULL, OPT_PASS},
        {"name", required_argument, NULL, OPT_NAME},
        {"label", required_argument, NULL, OPT_LABEL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
};

static const struct option resume_options[] = {
        {"manifest", required_argument, NULL, 'm'},
        {"pass-secret", required_argument, NULL, OPT_PASS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
};

struct create_args {
    const char *manifest_path;
    const char *name;  /* --name */
    const char *store; /* --store URL: --snapshot is pulled from there first */
    char *pulled;      /* the reference pulled, owned */
    json_t *labels;    /* --label K=V: {K: V}, owned */
    int json;
    struct sbx_create_spec spec;
    struct sbx_strv pass;
    struct cli_sandbox sb;
};

/* --label KEY=VALUE, or KEY alone for an empty value (as docker). */
static int add_label(struct create_args *a, const char *text)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *eq = strchr(text, '=');
    char *key = eq ? sbx_xstrndup(text, (size_t)(eq - text)) : sbx_xstrdup(text);
    json_t *one = json_object();
    sbx_json_set(one, key, sbx_json_str(eq ? eq + 1 : ""));
    int rc = sbx_sandbox_labels_check(one, &err) < 0
                     ? cli_usage(VERB "create ", "create: --label: %s", err.msg)
                     : CLI_OK;
    if (rc == CLI_OK) {
        if (!a->labels)
            a->labels = json_object();
        json_object_update(a->labels, one);
        if (sbx_sandbox_labels_check(a->labels, &err) < 0)
            rc = cli_usage(VERB "create ", "create: --label: %s", err.msg);
    }
    json_decref(one);
    free(key);
    return rc;
}

static int create_parse(struct create_args *a, int argc, char **argv)
{
    char shortopts[64];
    const struct option *longopts =
            cli_sandbox_longopts(create_options, "m:w:h", shortopts, sizeof(shortopts));
    int c, li = 0, rc = CLI_OK;
    if (cli_long_options_exact(argc, argv, shortopts, longopts, VERB "create ") != CLI_OK)
        return CLI_USAGE;
    optind = 1;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, shortopts, longopts, &li)) != -1) {
        if ((rc = cli_sandbox_getopt(&a->sb, c, optarg, VERB "create ")) != 0) {
            rc = rc == 1 ? CLI_OK : rc;
        } else if (c == 'm') {
            a->manifest_path = optarg;
        } else if (c == 'w') {
            a->spec.workspace = optarg;
        } else if (c == OPT_EXISTING) {
            if (strcmp(optarg, "keep") == 0)
                a->spec.existing = SBX_WORKSPACE_KEEP;
            else if (strcmp(optarg, "overwrite") == 0)
                a->spec.existing = SBX_WORKSPACE_OVERWRITE;
            else
                return cli_usage(VERB "create ",
                                 "create: --workspace-existing is keep or overwrite, not '%s'",
                                 optarg);
        } else if (c == OPT_SNAPSHOT) {
            a->spec.snapshot = optarg;
        } else if (c == OPT_STORE) {
            a->store = optarg;
        } else if (c == OPT_JSON) {
            a->json = 1;
        } else if (c == OPT_NAME) {
            a->name = optarg;
        } else if (c == OPT_LABEL) {
            rc = add_label(a, optarg);
        } else if (c == OPT_PASS) {
            rc = cli_pass_secret(optarg, &a->pass) == 1 ? CLI_OK : CLI_USAGE;
        } else if (c == 'h') {
            return cli_help_print_path("sandbox create");
        } else {
            return cli_usage(VERB "create ", "create: unexpected argument '%s'", argv[optind - 1]);
        }
    }
    if (rc == CLI_OK && optind < argc)
        return cli_usage(VERB "create ", "create: unexpected argument '%s'", argv[optind]);
    if (rc == CLI_OK && a->store && (!a->spec.snapshot || !sbx_snapshot_remote_is_url(a->store)))
        return cli_usage(VERB "create ",
                         "create: --store takes a URL (s3://, gs://, azure://) and goes with "
                         "--snapshot REF");
    if (rc == CLI_OK && a->spec.existing && !a->spec.workspace)
        return cli_usage(VERB "create ", "create: --workspace-existing needs --workspace DIR");
    struct sbx_error err = SBX_ERROR_INIT;
    if (rc == CLI_OK && a->name && sbx_sandbox_name_check(a->name, &err) < 0)
        return cli_usage(VERB "create ", "create: --name: %s", err.msg);
    if (rc == CLI_OK)
        rc = cli_sandbox_finish(&a->sb, NULL, VERB "create ", CLI_SANDBOX_CREATE);
    if (rc == CLI_OK && a->spec.workspace && !(a->sb.info.traits & SBX_PROVIDER_HOST_WORKSPACE))
        return cli_usage(VERB "create ",
                         "create: --workspace names a directory of this host; the workspaces "
                         "of provider '%s' are not on this host",
                         a->sb.info.name);
    return rc;
}

static int exists_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    json_t *st = NULL;
    (void)data;
    int rc = sbx_client_state(c, id, 0, &st, err);
    json_decref(st);
    return rc;
}

/* The name is free: no record has it, or the sandbox of the one that has it is gone (asking
 * for it drops such a record). */
static int name_free(const char *name, struct sbx_error *err)
{
    json_t *rec = NULL;
    struct sbx_client *c = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    if (sbx_sandbox_record_named(name, &rec, &e) < 0)
        return e.code == SBX_E_NOTFOUND ? 0 : sbx_error_copy(err, &e);
    const char *id = json_string_value(json_object_get(rec, "id"));
    int rc = cli_sandbox_by_id(id, exists_op, NULL, &c, &e);
    sbx_client_free(c);
    if (rc == 0 || e.code != SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "the name '%s' is in use by sandbox '%s'", name,
                           id);
    else
        rc = 0;
    json_decref(rec);
    return rc;
}

int cmd_sandbox_create(int argc, char **argv)
{
    struct create_args *a = sbx_xcalloc(1, sizeof(*a));
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_manifest *m = NULL;
    json_t *state = NULL;
    sbx_strv_init(&a->pass);
    cli_sandbox_init(&a->sb);
    a->spec.progress = cli_progress_fn();
    a->spec.pass_secrets = &a->pass;
    int status = create_parse(a, argc, argv), rc = 0;
    if (status != CLI_OK)
        goto out;
    if (a->manifest_path) {
        rc = sbx_manifest_load_file(a->manifest_path, NULL, &m, &err);
        if (rc < 0)
            sbx_error_prefix(&err, "manifest '%s'", a->manifest_path);
        a->spec.manifest = m;
    }
    if (rc == 0 && a->name)
        rc = name_free(a->name, &err);
    /* restore straight from a remote store: pull into the local store, then as usual */
    if (rc == 0 && a->store &&
        (rc = cli_snapshot_pull_ref(a->store, a->spec.snapshot, &a->pulled, &err)) == 0)
        a->spec.snapshot = a->pulled;
    if (rc == 0)
        rc = cli_sandbox_client(&a->sb, &c, &err);
    if (rc == 0)
        rc = sbx_client_create(c, &a->spec, &s, &err);
    /* Named or labelled: recorded whatever the provider, and a name another create took in
     * the meantime undoes this one. */
    if (rc == 0 && (a->name || a->labels) &&
        (rc = cli_record_named(&a->sb.info, sbx_session_id(s), a->sb.options, a->name, a->labels,
                               &err)) < 0) {
        (void)sbx_session_delete(s, NULL);
        sbx_session_free(s);
        s = NULL;
    }
    if (rc == 0)
        rc = sbx_session_state(s, &state, &err);
    if (rc == 0) {
        if (!a->name && !a->labels)
            cli_record(&a->sb.info, sbx_session_id(s), a->sb.options);
        if (a->name)
            sbx_json_set(state, "name", sbx_json_str(a->name));
        if (a->labels)
            sbx_json_set(state, "labels", json_incref(a->labels));
        char *text = a->json ? sbx_json_dumps(state, SBX_JSON_PRETTY) : NULL;
        printf("%s\n", text ? text : sbx_session_id(s));
        free(text);
    }
    status = rc < 0 ? cli_fail(&err) : CLI_OK;
out:
    json_decref(state);
    sbx_session_free(s);
    sbx_client_free(c);
    sbx_manifest_free(m);
    sbx_strv_release(&a->pass);
    cli_sandbox_release(&a->sb);
    json_decref(a->labels);
    free(a->pulled);
    free(a);
    return status;
}

/* ---------------------------------------------------------------------------------------------
 * resume */

struct resume_args {
    const char *manifest_path, *file;
    struct sbx_strv pass;
    struct cli_sandbox sb;
    int sdk_done; /* the file was the Agents SDK's session state, handled by resume_sdk */
};

static int resume_parse(struct resume_args *a, int argc, char **argv)
{
    char shortopts[64];
    const struct option *longopts =
            cli_sandbox_longopts(resume_options, "m:h", shortopts, sizeof(shortopts));
    int c, li = 0, rc = CLI_OK;
    if (cli_long_options_exact(argc, argv, shortopts, longopts, VERB "resume ") != CLI_OK)
        return CLI_USAGE;
    optind = 1;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, shortopts, longopts, &li)) != -1) {
        if ((rc = cli_sandbox_getopt(&a->sb, c, optarg, VERB "resume ")) != 0)
            rc = rc == 1 ? CLI_OK : rc;
        else if (c == 'm')
            a->manifest_path = optarg;
        else if (c == OPT_PASS)
            rc = cli_pass_secret(optarg, &a->pass) == 1 ? CLI_OK : CLI_USAGE;
        else if (c == 'h')
            return cli_help_print_path("sandbox resume");
        else
            return cli_usage(VERB "resume ", "resume: unexpected argument '%s'", argv[optind - 1]);
    }
    if (rc == CLI_OK && optind + 1 < argc)
        return cli_usage(VERB "resume ", "resume: unexpected argument '%s'", argv[optind + 1]);
    if (rc == CLI_OK && optind >= argc)
        return cli_usage(VERB "resume ", "resume: missing state FILE");
    a->file = argv[optind];
    return rc;
}

static int read_state(const char *file, json_t **out, struct sbx_error *err)
{
    struct sbx_buf text;
    sbx_buf_init(&text, SBX_SESSION_STATE_MAX + 1);
    int fd = strcmp(file, "-") == 0 ? dup(0) : open(file, O_RDONLY | O_CLOEXEC);
    int rc = fd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", file)
                    : sbx_fd_read_all(fd, SBX_SESSION_STATE_MAX, &text, err);
    if (fd >= 0)
        close(fd);
    if (rc == 0)
        rc = sbx_session_state_parse(text.data, text.len, out, err);
    if (rc < 0)
        sbx_error_prefix(err, "'%s'", file);
    sbx_buf_release(&text);
    return rc;
}

/* A client of the state's provider: what reaches its sandboxes (the id's record, else what
 * the provider finds here) under the command line's options, which are the trusted
 * configuration a state cannot grant by itself. */
static int resume_client(struct resume_args *a, const json_t *state, struct sbx_client **out,
                         struct sbx_error *err)
{
    const char *sp = json_string_value(json_object_get(state, "provider"));
    const char *id = json_string_value(json_object_get(state, "id"));
    json_t *rec = NULL, *base = NULL;
    if (a->sb.provider && strcmp(a->sb.provider, sp) != 0)
        return cli_usage(VERB "resume ", "the state is of provider '%s', not --provider %s", sp,
                         a->sb.provider);
    a->sb.provider = sp;
    int rc = cli_sandbox_finish(&a->sb, NULL, VERB "resume ", 0);
    if (rc != CLI_OK)
        return rc;
    if (sbx_sandbox_record_read(id, &rec, NULL) == 0 &&
        strcmp(json_string_value(json_object_get(rec, "provider")), sp) == 0)
        base = json_incref(json_object_get(rec, "options"));
    else if (sbx_provider_probe(sp, &base, NULL) < 0)
        base = json_object();
    json_object_update(base, a->sb.options);
    rc = sbx_client_new_json(sp, base, out, err) < 0 ? CLI_FAIL : CLI_OK;
    json_decref(a->sb.options);
    a->sb.options = base;
    json_decref(rec);
    return rc;
}

/* The SDK's session state doc as a fresh local sbx sandbox; prints its id. */
static int resume_sdk(struct resume_args *a, const json_t *doc)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    a->sdk_done = 1;
    if (a->sb.provider && strcmp(a->sb.provider, "local") != 0)
        return cli_usage(VERB "resume ",
                         "an Agents SDK session state is made again as a local "
                         "sandbox, not --provider %s",
                         a->sb.provider);
    if (sbx_sandbox_from_sdk_session(NULL, doc, &st, &err) < 0) {
        sbx_error_prefix(&err, "'%s'", a->file);
        return cli_fail(&err);
    }
    printf("%s\n", json_string_value(json_object_get(st, "id")));
    json_decref(st);
    return CLI_OK;
}

int cmd_sandbox_resume(int argc, char **argv)
{
    struct resume_args *a = sbx_xcalloc(1, sizeof(*a));
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_manifest *m = NULL;
    json_t *state = NULL;
    sbx_strv_init(&a->pass);
    cli_sandbox_init(&a->sb);
    int status = resume_parse(a, argc, argv);
    if (status == CLI_OK && strcmp(a->file, "-") != 0) {
        /* A SandboxSessionState of the Agents SDK: made again as an sbx sandbox. */
        json_t *doc = NULL;
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_SESSION_STATE_MAX);
        if (sbx_fs_read_path(a->file, SBX_SESSION_STATE_MAX, &b, NULL) == 0 &&
            sbx_json_parse(b.data, b.len, NULL, &doc, NULL) == 0 && sbx_sandbox_is_sdk_session(doc))
            status = resume_sdk(a, doc);
        sbx_buf_release(&b);
        json_decref(doc);
        if (status != CLI_OK || a->sdk_done) {
            sbx_strv_release(&a->pass);
            cli_sandbox_release(&a->sb);
            free(a);
            return status;
        }
    }
    if (status == CLI_OK && read_state(a->file, &state, &err) < 0)
        status = CLI_FAIL;
    if (status == CLI_OK && cli_trusted_manifest(a->manifest_path, &m, &err) < 0)
        status = CLI_FAIL;
    if (status == CLI_OK)
        status = resume_client(a, state, &c, &err);
    struct sbx_resume_opts ro = {
            .pass_secrets = &a->pass, .manifest = m, .progress = cli_progress_fn()};
    if (status == CLI_OK && sbx_client_resume_with(c, state, &ro, &s, &err) < 0)
        status = CLI_FAIL;
    if (status == CLI_OK) {
        cli_record(&a->sb.info, sbx_session_id(s), a->sb.options);
        printf("%s\n", sbx_session_id(s));
    }
    if (status == CLI_FAIL && err.code != SBX_OK)
        cli_fail(&err);
    sbx_session_free(s);
    sbx_client_free(c);
    sbx_manifest_free(m);
    json_decref(state);
    sbx_strv_release(&a->pass);
    cli_sandbox_release(&a->sb);
    free(a);
    return status;
}
