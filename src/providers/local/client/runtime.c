/* The local provider, client side: a sandbox's runtime directory as the client sees it — ids,
 * state.json, requests to the supervisor, the create lease, and taking a sandbox down. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "providers/local/client/client.h"
#include "providers/local/client/disk.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define STATE_MAX SBX_SESSION_STATE_MAX

int sbx__local_wait_begin(const char *dir, int64_t idle_ms, struct sbx__proto_wait *w)
{
    int64_t limit_ms =
            idle_ms > SBX__LOCAL_REQUEST_LIMIT_MS ? idle_ms : SBX__LOCAL_REQUEST_LIMIT_MS;
    sbx__proto_wait_init(w, sbx_deadline_after_ms(idle_ms));
    w->idle_ms = idle_ms;
    w->limit = sbx_deadline_after_ms(limit_ms);
    char *path = sbx_xasprintf("%s/%s", dir, SBX_PROTO_PROGRESS);
    w->progress_fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    free(path);
    if (w->progress_fd >= 0 && sbx__proto_progress_read(w->progress_fd, &w->seen) < 0)
        sbx_fd_close(&w->progress_fd);
    return w->progress_fd;
}

int sbx__local_request(const char *dir, const char *id, const json_t *req, json_t **reply, int *fds,
                       size_t max_fds, size_t *nfds, int64_t idle_ms, struct sbx_error *err)
{
    int sock = -1;
    struct sbx__proto_wait w;
    int progress = sbx__local_wait_begin(dir, idle_ms, &w);
    int rc = sbx__local_connect(dir, id, &w, &sock, err);
    if (rc < 0)
        goto out;
    rc = sbx__proto_send_wait(sock, req, NULL, 0, &w, err);
    if (rc == 0)
        rc = sbx__proto_recv_wait(sock, reply, fds, max_fds, nfds, &w, err);
    if (rc == -SBX_E_SANDBOX)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", id);
    if (rc == 0) {
        rc = sbx__proto_check(*reply, err);
        if (rc < 0) {
            json_decref(*reply);
            *reply = NULL;
            for (size_t i = 0; nfds && i < *nfds; i++)
                close(fds[i]);
        }
    }
out:
    sbx_fd_close(&sock);
    sbx_fd_close(&progress);
    return rc;
}

int sbx__local_valid_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > SBX__LOCAL_ID_MAX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

int sbx__local_find_id(const char *dir, const char *suffix, const char *prefix, char **out)
{
    /* An exact id wins over prefixes: when its entry is there, the directory need not be
     * read. */
    struct stat st;
    if (dir && sbx__local_valid_id(prefix)) {
        char *exact = sbx_xasprintf("%s/%s%s", dir, prefix, suffix);
        int there = fstatat(AT_FDCWD, exact, &st, AT_SYMLINK_NOFOLLOW) == 0;
        free(exact);
        if (there) {
            *out = sbx_xstrdup(prefix);
            return 1;
        }
    }
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d)
        return -2;
    char *found = NULL;
    int many = 0;
    size_t n = strlen(prefix), sl = strlen(suffix);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= sl || strcmp(e->d_name + len - sl, suffix) != 0)
            continue;
        char *id = sbx_xstrndup(e->d_name, len - sl);
        if (!sbx__local_valid_id(id) || strncmp(id, prefix, n) != 0) {
            free(id);
            continue;
        }
        if (strcmp(id, prefix) == 0) {
            free(found);
            found = id;
            many = 0;
            break;
        }
        if (found) {
            many = 1;
            free(id);
        } else {
            found = id;
        }
    }
    closedir(d);
    if (many) {
        free(found);
        return -1;
    }
    if (!found)
        return 0;
    *out = found;
    return 1;
}

int sbx__local_resolve_id(const char *base, const char *prefix, char **out, struct sbx_error *err)
{
    if (!sbx__local_valid_id(prefix))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", prefix);
    int r = sbx__local_find_id(base, "", prefix, out);
    if (r == -2 && (errno == EMFILE || errno == ENFILE)) {
        int rc = sbx_error_errno(err, errno, "cannot look for sandbox '%s'", prefix);
        sbx__proto_fd_hint(err);
        return rc;
    }
    if (r == -1)
        return sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id '%s' is ambiguous", prefix);
    if (r != 1)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    return 0;
}

int sbx__local_read_state(const char *dir, const char *id, json_t **out, struct sbx_error *err)
{
    struct sbx_buf b;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0 && (errno == EMFILE || errno == ENFILE)) {
        int rc = sbx_error_errno(err, errno, "cannot read the state of sandbox '%s'", id);
        sbx__proto_fd_hint(err);
        return rc;
    }
    if (dfd < 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, errno, "no sandbox '%s'", id);
    sbx_buf_init(&b, STATE_MAX);
    /* The runtime directory is ours alone (0700): plain openat is enough here. */
    int fd = openat(dfd, SBX_PROTO_STATE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = 0;
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        rc = sbx_error_errno(err, errno, "cannot read the state of sandbox '%s'", id);
        sbx__proto_fd_hint(err);
    } else {
        rc = fd < 0 ? sbx_error_set(err, SBX_E_SANDBOX, errno, "sandbox '%s' is gone", id)
                    : sbx_fd_read_all(fd, STATE_MAX, &b, err);
    }
    if (fd >= 0)
        close(fd);
    if (rc == 0)
        rc = sbx_json_parse(b.data, b.len, NULL, out, err);
    if (rc == 0 && !json_is_object(*out)) {
        json_decref(*out);
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "state of sandbox '%s' is not an object", id);
    }
    sbx_buf_release(&b);
    close(dfd);
    return rc;
}

/* The lease in shared mode, for a teardown: creates and the reclaim of dead ones (exclusive)
 * keep off while it runs, other teardowns do not. -1 when the directory is gone already. */
static int lease_share(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_SH) < 0)
        sbx_fd_close(&fd);
    return fd;
}

static int stop_and_clean(const char *dir, const char *id, const char *workspace,
                          int remove_workspace, const json_t *disk, int owned, int held,
                          json_t *removed, uint32_t *first, struct sbx_error *err)
{
    int lease = held ? -1 : lease_share(dir);
    const char *image = json_string_value(json_object_get(disk, "image"));
    char *derived = NULL;
    struct stat st;
    if (!image && owned && workspace) {
        /* A create killed between mounting the image and recording it in the state. */
        derived = sbx_xasprintf("%s" SBX__DISK_IMAGE_SUFFIX, workspace);
        if (lstat(derived, &st) == 0 && S_ISREG(st.st_mode))
            image = derived;
    }
    struct sbx__teardown t = {
            .dir = dir,
            .id = id,
            .workspace = remove_workspace ? workspace : NULL,
            .removed = removed,
            .disk_image = image,
            .disk_loop = image == derived ? NULL : json_string_value(json_object_get(disk, "loop")),
            .mount = workspace,
            .host_ids_first = first};
    int rc = sbx__local_teardown(&t, err);
    free(derived);
    sbx_fd_close(&lease);
    return rc;
}

int sbx__local_stop_and_clean(const char *dir, const char *id, const char *workspace,
                              int remove_workspace, const json_t *disk, int owned, json_t *removed,
                              struct sbx_error *err)
{
    return stop_and_clean(dir, id, workspace, remove_workspace, disk, owned, 0, removed, NULL, err);
}

int sbx__local_stop_and_clean_ids(const char *dir, const char *id, const char *workspace,
                                  int remove_workspace, const json_t *disk, int owned,
                                  uint32_t *first, struct sbx_error *err)
{
    return stop_and_clean(dir, id, workspace, remove_workspace, disk, owned, 0, NULL, first, err);
}

int sbx__local_stop_and_clean_held(const char *dir, const char *id, const char *workspace,
                                   int remove_workspace, const json_t *disk, int owned,
                                   struct sbx_error *err)
{
    return stop_and_clean(dir, id, workspace, remove_workspace, disk, owned, 1, NULL, NULL, err);
}
int sbx__local_check_state(const json_t *st, const char *id, struct sbx_error *err)
{
    int64_t version = 0;
    const char *provider = NULL, *sid = NULL, *ws = NULL, *root = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(st, sbx__local_state_keys, err)) < 0 ||
        (rc = sbx_json_get_int(st, "version", 1, &version, err)) < 0 ||
        (rc = sbx_json_get_string(st, "provider", 1, &provider, err)) < 0 ||
        (rc = sbx_json_get_string(st, "id", 1, &sid, err)) < 0 ||
        (rc = sbx_json_get_string(st, "workspace", 1, &ws, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0)
        goto out;
    if (version != 1)
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "session state version %lld is not 1",
                           (long long)version);
    else if (strcmp(provider, "local") != 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "session state is for provider '%s', not 'local'",
                           provider);
    else if (!sbx__local_valid_id(sid) || (id && strcmp(sid, id) != 0))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "session state has a bad id '%s'", sid);
out:
    if (rc < 0)
        sbx_error_prefix(err, "session state");
    return rc;
}

/* mkdir -p path (absolute), each new level private to us (0700). */
static int mkdir_private(char *path, struct sbx_error *err)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c0 = *p;
        *p = '\0';
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
            int rc = sbx_error_errno(err, errno, "cannot create '%s'", path);
            *p = c0;
            return rc;
        }
        *p = c0;
        if (!c0)
            return 0;
    }
}

int sbx__local_state_subdir(const char *given, const char *env_name, const char *sub, int make,
                            char **out, struct sbx_error *err)
{
    const char *env = getenv(env_name), *state = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    char *dir;
    if (given)
        dir = sbx_xstrdup(given);
    else if (env && env[0] == '/')
        dir = sbx_xstrdup(env);
    else if (state && state[0] == '/')
        dir = sbx_xasprintf("%s/sbx/%s", state, sub);
    else if (home && home[0] == '/')
        dir = sbx_xasprintf("%s/.local/state/sbx/%s", home, sub);
    else
        return sbx_error_set(err, SBX_E_INVAL, 0, "no place for sbx/%s: set HOME or XDG_STATE_HOME",
                             sub);
    int rc = make ? mkdir_private(dir, err) : 0;
    if (rc < 0) {
        free(dir);
        return rc;
    }
    *out = dir;
    return 0;
}

int sbx__local_write_state(const char *dir, const json_t *state, struct sbx_error *err)
{
    char *text = sbx_json_dumps(state, SBX_JSON_PRETTY);
    char *tmp = sbx_xasprintf("%s/%s.tmp", dir, SBX_PROTO_STATE);
    char *path = sbx_xasprintf("%s/%s", dir, SBX_PROTO_STATE);
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        rc = sbx_error_errno(err, errno, "cannot create '%s'", tmp);
    if (rc == 0)
        rc = sbx_fd_write_all(fd, text, strlen(text), err);
    if (fd >= 0 && close(fd) < 0 && rc == 0)
        rc = sbx_error_errno(err, errno, "cannot write '%s'", tmp);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = sbx_error_errno(err, errno, "cannot rename '%s'", tmp);
    if (rc < 0)
        unlink(tmp);
    free(text);
    free(tmp);
    free(path);
    return rc;
}

int sbx__local_fd_headroom(const char *what, int n, struct sbx_error *err)
{
    int fds[SBX__LOCAL_FD_HEADROOM_MAX], k = 0, rc = 0;
    if (n > SBX__LOCAL_FD_HEADROOM_MAX)
        n = SBX__LOCAL_FD_HEADROOM_MAX;
    for (; k < n; k++) {
        fds[k] = fcntl(2, F_DUPFD_CLOEXEC, 3);
        if (fds[k] < 0 && errno == EBADF)
            fds[k] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fds[k] < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                rc = sbx_error_errno(err, errno, "cannot %s", what);
                sbx__proto_fd_hint(err);
            }
            break;
        }
    }
    while (k > 0)
        close(fds[--k]);
    return rc;
}

int sbx__local_lease_take(const char *dir, struct sbx_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open runtime directory '%s'", dir);
    if (flock(fd, LOCK_EX) < 0) {
        int rc = sbx_error_errno(err, errno, "cannot lock runtime directory '%s'", dir);
        close(fd);
        return rc;
    }
    return fd;
}

int sbx__local_lease_busy(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* Shared: a teardown's shared lease is no create. */
    int busy = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd); /* drops our lock, if we got it */
    return busy;
}

/* Runtime dir name while a create sets it up, before it is renamed to the id (client.h). */
#define STAGING_PREFIX ".new-"

/* A reclaim may remove an empty staging directory between its mkdir and its lease (it cannot
 * tell that window from a creator killed in it): the create then starts again. */
#define STAGE_ATTEMPTS 16

int sbx__local_runtime_dir_make(const char *rundir, const char *id, int *lease_out,
                                struct sbx_error *err)
{
    char *stage = sbx_xasprintf("%s/" STAGING_PREFIX "%s", rundir, id);
    char *dir = sbx_xasprintf("%s/%s", rundir, id);
    int rc = 0, fd = -1;
    for (int attempt = 0;; attempt++) {
        struct stat a, b;
        if (mkdir(stage, 0700) < 0) {
            rc = sbx_error_errno(err, errno, "cannot create runtime directory '%s'", stage);
            break;
        }
        fd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int locked = fd >= 0 && flock(fd, LOCK_EX) == 0;
        /* Still the directory we made (not removed by a reclaim before we held it)? */
        if (locked && (fstat(fd, &a) < 0 || lstat(stage, &b) < 0 || a.st_ino != b.st_ino ||
                       a.st_dev != b.st_dev)) {
            locked = 0;
            errno = ENOENT;
        }
        if (locked && renameat2(AT_FDCWD, stage, AT_FDCWD, dir, RENAME_NOREPLACE) == 0) {
            /* The lease goes with the directory: under its id it is never seen without one. */
            *lease_out = fd;
            break;
        }
        int e = errno;
        sbx_fd_close(&fd);
        if (e == EEXIST) {
            rmdir(stage);
            rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "sandbox '%s' already exists", id);
            break;
        }
        if (attempt + 1 >= STAGE_ATTEMPTS || e != ENOENT) {
            rmdir(stage);
            rc = sbx_error_errno(err, e, "cannot create runtime directory '%s'", dir);
            break;
        }
    }
    free(stage);
    free(dir);
    return rc;
}

int sbx__local_unclaimed_mark(int lease_fd, const char *dir, struct sbx_error *err)
{
    int fd = openat(lease_fd, SBX_PROTO_UNCLAIMED,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot create '%s/%s'", dir, SBX_PROTO_UNCLAIMED);
    close(fd);
    return 0;
}

int sbx__local_hand_over(int lease_fd, const char *dir, struct sbx_error *err)
{
    if (unlinkat(lease_fd, SBX_PROTO_UNCLAIMED, 0) < 0)
        return sbx_error_errno(err, errno, "cannot remove '%s/%s'", dir, SBX_PROTO_UNCLAIMED);
    return 0;
}

/* What no reclaim may touch: a sandbox whose supervisor recorded itself and whose create
 * handed it over (no unclaimed marker), so that someone may have put work into it. */
static int claimed(const char *dir)
{
    struct stat st;
    char *record = sbx_xasprintf("%s/%s", dir, SBX_PROTO_RECORD);
    char *mark = sbx_xasprintf("%s/%s", dir, SBX_PROTO_UNCLAIMED);
    int yes = lstat(record, &st) == 0 && lstat(mark, &st) < 0 && errno == ENOENT;
    free(record);
    free(mark);
    return yes;
}

/* The leftovers of one dead create (name: an id, or a staging name), when nobody holds its
 * lease and either no supervisor ever recorded itself in it or the create never handed it over
 * (its supervisor may still run: it is shut down). 1 when it was reclaimed. */
static int reclaim_one(const char *rundir, const char *name)
{
    int staging = strncmp(name, STAGING_PREFIX, sizeof(STAGING_PREFIX) - 1) == 0;
    const char *id = staging ? name + sizeof(STAGING_PREFIX) - 1 : name;
    if (!sbx__local_valid_id(id))
        return 0;
    char *dir = sbx_xasprintf("%s/%s", rundir, name);
    if (staging) {
        /* Always empty (the create renames it before it writes anything): rmdir, under its
         * lease, so that one held by a creator is left alone. */
        int sfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int gone = sfd >= 0 && flock(sfd, LOCK_EX | LOCK_NB) == 0 && rmdir(dir) == 0;
        sbx_fd_close(&sfd);
        free(dir);
        return gone;
    }
    struct stat st;
    json_t *state = NULL;
    int fd = -1, done = 0;
    if (claimed(dir) || lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        goto out;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* Held: a create (or a teardown) is at work on it. Its create may have handed it over
     * before it let go: looked at again under the lease. */
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || claimed(dir))
        goto out;
    struct sbx_error e = SBX_ERROR_INIT;
    if (sbx__local_read_state(dir, id, &state, &e) < 0 ||
        sbx__local_check_state(state, id, &e) < 0) {
        /* Killed before its first state: nothing but the directory was made. */
        json_decref(state);
        state = NULL;
    }
    const char *ws = json_string_value(json_object_get(state, "workspace"));
    int owned = json_is_true(json_object_get(state, "workspace_owned"));
    sbx_error_clear(&e);
    done = sbx__local_stop_and_clean_held(dir, id, ws, owned, json_object_get(state, "disk"), owned,
                                          &e) == 0;
    if (done)
        sbx_log(SBX_LOG_INFO, "sandbox '%s': removed what its killed create left", id);
    else
        sbx_log(SBX_LOG_WARN, "sandbox '%s': cannot remove what its killed create left: %s", id,
                e.msg);
out:
    sbx_fd_close(&fd);
    json_decref(state);
    free(dir);
    return done;
}

/* A runtime directory handed to a release worker (sbx__disk_release_hand_over) that nobody
 * holds: its worker was killed before it removed it. Removed under the lock. */
static void reclaim_gone(const char *rundir, const char *name)
{
    struct stat st;
    char *path = sbx_xasprintf("%s/%s", rundir, name);
    struct sbx_error e = SBX_ERROR_INIT;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
        flock(fd, LOCK_EX | LOCK_NB) == 0 && sbx__fs_remove_tree(path, &e) < 0)
        sbx_log(SBX_LOG_WARN, "cannot remove '%s': %s", path, e.msg);
    sbx_fd_close(&fd);
    free(path);
}

void sbx__local_reclaim(const char *rundir)
{
    DIR *d = opendir(rundir);
    if (!d)
        return;
    struct sbx_strv names, gone;
    sbx_strv_init(&names);
    sbx_strv_init(&gone);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, SBX__RELEASE_GONE_PREFIX, sizeof(SBX__RELEASE_GONE_PREFIX) - 1) == 0)
            sbx_strv_push(&gone, e->d_name);
        else if (e->d_name[0] != '.' ||
                 strncmp(e->d_name, STAGING_PREFIX, sizeof(STAGING_PREFIX) - 1) == 0)
            sbx_strv_push(&names, e->d_name);
    closedir(d);
    for (size_t i = 0; i < gone.n; i++)
        reclaim_gone(rundir, gone.v[i]);
    sbx_strv_release(&gone);
    for (size_t i = 0; i < names.n; i++)
        reclaim_one(rundir, names.v[i]);
    sbx_strv_release(&names);
}
