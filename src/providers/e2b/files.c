/* Workspace files and snapshots of an E2B sandbox: contents through envd's /files (identity
 * encoding down, octet-stream up), everything else through the shared fixed script run as a
 * command (src/sandbox/shellfs/: paths resolved in the sandbox and kept in the workspace,
 * snapshots as tar streams). */
#include "providers/e2b/e2b.h"

static int run_cb(void *ctx, const char *const *argv, struct sbx__shell_run *out,
                  struct sbx_error *err)
{
    return sbx__e2b_exec_run(ctx, argv, out, err);
}

static int get_cb(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err)
{
    return sbx__e2b_file_get(ctx, abs, fd, max, err);
}

static int put_cb(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err)
{
    return sbx__e2b_file_put(ctx, abs, fd, size, err);
}

static const struct sbx__shellfs_ops FS_OPS = {.run = run_cb, .get = get_cb, .put = put_cb};

struct sbx__shellfs sbx__e2b_fs(struct sbx__e2b_session *s)
{
    return (struct sbx__shellfs){
            .ops = &FS_OPS, .ctx = &s->envd, .root = s->base.root, .copy = &s->ws};
}

#define E2B_FS(bs) sbx__e2b_fs((struct sbx__e2b_session *)(bs))
