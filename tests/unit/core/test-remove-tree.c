/* The one host tree remover (sbx__fs_remove_tree, on sbx_fs_remove): a hostile tree — links to
 * outside, directories without permissions, deep nesting, a mount inside — is removed without
 * following a link or entering a mount, and nothing outside it is touched. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "core/fs-internal.h"
#include "sbx/fs.h"

#define DEEP 300 /* deeper than sbx_fs_remove's 256, within the tree remover's bound */

static char tmp[256];

static char *at(const char *rel)
{
    return sbx_xasprintf("%s/%s", tmp, rel);
}

static void put(const char *rel, const char *data)
{
    char *p = at(rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, strlen(data)) == (ssize_t)strlen(data));
    close(fd);
    free(p);
}

static int exists(const char *rel)
{
    char *p = at(rel);
    struct stat st;
    int r = lstat(p, &st) == 0;
    free(p);
    return r;
}

/* n directories "d/d/d..." beneath rel, made through fds (no path gets long). */
static void nest(const char *rel, int n)
{
    char *p = at(rel);
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(p);
    CHECK(fd >= 0);
    for (int i = 0; i < n && fd >= 0; i++) {
        int next = -1;
        if (mkdirat(fd, "d", 0755) == 0)
            next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (i == n - 1 && next >= 0) {
            int f = openat(next, "bottom", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (f >= 0)
                close(f);
        }
        close(fd);
        fd = next;
    }
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
}

static void test_hostile(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *outside = at("outside"), *tree = at("tree");
    CHECK(mkdir(outside, 0755) == 0);
    put("outside/keep", "host data");
    CHECK(mkdir(tree, 0755) == 0);
    char *p = at("tree/link-dir");
    CHECK(symlink(outside, p) == 0); /* absolute: a remover that follows it empties outside */
    free(p);
    p = at("tree/link-file");
    CHECK(symlink("../outside/keep", p) == 0);
    free(p);
    /* No permissions at all, and read-only with contents. */
    p = at("tree/locked");
    CHECK(mkdir(p, 0755) == 0);
    put("tree/locked/f", "x");
    CHECK(chmod(p, 0) == 0);
    free(p);
    p = at("tree/readonly");
    CHECK(mkdir(p, 0755) == 0);
    put("tree/readonly/f", "x");
    CHECK(chmod(p, 0500) == 0);
    free(p);
    p = at("tree/deep");
    CHECK(mkdir(p, 0755) == 0);
    free(p);
    nest("tree/deep", DEEP);

    /* The workspace remover stops at its bound, having followed nothing. */
    int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK_ERR(sbx_fs_remove(dfd, "tree/deep", SBX_FS_RECURSIVE, &err), SBX_E_TOOBIG, &err,
              "nested deeper than 256 directories");
    close(dfd);

    CHECK_OK(sbx__fs_remove_tree(tree, &err), &err);
    CHECK(!exists("tree"));
    CHECK(exists("outside/keep"));
    /* Gone already: no error. */
    CHECK_OK(sbx__fs_remove_tree(tree, &err), &err);

    CHECK_ERR(sbx__fs_remove_tree("relative/x", &err), SBX_E_INVAL, &err, "refusing");
    CHECK_ERR(sbx__fs_remove_tree("/", &err), SBX_E_INVAL, &err, "refusing");
    char *dots = at("outside/..");
    CHECK_ERR(sbx__fs_remove_tree(dots, &err), SBX_E_INVAL, &err, "refusing");
    free(dots);
    CHECK(exists("outside/keep"));

    /* A symlink given as the tree is removed itself, never its target. */
    char *link = at("link");
    CHECK(symlink(outside, link) == 0);
    CHECK_OK(sbx__fs_remove_tree(link, &err), &err);
    CHECK(!exists("link"));
    CHECK(exists("outside/keep"));
    free(link);

    CHECK_OK(sbx__fs_remove_tree(outside, &err), &err);
    free(outside);
    free(tree);
}

/* The child of test_mount_inside, in a mount namespace of its own: 0 when the remover refuses
 * the mount inside the tree and leaves what is mounted there, 77 without a mount namespace. */
static int mount_inside_child(const char *tree, const char *mnt)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tmpfs", mnt, "tmpfs", 0, "size=64k") < 0)
        return 77;
    char f[512];
    snprintf(f, sizeof(f), "%s/mounted", mnt);
    int fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return 2;
    close(fd);
    int rc = sbx__fs_remove_tree(tree, &err);
    struct stat st;
    if (rc != -SBX_E_PERM || !strstr(err.msg, "mount point"))
        return 3;
    if (stat(f, &st) < 0)
        return 4; /* it went into the mount */
    return 0;
}

/* A mount inside the tree (root only, in a mount namespace of a child of ours): refused, and
 * what is mounted there is left alone. */
static void test_mount_inside(void)
{
    if (geteuid() != 0) {
        printf("# skipped the mount test: needs root\n");
        return;
    }
    char *tree = at("mtree"), *mnt = at("mtree/mnt");
    CHECK(mkdir(tree, 0755) == 0);
    CHECK(mkdir(mnt, 0755) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        int code = mount_inside_child(tree, mnt);
        /* Freed, or valgrind may count them lost at _exit and answer with its exit status. */
        free(tree);
        free(mnt);
        _exit(code);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        printf("# skipped the mount test: no mount namespace here\n");
    else
        CHECK_EQ_INT(st, 0);
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx__fs_remove_tree(tree, &err), &err);
    free(tree);
    free(mnt);
}

int main(void)
{
    TAP_START();
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/sbx-test-rmtree.XXXXXX", t && t[0] == '/' ? t : "/tmp");
    if (!mkdtemp(tmp))
        TAP_SKIP_ALL("cannot create a temporary directory");
    TAP_RUN(test_hostile);
    TAP_RUN(test_mount_inside);
    CHECK(rmdir(tmp) == 0);
    return TAP_DONE();
}
