/* The null provider: a sandbox is a plain directory of this host and its commands are host
 * processes in it, with nothing isolated. It is not built into sbx: it lives in the tests, as
 * the proof that a provider is one folder, one line of src/providers/table.c and one subdir()
 * line of src/providers/meson.build (tests/providers/null-provider.sh copies the tree, drops
 * this folder into src/providers/null/ and builds it). It declares no trait, so the conformance
 * suite skips every case of one, saying so.
 *
 * <dir>/<id>/workspace is the workspace; <dir>/<id>/created its creation time. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "core/spawn.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/strv.h"

#define ID_HEX   16
#define READ_MAX ((size_t)64 << 20)

struct null_client {
    struct sbx_client base;
    char *dir;
};

struct null_session {
    struct sbx_session base;
    char *dir;           /* <dir>/<id> */
    int ws_fd;           /* the workspace */
    struct sbx_strv env; /* the manifest's environment */
    char created[32];
};

struct null_proc {
    struct sbx_proc base;
    struct sbx__child child;
    int keep_background;
    int reaped;
    struct sbx_exit status;
};

static int valid_id(const char *id)
{
    return strlen(id) == ID_HEX && strspn(id, "0123456789abcdef") == ID_HEX;
}

/* ---- commands ---- */

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct null_proc *p = (struct null_proc *)bp;
    int st = 0;
    while (!p->reaped) {
        pid_t r = waitpid(p->child.pid, &st, timeout_ms < 0 ? 0 : WNOHANG);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sbx_error_errno(err, errno, "cannot wait for the command");
        if (r == 0) {
            struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};
            if (timeout_ms <= 0)
                return sbx_error_set(err, SBX_E_TIMEOUT, 0, "the command is still running");
            nanosleep(&ts, NULL);
            timeout_ms -= timeout_ms < 10 ? timeout_ms : 10;
            continue;
        }
        p->reaped = 1;
        p->status.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        p->status.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        /* What the command left behind goes with it. */
        if (!p->keep_background)
            kill(-p->child.pid, SIGKILL);
        p->child.pid = -1;
    }
    *out = p->status;
    return 0;
}

static void proc_free(struct sbx_proc *bp)
{
    struct null_proc *p = (struct null_proc *)bp;
    if (!p->reaped && p->child.pid > 0) {
        kill(-p->child.pid, SIGKILL);
        sbx__child_kill(&p->child);
    }
    sbx_fd_close(&p->base.stdout_fd);
    sbx_fd_close(&p->base.stderr_fd);
    sbx_fd_close(&p->base.stdin_fd);
    sbx_fd_close(&p->base.status_fd);
    free(p);
}

static const struct sbx_proc_ops proc_ops = {.wait = proc_wait, .free = proc_free};

static int exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                      struct sbx_proc **out, struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    const char *const sh[] = {"/bin/sh", "-c", spec->command, NULL};
    const char *const *argv = spec->command ? sh : spec->argv;
    int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, in_s[2] = {-1, -1}, rc = 0;
    if (spec->flags & SBX_EXEC_TTY)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "the null provider has no terminals");
    if (spec->user)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "the null provider has no users");
    struct sbx_strv env;
    sbx_strv_init(&env);
    sbx_strv_pushv(&env, (const char *const *)s->env.v);
    sbx_strv_setenv(&env, "PATH", SBX__SPAWN_PATH);
    for (const char *const *e = spec->env; e && *e; e++) {
        char *k = sbx_xstrndup(*e, strcspn(*e, "="));
        sbx_strv_setenv(&env, k, strchr(*e, '=') ? strchr(*e, '=') + 1 : "");
        free(k);
    }
    char *dir = sbx_xasprintf("%s/workspace%s%s", s->dir, cwd[0] ? "/" : "", cwd);
    if (pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0 ||
        ((spec->flags & SBX_EXEC_STDIN) &&
         socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_s) < 0))
        rc = sbx_error_errno(err, errno, "cannot make the command's pipes");
    struct null_proc *p = sbx_xcalloc(1, sizeof(*p));
    struct sbx__spawn sp = {
            .program = argv[0],
            .argv = argv,
            .env = (const char *const *)env.v,
            .cwd = dir,
            .in = {in_s[1] >= 0 ? SBX__SPAWN_FD : SBX__SPAWN_NULL, in_s[1]},
            .out = {SBX__SPAWN_FD, out_p[1]},
            .err = {SBX__SPAWN_FD, (spec->flags & SBX_EXEC_MERGE_STDERR) ? out_p[1] : err_p[1]},
            .new_group = 1,
    };
    if (rc == 0 && (rc = sbx__spawn_start(&sp, &p->child, err)) == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_EXEC, ENOENT, "command '%s' not found", argv[0]);
    if (rc == 0 && (p->base.status_fd = (int)syscall(SYS_pidfd_open, p->child.pid, 0)) < 0) {
        rc = sbx_error_errno(err, errno, "cannot watch the command");
        sbx__child_kill(&p->child);
    }
    sbx_fd_close(&out_p[1]);
    sbx_fd_close(&err_p[1]);
    sbx_fd_close(&in_s[1]);
    if (spec->flags & SBX_EXEC_MERGE_STDERR)
        sbx_fd_close(&err_p[0]);
    p->base.stdout_fd = out_p[0];
    p->base.stderr_fd = err_p[0];
    p->base.stdin_fd = in_s[0];
    p->base.pid = p->child.pid;
    p->base.ops = &proc_ops;
    p->keep_background = (spec->flags & SBX_EXEC_KEEP_BACKGROUND) != 0;
    if (rc < 0) {
        p->reaped = 1;
        proc_free(&p->base);
    } else {
        *out = &p->base;
    }
    free(dir);
    sbx_strv_release(&env);
    return rc;
}

/* ---- files, beneath the workspace's fd ---- */

static int read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                     struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    struct stat st;
    int fd = -1;
    int rc = sbx_fs_open(s->ws_fd, path, O_RDONLY | O_NONBLOCK, 0, 0, &fd, err);
    if (rc == 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a file", path);
        close(fd);
    }
    if (rc == 0) {
        *out_fd = fd;
        *out_size = (uint64_t)st.st_size;
    }
    return rc;
}

static int write_file(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                      uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    struct sbx_buf b;
    size_t limit = max < READ_MAX ? (size_t)max : READ_MAX;
    int rc = 0;
    /* One byte past the limit tells a file that is too big. */
    sbx_buf_init(&b, limit + 1);
    for (;;) {
        size_t want = limit + 1 - b.len < 65536 ? limit + 1 - b.len : 65536;
        if ((rc = sbx_buf_reserve(&b, want, err)) < 0)
            break;
        long n = r->read(r->ctx, b.data + b.len, want, err);
        if (n <= 0) {
            rc = (int)n;
            break;
        }
        sbx_buf_setlen(&b, b.len + (size_t)n);
        if (b.len > limit) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' exceeds %zu bytes", path, limit);
            break;
        }
    }
    int fsflags = (flags & SBX_WRITE_PARENTS ? SBX_FS_PARENTS : 0) |
                  (flags & SBX_WRITE_EXCL ? SBX_FS_EXCL : 0) |
                  (flags & SBX_WRITE_APPEND ? SBX_FS_APPEND : SBX_FS_ATOMIC);
    if (rc == 0)
        rc = sbx_fs_write(s->ws_fd, path, b.data ? b.data : "", b.len, mode ? mode : 0644, fsflags,
                          err);
    sbx_buf_release(&b);
    return rc;
}

static void dirent_of(const struct stat *st, const char *name, const char *target,
                      struct sbx_dirent *d)
{
    *d = (struct sbx_dirent){
            .name = sbx_xstrdup(name),
            .target = target ? sbx_xstrdup(target) : NULL,
            .type = S_ISREG(st->st_mode)   ? SBX_FILE_REGULAR
                    : S_ISDIR(st->st_mode) ? SBX_FILE_DIR
                    : S_ISLNK(st->st_mode) ? SBX_FILE_SYMLINK
                                           : SBX_FILE_OTHER,
            .mode = st->st_mode & 07777,
            .size = (uint64_t)st->st_size,
            .mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
            .uid = st->st_uid,
            .gid = st->st_gid,
    };
}

static int stat_at(int dfd, const char *name, struct sbx_dirent *out)
{
    struct stat st;
    char target[4096];
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) < 0)
        return -1;
    ssize_t n = S_ISLNK(st.st_mode) ? readlinkat(dfd, name, target, sizeof(target) - 1) : -1;
    if (n >= 0)
        target[n] = '\0';
    dirent_of(&st, name, n >= 0 ? target : NULL, out);
    return 0;
}

static int stat_path(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                     struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    const char *slash = strrchr(path, '/');
    char *parent = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup("");
    int dfd = -1;
    int rc = sbx_fs_open(s->ws_fd, parent, O_RDONLY | O_DIRECTORY, 0, 0, &dfd, err);
    if (rc == 0 && stat_at(dfd, path[0] ? (slash ? slash + 1 : path) : "", out) < 0)
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", path);
    sbx_fd_close(&dfd);
    free(parent);
    return rc;
}

static int ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
              struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    int fd = -1;
    int rc = sbx_fs_open(s->ws_fd, path, O_RDONLY | O_DIRECTORY, 0, 0, &fd, err);
    DIR *d = rc == 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    size_t cap = 0;
    *out = (struct sbx_dirlist){0};
    if (rc == 0 && !d) {
        close(fd);
        return sbx_error_errno(err, errno, "cannot list '%s'", path);
    }
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (out->n == SBX_LS_MAX_ENTRIES) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' has too many entries", path);
            break;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            out->v = sbx_xrealloc(out->v, cap * sizeof(*out->v));
        }
        if (stat_at(dirfd(d), e->d_name, &out->v[out->n]) == 0)
            out->n++;
    }
    if (d)
        closedir(d);
    return rc;
}

static int mkdir_at(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    return sbx_fs_mkdir(s->ws_fd, path, 0755, flags & SBX_MKDIR_PARENTS ? SBX_FS_PARENTS : 0, err);
}

static int rm_at(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    int rc = sbx_fs_remove(s->ws_fd, path, flags & SBX_RM_RECURSIVE ? SBX_FS_RECURSIVE : 0, err);
    if (rc == -SBX_E_NOTFOUND && (flags & SBX_RM_FORCE)) {
        sbx_error_clear(err);
        rc = 0;
    }
    return rc;
}

static int chmod_at(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    int fd = -1;
    char proc[64];
    int rc = sbx_fs_open(s->ws_fd, path, O_PATH | O_NOFOLLOW, 0, 0, &fd, err);
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (rc == 0 && chmod(proc, mode & SBX_FS_MODE_MASK) < 0)
        rc = sbx_error_errno(err, errno, "cannot chmod '%s'", path);
    sbx_fd_close(&fd);
    return rc;
}

static int resolve_port(struct sbx_session *bs, int port, char **out, struct sbx_error *err)
{
    (void)bs;
    (void)out;
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "the null provider has no ports (%d)", port);
}

static int session_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    (void)err;
    *out = json_pack("{s:i, s:s, s:s, s:s, s:b, s:{}, s:n, s:[], s:s}", "version",
                     SBX_SESSION_STATE_VERSION, "provider", "null", "id", bs->id, "created",
                     s->created, "workspace_owned", 1, "options", "snapshot", "exposed_ports",
                     "root", bs->root);
    return 0;
}

static int remove_dir(const char *dir, struct sbx_error *err)
{
    return sbx__fs_remove_tree(dir, err);
}

static int session_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct null_session *s = (struct null_session *)bs;
    return delete_workspace ? remove_dir(s->dir, err) : 0;
}

static void session_free(struct sbx_session *bs)
{
    struct null_session *s = (struct null_session *)bs;
    sbx_session_release_base(bs);
    sbx_fd_close(&s->ws_fd);
    sbx_strv_release(&s->env);
    free(s->dir);
    free(s);
}

static const struct sbx_session_ops session_ops = {
        .exec_start = exec_start,
        .read_open = read_open,
        .write = write_file,
        .ls = ls,
        .stat = stat_path,
        .mkdir = mkdir_at,
        .rm = rm_at,
        .chmod = chmod_at,
        .resolve_port = resolve_port,
        .state = session_state,
        .close = session_close,
        .free = session_free,
};

/* ---- the client ---- */

/* A session on the existing sandbox id. */
static int open_session(struct null_client *c, const char *id, struct sbx_session **out,
                        struct sbx_error *err)
{
    struct null_session *s = sbx_xcalloc(1, sizeof(*s));
    s->dir = sbx_xasprintf("%s/%s", c->dir, id);
    char *ws = sbx_xasprintf("%s/workspace", s->dir);
    char *created = sbx_xasprintf("%s/created", s->dir);
    struct sbx_buf b;
    sbx_buf_init(&b, sizeof(s->created) - 1);
    sbx_strv_init(&s->env);
    s->ws_fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = s->ws_fd < 0 ? sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", id) : 0;
    if (rc == 0 && sbx_fs_read_path(created, sizeof(s->created) - 1, &b, NULL) == 0)
        snprintf(s->created, sizeof(s->created), "%s", b.data);
    sbx_session_init_base(&s->base, &session_ops, "null", id, ws);
    free(ws);
    free(created);
    sbx_buf_release(&b);
    if (rc < 0)
        session_free(&s->base);
    else
        *out = &s->base;
    return rc;
}

/* mkdir -p path (0700 for what it makes). */
static int mkdirs(char *path, struct sbx_error *err)
{
    for (char *p = path + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0')
            continue;
        *p = '\0';
        int made = mkdir(path, 0700);
        *p = c;
        if (made < 0 && errno != EEXIST)
            return sbx_error_errno(err, errno, "cannot make '%s'", path);
        if (c == '\0')
            return 0;
    }
}

static int client_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                         struct sbx_session **out, struct sbx_error *err)
{
    struct null_client *c = (struct null_client *)bc;
    unsigned char raw[ID_HEX / 2];
    char id[ID_HEX + 1], stamp[32];
    struct sbx_session *s = NULL;
    time_t now = time(NULL);
    struct tm tm;
    if (spec->snapshot)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "the null provider has no snapshots");
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the null provider makes its own workspaces");
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return sbx_error_errno(err, errno, "cannot make a sandbox id");
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(id + 2 * i, 3, "%02x", raw[i]);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    char *ws = sbx_xasprintf("%s/%s/workspace", c->dir, id);
    char *created = sbx_xasprintf("%s/%s/created", c->dir, id);
    int rc = mkdirs(ws, err);
    int fd = rc == 0 ? open(created, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (rc == 0 && (fd < 0 || sbx_fd_write_all(fd, stamp, strlen(stamp), err) < 0))
        rc = sbx_error_errno(err, errno, "cannot make sandbox '%s'", id);
    sbx_fd_close(&fd);
    if (rc == 0)
        rc = open_session(c, id, &s, err);
    if (rc == 0 && spec->manifest) {
        struct null_session *ns = (struct null_session *)s;
        struct sbx_progress_sink progress;
        json_t *records = NULL;
        sbx_progress_sink_init(&progress, spec->progress, spec->progress_data);
        rc = sbx_manifest_env_resolve(spec->manifest, spec->pass_secrets, &ns->env, err);
        if (rc == 0)
            rc = sbx__materialize(s, spec->manifest, 0, &progress, &records, err);
        json_decref(records);
    }
    if (rc < 0) {
        char *dir = sbx_xasprintf("%s/%s", c->dir, id);
        (void)remove_dir(dir, NULL);
        free(dir);
        sbx_session_free(s);
    } else {
        *out = s;
    }
    free(ws);
    free(created);
    return rc;
}

static int client_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                         struct sbx_error *err)
{
    if (!valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", id);
    return open_session((struct null_client *)bc, id, out, err);
}

static int client_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct null_client *c = (struct null_client *)bc;
    DIR *d = opendir(c->dir);
    struct dirent *e;
    json_t *list = json_array();
    (void)err;
    while (d && (e = readdir(d))) {
        struct sbx_session *s = NULL;
        if (!valid_id(e->d_name) || open_session(c, e->d_name, &s, NULL) < 0)
            continue;
        sbx_json_append(list, json_pack("{s:s, s:s, s:s, s:s}", "id", e->d_name, "provider", "null",
                                        "created", ((struct null_session *)s)->created, "workspace",
                                        s->root));
        sbx_session_free(s);
    }
    if (d)
        closedir(d);
    *out = list;
    return 0;
}

static int client_remove(struct sbx_client *bc, const char *id, int keep, struct sbx_error *err)
{
    struct null_client *c = (struct null_client *)bc;
    struct sbx_session *s = NULL;
    if (keep)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "the null provider keeps no workspace");
    int rc = client_attach(bc, id, &s, err);
    if (rc == 0) {
        char *dir = sbx_xasprintf("%s/%s", c->dir, id);
        rc = remove_dir(dir, err);
        free(dir);
    }
    sbx_session_free(s);
    return rc;
}

static int client_resume(struct sbx_client *bc, const json_t *state,
                         const struct sbx_resume_opts *opts, struct sbx_session **out,
                         struct sbx_error *err)
{
    (void)opts;
    return client_attach(bc, json_string_value(json_object_get(state, "id")), out, err);
}

static void client_free(struct sbx_client *bc)
{
    struct null_client *c = (struct null_client *)bc;
    free(c->dir);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = client_create,
        .attach = client_attach,
        .list = client_list,
        .remove = client_remove,
        .resume = client_resume,
        .free = client_free,
};

/* ---- the registry's entry ---- */

static const struct sbx_provider_option options[] = {
        {.key = "dir",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LOCATOR,
         .arg = "DIR",
         .help = "where its sandboxes are kept (default $TMPDIR/sbx-null, else /tmp/sbx-null)",
         .flag = "null-dir"},
        {.key = NULL},
};

/* opts: the base directory (a path), or NULL for the default. */
static int client_new(const void *opts, struct sbx_client **out, struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    struct null_client *c = sbx_xcalloc(1, sizeof(*c));
    (void)err;
    c->base.ops = &client_ops;
    c->base.provider = "null";
    c->dir = opts ? sbx_xstrdup(opts)
                  : sbx_xasprintf("%s/sbx-null", tmp && tmp[0] == '/' ? tmp : "/tmp");
    *out = &c->base;
    return 0;
}

static int client_new_json(const json_t *opts, struct sbx_client **out, struct sbx_error *err)
{
    return client_new(json_string_value(json_object_get(opts, "dir")), out, err);
}

static int check_state(const json_t *state, struct sbx_error *err)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    if (!id || !valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'id' is not a null sandbox id");
    return 0;
}

const struct sbx__provider_def sbx__provider_null = {
        .name = "null",
        .summary = "a plain host directory per sandbox, its commands host processes (tests only)",
        .traits = 0,
        .options = options,
        .client_new = client_new,
        .client_new_json = client_new_json,
        .check_state = check_state,
};
