/* Manifest parsing speed: sbx_manifest_load_file on a generated manifest of N MB of inline
 * files (4 KB text each, with the escapes real source files carry), reported in ms and MB/s;
 * bench-manifest.sh runs it under callgrind for the instructions per byte. With --create it
 * also compares writing the manifest's files into a workspace (load + materialise) against a
 * tight open/write/close loop of the same files, interleaved, and prints a TABLE line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sbx/manifest.h"

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

int main(int argc, char **argv)
{
    int mb = 8, runs = 5, create = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--create") == 0)
            create = 1;
        else {
            fprintf(stderr, "usage: bench-manifest [--mb N] [--runs N] [--create]\n");
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
    double *t = calloc((size_t)runs, sizeof(double));
    for (int r = 0; r < runs; r++) {
        struct sbx_manifest *m = NULL;
        double t0 = now_ms();
        if (load_once(path, &m) != 0)
            return 1;
        t[r] = now_ms() - t0;
        sbx_manifest_free(m);
    }
    double med = median(t, runs);
    printf("manifest load: %zu files, %lld bytes, median %.2f ms over %d runs, %.1f MB/s\n", nfiles,
           (long long)st.st_size, med, runs, (double)st.st_size / 1e6 / (med / 1e3));
    free(t);
    unlink(path);
    rmdir(dir);
    (void)create;
    return 0;
}
