/* sbx sandbox: the subcommands given a sandbox id (exec, shell, cp, port, rm, snapshot, stop,
 * start, state) and prune, with Docker's habits; create and resume (the commands that take a
 * provider's options) are in cmd-sandbox-create.c, ps and providers in cmd-sandbox-ps.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/session.h"
#include "sbx/snapshot-remote.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define VERB "sandbox "

static int print_json(const json_t *v)
{
    char *text = sbx_json_dumps(v, SBX_JSON_PRETTY);
    cli_put_json(stdout, text);
    putchar('\n');
    free(text);
    return CLI_OK;
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

/* `sbx sandbox exec` exit statuses, as shells and container tools use them, so that sbx's own
 * failures never look like the command's: the command's status, 128+N for signal N, 124 when
 * --timeout killed it, and (README.md has the table): */
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

struct exec_io {
    int sigfd;       /* SIGWINCH, -1 without a tty */
    int output_gone; /* a write to our stdout or stderr failed */
};

static int exec_output(void *ctx, int stream, const void *p, size_t n, struct sbx_error *err)
{
    struct exec_io *x = ctx;
    int rc = sbx_fd_write_all(stream, p, n, err);
    if (rc < 0)
        x->output_gone = 1;
    return rc;
}

static int exec_resize(void *ctx, unsigned short *rows, unsigned short *cols)
{
    struct exec_io *x = ctx;
    struct signalfd_siginfo si;
    struct winsize ws;
    while (read(x->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
    if (ioctl(1, TIOCGWINSZ, &ws) < 0)
        return 0;
    *rows = ws.ws_row;
    *cols = ws.ws_col;
    return 1;
}

/* Run spec with its output on our stdio (and our stdin forwarded when forward_stdin) until it
 * exits. Returns the exit status to use. */
static int stream(struct sbx_session *s, const struct sbx_exec_spec *spec, int forward_stdin,
                  const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_spec sp = *spec;
    struct sbx_exit st = {0};
    struct exec_io x = {.sigfd = -1};
    struct sbx_exec_stream io = {.output = exec_output,
                                 .stdin_fd = forward_stdin ? 0 : -1,
                                 .resize_fd = -1,
                                 .resize = exec_resize,
                                 .ctx = &x};

    if (sp.flags & SBX_EXEC_TTY) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGWINCH);
        sigprocmask(SIG_BLOCK, &set, NULL);
        io.resize_fd = x.sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        struct winsize ws;
        if (isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0) {
            sp.rows = ws.ws_row;
            sp.cols = ws.ws_col;
        }
        if (forward_stdin)
            raw_tty();
    }
    int rc = sbx_session_exec_stream(s, &sp, &io, &st, &err);
    restore_tty();
    if (x.sigfd >= 0)
        close(x.sigfd);
    /* Our output is gone (`sbx sandbox exec … | head`): like SIGPIPE; the command was killed. */
    if (rc < 0 && x.output_gone)
        return 128 + SIGPIPE;
    if (rc < 0)
        return exec_fail(&err);
    if (st.timed_out) {
        cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: command in sandbox '%s' timed out\n", id);
        return 124;
    }
    if (st.reason[0])
        cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: %s\n", st.reason);
    return st.signal ? 128 + st.signal : st.code;
}

static int run_exec(const char *id, const struct sbx_exec_spec *spec, int forward_stdin,
                    size_t max_output)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    int status = CLI_FAIL;

    signal(SIGPIPE, SIG_IGN);
    int rc = cli_sandbox_attach_once(id, &c, &s, &err);
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
                cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: command in sandbox '%s' timed out\n",
                                id);
            else if (res.status.reason[0])
                cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: %s\n", res.status.reason);
            sbx_exec_result_release(&res);
        }
    } else if (rc == 0) {
        status = stream(s, spec, forward_stdin, id);
    }
    sbx_session_free(s);
    sbx_client_free(c);
    return rc < 0 ? exec_fail(&err) : status;
}

/* -i with -t reads the terminal sbx runs on: without one, say so as docker does instead of
 * putting a pipe's bytes on a terminal that echoes them. */
static int need_tty(const char *verb)
{
    if (isatty(0))
        return 0;
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                    "sbx: %sthe input device is not a TTY (use -i without -t to forward a pipe)\n",
                    verb);
    return EXEC_SBX_FAILED;
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
                return exec_usage(VERB "exec ", "exec: --env wants KEY=VALUE, not '%s'", kv);
            }
            sbx_strv_push(&env, kv);
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            int64_t ms;
            if (sbx_duration_parse_ms(argv[++i], &ms) < 0 || ms <= 0) {
                sbx_strv_release(&env);
                return exec_usage(VERB "exec ", "exec: bad timeout '%s'", argv[i]);
            }
            spec.timeout_ms = ms;
        } else if ((rc = cli_locator_arg(argc, argv, &i, VERB "exec ")) != 0) {
            if (rc != 1) {
                sbx_strv_release(&env);
                return EXEC_SBX_FAILED;
            }
        } else if (strcmp(a, "--max-output") == 0 && i + 1 < argc) {
            char *end;
            unsigned long long n = strtoull(argv[++i], &end, 10);
            if (*end || n == 0 || n > SBX_OUTPUT_MAX_LIMIT) {
                sbx_strv_release(&env);
                return exec_usage(VERB "exec ", "exec: bad --max-output '%s'", argv[i]);
            }
            max_output = (size_t)n;
        } else {
            sbx_strv_release(&env);
            return (cli_unknown_option(VERB "exec ", a), EXEC_SBX_FAILED);
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
    if (interactive && (spec.flags & SBX_EXEC_TTY) && (rc = need_tty("exec: ")) != 0) {
        sbx_strv_release(&env);
        return rc;
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
    const char *id = NULL, *shell = NULL;
    int r = 0;
    for (int i = 1; i < argc && r == 0; i++) {
        if (strcmp(argv[i], "--shell") == 0 && i + 1 < argc)
            shell = argv[++i];
        else if ((r = cli_locator_arg(argc, argv, &i, VERB "shell ")) == 1)
            r = 0;
        else if (r == 0 && argv[i][0] == '-')
            r = cli_unknown_option(VERB "shell ", argv[i]);
        else if (r == 0 && id)
            r = cli_usage(VERB "shell ", "shell: want exactly one sandbox id");
        else if (r == 0)
            id = argv[i];
    }
    if (r == 0 && !id)
        r = cli_usage(VERB "shell ", "shell: missing sandbox id");
    if (r != 0)
        return EXEC_SBX_FAILED;
    if ((r = need_tty("shell: ")) != 0)
        return r;
    /* The best shell there is: bash (line editing, history) when the sandbox has it. */
    const char *const best[] = {
            "/bin/sh", "-c",
            "if command -v bash >/dev/null 2>&1; then exec bash -i; else exec /bin/sh -i; fi",
            NULL};
    const char *const given[] = {shell, NULL};
    struct sbx_exec_spec spec = {.argv = shell ? given : best, .flags = SBX_EXEC_TTY};
    struct sbx_strv env;
    sbx_strv_init(&env);
    const char *term = getenv("TERM");
    if (term && term[0])
        sbx_strv_setenv(&env, "TERM", term);
    spec.env = (const char *const *)env.v;
    r = run_exec(id, &spec, 1, 0);
    sbx_strv_release(&env);
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * cp */

/* "ID:path" -> id and path (borrowed pieces of a copy in *hold). Host paths stay as given
 * (./a:b for a host file whose name has a colon). An id is what providers name sandboxes
 * with: lowercase letters, digits and '-' (hex for local and docker, E2B's ids for e2b). */
static int split_remote(const char *arg, char **hold, const char **id, const char **path)
{
    /* An id or a name before the colon (a host path with a colon: ./a:b). */
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || colon - arg > 64 || arg[0] == '.' || arg[0] == '-' ||
        strspn(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                (size_t)(colon - arg))
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
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        /* A directory is copied whole with or without -r, as docker cp does. */
        if (strcmp(argv[i], "-r") == 0 || strcmp(argv[i], "-a") == 0 ||
            strcmp(argv[i], "--recursive") == 0)
            continue;
        if ((rc = cli_locator_arg(argc, argv, &i, VERB "cp ")) != 1)
            return rc ? rc : cli_unknown_option(VERB "cp ", argv[i]);
    }
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
        int is_dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
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
        if (is_dir)
            rc = cli_cp_tree_in(s, fd, dst_path, &err);
        else
            rc = sbx_session_write_fd(s, dst_path, fd, 0,
                                      S_ISREG(st.st_mode) ? st.st_mode & 0777 : 0, 0, &err);
    } else {
        /* sandbox -> host */
        struct sbx_dirent sd = {0};
        rc = cli_sandbox_attach(sid, &c, &s, &err);
        int is_dir =
                rc == 0 && sbx_session_stat(s, spath, &sd, NULL) == 0 && sd.type == SBX_FILE_DIR;
        sbx_dirent_release(&sd);
        if (rc == 0 && is_dir) {
            struct stat hst;
            if (strcmp(argv[2], "-") == 0) {
                rc = sbx_error_set(&err, SBX_E_INVAL, 0,
                                   "'%s' is a directory: copy it to a host directory, not to "
                                   "standard output",
                                   spath);
                goto out;
            }
            /* Into an existing directory: keep the source's name, as cp -r does. */
            dst_path = stat(argv[2], &hst) == 0 && S_ISDIR(hst.st_mode)
                               ? sbx_xasprintf("%s/%s", argv[2],
                                               spath[0] ? base_name(spath) : "workspace")
                               : sbx_xstrdup(argv[2]);
            rc = cli_cp_tree_out(s, spath, dst_path, &err);
            goto out;
        }
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
 * port, rm, prune */

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
        else if ((rc = cli_locator_arg(argc, argv, &i, VERB "port ")) != 1)
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

/* rm --all on a terminal: "remove N sandboxes? [y/N]" answered on the terminal. */
static int confirm_all(const json_t *list)
{
    char line[64];
    size_t i;
    json_t *v;
    fprintf(stderr, "sbx: this removes %zu sandbox%s and %s workspace%s:\n", json_array_size(list),
            json_array_size(list) == 1 ? "" : "es", json_array_size(list) == 1 ? "its" : "their",
            json_array_size(list) == 1 ? "" : "s");
    json_array_foreach(list, i, v)
    {
        char *name = cli_ps_field(v, "Name", NULL), *st = cli_ps_field(v, "Status", NULL);
        cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "  %s  %s%s%s\n",
                        json_string_value(json_object_get(v, "id")), st, name[0] ? "  " : "", name);
        free(name);
        free(st);
    }
    fputs("remove them? [y/N] ", stderr);
    fflush(stderr);
    if (!fgets(line, sizeof(line), stdin))
        return 0;
    return line[0] == 'y' || line[0] == 'Y';
}

/* The ids rm --all removes: every sandbox ps --all lists. */
static int rm_all_ids(int yes, struct sbx_strv *ids)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *list = NULL, *v;
    size_t i;
    if (cli_sandbox_list(1, &list, &err) < 0)
        return cli_fail(&err);
    int rc = CLI_OK;
    if (json_array_size(list) && !yes && !(isatty(0) && isatty(2)))
        rc = cli_usage(VERB "rm ",
                       "rm: --all removes %zu sandboxes: confirm with --yes (no "
                       "terminal to ask on)",
                       json_array_size(list));
    else if (json_array_size(list) && !yes && !confirm_all(list))
        rc = (fprintf(stderr, "sbx: nothing removed\n"), CLI_FAIL);
    json_array_foreach(list, i, v)
    {
        if (rc == CLI_OK)
            sbx_strv_push(ids, json_string_value(json_object_get(v, "id")));
    }
    json_decref(list);
    return rc;
}

static int cmd_rm(int argc, char **argv)
{
    struct sbx_client *c = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_strv ids;
    int keep = 0, all = 0, yes = 0, i, r = 0, status = CLI_OK;
    sbx_strv_init(&ids);
    for (i = 1; i < argc && r == 0; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--keep-workspace") == 0)
            keep = 1;
        else if (strcmp(a, "-f") == 0 || strcmp(a, "--force") == 0)
            continue; /* a running sandbox is always stopped first */
        else if (strcmp(a, "--all") == 0 || strcmp(a, "-a") == 0)
            all = 1;
        else if (strcmp(a, "-y") == 0 || strcmp(a, "--yes") == 0)
            yes = 1;
        else if (a[0] != '-')
            sbx_strv_push(&ids, a);
        else if ((r = cli_locator_arg(argc, argv, &i, VERB "rm ")) == 1)
            r = 0;
        else
            r = r ? r : cli_unknown_option(VERB "rm ", a);
    }
    if (r == 0 && all && ids.n)
        r = cli_usage(VERB "rm ", "rm: --all takes no sandbox id");
    else if (r == 0 && !all && !ids.n)
        r = cli_usage(VERB "rm ", "rm: missing sandbox id");
    if (r == 0 && all)
        r = rm_all_ids(yes, &ids);
    for (size_t k = 0; r == 0 && k < ids.n; k++) {
        json_t *rec = NULL;
        /* The record that finds it (by the id, a name or a prefix) goes with it. */
        int had = sbx_sandbox_record_read(ids.v[k], &rec, NULL) == 0;
        if (cli_sandbox_by_id(ids.v[k], remove_op, &keep, &c, &err) < 0) {
            status = cli_fail(&err);
        } else {
            printf("%s\n", ids.v[k]);
            if (had)
                (void)sbx_sandbox_record_remove(json_string_value(json_object_get(rec, "id")),
                                                NULL);
        }
        json_decref(rec);
        sbx_client_free(c);
    }
    sbx_strv_release(&ids);
    return r ? r : status;
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
            return argv[i][0] == '-'
                           ? cli_unknown_option(VERB "prune ", argv[i])
                           : cli_usage(VERB "prune ", "prune: unexpected argument '%s'", argv[i]);
    }
    /* Each provider that finds its sandboxes here and keeps leftovers of dead ones. */
    struct sbx_provider_info p;
    int rc = 0;
    removed = json_array();
    for (size_t k = 0; rc == 0 && sbx_provider_at(k, &p) == 0; k++) {
        json_t *got = NULL;
        if (!(p.traits & SBX_PROVIDER_LISTS))
            continue;
        rc = cli_client_found(p.name, 0, &c, &err);
        if (rc == -SBX_E_NOTFOUND && !c) { /* nothing of it configured here */
            rc = 0;
            sbx_error_clear(&err);
            continue;
        }
        if (rc == 0)
            rc = sbx_client_prune(c, keep, &got, &err);
        if (rc == -SBX_E_UNSUPPORTED) {
            rc = 0;
            sbx_error_clear(&err);
        }
        json_array_extend(removed, got);
        json_decref(got);
        sbx_client_free(c);
        c = NULL;
    }
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
    const char *pos[2] = {NULL, NULL}, *store = NULL;
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--store") == 0) {
            if (++i >= argc || !sbx_snapshot_remote_is_url(argv[i]))
                return cli_usage(VERB "snapshot ",
                                 "snapshot: --store takes a URL (s3://, gs://, azure://)");
            store = argv[i];
        } else if (npos < 2 && (argv[i][0] != '-' || !argv[i][1])) {
            pos[npos++] = argv[i];
        } else {
            return cli_usage(VERB "snapshot ", "snapshot: want ID and an optional FILE");
        }
    }
    if (npos < 1)
        return cli_usage(VERB "snapshot ", "snapshot: want ID and an optional FILE");
    const char *file = pos[1];
    int rc = cli_sandbox_attach(pos[0], &c, &s, &err);
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
    /* also in a remote store: the local one keeps it too (the next push sends only what
     * changed) */
    if (rc == 0 && store)
        rc = cli_snapshot_push_ref(store, ref, &err);
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
    while (i < argc && (r = cli_locator_arg(argc, argv, &i, VERB "stop ")) == 1)
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
        } else if ((rc = cli_locator_arg(argc, argv, &i, VERB "start ")) != 0) {
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
    int r = cli_trusted_manifest(manifest_path, &m, &err);
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
        cli_put_json(stdout, text);
    free(text);
    json_decref(state);
    sbx_client_free(c);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

int cmd_sandbox(int argc, char **argv)
{
    static const struct {
        const char *name;
        cli_verb_fn *fn;
    } subs[] = {
            {"create", cmd_sandbox_create},
            {"exec", cmd_exec},
            {"shell", cmd_shell},
            {"cp", cmd_cp},
            {"ps", cmd_sandbox_ps},
            {"ls", cmd_sandbox_ps},
            {"port", cmd_port},
            {"rm", cmd_rm},
            {"prune", cmd_prune},
            {"snapshot", cmd_take_snapshot},
            {"stop", cmd_stop},
            {"start", cmd_start},
            {"state", cmd_state},
            {"resume", cmd_sandbox_resume},
            {"providers", cmd_sandbox_providers},
            {"stats", cmd_sandbox_stats},
            {"logs", cmd_sandbox_logs},
            {"inspect", cmd_sandbox_inspect},
    };
    if (argc < 2)
        return cli_usage(VERB, "sandbox: missing command");
    for (size_t i = 0; i < SBX_ARRAY_LEN(subs); i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(argc - 1, argv + 1);
    return cli_unknown_command(VERB, argv[1]);
}
