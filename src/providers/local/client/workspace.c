/* The local provider, client side: what a given workspace directory may be. The workspace is
 * shown read-write and, for a root caller, owned by the sandbox's user through an idmapped
 * mount, so it gets at least the checks a grant source gets: never a kernel or runtime view of
 * the host, a system directory, a home directory itself or another user's, a tree holding unix
 * sockets of host services, or sbx's own runtime directories. */
#include <errno.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "providers/local/client/client.h"
#include "providers/local/isolate/isolate.h"

/* 1 when path is base or lies beneath it (both absolute, normalised). */
static int within(const char *path, const char *base)
{
    size_t n = strlen(base);
    return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Kernel and runtime views of the host, and the system's own trees: never, nor anything in
 * them. */
static const char *const refused_trees[] = {"/proc",  "/sys",   "/dev",    "/run",  "/var/run",
                                            "/usr",   "/etc",   "/bin",    "/sbin", "/lib",
                                            "/lib32", "/lib64", "/libx32", "/boot"};
/* Directories shared by the whole system or holding every user's: not themselves (a directory
 * made inside one is fine). */
static const char *const refused_dirs[] = {"/",    "/tmp", "/var/tmp", "/var",  "/home",
                                           "/srv", "/opt", "/mnt",     "/media"};

/* File systems that are views of the kernel, whatever their mount point. */
static const unsigned long pseudo_fs[] = {
        PROC_SUPER_MAGIC,    SYSFS_MAGIC,    DEVPTS_SUPER_MAGIC, CGROUP_SUPER_MAGIC,
        CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC,  TRACEFS_MAGIC,      SECURITYFS_MAGIC,
        BPF_FS_MAGIC,        PSTOREFS_MAGIC, EFIVARFS_MAGIC,     SELINUX_MAGIC,
        SMACK_MAGIC,         NSFS_MAGIC,     BINFMTFS_MAGIC};

static int refuse(struct sbx_error *err, const char *given, const char *why)
{
    return sbx_error_set(err, SBX_E_PERM, 0, "workspace '%s' %s", given, why);
}

/* The home directory real lies in when it is not the caller's own: "/root" or "/home/<x>"
 * owned by another uid (written to home), else 0. */
static int foreign_home(const char *real, char *home, size_t n)
{
    const char *cut = NULL;
    if (within(real, "/root"))
        cut = real + 5;
    else if (strncmp(real, "/home/", 6) == 0)
        cut = real + 6 + strcspn(real + 6, "/");
    struct stat st;
    if (!cut || (size_t)(cut - real) >= n)
        return 0;
    snprintf(home, n, "%.*s", (int)(cut - real), real);
    return stat(home, &st) == 0 && st.st_uid != geteuid();
}

int sbx__local_check_workspace(const char *given, const char *real, const char *rundir,
                               int dangerous_ok, struct sbx_error *err)
{
    const char *hh = getenv("HOME");
    struct statfs fs;
    char home[PATH_MAX];
    for (size_t i = 0; i < sizeof(refused_trees) / sizeof(*refused_trees); i++)
        if (within(real, refused_trees[i]))
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "workspace '%s' is in '%s', a system directory or a view of "
                                 "the host's processes, devices or services; choose a directory "
                                 "of your own",
                                 given, refused_trees[i]);
    for (size_t i = 0; i < sizeof(refused_dirs) / sizeof(*refused_dirs); i++)
        if (strcmp(real, refused_dirs[i]) == 0)
            return refuse(err, given,
                          "is a directory the whole system shares; make a directory inside it");
    if (hh && hh[0] == '/' && hh[1] && strcmp(real, hh) == 0)
        return refuse(err, given,
                      "is your home directory, which holds your keys and tokens; make a "
                      "directory inside it");
    if (strcmp(real, "/root") == 0 || (strncmp(real, "/home/", 6) == 0 && !strchr(real + 6, '/')))
        return refuse(err, given, "is a home directory; make a directory inside it");
    if (statfs(real, &fs) == 0)
        for (size_t i = 0; i < sizeof(pseudo_fs) / sizeof(*pseudo_fs); i++)
            if ((unsigned long)fs.f_type == pseudo_fs[i])
                return refuse(err, given, "is on a kernel pseudo file system");
    if (rundir && (within(real, rundir) || within(rundir, real)))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "workspace '%s' overlaps sbx's runtime directory '%s'", given, rundir);
    if (dangerous_ok)
        return 0;
    if (foreign_home(real, home, sizeof(home)))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "workspace '%s' is in '%s', another user's home directory; "
                             "refused unless allowed as dangerous (--allow-dangerous-workspace)",
                             given, home);
    char sock[PATH_MAX];
    if (sbx__grant_find_socket(real, sock, sizeof(sock)))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "workspace '%s' holds the unix socket '%s/%s', through which the "
                             "sandbox could reach a host service; refused unless allowed as "
                             "dangerous (--allow-dangerous-workspace)",
                             given, real, sock);
    return 0;
}
