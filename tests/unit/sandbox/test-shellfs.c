/* The hosted providers' shared file code (src/sandbox/shellfs/) against this machine: run is a
 * local /bin/sh, get and put copy files, so the fixed script's answers, its refusal of paths
 * that lead out of the workspace, the staged writes and the one-user accounts check are
 * tested without any service. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/spawn.h"
#include "rmtree.h"
#include "sandbox/shellfs/shellfs.h"
#include "sbx/fs.h"
#include "sbx/manifest.h"
#include "tap.h"

static int run_cb(void *ctx, const char *const *argv, struct sbx__shell_run *out,
                  struct sbx_error *err)
{
    (void)ctx;
    struct sbx__spawn_capture cap = {.out = &out->out, .err = &out->err};
    struct sbx__spawn sp = {.program = argv[0], .argv = argv};
    sp.out.how = sp.err.how = SBX__SPAWN_PIPE;
    int rc = sbx__spawn_run(&sp, 30000, &cap, err);
    if (rc == 0)
        out->code = WIFEXITED(cap.status) ? WEXITSTATUS(cap.status) : 128 + WTERMSIG(cap.status);
    return rc;
}

static int copy(int from, int to, uint64_t max, struct sbx_error *err)
{
    char buf[4096];
    uint64_t total = 0;
    ssize_t n;
    while ((n = read(from, buf, sizeof(buf))) > 0) {
        if ((total += (uint64_t)n) > max)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "over %llu bytes", (unsigned long long)max);
        if (sbx_fd_write_all(to, buf, (size_t)n, err) < 0)
            return -SBX_E_IO;
    }
    return n < 0 ? sbx_error_errno(err, errno, "read") : 0;
}

static int get_cb(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err)
{
    (void)ctx;
    int in = open(abs, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return sbx_error_errno(err, errno, "open '%s'", abs);
    int rc = copy(in, fd, max, err);
    close(in);
    return rc;
}

static int put_cb(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err)
{
    (void)ctx;
    (void)size;
    int out = open(abs, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        return sbx_error_errno(err, errno, "open '%s'", abs);
    int rc = copy(fd, out, UINT64_MAX, err);
    close(out);
    return rc;
}

static const struct sbx__shellfs_ops OPS = {.run = run_cb, .get = get_cb, .put = put_cb};

struct mem {
    const char *p;
    size_t left;
};

static long mem_read(void *ctx, void *buf, size_t n, struct sbx_error *err)
{
    (void)err;
    struct mem *m = ctx;
    size_t k = n < m->left ? n : m->left;
    memcpy(buf, m->p, k);
    m->p += k;
    m->left -= k;
    return (long)k;
}

static int put_text(const struct sbx__shellfs *fs, const char *path, const char *text, int flags,
                    struct sbx_error *err)
{
    struct mem m = {text, strlen(text)};
    struct sbx_file_reader r = {.read = mem_read, .ctx = &m};
    return sbx__shellfs_write(fs, path, &r, 1 << 20, 0640, flags, err);
}

static char *get_text(const struct sbx__shellfs *fs, const char *path, struct sbx_error *err)
{
    int fd = -1;
    uint64_t size = 0;
    if (sbx__shellfs_read_open(fs, path, &fd, &size, err) < 0)
        return NULL;
    char *t = calloc(1, (size_t)size + 1);
    if (read(fd, t, (size_t)size) != (ssize_t)size) {
        free(t);
        t = NULL;
    }
    close(fd);
    return t;
}

static void test_files(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char tmp[] = "/tmp/sbx-test-shellfs-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char *root = sbx_xasprintf("%s/ws", tmp), *outside = sbx_xasprintf("%s/secret", tmp);
    CHECK(mkdir(root, 0700) == 0);
    int fd = open(outside, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write(fd, "host", 4) == 4);
    close(fd);
    struct sbx__shellfs fs = {.ops = &OPS, .root = root};

    CHECK_OK(put_text(&fs, "a/b/c.txt", "hello", SBX_WRITE_PARENTS, &err), &err);
    char *t = get_text(&fs, "a/b/c.txt", &err);
    CHECK_EQ_STR(t ? t : "", "hello");
    free(t);
    CHECK_ERR(put_text(&fs, "a/b/c.txt", "x", SBX_WRITE_EXCL, &err), SBX_E_EXISTS, &err, "exists");
    CHECK_OK(put_text(&fs, "a/b/c.txt", " world", SBX_WRITE_APPEND, &err), &err);
    t = get_text(&fs, "a/b/c.txt", &err);
    CHECK_EQ_STR(t ? t : "", "hello world");
    free(t);
    CHECK_ERR(put_text(&fs, "no/parent.txt", "x", 0, &err), SBX_E_NOTFOUND, &err, "no parent");

    struct sbx_dirent d = {0};
    CHECK_OK(sbx__shellfs_stat(&fs, "a/b/c.txt", &d, &err), &err);
    CHECK_EQ_INT(d.type, SBX_FILE_REGULAR);
    CHECK_EQ_INT(d.mode, 0640);
    CHECK_EQ_INT((int)d.size, 11);
    CHECK_EQ_STR(d.name, "c.txt");
    sbx_dirent_release(&d);
    CHECK_OK(sbx__shellfs_chmod(&fs, "a/b/c.txt", 0600, &err), &err);
    CHECK_OK(sbx__shellfs_mkdir(&fs, "a/d", 0, &err), &err);
    CHECK_ERR(sbx__shellfs_mkdir(&fs, "a/d", 0, &err), SBX_E_EXISTS, &err, "exists");
    struct sbx_dirlist l = {0};
    CHECK_OK(sbx__shellfs_ls(&fs, "a", &l, &err), &err);
    CHECK_EQ_INT((int)l.n, 2);
    if (l.n == 2) {
        CHECK_EQ_STR(l.v[0].name, "b");
        CHECK_EQ_STR(l.v[1].name, "d");
        CHECK_EQ_INT(l.v[1].type, SBX_FILE_DIR);
    }
    sbx_dirlist_release(&l);
    CHECK_ERR(sbx__shellfs_rm(&fs, "a", 0, &err), SBX_E_INVAL, &err, "not empty");
    CHECK_OK(sbx__shellfs_rm(&fs, "a", SBX_RM_RECURSIVE, &err), &err);
    CHECK_ERR(sbx__shellfs_stat(&fs, "a", &d, &err), SBX_E_NOTFOUND, &err, "no such file");

    /* A planted symlink leads out of the workspace: refused, the host file untouched. */
    char *link = sbx_xasprintf("%s/out", root);
    CHECK(symlink(tmp, link) == 0);
    CHECK_ERR(put_text(&fs, "out/secret", "pwned", 0, &err), SBX_E_PERM, &err,
              "leads out of the workspace");
    CHECK_ERR(get_text(&fs, "out/secret", &err) ? 0 : -err.code, SBX_E_PERM, &err,
              "leads out of the workspace");
    CHECK_ERR(sbx__shellfs_ls(&fs, "out", &l, &err), SBX_E_PERM, &err, "leads out");
    CHECK_OK(sbx__shellfs_stat(&fs, "out", &d, &err), &err);
    CHECK_EQ_INT(d.type, SBX_FILE_SYMLINK);
    sbx_dirent_release(&d);
    char buf[8] = {0};
    fd = open(outside, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) == 4);
    close(fd);
    CHECK_EQ_STR(buf, "host");
    /* No staged file is left in the workspace. */
    CHECK_OK(sbx__shellfs_ls(&fs, "", &l, &err), &err);
    CHECK_EQ_INT((int)l.n, 1);
    sbx_dirlist_release(&l);

    free(link);
    rm_tree(tmp);
    free(root);
    free(outside);
}

/* The listing records (sbx__shellfs_parse_entries), shared with the docker, kubernetes and lxd
 * providers: a '/' in a name is "garbled" for the FS script and "names a path" for theirs. */
static void test_entries(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    static const char good[] = "81a4 3 0 0 1\nb\0a1ff 1 0 0 1\na\0t\0";
    struct sbx_dirlist l = {0};
    CHECK_OK(sbx__shellfs_parse_entries(good, sizeof(good) - 1, 0, &l, &err), &err);
    sbx__shellfs_sort_entries(&l);
    CHECK(l.n == 2 && strcmp(l.v[0].name, "a") == 0 && l.v[0].type == SBX_FILE_SYMLINK &&
          strcmp(l.v[0].target, "t") == 0 && strcmp(l.v[1].name, "b") == 0 && l.v[1].size == 3);
    sbx_dirlist_release(&l);
    static const char slash[] = "81a4 1 0 0 1\na/b\0";
    CHECK_ERR(sbx__shellfs_parse_entries(slash, sizeof(slash) - 1, 0, &l, &err), SBX_E_PARSE, &err,
              "a directory listing is garbled");
    sbx_dirlist_release(&l);
    CHECK_ERR(sbx__shellfs_parse_entries(slash, sizeof(slash) - 1, 1, &l, &err), SBX_E_PARSE, &err,
              "a directory listing names a path");
    sbx_dirlist_release(&l);
}

static void test_accounts(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    static const char one[] = "{\"version\":1,\"users\":[{\"name\":\"user\"}]}";
    static const char other[] = "{\"version\":1,\"users\":[{\"name\":\"alice\"}]}";
    static const char group[] = "{\"version\":1,\"groups\":[{\"name\":\"devs\"}]}";
    struct sbx_manifest_load_opts lo = {.base_dir = "/"};
    CHECK_OK(sbx__shellfs_check_accounts(NULL, "an e2b sandbox", "user", &err), &err);
    json_t *j = json_loads(one, 0, NULL);
    CHECK_OK(sbx_manifest_from_json(j, &lo, &m, &err), &err);
    json_decref(j);
    CHECK_OK(sbx__shellfs_check_accounts(m, "an e2b sandbox", "user", &err), &err);
    CHECK_ERR(sbx__shellfs_check_accounts(m, "a cloudflare sandbox", NULL, &err), SBX_E_UNSUPPORTED,
              &err, "manifest user 'user': a cloudflare sandbox runs everything as one user");
    sbx_manifest_free(m);
    j = json_loads(other, 0, NULL);
    CHECK_OK(sbx_manifest_from_json(j, &lo, &m, &err), &err);
    json_decref(j);
    CHECK_ERR(sbx__shellfs_check_accounts(m, "an e2b sandbox", "user", &err), SBX_E_UNSUPPORTED,
              &err,
              "manifest user 'alice': an e2b sandbox has its user 'user' and makes no others");
    sbx_manifest_free(m);
    j = json_loads(group, 0, NULL);
    CHECK_OK(sbx_manifest_from_json(j, &lo, &m, &err), &err);
    json_decref(j);
    CHECK_ERR(sbx__shellfs_check_accounts(m, "a vercel sandbox", "vercel-sandbox", &err),
              SBX_E_UNSUPPORTED, &err, "manifest groups: a vercel sandbox makes no groups");
    sbx_manifest_free(m);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_files);
    TAP_RUN(test_accounts);
    TAP_RUN(test_entries);
    return TAP_DONE();
}
