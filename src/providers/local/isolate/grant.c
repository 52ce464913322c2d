/* sbx local provider: looking for unix sockets in a grant source. A socket in a granted tree
 * lets the sandbox connect to whatever host service listens on it (a read-only bind does not
 * stop connect), so a grant holding one is refused unless marked dangerous. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/local/isolate/isolate.h"

struct scan {
    size_t entries;
    char *found;
    size_t n;
};

/* Depth-first, bounded in depth (an fd per level) and in entries overall. */
static int scan_dir(int fd, const char *rel, unsigned depth, struct scan *sc)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    int hit = 0;
    struct dirent *e;
    while (!hit && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++sc->entries > SBX__GRANT_SCAN_MAX_ENTRIES)
            break;
        unsigned char type = e->d_type;
        if (type == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            type = S_ISSOCK(st.st_mode) ? DT_SOCK : S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
        }
        if (type == DT_SOCK) {
            snprintf(sc->found, sc->n, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
            hit = 1;
        } else if (type == DT_DIR && depth < SBX__GRANT_SCAN_MAX_DEPTH) {
            int sub = openat(dirfd(d), e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            if (sub < 0)
                continue;
            char path[PATH_MAX];
            if ((size_t)snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) >=
                sizeof(path)) {
                close(sub);
                continue;
            }
            hit = scan_dir(sub, path, depth + 1, sc);
        }
    }
    closedir(d);
    return hit;
}

int sbx__grant_find_socket(const char *src, char *found, size_t n)
{
    struct scan sc = {.found = found, .n = n};
    struct stat st;
    if (lstat(src, &st) < 0)
        return 0;
    if (S_ISSOCK(st.st_mode)) {
        snprintf(found, n, "%s", "");
        return 1;
    }
    if (!S_ISDIR(st.st_mode))
        return 0;
    int fd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    return fd < 0 ? 0 : scan_dir(fd, "", 0, &sc);
}
