/* sbx sandbox: create, exec, shell, cp, ps, port, rm — local sandboxes with Docker's habits. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define VERB "sandbox "

static int print_json(const json_t *v)
{
    char *text = sbx_json_dumps(v, SBX_JSON_PRETTY);
    printf("%s\n", text);
    free(text);
    return CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * create */

int cli_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024ull, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024ull * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024ull * 1024 * 1024, end++;
    if (*end || v > UINT64_MAX / mul)
        return -1;
    *out = v * mul;
    return 0;
}

/* Split a comma-separated list in place into items (at most max), skipping empty ones. */
static size_t split_commas(char *s, const char **items, size_t max)
{
    size_t n = 0;
    for (char *p = s; p && *p;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (*p && n < max)
            items[n++] = p;
        else if (*p)
            return max + 1;
        p = comma ? comma + 1 : NULL;
    }
    return n;
}

/* --network allow:a.com,*.b.org (the value is cut in place). $SBX_TEST_PROXY_HOSTS
 * ("name=ip,...") is for the test suite only: it lets the proxy reach a local upstream. */
static int network_allow(char *list, struct sbx_local_options *o)
{
    static const char *domains[SBX_LOCAL_MAX_ALLOW_DOMAINS];
    static char test_text[4096];
    static const char *test_hosts[65];
    size_t n = split_commas(list, domains, SBX_LOCAL_MAX_ALLOW_DOMAINS);
    if (n == 0)
        return cli_usage(VERB, "--network allow: wants domains, such as allow:pypi.org,*.pypi.org");
    if (n > SBX_LOCAL_MAX_ALLOW_DOMAINS)
        return cli_usage(VERB, "more than %d allowed domains", SBX_LOCAL_MAX_ALLOW_DOMAINS);
    o->network = SBX_LOCAL_NETWORK_ALLOW;
    o->allow_domains = domains;
    o->n_allow_domains = n;
    const char *t = getenv("SBX_TEST_PROXY_HOSTS");
    if (t && *t && strlen(t) < sizeof(test_text)) {
        memcpy(test_text, t, strlen(t) + 1);
        size_t nt = split_commas(test_text, test_hosts, 64);
        if (nt <= 64) {
            test_hosts[nt] = NULL;
            o->test_proxy_hosts = test_hosts;
        }
    }
    return 1;
}

/* --allow-dangerous-grant paths, matched against the grant sources by cli_local_finish. */
static const char *dangerous[SBX_LOCAL_MAX_GRANTS];
static size_t n_dangerous;

int cli_local_finish(struct sbx_local_options *o, struct sbx_local_grant *grants)
{
    for (size_t d = 0; d < n_dangerous; d++) {
        int found = 0;
        /* As spelled, or where it leads: refusals name the resolved path. */
        char *want = realpath(dangerous[d], NULL);
        for (size_t g = 0; g < o->n_grants; g++) {
            char *real = want ? realpath(grants[g].src, NULL) : NULL;
            int same = strcmp(grants[g].src, dangerous[d]) == 0 || (real && !strcmp(real, want));
            free(real);
            if (!same)
                continue;
            grants[g].dangerous = 1;
            found = 1;
        }
        free(want);
        if (!found)
            return cli_usage(VERB, "--allow-dangerous-grant '%s' names no --ro or --rw source",
                             dangerous[d]);
        fprintf(stderr,
                "sbx: warning: grant source '%s' is allowed although it is DANGEROUS: a system "
                "directory (/proc, /sys, /dev, /run) or unix sockets of host services may let "
                "the sandbox reach the host\n",
                dangerous[d]);
    }
    return CLI_OK;
}

int cli_pass_secret(const char *name, struct sbx_strv *pass)
{
    if (!sbx_manifest_harness_credential(name))
        return cli_usage(VERB,
                         "--pass-secret '%s' is not one of sbx's own credentials "
                         "(OPENAI_API_KEY); manifests read other variables without it",
                         name);
    sbx_strv_push(pass, name);
    return 1;
}

int cli_local_option(int argc, char **argv, int *i, struct sbx_local_options *o,
                     struct sbx_local_grant *grants)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    static const char *const names[] = {
            "--isolation", "--network", "--memory",    "--pids",       "--cpus",
            "--ro",        "--rw",      "--port-bind", "--allow-port", "--allow-dangerous-grant",
            "--disk",      NULL};
    int k = 0;
    while (names[k] && strcmp(names[k], a) != 0)
        k++;
    if (!names[k])
        return 0;
    if (!v)
        return cli_usage(VERB, "option '%s' needs a value", a);
    (*i)++;
    uint64_t n = 0;
    switch (k) {
    case 0:
        if (strcmp(v, "none") == 0)
            o->isolation = SBX_LOCAL_ISOLATION_NONE;
        else if (strcmp(v, "namespaces") == 0)
            o->isolation = SBX_LOCAL_ISOLATION_NAMESPACES;
        else
            return cli_usage(VERB, "unknown isolation '%s' (namespaces, none)", v);
        return 1;
    case 1:
        if (strcmp(v, "none") == 0)
            o->network = SBX_LOCAL_NETWORK_NONE;
        else if (strcmp(v, "full") == 0)
            o->network = SBX_LOCAL_NETWORK_HOST;
        else if (strncmp(v, "allow:", 6) == 0)
            return network_allow(argv[*i] + 6, o);
        else
            return cli_usage(VERB, "unknown network mode '%s' (none, full, allow:DOMAINS)", v);
        return 1;
    case 2:
        if (cli_parse_size(v, &n) < 0 || n == 0)
            return cli_usage(VERB, "--memory wants a size such as 512M, not '%s'", v);
        o->limits.memory_bytes = n;
        return 1;
    case 3:
        if (cli_parse_size(v, &n) < 0 || n == 0)
            return cli_usage(VERB, "--pids wants a positive count, not '%s'", v);
        o->limits.pids = n;
        return 1;
    case 4: {
        char *end;
        if (strcmp(v, "none") == 0 || strcmp(v, "0") == 0) {
            o->limits.cpu_millis = SBX_LOCAL_LIMIT_NONE;
            return 1;
        }
        double d = strtod(v, &end);
        if (*end || end == v || !(d > 0) || d > 4096)
            return cli_usage(VERB, "--cpus wants a number of CPUs such as 1.5 (or none), not '%s'",
                             v);
        o->limits.cpu_millis = (uint64_t)(d * 1000 + 0.5);
        return 1;
    }
    case 7:
        o->port_bind = v;
        return 1;
    case 8: {
        static int ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
        char *end;
        long p = strtol(v, &end, 10);
        if (*end || end == v || p < 1 || p > 65535)
            return cli_usage(VERB, "--allow-port wants a port number, not '%s'", v);
        if (o->n_allow_ports >= SBX_LOCAL_MAX_EXPOSED_PORTS)
            return cli_usage(VERB, "more than %d allowed ports", SBX_LOCAL_MAX_EXPOSED_PORTS);
        ports[o->n_allow_ports++] = (int)p;
        o->allow_ports = ports;
        return 1;
    }
    case 9:
        if (n_dangerous >= SBX_LOCAL_MAX_GRANTS)
            return cli_usage(VERB, "more than %d dangerous grants", SBX_LOCAL_MAX_GRANTS);
        dangerous[n_dangerous++] = v;
        return 1;
    case 10:
        if (strcmp(v, "none") == 0) {
            o->disk_bytes = SBX_LOCAL_LIMIT_NONE;
            return 1;
        }
        if (cli_parse_size(v, &n) < 0 || n == 0)
            return cli_usage(VERB, "--disk wants a size such as 8G, or 'none', not '%s'", v);
        if (n < SBX_LOCAL_DISK_MIN || n > SBX_LOCAL_DISK_MAX)
            return cli_usage(VERB, "--disk %s is outside %lluM..%lluT", v,
                             (unsigned long long)(SBX_LOCAL_DISK_MIN >> 20),
                             (unsigned long long)(SBX_LOCAL_DISK_MAX >> 40));
        o->disk_bytes = n;
        return 1;
    default:
        if (o->n_grants >= SBX_LOCAL_MAX_GRANTS)
            return cli_usage(VERB, "more than %d path grants", SBX_LOCAL_MAX_GRANTS);
        if (v[0] != '/')
            return cli_usage(VERB, "%s wants an absolute path, not '%s'", a, v);
        struct sbx_local_grant *g = &grants[o->n_grants++];
        *g = (struct sbx_local_grant){0};
        /* PATH[:DST]: argv strings are ours to cut. */
        char *colon = strchr(argv[*i], ':');
        if (colon)
            *colon = '\0';
        g->src = argv[*i];
        g->dst = colon ? colon + 1 : NULL;
        g->writable = k == 6;
        o->grants = grants;
        return 1;
    }
}

static int cmd_create(int argc, char **argv)
{
    const char *manifest_path = NULL;
    int json = 0;
    struct sbx_create_spec spec = {.progress = cli_progress_fn()};
    static struct cli_sandbox_opts so;
    struct sbx_local_options *opts = &so.local;
    int ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    json_t *state = NULL;
    struct sbx_manifest *m = NULL;
    struct sbx_strv pass;
    int rc;

    cli_sandbox_opts_init(&so);
    sbx_strv_init(&pass);
    spec.pass_secrets = &pass;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--pass-secret") == 0 && i + 1 < argc) {
            if ((rc = cli_pass_secret(argv[++i], &pass)) != 1) {
                sbx_strv_release(&pass);
                return rc;
            }
        } else if ((strcmp(a, "--manifest") == 0 || strcmp(a, "-m") == 0) && i + 1 < argc) {
            manifest_path = argv[++i];
        } else if ((strcmp(a, "--workspace") == 0 || strcmp(a, "-w") == 0) && i + 1 < argc) {
            spec.workspace = argv[++i];
        } else if (strcmp(a, "--snapshot") == 0 && i + 1 < argc) {
            spec.snapshot = argv[++i];
        } else if (strcmp(a, "--port") == 0 && i + 1 < argc) {
            char *end;
            long p = strtol(argv[++i], &end, 10);
            if (*end || p < 1 || p > 65535)
                return cli_usage(VERB, "bad port '%s'", argv[i]);
            if (opts->n_exposed_ports >= SBX_LOCAL_MAX_EXPOSED_PORTS)
                return cli_usage(VERB, "too many ports");
            ports[opts->n_exposed_ports++] = (int)p;
        } else {
            int r = cli_sandbox_option(argc, argv, &i, &so);
            if (r == 0)
                return cli_usage(VERB "create ", "create: unexpected argument '%s'", a);
            if (r != 1)
                return r;
        }
    }
    opts->exposed_ports = ports;
    int docker = strcmp(cli_sandbox_provider(&so), "docker") == 0;
    if ((rc = cli_sandbox_finish(&so, VERB "create ")) == CLI_OK && docker && !so.docker.image)
        rc = cli_usage(VERB "create ", "create: --provider docker needs --image IMAGE (an image "
                                       "the engine has: sbx never pulls)");
    if (rc != CLI_OK) {
        sbx_strv_release(&pass);
        return rc;
    }
    if (manifest_path) {
        rc = sbx_manifest_load_file(manifest_path, NULL, &m, &err);
        if (rc < 0) {
            sbx_error_prefix(&err, "manifest '%s'", manifest_path);
            sbx_strv_release(&pass);
            return cli_fail(&err);
        }
        spec.manifest = m;
    }
    rc = cli_sandbox_client(&so, &c, &err);
    if (rc == 0)
        rc = sbx_client_create(c, &spec, &s, &err);
    if (rc == 0)
        rc = sbx_session_state(s, &state, &err);
    if (rc == 0 && docker && so.docker.network == SBX_DOCKER_NETWORK_HOST)
        fprintf(stderr,
                "sbx: warning: sandbox '%s' has network 'host': DANGEROUS, its commands "
                "reach everything this host can (local services, metadata endpoints)\n",
                sbx_session_id(s));
    if (rc == 0 && !docker && opts->network == SBX_LOCAL_NETWORK_HOST)
        fprintf(stderr,
                "sbx: warning: sandbox '%s' has network 'full': DANGEROUS, its commands "
                "reach everything this host can (local services, metadata endpoints)\n",
                sbx_session_id(s));
    if (rc == 0) {
        if (json)
            print_json(state);
        else
            printf("%s\n", sbx_session_id(s));
    }
    json_decref(state);
    sbx_session_free(s);
    sbx_client_free(c);
    sbx_manifest_free(m);
    sbx_strv_release(&pass);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * exec / shell */

static struct termios saved_tio;
static int tio_saved;

static void restore_tty(void)
{
    if (tio_saved)
        tcsetattr(0, TCSADRAIN, &saved_tio);
    tio_saved = 0;
}

static void raw_tty(void)
{
    struct termios t;
    if (!isatty(0) || tcgetattr(0, &saved_tio) < 0)
        return;
    t = saved_tio;
    cfmakeraw(&t);
    if (tcsetattr(0, TCSADRAIN, &t) == 0)
        tio_saved = 1;
}

#define DRAIN_MAX ((size_t)1 << 20)

/* Copy what is available from *fd to fd `to`. *fd becomes -1 at EOF. Returns -1 when `to` is
 * gone (a closed pipe), else 0. At most DRAIN_MAX bytes per call, so a writer that never stops
 * cannot keep us here. */
static int copy_out(int *fd, int to)
{
    char buf[65536];
    size_t moved = 0;
    while (moved < DRAIN_MAX) {
        ssize_t n = read(*fd, buf, sizeof(buf));
        if (n > 0) {
            if (sbx_fd_write_all(to, buf, (size_t)n, NULL) < 0)
                return -1;
            moved += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        *fd = -1;
        return 0;
    }
    return 0;
}

/* `sbx sandbox exec` exit statuses, as shells and container tools use them, so that sbx's own
 * failures never look like the command's: the command's status, 128+N for signal N, 124 when
 * --timeout killed it, and (docs/internals/local-provider.md has the table): */
enum {
    EXEC_SBX_FAILED = 125, /* sbx failed: usage, no such sandbox, gone, bad --cwd or --user */
    EXEC_CANNOT_RUN = 126, /* the command exists but cannot be run */
    EXEC_NOT_FOUND = 127,  /* the command was not found */
};

/* Print the error and return the exec status for it. */
static int exec_fail(const struct sbx_error *err)
{
    cli_fail(err);
    if (err->code == SBX_E_EXEC)
        return err->sys_errno == ENOENT ? EXEC_NOT_FOUND : EXEC_CANNOT_RUN;
    return EXEC_SBX_FAILED;
}

/* A usage error of exec or shell: said as everywhere, with the status of an sbx failure. */
#define exec_usage(...) (cli_usage(__VA_ARGS__), EXEC_SBX_FAILED)

/* Stream a started command to our stdio until it exits. Returns the exit status to use. */
static int stream(struct sbx_proc *p, int forward_stdin, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exit st = {0};
    int ofd = p->stdout_fd, efd = p->stderr_fd, ifd = forward_stdin ? 0 : -1;
    int have = 0, sigfd = -1;
    sigset_t set;

    if (p->tty) {
        sigemptyset(&set);
        sigaddset(&set, SIGWINCH);
        sigprocmask(SIG_BLOCK, &set, NULL);
        sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        struct winsize ws;
        if (isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0)
            sbx_proc_resize(p, ws.ws_row, ws.ws_col, NULL);
        if (forward_stdin)
            raw_tty();
    }
    sbx__set_nonblock(ofd);
    if (efd >= 0)
        sbx__set_nonblock(efd);
    while (!have) {
        struct pollfd pfd[5];
        int n = 0, io = -1, ie = -1, ii = -1, iw = -1;
        if (ofd >= 0) {
            io = n;
            pfd[n++] = (struct pollfd){.fd = ofd, .events = POLLIN};
        }
        if (efd >= 0) {
            ie = n;
            pfd[n++] = (struct pollfd){.fd = efd, .events = POLLIN};
        }
        if (ifd >= 0) {
            ii = n;
            pfd[n++] = (struct pollfd){.fd = ifd, .events = POLLIN};
        }
        if (sigfd >= 0) {
            iw = n;
            pfd[n++] = (struct pollfd){.fd = sigfd, .events = POLLIN};
        }
        int is = n;
        pfd[n++] = (struct pollfd){.fd = p->status_fd, .events = POLLIN};
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if ((io >= 0 && pfd[io].revents && copy_out(&ofd, 1) < 0) ||
            (ie >= 0 && pfd[ie].revents && copy_out(&efd, 2) < 0)) {
            /* Our output is gone (`sbx sandbox exec … | head`): like SIGPIPE, stop the command
             * (the caller frees the proc, which kills it). */
            restore_tty();
            if (sigfd >= 0)
                close(sigfd);
            return 128 + SIGPIPE;
        }
        if (ii >= 0 && pfd[ii].revents) {
            char buf[65536];
            ssize_t r = read(ifd, buf, sizeof(buf));
            if (r > 0) {
                /* The command's stdin is a socket (or the terminal master). */
                size_t off = 0;
                while (off < (size_t)r) {
                    ssize_t w =
                            p->tty ? write(p->stdin_fd, buf + off, (size_t)r - off)
                                   : send(p->stdin_fd, buf + off, (size_t)r - off, MSG_NOSIGNAL);
                    if (w < 0 && errno == EINTR)
                        continue;
                    if (w < 0 && errno == EAGAIN) {
                        struct pollfd wp = {.fd = p->stdin_fd, .events = POLLOUT};
                        poll(&wp, 1, -1);
                        continue;
                    }
                    if (w <= 0)
                        break;
                    off += (size_t)w;
                }
            } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                ifd = -1;
                if (p->tty)
                    sbx_fd_write_all(p->stdin_fd, "\004", 1, NULL); /* the terminal's EOF */
                else
                    sbx_proc_close_stdin(p);
            }
        }
        if (iw >= 0 && pfd[iw].revents) {
            struct signalfd_siginfo si;
            while (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                ;
            struct winsize ws;
            if (ioctl(1, TIOCGWINSZ, &ws) == 0)
                sbx_proc_resize(p, ws.ws_row, ws.ws_col, NULL);
        }
        if (pfd[is].revents) {
            if (sbx_proc_wait(p, 0, &st, &err) < 0) {
                restore_tty();
                if (sigfd >= 0)
                    close(sigfd);
                return exec_fail(&err);
            }
            have = 1;
        }
    }
    /* What the command left in the pipes. */
    if (ofd >= 0)
        (void)copy_out(&ofd, 1);
    if (efd >= 0)
        (void)copy_out(&efd, 2);
    restore_tty();
    if (sigfd >= 0)
        close(sigfd);
    if (st.timed_out) {
        fprintf(stderr, "sbx: command in sandbox '%s' timed out\n", id);
        return 124;
    }
    if (st.reason[0])
        fprintf(stderr, "sbx: %s\n", st.reason);
    return st.signal ? 128 + st.signal : st.code;
}

static int run_exec(const char *id, const struct sbx_exec_spec *spec, int forward_stdin,
                    size_t max_output)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_proc *p = NULL;
    int status = CLI_FAIL;

    signal(SIGPIPE, SIG_IGN);
    int rc = cli_sandbox_attach(id, &c, &s, &err);
    if (rc == 0 && max_output) {
        struct sbx_exec_spec sp = *spec;
        struct sbx_exec_result res = {0};
        sp.output_limit = max_output;
        rc = sbx_session_exec(s, &sp, &res, &err);
        if (rc == 0) {
            sbx_fd_write_all(1, res.out.data, res.out.head_len, NULL);
            if (res.out.dropped)
                fprintf(stderr, "sbx: %llu bytes of output dropped\n",
                        (unsigned long long)res.out.dropped);
            sbx_fd_write_all(1, res.out.data + res.out.head_len, res.out.len - res.out.head_len,
                             NULL);
            sbx_fd_write_all(2, res.err.data, res.err.len, NULL);
            if (res.err.dropped)
                fprintf(stderr, "sbx: %llu bytes of error output dropped\n",
                        (unsigned long long)res.err.dropped);
            status = res.status.timed_out ? 124
                     : res.status.signal  ? 128 + res.status.signal
                                          : res.status.code;
            if (res.status.timed_out)
                fprintf(stderr, "sbx: command in sandbox '%s' timed out\n", id);
            else if (res.status.reason[0])
                fprintf(stderr, "sbx: %s\n", res.status.reason);
            sbx_exec_result_release(&res);
        }
    } else if (rc == 0) {
        rc = sbx_session_exec_start(s, spec, &p, &err);
        if (rc == 0)
            status = stream(p, forward_stdin, id);
    }
    sbx_proc_free(p);
    sbx_session_free(s);
    sbx_client_free(c);
    return rc < 0 ? exec_fail(&err) : status;
}

static int cmd_exec(int argc, char **argv)
{
    struct sbx_exec_spec spec = {0};
    struct sbx_strv env;
    int interactive = 0, i, rc;
    size_t max_output = 0;

    sbx_strv_init(&env);
    for (i = 1; i < argc && argv[i][0] == '-' && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-t") == 0 || strcmp(a, "--tty") == 0) {
            spec.flags |= SBX_EXEC_TTY;
        } else if (strcmp(a, "--keep-background") == 0) {
            spec.flags |= SBX_EXEC_KEEP_BACKGROUND;
        } else if (strcmp(a, "-i") == 0 || strcmp(a, "--interactive") == 0) {
            interactive = 1;
        } else if (strcmp(a, "-it") == 0 || strcmp(a, "-ti") == 0) {
            interactive = 1;
            spec.flags |= SBX_EXEC_TTY;
        } else if ((strcmp(a, "--user") == 0 || strcmp(a, "-u") == 0) && i + 1 < argc) {
            spec.user = argv[++i];
        } else if ((strcmp(a, "--cwd") == 0 || strcmp(a, "-w") == 0) && i + 1 < argc) {
            spec.cwd = argv[++i];
        } else if ((strcmp(a, "--env") == 0 || strcmp(a, "-e") == 0) && i + 1 < argc) {
            const char *kv = argv[++i];
            if (!strchr(kv, '=') || kv[0] == '=') {
                sbx_strv_release(&env);
                return exec_usage(VERB, "--env wants KEY=VALUE, not '%s'", kv);
            }
            sbx_strv_push(&env, kv);
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            int64_t ms;
            if (sbx_duration_parse_ms(argv[++i], &ms) < 0 || ms <= 0) {
                sbx_strv_release(&env);
                return exec_usage(VERB, "bad timeout '%s'", argv[i]);
            }
            spec.timeout_ms = ms;
        } else if ((rc = cli_docker_host_option(argc, argv, &i, VERB "exec ")) != 0) {
            if (rc != 1) {
                sbx_strv_release(&env);
                return EXEC_SBX_FAILED;
            }
        } else if (strcmp(a, "--max-output") == 0 && i + 1 < argc) {
            char *end;
            unsigned long long n = strtoull(argv[++i], &end, 10);
            if (*end || n == 0 || n > SBX_OUTPUT_MAX_LIMIT) {
                sbx_strv_release(&env);
                return exec_usage(VERB, "bad --max-output '%s'", argv[i]);
            }
            max_output = (size_t)n;
        } else {
            sbx_strv_release(&env);
            return exec_usage(VERB "exec ", "exec: unknown option '%s'", a);
        }
    }
    if (i >= argc) {
        sbx_strv_release(&env);
        return exec_usage(VERB "exec ", "exec: missing sandbox id");
    }
    const char *id = argv[i++];
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (i >= argc) {
        sbx_strv_release(&env);
        return exec_usage(VERB "exec ", "exec: missing command");
    }
    if (max_output && (interactive || (spec.flags & SBX_EXEC_TTY))) {
        sbx_strv_release(&env);
        return exec_usage(VERB "exec ", "exec: --max-output cannot be combined with -i or -t");
    }
    /* On a terminal, the command learns what kind: the caller's own TERM, as docker exec -t. */
    const char *term = getenv("TERM");
    if ((spec.flags & SBX_EXEC_TTY) && term && term[0] && !sbx_strv_getenv(&env, "TERM"))
        sbx_strv_setenv(&env, "TERM", term);
    spec.argv = (const char *const *)(argv + i);
    spec.env = (const char *const *)env.v;
    if (interactive && !(spec.flags & SBX_EXEC_TTY))
        spec.flags |= SBX_EXEC_STDIN;
    rc = run_exec(id, &spec, interactive, max_output);
    sbx_strv_release(&env);
    return rc;
}

static int cmd_shell(int argc, char **argv)
{
    if (argc != 2)
        return exec_usage(VERB "shell ", "shell: want exactly one sandbox id");
    const char *const sh[] = {"/bin/sh", "-i", NULL};
    struct sbx_exec_spec spec = {.argv = sh, .flags = SBX_EXEC_TTY};
    return run_exec(argv[1], &spec, 1, 0);
}

/* ---------------------------------------------------------------------------------------------
 * cp */

/* "ID:path" -> id and path (borrowed pieces of a copy in *hold). Host paths stay as given. */
static int split_remote(const char *arg, char **hold, const char **id, const char **path)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg)
        return 0;
    for (const char *p = arg; p < colon; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    *hold = sbx_xstrdup(arg);
    (*hold)[colon - arg] = '\0';
    *id = *hold;
    *path = *hold + (colon - arg) + 1;
    return 1;
}

static const char *base_name(const char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    const char *s = p + n;
    while (s > p && s[-1] != '/')
        s--;
    return s;
}

static int cmd_cp(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    char *h1 = NULL, *h2 = NULL, *dst_path = NULL;
    const char *sid = NULL, *spath = NULL, *did = NULL, *dpath = NULL;
    int fd = -1, out = -1, rc = 0;

    int i = 1;
    while (i < argc && (rc = cli_docker_host_option(argc, argv, &i, VERB "cp ")) == 1)
        i++;
    if (rc != 0 && rc != 1)
        return rc;
    rc = 0;
    argc -= i - 1;
    argv += i - 1;
    if (argc != 3)
        return cli_usage(VERB "cp ", "cp: want SRC and DST");
    int src_remote = split_remote(argv[1], &h1, &sid, &spath);
    int dst_remote = split_remote(argv[2], &h2, &did, &dpath);
    if (src_remote == dst_remote) {
        free(h1);
        free(h2);
        return cli_usage(VERB "cp ", "cp: exactly one of SRC and DST must be ID:PATH");
    }
    if (dst_remote) {
        /* host -> sandbox */
        struct stat st;
        fd = strcmp(argv[1], "-") == 0 ? dup(0) : open(argv[1], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = sbx_error_errno(&err, errno, "cannot open '%s'", argv[1]);
            goto out;
        }
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = sbx_error_set(&err, SBX_E_INVAL, 0, "'%s' is a directory; cp copies files",
                               argv[1]);
            goto out;
        }
        rc = cli_sandbox_attach(did, &c, &s, &err);
        if (rc < 0)
            goto out;
        /* Into a directory: keep the source's name, as cp does. */
        struct sbx_dirent d = {0};
        if (dpath[0] == '\0' || dpath[strlen(dpath) - 1] == '/' ||
            (sbx_session_stat(s, dpath, &d, NULL) == 0 && d.type == SBX_FILE_DIR))
            dst_path = sbx_xasprintf("%s%s%s", dpath,
                                     dpath[0] && dpath[strlen(dpath) - 1] != '/' ? "/" : "",
                                     base_name(argv[1]));
        else
            dst_path = sbx_xstrdup(dpath);
        sbx_dirent_release(&d);
        rc = sbx_session_write_fd(s, dst_path, fd, 0, S_ISREG(st.st_mode) ? st.st_mode & 0777 : 0,
                                  0, &err);
    } else {
        /* sandbox -> host */
        rc = cli_sandbox_attach(sid, &c, &s, &err);
        if (rc == 0)
            rc = sbx_session_read_open(s, spath, &fd, NULL, &err);
        if (rc < 0)
            goto out;
        if (strcmp(argv[2], "-") == 0) {
            out = dup(1);
        } else {
            struct stat st;
            dst_path = stat(argv[2], &st) == 0 && S_ISDIR(st.st_mode)
                               ? sbx_xasprintf("%s/%s", argv[2], base_name(spath))
                               : sbx_xstrdup(argv[2]);
            out = open(dst_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        }
        if (out < 0) {
            rc = sbx_error_errno(&err, errno, "cannot open '%s'", dst_path ? dst_path : "-");
            goto out;
        }
        /* A privileged writer keeps S_ISUID/S_ISGID of an existing file it overwrites: the
         * sandbox's bytes must not become a setuid program on the host. */
        struct stat ost;
        if (fstat(out, &ost) == 0 && S_ISREG(ost.st_mode) && (ost.st_mode & (S_ISUID | S_ISGID)) &&
            fchmod(out, ost.st_mode & SBX_FS_MODE_MASK) < 0) {
            rc = sbx_error_errno(&err, errno, "cannot clear the setuid bits of '%s'", dst_path);
            goto out;
        }
        /* Holes stay holes: a sparse file made inside costs the host only its data. */
        rc = sbx_fd_copy_sparse(fd, out, 0, NULL, &err);
        if (rc < 0)
            sbx_error_prefix(&err, "copying '%s'", spath);
    }
out:
    sbx_fd_close(&fd);
    sbx_fd_close(&out);
    sbx_session_free(s);
    sbx_client_free(c);
    free(h1);
    free(h2);
    free(dst_path);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * ps, port, rm */

/* The sandboxes of provider, each marked with it, appended to list. */
static int list_provider(const char *provider, int all, json_t *list, struct sbx_error *err)
{
    struct sbx_client *c = NULL;
    json_t *got = NULL, *v;
    size_t i;
    int rc = cli_client_new(provider, &c, err);
    if (rc == 0)
        rc = all ? sbx_client_list_all(c, &got, err) : sbx_client_list(c, &got, err);
    /* A provider that keeps no leftovers has only its live ones to show. */
    if (rc == -SBX_E_UNSUPPORTED && all) {
        sbx_error_clear(err);
        rc = sbx_client_list(c, &got, err);
    }
    json_array_foreach(got, i, v)
    {
        if (!json_object_get(v, "provider"))
            sbx_json_set(v, "provider", sbx_json_str(provider));
        json_array_append(list, v);
    }
    json_decref(got);
    sbx_client_free(c);
    return rc;
}

static int cmd_ps(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *list = json_array();
    const char *only = NULL;
    int json = 0, all = 0, rc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--all") == 0 || strcmp(argv[i], "-a") == 0) {
            all = 1;
        } else if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc) {
            only = argv[++i];
            if (strcmp(only, "local") != 0 && strcmp(only, "docker") != 0)
                rc = cli_usage(VERB "ps ", "ps: unknown provider '%s' (local, docker)", only);
        } else if ((rc = cli_docker_host_option(argc, argv, &i, VERB "ps ")) == 1) {
            rc = 0;
        } else {
            rc = rc ? rc : cli_usage(VERB "ps ", "ps: unexpected argument '%s'", argv[i]);
        }
        if (rc != 0) {
            json_decref(list);
            return rc;
        }
    }
    if (!only || strcmp(only, "local") == 0)
        rc = list_provider("local", all, list, &err);
    if (rc == 0 && (only ? strcmp(only, "docker") == 0 : cli_docker_host() != NULL)) {
        struct sbx_error derr = SBX_ERROR_INIT;
        /* Asked for: a failure. Only found: its engine may be down, the local list stands. */
        if (list_provider("docker", all, list, &derr) < 0 && !only)
            fprintf(stderr, "sbx: warning: docker sandboxes not listed: %s\n", derr.msg);
        else if (derr.code != SBX_OK)
            rc = sbx_error_copy(&err, &derr);
    }
    if (rc == 0) {
        if (json) {
            print_json(list);
        } else {
            size_t i;
            json_t *v;
            if (all)
                printf("%-16s  %-8s  %-12s  %-24s  %s\n", "ID", "PROVIDER", "STATUS", "CREATED",
                       "WORKSPACE");
            else
                printf("%-16s  %-8s  %-24s  %s\n", "ID", "PROVIDER", "CREATED", "WORKSPACE");
            json_array_foreach(list, i, v)
            {
                const char *created = json_string_value(json_object_get(v, "created"));
                const char *ws = json_string_value(json_object_get(v, "workspace"));
                json_t *left = json_object_get(v, "leftovers");
                const char *status = json_string_value(json_object_get(v, "status"));
                const char *prov = json_string_value(json_object_get(v, "provider"));
                char where[160];
                if (left)
                    ws = json_string_value(json_object_get(left, "workspace"));
                if (status && strcmp(status, "stopped") == 0) {
                    /* Nothing of it runs or has a workspace: its snapshot is what it is. */
                    const json_t *b = json_object_get(v, "snapshot_bytes");
                    char size[32] = "size unknown";
                    if (json_is_integer(b))
                        snprintf(size, sizeof(size), "%lld bytes",
                                 (long long)json_integer_value(b));
                    snprintf(where, sizeof(where), "(stopped: snapshot %.19s, %s)",
                             json_string_value(json_object_get(v, "snapshot")), size);
                    ws = where;
                }
                if (all)
                    printf("%-16s  %-8s  %-12s  %-24s  %s\n",
                           json_string_value(json_object_get(v, "id")), prov ? prov : "-",
                           status ? status : "-", created ? created : "-", ws ? ws : "-");
                else
                    printf("%-16s  %-8s  %-24s  %s\n", json_string_value(json_object_get(v, "id")),
                           prov ? prov : "-", created ? created : "-", ws ? ws : "-");
                /* What a sandbox that is not live leaves: one indented line each. */
                size_t k;
                json_t *cg;
                if (left && json_string_value(json_object_get(left, "runtime_dir")))
                    printf("  runtime_dir %s\n",
                           json_string_value(json_object_get(left, "runtime_dir")));
                json_array_foreach(json_object_get(left, "cgroups"), k, cg)
                        printf("  cgroup %s\n", json_string_value(cg));
                if (json_is_integer(json_object_get(left, "supervisor_pid")))
                    printf("  supervisor %lld\n",
                           (long long)json_integer_value(json_object_get(left, "supervisor_pid")));
            }
        }
    }
    json_decref(list);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

static int cmd_port(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    char *url = NULL, *end;
    int unix_sock = 0, i = 1, rc = 0;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--unix") == 0)
            unix_sock = 1;
        else if ((rc = cli_docker_host_option(argc, argv, &i, VERB "port ")) != 1)
            break;
    }
    if (rc != 0 && rc != 1)
        return rc;
    argc -= i - 1;
    argv += i - 1;
    if (argc != 3)
        return cli_usage(VERB "port ", "port: want [--unix] ID and PORT");
    long port = strtol(argv[2], &end, 10);
    if (*end || end == argv[2] || port < 1 || port > 65535)
        return cli_usage(VERB "port ", "port: bad port '%s'", argv[2]);
    rc = cli_sandbox_attach(argv[1], &c, &s, &err);
    if (rc == 0)
        rc = unix_sock ? sbx_local_session_port_unix(s, (int)port, &url, &err)
                       : sbx_session_resolve_port(s, (int)port, &url, &err);
    if (rc == 0)
        printf("%s\n", url);
    free(url);
    sbx_session_free(s);
    sbx_client_free(c);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

static int remove_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    return sbx_client_remove(c, id, *(int *)data, err);
}

static int cmd_rm(int argc, char **argv)
{
    struct sbx_client *c = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    int keep = 0, i, r, status = CLI_OK;
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--keep-workspace") == 0)
            keep = 1;
        else if ((r = cli_docker_host_option(argc, argv, &i, VERB "rm ")) != 1)
            return r ? r : cli_usage(VERB "rm ", "rm: unknown option '%s'", argv[i]);
    }
    if (i >= argc)
        return cli_usage(VERB "rm ", "rm: missing sandbox id");
    for (; i < argc; i++) {
        if (cli_sandbox_by_id(argv[i], remove_op, &keep, &c, &err) < 0)
            status = cli_fail(&err);
        else
            printf("%s\n", argv[i]);
        sbx_client_free(c);
    }
    return status;
}

static int cmd_prune(int argc, char **argv)
{
    struct sbx_client *c = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *removed = NULL, *v;
    int keep = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--keep-workspace") == 0)
            keep = 1;
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else
            return cli_usage(VERB "prune ", "prune: unexpected argument '%s'", argv[i]);
    }
    int rc = cli_client_new("local", &c, &err);
    if (rc == 0)
        rc = sbx_client_prune(c, keep, &removed, &err);
    if (rc == 0 && json) {
        print_json(removed);
    } else if (rc == 0) {
        size_t i;
        json_array_foreach(removed, i, v)
        {
            const char *id = json_string_value(json_object_get(v, "sandbox"));
            printf("removed %s %s%s%s\n", json_string_value(json_object_get(v, "kind")),
                   json_string_value(json_object_get(v, "path")), id ? " of sandbox " : "",
                   id ? id : "");
        }
    }
    json_decref(removed);
    sbx_client_free(c);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * snapshot, stop, start, state, resume */

static int cmd_take_snapshot(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_snapshot_store *st = NULL;
    char *ref = NULL, *tmp = NULL;
    int fd = -1;
    if (argc < 2 || argc > 3)
        return cli_usage(VERB "snapshot ", "snapshot: want ID and an optional FILE");
    const char *file = argc == 3 ? argv[2] : NULL;
    int rc = cli_sandbox_attach(argv[1], &c, &s, &err);
    if (rc == 0)
        rc = sbx_snapshot_store_open(NULL, &st, &err);
    if (rc == 0) {
        sbx_session_set_progress(s, cli_progress_fn(), NULL);
        rc = sbx_session_snapshot(s, st, &ref, &err);
    }
    if (rc == 0 && file) {
        /* Next to FILE, renamed over it when complete: a failed export leaves no half file. */
        tmp = sbx_xasprintf("%s.sbx-tmp", file);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
            rc = sbx_error_errno(&err, errno, "cannot create '%s'", tmp);
        if (rc == 0)
            rc = sbx_snapshot_export(st, ref, fd, &err);
        if (rc == 0 && fsync(fd) < 0)
            rc = sbx_error_errno(&err, errno, "cannot write '%s'", tmp);
        if (fd >= 0 && close(fd) < 0 && rc == 0)
            rc = sbx_error_errno(&err, errno, "cannot write '%s'", tmp);
        if (rc == 0 && rename(tmp, file) < 0)
            rc = sbx_error_errno(&err, errno, "cannot rename '%s' to '%s'", tmp, file);
        if (rc < 0 && fd >= 0)
            unlink(tmp);
    }
    if (rc == 0)
        printf("%s\n", ref);
    free(ref);
    free(tmp);
    sbx_snapshot_store_free(st);
    sbx_session_free(s);
    sbx_client_free(c);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

static int stop_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    return sbx_client_stop(c, id, NULL, err);
}

static int cmd_stop(int argc, char **argv)
{
    struct sbx_client *c = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    int status = CLI_OK, i = 1, r = 0;
    while (i < argc && (r = cli_docker_host_option(argc, argv, &i, VERB "stop ")) == 1)
        i++;
    if (r != 0 && r != 1)
        return r;
    if (i >= argc)
        return cli_usage(VERB "stop ", "stop: missing sandbox id");
    for (; i < argc; i++) {
        if (cli_sandbox_by_id(argv[i], stop_op, NULL, &c, &err) < 0)
            status = cli_fail(&err);
        else
            printf("%s\n", argv[i]);
        sbx_client_free(c);
    }
    return status;
}

/* --manifest of start and resume: the manifest the sandbox was made from, whose ephemeral
 * variables a rebuilt sandbox gets again. NULL path: none. */
static int load_trusted_manifest(const char *path, struct sbx_manifest **out, struct sbx_error *err)
{
    *out = NULL;
    if (!path)
        return 0;
    int rc = sbx_manifest_load_file(path, NULL, out, err);
    if (rc < 0)
        sbx_error_prefix(err, "manifest '%s'", path);
    return rc;
}

struct start_data {
    const struct sbx_resume_opts *ro;
    struct sbx_session **s;
};

static int start_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    struct start_data *sd = data;
    return sbx_client_start(c, id, sd->ro, sd->s, err);
}

static int cmd_start(int argc, char **argv)
{
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_strv pass;
    struct sbx_manifest *m = NULL;
    const char *id = NULL, *manifest_path = NULL;
    int rc = CLI_OK;
    sbx_strv_init(&pass);
    for (int i = 1; i < argc && rc == CLI_OK; i++) {
        if (strcmp(argv[i], "--pass-secret") == 0 && i + 1 < argc) {
            if ((rc = cli_pass_secret(argv[++i], &pass)) == 1)
                rc = CLI_OK;
        } else if ((strcmp(argv[i], "--manifest") == 0 || strcmp(argv[i], "-m") == 0) &&
                   i + 1 < argc) {
            manifest_path = argv[++i];
        } else if ((rc = cli_docker_host_option(argc, argv, &i, VERB "start ")) != 0) {
            rc = rc == 1 ? CLI_OK : rc;
        } else if (argv[i][0] == '-' || id) {
            rc = cli_usage(VERB "start ", "start: unexpected argument '%s'", argv[i]);
        } else {
            id = argv[i];
        }
    }
    if (rc == CLI_OK && !id)
        rc = cli_usage(VERB "start ", "start: missing sandbox id");
    if (rc != CLI_OK) {
        sbx_strv_release(&pass);
        return rc;
    }
    struct sbx_resume_opts ro = {.pass_secrets = &pass, .progress = cli_progress_fn()};
    int r = load_trusted_manifest(manifest_path, &m, &err);
    ro.manifest = m;
    struct start_data sd = {&ro, &s};
    if (r == 0)
        r = cli_sandbox_by_id(id, start_op, &sd, &c, &err);
    if (r == 0)
        printf("%s\n", sbx_session_id(s));
    sbx_session_free(s);
    sbx_client_free(c);
    sbx_manifest_free(m);
    sbx_strv_release(&pass);
    return r < 0 ? cli_fail(&err) : CLI_OK;
}

struct state_data {
    int snapshot;
    json_t **out;
};

static int state_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    struct state_data *sd = data;
    return sbx_client_state(c, id, sd->snapshot, sd->out, err);
}

static int cmd_state(int argc, char **argv)
{
    struct sbx_client *c = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *state = NULL;
    char *text = NULL;
    int snapshot = 1, i = 1;
    if (i < argc && strcmp(argv[i], "--no-snapshot") == 0) {
        snapshot = 0;
        i++;
    }
    if (argc - i != 1)
        return cli_usage(VERB "state ", "state: want [--no-snapshot] and one sandbox id");
    struct state_data sd = {snapshot, &state};
    int rc = cli_sandbox_by_id(argv[i], state_op, &sd, &c, &err);
    if (rc == 0)
        rc = sbx_session_state_serialize(state, &text, &err);
    if (rc == 0)
        fputs(text, stdout);
    free(text);
    json_decref(state);
    sbx_client_free(c);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

static int cmd_resume(int argc, char **argv)
{
    struct sbx_local_options opts = {0};
    struct sbx_local_grant grants[SBX_LOCAL_MAX_GRANTS];
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_strv pass;
    struct sbx_buf text;
    json_t *state = NULL;
    struct sbx_manifest *m = NULL;
    const char *file = NULL, *manifest_path = NULL;
    int rc = CLI_OK;
    sbx_strv_init(&pass);
    for (int i = 1; i < argc && rc == CLI_OK; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--pass-secret") == 0 && i + 1 < argc) {
            if ((rc = cli_pass_secret(argv[++i], &pass)) == 1)
                rc = CLI_OK;
        } else if ((strcmp(a, "--manifest") == 0 || strcmp(a, "-m") == 0) && i + 1 < argc) {
            manifest_path = argv[++i];
        } else if (strcmp(a, "--ro") == 0 || strcmp(a, "--rw") == 0 ||
                   strcmp(a, "--allow-dangerous-grant") == 0 || strcmp(a, "--isolation") == 0 ||
                   strcmp(a, "--network") == 0 || strcmp(a, "--allow-port") == 0 ||
                   strcmp(a, "--cpus") == 0) {
            /* The trusted configuration a state cannot grant by itself: host paths, and what
             * weakens the sandbox (these only accept what the state asks for). */
            int r = cli_local_option(argc, argv, &i, &opts, grants);
            rc = r == 1 ? CLI_OK : r;
        } else if ((a[0] == '-' && a[1]) || file) {
            rc = cli_usage(VERB "resume ", "resume: unexpected argument '%s'", a);
        } else {
            file = a;
        }
    }
    if (rc == CLI_OK && !file)
        rc = cli_usage(VERB "resume ", "resume: missing state FILE");
    if (rc == CLI_OK)
        rc = cli_local_finish(&opts, grants);
    if (rc != CLI_OK) {
        sbx_strv_release(&pass);
        return rc;
    }
    sbx_buf_init(&text, SBX_SESSION_STATE_MAX + 1);
    int fd = strcmp(file, "-") == 0 ? dup(0) : open(file, O_RDONLY | O_CLOEXEC);
    int r = fd < 0 ? sbx_error_errno(&err, errno, "cannot open '%s'", file)
                   : sbx_fd_read_all(fd, SBX_SESSION_STATE_MAX, &text, &err);
    if (fd >= 0)
        close(fd);
    if (r == 0)
        r = sbx_session_state_parse(text.data, text.len, &state, &err);
    if (r < 0)
        sbx_error_prefix(&err, "'%s'", file);
    if (r == 0)
        r = load_trusted_manifest(manifest_path, &m, &err);
    struct sbx_resume_opts ro = {
            .pass_secrets = &pass, .manifest = m, .progress = cli_progress_fn()};
    /* A docker sandbox's state is resumed through the engine (the local options are moot). */
    const char *sp = json_string_value(json_object_get(state, "provider"));
    if (r == 0 && sp && strcmp(sp, "docker") == 0)
        r = cli_client_new("docker", &c, &err);
    else if (r == 0)
        r = sbx_client_new("local", &opts, &c, &err);
    if (r == 0)
        r = sbx_client_resume_with(c, state, &ro, &s, &err);
    if (r == 0)
        printf("%s\n", sbx_session_id(s));
    sbx_session_free(s);
    sbx_client_free(c);
    sbx_manifest_free(m);
    json_decref(state);
    sbx_buf_release(&text);
    sbx_strv_release(&pass);
    return r < 0 ? cli_fail(&err) : CLI_OK;
}

int cmd_sandbox(int argc, char **argv)
{
    static const struct {
        const char *name;
        cli_verb_fn *fn;
    } subs[] = {
            {"create", cmd_create}, {"exec", cmd_exec},
            {"shell", cmd_shell},   {"cp", cmd_cp},
            {"ps", cmd_ps},         {"ls", cmd_ps},
            {"port", cmd_port},     {"rm", cmd_rm},
            {"prune", cmd_prune},   {"snapshot", cmd_take_snapshot},
            {"stop", cmd_stop},     {"start", cmd_start},
            {"state", cmd_state},   {"resume", cmd_resume},
    };
    if (argc < 2)
        return cli_usage(VERB, "sandbox: missing command");
    for (size_t i = 0; i < SBX_ARRAY_LEN(subs); i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(argc - 1, argv + 1);
    return cli_usage(VERB, "sandbox: unknown command '%s'", argv[1]);
}
