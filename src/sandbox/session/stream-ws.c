/* Workspaces as tar streams (docs/internals/remote.md, "Workspace streams"): a snapshot of a
 * provider's workspace read from its workspace_export straight into the snapshot store, and a
 * snapshot written to its workspace_import, each through a pipe whose other end a thread of
 * its own serves. No copy of the workspace is made on this host. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sandbox/snapshot/stream.h"
#include "sbx/fs.h"

/* The thread's side of a pipe: a writer of the tar (the provider's export, or the store's tar
 * of a snapshot). */
struct writer {
    struct sbx_session *s;
    struct sbx_snapshot_store *st;
    const char *ref;
    sbx_progress_fn *progress;
    void *progress_data;
    int fd; /* the pipe's write end, closed when done: the reader then sees the end */
    int rc;
    struct sbx_error err;
};

/* A write into a pipe whose reader gave up is EPIPE here, not a SIGPIPE for the process. */
static void block_sigpipe(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *export_main(void *arg)
{
    struct writer *w = arg;
    block_sigpipe();
    w->rc = w->s->ops->workspace_export(w->s, w->fd, &w->err);
    sbx_fd_close(&w->fd);
    return NULL;
}

static void *tar_main(void *arg)
{
    struct writer *w = arg;
    block_sigpipe();
    w->rc = sbx__snapshot_write_workspace_tar(w->st, w->ref, w->fd, w->progress, w->progress_data,
                                              &w->err);
    sbx_fd_close(&w->fd);
    return NULL;
}

/* Start the writer thread on a new pipe; *read_end: the caller's end. */
static int start(void *(*fn)(void *), struct writer *w, pthread_t *t, int *read_end,
                 struct sbx_error *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "pipe");
    w->fd = p[1];
    w->rc = 0;
    w->err = (struct sbx_error)SBX_ERROR_INIT;
    int r = pthread_create(t, NULL, fn, w);
    if (r != 0) {
        sbx_fd_close(&p[0]);
        sbx_fd_close(&p[1]);
        return sbx_error_set(err, SBX_E_SYS, r, "cannot start a thread");
    }
    *read_end = p[0];
    return 0;
}

/* The reader (rc, err) is done and its end closed: join the writer, and say what failed. When
 * both did, the one whose error is not the other's going away explains it: a reader that
 * refused a member leaves the writer with EPIPE, a writer cut off leaves the reader with a
 * truncated archive. */
static int finish(pthread_t t, struct writer *w, int rc, struct sbx_error *err)
{
    pthread_join(t, NULL);
    if (w->rc == 0)
        return rc;
    if (rc == 0 || w->err.sys_errno != EPIPE)
        return sbx_error_copy(err, &w->err);
    return rc;
}

int sbx__session_snapshot_stream(struct sbx_session *s, struct sbx_snapshot_store *st,
                                 const struct sbx__snap_stream_opts *o, char **out_ref,
                                 struct sbx_error *err)
{
    struct writer w = {.s = s};
    pthread_t t;
    int fd = -1;
    int rc = start(export_main, &w, &t, &fd, err);
    if (rc < 0)
        return rc;
    char *ref = NULL;
    rc = sbx__snapshot_import_workspace(st, fd, o, &ref, err);
    sbx_fd_close(&fd); /* a writer still writing gets EPIPE and ends */
    rc = finish(t, &w, rc, err);
    if (rc == 0)
        *out_ref = ref;
    else
        free(ref);
    return rc;
}

int sbx__session_restore_stream(struct sbx_session *s, struct sbx_snapshot_store *st,
                                const char *ref, sbx_progress_fn *progress, void *progress_data,
                                struct sbx_error *err)
{
    if (!s->ops->workspace_import)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "provider '%s' cannot restore a snapshot from a stream", s->provider);
    struct writer w = {.st = st, .ref = ref, .progress = progress, .progress_data = progress_data};
    pthread_t t;
    int fd = -1;
    int rc = start(tar_main, &w, &t, &fd, err);
    if (rc < 0)
        return rc;
    rc = s->ops->workspace_import(s, fd, err);
    sbx_fd_close(&fd);
    return finish(t, &w, rc, err);
}
