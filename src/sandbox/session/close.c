/* The end of a session: closing or deleting it (its interactive processes are killed first,
 * pty.c, then the provider closes it), freeing it, and the release of the shared part that a
 * provider's free calls. Above everything else of a session: it is what ends them. */
#include <pthread.h>
#include <stdlib.h>

#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sbx/manifest.h"
#include "sbx/session.h"

void sbx_session_release_base(struct sbx_session *s)
{
    sbx_session_pty_kill_all(s);
    free(s->ptys);
    s->ptys = NULL;
    pthread_mutex_destroy(&s->lock);
    free(s->id);
    free(s->root);
    s->id = s->root = NULL;
    sbx_manifest_free(s->manifest);
    s->manifest = NULL;
}

static int close_session(struct sbx_session *s, int delete_workspace, struct sbx_error *err)
{
    struct sbx_session_event ev;
    sbx__session_event_start(s, &ev, "close");
    sbx_session_pty_kill_all(s);
    int rc = s->ops->close(s, delete_workspace, err);
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}

int sbx_session_close(struct sbx_session *s, struct sbx_error *err)
{
    return close_session(s, 0, err);
}

int sbx_session_delete(struct sbx_session *s, struct sbx_error *err)
{
    return close_session(s, 1, err);
}

void sbx_session_free(struct sbx_session *s)
{
    if (s)
        s->ops->free(s);
}
