/* `sbx trace show`: the reader of a JSONL trace file, which it treats as hostile (every line is
 * checked and bounded) and prints as a tree. See docs/internals/tracing.md. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run-trace.h"
#include "sbx/buf.h"
#include "sbx/json.h"
#include "sbx/term.h"
#include "sbx/time.h"

/* Bounds: a line is one span; past these the file is not a trace sbx wrote. */
#define SHOW_LINE_MAX   ((size_t)1 << 20)
#define SHOW_SPANS_MAX  200000
#define SHOW_DEPTH_MAX  64
#define SHOW_ERRORS_MAX 20

/* Where the tree and the complaints go (cli_trace_show_stream sets them). */
static FILE *show_out, *show_err;

struct show_span {
    json_t *o;
    const char *id, *parent;
    int64_t start, end;
    size_t first_child, next_sibling; /* indexes + 1; 0: none */
    int shown;
};

static int is_hex(const char *s, size_t n)
{
    if (!s || strlen(s) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* Why o is not a span sbx wrote, or NULL. */
static const char *check_span(const json_t *o)
{
    if (!json_is_object(o))
        return "not a JSON object";
    if (!is_hex(json_string_value(json_object_get(o, "trace_id")), 32))
        return "\"trace_id\" is not 32 lowercase hex digits";
    if (!is_hex(json_string_value(json_object_get(o, "span_id")), 16))
        return "\"span_id\" is not 16 lowercase hex digits";
    const json_t *p = json_object_get(o, "parent_span_id");
    if (!json_is_null(p) && !is_hex(json_string_value(p), 16))
        return "\"parent_span_id\" is neither null nor 16 lowercase hex digits";
    if (!json_is_string(json_object_get(o, "name")))
        return "\"name\" is not a string";
    const json_t *s = json_object_get(o, "start_unix_nano"),
                 *e = json_object_get(o, "end_unix_nano");
    if (!json_is_integer(s) || !json_is_integer(e))
        return "\"start_unix_nano\" and \"end_unix_nano\" must be integers";
    /* Unix times are not negative: with both at least 0 their difference cannot overflow. */
    if (json_integer_value(s) < 0)
        return "\"start_unix_nano\" is negative";
    if (json_integer_value(e) < json_integer_value(s))
        return "the span ends before it starts";
    const json_t *a = json_object_get(o, "attributes");
    if (a && !json_is_object(a))
        return "\"attributes\" is not an object";
    static const char *const counts[] = {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                                         "gen_ai.usage.cache_read.input_tokens"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(counts); i++) {
        const json_t *v = json_object_get(a, counts[i]);
        if (v && (!json_is_integer(v) || json_integer_value(v) < 0))
            return "a token count is not an integer of at least 0";
    }
    return NULL;
}

/* a + b for counts of at least 0, held at INT64_MAX instead of overflowing. */
static int64_t sum_capped(int64_t a, int64_t b, int *capped)
{
    if (b > INT64_MAX - a) {
        *capped = 1;
        return INT64_MAX;
    }
    return a + b;
}

static void put_safe(const char *s)
{
    char *e = sbx_term_escape(s, strlen(s), 0, NULL);
    /* One span is one line. */
    for (char *p = e; *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    fputs(e, show_out);
    free(e);
}

static void put_duration(int64_t ns)
{
    if (ns < 1000000)
        fprintf(show_out, "%.3fms", (double)ns / 1e6);
    else if (ns < 1000000000)
        fprintf(show_out, "%.1fms", (double)ns / 1e6);
    else
        fprintf(show_out, "%.2fs", (double)ns / 1e9);
}

static const char *attr_str(const json_t *a, const char *k)
{
    return json_string_value(json_object_get(a, k));
}

static void put_attr_int(const json_t *a, const char *k, const char *label)
{
    const json_t *v = json_object_get(a, k);
    if (json_is_integer(v))
        fprintf(show_out, " %s %lld", label, (long long)json_integer_value(v));
}

/* The run span's trace identity (sbx run --workflow, --group-id, --trace-metadata):
 * "workflow 'W' group G k=v ...". */
static void put_run_identity(const json_t *a)
{
    const char *k, *wf = attr_str(a, SBX_ATTR_WORKFLOW), *group = attr_str(a, SBX_ATTR_GROUP_ID);
    size_t plen = strlen(SBX_ATTR_METADATA);
    json_t *v;
    if (wf) {
        fputs(" workflow '", show_out);
        put_safe(wf);
        fputc('\'', show_out);
    }
    if (group) {
        fputs(" group ", show_out);
        put_safe(group);
    }
    json_object_foreach((json_t *)a, k, v)
    {
        if (strncmp(k, SBX_ATTR_METADATA, plen) != 0 || !json_is_string(v))
            continue;
        fputc(' ', show_out);
        put_safe(k + plen);
        fputc('=', show_out);
        put_safe(json_string_value(v));
    }
}

static void put_span_line(const struct show_span *s)
{
    const json_t *a = json_object_get(s->o, "attributes");
    const char *name = json_string_value(json_object_get(s->o, "name"));
    put_safe(name);
    static const char *const what[] = {"gen_ai.agent.name", "gen_ai.request.model",
                                       "gen_ai.tool.name",  "sbx.handoff.to",
                                       "sbx.sandbox.path",  "sbx.sandbox.id"};
    size_t nl = strlen(name);
    /* A turn is its agent's: the agent's line above says whose. */
    for (size_t i = strcmp(name, "turn") == 0 ? SBX_ARRAY_LEN(what) : 0; i < SBX_ARRAY_LEN(what);
         i++) {
        const char *v = attr_str(a, what[i]);
        size_t vl = v ? strlen(v) : 0;
        /* "chat gpt-4.1", "execute_tool exec_command": the span's name already says it. */
        if (v && v[0] && vl < nl && strcmp(name + nl - vl, v) == 0 && name[nl - vl - 1] == ' ')
            break;
        if (v && v[0]) {
            fputs(i == 3 ? " -> " : " ", show_out);
            put_safe(v);
            break;
        }
    }
    if (strcmp(name, "run") == 0)
        put_run_identity(a);
    put_attr_int(a, "sbx.turn", "#");
    fputs("  ", show_out);
    put_duration(s->end - s->start);
    put_attr_int(a, "gen_ai.usage.input_tokens", "in");
    put_attr_int(a, "gen_ai.usage.output_tokens", "out");
    put_attr_int(a, "gen_ai.usage.cache_read.input_tokens", "cached");
    const json_t *fb = json_object_get(a, "sbx.model.first_byte_ns");
    if (json_is_integer(fb)) {
        fputs(" first byte ", show_out);
        put_duration(json_integer_value(fb));
    }
    put_attr_int(a, "sbx.model.retries", "retries");
    put_attr_int(a, "sbx.tool.exit_code", "exit");
    put_attr_int(a, "sbx.sandbox.exit_code", "exit");
    const char *st = json_string_value(json_object_get(s->o, "status"));
    if (st && strcmp(st, "error") == 0) {
        fputs("  ERROR", show_out);
        const char *m = json_string_value(json_object_get(s->o, "status_message"));
        if (m) {
            fputs(": ", show_out);
            put_safe(m);
        }
    }
    fputc('\n', show_out);
}

static void show_tree(struct show_span *v, size_t i, struct sbx_buf *prefix, int last, int depth)
{
    struct show_span *s = &v[i];
    s->shown = 1;
    fputs(prefix->data, show_out);
    if (depth)
        fputs(last ? "`- " : "|- ", show_out);
    put_span_line(s);
    if (depth >= SHOW_DEPTH_MAX) {
        if (s->first_child)
            fprintf(show_out, "%s   ... (deeper spans not shown)\n", prefix->data);
        return;
    }
    size_t keep = prefix->len;
    if (depth && sbx_buf_adds(prefix, last ? "   " : "|  ", NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    for (size_t c = s->first_child; c; c = v[c - 1].next_sibling)
        if (!v[c - 1].shown)
            show_tree(v, c - 1, prefix, v[c - 1].next_sibling == 0, depth + 1);
    sbx_buf_setlen(prefix, keep);
}

static int by_start(const void *a, const void *b)
{
    const struct show_span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

int cli_trace_show_stream(FILE *f, const char *path, FILE *to, FILE *errf)
{
    show_out = to;
    show_err = errf;
    char *line = sbx_xmalloc(SHOW_LINE_MAX + 2);
    struct show_span *v = NULL;
    size_t n = 0, cap = 0, lineno = 0, bad = 0;
    int too_many = 0;
    while (fgets(line, (int)SHOW_LINE_MAX + 2, f)) {
        lineno++;
        size_t len = strlen(line);
        const char *why = NULL;
        if (len > SHOW_LINE_MAX) {
            why = "line longer than 1 MiB";
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n')
                ;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (!why && !len)
            continue;
        json_t *o = NULL;
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_json_limits lim = {.max_bytes = SHOW_LINE_MAX, .max_depth = 16};
        if (!why && sbx_json_parse(line, len, &lim, &o, &err) < 0)
            why = err.msg;
        if (!why)
            why = check_span(o);
        if (!why && n >= SHOW_SPANS_MAX) {
            too_many = 1;
            json_decref(o);
            break;
        }
        if (why) {
            if (++bad <= SHOW_ERRORS_MAX) {
                char *e = sbx_term_escape(why, strlen(why), 0, NULL);
                char *p = sbx_term_escape(path, strlen(path), 0, NULL);
                fprintf(show_err, "sbx: trace file '%s' line %zu: %s\n", p, lineno, e);
                free(e);
                free(p);
            }
            json_decref(o);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            v = sbx_xrealloc(v, cap * sizeof(*v));
        }
        v[n++] = (struct show_span){
                .o = o,
                .start = json_integer_value(json_object_get(o, "start_unix_nano")),
                .end = json_integer_value(json_object_get(o, "end_unix_nano"))};
    }
    int read_failed = ferror(f);
    free(line);
    if (bad > SHOW_ERRORS_MAX)
        fprintf(show_err, "sbx: trace file: %zu more bad lines not shown\n", bad - SHOW_ERRORS_MAX);
    if (too_many)
        fprintf(show_err, "sbx: trace file: more than %d spans; the rest is not shown\n",
                SHOW_SPANS_MAX);
    if (read_failed)
        fprintf(show_err, "sbx: cannot read trace file: %s\n", strerror(errno));

    /* Children in start order: sort, then link each span to its parent (found by id). */
    if (n)
        qsort(v, n, sizeof(*v), by_start);
    json_t *index = json_object();
    for (size_t i = 0; i < n; i++) {
        v[i].id = json_string_value(json_object_get(v[i].o, "span_id"));
        v[i].parent = json_string_value(json_object_get(v[i].o, "parent_span_id"));
        if (json_object_get(index, v[i].id))
            fprintf(show_err, "sbx: trace file: span id %s appears more than once\n", v[i].id);
        else
            json_object_set_new(index, v[i].id, json_integer((json_int_t)i));
    }
    size_t *last_child = sbx_xcalloc(n ? n : 1, sizeof(*last_child));
    for (size_t i = 0; i < n; i++) {
        const json_t *pi = v[i].parent ? json_object_get(index, v[i].parent) : NULL;
        if (!pi || (size_t)json_integer_value(pi) == i)
            continue;
        size_t p = (size_t)json_integer_value(pi);
        if (last_child[p])
            v[last_child[p] - 1].next_sibling = i + 1;
        else
            v[p].first_child = i + 1;
        last_child[p] = i + 1;
    }
    int64_t in = 0, out = 0;
    int in_capped = 0, out_capped = 0;
    struct sbx_buf prefix;
    sbx_buf_init(&prefix, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++) {
        const json_t *pi = v[i].parent ? json_object_get(index, v[i].parent) : NULL;
        if (!pi || (size_t)json_integer_value(pi) == i)
            show_tree(v, i, &prefix, 1, 0);
        /* Model calls only: the turn and run spans repeat their tokens as sums. */
        const json_t *a = json_object_get(v[i].o, "attributes");
        const char *op = attr_str(a, "gen_ai.operation.name");
        if (!op || strcmp(op, "chat") != 0)
            continue;
        in = sum_capped(in, json_integer_value(json_object_get(a, "gen_ai.usage.input_tokens")),
                        &in_capped);
        out = sum_capped(out, json_integer_value(json_object_get(a, "gen_ai.usage.output_tokens")),
                         &out_capped);
    }
    size_t hidden = 0;
    for (size_t i = 0; i < n; i++)
        hidden += !v[i].shown;
    fprintf(show_out, "%zu spans, %s%lld input tokens, %s%lld output tokens\n", n,
            in_capped ? "at least " : "", (long long)in, out_capped ? "at least " : "",
            (long long)out);
    if (hidden)
        fprintf(show_err, "sbx: trace file: %zu spans not shown: their parent links form a cycle\n",
                hidden);
    sbx_buf_release(&prefix);
    free(last_child);
    json_decref(index);
    for (size_t i = 0; i < n; i++)
        json_decref(v[i].o);
    free(v);
    return bad || too_many || read_failed || hidden ? CLI_FAIL : CLI_OK;
}

/* ---- --follow ------------------------------------------------------------------------------ */

/* What --follow reads at the start to show it as a tree. */
#define FOLLOW_START_MAX (256 << 20)

struct follow {
    const char *path;
    json_t *seen; /* span ids in the file so far */
    size_t lineno, bad;
    int ended; /* the run's root span arrived */
};

/* One complete line of the file (not NUL-terminated: len bytes). print: show it as a new span. */
static void follow_line(struct follow *fw, const char *line, size_t len, int print)
{
    fw->lineno++;
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (!len)
        return;
    json_t *o = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_json_limits lim = {.max_bytes = SHOW_LINE_MAX, .max_depth = 16};
    const char *why = len > SHOW_LINE_MAX                             ? "line longer than 1 MiB"
                      : sbx_json_parse(line, len, &lim, &o, &err) < 0 ? err.msg
                                                                      : check_span(o);
    if (why) {
        if (print && ++fw->bad <= SHOW_ERRORS_MAX) {
            char *e = sbx_term_escape(why, strlen(why), 0, NULL);
            char *p = sbx_term_escape(fw->path, strlen(fw->path), 0, NULL);
            fprintf(show_err, "sbx: trace file '%s' line %zu: %s\n", p, fw->lineno, e);
            free(e);
            free(p);
        }
        json_decref(o);
        return;
    }
    const char *id = json_string_value(json_object_get(o, "span_id"));
    const char *parent = json_string_value(json_object_get(o, "parent_span_id"));
    if (print && json_object_size(fw->seen) < SHOW_SPANS_MAX) {
        struct show_span sp = {.o = o,
                               .start = json_integer_value(json_object_get(o, "start_unix_nano")),
                               .end = json_integer_value(json_object_get(o, "end_unix_nano"))};
        fputs("+ ", show_out);
        put_span_line(&sp);
    }
    /* The run's root span is written last: the run is over (with one already in the file,
     * there is nothing to wait for). */
    fw->ended |= strcmp(json_string_value(json_object_get(o, "name")), "run") == 0 &&
                 (!parent || !json_object_get(fw->seen, parent));
    if (json_object_size(fw->seen) < SHOW_SPANS_MAX)
        json_object_set_new(fw->seen, id, json_true());
    json_decref(o);
}

/* Read what fd has past *off into pend; each complete line goes to follow_line (and, with
 * keep, is added to it). A line that grows past the bound without ending is dropped as bad.
 * 1: read something, 0: nothing new, -1: an error (reported). */
static int follow_read(struct follow *fw, int fd, struct sbx_buf *pend, off_t *off, int print,
                       struct sbx_buf *keep)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size < *off) {
        fprintf(show_err, "sbx: trace file: %s\n",
                st.st_size < *off ? "it shrank while followed" : strerror(errno));
        return -1;
    }
    int got = 0;
    char chunk[65536];
    ssize_t n;
    while ((n = pread(fd, chunk, sizeof(chunk), *off)) > 0) {
        *off += n;
        got = 1;
        for (ssize_t i = 0; i < n; i++) {
            if (chunk[i] != '\n') {
                if (pend->len <= SHOW_LINE_MAX && sbx_buf_add(pend, chunk + i, 1, NULL) < 0)
                    SBX_BUG("unbounded buffer refused data");
                continue;
            }
            follow_line(fw, pend->data, pend->len, print);
            if (keep && (sbx_buf_add(keep, pend->data, pend->len, NULL) < 0 ||
                         sbx_buf_add(keep, "\n", 1, NULL) < 0)) {
                fprintf(show_err, "sbx: trace file: over %d MiB, too big to follow\n",
                        FOLLOW_START_MAX >> 20);
                return -1;
            }
            sbx_buf_setlen(pend, 0);
        }
    }
    if (n < 0) {
        fprintf(show_err, "sbx: cannot read trace file: %s\n", strerror(errno));
        return -1;
    }
    return got;
}

int cli_trace_follow(const char *path, FILE *to, FILE *errf, int poll_ms)
{
    show_out = to;
    show_err = errf;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(errf, "sbx: cannot open trace file '%s': %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    struct follow fw = {.path = path, .seen = json_object()};
    struct sbx_buf pend, start;
    sbx_buf_init(&pend, SBX_BUF_NOLIMIT);
    sbx_buf_init(&start, FOLLOW_START_MAX);
    off_t off = 0;
    /* The complete lines there now, shown as a tree as sbx trace show shows them; a partial
     * last line waits in pend for the rest. */
    int r = follow_read(&fw, fd, &pend, &off, 0, &start);
    if (r >= 0 && start.len) {
        FILE *f = fmemopen(start.data, start.len, "r");
        if (f) {
            (void)cli_trace_show_stream(f, path, to, errf);
            fclose(f);
        }
    }
    sbx_buf_release(&start);
    fflush(to);
    while (r >= 0 && !fw.ended) {
        sbx_sleep_ms(poll_ms);
        if ((r = follow_read(&fw, fd, &pend, &off, 1, NULL)) > 0)
            fflush(to);
    }
    sbx_buf_release(&pend);
    json_decref(fw.seen);
    close(fd);
    return r < 0 || fw.bad ? CLI_FAIL : CLI_OK;
}
