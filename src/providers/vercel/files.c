/* Workspace files and snapshots of a Vercel sandbox: contents through the service's fs/read
 * (down) and fs/write (up, one member of a tar.gz), everything else through the shared fixed
 * script run as a command (src/sandbox/shellfs/: paths resolved in the sandbox and kept in the
 * workspace, snapshots as tar streams). */
#include "providers/vercel/vercel.h"

static int run_cb(void *ctx, const char *const *argv, struct sbx__shell_run *out,
                  struct sbx_error *err)
{
    return sbx__vercel_run(ctx, argv, out, err);
}

static int get_cb(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err)
{
    return sbx__vercel_file_get(ctx, abs, fd, max, err);
}

static int put_cb(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err)
{
    return sbx__vercel_file_put(ctx, abs, fd, size, err);
}

static const struct sbx__shellfs_ops FS_OPS = {.run = run_cb, .get = get_cb, .put = put_cb};

struct sbx__shellfs sbx__vercel_fs(struct sbx__vercel_session *s)
{
    return (struct sbx__shellfs){
            .ops = &FS_OPS, .ctx = &s->t, .root = s->base.root, .copy = &s->ws};
}
