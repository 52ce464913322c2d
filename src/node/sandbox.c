/* The daemon's requests about one sandbox's life past create and exec: what it uses, its log,
 * stop and start (src/node/daemon.h, docs/internals/node.md). Each is the local provider's own
 * call on this host: stop snapshots the workspace into the node's store and ends every process
 * of the sandbox; start brings it back under the same id, its record and tokens unchanged. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "node/daemon.h"
#include "sbx/fs.h"
#include "sbx/session.h"

#define LOG_MAX ((size_t)4 << 20) /* the end of a sandbox's log sent at most */

static json_t *figure(uint64_t v)
{
    return v == SBX_STAT_UNKNOWN ? json_null() : json_integer((json_int_t)v);
}

/* The local session of id (attach), or an answer with why not. */
static struct sbx_session *attach(struct node_conn *c, const char *id, struct sbx_client **cl)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    if (sbx_client_new("local", NULL, cl, &err) < 0 || sbx_client_attach(*cl, id, &s, &err) < 0) {
        node_respond_error(c, &err);
        return NULL;
    }
    return s;
}

static void stats(struct node_conn *c, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = attach(c, id, &cl);
    struct sbx_session_stats st;
    if (s && sbx_session_stats(s, &st, &err) == 0) {
        json_t *ans = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b}", "cpu_ns",
                                figure(st.cpu_ns), "memory", figure(st.memory), "memory_limit",
                                figure(st.memory_limit), "pids", figure(st.pids), "pids_limit",
                                figure(st.pids_limit), "disk", figure(st.disk), "disk_limit",
                                figure(st.disk_limit), "disk_partial", st.disk_partial);
        node_respond(c, 200, ans, &err);
        json_decref(ans);
    } else if (s) {
        node_respond_error(c, &err);
    }
    sbx_session_free(s);
    sbx_client_free(cl);
}

/* The log's last LOG_MAX bytes as application/octet-stream. */
static void log_tail(struct node_conn *c, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = attach(c, id, &cl);
    struct sbx_buf b;
    struct stat st;
    int fd = -1;
    sbx_buf_init(&b, LOG_MAX);
    if (s && sbx_session_log_open(s, &fd, &err) == 0 && fstat(fd, &st) == 0 &&
        (size_t)st.st_size > LOG_MAX && lseek(fd, st.st_size - (off_t)LOG_MAX, SEEK_SET) < 0)
        sbx_error_errno(&err, errno, "cannot read the log of sandbox '%s'", id);
    if (s && !err.code && sbx_fd_read_all(fd, LOG_MAX, &b, &err) == 0) {
        char head[200];
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                         "Content-Length: %zu\r\nSbx-Node-Version: " NODE_VERSION "\r\n\r\n",
                         b.len);
        if (node_send(c, head, (size_t)n, &err) == 0 && b.len)
            node_send(c, b.data, b.len, &err);
    } else if (s) {
        node_respond_error(c, &err);
    }
    if (fd >= 0)
        close(fd);
    sbx_buf_release(&b);
    sbx_session_free(s);
    sbx_client_free(cl);
}

/* POST .../stop: the local provider's stop (the workspace snapshotted into the node's store,
 * every process ended); the record and its tokens stay, for start and remove. */
static void stop(struct node_conn *c, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    char *ref = NULL;
    if (sbx_client_new("local", NULL, &cl, &err) == 0 && sbx_client_stop(cl, id, &ref, &err) == 0) {
        json_t *ans = json_pack("{s:s, s:s, s:s?}", "id", id, "status", "stopped", "snapshot", ref);
        node_respond(c, 200, ans, &err);
        json_decref(ans);
    } else {
        node_respond_error(c, &err);
    }
    free(ref);
    sbx_client_free(cl);
}

static void start(struct node_conn *c, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = NULL;
    json_t *st = NULL;
    if (sbx_client_new("local", NULL, &cl, &err) == 0 &&
        sbx_client_start(cl, id, NULL, &s, &err) == 0) {
        json_t *ans = json_pack("{s:s, s:s, s:s}", "id", id, "root", sbx_session_root(s), "status",
                                "live");
        if (sbx_session_state(s, &st, &err) == 0 && json_is_string(json_object_get(st, "created")))
            json_object_set(ans, "created", json_object_get(st, "created"));
        sbx_error_clear(&err);
        node_respond(c, 200, ans, &err);
        json_decref(ans);
    } else {
        node_respond_error(c, &err);
    }
    json_decref(st);
    sbx_session_free(s);
    sbx_client_free(cl);
}

int node_sandbox_request(struct node_conn *c, struct node_req *r, const char *id, const char *rest)
{
    int get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
    if (get && strcmp(rest, "stats") == 0)
        stats(c, id);
    else if (get && strcmp(rest, "log") == 0)
        log_tail(c, id);
    else if (post && strcmp(rest, "stop") == 0)
        stop(c, id);
    else if (post && strcmp(rest, "start") == 0)
        start(c, id);
    else
        return 0;
    return 1;
}
