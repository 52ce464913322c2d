/* Per-user runtime directories and the helper program (sandbox/host/host.h). */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/host/host.h"
#include "sbx/common.h"

/* A runtime base candidate: made 0700 if missing, then it must be a real directory (lstat: no
 * symlink) owned by us and writable by no one else; read/search bits for others are cleared.
 * One that another user owns is refused, never used: they could swap the contents. */
static int check_runtime_dir(const char *path, struct sbx_error *err)
{
    struct stat st;
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return sbx_error_errno(err, errno, "cannot create runtime directory '%s'", path);
    if (lstat(path, &st) < 0)
        return sbx_error_errno(err, errno, "cannot stat runtime directory '%s'", path);
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "runtime directory '%s' is not a directory owned by uid %u (set "
                             "XDG_RUNTIME_DIR to a private directory)",
                             path, (unsigned)geteuid());
    /* Writable by others: anything in it may have been planted; only readable: close it. */
    if (st.st_mode & 022)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "runtime directory '%s' is writable by others (mode 0%o): remove it "
                             "or set XDG_RUNTIME_DIR to a private directory",
                             path, (unsigned)(st.st_mode & 07777));
    if ((st.st_mode & 077) && chmod(path, 0700) < 0)
        return sbx_error_errno(err, errno, "cannot make runtime directory '%s' private", path);
    return 0;
}

/* /run/user/<uid> as systemd-logind makes it: a directory of ours, closed to others. */
static int private_user_run(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
           !(st.st_mode & 022);
}

/* mkdir -p of the levels below home (private to us) for the per-user state fallback. */
static int make_parents(char *path, size_t from, struct sbx_error *err)
{
    for (size_t i = from; path[i]; i++) {
        if (path[i] != '/')
            continue;
        path[i] = '\0';
        int r = mkdir(path, 0700);
        int e = errno;
        path[i] = '/';
        if (r < 0 && e != EEXIST)
            return sbx_error_errno(err, e, "cannot create '%.*s'", (int)i, path);
    }
    return 0;
}

int sbx__runtime_base(const char *configured, char **out, struct sbx_error *err)
{
    char *base = NULL;
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int rc = 0;
    /* No shared, world-writable place (/tmp) is ever a candidate: another user could make the
     * directory first and lock us out. */
    if (configured && configured[0]) {
        base = sbx_xstrdup(configured);
    } else if (xdg && xdg[0] == '/') {
        base = sbx_xasprintf("%s/sbx", xdg);
    } else if (geteuid() == 0) {
        base = sbx_xstrdup("/run/sbx");
    } else {
        char user_run[64];
        snprintf(user_run, sizeof(user_run), "/run/user/%u", (unsigned)geteuid());
        const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
        if (private_user_run(user_run)) {
            base = sbx_xasprintf("%s/sbx", user_run);
        } else if (state && state[0] == '/') {
            base = sbx_xasprintf("%s/sbx/run", state);
            rc = make_parents(base, 1, err);
        } else if (home && home[0] == '/' && strcmp(home, "/") != 0) {
            base = sbx_xasprintf("%s/.local/state/sbx/run", home);
            rc = make_parents(base, strlen(home), err);
        } else {
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "no private runtime directory: set XDG_RUNTIME_DIR (or HOME)");
        }
    }
    if (rc == 0)
        rc = check_runtime_dir(base, err);
    if (rc < 0) {
        free(base);
        return rc;
    }
    *out = base;
    return 0;
}

static int executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The real path of the file mapped at addr, from /proc/self/maps (the kernel names the file
 * itself there, whatever relative or symlinked name it was loaded by); NULL when unknown. */
static char *mapped_file(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[PATH_MAX + 128];
    char *found = NULL;
    int whole = 1; /* line starts a line of the file (a longer one is read in pieces) */
    while (f && !found && fgets(line, sizeof(line), f)) {
        size_t n = strlen(line);
        int starts = whole;
        whole = n && line[n - 1] == '\n';
        if (!starts)
            continue;
        unsigned long lo, hi;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) < 2 || !path_at ||
            addr < lo || addr >= hi || line[path_at] != '/' || !whole)
            continue;
        line[n - 1] = '\0';
        found = sbx_xstrdup(line + path_at);
    }
    if (f)
        fclose(f);
    return found;
}

/* The real path of libsbx.so (this code's file): from the maps, else from the dynamic linker
 * (a relative name, as a relative LD_LIBRARY_PATH gives, made absolute). NULL when unknown. */
static char *library_path(void)
{
    char *p = mapped_file((uintptr_t)(void *)library_path);
    Dl_info info;
    if (!p && dladdr((void *)library_path, &info) && info.dli_fname && info.dli_fname[0])
        p = realpath(info.dli_fname, NULL);
    return p;
}

/* Where a program linked with libsbx.so finds the supervisor: next to the library (a build
 * directory), then in the libexecdir of the tree the library sits in (an installed tree, also
 * when moved or installed with DESTDIR). *out NULL when neither has one. */
static void supervisor_by_library(char **out)
{
    *out = NULL;
    char *lib = library_path();
    if (!lib)
        return;
    const char *slash = strrchr(lib, '/');
    int dlen = (int)(slash - lib);
    char *p = sbx_xasprintf("%.*s/sbx-supervisor", dlen, lib);
    if (executable(p)) {
        *out = p;
        goto out;
    }
    free(p);
    size_t rel = strlen(SBX_LIBDIR_REL);
    if (SBX_LIBDIR_REL[0] != '/' && (size_t)dlen > rel &&
        memcmp(lib + dlen - rel, SBX_LIBDIR_REL, rel) == 0 && lib[dlen - rel - 1] == '/') {
        p = sbx_xasprintf("%.*s/%s/sbx-supervisor", (int)(dlen - rel - 1), lib, SBX_LIBEXECDIR_REL);
        if (executable(p)) {
            *out = p;
            goto out;
        }
        free(p);
    }
out:
    free(lib);
}

/* The supervisor program: the configured one, $SBX_SUPERVISOR, sbx-supervisor next to the
 * running program (an sbx binary, a build directory), next to libsbx.so or in its tree's
 * libexecdir, the installed one in libexecdir, and last an sbx binary (it serves too, but
 * links every layer and libcurl). */
int sbx__supervisor_program(const char *configured, char **out, struct sbx_error *err)
{
    const char *env = getenv("SBX_SUPERVISOR");
    char self[PATH_MAX];
    char *path = NULL;
    if (configured && configured[0]) {
        path = sbx_xstrdup(configured);
    } else if (env && env[0]) {
        path = sbx_xstrdup(env);
    } else {
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        const char *base = NULL;
        if (n > 0) {
            self[n] = '\0';
            base = strrchr(self, '/');
        }
        if (base) {
            char *next = sbx_xasprintf("%.*s/sbx-supervisor", (int)(base - self), self);
            if (executable(next))
                path = next;
            else
                free(next);
        }
        if (!path)
            supervisor_by_library(&path);
        if (!path && executable(SBX_LIBEXECDIR "/sbx-supervisor"))
            path = sbx_xstrdup(SBX_LIBEXECDIR "/sbx-supervisor");
        if (!path && base && strcmp(base + 1, "sbx") == 0)
            path = sbx_xstrdup(self);
        if (!path && executable(SBX_BINDIR "/sbx"))
            path = sbx_xstrdup(SBX_BINDIR "/sbx");
        if (!path)
            return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                                 "cannot find the supervisor program 'sbx-supervisor' (not next "
                                 "to this program or to libsbx.so, nor in '%s'): set "
                                 "SBX_SUPERVISOR to it",
                                 SBX_LIBEXECDIR);
    }
    if (access(path, X_OK) < 0) {
        int rc = sbx_error_errno(err, errno,
                                 "cannot run the supervisor '%s' (set SBX_SUPERVISOR to the "
                                 "sbx-supervisor program)",
                                 path);
        free(path);
        return rc;
    }
    *out = path;
    return 0;
}

int sbx__sbx_program(char **out, struct sbx_error *err)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        const char *b = strrchr(self, '/');
        if (b && strcmp(b + 1, "sbx") == 0) {
            *out = sbx_xstrdup(self);
            return 0;
        }
    }
    char *sup = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx__supervisor_program(NULL, &sup, &ignored) == 0) {
        char *slash = strrchr(sup, '/');
        char *cand = slash ? sbx_xasprintf("%.*s/sbx", (int)(slash - sup), sup) : NULL;
        free(sup);
        if (cand && access(cand, X_OK) == 0) {
            *out = cand;
            return 0;
        }
        free(cand);
    }
    if (access(SBX_BINDIR "/sbx", X_OK) == 0) {
        *out = sbx_xstrdup(SBX_BINDIR "/sbx");
        return 0;
    }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                         "cannot find the sbx program that runs port relays (next to "
                         "sbx-supervisor, or " SBX_BINDIR "/sbx)");
}
