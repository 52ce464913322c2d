/* Workspace size limits: an ext4 image per sandbox, loop-mounted at the workspace (disk.h). */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <linux/loop.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "core/spawn.h"
#include "providers/local/client/disk.h"
#include "providers/local/local.h"
#include "sandbox/host/priv.h"
#include "sbx/common.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/time.h"

#define TOOL_OUTPUT_MAX 512
/* A free loop device may be busy for a moment: another process configuring it, or holding it
 * open exclusively (a udev probe, a mount in progress). LOOP_CTL_GET_FREE then hands out the
 * same device again, so attempts are spread in time: 5 ms doubling to 250 ms between them,
 * for up to 30 s in all. */
#define LOOP_BUSY_FIRST_MS   5
#define LOOP_BUSY_MAX_MS     250
#define LOOP_BUSY_BUDGET_MS  30000
#define KEPT_SUFFIX          ".kept"
#define LOOP_RELEASE_POLLS   500 /* 5 s */
#define LOOP_RELEASE_POLL_MS 10
#define EXT4_MOUNT_FLAGS     (MS_NOSUID | MS_NODEV)
/* No zeroing of inode tables after mounting (it would write, and allocate on the host, about 2% of
 * the limit per sandbox); freed blocks are discarded, which punches holes in the image, so the
 * host gets back what the sandbox deletes. */
#define EXT4_MOUNT_DATA "noinit_itable,discard"

static char *const tool_env[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C",
                                 NULL};

static const char *find_tool(const char *const *candidates)
{
    for (; *candidates; candidates++)
        if (access(*candidates, X_OK) == 0)
            return *candidates;
    return NULL;
}

static const char *const mke2fs_paths[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs", NULL};
static const char *const cp_paths[] = {"/usr/bin/cp", "/bin/cp", NULL};

/* Run a tool with an empty stdin and an environment of our own; the first line of what it
 * said (on stderr, else stdout) goes into the error when it fails. */
static int run_tool(const char *path, char *const argv[], struct sbx_error *err)
{
    struct sbx_buf out, errout;
    struct sbx__spawn_capture cap = {.out = &out, .err = &errout};
    struct sbx__spawn sp = {.program = path,
                            .argv = (const char *const *)argv,
                            .env = (const char *const *)tool_env};
    sp.out.how = sp.err.how = SBX__SPAWN_PIPE;
    sbx_buf_init(&out, TOOL_OUTPUT_MAX);
    sbx_buf_init(&errout, TOOL_OUTPUT_MAX);
    int rc = sbx__spawn_run(&sp, -1, &cap, err);
    if (rc == 0 && (!WIFEXITED(cap.status) || WEXITSTATUS(cap.status) != 0)) {
        char *msg = errout.len ? errout.data : out.data, how[32];
        msg[strcspn(msg, "\n")] = '\0';
        sbx__spawn_describe(cap.status, how, sizeof(how));
        rc = sbx_error_set(err, SBX_E_IO, 0, "'%s' failed (%s)%s%s", argv[0], how,
                           msg[0] ? ": " : "", msg);
    }
    sbx_buf_release(&out);
    sbx_buf_release(&errout);
    return rc;
}

int sbx__disk_usable(struct sbx_error *err)
{
    if (geteuid() != 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a disk image needs root (loop devices and mounts)");
    if (access("/dev/loop-control", R_OK | W_OK) < 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, errno, "no usable '/dev/loop-control'");
    if (!find_tool(mke2fs_paths))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "mke2fs is not installed (Debian package e2fsprogs)");
    return 0;
}

/* Bind image to a free loop device, detached automatically at the last close or unmount.
 * *fd_out: the open device; *loop_out: its path. */
static int loop_attach(const char *image, int *fd_out, char **loop_out, struct sbx_error *err)
{
    int ctl = -1, ifd = -1, lfd = -1, rc = 0;
    char *dev = NULL;
    ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return sbx_error_errno(err, errno, "cannot open '/dev/loop-control'");
    ifd = open(image, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (ifd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open disk image '%s'", image);
        goto out;
    }
    /* Another process may take the same free device between the two calls: then retry. */
    int64_t deadline = sbx_deadline_after_ms(LOOP_BUSY_BUDGET_MS);
    int64_t pause_ms = LOOP_BUSY_FIRST_MS;
    for (int attempt = 0;; attempt++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0) {
            rc = sbx_error_errno(err, errno, "no free loop device");
            goto out;
        }
        free(dev);
        dev = sbx_xasprintf("/dev/loop%d", n);
        lfd = open(dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0) {
            rc = sbx_error_errno(err, errno, "cannot open '%s'", dev);
            goto out;
        }
        struct loop_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.fd = (unsigned)ifd;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), "%s", image);
        int r = ioctl(lfd, LOOP_CONFIGURE, &cfg);
        if (r < 0 && (errno == EINVAL || errno == ENOTTY)) {
            /* Linux < 5.8: the two-step form. */
            r = ioctl(lfd, LOOP_SET_FD, ifd);
            if (r == 0 && ioctl(lfd, LOOP_SET_STATUS64, &cfg.info) < 0) {
                int e = errno;
                ioctl(lfd, LOOP_CLR_FD, 0);
                errno = e;
                r = -1;
            }
        }
        if (r == 0)
            break;
        int e = errno;
        sbx_fd_close(&lfd);
        if (e != EBUSY || sbx_deadline_poll_ms(deadline) == 0) {
            rc = e == EBUSY ? sbx_error_errno(err, e,
                                              "cannot attach disk image '%s': '%s' stayed busy "
                                              "through %d attempts in %d s",
                                              image, dev, attempt + 1, LOOP_BUSY_BUDGET_MS / 1000)
                            : sbx_error_errno(err, e, "cannot attach disk image '%s' to '%s'",
                                              image, dev);
            goto out;
        }
        sbx_sleep_ms(pause_ms);
        pause_ms = pause_ms * 2 > LOOP_BUSY_MAX_MS ? LOOP_BUSY_MAX_MS : pause_ms * 2;
    }
    *fd_out = lfd;
    lfd = -1;
    *loop_out = dev;
    dev = NULL;
out:
    sbx_fd_close(&lfd);
    sbx_fd_close(&ifd);
    sbx_fd_close(&ctl);
    free(dev);
    return rc;
}

/* Attach image and mount it at ws. The loop device goes away with the mount. */
static int mount_image(const char *image, const char *ws, char **loop_out, struct sbx_error *err)
{
    int lfd = -1;
    char *dev = NULL;
    int rc = loop_attach(image, &lfd, &dev, err);
    if (rc < 0)
        return rc;
    if (sbx__priv_mount_dev(dev, ws, "ext4", EXT4_MOUNT_FLAGS, EXT4_MOUNT_DATA) < 0) {
        rc = sbx_error_errno(err, errno, "cannot mount disk image '%s' at '%s'", image, ws);
        free(dev);
    } else if (loop_out) {
        *loop_out = dev;
    } else {
        free(dev);
    }
    sbx_fd_close(&lfd); /* autoclear: with no mount, this detaches the device */
    return rc;
}

int sbx__disk_attach(const char *image, const char *ws, uint64_t bytes, char **loop_out,
                     struct sbx_error *err)
{
    const char *mke2fs = find_tool(mke2fs_paths);
    char owner[64], *dev = NULL;
    int rc = 0, created = 0;
    if (!mke2fs)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "mke2fs is not installed (Debian package e2fsprogs)");
    if (bytes > (uint64_t)INT64_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "disk size %llu is too large",
                             (unsigned long long)bytes);
    int fd = open(image, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot create disk image '%s'", image);
    created = 1;
    if (ftruncate(fd, (off_t)bytes) < 0)
        rc = sbx_error_errno(err, errno, "cannot size disk image '%s'", image);
    sbx_fd_close(&fd);
    if (rc < 0)
        goto out;
    /* Lazy inode tables and journal: mke2fs writes a few MiB of metadata, not the whole table;
     * no reserved blocks (the sandbox gets the whole limit); nodiscard: the file is all hole. */
    snprintf(owner, sizeof(owner),
             "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=%u:%u",
             (unsigned)geteuid(), (unsigned)getegid());
    char *const argv[] = {(char *)"mke2fs", (char *)"-q",   (char *)"-F",
                          (char *)"-t",     (char *)"ext4", (char *)"-m",
                          (char *)"0",      (char *)"-E",   owner,
                          (char *)"--",     (char *)image,  NULL};
    rc = run_tool(mke2fs, argv, err);
    if (rc < 0)
        goto out;
    rc = mount_image(image, ws, &dev, err);
    if (rc < 0)
        goto out;
    /* mke2fs's lost+found would be the first thing in every workspace listing. */
    char *lf = sbx_xasprintf("%s/lost+found", ws);
    (void)rmdir(lf);
    free(lf);
    *loop_out = dev;
out:
    if (rc < 0) {
        if (created)
            unlink(image);
        sbx_error_prefix(err, "workspace disk limit");
    }
    return rc;
}

/* Is the file system at ws the loop device backed by image? */
static int mounted_from(const char *ws, const char *image)
{
    struct stat st, pst;
    char *parent = sbx_xasprintf("%s/..", ws);
    int ok = stat(ws, &st) == 0 && stat(parent, &pst) == 0 && st.st_dev != pst.st_dev &&
             major(st.st_dev) == 7; /* LOOP_MAJOR */
    free(parent);
    if (!ok)
        return 0;
    char sys[128];
    snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u/loop/backing_file", major(st.st_dev),
             minor(st.st_dev));
    struct sbx_buf b;
    sbx_buf_init(&b, PATH_MAX + 64);
    int match = 0;
    if (sbx_fs_read_path(sys, PATH_MAX + 32, &b, NULL) == 0) {
        while (b.len && b.data[b.len - 1] == '\n')
            b.data[--b.len] = '\0';
        size_t n = strlen(image);
        match = strcmp(b.data, image) == 0 ||
                (strncmp(b.data, image, n) == 0 && strcmp(b.data + n, " (deleted)") == 0);
        /* The real path (a readlink per component) only when the image is not named as given. */
        char *real = match ? NULL : realpath(image, NULL);
        match = match || (real && strcmp(b.data, real) == 0);
        free(real);
    }
    sbx_buf_release(&b);
    return match;
}

/* Is loop ("/dev/loopN") still bound to image? */
static int loop_bound(const char *loop, const char *image)
{
    unsigned n;
    char tail;
    if (!loop || sscanf(loop, "/dev/loop%u%c", &n, &tail) != 1)
        return 0;
    char sys[128];
    snprintf(sys, sizeof(sys), "/sys/block/loop%u/loop/backing_file", n);
    struct sbx_buf b;
    sbx_buf_init(&b, PATH_MAX + 64);
    int bound = 0;
    if (sbx_fs_read_path(sys, PATH_MAX + 32, &b, NULL) == 0) {
        while (b.len && b.data[b.len - 1] == '\n')
            b.data[--b.len] = '\0';
        size_t k = strlen(image);
        bound = strncmp(b.data, image, k) == 0 && (b.data[k] == '\0' || b.data[k] == ' ');
    }
    sbx_buf_release(&b);
    return bound;
}

/* After the unmount the device detaches itself (autoclear) once the file system's last user
 * is gone: the supervisor's host-side process may still hold a detached clone of the mount for
 * a moment while it exits. Wait for that (bounded), then let go of a device someone keeps
 * open. */
static void loop_release(const char *loop, const char *image)
{
    for (int i = 0; i < LOOP_RELEASE_POLLS && loop_bound(loop, image); i++)
        poll(NULL, 0, LOOP_RELEASE_POLL_MS);
    if (loop_bound(loop, image)) {
        int fd = open(loop, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)ioctl(fd, LOOP_CLR_FD, 0);
            close(fd);
        }
    }
}

int sbx__disk_detach(const char *image, const char *loop, const char *ws, int keep_files,
                     struct sbx_error *err)
{
    char *kept = NULL;
    int rc = 0, copied = 0;
    struct stat st;
    if (!image || image[0] != '/' || !ws || ws[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "disk image '%s' or workspace '%s' is not absolute",
                             image ? image : "", ws ? ws : "");
    int mounted = mounted_from(ws, image);
    if (!mounted && keep_files && lstat(image, &st) == 0 && S_ISREG(st.st_mode)) {
        /* The mount went (a reboot) but the files are in the image: mount it to copy them. */
        rc = mount_image(image, ws, NULL, err);
        if (rc < 0)
            goto out;
        mounted = 1;
    }
    if (mounted && keep_files) {
        const char *cp = find_tool(cp_paths);
        kept = sbx_xasprintf("%s" KEPT_SUFFIX, ws);
        if (lstat(kept, &st) == 0) {
            /* Left by an earlier attempt that failed half-way: ours to replace. */
            if ((rc = sbx__fs_remove_tree(kept, err)) < 0)
                goto out;
        }
        if (!cp) {
            rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "no 'cp' program");
            goto out;
        }
        if (mkdir(kept, 0700) < 0) {
            rc = sbx_error_errno(err, errno, "cannot create '%s'", kept);
            goto out;
        }
        char *src = sbx_xasprintf("%s/.", ws);
        /* -a: symlinks as symlinks (never followed), modes, owners, times, hard links. */
        char *const argv[] = {(char *)"cp",
                              (char *)"-a",
                              (char *)"--sparse=always",
                              (char *)"--no-target-directory",
                              (char *)"--",
                              src,
                              kept,
                              NULL};
        rc = run_tool(cp, argv, err);
        free(src);
        if (rc < 0) {
            sbx_error_prefix(err, "copying the workspace out of its disk image into '%s'", kept);
            goto out;
        }
        copied = 1;
    }
    if (mounted && sbx__priv_umount(ws, UMOUNT_NOFOLLOW) < 0) {
        /* Still busy (a process of a dying sandbox): detach it now, the kernel frees it when the
         * last user goes; the path is free for the kept copy either way. */
        if (errno != EBUSY || sbx__priv_umount(ws, UMOUNT_NOFOLLOW | MNT_DETACH) < 0) {
            rc = sbx_error_errno(err, errno, "cannot unmount the workspace disk '%s'", ws);
            goto out;
        }
    }
    loop_release(loop, image);
    if (copied && rename(kept, ws) < 0) {
        rc = sbx_error_errno(err, errno, "cannot move the kept workspace '%s' to '%s'", kept, ws);
        goto out;
    }
    if (unlink(image) < 0 && errno != ENOENT)
        rc = sbx_error_errno(err, errno, "cannot remove disk image '%s'", image);
out:
    free(kept);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Releasing the disk off the caller's path */

#define RELEASE_DIR     ".sbx-release"
#define RELEASE_OLD_S   600 /* a file left there this long has lost its helper: removed */
#define RELEASE_WAIT_MS 10000
/* The release worker's descriptors: its hold, its gate, the directory it may be handed, and the
 * first one it does not keep. */
#define RELEASE_FD_HOLD 3
#define RELEASE_FD_GATE 4
#define RELEASE_FD_ALSO 5
#define RELEASE_FD_FREE 6

/* <dir of image>/.sbx-release, made when missing; a file there older than RELEASE_OLD_S (its
 * helper was killed, the host rebooted) is removed. Caller frees. */
static char *release_dir(const char *image)
{
    const char *slash = strrchr(image, '/');
    char *dir = sbx_xasprintf("%.*s/" RELEASE_DIR, (int)(slash - image), image);
    if (mkdir(dir, 0700) == 0)
        return dir; /* made just now: nothing old in it */
    if (errno != EEXIST) {
        free(dir);
        return NULL;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        free(dir);
        return NULL;
    }
    struct dirent *e;
    struct stat st;
    time_t now = time(NULL);
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode) && now - st.st_ctime > RELEASE_OLD_S)
            (void)unlinkat(fd, e->d_name, 0);
    closedir(d);
    return dir;
}

/* What the release worker needs, all of it made before the fork: the worker, a copy of a
 * process that may have had other threads, calls only async-signal-safe functions (no
 * allocation, no stdio). */
struct release_job {
    int hold;      /* O_PATH descriptor on the detached workspace mount */
    int gate;      /* read end of a pipe: end of file once the caller let go of its hold */
    int devnull;   /* for the worker's standard descriptors */
    int also;      /* the directory prepare was given (-1: none), renamed to gone if handed */
    char sys[64];  /* /sys/block/loopN/loop/backing_file, or "" */
    char loop[32]; /* /dev/loopN, or "" */
    char trash[PATH_MAX];
    char dir[PATH_MAX];
    char gone[PATH_MAX]; /* a directory of files handed over (hand_over), or "" */
};

/* The loop device still backs the renamed image (async-signal-safe loop_bound). */
static int job_loop_bound(const struct release_job *j)
{
    char buf[PATH_MAX + 64];
    int fd = open(j->sys, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n, len = 0;
    while (len < (ssize_t)sizeof(buf) - 1 &&
           ((n = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0 ||
            (n < 0 && errno == EINTR)))
        if (n > 0)
            len += n;
    close(fd);
    while (len && buf[len - 1] == '\n')
        len--;
    buf[len] = '\0';
    size_t k = strlen(j->trash);
    return strncmp(buf, j->trash, k) == 0 && (buf[k] == '\0' || buf[k] == ' ');
}

/* When the directory open at fd was handed over (it is now at j->gone): remove the files in it
 * (it has no subdirectory: hand_over made sure) and then it, without allocating: its entries
 * are read with getdents64 into a buffer on the stack and unlinked without following anything.
 * Entries unlinked while reading may make a read skip others: the directory is read again
 * until a pass finds nothing (bounded). Not handed over, it is left to the caller. */
static void job_remove_gone(const struct release_job *j, int fd)
{
    struct stat a, b;
    if (!j->gone[0] || fstat(fd, &a) < 0 || lstat(j->gone, &b) < 0 || a.st_ino != b.st_ino ||
        a.st_dev != b.st_dev)
        return;
    char buf[4096] __attribute__((aligned(8)));
    for (int pass = 0, found = 1; found && pass < 8; pass++) {
        found = 0;
        ssize_t n;
        (void)lseek(fd, 0, SEEK_SET);
        while ((n = getdents64(fd, buf, sizeof(buf))) > 0) {
            for (ssize_t off = 0; off < n;) {
                const struct dirent64 *d = (const void *)(buf + off);
                off += d->d_reclen;
                if (strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0 &&
                    unlinkat(fd, d->d_name, 0) == 0)
                    found = 1;
            }
        }
    }
    (void)rmdir(j->gone);
}

/* The worker: standard descriptors on /dev/null, every other descriptor but its own closed; a
 * shared flock on the directory it may be handed; it waits for the caller to let go (end of
 * file on the gate), takes the default signal dispositions, removes that directory when it was
 * handed over, closes the last hold (the file system ends here: the journal flush), waits for the
 * loop device as loop_release does, unlinks the image and removes the directory when it is the last
 * one out. */
static _Noreturn void release_worker(const struct release_job *j)
{
    /* The hold and the gate move to fds 3 and 4 (through copies above both, since either may
     * be 3 or 4 already), so that one close_range closes all the rest. */
    int hold = fcntl(j->hold, F_DUPFD, RELEASE_FD_FREE),
        gate = fcntl(j->gate, F_DUPFD, RELEASE_FD_FREE),
        also = j->also >= 0 ? fcntl(j->also, F_DUPFD, RELEASE_FD_FREE) : -1;
    for (int fd = 0; fd < 3; fd++)
        (void)dup2(j->devnull, fd);
    if (hold < 0 || gate < 0 || dup2(hold, RELEASE_FD_HOLD) < 0 || dup2(gate, RELEASE_FD_GATE) < 0)
        _exit(1); /* the caller's gate then ends at our exit: the kernel frees the mount */
    hold = RELEASE_FD_HOLD;
    gate = RELEASE_FD_GATE;
    also = also >= 0 && dup2(also, RELEASE_FD_ALSO) >= 0 ? RELEASE_FD_ALSO : -1;
    if (syscall(SYS_close_range, (unsigned)RELEASE_FD_FREE, ~0u, 0u) < 0)
        for (int fd = RELEASE_FD_FREE; fd < 4096; fd++)
            (void)close(fd);
    /* Shared, like the caller's own lease on it: a reclaim (exclusive) leaves it alone while
     * this process lives. */
    if (also >= 0)
        (void)flock(also, LOCK_SH | LOCK_NB);
    /* Every signal is blocked until the gate opens (start_worker forks with all of them
     * blocked), so the caller's handlers cannot run here; their reset to the defaults waits
     * for the gate too, to keep this process's work off the caller's path. */
    char c;
    ssize_t n;
    while ((n = read(gate, &c, 1)) > 0 || (n < 0 && errno == EINTR))
        ;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    close(gate);
    if (also >= 0) {
        job_remove_gone(j, also);
        close(also);
    }
    close(hold);
    for (int i = 0; j->sys[0] && i < LOOP_RELEASE_POLLS && job_loop_bound(j); i++)
        poll(NULL, 0, LOOP_RELEASE_POLL_MS);
    if (j->sys[0] && job_loop_bound(j)) {
        int fd = open(j->loop, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)ioctl(fd, LOOP_CLR_FD, 0);
            close(fd);
        }
    }
    (void)unlink(j->trash);
    (void)rmdir(j->dir); /* the last one out: a directory another removal still uses stays */
    _exit(0);
}

/* The first child: it shares the caller's memory (the caller is suspended until it exits), so
 * it copies nothing itself; it starts a session of its own and forks the worker with the bare
 * system call (no fork handlers run in memory it shares with the caller's other threads). */
struct first_arg {
    const struct release_job *job;
    int gate_w;
};

static int release_first(void *p)
{
    const struct first_arg *a = p;
    (void)setsid();
    long worker = syscall(SYS_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, NULL);
    if (worker == 0)
        release_worker(a->job);
    /* Our copies go before we exit: the hold first, so that the worker (which waits for every
     * write end of the gate) is the last holder. */
    close(a->job->hold);
    close(a->gate_w);
    _exit(worker < 0 ? 1 : 0);
}

#define RELEASE_STACK (64 << 10)

/* Start the worker, in a session of its own, through a first child that exits at once (no
 * zombie is left to the caller, who reaps that first child here). 0 when the worker runs and
 * holds its copies of the hold and the gate; -1 when it could not start (nothing holds then
 * but the caller). */
static int start_worker(const struct release_job *j, int gate_w)
{
    struct first_arg arg = {.job = j, .gate_w = gate_w};
    pid_t first = -1;
    /* Both children start with every signal blocked: the worker keeps them so until its gate
     * opens (release_worker). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (SBX__SANITIZED) {
        first = fork(); /* a plain fork for the first child (core/spawn.h) */
        if (first == 0)
            release_first(&arg);
    } else {
        char *stack = mmap(NULL, RELEASE_STACK, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack != MAP_FAILED) {
            first = clone(release_first, stack + RELEASE_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD,
                          &arg);
            munmap(stack, RELEASE_STACK);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (first < 0)
        return -1;
    int status = 0;
    while (waitpid(first, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The image's unlink and the file system's last unmount, whose journal flush and extent
 * freeing are most of a removal's time, move to a worker process. Prepare forks it, holding the
 * mounted file system through an O_PATH descriptor and the read end of a gate, with the name the
 * image will have in the release directory; detach then renames the image to that name (its
 * own name is free at once) and detaches the mount lazily. The caller keeps the gate's write
 * end until sbx__disk_release_end: the worker, which waits for its end of file, then closes the
 * last hold (the file system ends in the worker), waits for the loop device to detach and
 * unlinks the image. A worker whose image was never renamed finds nothing of its name and only
 * lets go of its hold. */
int sbx__disk_release_prepare(const char *image, const char *loop, const char *ws, const char *also,
                              struct sbx__disk_release *r)
{
    *r = (struct sbx__disk_release){.gate = -1};
    if (!image || image[0] != '/' || !ws || ws[0] != '/' || !mounted_from(ws, image))
        return 0;
    char rnd[17], *dir = NULL;
    int hold = open(ws, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), gate[2] = {-1, -1};
    struct sbx_error e = SBX_ERROR_INIT;
    struct release_job *job = sbx_xcalloc(1, sizeof(*job));
    unsigned n;
    char tail;
    job->devnull = job->also = -1;
    if (hold < 0 || sbx_random_hex(rnd, 8, &e) < 0 || !(dir = release_dir(image)))
        goto none;
    const char *base = strrchr(image, '/') + 1;
    if ((size_t)snprintf(job->trash, sizeof(job->trash), "%s/%s-%s", dir, base, rnd) >=
        sizeof(job->trash))
        goto none;
    snprintf(job->dir, sizeof(job->dir), "%s", dir);
    const char *aslash = also && also[0] == '/' ? strrchr(also, '/') : NULL;
    if (aslash && aslash[1] &&
        (size_t)snprintf(job->gone, sizeof(job->gone), "%.*s/" SBX__RELEASE_GONE_PREFIX "%s-%s",
                         (int)(aslash - also), also, aslash + 1, rnd) >= sizeof(job->gone))
        job->gone[0] = '\0';
    if (job->gone[0] &&
        (job->also = open(also, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        job->gone[0] = '\0';
    if (loop && sscanf(loop, "/dev/loop%u%c", &n, &tail) == 1) {
        snprintf(job->sys, sizeof(job->sys), "/sys/block/loop%u/loop/backing_file", n);
        snprintf(job->loop, sizeof(job->loop), "/dev/loop%u", n);
    }
    job->hold = hold;
    job->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (job->devnull < 0 || pipe2(gate, O_CLOEXEC) < 0)
        goto none;
    job->gate = gate[0];
    if (start_worker(job, gate[1]) < 0)
        goto none;
    /* The worker holds the file system now, and waits for our gate. */
    r->gate = gate[1];
    r->image = sbx_xstrdup(image);
    r->ws = sbx_xstrdup(ws);
    r->loop = loop ? sbx_xstrdup(loop) : NULL;
    r->trash = sbx_xstrdup(job->trash);
    if (job->gone[0]) {
        r->also = sbx_xstrdup(also);
        r->gone = sbx_xstrdup(job->gone);
    }
    r->dir = dir;
    dir = NULL;
    gate[1] = -1;
none:
    sbx_fd_close(&gate[0]);
    sbx_fd_close(&gate[1]);
    sbx_fd_close(&hold);
    sbx_fd_close(&job->devnull);
    sbx_fd_close(&job->also);
    free(job);
    free(dir);
    return r->gate >= 0;
}

int sbx__disk_release_detach(struct sbx__disk_release *r)
{
    if (r->gate < 0 || r->detached)
        return r->detached;
    if (rename(r->image, r->trash) < 0)
        return 0;
    if (sbx__priv_umount(r->ws, UMOUNT_NOFOLLOW | MNT_DETACH) < 0) {
        if (rename(r->trash, r->image) < 0)
            r->detached = 1; /* the image is at trash, the mount stays: the worker waits */
        return r->detached;
    }
    r->detached = 1;
    return 1;
}

/* Whether dir holds a subdirectory (or an entry whose type it cannot tell, or cannot be
 * read): such a directory stays with the caller's careful removal. */
static int has_subdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 1;
    struct dirent *e;
    int sub = 0;
    while (!sub && (e = readdir(d)))
        sub = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
              (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN);
    closedir(d);
    return sub;
}

int sbx__disk_release_hand_over(struct sbx__disk_release *r)
{
    if (r->gate < 0 || !r->detached || !r->gone || has_subdir(r->also))
        return 0;
    return rename(r->also, r->gone) == 0;
}

void sbx__disk_release_end(struct sbx__disk_release *r)
{
    sbx_fd_close(&r->gate); /* the worker's end of file: it is the last holder now */
    free(r->also);
    free(r->gone);
    free(r->image);
    free(r->ws);
    free(r->loop);
    free(r->trash);
    free(r->dir);
    *r = (struct sbx__disk_release){.gate = -1};
}

int sbx__disk_detach_later(const char *image, const char *loop, const char *ws,
                           struct sbx_error *err)
{
    struct sbx__disk_release r;
    if (sbx__disk_release_prepare(image, loop, ws, NULL, &r) && sbx__disk_release_detach(&r)) {
        sbx__disk_release_end(&r);
        return 0;
    }
    sbx__disk_release_end(&r);
    return sbx__disk_detach(image, loop, ws, 0, err);
}
