/* The filesystem capability: apply_patch (three wire forms, one handler) and view_image, both
 * working through the session's file operations. */
#include <errno.h>
#include <string.h>

#include "capability/capability-internal.h"
#include "sbx/image.h"
#include "sbx/json.h"
#include "sbx/patch.h"
#include "sbx/path.h"

struct filesystem {
    enum sbx_patch_transport transport;
};

struct fs_tool {
    struct sbx_session *session; /* borrowed: lives as long as the run's agent environment */
};

/* ---- a patch file provider over a session ---------------------------------------------------- */

static int sess_read(struct sbx_patch_fs *fs, const char *path, size_t max, struct sbx_buf *out,
                     unsigned *mode, struct sbx_error *err)
{
    struct sbx_session *s = fs->ctx;
    struct sbx_dirent d = {0};
    int rc = sbx_session_stat(s, path, &d, err);
    if (rc < 0)
        return rc;
    if (d.type == SBX_FILE_SYMLINK)
        rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symbolic link", path);
    else if (d.type != SBX_FILE_REGULAR)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
    else if (d.size > max)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is larger than %zu bytes", path, max);
    else if ((rc = sbx_session_read(s, path, max, out, err)) == 0)
        *mode = d.mode & 07777;
    sbx_dirent_release(&d);
    return rc;
}

static int sess_exists(struct sbx_patch_fs *fs, const char *path, enum sbx_patch_file_kind *kind,
                       struct sbx_error *err)
{
    struct sbx_dirent d = {0};
    struct sbx_error e = SBX_ERROR_INIT;
    int rc = sbx_session_stat(fs->ctx, path, &d, &e);
    /* A parent that is missing or not a directory: nothing there, as for a missing file. */
    if (rc < 0 && (e.code == SBX_E_NOTFOUND || e.sys_errno == ENOTDIR || e.sys_errno == ENOENT)) {
        *kind = SBX_PATCH_FILE_NONE;
        return 0;
    }
    if (rc < 0)
        return sbx_error_copy(err, &e);
    switch (d.type) {
    case SBX_FILE_REGULAR:
        *kind = SBX_PATCH_FILE_REGULAR;
        break;
    case SBX_FILE_DIR:
        *kind = SBX_PATCH_FILE_DIR;
        break;
    case SBX_FILE_SYMLINK:
        *kind = SBX_PATCH_FILE_SYMLINK;
        break;
    case SBX_FILE_OTHER:
        *kind = SBX_PATCH_FILE_OTHER;
        break;
    }
    sbx_dirent_release(&d);
    return 0;
}

struct saved {
    int existed;
    unsigned mode;
    struct sbx_buf data;
};

/* Undo changes[0..n) from the saved originals, last first. Returns how many could not be. */
static size_t roll_back(struct sbx_session *s, const struct sbx_patch_change *changes,
                        struct saved *old, size_t n)
{
    size_t failed = 0;
    while (n-- > 0) {
        int rc = old[n].existed ? sbx_session_write(s, changes[n].path, old[n].data.data,
                                                    old[n].data.len, old[n].mode, 0, NULL)
                                : sbx_session_rm(s, changes[n].path, SBX_RM_FORCE, NULL);
        failed += rc < 0;
    }
    return failed;
}

/* Each file write through the session is atomic; across files, the originals are kept in memory
 * and written back if a later change fails, so the patch lands whole or not at all. */
static int sess_commit(struct sbx_patch_fs *fs, const struct sbx_patch_change *changes, size_t n,
                       struct sbx_error *err)
{
    struct sbx_session *s = fs->ctx;
    struct saved *old = sbx_xcalloc(n ? n : 1, sizeof(*old));
    size_t i, done = 0;
    int rc = 0;
    for (i = 0; i < n; i++) {
        sbx_buf_init(&old[i].data, SBX_PATCH_DEFAULT_MAX_FILE_BYTES);
        struct sbx_dirent d = {0};
        if (sbx_session_stat(s, changes[i].path, &d, NULL) == 0) {
            if (d.type == SBX_FILE_REGULAR) {
                old[i].existed = 1;
                old[i].mode = d.mode & 07777;
                rc = sbx_session_read(s, changes[i].path, SBX_PATCH_DEFAULT_MAX_FILE_BYTES,
                                      &old[i].data, err);
            }
            sbx_dirent_release(&d);
            if (rc < 0)
                goto out;
        }
    }
    for (done = 0; done < n; done++) {
        const struct sbx_patch_change *c = &changes[done];
        if (c->data) {
            unsigned mode = c->mode ? c->mode : old[done].existed ? old[done].mode : 0644;
            rc = sbx_session_write(s, c->path, c->data, c->len, mode, SBX_WRITE_PARENTS, err);
        } else {
            rc = sbx_session_rm(s, c->path, 0, err);
        }
        if (rc < 0) {
            size_t left = roll_back(s, changes, old, done);
            if (left)
                sbx_error_prefix(err, "%zu earlier changes could not be rolled back", left);
            else
                sbx_error_prefix(err, "nothing was changed");
            goto out;
        }
    }
out:
    for (i = 0; i < n; i++)
        sbx_buf_release(&old[i].data);
    free(old);
    return rc;
}

static const struct sbx_patch_fs_ops session_fs_ops = {
        .read = sess_read,
        .exists = sess_exists,
        .commit = sess_commit,
};

/* Apply a patch given as text (V4A, or JSON operations) or as a JSON value; append the summary
 * to out. */
static int apply(struct sbx_session *s, const char *text, size_t len, const json_t *ops,
                 struct sbx_buf *out, struct sbx_error *err)
{
    struct sbx_patch *p = NULL;
    struct sbx_patch_result res = {0};
    struct sbx_patch_options opts = {.root = sbx_session_root(s)};
    struct sbx_patch_fs fs = {.ops = &session_fs_ops, .ctx = s, .dirfd = -1};
    int rc = ops ? sbx_patch_from_json(ops, &opts, &p, err)
                 : sbx_patch_parse(text, len, &opts, &p, err);
    if (rc < 0)
        return rc;
    rc = sbx_patch_apply(p, &fs, &opts, &res, err);
    if (rc == 0) {
        rc = sbx_buf_adds(out, res.summary, err);
        if (rc == 0 && res.fuzzy_hunks)
            rc = sbx_buf_addf(out, err,
                              "\n(%zu hunk%s matched only after ignoring whitespace or "
                              "punctuation; check the result)",
                              res.fuzzy_hunks, res.fuzzy_hunks == 1 ? "" : "s");
        sbx_patch_result_release(&res);
    }
    sbx_patch_free(p);
    return rc;
}

static int patch_custom(const json_t *args, const struct sbx_tool_call *call,
                        struct sbx_tool_output *out, struct sbx_error *err)
{
    struct fs_tool *ft = call->data;
    return apply(ft->session, json_string_value(args), json_string_length(args), NULL, &out->text,
                 err);
}

static int patch_function(const json_t *args, const struct sbx_tool_call *call,
                          struct sbx_tool_output *out, struct sbx_error *err)
{
    struct fs_tool *ft = call->data;
    const json_t *in = json_object_get(args, "input");
    return apply(ft->session, json_string_value(in), json_string_length(in), NULL, &out->text, err);
}

static int patch_item(const struct sbx_tool_call *call, json_t **output_item, struct sbx_error *err)
{
    struct fs_tool *ft = call->data;
    struct sbx_buf text;
    sbx_buf_init(&text, SBX_TOOL_OUTPUT_MAX);
    int rc = apply(ft->session, NULL, 0, call->item, &text, err);
    if (rc == 0)
        *output_item = json_pack("{s:s, s:s, s:s, s:s%}", "type", "apply_patch_call_output",
                                 "call_id", call->call_id ? call->call_id : "", "status",
                                 "completed", "output", text.data, text.len);
    sbx_buf_release(&text);
    return rc;
}

static const char patch_description[] =
        "Edits workspace files with a patch in the V4A format. The patch starts with "
        "'*** Begin Patch' and ends with '*** End Patch'; in between, one section per file:\n"
        "*** Add File: <path>      then the new file's lines, each prefixed with '+'\n"
        "*** Delete File: <path>\n"
        "*** Update File: <path>   optionally followed by '*** Move to: <new path>', then hunks\n"
        "A hunk starts with '@@' (optionally '@@ <a line such as a class or function header "
        "that comes before the change>') and lists lines prefixed with ' ' (unchanged "
        "context), '-' (removed) or '+' (added). Give about 3 lines of context before and "
        "after each change so it can be found. Paths are relative to the workspace root. The "
        "whole patch is applied or, if any part does not match, nothing is changed.\n"
        "Example:\n"
        "*** Begin Patch\n"
        "*** Update File: src/app.py\n"
        "@@ def greet(name):\n"
        "-    return 'hi ' + name\n"
        "+    return f'Hello, {name}!'\n"
        "*** End Patch";

/* The patch language as a Lark grammar, for the custom tool's constrained sampling. */
static const char patch_grammar[] =
        "start: begin_patch hunk+ end_patch\n"
        "begin_patch: \"*** Begin Patch\" LF\n"
        "end_patch: \"*** End Patch\" LF?\n"
        "\n"
        "hunk: add_hunk | delete_hunk | update_hunk\n"
        "add_hunk: \"*** Add File: \" filename LF add_line+\n"
        "delete_hunk: \"*** Delete File: \" filename LF\n"
        "update_hunk: \"*** Update File: \" filename LF change_move? change\n"
        "\n"
        "filename: /(.+)/\n"
        "add_line: \"+\" /(.*)/ LF -> line\n"
        "\n"
        "change_move: \"*** Move to: \" filename LF\n"
        "change: (change_context | change_line)+ eof_line?\n"
        "change_context: (\"@@\" | \"@@ \" /(.+)/) LF\n"
        "change_line: (\"+\" | \"-\" | \" \") /(.*)/ LF\n"
        "eof_line: \"*** End of File\" LF\n"
        "\n"
        "%import common.LF\n";

/* ---- view_image ------------------------------------------------------------------------------ */

static const char image_schema[] =
        "{\"type\":\"object\",\"required\":[\"path\"],\"properties\":{\"path\":{\"type\":"
        "\"string\",\"minLength\":1,\"description\":\"Path of the image file, relative to the "
        "workspace root (or absolute under it).\"}}}";

static int view_image(const json_t *args, const struct sbx_tool_call *call,
                      struct sbx_tool_output *out, struct sbx_error *err)
{
    struct fs_tool *ft = call->data;
    struct sbx_session *s = ft->session;
    const char *label = json_string_value(json_object_get(args, "path"));
    char *path = NULL;
    struct sbx_dirent d = {0};
    struct sbx_buf data, url;
    sbx_buf_init(&data, SBX_IMAGE_MAX_BYTES);
    sbx_buf_init(&url, SBX_TOOL_OUTPUT_MAX * 4);
    int rc = sbx_path_normalize(label, strlen(label), SBX_PATH_ALLOW_ABSOLUTE, sbx_session_root(s),
                                &path, err);
    if (rc < 0)
        goto out;
    rc = sbx_session_stat(s, path, &d, err);
    if (rc == -SBX_E_NOTFOUND) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "image '%s' was not found", label);
        goto out;
    }
    if (rc < 0)
        goto out;
    if (d.type != SBX_FILE_REGULAR) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "image '%s' is not a regular file", label);
        goto out;
    }
    if (d.size > SBX_IMAGE_MAX_BYTES) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "image '%s' is larger than the allowed 10MB (%.1fMB); resize or "
                           "compress the image and try again",
                           label, (double)d.size / (1024.0 * 1024.0));
        goto out;
    }
    if ((rc = sbx_session_read(s, path, SBX_IMAGE_MAX_BYTES, &data, err)) < 0 ||
        (rc = sbx_image_data_url(data.data, data.len, label, &url, NULL, err)) < 0)
        goto out;
    out->parts = json_pack("[{s:s, s:s%}]", "type", "input_image", "image_url", url.data, url.len);
out:
    sbx_dirent_release(&d);
    sbx_buf_release(&data);
    sbx_buf_release(&url);
    free(path);
    return rc;
}

/* ---- the capability -------------------------------------------------------------------------- */

static struct fs_tool *bound(struct sbx_session *s)
{
    struct fs_tool *ft = sbx_xcalloc(1, sizeof(*ft));
    ft->session = s;
    return ft;
}

static int add(struct sbx_toolset *out, int rc, struct sbx_tool *t, int offered)
{
    if (rc == 0) {
        sbx_toolset_add(out, t, offered);
        sbx_tool_unref(t);
    }
    return rc;
}

static int fs_tools(struct sbx_capability *c, const struct sbx_capability_env *env,
                    struct sbx_toolset *out, struct sbx_error *err)
{
    const struct filesystem *cfg = sbx_capability_data(c);
    enum sbx_patch_transport tr = cfg->transport;
    struct sbx_tool *t = NULL;
    int rc;
    /* The Python SDK's Filesystem capability offers the custom (freeform) tool with the Lark
     * grammar; Chat Completions has no custom tools, so there it is the function tool. */
    if (tr == SBX_PATCH_TRANSPORT_AUTO)
        tr = env->api == SBX_MODEL_API_CHAT ? SBX_PATCH_TRANSPORT_FUNCTION
                                            : SBX_PATCH_TRANSPORT_CUSTOM;

    json_t *def = json_pack("{s:s}", "type", "apply_patch");
    struct sbx_item_tool item = {
            .name = "apply_patch",
            .item_type = "apply_patch_call",
            .definition = def,
            .fn = patch_item,
            .data = bound(env->session),
            .free_data = free,
    };
    rc = sbx_tool_new_item(&item, &t, err);
    rc = add(out, rc, t, tr == SBX_PATCH_TRANSPORT_BUILTIN);
    json_decref(def);
    if (rc < 0)
        return rc;

    json_t *fmt = json_pack("{s:s, s:s, s:s}", "type", "grammar", "syntax", "lark", "definition",
                            patch_grammar);
    struct sbx_custom_tool custom = {
            .name = "apply_patch",
            .description = patch_description,
            .format = fmt,
            .fn = patch_custom,
            .data = bound(env->session),
            .free_data = free,
    };
    rc = sbx_tool_new_custom(&custom, &t, err);
    rc = add(out, rc, t, tr == SBX_PATCH_TRANSPORT_CUSTOM);
    json_decref(fmt);
    if (rc < 0)
        return rc;

    json_t *params = json_pack("{s:s, s:{s:{s:s, s:s}}, s:[s]}", "type", "object", "properties",
                               "input", "type", "string", "description",
                               "The whole patch, from '*** Begin Patch' to '*** End Patch'.",
                               "required", "input");
    struct sbx_function_tool fn = {
            .name = "apply_patch",
            .description = patch_description,
            .parameters = params,
            .strict = 1,
            .fn = patch_function,
            .data = bound(env->session),
            .free_data = free,
    };
    rc = sbx_tool_new_function(&fn, &t, err);
    rc = add(out, rc, t, tr == SBX_PATCH_TRANSPORT_FUNCTION);
    json_decref(params);
    if (rc < 0)
        return rc;

    params = json_loads(image_schema, 0, NULL);
    if (!params)
        SBX_BUG("view_image schema does not parse");
    struct sbx_function_tool img = {
            .name = "view_image",
            .description = "Shows you an image file from the workspace (PNG, JPEG, GIF or "
                           "WebP, at most 10MB).",
            .parameters = params,
            .strict = 1,
            .fn = view_image,
            .data = bound(env->session),
            .free_data = free,
    };
    rc = sbx_tool_new_function(&img, &t, err);
    rc = add(out, rc, t, 1);
    json_decref(params);
    return rc;
}

static const struct sbx_capability_ops filesystem_ops = {
        .tools = fs_tools,
        .free_data = free,
};

int sbx__capability_filesystem(const json_t *spec, struct sbx_capability **out,
                               struct sbx_error *err)
{
    static const char *const keys[] = {"type", "apply_patch", NULL};
    static const char *const names[] = {"auto", "builtin", "custom", "function"};
    const char *tr = NULL;
    int rc;
    if (spec && ((rc = sbx_json_check_keys(spec, keys, err)) < 0 ||
                 (rc = sbx_json_get_string(spec, "apply_patch", 0, &tr, err)) < 0))
        return rc;
    struct filesystem *fs = sbx_xcalloc(1, sizeof(*fs));
    if (tr) {
        size_t i;
        for (i = 0; i < SBX_ARRAY_LEN(names); i++)
            if (strcmp(names[i], tr) == 0)
                break;
        if (i == SBX_ARRAY_LEN(names)) {
            free(fs);
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "apply_patch must be 'auto', 'builtin', 'custom' or "
                                 "'function', not '%s'",
                                 tr);
        }
        fs->transport = (enum sbx_patch_transport)i;
    }
    return sbx_capability_new("filesystem", &filesystem_ops, fs, out, err);
}
