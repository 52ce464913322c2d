/* `sbx run` tracing options and `sbx trace show`. See docs/internals/tracing.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run-trace.h"
#include "sbx/json.h"
#include "sbx/scrub.h"

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

/* The run's trace identity on the run span, where every exporter finds it: the file's and
 * OTLP's attributes, the OpenAI exporter's task span. */
static void run_identity(struct cli_trace *ct)
{
    const char *k;
    json_t *v;
    if (ct->workflow)
        sbx_span_set_str(ct->run, SBX_ATTR_WORKFLOW, ct->workflow);
    if (ct->group_id)
        sbx_span_set_str(ct->run, SBX_ATTR_GROUP_ID, ct->group_id);
    json_object_foreach((json_t *)ct->metadata, k, v)
    {
        char *key = sbx_xasprintf("%s%s", SBX_ATTR_METADATA, k);
        sbx_span_set_str(ct->run, key, json_string_value(v));
        free(key);
    }
}

int cli_trace_start(struct cli_trace *ct, const struct sbx_strv *secrets, struct sbx_error *err)
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
    /* The run's secret values, as every file the run writes is scrubbed of them. */
    struct sbx_trace_options o = {
            .traceparent = ct->parent, .content = ct->content, .secrets = secrets};
    int rc = sbx_trace_new(&o, &ct->t, err);
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
        const char *url = getenv("SBX_TRACE_OPENAI_URL"), *key = getenv("OPENAI_API_KEY");
        /* The trace object is no span: the scrubber every span goes through is applied here. */
        json_t *id = json_pack("{s:s?, s:s?, s:O?}", "name", ct->workflow, "group_id", ct->group_id,
                               "metadata", ct->metadata);
        json_t *clean = sbx_scrub_json(secrets, id, NULL);
        struct sbx_trace_workflow wf = {json_string_value(json_object_get(clean, "name")),
                                        json_string_value(json_object_get(clean, "group_id")),
                                        json_object_get(clean, "metadata")};
        rc = sbx_trace_openai_exporter(url && url[0] ? url : SBX_TRACE_OPENAI_URL, key, timeout,
                                       &wf, &ex, err);
        json_decref(clean);
        json_decref(id);
        if (rc < 0 || (rc = sbx_trace_add_exporter(ct->t, &ex, err)) < 0)
            goto fail;
    }
    ct->run = sbx_trace_root(ct->t, "run");
    run_identity(ct);
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

int cmd_trace(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("trace ", "missing subcommand (show)");
    if (strcmp(argv[1], "show") != 0)
        return cli_usage("trace ", "unknown subcommand '%s' (show)", argv[1]);
    int follow = argc == 4 && (strcmp(argv[2], "--follow") == 0 || strcmp(argv[2], "-f") == 0);
    if (follow && strcmp(argv[3], "-") == 0)
        return cli_usage("trace ", "show --follow takes a FILE, not standard input");
    if (follow)
        return cli_trace_follow(argv[3], stdout, stderr, 200);
    if (argc != 3 || (argv[2][0] == '-' && argv[2][1]))
        return cli_usage("trace ", "show takes one FILE (or - for standard input), or --follow "
                                   "FILE");
    const char *path = argv[2];
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    if (!f) {
        fprintf(stderr, "sbx: cannot open trace file '%s': %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    int rc = cli_trace_show_stream(f, path, stdout, stderr);
    if (f != stdin)
        fclose(f);
    return rc;
}
