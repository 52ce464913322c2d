/* Manifest parsing speed: sbx_manifest_load_file on a generated manifest of N MB of inline
 * files (4 KB text each, with the escapes real source files carry), reported in ms, MB/s and,
 * where perf_event_open counts user-space instructions, instructions per byte (the issue's
 * target, <= 20); without the counter it prints ns per byte against a memcpy of the same bytes.
 * With --create (or --create-isolated) it also compares a create from a manifest of 2000 inline
 * 4 KB files (load + materialise + state) against a tight open/write/close loop of the same
 * files, interleaved, and prints a TABLE line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx/fs.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/session.h"

#define FILE_BYTES 4096

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One file's content: printable lines with a quote, a backslash and a tab per line, so the
 * parser's escape path is exercised at a realistic rate. */
static void make_content(char *out, size_t n, unsigned seed)
{
    static const char line[] = "    printf(\"%d\\t%s\\n\", x, \"abc\"); /* a comment */ \\\n";
    size_t ll = sizeof(line) - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = line[(i + seed) % ll];
    out[n - 1] = '\n';
}

static int write_manifest(const char *path, size_t nfiles)
{
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    char *c = malloc(FILE_BYTES);
    fputs("{\"version\": 1, \"entries\": {", f);
    for (size_t i = 0; i < nfiles; i++) {
        make_content(c, FILE_BYTES, (unsigned)i);
        fprintf(f, "%s\"src/dir%zu/file%zu.c\": {\"type\": \"file\", \"content\": \"",
                i ? ", " : "", i / 100, i);
        for (size_t j = 0; j < FILE_BYTES; j++) {
            char ch = c[j];
            if (ch == '"' || ch == '\\')
                fputc('\\', f), fputc(ch, f);
            else if (ch == '\n')
                fputs("\\n", f);
            else if (ch == '\t')
                fputs("\\t", f);
            else
                fputc(ch, f);
        }
        fputs("\"}", f);
    }
    fputs("}}\n", f);
    free(c);
    return fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A counter of this thread's user-space instructions, or -1 where the kernel or the machine
 * (a VM without a PMU, perf_event_paranoid > 2) has none. */
static int instr_counter(void)
{
    struct perf_event_attr a = {.type = PERF_TYPE_HARDWARE,
                                .size = sizeof(a),
                                .config = PERF_COUNT_HW_INSTRUCTIONS,
                                .disabled = 1,
                                .exclude_kernel = 1,
                                .exclude_hv = 1};
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static long long instr_read(int fd)
{
    long long v = -1;
    if (read(fd, &v, sizeof(v)) != sizeof(v))
        return -1;
    return v;
}

/* Instructions per byte of sbx_manifest_load_file under callgrind (this program again with
 * --load-only on a 2 MB manifest), or -1 when valgrind cannot be run. */
static double callgrind_ipb(const char *self, const char *dir)
{
    char out[512], log[512];
    snprintf(out, sizeof(out), "%s/callgrind.out", dir);
    snprintf(log, sizeof(log), "%s/callgrind.log", dir);
    pid_t pid = fork();
    if (pid == 0) {
        char of[600], lf[600];
        snprintf(of, sizeof(of), "--callgrind-out-file=%s", out);
        snprintf(lf, sizeof(lf), "--log-file=%s", log);
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        dup2(null, 1);
        dup2(null, 2);
        execlp("valgrind", "valgrind", "--tool=callgrind", of, lf,
               "--toggle-collect=sbx_manifest_load_file", self, "--load-only", "--mb", "2",
               "--runs", "1", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        return -1;
    long long collected = -1, bytes = -1;
    FILE *f = fopen(log, "re");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        char *p = strstr(line, "Collected : ");
        if (p)
            collected = strtoll(p + 12, NULL, 10);
    }
    if (f)
        fclose(f);
    /* The size of the document the child loaded: written the same way, so measured here. */
    char mpath[512];
    snprintf(mpath, sizeof(mpath), "%s/cg.json", dir);
    if (write_manifest(mpath, (size_t)2 * 1024 * 1024 / (FILE_BYTES + 60)) == 0) {
        struct stat st;
        if (stat(mpath, &st) == 0)
            bytes = (long long)st.st_size;
        unlink(mpath);
    }
    unlink(out);
    unlink(log);
    return collected > 0 && bytes > 0 ? (double)collected / (double)bytes : -1;
}

static int load_once(const char *path, struct sbx_manifest **out)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest_load_opts o = {.flags = SBX_MANIFEST_NO_HOST_CHECKS};
    if (sbx_manifest_load_file(path, &o, out, &err) != 0) {
        fprintf(stderr, "bench-manifest: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* The floor: the manifest's directories and files written by open/write/close. */
static double write_loop(const char *root, size_t nfiles, const char *content)
{
    char path[2048];
    double t0 = now_ms();
    mkdir(root, 0755);
    snprintf(path, sizeof(path), "%s/src", root);
    mkdir(path, 0755);
    for (size_t i = 0; i < nfiles; i++) {
        if (i % 100 == 0) {
            snprintf(path, sizeof(path), "%s/src/dir%zu", root, i / 100);
            mkdir(path, 0755);
        }
        snprintf(path, sizeof(path), "%s/src/dir%zu/file%zu.c", root, i / 100, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, content + i * FILE_BYTES, FILE_BYTES) != FILE_BYTES) {
            fprintf(stderr, "bench-manifest: cannot write '%s': %s\n", path, strerror(errno));
            exit(1);
        }
        close(fd);
    }
    return now_ms() - t0;
}

/* Load the manifest file and create a sandbox from it (what `sbx sandbox create --manifest`
 * does), timed; the removal is not. */
static double create_once(struct sbx_client *c, const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    struct sbx_session *s = NULL;
    double t0 = now_ms();
    if (load_once(path, &m) != 0)
        exit(1);
    struct sbx_create_spec spec = {.manifest = m};
    if (sbx_client_create(c, &spec, &s, &err) < 0) {
        fprintf(stderr, "bench-manifest: create: %s\n", err.msg);
        exit(1);
    }
    double t = now_ms() - t0;
    sbx_manifest_free(m);
    if (sbx_session_delete(s, &err) < 0)
        fprintf(stderr, "bench-manifest: delete: %s\n", err.msg);
    sbx_session_free(s);
    return t;
}

static int bench_create(const char *dir, int runs, int isolated)
{
    char path[256], run[256], ws[256], floor[1024];
    size_t nfiles = 2000;
    snprintf(path, sizeof(path), "%s/create.json", dir);
    snprintf(run, sizeof(run), "%s/run", dir);
    snprintf(ws, sizeof(ws), "%s/ws", dir);
    if (write_manifest(path, nfiles) != 0 || mkdir(run, 0700) != 0)
        return 1;
    char *content = malloc(nfiles * FILE_BYTES);
    for (size_t i = 0; i < nfiles; i++)
        make_content(content + i * FILE_BYTES, FILE_BYTES, (unsigned)i);
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_local_options o = {.runtime_dir = run,
                                  .workspace_dir = ws,
                                  .isolation = isolated ? SBX_LOCAL_ISOLATION_NAMESPACES
                                                        : SBX_LOCAL_ISOLATION_NONE};
    if (sbx_client_new("local", &o, &c, &err) < 0) {
        fprintf(stderr, "bench-manifest: client: %s\n", err.msg);
        return 1;
    }
    /* The floor writes into the workspace of an empty sandbox: the same kind of file system as
     * the created ones (as root, a fresh loop-mounted ext4 image). Removals go through a
     * directory fd: sbx_fs_remove works beneath one. */
    struct sbx_session *fs = NULL;
    struct sbx_create_spec empty = {0};
    json_t *st = NULL;
    if (sbx_client_create(c, &empty, &fs, &err) < 0 || sbx_session_state(fs, &st, &err) < 0) {
        fprintf(stderr, "bench-manifest: create: %s\n", err.msg);
        return 1;
    }
    snprintf(floor, sizeof(floor), "%s/floor", json_string_value(json_object_get(st, "workspace")));
    int dfd = open(json_string_value(json_object_get(st, "workspace")),
                   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    json_decref(st);
    if (dfd < 0)
        return 1;
    double *a = calloc((size_t)runs, sizeof(double)), *b = calloc((size_t)runs, sizeof(double));
    for (int r = 0; r < runs; r++) {
        a[r] = create_once(c, path);
        b[r] = write_loop(floor, nfiles, content);
        if (sbx_fs_remove(dfd, "floor", SBX_FS_RECURSIVE | SBX_FS_NOFOLLOW, &err) < 0)
            fprintf(stderr, "bench-manifest: %s\n", err.msg);
    }
    close(dfd);
    if (sbx_session_delete(fs, &err) < 0)
        fprintf(stderr, "bench-manifest: delete: %s\n", err.msg);
    sbx_session_free(fs);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    double ma = median(a, runs), mb = median(b, runs);
    printf("create with %zu inline 4 KB files (%s): median %.1f ms; open/write/close loop %.1f ms "
           "(%d runs, interleaved)\n",
           nfiles, isolated ? "isolated" : "unconfined", ma, mb, runs);
    printf("TABLE|create with 2000 inline 4 KB files (%s)|%.1f ms|open/write/close loop|%.1f "
           "ms|%.2fx|<= 2x|%s\n",
           isolated ? "isolated" : "unconfined", ma, mb, ma / mb, ma / mb <= 2 ? "met" : "missed");
    sbx_client_free(c);
    free(a);
    free(b);
    free(content);
    unlink(path);
    if (sbx_fs_remove(dfd, "ws", SBX_FS_RECURSIVE | SBX_FS_NOFOLLOW, &err) < 0 ||
        sbx_fs_remove(dfd, "run", SBX_FS_RECURSIVE | SBX_FS_NOFOLLOW, &err) < 0)
        fprintf(stderr, "bench-manifest: %s\n", err.msg);
    close(dfd);
    return 0;
}

int main(int argc, char **argv)
{
    int mb = 8, runs = 5, create = 0, load_only = 0;
    const char *argv0 = argv[0];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--create") == 0)
            create = 1;
        else if (strcmp(argv[i], "--create-isolated") == 0)
            create = 2;
        else if (strcmp(argv[i], "--load-only") == 0)
            load_only = 1;
        else {
            fprintf(stderr,
                    "usage: bench-manifest [--mb N] [--runs N] [--create | --create-isolated]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 100 || mb < 1 || mb > 1024)
        return 2;
    char dir[] = "/tmp/bench-manifest-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[256];
    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    size_t nfiles = (size_t)mb * 1024 * 1024 / (FILE_BYTES + 60);
    if (write_manifest(path, nfiles) != 0)
        return 1;
    struct stat st;
    if (stat(path, &st) != 0)
        return 1;
    double *t = calloc((size_t)runs, sizeof(double)), *f = calloc((size_t)runs, sizeof(double));
    double *ipb = calloc((size_t)runs, sizeof(double));
    size_t n = (size_t)st.st_size;
    char *text = malloc(n), *copy = malloc(n);
    FILE *in = fopen(path, "re");
    if (!text || !copy || !in || fread(text, 1, n, in) != n)
        return 1;
    fclose(in);
    int ifd = load_only ? -1 : instr_counter(), ierr = errno;
    for (int r = 0; r < runs; r++) {
        struct sbx_manifest *m = NULL;
        if (ifd >= 0)
            ioctl(ifd, PERF_EVENT_IOC_RESET, 0), ioctl(ifd, PERF_EVENT_IOC_ENABLE, 0);
        double t0 = now_ms();
        if (load_once(path, &m) != 0)
            return 1;
        t[r] = now_ms() - t0;
        if (ifd >= 0) {
            ioctl(ifd, PERF_EVENT_IOC_DISABLE, 0);
            ipb[r] = (double)instr_read(ifd) / (double)n;
        }
        sbx_manifest_free(m);
        /* The floor: the same bytes copied once (the document is read into memory anyway). */
        t0 = now_ms();
        memcpy(copy, text, n);
        __asm__ volatile("" : : "r"(copy) : "memory");
        f[r] = now_ms() - t0;
    }
    double med = median(t, runs), fl = median(f, runs);
    printf("manifest load: %zu files, %lld bytes, median %.2f ms over %d runs, %.1f MB/s\n", nfiles,
           (long long)st.st_size, med, runs, (double)st.st_size / 1e6 / (med / 1e3));
    if (!load_only && ifd >= 0) {
        double mi = median(ipb, runs);
        printf("TABLE|manifest load (%d MB of inline files), instructions per byte|%.1f "
               "instr/byte|target|20 instr/byte|%.2fx|<= 20 instr/byte|%s\n",
               mb, mi, mi / 20, mi <= 20 ? "met" : "missed");
        close(ifd);
    } else if (!load_only) {
        /* No instruction counter here: callgrind counts them (the load alone, on a smaller
         * document: it runs ~50x slower), and the time per byte is printed beside it. */
        double ci = callgrind_ipb(argv0, dir);
        printf("load %.2f ns/byte, memcpy of the document %.3f ns/byte (%.1fx); no instruction "
               "counter (perf_event_open: %s)\n",
               med * 1e6 / (double)n, fl * 1e6 / (double)n, med / fl, strerror(ierr));
        if (ci > 0)
            printf("TABLE|manifest load (inline files), instructions per byte (callgrind)|%.1f "
                   "instr/byte|target|20 instr/byte|%.2fx|<= 20 instr/byte|%s\n",
                   ci, ci / 20, ci <= 20 ? "met" : "missed");
    }
    free(text);
    free(copy);
    free(f);
    free(ipb);
    free(t);
    unlink(path);
    int rc = create ? bench_create(dir, runs, create == 2) : 0;
    rmdir(dir);
    return rc;
}
