/* The model client's kept connection: two calls of one model go over one TCP connection, and
 * the connection held open between calls is close-on-exec (the run's tools start commands
 * while it stays open). */
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/model.h"
#include "tap.h"

static const char answer[] = "{\"id\":\"r1\",\"object\":\"response\",\"status\":\"completed\","
                             "\"output\":[]}";

struct server {
    int lfd;
    int conns;
    int requests;
    pthread_t th;
};

/* Answers requests (headers, then a Content-Length body) on each connection until it closes;
 * one connection at a time is all a single caller needs. */
static void *serve(void *p)
{
    struct server *s = p;
    int c;
    while ((c = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
        s->conns++;
        char buf[1 << 16];
        size_t have = 0;
        for (;;) {
            buf[have] = '\0';
            char *end = strstr(buf, "\r\n\r\n");
            if (end) {
                char *cl = strcasestr(buf, "content-length:");
                size_t need = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
                if (have >= need) {
                    char out[512];
                    int n = snprintf(out, sizeof(out),
                                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     "Content-Length: %zu\r\n\r\n%s",
                                     strlen(answer), answer);
                    if (write(c, out, (size_t)n) != n)
                        break;
                    s->requests++;
                    memmove(buf, buf + need, have - need);
                    have -= need;
                    continue;
                }
            }
            if (have >= sizeof(buf) - 1)
                break;
            ssize_t n = read(c, buf + have, sizeof(buf) - 1 - have);
            if (n <= 0)
                break;
            have += (size_t)n;
        }
        close(c);
    }
    return NULL;
}

/* Sockets of this process without FD_CLOEXEC. */
static int inheritable_sockets(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = (int)strtol(e->d_name, NULL, 10);
        struct stat st;
        if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
            continue;
        if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC))
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static void test_one_connection(void)
{
    struct server s = {0};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    s.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(s.lfd >= 0);
    CHECK(bind(s.lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(s.lfd, 8) == 0);
    CHECK(getsockname(s.lfd, (struct sockaddr *)&a, &alen) == 0);
    pthread_create(&s.th, NULL, serve, &s);

    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", ntohs(a.sin_port));
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model_options o = {.base_url = url, .api_key = "k-test", .retries = -1};
    struct sbx_model *m = NULL;
    CHECK_OK(sbx_model_new("m", &o, &m, &err), &err);
    json_t *input =
            json_pack("[{s:s, s:s, s:s}]", "type", "message", "role", "user", "content", "hi");
    struct sbx_model_request req = {.input = input};
    for (int i = 0; i < 3; i++) {
        json_t *resp = NULL;
        CHECK_OK(sbx_model_respond(m, &req, NULL, NULL, &resp, &err), &err);
        json_decref(resp);
        /* Between calls the connection is open and must not leak into a child. */
        CHECK_EQ_INT(inheritable_sockets(), 0);
    }
    CHECK_EQ_INT(s.requests, 3);
    CHECK_EQ_INT(s.conns, 1);
    sbx_model_free(m);
    json_decref(input);
    shutdown(s.lfd, SHUT_RDWR);
    pthread_join(s.th, NULL);
    close(s.lfd);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_one_connection);
    return TAP_DONE();
}
