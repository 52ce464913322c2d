/* The lxd provider through the C API on the two-member cluster (tests/lxd/run-c.sh api runs it
 * in member 1's network namespace with the cluster's environment): the server's own snapshots
 * (sbx/lxd.h) of a sandbox on member 2 through member 1 — take, list, restore (the workspace
 * as it was, the sandbox still serving), delete, the errors —, the same calls refused for a
 * session of another provider, and the workspace's tar streams (the session ops the remote
 * layer's snapshots use). Every sandbox made is removed at exit. */
#include <fcntl.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/provider.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/lxd.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

static struct sbx_client *client;
static struct sbx_session *sess;

static char *out_of(struct sbx_session *s, const char *cmd)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_spec spec = {.command = cmd};
    struct sbx_exec_result r;
    if (sbx_session_exec(s, &spec, &r, &err) < 0) {
        printf("#   '%s': %s\n", cmd, err.msg);
        return NULL;
    }
    char *out = r.status.code == 0 ? sbx_xstrdup(r.out.data) : NULL;
    sbx_exec_result_release(&r);
    return out;
}

#define CHECK_OUT(s, cmd, want)            \
    do {                                   \
        char *tap_o_ = out_of((s), (cmd)); \
        CHECK_EQ_STR(tap_o_, (want));      \
        free(tap_o_);                      \
    } while (0)

static void test_native_snapshots(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *names = NULL;
    CHECK_OK(sbx_session_write(sess, "f.txt", "v1", 2, 0, 0, &err), &err);
    CHECK_OK(sbx_lxd_snapshot_create(sess, "one", &err), &err);
    CHECK_ERR(sbx_lxd_snapshot_create(sess, "one", &err), SBX_E_EXISTS, &err, "'one' exists");
    CHECK_ERR(sbx_lxd_snapshot_create(sess, "a/b", &err), SBX_E_INVAL, &err, "snapshot name");
    CHECK_ERR(sbx_lxd_snapshot_create(sess, "", &err), SBX_E_INVAL, &err, NULL);
    CHECK_OK(sbx_session_write(sess, "f.txt", "v2", 2, 0, 0, &err), &err);
    CHECK_OK(sbx_session_write(sess, "later.txt", "x", 1, 0, 0, &err), &err);
    CHECK_OK(sbx_lxd_snapshot_create(sess, "two", &err), &err);
    CHECK_OK(sbx_lxd_snapshot_list(sess, &names, &err), &err);
    CHECK_EQ_INT(json_array_size(names), 2);
    CHECK_EQ_STR(json_string_value(json_array_get(names, 0)), "one");
    CHECK_EQ_STR(json_string_value(json_array_get(names, 1)), "two");
    json_decref(names);
    names = NULL;

    CHECK_OK(sbx_lxd_snapshot_restore(sess, "one", &err), &err);
    CHECK_OUT(sess, "cat f.txt; test -e later.txt || echo ' no later'", "v1 no later\n");
    /* the restarted instance serves as before: its loopback is up again */
    CHECK_OUT(sess, "ip -o link show lo | grep -c UP", "1\n");
    CHECK_OK(sbx_lxd_snapshot_restore(sess, "two", &err), &err);
    CHECK_OUT(sess, "cat f.txt later.txt", "v2x");
    CHECK_ERR(sbx_lxd_snapshot_restore(sess, "three", &err), SBX_E_NOTFOUND, &err,
              "no lxd snapshot 'three'");

    CHECK_OK(sbx_lxd_snapshot_delete(sess, "one", &err), &err);
    CHECK_ERR(sbx_lxd_snapshot_delete(sess, "one", &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_lxd_snapshot_list(sess, &names, &err), &err);
    CHECK_EQ_INT(json_array_size(names), 1);
    json_decref(names);
}

/* The workspace as one tar stream out of the sandbox and back in (the remote layer's
 * workspace_export and workspace_import), given to the session's owner ("user", 1000). */
static void test_tar_streams(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    json_t *o = json_pack("{s:s,s:s,s:[s],s:s,s:s}", "endpoint", getenv("SBX_TEST_LXD_N1_SOCKET"),
                          "project", getenv("SBX_TEST_LXD_PROJECT"), "profile",
                          getenv("SBX_TEST_LXD_PROFILE"), "image", getenv("SBX_TEST_LXD_IMAGE"),
                          "user", getenv("SBX_TEST_LXD_USER"));
    struct sbx_client *c = NULL;
    CHECK_OK(sbx_client_new_json("lxd", o, &c, &err), &err);
    json_decref(o);
    struct sbx_create_spec spec = {0};
    if (c)
        CHECK_OK(sbx_client_create(c, &spec, &s, &err), &err);
    if (!s) {
        sbx_client_free(c);
        return;
    }
    CHECK(s->ops->workspace_export && s->ops->workspace_import);
    CHECK_OK(sbx_session_write(s, "t/a.txt", "A", 1, 0600, SBX_WRITE_PARENTS, &err), &err);
    CHECK_OUT(s, "ln -s a.txt t/l && echo ok", "ok\n");
    int fd = memfd_create("ws", MFD_CLOEXEC);
    CHECK_OK(s->ops->workspace_export(s, fd, &err), &err);
    struct sbx_buf tar;
    sbx_buf_init(&tar, (size_t)64 << 20);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK_OK(sbx_fd_read_all(fd, (size_t)64 << 20, &tar, &err), &err);
    CHECK(tar.len >= 1024 && tar.len % 512 == 0);
    CHECK(tar.data && memmem(tar.data, tar.len, "./t/a.txt", 9) != NULL);
    CHECK(tar.data && memmem(tar.data, tar.len, "./t/l", 5) != NULL);
    sbx_buf_release(&tar);
    CHECK_OK(sbx_session_rm(s, "t", SBX_RM_RECURSIVE, &err), &err);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK_OK(s->ops->workspace_import(s, fd, &err), &err);
    CHECK_OUT(s, "cat t/a.txt; readlink t/l; stat -c ' %a %u' t/a.txt", "Aa.txt\n 600 1000\n");
    close(fd);
    CHECK_OK(sbx_session_delete(s, &err), &err);
    sbx_session_free(s);
    sbx_client_free(c);
}

static void test_other_providers(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *local = NULL;
    struct sbx_session *s = NULL;
    json_t *names = NULL;
    char tmp[] = "/tmp/sbx-lxd-api.XXXXXX";
    if (!mkdtemp(tmp)) {
        CHECK(!"mkdtemp");
        return;
    }
    char *run = sbx_xasprintf("%s/run", tmp), *ws = sbx_xasprintf("%s/ws", tmp);
    struct sbx_local_options o = {.runtime_dir = run, .workspace_dir = ws, .tied = 1};
    CHECK_OK(sbx_client_new("local", &o, &local, &err), &err);
    struct sbx_create_spec spec = {0};
    if (local)
        CHECK_OK(sbx_client_create(local, &spec, &s, &err), &err);
    if (s) {
        CHECK_ERR(sbx_lxd_snapshot_create(s, "x", &err), SBX_E_UNSUPPORTED, &err,
                  "not 'local' ones");
        CHECK_ERR(sbx_lxd_snapshot_list(s, &names, &err), SBX_E_UNSUPPORTED, &err, NULL);
        CHECK_OK(sbx_session_delete(s, &err), &err);
        sbx_session_free(s);
    }
    sbx_client_free(local);
    int dfd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)sbx_fs_remove(dfd, tmp + 5, SBX_FS_RECURSIVE, &err);
        close(dfd);
    }
    free(run);
    free(ws);
}

int main(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *sock = getenv("SBX_TEST_LXD_N1_SOCKET");
    TAP_START();
    if (!sock) {
        printf("1..0 # SKIP no lxd cluster (tests/lxd/run-c.sh)\n");
        return 0;
    }
    json_t *o = json_pack("{s:s,s:s,s:[s],s:s,s:s}", "endpoint", sock, "project",
                          getenv("SBX_TEST_LXD_PROJECT"), "profile", getenv("SBX_TEST_LXD_PROFILE"),
                          "image", getenv("SBX_TEST_LXD_IMAGE"), "target", "n2");
    CHECK_OK(sbx_client_new_json("lxd", o, &client, &err), &err);
    json_decref(o);
    struct sbx_create_spec spec = {0};
    if (client)
        CHECK_OK(sbx_client_create(client, &spec, &sess, &err), &err);
    if (!sess) {
        printf("Bail out! cannot create a sandbox: %s\n", err.msg);
        sbx_client_free(client);
        return 1;
    }
    TAP_RUN(test_native_snapshots);
    TAP_RUN(test_tar_streams);
    TAP_RUN(test_other_providers);
    CHECK_OK(sbx_session_delete(sess, &err), &err);
    sbx_session_free(sess);
    sbx_client_free(client);
    return TAP_DONE();
}
