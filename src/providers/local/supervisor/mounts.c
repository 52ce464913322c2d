/* Storage mounts on the host side of an isolated sandbox (mounts.h, docs/internals/mounts.md).
 * rclone gets its credentials from a 0600 config file in the runtime directory, never from
 * argv or the environment; it is started through the spawn helper with a parent-death signal,
 * so it dies with the supervisor. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/spawn.h"
#include "providers/local/supervisor/logcap.h"
#include "providers/local/supervisor/mounts.h"
#include "sandbox/host/priv.h"
#include "sbx/fs.h"
#include "sbx/common.h"
#include "sbx/time.h"

#define MOUNT_WAIT_MS  20000
#define CHECK_WAIT_MS  20000
#define STOP_WAIT_MS   10000
#define LOG_TAIL_BYTES 4096
#define PUMP_WAIT_MS   2000

static const char *const helper_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};

static const char *find_program(const char *const *candidates)
{
    for (size_t i = 0; candidates[i]; i++)
        if (access(candidates[i], X_OK) == 0)
            return candidates[i];
    return NULL;
}

static const char *rclone_path(void)
{
    static const char *const c[] = {"/usr/bin/rclone", "/usr/local/bin/rclone", "/bin/rclone",
                                    NULL};
    return find_program(c);
}

/* Start prog with argv and the helper environment, stdin and stdout /dev/null, stderr appended
 * to log; it dies with this process (SIGTERM: the supervisor's main thread starts it and lives
 * as long as the process). *out: its pid, the caller reaps it. */
static int spawn(const char *prog, char *const argv[], const char *log, pid_t *out,
                 struct sbx_error *err)
{
    int lf = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lf < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", log);
    struct sbx__spawn sp = {.program = prog,
                            .argv = (const char *const *)argv,
                            .env = helper_env,
                            .parent_death_signal = SIGTERM};
    sp.err = (struct sbx__spawn_stdio){.how = SBX__SPAWN_FD, .fd = lf};
    struct sbx__child c;
    int rc = sbx__spawn_start(&sp, &c, err);
    close(lf);
    if (rc == 0)
        *out = c.pid;
    return rc;
}

/* spawn, with stderr through a pipe to a forked log pump (logcap.h) that writes it to log,
 * rate-limited and rotated: a long-running helper's log stays bounded whatever the sandbox
 * makes it say. *pump: the pump's pid, which ends at EOF, once the helper is gone. */
static int spawn_capped(const char *prog, char *const argv[], const char *log, pid_t *out,
                        pid_t *pump, struct sbx_error *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "cannot make a pipe for '%s'", log);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return sbx_error_errno(err, e, "cannot fork the log writer of '%s'", log);
    }
    if (pid == 0) {
        /* Nothing of the supervisor's stays open here: the report channel's readers wait for
         * every holder to let go. */
        struct sbx__logcap l = {.fd = -1, .max_bytes = SBX__LOGCAP_HELPER_MAX_BYTES};
        if (dup2(p[0], 0) < 0 || syscall(SYS_close_range, 1, ~0U, 0) < 0)
            _exit(1);
        sbx__logcap_pump(0, log, &l);
        _exit(0);
    }
    close(p[0]);
    struct sbx__spawn sp = {.program = prog,
                            .argv = (const char *const *)argv,
                            .env = helper_env,
                            .parent_death_signal = SIGTERM};
    sp.err = (struct sbx__spawn_stdio){.how = SBX__SPAWN_FD, .fd = p[1]};
    struct sbx__child c;
    int rc = sbx__spawn_start(&sp, &c, err);
    close(p[1]);
    *pump = pid;
    if (rc == 0)
        *out = c.pid;
    return rc;
}

/* The last lines of the log at path, on one line, for a message. */
static void log_tail(const char *path, char *out, size_t outsz)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    char buf[LOG_TAIL_BYTES + 1];
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > LOG_TAIL_BYTES ? end - LOG_TAIL_BYTES : 0;
    ssize_t n = pread(fd, buf, LOG_TAIL_BYTES, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    /* The last record, with its continuation lines: rclone starts each record with a
     * "YYYY/MM/DD HH:MM:SS " timestamp, which is left out. */
    char *line = buf;
    for (char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strlen(p) > 20 && p[4] == '/' && p[7] == '/' && p[13] == ':')
            line = p;
    if (strlen(line) > 20 && line[4] == '/' && line[7] == '/')
        line += 20;
    size_t k = 0;
    for (; *line && k + 1 < outsz; line++) {
        /* URLs in rclone's errors carry a SAS signature (Azure with an endpoint): cut it. */
        if (strncmp(line, "sig=", 4) == 0 && k + 5 < outsz) {
            memcpy(out + k, "sig=*", 5);
            k += 5;
            line += 3;
            while (line[1] && !strchr("&\" \n", line[1]))
                line++;
            continue;
        }
        if (!(k && out[k - 1] == ' ' && ((unsigned char)*line <= 0x20)))
            out[k++] = (unsigned char)*line < 0x20 ? ' ' : *line;
    }
    out[k] = '\0';
}

static int is_mounted(const char *path)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return 0;
    char line[4096];
    int found = 0;
    size_t plen = strlen(path);
    while (!found && fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint ... */
        char *p = line;
        for (int field = 0; field < 4 && p; field++) {
            p = strchr(p, ' ');
            if (p)
                p++;
        }
        found = p && strncmp(p, path, plen) == 0 && p[plen] == ' ';
    }
    fclose(f);
    return found;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Which of base/0 .. base/(n-1) are mount points, from one read of the mount table: a
 * teardown asks about every slot, and the table grows with every sandbox on the host. */
static void mounted_slots(const char *base, int *mounted, size_t n)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char line[4096];
    size_t blen = strlen(base);
    while (fgets(line, sizeof(line), f)) {
        char *p = line;
        for (int field = 0; field < 4 && p; field++) {
            p = strchr(p, ' ');
            if (p)
                p++;
        }
        if (!p || strncmp(p, base, blen) != 0 || p[blen] != '/')
            continue;
        char *end;
        unsigned long i = strtoul(p + blen + 1, &end, 10);
        if (end != p + blen + 1 && *end == ' ' && i < n)
            mounted[i] = 1;
    }
    fclose(f);
}

static void detach_mounted(const char *path)
{
    if (sbx__priv_umount(path, MNT_DETACH) == 0 || errno != EPERM)
        return;
    /* Unprivileged: the setuid helper that made the mount undoes it. */
    static const char *const c[] = {"/usr/bin/fusermount3", "/bin/fusermount3",
                                    "/usr/bin/fusermount", NULL};
    const char *fm = find_program(c);
    if (!fm)
        return;
    char *argv[] = {(char *)fm, "-u", "-z", (char *)path, NULL};
    struct sbx_error e = SBX_ERROR_INIT;
    pid_t pid;
    if (spawn(fm, argv, "/dev/null", &pid, &e) == 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
}

static void detach_one(const char *path)
{
    if (is_mounted(path))
        detach_mounted(path);
}

/* Wait for pid to exit within ms; 1 with *status when it did, 0 when it is still running. */
static int wait_exit(pid_t pid, long ms, int *status)
{
    for (long t = 0;; t += 20) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD))
            return 1;
        if (t >= ms)
            return 0;
        sleep_ms(20);
    }
}

/* The remote's config (credentials included) into a 0600 file of the runtime directory: rclone
 * never gets them in argv or the environment. */
static int write_config(const char *conf, const struct sbx__local_config_mount *m,
                        struct sbx_error *err)
{
    int fd = open(conf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "entry %s: cannot write the rclone config", m->entry);
    int rc = sbx_fd_write_all(fd, m->config, strlen(m->config), err);
    close(fd);
    return rc;
}

/* Can the remote be listed (endpoint, credentials, bucket)? rclone's answer within
 * CHECK_WAIT_MS, its last log line when it is no. */
static int check_remote(const char *rclone, const char *conf, const char *log,
                        const struct sbx__local_config_mount *m, struct sbx_error *err)
{
    char *argv[] = {
            (char *)rclone, "--config",  (char *)conf, "--contimeout",        "5s", "--timeout",
            "10s",          "--retries", "1",          "--low-level-retries", "1",  "lsjson",
            "--stat",       m->check,    NULL};
    char tail[512];
    int st = 0;
    pid_t pid;
    if (spawn(rclone, argv, log, &pid, err) < 0)
        return -1;
    if (!wait_exit(pid, CHECK_WAIT_MS, &st)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return sbx_error_set(err, SBX_E_TIMEOUT, 0,
                             "entry %s: the storage did not answer within %d s (check the "
                             "endpoint)",
                             m->entry, CHECK_WAIT_MS / 1000);
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    log_tail(log, tail, sizeof(tail));
    return sbx_error_set(err, SBX_E_SANDBOX, 0,
                         "entry %s: cannot list '%s' (check the endpoint, the credentials "
                         "and the bucket): %s",
                         m->entry, m->check, tail[0] ? tail : "rclone failed");
}

/* `rclone mount` of m's remote at mp->staging, with its cache under cache. */
static int start_mount(const char *rclone, const char *conf, const char *log, const char *cache,
                       struct sbx__mount_proc *mp, const struct sbx__local_config_mount *m,
                       struct sbx_error *err)
{
    char *argv[40];
    size_t a = 0;
    argv[a++] = (char *)rclone;
    argv[a++] = "--config";
    argv[a++] = (char *)conf;
    argv[a++] = "--log-level";
    argv[a++] = "NOTICE";
    argv[a++] = "mount";
    argv[a++] = m->remote;
    argv[a++] = mp->staging;
    argv[a++] = "--contimeout";
    argv[a++] = "5s";
    argv[a++] = "--dir-cache-time";
    argv[a++] = "5s";
    argv[a++] = "--poll-interval";
    argv[a++] = "0";
    argv[a++] = "--attr-timeout";
    argv[a++] = "1s";
    argv[a++] = "--umask";
    argv[a++] = "022";
    argv[a++] = "--cache-dir";
    argv[a++] = (char *)cache;
    if (geteuid() == 0)
        argv[a++] = "--allow-other";
    if (m->writable) {
        /* No write cache: a file is uploaded while it is written and close() returns once the
         * object is in the bucket, so nothing is lost when the sandbox goes right after (a
         * cached write still uploading would be cut off by the teardown). The price: files are
         * written front to back, not rewritten in place. */
        argv[a++] = "--vfs-cache-mode";
        argv[a++] = "off";
    } else {
        argv[a++] = "--read-only";
    }
    argv[a] = NULL;
    if (spawn_capped(rclone, argv, log, &mp->pid, &mp->pump, err) < 0) {
        mp->pid = 0;
        return -1;
    }
    return 0;
}

/* The log pump ends at EOF, once rclone is gone; a pump that does not is killed. */
static void stop_pump(struct sbx__mount_proc *mp)
{
    if (mp->pump <= 0)
        return;
    if (!wait_exit(mp->pump, PUMP_WAIT_MS, NULL)) {
        kill(mp->pump, SIGKILL);
        waitpid(mp->pump, NULL, 0);
    }
    mp->pump = 0;
}

/* Until rclone is up (the staging point is mounted), or rclone ended, or MOUNT_WAIT_MS passed. */
static int wait_mounted(struct sbx__mount_proc *mp, const char *log,
                        const struct sbx__local_config_mount *m, struct sbx_error *err)
{
    char tail[512];
    int st = 0;
    for (long t = 0; !is_mounted(mp->staging); t += 20) {
        if (wait_exit(mp->pid, 0, &st)) {
            mp->pid = 0;
            /* rclone's last words are in the pipe until the pump wrote them. */
            stop_pump(mp);
            log_tail(log, tail, sizeof(tail));
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "entry %s: rclone mount failed: %s",
                                 m->entry, tail[0] ? tail : "it exited");
        }
        if (t >= MOUNT_WAIT_MS)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0,
                                 "entry %s: the mount was not ready within %d s", m->entry,
                                 MOUNT_WAIT_MS / 1000);
        sleep_ms(20);
    }
    return 0;
}

static int start_one(struct sbx__mount_proc *mp, const char *dir, size_t i,
                     const struct sbx__local_config_mount *m, struct sbx_error *err)
{
    const char *rclone = rclone_path();
    if (!rclone)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "entry %s: rclone is not installed (apt-get install rclone fuse3)",
                             m->entry);
    /* fusermount3 opens the device as the caller: a 0600 /dev/fuse means no FUSE for users. */
    if (access("/dev/fuse", R_OK | W_OK) < 0)
        return sbx_error_errno(err, errno,
                               "entry %s: FUSE is not available to this user ('/dev/fuse' must be "
                               "readable and writable, mode 0666, for mounts without root)",
                               m->entry);
    char *conf = sbx_xasprintf("%s/mounts/%zu.conf", dir, i);
    char *log = sbx_xasprintf("%s/mounts/%zu.log", dir, i);
    char *cache = sbx_xasprintf("%s/mounts/%zu.cache", dir, i);
    mp->staging = sbx_xasprintf("%s/mounts/%zu", dir, i);
    int rc = write_config(conf, m, err);
    if (rc == 0 && mkdir(mp->staging, 0700) < 0)
        rc = sbx_error_errno(err, errno, "entry %s: cannot create '%s'", m->entry, mp->staging);
    if (rc == 0)
        rc = check_remote(rclone, conf, log, m, err);
    if (rc == 0)
        rc = start_mount(rclone, conf, log, cache, mp, m, err);
    if (rc == 0)
        rc = wait_mounted(mp, log, m, err);
    free(conf);
    free(log);
    free(cache);
    return rc;
}

static void stop_one(struct sbx__mount_proc *mp)
{
    if (mp->pid > 0) {
        kill(mp->pid, SIGTERM);
        if (!wait_exit(mp->pid, STOP_WAIT_MS, NULL)) {
            kill(mp->pid, SIGKILL);
            waitpid(mp->pid, NULL, 0);
        }
        mp->pid = 0;
    }
    stop_pump(mp);
    if (mp->staging)
        detach_one(mp->staging);
}

int sbx__mounts_start(struct sbx__mounts *ms, const char *dir,
                      const struct sbx__local_config_mount *cfg, size_t n, struct sbx_error *err)
{
    if (!n)
        return 0;
    char *mdir = sbx_xasprintf("%s/mounts", dir);
    int rc = mkdir(mdir, 0700) < 0 && errno != EEXIST
                     ? sbx_error_errno(err, errno, "cannot create '%s'", mdir)
                     : 0;
    free(mdir);
    if (rc < 0)
        return rc;
    ms->v = sbx_xcalloc(n, sizeof(*ms->v));
    for (size_t i = 0; i < n && rc == 0; i++) {
        ms->n = i + 1;
        rc = start_one(&ms->v[i], dir, i, &cfg[i], err);
    }
    if (rc < 0)
        sbx__mounts_stop(ms);
    return rc;
}

void sbx__mounts_detach(struct sbx__mounts *ms)
{
    for (size_t i = 0; i < ms->n; i++)
        if (ms->v[i].staging)
            detach_one(ms->v[i].staging);
}

void sbx__mounts_stop(struct sbx__mounts *ms)
{
    for (size_t i = 0; i < ms->n; i++) {
        stop_one(&ms->v[i]);
        free(ms->v[i].staging);
    }
    free(ms->v);
    ms->v = NULL;
    ms->n = 0;
}

void sbx__mounts_forget(struct sbx__mounts *ms)
{
    for (size_t i = 0; i < ms->n; i++)
        free(ms->v[i].staging);
    free(ms->v);
    ms->v = NULL;
    ms->n = 0;
}

void sbx__mounts_cleanup_dir(const char *dir)
{
    int mounted[SBX__LOCAL_CONFIG_MAX_MOUNTS] = {0};
    char *base = sbx_xasprintf("%s/mounts", dir);
    struct stat st;
    /* No mounts directory: the sandbox never started a storage mount. */
    if (lstat(base, &st) == 0 && S_ISDIR(st.st_mode))
        mounted_slots(base, mounted, SBX__LOCAL_CONFIG_MAX_MOUNTS);
    for (size_t i = 0; i < SBX__LOCAL_CONFIG_MAX_MOUNTS; i++) {
        if (!mounted[i])
            continue;
        char *p = sbx_xasprintf("%s/%zu", base, i);
        detach_mounted(p);
        free(p);
    }
    free(base);
}
