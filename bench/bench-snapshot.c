/* bench-snapshot: the snapshot store on workspaces of 200 and 2000 files of 4 KB. Prints the
 * median and p95 (ms) over RUNS runs of: a full take into an empty store, a restore into an
 * empty directory, an incremental take after a one-file change (stat cache warm), and an
 * export to tar.zst. "same" workspaces have identical files (as the reference JS SDK's
 * benchmark writes them: 4096 'x'), "distinct" ones a different content per file.
 *
 *   build/bench/bench-snapshot [RUNS [DIR]]     (default 10 runs under /tmp)
 *
 * One first take, for bench-snapshot-peer.sh to interleave with the JS SDK's persist:
 *   build/bench/bench-snapshot first NFILES DIR distinct|same
 * writes the workspace under DIR, takes it into an empty store there, then (distinct) times GNU
 * `tar -cf` of the same files into DIR (no fsync: what an undurable archive costs), and prints
 * "take_ms X" and "tar_ms Y".
 *
 * The incremental take against the first, for bench-snapshot-peer.sh:
 *   build/bench/bench-snapshot incr NFILES DIR REPS
 * writes NFILES distinct files under DIR, waits out the stat cache's racy window, takes them
 * once into a kept store (its cache warm), then REPS times, interleaved: a first take into an
 * empty store, and an incremental take into the kept one after one file changed. Prints the
 * medians "take_ms X" and "incr_ms Y", and "incr_read N" (the files the last incremental take
 * read: 1). */
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/fs.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

static void die(const char *what, const struct sbx_error *err)
{
    fprintf(stderr, "bench-snapshot: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *f)
{
    return remove(p);
}

static void rm_tree(const char *p)
{
    nftw(p, rm_entry, 64, FTW_DEPTH | FTW_PHYS);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    int p95 = (int)((n - 1) * 0.95 + 0.5);
    printf("%-36s median %8.2f ms   p95 %8.2f ms\n", name, v[n / 2], v[p95]);
}

static double ms_since(int64_t t0)
{
    return (double)(sbx_time_mono_ns() - t0) / 1e6;
}

static int open_dir(const char *p)
{
    mkdir(p, 0755);
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        die(p, NULL);
    return fd;
}

static void bench(const char *base, int nfiles, int distinct, int runs)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char ws[512], path[600];
    snprintf(ws, sizeof(ws), "%s/ws", base);
    int wfd = open_dir(ws);
    char data[4096];
    memset(data, 'x', sizeof(data));
    for (int i = 0; i < nfiles; i++) {
        char name[64];
        snprintf(name, sizeof(name), "data/f%d.txt", i);
        if (distinct)
            snprintf(data, sizeof(data), "file %d\n", i);
        if (sbx_fs_write(wfd, name, data, sizeof(data), 0644, SBX_FS_PARENTS, &err) < 0)
            die("write", &err);
    }
    sbx_fs_mkdir(wfd, "out", 0755, 0, NULL);
    /* Past the stat cache's racy window (2 s), as a workspace a while after its last change. */
    sleep(3);
    double *take = calloc((size_t)runs, sizeof(double)), *rest = calloc((size_t)runs, 8),
           *incr = calloc((size_t)runs, 8), *exp = calloc((size_t)runs, 8);
    uint64_t read_files = 0, size = 0;
    for (int r = 0; r < runs; r++) {
        snprintf(path, sizeof(path), "%s/store%d", base, r);
        struct sbx_snapshot_store *st = NULL;
        if (sbx_snapshot_store_open(path, &st, &err) < 0)
            die("store", &err);
        struct sbx_snapshot_take_stats stats = {0};
        struct sbx_snapshot_take_opts o = {.source = "bench", .out_stats = &stats};
        char *ref = NULL, *ref2 = NULL;
        int64_t t0 = sbx_time_mono_ns();
        if (sbx_snapshot_take(st, wfd, &o, &ref, &err) < 0)
            die("take", &err);
        take[r] = ms_since(t0);

        snprintf(path, sizeof(path), "%s/restore%d", base, r);
        int rfd = open_dir(path);
        t0 = sbx_time_mono_ns();
        if (sbx_snapshot_restore(st, ref, rfd, &err) < 0)
            die("restore", &err);
        rest[r] = ms_since(t0);
        close(rfd);
        rm_tree(path);

        snprintf(data, sizeof(data), "changed in run %d\n", r);
        if (sbx_fs_write(wfd, "data/f7.txt", data, sizeof(data), 0644, 0, &err) < 0)
            die("write", &err);
        t0 = sbx_time_mono_ns();
        if (sbx_snapshot_take(st, wfd, &o, &ref2, &err) < 0)
            die("incremental take", &err);
        incr[r] = ms_since(t0);
        read_files = stats.read_files;

        snprintf(path, sizeof(path), "%s/export%d.tar.zst", base, r);
        int efd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        t0 = sbx_time_mono_ns();
        if (sbx_snapshot_export(st, ref, efd, &err) < 0)
            die("export", &err);
        exp[r] = ms_since(t0);
        struct stat sb;
        fstat(efd, &sb);
        size = (uint64_t)sb.st_size;
        close(efd);
        unlink(path);
        free(ref);
        free(ref2);
        sbx_snapshot_store_free(st);
        snprintf(path, sizeof(path), "%s/store%d", base, r);
        rm_tree(path);
    }
    char name[96];
    const char *kind = distinct ? "distinct" : "same";
    snprintf(name, sizeof(name), "take %d files (%s)", nfiles, kind);
    report(name, take, runs);
    snprintf(name, sizeof(name), "restore %d files (%s)", nfiles, kind);
    report(name, rest, runs);
    snprintf(name, sizeof(name), "incremental take %d (%s)", nfiles, kind);
    report(name, incr, runs);
    printf("%-36s %llu file(s) read\n", "", (unsigned long long)read_files);
    snprintf(name, sizeof(name), "export %d tar.zst (%s)", nfiles, kind);
    report(name, exp, runs);
    printf("%-36s %llu bytes\n", "", (unsigned long long)size);
    free(take);
    free(rest);
    free(incr);
    free(exp);
    close(wfd);
    rm_tree(ws);
}

extern char **environ;

/* Wall time of `tar -cf OUT -C WS .` (a process spawned and waited for). */
static double time_tar(const char *ws, const char *out)
{
    char *argv[] = {"tar", "-cf", (char *)out, "-C", (char *)ws, ".", NULL};
    pid_t pid;
    int st = 0;
    int64_t t0 = sbx_time_mono_ns();
    if (posix_spawnp(&pid, "tar", NULL, NULL, argv, environ) != 0 || waitpid(pid, &st, 0) < 0 ||
        !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("tar -cf", NULL);
    return ms_since(t0);
}

static int first_take(int nfiles, const char *dir, int distinct)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char base[512], ws[600], path[600];
    snprintf(base, sizeof(base), "%s/sbx-bench-first-XXXXXX", dir);
    if (!mkdtemp(base))
        die("mkdtemp", NULL);
    snprintf(ws, sizeof(ws), "%s/ws", base);
    int wfd = open_dir(ws);
    char data[4096];
    memset(data, 'x', sizeof(data));
    for (int i = 0; i < nfiles; i++) {
        char name[64];
        snprintf(name, sizeof(name), "data/f%d.txt", i);
        if (distinct)
            snprintf(data, sizeof(data), "file %d\n", i);
        if (sbx_fs_write(wfd, name, data, sizeof(data), 0644, SBX_FS_PARENTS, &err) < 0)
            die("write", &err);
    }
    sbx_fs_mkdir(wfd, "out", 0755, 0, NULL);
    snprintf(path, sizeof(path), "%s/store", base);
    struct sbx_snapshot_store *st = NULL;
    if (sbx_snapshot_store_open(path, &st, &err) < 0)
        die("store", &err);
    char *ref = NULL;
    int64_t t0 = sbx_time_mono_ns();
    if (sbx_snapshot_take(st, wfd, NULL, &ref, &err) < 0)
        die("take", &err);
    printf("take_ms %.3f\n", ms_since(t0));
    free(ref);
    sbx_snapshot_store_free(st);
    if (distinct) {
        snprintf(path, sizeof(path), "%s/ws.tar", base);
        printf("tar_ms %.3f\n", time_tar(ws, path));
    }
    close(wfd);
    rm_tree(base);
    return 0;
}

static int incr_takes(int nfiles, const char *dir, int reps)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char base[512], ws[600], path[600];
    snprintf(base, sizeof(base), "%s/sbx-bench-incr-XXXXXX", dir);
    if (!mkdtemp(base))
        die("mkdtemp", NULL);
    snprintf(ws, sizeof(ws), "%s/ws", base);
    int wfd = open_dir(ws);
    char data[4096];
    memset(data, 'x', sizeof(data));
    for (int i = 0; i < nfiles; i++) {
        char name[64];
        snprintf(name, sizeof(name), "data/f%d.txt", i);
        snprintf(data, sizeof(data), "file %d\n", i);
        if (sbx_fs_write(wfd, name, data, sizeof(data), 0644, SBX_FS_PARENTS, &err) < 0)
            die("write", &err);
    }
    sbx_fs_mkdir(wfd, "out", 0755, 0, NULL);
    sleep(3);
    snprintf(path, sizeof(path), "%s/store", base);
    struct sbx_snapshot_store *st = NULL;
    if (sbx_snapshot_store_open(path, &st, &err) < 0)
        die("store", &err);
    struct sbx_snapshot_take_stats stats = {0};
    struct sbx_snapshot_take_opts o = {.source = "bench", .out_stats = &stats};
    char *ref = NULL;
    if (sbx_snapshot_take(st, wfd, &o, &ref, &err) < 0)
        die("take", &err);
    free(ref);
    double *first = calloc((size_t)reps, sizeof(double)), *incr = calloc((size_t)reps, 8);
    for (int r = 0; r < reps; r++) {
        /* a first take into an empty store, then an incremental take into the kept one */
        snprintf(path, sizeof(path), "%s/first%d", base, r);
        struct sbx_snapshot_store *fst = NULL;
        if (sbx_snapshot_store_open(path, &fst, &err) < 0)
            die("store", &err);
        int64_t t0 = sbx_time_mono_ns();
        if (sbx_snapshot_take(fst, wfd, &o, &ref, &err) < 0)
            die("take", &err);
        first[r] = ms_since(t0);
        free(ref);
        sbx_snapshot_store_free(fst);
        rm_tree(path);
        snprintf(data, sizeof(data), "changed in run %d\n", r);
        if (sbx_fs_write(wfd, "data/f7.txt", data, sizeof(data), 0644, 0, &err) < 0)
            die("write", &err);
        t0 = sbx_time_mono_ns();
        if (sbx_snapshot_take(st, wfd, &o, &ref, &err) < 0)
            die("incremental take", &err);
        incr[r] = ms_since(t0);
        free(ref);
    }
    uint64_t read_files = stats.read_files;
    qsort(first, (size_t)reps, sizeof(*first), cmp);
    qsort(incr, (size_t)reps, sizeof(*incr), cmp);
    printf("take_ms %.3f\n", first[reps / 2]);
    printf("incr_ms %.3f\n", incr[reps / 2]);
    printf("incr_read %llu\n", (unsigned long long)read_files);
    free(first);
    free(incr);
    sbx_snapshot_store_free(st);
    close(wfd);
    rm_tree(base);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "incr") == 0) {
        int reps = (int)strtol(argv[4], NULL, 10);
        return incr_takes((int)strtol(argv[2], NULL, 10), argv[3], reps < 1 ? 1 : reps);
    }
    if (argc == 5 && strcmp(argv[1], "first") == 0)
        return first_take((int)strtol(argv[2], NULL, 10), argv[3], strcmp(argv[4], "same") != 0);
    int runs = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 10;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    if (runs < 1)
        runs = 1;
    char base[512];
    snprintf(base, sizeof(base), "%s/sbx-bench-snapshot-XXXXXX", dir);
    if (!mkdtemp(base))
        die("mkdtemp", NULL);
    for (int distinct = 0; distinct < 2; distinct++) {
        bench(base, 200, distinct, runs);
        bench(base, 2000, distinct, runs);
    }
    rm_tree(base);
    return 0;
}
