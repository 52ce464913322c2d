/* Model calls against servers that do not answer: the first-byte and idle limits of streamed
 * and plain requests, the deadline over all attempts, and the wait reports a terminal shows. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sbx/model.h"
#include "tap.h"

/* A loopback server that reads each request and then sends `prefix` (may be empty) and holds
 * the connection open without another byte until the test stops it. */
struct server {
    int lfd;
    int stop[2]; /* a byte on stop[1] ends the thread */
    const char *prefix;
    int port;
    int accepted;
    pthread_t th;
};

static void *serve(void *p)
{
    struct server *s = p;
    int conns[16];
    int nconn = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = s->lfd, .events = POLLIN},
                               {.fd = s->stop[0], .events = POLLIN}};
        if (poll(pf, 2, -1) < 0)
            continue;
        if (pf[1].revents)
            break;
        int c = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        char buf[65536];
        ssize_t got = read(c, buf, sizeof(buf)); /* the request: small, one read suffices */
        if (got > 0 && s->prefix[0] && write(c, s->prefix, strlen(s->prefix)) < 0)
            perror("server write");
        __atomic_add_fetch(&s->accepted, 1, __ATOMIC_SEQ_CST);
        if (nconn < 16)
            conns[nconn++] = c;
        else
            close(c);
    }
    for (int i = 0; i < nconn; i++)
        close(conns[i]);
    return NULL;
}

static void server_start(struct server *s, const char *prefix)
{
    memset(s, 0, sizeof(*s));
    s->prefix = prefix;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s->lfd, 16) < 0 ||
        getsockname(s->lfd, (struct sockaddr *)&a, &len) < 0 || pipe2(s->stop, O_CLOEXEC) < 0) {
        perror("server");
        exit(1);
    }
    s->port = ntohs(a.sin_port);
    pthread_create(&s->th, NULL, serve, s);
}

static void server_stop(struct server *s)
{
    if (write(s->stop[1], "x", 1) != 1)
        perror("server stop");
    pthread_join(s->th, NULL);
    close(s->lfd);
    close(s->stop[0]);
    close(s->stop[1]);
}

static void on_event(const json_t *ev, void *data)
{
    (void)ev;
    (void)data;
}

struct waits {
    int calls, ended;
    int64_t last;
};

static void on_wait(void *data, int64_t waited_ms, int attempt)
{
    struct waits *w = data;
    (void)attempt;
    if (waited_ms < 0) {
        w->ended++;
        return;
    }
    w->calls++;
    w->last = waited_ms;
}

/* One streamed call of a fresh model against server s with these options; the error in *err. */
static int call(const struct server *s, struct sbx_model_options *o, struct sbx_error *err)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", s->port);
    o->base_url = url;
    o->api_key = "k";
    struct sbx_model *m = NULL;
    if (sbx_model_new("m", o, &m, err) < 0)
        return -1;
    json_t *input =
            json_pack("[{s:s, s:s, s:s}]", "type", "message", "role", "user", "content", "hi");
    struct sbx_model_request req = {.input = input};
    json_t *resp = NULL;
    int rc = sbx_model_respond(m, &req, on_event, NULL, &resp, err);
    json_decref(resp);
    json_decref(input);
    sbx_model_free(m);
    return rc;
}

static void test_first_byte(void)
{
    struct server s;
    struct waits w = {0};
    struct sbx_error err = SBX_ERROR_INIT;
    server_start(&s, "");
    struct sbx_model_options o = {
            .first_byte_timeout_ms = 2500, .retries = -1, .on_wait = on_wait, .on_wait_data = &w};
    CHECK_ERR(call(&s, &o, &err), SBX_E_TIMEOUT, &err, "no answer from");
    CHECK_CONTAINS(err.msg, "within 2500 ms of the request");
    CHECK(w.calls >= 1);  /* told of the wait while it lasted */
    CHECK(w.last >= 900); /* with the time waited so far */
    CHECK_EQ_INT(w.ended, 1);
    server_stop(&s);
}

static void test_idle(void)
{
    struct server s;
    struct sbx_error err = SBX_ERROR_INIT;
    server_start(&s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                     "event: response.created\ndata: {\"type\":\"response.created\","
                     "\"response\":{\"id\":\"r\"}}\n\n");
    struct sbx_model_options o = {.idle_timeout_ms = 1500, .retries = -1};
    CHECK_ERR(call(&s, &o, &err), SBX_E_TIMEOUT, &err, "stalled: nothing for 1500 ms");
    server_stop(&s);
}

/* A whole (not streamed) answer gets the same bounds: before, only the 10-minute timeout_ms of
 * each attempt bounded a server that accepted the request and never answered. */
static void test_plain_first_byte(void)
{
    struct server s;
    struct sbx_error err = SBX_ERROR_INIT;
    server_start(&s, "");
    struct sbx_model_options o = {
            .no_stream = 1, .first_byte_timeout_ms = 1500, .timeout_ms = 20000, .retries = -1};
    CHECK_ERR(call(&s, &o, &err), SBX_E_TIMEOUT, &err, "no answer from");
    CHECK_CONTAINS(err.msg, "within 1500 ms of the request");
    server_stop(&s);
}

static void test_plain_idle(void)
{
    struct server s;
    struct sbx_error err = SBX_ERROR_INIT;
    server_start(&s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: 400\r\n\r\n{\"id\": \"r\", ");
    struct sbx_model_options o = {
            .no_stream = 1, .idle_timeout_ms = 1500, .timeout_ms = 20000, .retries = -1};
    CHECK_ERR(call(&s, &o, &err), SBX_E_TIMEOUT, &err, "stalled: nothing for 1500 ms");
    server_stop(&s);
}

static void test_deadline(void)
{
    struct server s;
    struct sbx_error err = SBX_ERROR_INIT;
    server_start(&s, "");
    /* Each attempt would wait a minute for its first byte; the deadline cuts the whole call. */
    struct sbx_model_options o = {.deadline_ms = 1500, .retries = 5, .retry_base_ms = 10};
    CHECK_ERR(call(&s, &o, &err), SBX_E_TIMEOUT, &err, "model call deadline (1500 ms) passed");
    CHECK(__atomic_load_n(&s.accepted, __ATOMIC_SEQ_CST) <= 2);
    server_stop(&s);
}

static void test_no_key(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = NULL;
    struct sbx_model_options o = {.base_url = SBX_MODEL_DEFAULT_BASE_URL, .api_key = ""};
    CHECK_ERR(sbx_model_new("gpt-4.1", &o, &m, &err), SBX_E_INVAL, &err, "set OPENAI_API_KEY");
    o.base_url = "http://127.0.0.1:9/v1";
    CHECK_OK(sbx_model_new("gpt-4.1", &o, &m, &err), &err);
    sbx_model_free(m);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_first_byte);
    TAP_RUN(test_idle);
    TAP_RUN(test_plain_first_byte);
    TAP_RUN(test_plain_idle);
    TAP_RUN(test_deadline);
    TAP_RUN(test_no_key);
    return TAP_DONE();
}
