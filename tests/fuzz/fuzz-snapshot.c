/* The snapshot importer on hostile archives (tar, any compression libarchive reads here). An
 * archive it accepts must restore cleanly into an empty directory: the tree it wrote passed
 * the same validation restore repeats. Limits keep each input bounded in memory and disk. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "sbx/fs.h"
#include "sbx/snapshot.h"

static struct sbx_snapshot_store *st;
static char top[64];
static int ws = -1;

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *f)
{
    if (type == FTW_D || type == FTW_DP)
        chmod(p, 0700);
    return remove(p);
}

/* The scratch store goes when libFuzzer exits (it calls exit() at the end of a timed run). */
static void cleanup(void)
{
    sbx_snapshot_store_free(st);
    sbx_fd_close(&ws);
    nftw(top, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

static void init(void)
{
    snprintf(top, sizeof(top), "/tmp/sbx-fuzz-snapshot-XXXXXX");
    FUZZ_ASSERT(mkdtemp(top) != NULL);
    char path[128];
    snprintf(path, sizeof(path), "%s/store", top);
    struct sbx_error err = SBX_ERROR_INIT;
    FUZZ_ASSERT(sbx_snapshot_store_open(path, &st, &err) == 0);
    snprintf(path, sizeof(path), "%s/ws", top);
    FUZZ_ASSERT(mkdir(path, 0700) == 0);
    ws = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    FUZZ_ASSERT(ws >= 0);
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!st)
        init();
    int fd = memfd_create("archive", MFD_CLOEXEC);
    FUZZ_ASSERT(fd >= 0);
    FUZZ_ASSERT(sbx_fd_write_all(fd, data, size, NULL) == 0);
    FUZZ_ASSERT(lseek(fd, 0, SEEK_SET) == 0);
    struct sbx_snapshot_limits lim = {.max_entries = 256,
                                      .max_bytes = 4 << 20,
                                      .max_ratio = 200,
                                      .max_path = 512,
                                      .max_depth = 16};
    struct sbx_error err = SBX_ERROR_INIT;
    char *ref = NULL;
    if (sbx_snapshot_import(st, fd, &lim, &ref, &err) == 0) {
        FUZZ_ASSERT(strncmp(ref, "sha256:", 7) == 0);
        int rc = sbx_snapshot_restore(st, ref, ws, &err);
        if (rc < 0)
            fprintf(stderr, "restore: %s\n", err.msg);
        FUZZ_ASSERT(rc == 0);
        /* empty the workspace for the next input */
        DIR *d = fdopendir(dup(ws));
        FUZZ_ASSERT(d != NULL);
        rewinddir(d);
        struct dirent *de;
        while ((de = readdir(d))) {
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                sbx_fs_remove(ws, de->d_name, SBX_FS_RECURSIVE, NULL);
        }
        closedir(d);
        FUZZ_ASSERT(sbx_snapshot_remove(st, ref, 1, &err) == 0);
        free(ref);
    } else {
        FUZZ_ASSERT(err.msg[0] != '\0');
    }
    close(fd);
    return 0;
}
