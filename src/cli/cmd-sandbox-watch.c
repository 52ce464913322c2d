/* Seeing a sandbox: sbx sandbox stats (CPU, memory, processes and disk, once or refreshed),
 * logs (the sandbox's own log, followed with -f) and inspect (what ps --json and the session
 * state know, as one JSON document), with Docker's habits. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/session.h"
#include "sbx/strv.h"

#define VERB               "sandbox "
#define STATS_INTERVAL_MS  1000
#define STATS_SANDBOXES    256
#define LOG_TAIL_MAX       ((size_t)64 << 20) /* bytes read to find the last lines */
#define LOG_FOLLOW_POLL_MS 200

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A size as docker prints it: 12.5MiB. */
static void human(uint64_t n, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < SBX_ARRAY_LEN(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%lluB", (unsigned long long)n);
    else
        snprintf(buf, size, "%.1f%s", v, units[u]);
}

/* ---------------------------------------------------------------------------------------------
 * stats */

struct watched {
    struct sbx_client *c;
    struct sbx_session *s;
    char *name; /* from its record, or NULL */
    struct sbx_session_stats prev, cur;
    int64_t prev_ns, cur_ns;
    int gone;
};

/* A new reading of w; a sandbox gone since is marked so (a failure to measure is an error). */
static int sample(struct watched *w, struct sbx_error *err)
{
    struct sbx_session_stats st;
    struct sbx_error e = SBX_ERROR_INIT;
    if (w->gone)
        return 0;
    int rc = sbx_session_stats(w->s, &st, &e);
    if (rc == -SBX_E_SANDBOX || rc == -SBX_E_NOTFOUND) {
        w->gone = 1;
        return 0;
    }
    if (rc < 0)
        return sbx_error_copy(err, &e);
    w->prev = w->cur;
    w->prev_ns = w->cur_ns;
    w->cur = st;
    w->cur_ns = now_ns();
    return 0;
}

/* CPU % since the previous reading (100 is one CPU busy), or -1 when unknown. */
static double cpu_percent(const struct watched *w)
{
    if (!w->prev_ns || w->cur.cpu_ns == SBX_STAT_UNKNOWN || w->prev.cpu_ns == SBX_STAT_UNKNOWN ||
        w->cur_ns <= w->prev_ns)
        return -1;
    /* Processes that ended take their time with them: never below 0. */
    if (w->cur.cpu_ns < w->prev.cpu_ns)
        return 0;
    return 100.0 * (double)(w->cur.cpu_ns - w->prev.cpu_ns) / (double)(w->cur_ns - w->prev_ns);
}

static json_t *known(uint64_t v)
{
    return v == SBX_STAT_UNKNOWN ? json_null() : json_integer((json_int_t)v);
}

static json_t *stats_json(const struct watched *w)
{
    const struct sbx_session_stats *st = &w->cur;
    double cpu = cpu_percent(w);
    json_t *o = json_pack("{s:s}", "id", sbx_session_id(w->s));
    sbx_json_set(o, "name", w->name ? sbx_json_str(w->name) : json_null());
    sbx_json_set(o, "provider", sbx_json_str(sbx_session_provider(w->s)));
    sbx_json_set(o, "cpu_percent", cpu < 0 ? json_null() : json_real(cpu));
    sbx_json_set(o, "cpu_ns", known(st->cpu_ns));
    sbx_json_set(o, "memory", known(st->memory));
    sbx_json_set(o, "memory_limit", json_integer((json_int_t)st->memory_limit));
    sbx_json_set(o, "pids", known(st->pids));
    sbx_json_set(o, "pids_limit", json_integer((json_int_t)st->pids_limit));
    sbx_json_set(o, "disk", known(st->disk));
    sbx_json_set(o, "disk_limit", json_integer((json_int_t)st->disk_limit));
    sbx_json_set(o, "disk_partial", json_boolean(st->disk_partial));
    return o;
}

static void stats_row(const struct watched *w)
{
    const struct sbx_session_stats *st = &w->cur;
    char cpu[16] = "--", mem[80] = "--", memp[16] = "--", pids[48] = "--", disk[80] = "--";
    char a[32], b[32];
    double c = cpu_percent(w);
    if (c >= 0)
        snprintf(cpu, sizeof(cpu), "%.2f%%", c);
    if (st->memory != SBX_STAT_UNKNOWN) {
        human(st->memory, a, sizeof(a));
        if (st->memory_limit)
            human(st->memory_limit, b, sizeof(b));
        snprintf(mem, sizeof(mem), "%s / %s", a, st->memory_limit ? b : "none");
        if (st->memory_limit)
            snprintf(memp, sizeof(memp), "%.2f%%",
                     100.0 * (double)st->memory / (double)st->memory_limit);
    }
    if (st->pids != SBX_STAT_UNKNOWN && st->pids_limit)
        snprintf(pids, sizeof(pids), "%llu / %llu", (unsigned long long)st->pids,
                 (unsigned long long)st->pids_limit);
    else if (st->pids != SBX_STAT_UNKNOWN)
        snprintf(pids, sizeof(pids), "%llu", (unsigned long long)st->pids);
    if (st->disk != SBX_STAT_UNKNOWN) {
        human(st->disk, a, sizeof(a));
        if (st->disk_limit)
            human(st->disk_limit, b, sizeof(b));
        snprintf(disk, sizeof(disk), "%s%s / %s", st->disk_partial ? ">" : "", a,
                 st->disk_limit ? b : "none");
    }
    cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%-16s  %-12.12s  %8s  %-22s  %7s  %-12s  %s\n",
                    sbx_session_id(w->s), w->name ? w->name : "-", cpu, mem, memp, pids, disk);
}

/* Returns -1 when stdout is gone (its reader left). */
static int stats_print(const struct watched *w, size_t n, int json, int clear)
{
    if (json) {
        json_t *all = json_array();
        for (size_t i = 0; i < n; i++)
            if (!w[i].gone)
                sbx_json_append(all, stats_json(&w[i]));
        char *text = sbx_json_dumps(all, SBX_JSON_COMPACT);
        cli_put_json(stdout, text);
        putchar('\n');
        free(text);
        json_decref(all);
    } else {
        if (clear)
            fputs("\033[H\033[J", stdout);
        printf("%-16s  %-12s  %8s  %-22s  %7s  %-12s  %s\n", "ID", "NAME", "CPU %",
               "MEM USAGE / LIMIT", "MEM %", "PIDS", "DISK / LIMIT");
        for (size_t i = 0; i < n; i++)
            if (!w[i].gone)
                stats_row(&w[i]);
    }
    return fflush(stdout) == EOF || ferror(stdout) ? -1 : 0;
}

/* The name of sandbox id in listing, or NULL (caller frees). */
static char *name_in(const json_t *listing, const char *id)
{
    size_t i;
    json_t *v;
    json_array_foreach(listing, i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "id")), id) == 0 &&
            json_string_value(json_object_get(v, "name")))
            return sbx_xstrdup(json_string_value(json_object_get(v, "name")));
    }
    return NULL;
}

/* Attach to each of ids (none: every live sandbox ps lists) into w. */
static int stats_attach(struct sbx_strv *ids, struct watched *w, size_t *n, struct sbx_error *err)
{
    json_t *listing = NULL, *v;
    size_t i;
    int rc = cli_sandbox_list(0, &listing, err);
    if (rc == 0 && ids->n == 0)
        json_array_foreach(listing, i, v)
        {
            const char *st = json_string_value(json_object_get(v, "status"));
            if (!st || strcmp(st, "live") == 0)
                sbx_strv_push(ids, json_string_value(json_object_get(v, "id")));
        }
    if (rc == 0 && ids->n > STATS_SANDBOXES)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "stats watches at most %d sandboxes",
                           STATS_SANDBOXES);
    for (i = 0; rc == 0 && i < ids->n; i++) {
        rc = cli_sandbox_attach(ids->v[i], &w[*n].c, &w[*n].s, err);
        if (rc < 0) {
            sbx_client_free(w[*n].c);
            break;
        }
        w[*n].name = name_in(listing, sbx_session_id(w[*n].s));
        w[*n].cur.cpu_ns = SBX_STAT_UNKNOWN;
        (*n)++;
    }
    json_decref(listing);
    return rc;
}

/* 1 when stdout went away, else 0 or -code. */
static int stats_loop(struct watched *w, size_t n, int stream, int json, struct sbx_error *err)
{
    int rc = 0, clear = !json && isatty(1);
    /* Two readings a second apart before the first line: CPU % is a rate. */
    for (int round = 0; rc == 0; round++) {
        size_t live = 0;
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = sample(&w[i], err);
        for (size_t i = 0; i < n; i++)
            live += !w[i].gone;
        if (rc < 0 || (n && !live))
            break;
        if (round > 0 && stats_print(w, n, json, clear) < 0)
            return 1;
        if (round > 0 && (!stream || !n))
            break;
        poll(NULL, 0, STATS_INTERVAL_MS);
    }
    return rc;
}

int cmd_sandbox_stats(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_strv ids;
    struct watched *w = sbx_xcalloc(STATS_SANDBOXES, sizeof(*w));
    int stream = 1, json = 0, rc = 0;
    size_t n = 0;
    sbx_strv_init(&ids);
    for (int i = 1; i < argc && rc == 0; i++) {
        if (strcmp(argv[i], "--no-stream") == 0)
            stream = 0;
        else if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "-w") == 0)
            stream = 1;
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (argv[i][0] != '-')
            sbx_strv_push(&ids, argv[i]);
        else if ((rc = cli_locator_arg(argc, argv, &i, VERB "stats ")) == 1)
            rc = 0;
        else
            rc = rc ? rc : cli_unknown_option(VERB "stats ", argv[i]);
    }
    signal(SIGPIPE, SIG_IGN);
    if (rc == 0)
        rc = stats_attach(&ids, w, &n, &err);
    if (rc == 0 && (rc = stats_loop(w, n, stream, json, &err)) == 1)
        rc = 128 + SIGPIPE; /* as a command whose reader left */
    for (size_t i = 0; i < n; i++) {
        sbx_session_free(w[i].s);
        sbx_client_free(w[i].c);
        free(w[i].name);
    }
    free(w);
    sbx_strv_release(&ids);
    if (rc > 0)
        return rc;
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * logs */

/* The last lines lines of what fd holds from its position, printed; fd is left at its end. */
static int print_tail(int fd, long lines, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, LOG_TAIL_MAX);
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)LOG_TAIL_MAX ? size - (off_t)LOG_TAIL_MAX : 0;
    int rc = lseek(fd, from, SEEK_SET) < 0 ? sbx_error_errno(err, errno, "cannot read the log")
                                           : sbx_fd_read_all(fd, LOG_TAIL_MAX, &b, err);
    if (rc == 0) {
        size_t start = b.len;
        long seen = 0;
        /* A last line without its newline counts as a line. */
        if (start && b.data[start - 1] == '\n')
            start--;
        while (start > 0 && seen < lines) {
            if (b.data[start - 1] == '\n' && ++seen == lines)
                break;
            start--;
        }
        cli_put_safe(stdout, CLI_SAFE_TTY, b.data + start, b.len - start);
    }
    sbx_buf_release(&b);
    return rc;
}

/* Copy what fd holds to stdout; with follow, wait for more until the log is unlinked (the
 * sandbox was removed). *last: the last byte printed. */
static int copy_log(int fd, int follow, char *last, struct sbx_error *err)
{
    char buf[65536];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sbx_error_errno(err, errno, "cannot read the log");
        if (r > 0) {
            cli_put_safe(stdout, CLI_SAFE_TTY, buf, (size_t)r);
            *last = buf[r - 1];
            if (fflush(stdout) == EOF)
                return sbx_error_errno(err, errno, "cannot write the log");
            continue;
        }
        struct stat st;
        if (!follow || (fstat(fd, &st) == 0 && st.st_nlink == 0))
            return 0;
        poll(NULL, 0, LOG_FOLLOW_POLL_MS);
    }
}

int cmd_sandbox_logs(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    const char *id = NULL;
    int follow = 0, fd = -1, rc = 0;
    long tail = -1;
    for (int i = 1; i < argc && rc == 0; i++) {
        char *end;
        if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0) {
            follow = 1;
        } else if ((strcmp(argv[i], "--tail") == 0 || strcmp(argv[i], "-n") == 0) && i + 1 < argc) {
            tail = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || tail < 0)
                rc = cli_usage(VERB "logs ", "logs: bad --tail '%s'", argv[i]);
        } else if ((rc = cli_locator_arg(argc, argv, &i, VERB "logs ")) == 1) {
            rc = 0;
        } else if (rc == 0 && argv[i][0] == '-') {
            rc = cli_unknown_option(VERB "logs ", argv[i]);
        } else if (rc == 0 && id) {
            rc = cli_usage(VERB "logs ", "logs: unexpected argument '%s'", argv[i]);
        } else if (rc == 0) {
            id = argv[i];
        }
    }
    if (rc == 0 && !id)
        rc = cli_usage(VERB "logs ", "logs: missing sandbox id");
    if (rc != 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    char last = '\n';
    rc = cli_sandbox_attach(id, &c, &s, &err);
    if (rc == 0)
        rc = sbx_session_log_open(s, &fd, &err);
    /* The handle is not needed to read on: the sandbox may go while we follow. */
    sbx_session_free(s);
    if (rc == 0 && tail >= 0)
        rc = print_tail(fd, tail, &err);
    if (rc == 0)
        rc = copy_log(fd, follow, &last, &err);
    /* The log's last line may not have ended yet: the terminal's prompt goes on a line of its
     * own. */
    if (rc == 0 && last != '\n')
        putchar('\n');
    sbx_fd_close(&fd);
    sbx_client_free(c);
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * inspect */

static int state_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    return sbx_client_state(c, id, 0, data, err);
}

/* What ps --all --json says of the sandbox of state, with the state's fields it lacks, its
 * record and its state whole. Caller owns. */
static json_t *inspect_one(const json_t *listing, const json_t *state)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    json_t *doc = NULL, *v, *rec = NULL;
    size_t i;
    json_array_foreach(listing, i, v)
    {
        if (!doc && strcmp(json_string_value(json_object_get(v, "id")), id) == 0)
            doc = json_deep_copy(v);
    }
    if (!doc)
        doc = json_object();
    json_object_update_missing(doc, (json_t *)state);
    if (!json_object_get(doc, "status"))
        sbx_json_set(doc, "status", sbx_json_str("live"));
    sbx_json_set(doc, "session_state", json_deep_copy(state));
    if (sbx_sandbox_record_read(id, &rec, NULL) == 0 &&
        strcmp(json_string_value(json_object_get(rec, "id")), id) == 0)
        sbx_json_set(doc, "record", rec);
    else
        json_decref(rec);
    return doc;
}

int cmd_sandbox_inspect(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_strv ids;
    json_t *listing = NULL, *out = json_array();
    int rc = 0, status = CLI_OK;
    sbx_strv_init(&ids);
    for (int i = 1; i < argc && rc == 0; i++) {
        if (argv[i][0] != '-')
            sbx_strv_push(&ids, argv[i]);
        else if ((rc = cli_locator_arg(argc, argv, &i, VERB "inspect ")) == 1)
            rc = 0;
        else
            rc = rc ? rc : cli_unknown_option(VERB "inspect ", argv[i]);
    }
    if (rc == 0 && !ids.n)
        rc = cli_usage(VERB "inspect ", "inspect: missing sandbox id");
    if (rc == 0 && cli_sandbox_list(1, &listing, &err) < 0)
        status = cli_fail(&err);
    for (size_t i = 0; rc == 0 && listing && i < ids.n; i++) {
        struct sbx_client *c = NULL;
        json_t *state = NULL;
        if (cli_sandbox_by_id(ids.v[i], state_op, &state, &c, &err) < 0)
            status = cli_fail(&err);
        else
            sbx_json_append(out, inspect_one(listing, state));
        json_decref(state);
        sbx_client_free(c);
    }
    if (rc == 0 && json_array_size(out)) {
        char *text = sbx_json_dumps(out, SBX_JSON_PRETTY);
        cli_put_json(stdout, text);
        putchar('\n');
        free(text);
    }
    json_decref(out);
    json_decref(listing);
    sbx_strv_release(&ids);
    return rc ? rc : status;
}
