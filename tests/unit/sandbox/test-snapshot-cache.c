/* The snapshot store's stat cache file (statcache.c: records found by path and stat, every kind
 * of damage ignored), the incremental take that uses it (a file changed with its size and
 * mtime kept is read again; a damaged, torn or old JSON cache costs one full read and is
 * rebuilt), and the tree document's entries text (byte for byte jansson's compact sorted dump,
 * which the reference is the digest of). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/snapshot.h"
#include "sandbox/snapshot/internal.h"

static char top[64];

static struct snap_stat_key key(uint64_t ino)
{
    struct snap_stat_key k = {.dev = 2049,
                              .ino = ino,
                              .size = 4096,
                              .mtime_ns = 1700000000123456789,
                              .ctime_ns = 1700000001987654321,
                              .mode = 0100644};
    return k;
}

static const char sha_a[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
static const char sha_b[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/* The cache file bytes after writing three records. */
static void write_three(int dfd, const char *name)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf w;
    sbx__statcache_writer_init(&w);
    struct snap_stat_key k1 = key(1), k2 = key(2), k3 = key(3);
    sbx__statcache_add(&w, "a", 1, &k1, sha_a);
    sbx__statcache_add(&w, "dir/b.txt", 9, &k2, sha_b);
    sbx__statcache_add(&w, "dir/sub/c", 9, &k3, sha_a);
    CHECK_OK(sbx__statcache_write(dfd, name, &w, &err), &err);
    sbx_buf_release(&w);
}

static size_t read_file(int dfd, const char *name, char **out)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_fs_read(dfd, name, 1 << 20, &b, NULL) < 0)
        abort();
    size_t n = b.len;
    *out = sbx_buf_detach(&b, NULL);
    return n;
}

static void write_file(int dfd, const char *name, const char *data, size_t n)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_fs_write(dfd, name, data, n, 0600, 0, &err) < 0)
        abort();
}

/* The file with its trailing checksum made right again after an edit. */
static void rechecksum(char *data, size_t n)
{
    uint64_t sum = sbx__statcache_sum(data, n - 8);
    memcpy(data + n - 8, &sum, 8);
}

static int loads(int dfd, const char *name)
{
    struct snap_statcache c;
    int rc = sbx__statcache_load(dfd, name, 1 << 20, &c);
    sbx__statcache_release(&c);
    return rc;
}

static void test_cache_file(void)
{
    char dir[128];
    snprintf(dir, sizeof(dir), "%s/cachefile", top);
    mkdir(dir, 0700);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    write_three(dfd, "c.stat");
    struct snap_statcache c;
    CHECK_EQ_INT(sbx__statcache_load(dfd, "c.stat", 1 << 20, &c), 0);
    CHECK_EQ_INT(c.count, 3);
    struct snap_stat_key k = key(2);
    const char *got = sbx__statcache_find(&c, "dir/b.txt", 9, &k);
    CHECK(got && memcmp(got, sha_b, 64) == 0);
    k = key(1);
    got = sbx__statcache_find(&c, "a", 1, &k);
    CHECK(got && memcmp(got, sha_a, 64) == 0);
    k = key(3);
    CHECK(sbx__statcache_find(&c, "dir/sub/c", 9, &k) != NULL);
    /* a path it does not hold, or a prefix of one */
    CHECK(sbx__statcache_find(&c, "dir/b.tx", 8, &k) == NULL);
    CHECK(sbx__statcache_find(&c, "zzz", 3, &k) == NULL);
    /* any field of the stat that differs: not trusted */
    for (int f = 0; f < 6; f++) {
        k = key(2);
        switch (f) {
        case 0:
            k.dev++;
            break;
        case 1:
            k.ino++;
            break;
        case 2:
            k.size++;
            break;
        case 3:
            k.mtime_ns++;
            break;
        case 4:
            k.ctime_ns++;
            break;
        default:
            k.mode = 0100600;
            break;
        }
        CHECK(sbx__statcache_find(&c, "dir/b.txt", 9, &k) == NULL);
    }
    sbx__statcache_release(&c);
    /* an empty cache misses everything */
    CHECK(sbx__statcache_find(&c, "a", 1, &k) == NULL);
    CHECK_EQ_INT(loads(dfd, "missing.stat"), -1);

    char *good = NULL, *bad = malloc(1 << 16);
    size_t n = read_file(dfd, "c.stat", &good);
    /* every single flipped byte (header, record, path, padding, checksum) is refused */
    int refused = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, good, n);
        bad[i] ^= 0x40;
        write_file(dfd, "bad.stat", bad, n);
        refused += loads(dfd, "bad.stat") == -1;
    }
    CHECK_EQ_INT(refused, (int)n);
    /* torn: every shorter length; and a byte too many */
    refused = 0;
    for (size_t len = 0; len < n; len++) {
        write_file(dfd, "bad.stat", good, len);
        refused += loads(dfd, "bad.stat") == -1;
    }
    CHECK_EQ_INT(refused, (int)n);
    memcpy(bad, good, n);
    bad[n] = 0;
    write_file(dfd, "bad.stat", bad, n + 1);
    CHECK_EQ_INT(loads(dfd, "bad.stat"), -1);
    /* consistent checksums over a wrong header or record: version, byte order, count, body
     * size, a path length past the end, a zero path length */
    static const struct {
        size_t off;
        uint32_t v;
    } edits[] = {{8, 2},  {12, 0x04030201}, {16, 4},     {16, 2},
                 {24, 8}, {32 + 44, 4000},  {32 + 44, 0}};
    for (size_t i = 0; i < SBX_ARRAY_LEN(edits); i++) {
        memcpy(bad, good, n);
        memcpy(bad + edits[i].off, &edits[i].v, 4);
        rechecksum(bad, n);
        write_file(dfd, "bad.stat", bad, n);
        CHECK_EQ_INT(loads(dfd, "bad.stat"), -1);
    }
    /* the same bytes with the checksum made again load (the edits above were what failed) */
    memcpy(bad, good, n);
    rechecksum(bad, n);
    write_file(dfd, "bad.stat", bad, n);
    CHECK_EQ_INT(loads(dfd, "bad.stat"), 0);
    /* a cache over the size limit is not read */
    CHECK_EQ_INT(sbx__statcache_load(dfd, "c.stat", n - 1, &c), -1);
    free(good);
    free(bad);
    close(dfd);
}

static void put(int dfd, const char *path, const char *data)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_fs_write(dfd, path, data, strlen(data), 0644, SBX_FS_PARENTS, &err) < 0)
        abort();
}

static void cache_path(const char *store, const char *source, const char *ext, char *out,
                       size_t cap)
{
    uint8_t d[32];
    char hex[65];
    sbx_sha256(source, strlen(source), d, NULL);
    sbx_hex(d, 32, hex);
    snprintf(out, cap, "%s/cache/%s.%s", store, hex, ext);
}

static int to_buf(void *ctx, const void *p, size_t n, struct sbx_error *err)
{
    return sbx_buf_add(ctx, p, n, err);
}

/* The content of path in snapshot ref (caller frees), or NULL. */
static char *cat(struct sbx_snapshot_store *st, const char *ref, const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 1 << 20);
    if (sbx_snapshot_cat(st, ref, path, to_buf, &b, &err) < 0) {
        printf("# cat %s: %s\n", path, err.msg);
        sbx_buf_release(&b);
        return NULL;
    }
    return sbx_buf_detach(&b, NULL);
}

/* A file gone and one new: the cache is written anew with the records of this take only. */
static void incremental_new_and_gone(struct sbx_snapshot_store *st, int src,
                                     const struct sbx_snapshot_take_opts *o,
                                     struct sbx_snapshot_take_stats *s, const char *cpath)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *r1 = NULL, *r2 = NULL;
    CHECK_EQ_INT(unlinkat(src, "d2/f2", 0), 0);
    put(src, "d4/new", "new\n");
    sleep(3);
    CHECK_OK(sbx_snapshot_take(st, src, o, &r1, &err), &err);
    CHECK_EQ_INT(s->read_files, 1);
    CHECK_EQ_INT(s->files, 50);
    struct snap_statcache c;
    const char *slash = strrchr(cpath, '/');
    char dir[256];
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - cpath), cpath);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK_EQ_INT(sbx__statcache_load(dfd, slash + 1, 1 << 20, &c), 0);
    CHECK_EQ_INT(c.count, 50);
    CHECK_EQ_INT(sbx__statcache_slot(&c, "d2/f2", 5), -1);
    CHECK(sbx__statcache_slot(&c, "d4/new", 6) >= 0);
    sbx__statcache_release(&c);
    close(dfd);
    CHECK_OK(sbx_snapshot_take(st, src, o, &r2, &err), &err);
    CHECK_EQ_INT(s->read_files, 0);
    CHECK_EQ_STR(r2, r1);
    free(r1);
    free(r2);
}

static void test_incremental(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char store[128], ws[128], cpath[256], jpath[256];
    snprintf(store, sizeof(store), "%s/store", top);
    snprintf(ws, sizeof(ws), "%s/ws", top);
    mkdir(ws, 0755);
    int src = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; i < 50; i++) {
        char name[32], data[32];
        snprintf(name, sizeof(name), "d%d/f%d", i % 5, i);
        snprintf(data, sizeof(data), "content %04d\n", i);
        put(src, name, data);
    }
    struct sbx_snapshot_store *st = NULL;
    CHECK_OK(sbx_snapshot_store_open(store, &st, &err), &err);
    struct sbx_snapshot_take_stats s = {0};
    struct sbx_snapshot_take_opts o = {.source = "sandbox-cache", .out_stats = &s};
    char *r1 = NULL, *r2 = NULL, *r3 = NULL;
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r1, &err), &err);
    CHECK_EQ_INT(s.read_files, 50);
    cache_path(store, "sandbox-cache", "stat", cpath, sizeof(cpath));
    cache_path(store, "sandbox-cache", "json", jpath, sizeof(jpath));
    CHECK_EQ_INT(access(cpath, F_OK), 0);

    /* d1/f1 changed in place: same size, its mtime set back to what it was. Only its ctime
     * (and the racy window) tells; past the window the ctime alone must make it read. */
    struct stat before;
    CHECK_EQ_INT(fstatat(src, "d1/f1", &before, 0), 0);
    int fd = openat(src, "d1/f1", O_WRONLY | O_CLOEXEC);
    CHECK_EQ_INT(pwrite(fd, "CONTENT", 7, 0), 7);
    const struct timespec ts[2] = {before.st_atim, before.st_mtim};
    CHECK_EQ_INT(futimens(fd, ts), 0);
    close(fd);
    struct stat after;
    CHECK_EQ_INT(fstatat(src, "d1/f1", &after, 0), 0);
    CHECK_EQ_INT(after.st_size, before.st_size);
    CHECK(after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
          after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    sleep(3);
    /* the same files: the one changed record and the checksum are written over the file */
    struct stat c1, c2;
    CHECK_EQ_INT(stat(cpath, &c1), 0);
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r2, &err), &err);
    CHECK_EQ_INT(s.read_files, 1);
    CHECK_EQ_INT(s.files, 50);
    CHECK(r2 && strcmp(r2, r1) != 0);
    char *got = cat(st, r2, "d1/f1");
    CHECK_EQ_STR(got, "CONTENT 0001\n");
    free(got);
    CHECK_EQ_INT(stat(cpath, &c2), 0);
    CHECK(c2.st_ino == c1.st_ino && c2.st_size == c1.st_size);
    /* nothing changed: nothing read, the same reference, the cache not written */
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r3, &err), &err);
    CHECK_EQ_INT(s.read_files, 0);
    CHECK_EQ_STR(r3, r2);
    CHECK_EQ_INT(stat(cpath, &c1), 0);
    CHECK(c1.st_ino == c2.st_ino && c1.st_mtim.tv_nsec == c2.st_mtim.tv_nsec &&
          c1.st_mtim.tv_sec == c2.st_mtim.tv_sec);
    free(r3);
    r3 = NULL;

    /* a damaged cache: ignored (every file read, same reference), then rebuilt */
    char *data = NULL;
    int cfd = open(store, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    size_t n = read_file(cfd, cpath + strlen(store) + 1, &data);
    data[n / 2] ^= 1;
    write_file(cfd, cpath + strlen(store) + 1, data, n);
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r3, &err), &err);
    CHECK_EQ_INT(s.read_files, 50);
    CHECK_EQ_STR(r3, r2);
    free(r3);
    r3 = NULL;
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r3, &err), &err);
    CHECK_EQ_INT(s.read_files, 0);
    free(r3);
    r3 = NULL;
    /* torn (a crash while it was written: it is not fsynced) */
    CHECK_EQ_INT(truncate(cpath, (off_t)n - 40), 0);
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r3, &err), &err);
    CHECK_EQ_INT(s.read_files, 50);
    CHECK_EQ_STR(r3, r2);
    free(r3);
    r3 = NULL;

    /* the JSON cache of an earlier version, claiming other content for every file: never
     * read, and removed when the binary cache is made */
    json_t *files = json_object();
    for (int i = 0; i < 50; i++) {
        char name[32];
        struct stat sb;
        snprintf(name, sizeof(name), "d%d/f%d", i % 5, i);
        CHECK_EQ_INT(fstatat(src, name, &sb, 0), 0);
        json_object_set_new(
                files, name,
                json_pack("[IIIIIIs]", (json_int_t)sb.st_dev, (json_int_t)sb.st_ino,
                          (json_int_t)sb.st_size,
                          (json_int_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec,
                          (json_int_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec,
                          (json_int_t)sb.st_mode, sha_a));
    }
    json_t *doc = json_pack("{sisO}", "version", 1, "files", files);
    char *text = sbx_json_dumps(doc, SBX_JSON_COMPACT);
    json_decref(doc);
    json_decref(files);
    CHECK_EQ_INT(unlink(cpath), 0);
    write_file(cfd, jpath + strlen(store) + 1, text, strlen(text));
    free(text);
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r3, &err), &err);
    CHECK_EQ_INT(s.read_files, 50);
    CHECK_EQ_STR(r3, r2);
    CHECK(access(jpath, F_OK) < 0 && errno == ENOENT);
    CHECK_EQ_INT(access(cpath, F_OK), 0);
    free(r3);
    r3 = NULL;
    incremental_new_and_gone(st, src, &o, &s, cpath);
    /* a source of its own has a cache of its own */
    struct sbx_snapshot_take_opts o2 = {.source = "other", .out_stats = &s};
    CHECK_OK(sbx_snapshot_take(st, src, &o2, &r3, &err), &err);
    CHECK_EQ_INT(s.read_files, 50);
    free(r3);
    free(data);
    close(cfd);
    free(r1);
    free(r2);
    sbx_snapshot_store_free(st);
    close(src);
}

/* The entries text against jansson's compact, key-sorted dump of the same entries. */
static void test_entries_text(void)
{
    char all[128], printable[128];
    size_t np = 0;
    for (int i = 1; i < 128; i++) {
        all[i - 1] = (char)i;
        /* every byte the entries text copies as it is, without the canonical writer */
        if (i >= 0x20 && i != '"' && i != '\\')
            printable[np++] = (char)i;
    }
    all[127] = 0;
    printable[np] = 0;
    const char *strs[] = {
            "plain",        all,      "caf\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80", "q\"b\\s/",
            "\x7f\x1f\t\n", printable};
    struct snap_tree t = {0};
    json_t *want = json_array();
    for (size_t i = 0; i < SBX_ARRAY_LEN(strs); i++) {
        for (int type = SNAP_DIR; type <= SNAP_SYMLINK; type++) {
            struct snap_entry *e =
                    sbx__snap_tree_add(&t, sbx_xstrdup(strs[i]), (enum snap_type)type, 0750 - i);
            json_t *o = json_object();
            json_object_set_new(o, "path", json_string(strs[i]));
            json_object_set_new(o, "type",
                                json_string(type == SNAP_DIR    ? "dir"
                                            : type == SNAP_FILE ? "file"
                                                                : "symlink"));
            if (type != SNAP_SYMLINK)
                json_object_set_new(o, "mode", json_integer(0750 - (json_int_t)i));
            if (type == SNAP_FILE) {
                e->size = i == 1 ? UINT64_C(1) << 62 : i;
                memcpy(e->sha, sha_b, sizeof(e->sha));
                json_object_set_new(o, "size", json_integer((json_int_t)e->size));
                json_object_set_new(o, "sha256", json_string(sha_b));
            }
            if (type == SNAP_SYMLINK) {
                e->target = sbx_xstrdup(strs[(i + 1) % SBX_ARRAY_LEN(strs)]);
                json_object_set_new(o, "target", json_string(e->target));
            }
            json_array_append_new(want, o);
        }
    }
    char *w = sbx_json_dumps(want, SBX_JSON_COMPACT | SBX_JSON_SORTED);
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    sbx__snap_entries_text(&t, &b);
    CHECK_EQ_MEM(b.data, b.len, w, strlen(w));
    /* an empty tree */
    struct snap_tree none = {0};
    sbx_buf_setlen(&b, 0);
    sbx__snap_entries_text(&none, &b);
    CHECK_EQ_MEM(b.data, b.len, "[]", 2);
    sbx_buf_release(&b);
    free(w);
    json_decref(want);
    sbx__snap_tree_release(&t);
}

/* Validation's normal-form check says what sbx_path_normalize says. */
static void test_validate_paths(void)
{
    char longname[300], longpath[4200];
    memset(longname, 'n', 256);
    longname[256] = 0;
    memset(longpath, 'p', 4096);
    longpath[4096] = 0;
    const char *paths[] = {"a",
                           "/a",
                           "a/",
                           "a//b",
                           "./a",
                           "a/.",
                           "a/..",
                           "..",
                           ".",
                           "",
                           ".a",
                           "..a",
                           "a..",
                           "a\x01",
                           "\xff",
                           "\xc3\xa9",
                           "a b",
                           "a\\b",
                           "a/./b",
                           "a/b",
                           "\x7f",
                           longname,
                           longpath,
                           "x/"
                           "\xe2\x80"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(paths); i++) {
        const char *p = paths[i];
        char *norm = NULL;
        int normal =
                sbx_path_normalize(p, strlen(p), 0, NULL, &norm, NULL) == 0 && strcmp(norm, p) == 0;
        free(norm);
        struct snap_tree t = {0};
        sbx__snap_tree_add(&t, sbx_xstrdup(p), SNAP_DIR, 0755);
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_snapshot_limits lim = {.max_path = 8192, .max_depth = 8192};
        int rc = sbx__snap_tree_validate(&t, &lim, &err);
        /* (the message of a 4096-byte path is cut before its end: the code tells) */
        int said = rc < 0 && err.code == SBX_E_PARSE &&
                   strstr(err.msg, "is not under a directory entry") == NULL;
        if (said == normal)
            printf("# path %zu: normalize says %d, validate says '%s'\n", i, normal, err.msg);
        CHECK_EQ_INT(said, !normal);
        sbx__snap_tree_release(&t);
    }
    /* parents: an explicit directory, found whatever its siblings */
    struct snap_tree t = {0};
    const char *ok[] = {"a", "a/b", "a/b/c", "a/b/d", "a/bb", "a/bb/x", "b", "b/c"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(ok); i++)
        sbx__snap_tree_add(&t, sbx_xstrdup(ok[i]), SNAP_DIR, 0755);
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx__snap_tree_validate(&t, NULL, &err), &err);
    sbx__snap_tree_add(&t, sbx_xstrdup("c/x"), SNAP_DIR, 0755);
    CHECK_ERR(sbx__snap_tree_validate(&t, NULL, &err), SBX_E_PARSE, &err,
              "entry 'c/x' is not under a directory entry");
    sbx__snap_tree_release(&t);
    struct snap_tree t2 = {0};
    sbx__snap_tree_add(&t2, sbx_xstrdup("a"), SNAP_FILE, 0644);
    memcpy(t2.v[0].sha, sha_a, sizeof(t2.v[0].sha));
    sbx__snap_tree_add(&t2, sbx_xstrdup("a/b"), SNAP_DIR, 0755);
    CHECK_ERR(sbx__snap_tree_validate(&t2, NULL, &err), SBX_E_PARSE, &err,
              "entry 'a/b' is not under a directory entry");
    sbx__snap_tree_release(&t2);
}

/* Names jansson escapes, taken and restored: the reference made from the written text must be
 * the one restore recomputes with jansson. */
static void test_escaped_names(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char store[128], ws[128], out[128];
    snprintf(store, sizeof(store), "%s/store-esc", top);
    snprintf(ws, sizeof(ws), "%s/ws-esc", top);
    snprintf(out, sizeof(out), "%s/out-esc", top);
    mkdir(ws, 0755);
    mkdir(out, 0755);
    int src = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int dst = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    put(src, "q\"uote/back\\slash", "x\n");
    put(src, "caf\xc3\xa9 \xf0\x9f\x98\x80", "y\n");
    CHECK_EQ_INT(symlinkat("tab\there\x01", src, "link"), 0);
    struct sbx_snapshot_store *st = NULL;
    CHECK_OK(sbx_snapshot_store_open(store, &st, &err), &err);
    char *ref = NULL;
    CHECK_OK(sbx_snapshot_take(st, src, NULL, &ref, &err), &err);
    CHECK_OK(sbx_snapshot_restore(st, ref, dst, &err), &err);
    char target[64] = "";
    CHECK_EQ_INT(readlinkat(dst, "link", target, sizeof(target) - 1), 9);
    CHECK_EQ_STR(target, "tab\there\x01");
    char *got = cat(st, ref, "q\"uote/back\\slash");
    CHECK_EQ_STR(got, "x\n");
    free(got);
    free(ref);
    sbx_snapshot_store_free(st);
    close(src);
    close(dst);
}

/* Directories big enough to have their entries stat'ed on several threads (take.c: 64 entries
 * or more, in batches of 4096): one of 4200 entries (two batches) holding a directory of 70
 * (walked while its parent's batch is held), a symlink and a fifo among the files. Every file
 * is in the snapshot with its content; one changed is the only one read again. */
static void test_large_dirs(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char store[128], ws[128];
    snprintf(store, sizeof(store), "%s/store-large", top);
    snprintf(ws, sizeof(ws), "%s/ws-large", top);
    mkdir(ws, 0755);
    int src = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char name[64], data[64];
    for (int i = 0; i < 4200; i++) {
        snprintf(name, sizeof(name), "big/f%d", i);
        snprintf(data, sizeof(data), "big %d\n", i);
        put(src, name, data);
    }
    for (int i = 0; i < 70; i++) {
        snprintf(name, sizeof(name), "big/sub/g%d", i);
        snprintf(data, sizeof(data), "sub %d\n", i);
        put(src, name, data);
    }
    CHECK_EQ_INT(symlinkat("f1", src, "big/link"), 0);
    CHECK_EQ_INT(mkfifoat(src, "big/fifo", 0600), 0);
    struct sbx_snapshot_store *st = NULL;
    CHECK_OK(sbx_snapshot_store_open(store, &st, &err), &err);
    struct sbx_snapshot_take_stats s = {0};
    struct sbx_snapshot_take_opts o = {.source = "large", .out_stats = &s};
    char *r1 = NULL, *r2 = NULL;
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r1, &err), &err);
    CHECK_EQ_INT(s.files, 4270);
    CHECK_EQ_INT(s.read_files, 4270);
    char *got = cat(st, r1, "big/f4199");
    CHECK_EQ_STR(got, "big 4199\n");
    free(got);
    got = cat(st, r1, "big/f0");
    CHECK_EQ_STR(got, "big 0\n");
    free(got);
    got = cat(st, r1, "big/sub/g69");
    CHECK_EQ_STR(got, "sub 69\n");
    free(got);
    /* the symlink is in the tree as one (with its target), the fifo is not */
    struct sbx_buf b;
    sbx_buf_init(&b, 1 << 20);
    CHECK(sbx_snapshot_cat(st, r1, "big/link", to_buf, &b, &err) < 0 &&
          strstr(err.msg, "symlink (to 'f1')"));
    CHECK(sbx_snapshot_cat(st, r1, "big/fifo", to_buf, &b, &err) < 0 &&
          !strstr(err.msg, "symlink"));
    sbx_buf_release(&b);
    put(src, "big/f4100", "changed\n"); /* another size */
    /* past the racy window of every file: only the changed one is read */
    sleep(3);
    CHECK_OK(sbx_snapshot_take(st, src, &o, &r2, &err), &err);
    CHECK_EQ_INT(s.files, 4270);
    CHECK_EQ_INT(s.read_files, 1);
    CHECK(r2 && strcmp(r2, r1) != 0);
    got = cat(st, r2, "big/f4100");
    CHECK_EQ_STR(got, "changed\n");
    free(got);
    free(r1);
    free(r2);
    sbx_snapshot_store_free(st);
    close(src);
}

int main(void)
{
    TAP_START();
    snprintf(top, sizeof(top), "/tmp/sbx-test-snapcache-XXXXXX");
    if (!mkdtemp(top))
        abort();
    TAP_RUN(test_cache_file);
    TAP_RUN(test_entries_text);
    TAP_RUN(test_validate_paths);
    TAP_RUN(test_escaped_names);
    TAP_RUN(test_incremental);
    TAP_RUN(test_large_dirs);
    rm_tree(top);
    return TAP_DONE();
}
