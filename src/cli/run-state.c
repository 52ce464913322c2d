/* sbx run --state / --resume: writing the run state at every checkpoint, reading it back, the
 * approval flags, this user's run-state key and what the user is told
 * (docs/internals/runstate.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/run-state.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"

#define ARGS_SHOWN 200
#define BY_FLAGS   "command line"

void cli_run_state_init(struct cli_run_state *rs)
{
    memset(rs, 0, sizeof(*rs));
    sbx_strv_init(&rs->secrets);
}

void cli_run_state_release(struct cli_run_state *rs)
{
    json_decref(rs->flags);
    json_decref(rs->decisions);
    json_decref(rs->always);
    json_decref(rs->doc);
    sbx_run_state_log_close(rs->log);
    free(rs->auto_path);
    for (size_t i = 0; i < rs->secrets.n; i++)
        explicit_bzero(rs->secrets.v[i], strlen(rs->secrets.v[i]));
    sbx_strv_release(&rs->secrets);
    explicit_bzero(rs->key, sizeof(rs->key));
}

int cli_run_state_flag(struct cli_run_state *rs, const char *opt, const char *arg)
{
    if (!rs->flags)
        rs->flags = json_array();
    if (strcmp(opt, "reason") == 0) {
        json_t *last = json_array_get(rs->flags, json_array_size(rs->flags) - 1);
        const char *lo = json_string_value(json_object_get(last, "opt"));
        if (!last || !lo || (strcmp(lo, "reject") != 0 && strcmp(lo, "reject-always") != 0) ||
            json_object_get(last, "reason"))
            return cli_usage("run ", "--reason applies to the --reject or --reject-always "
                                     "before it; give that first");
        sbx_json_set(last, "reason", sbx_json_str(arg));
        return 1;
    }
    if (strcmp(opt, "approve-all") == 0) {
        rs->approve_all = 1;
        return 1;
    }
    if (!arg[0])
        return cli_usage("run ", "--%s needs a value", opt);
    sbx_json_append(rs->flags, json_pack("{s:s, s:s}", "opt", opt, "arg", arg));
    return 1;
}

static int add_always(struct cli_run_state *rs, const char *tool, int approved, const char *why)
{
    json_t *a;
    size_t i;
    json_array_foreach(rs->always, i, a)
    {
        if (strcmp(json_string_value(json_object_get(a, "tool")), tool) == 0)
            return cli_usage("run ", "tool '%s' is given two answers for every call", tool);
    }
    a = json_pack("{s:s, s:b, s:s}", "tool", tool, "approved", approved, "by", BY_FLAGS);
    if (!approved && why)
        sbx_json_set(a, "message", sbx_json_str(why));
    sbx_json_append(rs->always, a);
    return CLI_OK;
}

static int add_decision(struct cli_run_state *rs, const char *id, int approved, const char *why)
{
    const char *key = approved && strcmp(id, "all") == 0 ? "*" : id;
    if (json_object_get(rs->decisions, key))
        return cli_usage("run ", "call '%s' is decided twice (--approve / --reject)", id);
    json_t *d = json_pack("{s:b, s:s}", "approved", approved, "by", BY_FLAGS);
    if (!approved && why)
        sbx_json_set(d, "message", sbx_json_str(why));
    sbx_json_set(rs->decisions, key, d);
    return CLI_OK;
}

int cli_run_state_resolve(struct cli_run_state *rs)
{
    size_t i;
    json_t *f;
    int rc = CLI_OK;
    rs->decisions = json_object();
    rs->always = json_array();
    if (rs->approve_all)
        rc = add_always(rs, "*", 1, NULL);
    json_array_foreach(rs->flags, i, f)
    {
        const char *opt = json_string_value(json_object_get(f, "opt"));
        const char *arg = json_string_value(json_object_get(f, "arg"));
        const char *why = json_string_value(json_object_get(f, "reason"));
        if (rc != CLI_OK)
            break;
        if (strcmp(opt, "approve-always") == 0 || strcmp(opt, "reject-always") == 0)
            rc = add_always(rs, arg, opt[0] == 'a', why);
        else if (strcmp(opt, "approve") == 0 && !rs->resume)
            rc = add_always(rs, arg, 1, NULL);
        else if (strcmp(opt, "reject") == 0 && !rs->resume)
            rc = cli_usage("run ", "--reject CALL_ID answers a pending call of a saved run "
                                   "(--resume FILE); to reject every call of a tool, give "
                                   "--reject-always TOOL");
        else
            rc = add_decision(rs, arg, opt[0] == 'a', why);
    }
    return rc;
}

/* ${XDG_STATE_HOME:-~/.local/state}/sbx/SUB, made 0700 with its parents when make. */
static int state_dir(const char *sub, int make, char **out, struct sbx_error *err)
{
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char *dir;
    if (state && state[0] == '/')
        dir = sbx_xasprintf("%s/sbx%s%s", state, sub ? "/" : "", sub ? sub : "");
    else if (home && home[0] == '/')
        dir = sbx_xasprintf("%s/.local/state/sbx%s%s", home, sub ? "/" : "", sub ? sub : "");
    else
        return sbx_error_set(err, SBX_E_INVAL, 0, "no state directory: set XDG_STATE_HOME or HOME");
    for (char *p = dir + 1; make; p++) {
        char c = *p;
        if (c != '/' && c != '\0')
            continue;
        *p = '\0';
        int made = mkdir(dir, 0700);
        *p = c;
        if (made < 0 && errno != EEXIST) {
            int rc = sbx_error_errno(err, errno, "cannot make '%s'", dir);
            free(dir);
            return rc;
        }
        if (c == '\0')
            break;
    }
    *out = dir;
    return 0;
}

/* This user's run-state key: 32 random bytes in the state directory, made on first use, a
 * regular file of the user's that no one else may read or write. */
static int load_key(struct cli_run_state *rs, int make)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *dir = NULL;
    struct stat st;
    if (rs->key_state)
        return rs->key_state > 0 ? 0 : -1;
    int rc = state_dir(NULL, make, &dir, &err), fd = -1;
    if (rc == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        fd = dfd < 0 ? -1 : openat(dfd, "run-state.key", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && dfd >= 0 && make) {
            uint8_t k[32];
            if (sbx_random_bytes(k, sizeof(k), &err) == 0 &&
                sbx_fs_write(dfd, "run-state.key", (const char *)k, sizeof(k), 0600, SBX_FS_ATOMIC,
                             &err) == 0)
                fd = openat(dfd, "run-state.key", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            explicit_bzero(k, sizeof(k));
        }
        if (dfd >= 0)
            close(dfd);
    }
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        !(st.st_mode & 077) && st.st_size == (off_t)sizeof(rs->key) &&
        read(fd, rs->key, sizeof(rs->key)) == (ssize_t)sizeof(rs->key))
        rs->key_state = 1;
    else if (make || (fd < 0 && errno != ENOENT))
        rs->key_state = -1;
    if (fd >= 0)
        close(fd);
    free(dir);
    return rs->key_state > 0 ? 0 : -1;
}

int cli_run_state_prepare(struct cli_run_state *rs, struct sbx_error *err)
{
    struct stat st;
    if (rs->resume) {
        int rc = sbx_run_state_read_file(rs->path, &rs->doc, err);
        if (rc < 0)
            return rc;
        size_t dropped = 0;
        int keyed = load_key(rs, 0) == 0;
        json_t *saved =
                sbx_run_state_always(rs->doc, keyed ? rs->key : NULL, sizeof(rs->key), &dropped);
        if (dropped)
            fprintf(stderr,
                    "sbx: warning: '%s' carries %zu 'always' approval%s that this user's "
                    "run-state key does not seal: not used (give --approve-always TOOL again "
                    "to keep one)\n",
                    rs->path, dropped, dropped == 1 ? "" : "s");
        /* The command line's come first: an approval given now wins a saved rejection. */
        json_array_extend(rs->always, saved);
        json_decref(saved);
        return 0;
    }
    if (lstat(rs->path, &st) == 0)
        return sbx_error_set(err, SBX_E_EXISTS, 0,
                             "'%s' exists: continue it with --resume %s, or remove it", rs->path,
                             rs->path);
    if (errno != ENOENT)
        return sbx_error_errno(err, errno, "cannot use '%s' as the run state file", rs->path);
    return 0;
}

int cli_run_state_default(struct cli_run_state *rs, struct sbx_error *err)
{
    char *dir = NULL, rnd[9], when[32];
    int rc = state_dir("runs", 1, &dir, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx_random_hex(rnd, 4, err)) < 0) {
        free(dir);
        return rc;
    }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y%m%dT%H%M%SZ", &tm);
    rs->auto_path = sbx_xasprintf("%s/run-%s-%s.json", dir, when, rnd);
    rs->path = rs->auto_path;
    free(dir);
    return 0;
}

const json_t *cli_run_state_saved_options(const struct cli_run_state *rs)
{
    const json_t *cli = json_object_get(json_object_get(rs->doc, "meta"), "cli");
    return json_is_object(cli) ? cli : NULL;
}

void cli_run_state_set_secrets(struct cli_run_state *rs, const struct sbx_strv *secrets)
{
    for (size_t i = 0; secrets && i < secrets->n; i++)
        if (sbx_strv_find(&rs->secrets, secrets->v[i]) < 0)
            sbx_strv_push(&rs->secrets, secrets->v[i]);
}

int cli_run_state_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    struct cli_run_state *rs = data;
    /* The state is the runner's, borrowed for the call: a copy is made only to add a seal. */
    json_t *doc = NULL;
    int rc = 0;
    /* "always" approvals are sealed with this user's key, so that a resume can tell them from
     * ones written into the file by anyone else. */
    if (json_array_size(json_object_get(state, "always"))) {
        if (load_key(rs, 1) == 0) {
            if (!(doc = json_copy((json_t *)state)))
                SBX_BUG("out of memory copying a run state");
            rc = sbx_run_state_seal(doc, rs->key, sizeof(rs->key), err);
        } else if (rs->key_state < 0 && !rs->written) {
            fprintf(stderr, "sbx: warning: no run-state key: the run's 'always' approvals will "
                            "not be taken from its state\n");
        }
    }
    /* Appending: each checkpoint writes the items that are new and a small head
     * (docs/internals/runstate.md, "Checkpoints that append"). */
    if (rc == 0 && !rs->log)
        rc = sbx_run_state_log_open(rs->path, &rs->log, err);
    if (rc == 0)
        rc = sbx_run_state_log_write(rs->log, doc ? doc : state, &rs->secrets, err);
    json_decref(doc);
    if (rc < 0)
        sbx_error_prefix(err, "run state '%s'", rs->path);
    else
        rs->written++;
    return rc;
}

/* At most ARGS_SHOWN bytes of s, not cutting a UTF-8 character. */
static int shown_len(const char *s)
{
    size_t n = strlen(s);
    if (n <= ARGS_SHOWN)
        return (int)n;
    n = ARGS_SHOWN;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return (int)n;
}

/* " -a FILE" when the run has an agent file: a resume takes it from the command line only. */
static char *agent_part(const struct cli_run_state *rs)
{
    return rs->agent_file ? sbx_xasprintf(" -a %s", rs->agent_file) : sbx_xstrdup("");
}

void cli_run_state_report_waiting(const struct cli_run_state *rs, const struct sbx_run_result *r)
{
    const json_t *pending = sbx_run_result_interruptions(r), *p;
    size_t i;
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: waiting for approval (state saved to %s):\n",
                    rs->path);
    json_array_foreach(pending, i, p)
    {
        const json_t *a = json_object_get(p, "arguments");
        char *args = a ? sbx_json_dumps(a, SBX_JSON_COMPACT) : sbx_xstrdup("");
        int n = shown_len(args);
        const char *id = json_string_value(json_object_get(p, "call_id"));
        const char *tool = json_string_value(json_object_get(p, "tool"));
        /* Call ids and arguments come from the model: no escape sequences on a terminal. */
        cli_printf_safe(stderr, CLI_SAFE_TTY, "  %s  %s  %.*s%s\n", id ? id : "?",
                        tool ? tool : "?", n, args, args[n] ? " ..." : "");
        free(args);
    }
    char *ap = agent_part(rs);
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                    "continue with: sbx run --resume %s%s --approve <call_id>|all, or --reject "
                    "<call_id> [--reason TEXT]\n",
                    rs->path, ap);
    free(ap);
}

void cli_run_state_report_unfinished(const struct cli_run_state *rs)
{
    if (!rs->written)
        return;
    char *ap = agent_part(rs);
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                    "sbx: the run can be continued: sbx run --resume %s%s\n", rs->path, ap);
    free(ap);
}

void cli_run_state_completed(struct cli_run_state *rs)
{
    if (rs->auto_path && rs->written)
        (void)unlink(rs->auto_path);
}
