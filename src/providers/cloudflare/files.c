/* Workspace files of a Cloudflare sandbox: contents through the bridge's GET and PUT
 * .../file/{path}, everything else (paths resolved in the sandbox and kept in the workspace,
 * metadata, the final move of a write) through the shared fixed script run as a command
 * (src/sandbox/shellfs/). The bridge resolves a file path lexically inside /workspace; the
 * script resolves it for real first, so a planted symlink cannot lead a transfer out. */
#include "providers/cloudflare/cloudflare.h"

static int run_cb(void *ctx, const char *const *argv, struct sbx__shell_run *out,
                  struct sbx_error *err)
{
    struct sbx__cf_session *s = ctx;
    return sbx__cf_run(s->conf, s->base.id, argv, out, err);
}

static int get_cb(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err)
{
    struct sbx__cf_session *s = ctx;
    return sbx__cf_file_get(s->conf, s->base.id, abs, fd, max, err);
}

static int put_cb(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err)
{
    struct sbx__cf_session *s = ctx;
    return sbx__cf_file_put(s->conf, s->base.id, abs, fd, size, err);
}

static const struct sbx__shellfs_ops FS_OPS = {.run = run_cb, .get = get_cb, .put = put_cb};

struct sbx__shellfs sbx__cf_fs(struct sbx__cf_session *s)
{
    return (struct sbx__shellfs){.ops = &FS_OPS, .ctx = s, .root = s->base.root};
}
