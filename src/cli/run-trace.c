/* `sbx run` tracing options and `sbx trace show`. See docs/internals/tracing.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run-trace.h"
#include "sbx/json.h"
#include "sbx/term.h"

/* `sbx trace show` bounds: a line is one span; past these the file is not a trace sbx wrote. */
#define SHOW_LINE_MAX   ((size_t)1 << 20)
#define SHOW_SPANS_MAX  200000
#define SHOW_DEPTH_MAX  64
#define SHOW_ERRORS_MAX 20

int cli_trace_option(struct cli_trace *ct, const char *name, const char *arg)
{
    if (strcmp(name, "trace") == 0)
        ct->file = arg;
    else if (strcmp(name, "trace-otlp") == 0)
        ct->otlp = arg, ct->otlp_is_base = 1;
    else if (strcmp(name, "trace-parent") == 0)
        ct->parent = arg;
    else if (strcmp(name, "trace-content") == 0)
        ct->content = 1;
    else if (strcmp(name, "trace-openai") == 0)
        ct->openai = 1;
    else
        return 0;
    return 1;
}

static char *traces_url(const char *base)
{
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    if (n >= 10 && strncmp(base + n - 10, "/v1/traces", 10) == 0)
        return sbx_xstrndup(base, n);
    return sbx_xasprintf("%.*s/v1/traces", (int)n, base);
}

int cli_trace_start(struct cli_trace *ct, const struct sbx_strv *pass, struct sbx_error *err)
{
    const char *env_otlp = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (!ct->otlp && env_otlp && env_otlp[0])
        ct->otlp = env_otlp;
    const char *env_tp = getenv("TRACEPARENT");
    const char *tp_from = "--trace-parent";
    if (!ct->parent && env_tp && env_tp[0]) {
        ct->parent = env_tp;
        tp_from = "TRACEPARENT";
    }
    if (!ct->file && !ct->otlp && !ct->openai) {
        if (ct->content || ct->parent) {
            uint8_t tid[SBX_TRACE_ID_LEN], pid[SBX_SPAN_ID_LEN];
            /* A bad value is an error even when nothing is exported: it was meant. */
            if (ct->parent && sbx_traceparent_parse(ct->parent, tid, pid, NULL, err) < 0) {
                sbx_error_prefix(err, "%s", tp_from);
                return -err->code;
            }
        }
        if (ct->content)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "--trace-content needs --trace FILE, --trace-otlp URL or "
                                 "--trace-openai");
        return 0;
    }
    /* The values of the run's secrets (as the run state scrubs them): the model's key and the
     * credentials --pass-secret lets into sandboxes. */
    struct sbx_strv values;
    sbx_strv_init(&values);
    const char *key = getenv("OPENAI_API_KEY");
    if (key && key[0])
        sbx_strv_push(&values, key);
    for (size_t i = 0; pass && i < pass->n; i++) {
        const char *v = getenv(pass->v[i]);
        if (v && v[0])
            sbx_strv_push(&values, v);
    }
    struct sbx_trace_options o = {
            .traceparent = ct->parent, .content = ct->content, .secrets = &values};
    int rc = sbx_trace_new(&o, &ct->t, err);
    for (size_t i = 0; i < values.n; i++)
        explicit_bzero(values.v[i], strlen(values.v[i]));
    sbx_strv_release(&values);
    if (rc < 0) {
        sbx_error_prefix(err, "%s", tp_from);
        return rc;
    }
    struct sbx_trace_exporter ex;
    if (ct->file) {
        if ((rc = sbx_trace_jsonl_exporter(ct->file, &ex, err)) < 0 ||
            (rc = sbx_trace_add_exporter(ct->t, &ex, err)) < 0)
            goto fail;
    }
    int64_t timeout = 0;
    if (ct->otlp || ct->openai) {
        const char *t = getenv("OTEL_EXPORTER_OTLP_TIMEOUT");
        if (t && t[0]) {
            char *end;
            long long v = strtoll(t, &end, 10);
            if (*end || v <= 0 || v > 600000) {
                rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                   "OTEL_EXPORTER_OTLP_TIMEOUT must be milliseconds (1 to "
                                   "600000), not '%s'",
                                   t);
                goto fail;
            }
            timeout = v;
        }
    }
    if (ct->otlp) {
        char *url = traces_url(ct->otlp);
        rc = sbx_trace_otlp_exporter(url, timeout, &ex, err);
        free(url);
        if (rc < 0 || (rc = sbx_trace_add_exporter(ct->t, &ex, err)) < 0)
            goto fail;
    }
    if (ct->openai) {
        const char *url = getenv("SBX_TRACE_OPENAI_URL");
        if ((rc = sbx_trace_openai_exporter(url && url[0] ? url : SBX_TRACE_OPENAI_URL, key,
                                            timeout, &ex, err)) < 0 ||
            (rc = sbx_trace_add_exporter(ct->t, &ex, err)) < 0)
            goto fail;
    }
    ct->run = sbx_trace_root(ct->t, "run");
    sbx_trace_set_current(ct->run);
    return 0;
fail:
    sbx_trace_free(ct->t);
    ct->t = NULL;
    return rc;
}

void cli_trace_usage(struct cli_trace *ct, const json_t *usage)
{
    static const char *const keys[][2] = {{"input_tokens", "gen_ai.usage.input_tokens"},
                                          {"output_tokens", "gen_ai.usage.output_tokens"},
                                          {"requests", "sbx.usage.requests"}};
    if (!ct->run)
        return;
    for (size_t i = 0; i < SBX_ARRAY_LEN(keys); i++) {
        const json_t *v = json_object_get(usage, keys[i][0]);
        if (json_is_integer(v))
            sbx_span_set_int(ct->run, keys[i][1], json_integer_value(v));
    }
}

void cli_trace_finish(struct cli_trace *ct, const struct sbx_error *err)
{
    if (!ct->t)
        return;
    if (err && err->code != SBX_OK)
        sbx_span_set_status(ct->run, 0, err->msg[0] ? err->msg : sbx_strerror(err->code));
    sbx_trace_set_current(NULL);
    sbx_span_end(ct->run);
    ct->run = NULL;
    char *report = NULL;
    sbx_trace_shutdown(ct->t, &report);
    if (report)
        fprintf(stderr, "sbx: trace: spans dropped (exporter=count): %s\n", report);
    free(report);
    sbx_trace_free(ct->t);
    ct->t = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* sbx trace show */

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
    if (json_integer_value(e) < json_integer_value(s))
        return "the span ends before it starts";
    const json_t *a = json_object_get(o, "attributes");
    if (a && !json_is_object(a))
        return "\"attributes\" is not an object";
    return NULL;
}

static void put_safe(const char *s)
{
    char *e = sbx_term_escape(s, strlen(s), 0, NULL);
    /* One span is one line. */
    for (char *p = e; *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    fputs(e, stdout);
    free(e);
}

static void put_duration(int64_t ns)
{
    if (ns < 1000000)
        printf("%.3fms", (double)ns / 1e6);
    else if (ns < 1000000000)
        printf("%.1fms", (double)ns / 1e6);
    else
        printf("%.2fs", (double)ns / 1e9);
}

static const char *attr_str(const json_t *a, const char *k)
{
    return json_string_value(json_object_get(a, k));
}

static void put_attr_int(const json_t *a, const char *k, const char *label)
{
    const json_t *v = json_object_get(a, k);
    if (json_is_integer(v))
        printf(" %s %lld", label, (long long)json_integer_value(v));
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
            fputs(i == 3 ? " -> " : " ", stdout);
            put_safe(v);
            break;
        }
    }
    put_attr_int(a, "sbx.turn", "#");
    fputs("  ", stdout);
    put_duration(s->end - s->start);
    put_attr_int(a, "gen_ai.usage.input_tokens", "in");
    put_attr_int(a, "gen_ai.usage.output_tokens", "out");
    put_attr_int(a, "gen_ai.usage.cache_read.input_tokens", "cached");
    const json_t *fb = json_object_get(a, "sbx.model.first_byte_ns");
    if (json_is_integer(fb)) {
        fputs(" first byte ", stdout);
        put_duration(json_integer_value(fb));
    }
    put_attr_int(a, "sbx.model.retries", "retries");
    put_attr_int(a, "sbx.tool.exit_code", "exit");
    put_attr_int(a, "sbx.sandbox.exit_code", "exit");
    const char *st = json_string_value(json_object_get(s->o, "status"));
    if (st && strcmp(st, "error") == 0) {
        fputs("  ERROR", stdout);
        const char *m = json_string_value(json_object_get(s->o, "status_message"));
        if (m) {
            fputs(": ", stdout);
            put_safe(m);
        }
    }
    fputc('\n', stdout);
}

static void show_tree(struct show_span *v, size_t i, struct sbx_buf *prefix, int last, int depth)
{
    struct show_span *s = &v[i];
    s->shown = 1;
    fputs(prefix->data, stdout);
    if (depth)
        fputs(last ? "`- " : "|- ", stdout);
    put_span_line(s);
    if (depth >= SHOW_DEPTH_MAX) {
        if (s->first_child)
            printf("%s   ... (deeper spans not shown)\n", prefix->data);
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

static int trace_show(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    if (!f) {
        fprintf(stderr, "sbx: cannot open trace file '%s': %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
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
                fprintf(stderr, "sbx: trace file '%s' line %zu: %s\n", p, lineno, e);
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
    if (f != stdin)
        fclose(f);
    free(line);
    if (bad > SHOW_ERRORS_MAX)
        fprintf(stderr, "sbx: trace file: %zu more bad lines not shown\n", bad - SHOW_ERRORS_MAX);
    if (too_many)
        fprintf(stderr, "sbx: trace file: more than %d spans; the rest is not shown\n",
                SHOW_SPANS_MAX);
    if (read_failed)
        fprintf(stderr, "sbx: cannot read trace file: %s\n", strerror(errno));

    /* Children in start order: sort, then link each span to its parent (found by id). */
    if (n)
        qsort(v, n, sizeof(*v), by_start);
    json_t *index = json_object();
    for (size_t i = 0; i < n; i++) {
        v[i].id = json_string_value(json_object_get(v[i].o, "span_id"));
        v[i].parent = json_string_value(json_object_get(v[i].o, "parent_span_id"));
        if (json_object_get(index, v[i].id))
            fprintf(stderr, "sbx: trace file: span id %s appears more than once\n", v[i].id);
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
    struct sbx_buf prefix;
    sbx_buf_init(&prefix, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++) {
        const json_t *pi = v[i].parent ? json_object_get(index, v[i].parent) : NULL;
        if (!pi || (size_t)json_integer_value(pi) == i)
            show_tree(v, i, &prefix, 1, 0);
        /* Model calls only: the turn and run spans repeat their tokens as sums. */
        const json_t *a = json_object_get(v[i].o, "attributes");
        const char *op = attr_str(a, "gen_ai.operation.name");
        if (op && strcmp(op, "chat") == 0) {
            in += json_integer_value(json_object_get(a, "gen_ai.usage.input_tokens"));
            out += json_integer_value(json_object_get(a, "gen_ai.usage.output_tokens"));
        }
    }
    size_t hidden = 0;
    for (size_t i = 0; i < n; i++)
        hidden += !v[i].shown;
    printf("%zu spans, %lld input tokens, %lld output tokens\n", n, (long long)in, (long long)out);
    if (hidden)
        fprintf(stderr, "sbx: trace file: %zu spans not shown: their parent links form a cycle\n",
                hidden);
    sbx_buf_release(&prefix);
    free(last_child);
    json_decref(index);
    for (size_t i = 0; i < n; i++)
        json_decref(v[i].o);
    free(v);
    return bad || too_many || read_failed || hidden ? CLI_FAIL : CLI_OK;
}

int cmd_trace(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("trace ", "missing subcommand (show)");
    if (strcmp(argv[1], "show") != 0)
        return cli_usage("trace ", "unknown subcommand '%s' (show)", argv[1]);
    if (argc != 3 || (argv[2][0] == '-' && argv[2][1]))
        return cli_usage("trace ", "show takes one FILE (or - for standard input)");
    return trace_show(argv[2]);
}
