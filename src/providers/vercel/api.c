/* The Vercel Sandbox REST API as Vercel's npm client speaks it (@vercel/sandbox 3.x): a named
 * sandbox with a current session, the token as a bearer token, the team as the teamId query of
 * every request. Control-plane calls, short commands run to completion (POST .../cmd with wait
 * and logs: one NDJSON stream), and whole files through fs/read and fs/write (a tar.gz body
 * built with libarchive). Requests go through the remote layer (src/sandbox/wire/http.h):
 * 429 and 503 are retried honouring Retry-After, errors are scrubbed of the token. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "core/dl-archive.h"
#include "providers/vercel/vercel.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/wire.h"
#include "sbx/fs.h"
#include "sbx/json.h"

#define CALL_MS       60000
#define RUN_MS        600000
#define RETRIES       3
#define RETRY_WAIT_MS 60000
#define IO_CHUNK      65536

struct sbx__vercel_conf *sbx__vercel_conf_ref(struct sbx__vercel_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_SEQ_CST);
    return c;
}

void sbx__vercel_conf_unref(struct sbx__vercel_conf *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_SEQ_CST) > 0)
        return;
    sbx__endpoint_free(c->ep);
    pthread_mutex_destroy(&c->lock);
    free(c->api_url);
    free(c->team);
    free(c->project);
    free(c->tok_what);
    free(c->ca_file);
    json_decref(c->tok_ref);
    free(c);
}

int sbx__vercel_ep(struct sbx__vercel_conf *c, struct sbx__endpoint **out, struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    if (!c->ep) {
        struct sbx__endpoint_opts o = {
                .url = c->api_url,
                .name = "the Vercel API",
                .ca_file = c->ca_file,
                .auth = SBX__AUTH_BEARER,
                .token = {.ref = c->tok_ref},
                .timeout_ms = CALL_MS,
                .max_retries = RETRIES,
                .max_retry_wait_ms = RETRY_WAIT_MS,
        };
        rc = sbx__endpoint_new(&o, &c->ep, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "no Vercel token: %s is not set (the vercel provider's token "
                               "option names where it is)",
                               c->tok_what);
    }
    if (rc == 0 && !c->team)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "no Vercel team: set $VERCEL_TEAM_ID or the vercel provider's "
                           "team_id option");
    *out = c->ep;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

char *sbx__vercel_path(const struct sbx__vercel_conf *c, const char *path, int project)
{
    char *team = sbx__http_escape(c->team ? c->team : "", 0);
    char *proj = project && c->project ? sbx__http_escape(c->project, 0) : NULL;
    char *p = sbx_xasprintf("%s%cteamId=%s%s%s", path, strchr(path, '?') ? '&' : '?', team,
                            proj ? "&projectId=" : "", proj ? proj : "");
    free(team);
    free(proj);
    return p;
}

/* The service's error code ({"error": {"code"}}) into code (64 bytes). */
static void error_code(const struct sbx_buf *body, char *code)
{
    code[0] = '\0';
    json_t *j = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
    const char *s = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    if (s)
        sbx__wire_clean(s, strlen(s), code, 64);
    json_decref(j);
}

/* Vercel's words for an error status (sbx__http_words_fn). */
static int vercel_words(void *ctx, long status, const char *what, const char *msg,
                        struct sbx_error *err)
{
    const struct sbx__vercel_conf *c = ctx;
    char said[512];
    if (msg[0])
        snprintf(said, sizeof(said), "%s", msg);
    else
        snprintf(said, sizeof(said), "HTTP %ld", status);
    if (status == 401 || status == 403)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the Vercel API refused the token from %s for team '%s' (HTTP %ld): "
                             "%s",
                             c->tok_what, c->team ? c->team : "", status, said);
    if (status == 429)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Vercel API is rate limiting or over quota (HTTP 429, retries "
                             "exhausted): %s",
                             said);
    if (status == 410)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the Vercel sandbox's session stopped (%s): %s",
                             what, said);
    if (status == 404)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "the Vercel API has no %s: %s", what, said);
    return 0;
}

int sbx__vercel_status_error(struct sbx__vercel_conf *c, long status, const struct sbx_buf *body,
                             const char *what, char *code, struct sbx_error *err)
{
    char codebuf[64];
    error_code(body, code ? code : codebuf);
    return sbx__http_service_error(c->ep, status, body->data, body->len, what, vercel_words, c,
                                   err);
}

int sbx__vercel_session_error(const struct sbx__vercel_target *t, long status,
                              const struct sbx_buf *body, const char *what, char *code,
                              struct sbx_error *err)
{
    char codebuf[64];
    if (!code)
        code = codebuf;
    int rc = sbx__vercel_status_error(t->conf, status, body, what, code, err);
    if ((status == 404 && strcmp(code, "file_not_found") != 0) || status == 410)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "sandbox '%s' is gone (its session stopped, expired or was deleted): "
                           "%s",
                           t->name, err->msg);
    return rc;
}

int sbx__vercel_api(struct sbx__vercel_conf *c, const char *method, const char *path, int project,
                    const json_t *body, json_t **out, char *code, struct sbx_error *err)
{
    struct sbx__endpoint *ep;
    int rc = sbx__vercel_ep(c, &ep, err);
    if (rc < 0)
        return rc;
    if (out)
        *out = NULL;
    if (code)
        code[0] = '\0';
    char *full = sbx__vercel_path(c, path, project);
    struct sbx__http_req req = {.method = method, .path = full, .json = body};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    if ((rc = sbx__http_call(ep, &req, &resp, err)) == 0) {
        if (resp.status >= 400) {
            char what[160];
            snprintf(what, sizeof(what), "%s %s", method, path);
            rc = sbx__vercel_status_error(c, resp.status, &resp.body, what, code, err);
        } else if (out && resp.body.len) {
            json_error_t je;
            *out = json_loadb(resp.body.data, resp.body.len, JSON_REJECT_DUPLICATES, &je);
            if (!*out)
                rc = sbx_error_set(err, SBX_E_API, 0,
                                   "the Vercel API answered %s %s with "
                                   "invalid JSON: %s",
                                   method, path, je.text);
        }
    }
    sbx__http_resp_release(&resp);
    free(full);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Targets */

void sbx__vercel_target_init(struct sbx__vercel_target *t, struct sbx__vercel_conf *c,
                             const char *name, const char *session, const char *root)
{
    t->conf = sbx__vercel_conf_ref(c);
    t->name = sbx_xstrdup(name);
    t->session = sbx_xstrdup(session ? session : "");
    t->root = sbx_xstrdup(root);
}

void sbx__vercel_target_copy(struct sbx__vercel_target *dst, const struct sbx__vercel_target *src)
{
    sbx__vercel_target_init(dst, src->conf, src->name, src->session, src->root);
}

void sbx__vercel_target_release(struct sbx__vercel_target *t)
{
    if (t->conf)
        sbx__vercel_conf_unref(t->conf);
    free(t->name);
    free(t->session);
    free(t->root);
    memset(t, 0, sizeof(*t));
}

char *sbx__vercel_session_path(const struct sbx__vercel_target *t, const char *op)
{
    char *sid = sbx__http_escape(t->session, 0);
    char *p = sbx_xasprintf("/v2/sandboxes/sessions/%s/%s", sid, op);
    free(sid);
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * NDJSON with NULs */

void sbx__vercel_lines_init(struct sbx__ndjson *l, sbx__ndjson_fn *fn, void *ud)
{
    sbx__ndjson_init(l, SBX__VERCEL_LINE_MAX, 0, fn, ud);
    l->allow_nul = 1;
}

static int lines_sink(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    return sbx__ndjson_feed(ud, (const char *)p, n, err);
}

/* ---------------------------------------------------------------------------------------------
 * Short commands (in "/": the workspace may not exist yet, and the shared script names every
 * path in full) */

struct run_ctx {
    struct sbx__shell_run *out;
    int started, ended;
};

static int run_line(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    (void)line;
    struct run_ctx *c = ud;
    const json_t *cmd = json_object_get(v, "command");
    if (json_is_object(cmd)) {
        const json_t *code = json_object_get(cmd, "exitCode");
        if (c->started && json_is_integer(code)) {
            c->out->code = (int)json_integer_value(code);
            c->ended = 1;
        }
        c->started = 1;
        return 0;
    }
    const char *stream = json_string_value(json_object_get(v, "stream"));
    const json_t *data = json_object_get(v, "data");
    if (stream && strcmp(stream, "error") == 0) {
        const char *m = json_string_value(json_object_get(data, "message"));
        char clean[256];
        sbx__wire_clean(m ? m : "?", m ? strlen(m) : 1, clean, sizeof(clean));
        return sbx_error_set(err, SBX_E_API, 0, "the Vercel sandbox's command failed: %s", clean);
    }
    struct sbx_buf *b = stream && strcmp(stream, "stderr") == 0 ? &c->out->err : &c->out->out;
    const char *s = json_string_value(data);
    return s ? sbx_buf_add(b, s, json_string_length(data), err) : 0;
}

int sbx__vercel_run(const struct sbx__vercel_target *t, const char *const *argv,
                    struct sbx__shell_run *out, struct sbx_error *err)
{
    struct sbx__endpoint *ep;
    int rc = sbx__vercel_ep(t->conf, &ep, err);
    if (rc < 0)
        return rc;
    json_t *args = json_array();
    for (const char *const *a = argv + 1; *a; a++)
        sbx_json_append(args, sbx_json_str(*a));
    json_t *body = json_pack("{s:s,s:o,s:s,s:b,s:b}", "command", argv[0], "args", args, "cwd", "/",
                             "wait", 1, "logs", 1);
    char *sp = sbx__vercel_session_path(t, "cmd");
    char *path = sbx__vercel_path(t->conf, sp, 0);
    struct run_ctx ctx = {.out = out};
    struct sbx__ndjson dec;
    sbx__vercel_lines_init(&dec, run_line, &ctx);
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .json = body,
                                .sink = lines_sink,
                                .sink_ud = &dec,
                                .timeout_ms = RUN_MS,
                                .no_retry = 0};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    out->code = -1;
    if ((rc = sbx__http_call(ep, &req, &resp, err)) == 0) {
        if (resp.status >= 400)
            rc = sbx__vercel_session_error(t, resp.status, &resp.body, "command", NULL, err);
        else if ((rc = sbx__ndjson_finish(&dec, err)) == 0 && !ctx.ended)
            rc = sbx_error_set(err, SBX_E_API, 0,
                               "the Vercel API's command stream ended before the command");
    }
    if (rc < 0)
        sbx_error_prefix(err, "sandbox '%s': '%s'", t->name, argv[0]);
    sbx__ndjson_release(&dec);
    sbx__http_resp_release(&resp);
    json_decref(body);
    free(sp);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Whole files */

int sbx__vercel_file_get(const struct sbx__vercel_target *t, const char *abs, int fd, uint64_t max,
                         struct sbx_error *err)
{
    struct sbx__endpoint *ep;
    int rc = sbx__vercel_ep(t->conf, &ep, err);
    if (rc < 0)
        return rc;
    char *sp = sbx__vercel_session_path(t, "fs/read");
    char *path = sbx__vercel_path(t->conf, sp, 0);
    json_t *body = json_pack("{s:s}", "path", abs);
    int out = fd;
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .json = body,
                                .sink = sbx__http_sink_fd,
                                .sink_ud = &out,
                                .max_body = max ? (size_t)max : SBX__HTTP_BODY_MAX,
                                .timeout_ms = RUN_MS};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    char code[64];
    if ((rc = sbx__http_call(ep, &req, &resp, err)) == 0 && resp.status >= 400) {
        rc = sbx__vercel_session_error(t, resp.status, &resp.body, "file", code, err);
        if (resp.status == 404 && strcmp(code, "file_not_found") == 0)
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no file '%s' in sandbox '%s'", abs,
                               t->name);
    }
    sbx__http_resp_release(&resp);
    json_decref(body);
    free(sp);
    free(path);
    return rc;
}

/* One member, abs (without its leading '/'), of size bytes from in, as a tar.gz into out. */
static int pack_one(const char *abs, int in, uint64_t size, int out, struct sbx_error *err)
{
    int rc = sbx__archive_load(err);
    if (rc < 0)
        return rc;
    struct archive *a = archive_write_new();
    struct archive_entry *ae = archive_entry_new();
    char *buf = sbx_xmalloc(IO_CHUNK);
    if (!a || !ae)
        SBX_BUG("out of memory");
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
        archive_write_open_fd(a, out) != ARCHIVE_OK) {
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot write a tar.gz: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
        goto out;
    }
    archive_entry_set_pathname(ae, abs + strspn(abs, "/"));
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0600);
    archive_entry_set_size(ae, (la_int64_t)size);
    if (archive_write_header(a, ae) != ARCHIVE_OK) {
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot write a tar.gz: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
        goto out;
    }
    for (uint64_t left = size; left > 0 && rc == 0;) {
        ssize_t n = read(in, buf, left < IO_CHUNK ? (size_t)left : IO_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? sbx_error_errno(err, errno, "cannot read the file to upload")
                       : sbx_error_set(err, SBX_E_IO, 0, "the file to upload ended early");
            break;
        }
        if (archive_write_data(a, buf, (size_t)n) != n)
            rc = sbx_error_set(err, SBX_E_IO, 0, "cannot write a tar.gz: %s",
                               archive_error_string(a) ? archive_error_string(a) : "?");
        left -= (uint64_t)n;
    }
    if (rc == 0 && archive_write_close(a) != ARCHIVE_OK)
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot finish a tar.gz: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
out:
    archive_entry_free(ae);
    archive_write_free(a);
    free(buf);
    return rc;
}

int sbx__vercel_targz(const char *abs, const void *p, size_t n, struct sbx_buf *out,
                      struct sbx_error *err)
{
    int in = -1, tmp = -1;
    int rc = sbx__shellfs_tmpfile(&in, err);
    if (rc == 0)
        rc = sbx__shellfs_tmpfile(&tmp, err);
    if (rc == 0 && (sbx_fd_write_all(in, p, n, err) < 0 || lseek(in, 0, SEEK_SET) < 0))
        rc = -SBX_E_IO;
    if (rc == 0)
        rc = pack_one(abs, in, n, tmp, err);
    if (rc == 0 && lseek(tmp, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "cannot rewind a tar.gz");
    if (rc == 0)
        rc = sbx_fd_read_all(tmp, out->max, out, err);
    sbx_fd_close(&in);
    sbx_fd_close(&tmp);
    return rc;
}

static long fd_source(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    int fd = *(int *)ud;
    for (;;) {
        ssize_t r = read(fd, buf, n);
        if (r >= 0)
            return r;
        if (errno != EINTR)
            return sbx_error_errno(err, errno, "cannot read the upload");
    }
}

int sbx__vercel_file_put(const struct sbx__vercel_target *t, const char *abs, int fd, uint64_t size,
                         struct sbx_error *err)
{
    struct sbx__endpoint *ep;
    int tmp = -1;
    int rc = sbx__vercel_ep(t->conf, &ep, err);
    if (rc < 0 || (rc = sbx__shellfs_tmpfile(&tmp, err)) < 0)
        return rc;
    struct stat st;
    char *sp = sbx__vercel_session_path(t, "fs/write");
    char *path = sbx__vercel_path(t->conf, sp, 0);
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    if ((rc = pack_one(abs, fd, size, tmp, err)) < 0)
        goto out;
    if (fstat(tmp, &st) < 0 || lseek(tmp, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "cannot rewind the upload");
        goto out;
    }
    static const char *const headers[] = {"x-cwd: /", NULL};
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .source = fd_source,
                                .source_ud = &tmp,
                                .upload_size = (int64_t)st.st_size,
                                .content_type = "application/gzip",
                                .headers = headers,
                                .timeout_ms = RUN_MS};
    if ((rc = sbx__http_call(ep, &req, &resp, err)) == 0 && resp.status >= 400)
        rc = sbx__vercel_session_error(t, resp.status, &resp.body, "file upload", NULL, err);
out:
    if (rc < 0)
        sbx_error_prefix(err, "sandbox '%s': '%s'", t->name, abs);
    sbx__http_resp_release(&resp);
    sbx_fd_close(&tmp);
    free(sp);
    free(path);
    return rc;
}
