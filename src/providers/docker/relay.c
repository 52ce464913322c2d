/* The Docker provider's port relays: where their records live (src/providers/docker/relay.h). The
 * relays themselves are provider-independent (sandbox/host/relay.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/docker/relay.h"
#include "sandbox/host/host.h"
#include "sandbox/host/portrelay.h"
#include "sandbox/host/relay.h"
#include "sbx/common.h"

/* An id is one path component of ours: no separator, no dot start, bounded. */
static int check_id(const char *id, struct sbx_error *err)
{
    size_t n = id ? strlen(id) : 0;
    int ok = n > 0 && n <= 128 && id[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
             (id[i] >= '0' && id[i] <= '9') || id[i] == '-' || id[i] == '_' || id[i] == '.';
    return ok ? 0 : sbx_error_set(err, SBX_E_INVAL, 0, "bad sandbox id '%s'", id ? id : "");
}

int sbx__docker_relay_start(const char *id, pid_t init_pid, int port, char **out_url,
                            struct sbx_error *err)
{
    char *ports = NULL;
    int rc = check_id(id, err);
    if (rc == 0)
        rc = sbx__portrelay_dir("docker", id, 1, &ports, err);
    if (rc == 0)
        rc = sbx__relay_start(ports, id, init_pid, port, out_url, err);
    free(ports);
    return rc;
}

int sbx__docker_relay_forget(const char *id, struct sbx_error *err)
{
    char *base = NULL, *box = NULL;
    int rc = check_id(id, err);
    if (rc == 0)
        rc = sbx__runtime_base(NULL, &base, err);
    if (rc < 0)
        return rc;
    box = sbx_xasprintf("%s/docker/%s", base, id);
    /* Only record files are in ports/: no deeper tree to walk. */
    int dfd = open(box, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    int pfd = dfd >= 0 ? openat(dfd, "ports", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
    DIR *d = pfd >= 0 ? fdopendir(pfd) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && unlinkat(pfd, e->d_name, 0) < 0 && errno != ENOENT)
            rc = sbx_error_errno(err, errno, "cannot remove '%s/ports/%s'", box, e->d_name);
    if (d)
        closedir(d);
    else if (pfd >= 0)
        close(pfd);
    if (rc == 0 && dfd >= 0 && unlinkat(dfd, "ports", AT_REMOVEDIR) < 0 && errno != ENOENT)
        rc = sbx_error_errno(err, errno, "cannot remove '%s/ports'", box);
    if (rc == 0 && dfd >= 0 && rmdir(box) < 0 && errno != ENOENT)
        rc = sbx_error_errno(err, errno, "cannot remove '%s'", box);
    /* The docker level too once no sandbox has records: the runtime base is shared. */
    char *docker = sbx_xasprintf("%s/docker", base);
    if (rc == 0 && rmdir(docker) < 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST)
        rc = sbx_error_errno(err, errno, "cannot remove '%s'", docker);
    free(docker);
    if (dfd >= 0)
        close(dfd);
    free(base);
    free(box);
    return rc;
}
