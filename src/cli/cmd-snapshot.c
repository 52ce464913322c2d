/* sbx snapshot: manage the local snapshot store (ls, inspect, rm, export, import; ls-files, cat
 * and diff are in snapshot-browse.c) and move snapshots to and from a remote one (push, pull,
 * ls --store URL). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/snapshot-remote.h"
#include "sbx/snapshot.h"

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v == 0)
        return -1;
    *out = v;
    return 0;
}

static void print_list(const json_t *list)
{
    /* CREATED is the whole RFC 3339 time with milliseconds (24 characters). */
    printf("%-19s  %-24s  %7s  %12s  %-6s  %s\n", "REF", "CREATED", "FILES", "BYTES", "HOLDS",
           "LABEL");
    size_t i;
    json_t *h;
    json_array_foreach(list, i, h)
    {
        const char *ref = json_string_value(json_object_get(h, "content_digest"));
        const char *err = json_string_value(json_object_get(h, "error"));
        if (err) {
            cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%.19s  (damaged: %s)\n", ref ? ref : "?",
                            err);
            continue;
        }
        const char *created = json_string_value(json_object_get(h, "created"));
        const char *label = json_string_value(json_object_get(h, "label"));
        /* An imported archive's header says what its label is: a listing never carries an
         * escape sequence. */
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%.19s  %-24s  %7lld  %12lld  %-6zu  %s\n",
                        ref ? ref : "?", created ? created : "",
                        (long long)json_integer_value(json_object_get(h, "files")),
                        (long long)json_integer_value(json_object_get(h, "bytes")),
                        json_array_size(json_object_get(h, "holds")), label ? label : "");
    }
}

static int do_gc(struct sbx_snapshot_store *st, int json, struct sbx_error *err)
{
    struct sbx_snapshot_gc_stats gs;
    if (sbx_snapshot_gc(st, &gs, err) < 0)
        return -1;
    if (json) {
        json_t *o = json_pack("{sIsIsIsI}", "blobs", (json_int_t)gs.blobs, "blob_bytes",
                              (json_int_t)gs.blob_bytes, "temps", (json_int_t)gs.temps,
                              "temp_bytes", (json_int_t)gs.temp_bytes);
        char *text = sbx_json_dumps(o, SBX_JSON_PRETTY | SBX_JSON_SORTED);
        puts(text);
        free(text);
        json_decref(o);
    } else {
        printf("removed %llu unused blob%s (%llu bytes) and %llu temp file%s (%llu bytes)\n",
               (unsigned long long)gs.blobs, gs.blobs == 1 ? "" : "s",
               (unsigned long long)gs.blob_bytes, (unsigned long long)gs.temps,
               gs.temps == 1 ? "" : "s", (unsigned long long)gs.temp_bytes);
    }
    return 0;
}

static int do_export(struct sbx_snapshot_store *st, const char *ref, const char *file,
                     struct sbx_error *err)
{
    if (!file || strcmp(file, "-") == 0) {
        if (isatty(STDOUT_FILENO))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "refusing to write an archive to a terminal (give FILE)");
        return sbx_snapshot_export(st, ref, STDOUT_FILENO, err);
    }
    /* A failed export leaves no half archive behind: written beside FILE, then renamed. */
    char *tmp = sbx_xasprintf("%s.sbx-export.tmp", file);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        int rc = sbx_error_errno(err, errno, "cannot create '%s'", tmp);
        free(tmp);
        return rc;
    }
    int rc = sbx_snapshot_export(st, ref, fd, err);
    if (rc == 0 && fsync(fd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync '%s'", tmp);
    close(fd);
    if (rc == 0 && rename(tmp, file) < 0)
        rc = sbx_error_errno(err, errno, "cannot rename '%s' to '%s'", tmp, file);
    if (rc < 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

static void print_transfer(const char *verb, const char *ref, const char *store,
                           const struct sbx_snapshot_transfer_stats *ts, int json)
{
    if (json) {
        json_t *o = json_pack("{sssssIsIsIsI}", "ref", ref, "store", store, "blobs",
                              (json_int_t)ts->blobs, "transferred", (json_int_t)ts->sent,
                              "transferred_bytes", (json_int_t)ts->sent_bytes, "present",
                              (json_int_t)ts->present);
        char *text = sbx_json_dumps(o, SBX_JSON_PRETTY | SBX_JSON_SORTED);
        puts(text);
        free(text);
        json_decref(o);
        return;
    }
    puts(ref);
    fprintf(stderr, "%s %.19s %s '%s': %llu of %llu blob%s %s (%llu bytes), %llu already there\n",
            verb, ref, verb[1] == 'u' && verb[2] == 's' ? "to" : "from", store,
            (unsigned long long)ts->sent, (unsigned long long)ts->blobs, ts->blobs == 1 ? "" : "s",
            verb[2] == 's' ? "uploaded" : "downloaded", (unsigned long long)ts->sent_bytes,
            (unsigned long long)ts->present);
}

static int transfer_ref(int push, const char *url, const char *ref, char **out_ref,
                        struct sbx_error *err)
{
    struct sbx_snapshot_remote *r = NULL;
    struct sbx_snapshot_store *st = NULL;
    struct sbx_snapshot_transfer_stats ts = {0};
    struct sbx_snapshot_transfer_opts o = {cli_progress_fn(), NULL, &ts};
    char *full = NULL;
    int rc = sbx_snapshot_remote_open(url, &r, err);
    if (rc == 0)
        rc = sbx_snapshot_store_open(NULL, &st, err);
    if (rc == 0)
        rc = push ? sbx_snapshot_push(st, r, ref, &full, &o, err)
                  : sbx_snapshot_pull(st, r, ref, &full, &o, err);
    if (rc == 0) {
        fprintf(stderr, "%s %.19s %s '%s': %llu of %llu blobs %s\n", push ? "pushed" : "pulled",
                full, push ? "to" : "from", sbx_snapshot_remote_name(r),
                (unsigned long long)ts.sent, (unsigned long long)ts.blobs,
                push ? "uploaded" : "downloaded");
        if (out_ref)
            *out_ref = full;
        else
            free(full);
    }
    sbx_snapshot_store_free(st);
    sbx_snapshot_remote_free(r);
    return rc;
}

int cli_snapshot_pull_ref(const char *url, const char *ref, char **out_ref, struct sbx_error *err)
{
    return transfer_ref(0, url, ref, out_ref, err);
}

int cli_snapshot_push_ref(const char *url, const char *ref, struct sbx_error *err)
{
    return transfer_ref(1, url, ref, NULL, err);
}

/* push, pull and ls against a remote store (URL); the local store is the default one. */
static int remote_cmd(const char *sub, const char *url, const char **args, int nargs, int json)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_snapshot_remote *r = NULL;
    struct sbx_snapshot_store *st = NULL;
    int status = CLI_OK;
    if (sbx_snapshot_remote_open(url, &r, &err) < 0)
        return cli_fail(&err);
    if (strcmp(sub, "ls") == 0) {
        json_t *v = NULL;
        if (sbx_snapshot_remote_list(r, &v, &err) < 0) {
            status = cli_fail(&err);
        } else if (!json) {
            print_list(v);
        } else {
            char *s = sbx_json_dumps(v, SBX_JSON_PRETTY | SBX_JSON_SORTED);
            cli_put_json(stdout, s);
            putchar('\n');
            free(s);
        }
        json_decref(v);
        sbx_snapshot_remote_free(r);
        return status;
    }
    if (sbx_snapshot_store_open(NULL, &st, &err) < 0) {
        sbx_snapshot_remote_free(r);
        return cli_fail(&err);
    }
    int push = strcmp(sub, "push") == 0;
    for (int i = 0; i < nargs; i++) {
        struct sbx_snapshot_transfer_stats ts = {0};
        struct sbx_snapshot_transfer_opts o = {cli_progress_fn(), NULL, &ts};
        char *ref = NULL;
        int rc = push ? sbx_snapshot_push(st, r, args[i], &ref, &o, &err)
                      : sbx_snapshot_pull(st, r, args[i], &ref, &o, &err);
        if (rc < 0)
            status = cli_fail(&err);
        else
            print_transfer(push ? "pushed" : "pulled", ref, sbx_snapshot_remote_name(r), &ts, json);
        free(ref);
    }
    sbx_snapshot_store_free(st);
    sbx_snapshot_remote_free(r);
    return status;
}

int cmd_snapshot(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("snapshot ", "missing subcommand (ls, inspect, rm, gc, export, import, "
                                      "ls-files, cat, diff, push, pull)");
    const char *sub = argv[1];
    /* A usage error points at the subcommand's own help when there is one. */
    char verb[32] = "snapshot ";
    static const char *const subs[] = {"ls",       "inspect", "rm",   "gc",   "export", "import",
                                       "ls-files", "cat",     "diff", "push", "pull",   NULL};
    int known = 0;
    for (size_t k = 0; subs[k]; k++)
        known |= strcmp(sub, subs[k]) == 0;
    if (known)
        snprintf(verb, sizeof(verb), "snapshot %s ", sub);
    const char *store = NULL;
    int json = 0, force = 0;
    struct sbx_snapshot_limits lim = {0};
    const char *args[64];
    int nargs = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v = 0;
        if (strcmp(a, "--store") == 0) {
            if (++i >= argc)
                return cli_usage(verb, "--store needs a directory or a URL");
            store = argv[i];
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--force") == 0 || strcmp(a, "-f") == 0) {
            force = 1;
        } else if (strcmp(a, "--max-entries") == 0 || strcmp(a, "--max-ratio") == 0) {
            if (++i >= argc || parse_u64(argv[i], &v) || (a[6] == 'r' && v > UINT32_MAX))
                return cli_usage(verb, "%s needs a positive number", a);
            if (a[6] == 'r')
                lim.max_ratio = (uint32_t)v;
            else
                lim.max_entries = v;
        } else if (strcmp(a, "--max-bytes") == 0 || strcmp(a, "--max-file-bytes") == 0) {
            if (++i >= argc || cli_parse_size(argv[i], &v) || v == 0)
                return cli_usage(verb, "%s needs a size (e.g. 512M)", a);
            if (a[6] == 'f')
                lim.max_file_bytes = v;
            else
                lim.max_bytes = v;
        } else if (a[0] == '-' && a[1]) {
            return cli_unknown_option(verb, a);
        } else if (nargs < (int)SBX_ARRAY_LEN(args)) {
            args[nargs++] = a;
        } else {
            return cli_usage(verb, "too many arguments");
        }
    }
    int is_ls = strcmp(sub, "ls") == 0, is_inspect = strcmp(sub, "inspect") == 0,
        is_rm = strcmp(sub, "rm") == 0, is_export = strcmp(sub, "export") == 0,
        is_import = strcmp(sub, "import") == 0, is_gc = strcmp(sub, "gc") == 0;
    int is_browse =
            strcmp(sub, "ls-files") == 0 || strcmp(sub, "cat") == 0 || strcmp(sub, "diff") == 0;
    if (!known)
        return cli_unknown_command(verb, sub);
    if (is_browse && (nargs < 1 || nargs > 2 || (sub[0] != 'l' && nargs != 2)))
        return cli_usage(verb, "wrong number of arguments for '%s'", sub);
    if (((is_ls || is_gc) && nargs) || ((is_inspect || is_import) && nargs != 1) ||
        (is_rm && !nargs) || (is_export && (nargs < 1 || nargs > 2)))
        return cli_usage(verb, "wrong number of arguments for '%s'", sub);

    int is_transfer = strcmp(sub, "push") == 0 || strcmp(sub, "pull") == 0;
    int remote = sbx_snapshot_remote_is_url(store);
    if (is_transfer && (!remote || !nargs))
        return cli_usage(verb, "%s needs REF... and --store URL (s3://, gs:// or azure://)", sub);
    if (remote && !is_transfer && !is_ls)
        return cli_usage(verb,
                         "'%s' works on the local store ('sbx snapshot pull REF --store URL' "
                         "first)",
                         sub);
    if (remote)
        return remote_cmd(sub, store, args, nargs, json);

    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_snapshot_store *st = NULL;
    if (sbx_snapshot_store_open(store, &st, &err) < 0)
        return cli_fail(&err);
    int status = CLI_OK;
    if (is_browse) {
        if (cli_snapshot_browse(st, sub, args, nargs, json, &err) < 0)
            status = cli_fail(&err);
    } else if (is_ls || is_inspect) {
        json_t *v = NULL;
        int rc = is_ls ? sbx_snapshot_list(st, &v, &err)
                       : sbx_snapshot_inspect(st, args[0], &v, &err);
        if (rc < 0) {
            status = cli_fail(&err);
        } else if (is_ls && !json) {
            print_list(v);
        } else {
            char *s = sbx_json_dumps(v, SBX_JSON_PRETTY | SBX_JSON_SORTED);
            cli_put_json(stdout, s);
            putchar('\n');
            free(s);
        }
        json_decref(v);
    } else if (is_rm) {
        for (int i = 0; i < nargs; i++) {
            if (sbx_snapshot_remove(st, args[i], force, &err) < 0)
                status = cli_fail(&err);
        }
    } else if (is_gc) {
        if (do_gc(st, json, &err) < 0)
            status = cli_fail(&err);
    } else if (is_export) {
        if (do_export(st, args[0], nargs > 1 ? args[1] : NULL, &err) < 0)
            status = cli_fail(&err);
    } else {
        int fd = STDIN_FILENO;
        if (strcmp(args[0], "-") != 0 && (fd = open(args[0], O_RDONLY | O_CLOEXEC)) < 0) {
            sbx_error_errno(&err, errno, "cannot open '%s'", args[0]);
            status = cli_fail(&err);
        } else {
            char *ref = NULL;
            if (sbx_snapshot_import(st, fd, &lim, &ref, &err) < 0) {
                sbx_error_prefix(&err, "'%s'", args[0]);
                status = cli_fail(&err);
            } else {
                puts(ref);
            }
            free(ref);
            if (fd != STDIN_FILENO)
                close(fd);
        }
    }
    sbx_snapshot_store_free(st);
    return status;
}
