/* Patch tests: a small in-memory file provider for the patch engine (struct sbx_patch_fs), so
 * the tests see exactly what a patch would write. A file with data NULL is a directory. */
#ifndef SBX_TEST_MEMFS_H
#define SBX_TEST_MEMFS_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/patch.h"

struct mfile {
    char *path;
    char *data; /* NULL: a directory */
    size_t len;
    unsigned mode;
};

struct memfs {
    struct sbx_patch_fs fs;
    struct mfile files[32];
    size_t n;
    int commits;     /* commits made */
    int fail_commit; /* make the next commit fail */
};

static inline struct mfile *mfind(struct memfs *m, const char *path)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->files[i].path, path))
            return &m->files[i];
    return NULL;
}

/* Put len bytes of data (NULL: a directory) at path, replacing what is there. */
static inline void mputn(struct memfs *m, const char *path, const char *data, size_t len)
{
    struct mfile *f = mfind(m, path);
    if (!f) {
        f = &m->files[m->n++];
        f->path = sbx_xstrdup(path);
    } else {
        free(f->data);
    }
    f->data = data ? sbx_xstrndup(data, len) : NULL;
    f->len = data ? len : 0;
    f->mode = 0644;
}

static inline void mput(struct memfs *m, const char *path, const char *data)
{
    mputn(m, path, data, data ? strlen(data) : 0);
}

static inline const char *mget(struct memfs *m, const char *path)
{
    struct mfile *f = mfind(m, path);
    return f ? f->data : NULL;
}

static inline int m_read(struct sbx_patch_fs *fs, const char *path, size_t max, struct sbx_buf *out,
                         unsigned *mode, struct sbx_error *err)
{
    struct mfile *f = mfind(fs->ctx, path);
    if (!f || !f->data)
        return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "'%s' not found", path);
    if (f->len > max)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is larger than %zu bytes", path, max);
    *mode = f->mode;
    return sbx_buf_add(out, f->data, f->len, err);
}

static inline int m_exists(struct sbx_patch_fs *fs, const char *path,
                           enum sbx_patch_file_kind *kind, struct sbx_error *err)
{
    (void)err;
    struct mfile *f = mfind(fs->ctx, path);
    *kind = !f ? SBX_PATCH_FILE_NONE : f->data ? SBX_PATCH_FILE_REGULAR : SBX_PATCH_FILE_DIR;
    return 0;
}

static inline int m_commit(struct sbx_patch_fs *fs, const struct sbx_patch_change *c, size_t n,
                           struct sbx_error *err)
{
    struct memfs *m = fs->ctx;
    if (m->fail_commit)
        return sbx_error_set(err, SBX_E_IO, EIO, "disk on fire");
    m->commits++;
    for (size_t i = 0; i < n; i++) {
        if (c[i].data) {
            mputn(m, c[i].path, c[i].data, c[i].len);
            if (c[i].mode)
                mfind(m, c[i].path)->mode = c[i].mode;
        } else {
            struct mfile *f = mfind(m, c[i].path);
            free(f->path);
            free(f->data);
            *f = m->files[--m->n];
        }
    }
    return 0;
}

static const struct sbx_patch_fs_ops m_ops = {m_read, m_exists, m_commit};

static inline void mem_init(struct memfs *m)
{
    memset(m, 0, sizeof(*m));
    m->fs.ops = &m_ops;
    m->fs.ctx = m;
    m->fs.dirfd = -1;
}

static inline void mem_release(struct memfs *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->files[i].path);
        free(m->files[i].data);
    }
    m->n = 0;
}

#endif
