/* The host git checkout of a git_repo entry: git run with no configuration but the
 * repository's own, none of the harness's environment but the way out to the network, never a
 * prompt; its failure told in one line. Materialisation copies the checkout into a workspace;
 * the skills capability reads skills from it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "core/spawn.h"
#include "sandbox/materialize/git.h"
#include "sbx/buf.h"
#include "sbx/log.h"
#include "sbx/strv.h"

#define GIT_ERR_MAX 4096
#define GIT_MSG_MAX 600 /* bytes of git's reason in an error */

/* What git said when it failed, as one line: from its first "fatal:" or "error:" line on
 * (everything when there is none), without progress and hint lines, lines joined by spaces and
 * control characters made spaces, at most GIT_MSG_MAX bytes. Git often spreads one reason over
 * several lines ("fatal: Could not read from remote repository." and a paragraph on access
 * rights), so no single line explains. Caller owns. */
static char *git_failure(const char *t, size_t n)
{
    char out[GIT_MSG_MAX + 8];
    size_t o = 0;
    int started = 0, cut = 0;
    for (int pass = 0; pass < 2 && o == 0; pass++) {
        const char *p = t, *end = t + n;
        while (p < end && !cut) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            while (len && (p[len - 1] == '\r' || p[len - 1] == ' '))
                len--;
            /* The second pass takes everything: git said no fatal or error line. */
            started |= pass == 1 ||
                       (len >= 6 && (memcmp(p, "fatal:", 6) == 0 || memcmp(p, "error:", 6) == 0));
            int noise = len == 0 || (len >= 5 && memcmp(p, "hint:", 5) == 0) ||
                        (len >= 12 && memcmp(p, "Cloning into", 12) == 0);
            if (started && !noise) {
                if (o + 1 >= GIT_MSG_MAX) {
                    cut = 1;
                    break;
                }
                if (o)
                    out[o++] = ' ';
                size_t room = GIT_MSG_MAX - o;
                if (len > room) {
                    while (room && ((unsigned char)p[room] & 0xC0) == 0x80)
                        room--;
                    len = room;
                    cut = 1;
                }
                memcpy(out + o, p, len);
                o += len;
            }
            p = nl ? nl + 1 : end;
        }
    }
    for (size_t i = 0; i < o; i++)
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
            out[i] = ' ';
    if (!o)
        return sbx_xstrdup("(git printed nothing)");
    return sbx_xasprintf("%.*s%s", (int)o, out, cut ? " ..." : "");
}

/* What git gets of the harness's environment: the way out to the network (proxies, the ssh
 * agent), nothing else, so no API key or token of the harness reaches git or its helpers. */
static const char *const git_pass_env[] = {"http_proxy", "https_proxy",   "HTTPS_PROXY",
                                           "all_proxy",  "ALL_PROXY",     "no_proxy",
                                           "NO_PROXY",   "SSH_AUTH_SOCK", NULL};

/* The transports git may use for url: "file" for a repository on this host (the manifest
 * checked that it lies beneath its base directory), "https" for everything else. A remote
 * repository can then never make git read a file of this host (a file:// submodule or
 * alternate, an ext:: command), whatever it or its URL says. */
static const char *transport_for(const char *url)
{
    return url && (url[0] == '/' || strncmp(url, "file://", 7) == 0) ? "file" : "https";
}

/* Run git with args (NULL-terminated, without "git") in cwd (NULL: here); stdout goes to out
 * (NULL: dropped), stderr is kept for the message. transport: the one protocol git may use
 * (transport_for). */
static int run_git(const char *cwd, const char *transport, const char *const *args,
                   struct sbx_buf *out, struct sbx_error *err)
{
    struct sbx_strv argv, env;
    struct sbx_buf errtext;
    struct sbx__spawn_capture cap = {.out = out, .err = &errtext};
    int rc;

    sbx_strv_init(&argv);
    sbx_strv_init(&env);
    sbx_buf_init(&errtext, GIT_ERR_MAX);
    sbx_strv_push(&argv, "git");
    if (cwd) {
        sbx_strv_push(&argv, "-C");
        sbx_strv_push(&argv, cwd);
    }
    sbx_strv_pushv(&argv, args);
    /* No configuration but the repository's own (no system or user file: their credential
     * helpers, hooks paths or fsmonitor commands are the harness user's, not this fetch's),
     * never a prompt, messages in English for git_failure. HOME leads nowhere: a temporary
     * one would be empty anyway, and the checkout itself must never serve as one. */
    sbx_strv_setenv(&env, "PATH", SBX__SPAWN_PATH);
    sbx_strv_setenv(&env, "HOME", "/nonexistent");
    sbx_strv_setenv(&env, "XDG_CONFIG_HOME", "/nonexistent");
    sbx_strv_setenv(&env, "GIT_CONFIG_NOSYSTEM", "1");
    sbx_strv_setenv(&env, "GIT_CONFIG_GLOBAL", "/dev/null");
    sbx_strv_setenv(&env, "GIT_TERMINAL_PROMPT", "0");
    sbx_strv_setenv(&env, "GIT_SSH_COMMAND", "ssh -o BatchMode=yes");
    sbx_strv_setenv(&env, "LC_ALL", "C");
    /* Both the allow list git reads first and the configuration it falls back to. */
    sbx_strv_setenv(&env, "GIT_ALLOW_PROTOCOL", transport);
    sbx_strv_setenv(&env, "GIT_PROTOCOL_FROM_USER", "0");
    sbx_strv_setenv(&env, "GIT_CONFIG_COUNT", "2");
    sbx_strv_setenv(&env, "GIT_CONFIG_KEY_0", "protocol.allow");
    sbx_strv_setenv(&env, "GIT_CONFIG_VALUE_0", "never");
    sbx_strv_setenv(&env, "GIT_CONFIG_KEY_1",
                    strcmp(transport, "file") == 0 ? "protocol.file.allow"
                                                   : "protocol.https.allow");
    sbx_strv_setenv(&env, "GIT_CONFIG_VALUE_1", "always");
    for (size_t i = 0; git_pass_env[i]; i++) {
        const char *v = getenv(git_pass_env[i]);
        if (v)
            sbx_strv_setenv(&env, git_pass_env[i], v);
    }
    struct sbx__spawn sp = {.program = "git",
                            .argv = (const char *const *)argv.v,
                            .env = (const char *const *)env.v};
    /* stdout is small (rev-parse) and stderr bounded: past their bounds output is dropped. */
    if (out)
        sp.out.how = SBX__SPAWN_PIPE;
    sp.err.how = SBX__SPAWN_PIPE;
    rc = sbx__spawn_run(&sp, -1, &cap, err);
    if (rc == 0 && (!WIFEXITED(cap.status) || WEXITSTATUS(cap.status) != 0)) {
        char *why = git_failure(errtext.data, errtext.len);
        rc = sbx_error_set(err, SBX_E_IO, 0, "git %s failed: %s", args[0], why);
        free(why);
    }
    sbx_buf_release(&errtext);
    sbx_strv_release(&argv);
    sbx_strv_release(&env);
    return rc;
}

static int is_commitish(const char *ref)
{
    size_t n = ref ? strlen(ref) : 0;
    if (n < 7 || n > 40)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((ref[i] >= '0' && ref[i] <= '9') || (ref[i] >= 'a' && ref[i] <= 'f') ||
              (ref[i] >= 'A' && ref[i] <= 'F')))
            return 0;
    return 1;
}

void sbx__git_checkout_remove(const char *dir)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx__fs_remove_tree(dir, &err) < 0)
        sbx_log(SBX_LOG_WARN, "%s", err.msg);
}

int sbx__git_checkout(const struct sbx_manifest_entry *e, char **out_dir, char **out_commit,
                      struct sbx_error *err)
{
    const char *t = getenv("TMPDIR");
    char *tmp = sbx_xasprintf("%s/sbx-git-......", t && t[0] == '/' ? t : "/tmp");
    memset(tmp + strlen(tmp) - 6, 'X', 6); /* the template mkdtemp fills in */
    struct sbx_buf head;
    int rc = 0;

    sbx_buf_init(&head, 256);
    if (!mkdtemp(tmp)) {
        rc = sbx_error_errno(err, errno, "cannot create a temporary directory");
        free(tmp);
        return rc;
    }
    const char *url = e->url ? e->url : e->repo;
    const char *tp = transport_for(url);
    if (e->ref && is_commitish(e->ref)) {
        /* A commit: fetch exactly it. Servers that refuse fetching by id get a clone. */
        const char *const init[] = {"init", "-q", NULL};
        const char *const remote[] = {"remote", "add", "origin", url, NULL};
        const char *const fetch[] = {"fetch",     "-q",     "--depth", "1",
                                     "--no-tags", "origin", e->ref,    NULL};
        const char *const checkout[] = {"checkout", "-q", "--detach", "FETCH_HEAD", NULL};
        rc = run_git(tmp, tp, init, NULL, err);
        if (rc == 0)
            rc = run_git(tmp, tp, remote, NULL, err);
        if (rc == 0)
            rc = run_git(tmp, tp, fetch, NULL, err);
        if (rc == 0)
            rc = run_git(tmp, tp, checkout, NULL, err);
        if (rc < 0) {
            struct sbx_error first;
            sbx_error_copy(&first, err);
            sbx__git_checkout_remove(tmp);
            if (mkdir(tmp, 0700) < 0) {
                rc = sbx_error_errno(err, errno, "cannot recreate '%s'", tmp);
                goto out;
            }
            const char *const clone[] = {"clone", "-q", "--no-tags", "--no-local",
                                         "--",    url,  tmp,         NULL};
            const char *const co[] = {"checkout", "-q", "--detach", e->ref, NULL};
            if (run_git(NULL, tp, clone, NULL, err) < 0 || run_git(tmp, tp, co, NULL, err) < 0) {
                rc = sbx_error_copy(err, &first);
                goto out;
            }
            rc = 0;
        }
    } else {
        struct sbx_strv args;
        sbx_strv_init(&args);
        sbx_strv_pushv(&args, (const char *const[]){"clone", "-q", "--depth", "1", "--no-tags",
                                                    "--no-local", NULL});
        if (e->ref) {
            sbx_strv_push(&args, "--branch");
            sbx_strv_push(&args, e->ref);
        }
        sbx_strv_push(&args, "--");
        sbx_strv_push(&args, url);
        sbx_strv_push(&args, tmp);
        rc = run_git(NULL, tp, (const char *const *)args.v, NULL, err);
        sbx_strv_release(&args);
    }
    if (rc < 0)
        goto out;
    const char *const revparse[] = {"rev-parse", "HEAD", NULL};
    rc = run_git(tmp, tp, revparse, &head, err);
    if (rc < 0)
        goto out;
    while (head.len && (head.data[head.len - 1] == '\n'))
        sbx_buf_setlen(&head, head.len - 1);
out:
    if (rc < 0) {
        sbx__git_checkout_remove(tmp);
        free(tmp);
    } else {
        *out_dir = tmp;
        *out_commit = sbx_buf_detach(&head, NULL);
    }
    sbx_buf_release(&head);
    return rc;
}

int sbx__git_forget_remote(const char *dir, struct sbx_error *err)
{
    const char *const unremote[] = {"remote", "remove", "origin", NULL};
    return run_git(dir, "https", unremote, NULL, err);
}
