/* What every verb of the CLI shares: the error and usage messages, the progress line, the
 * exact-long-option check, and the small parsers of values several verbs take. It calls no
 * verb, so the verb files depend on it and never on each other. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/help.h"
#include "sbx/manifest.h"
#include "sbx/progress.h"
#include "sbx/strv.h"
#include "sbx/term.h"

void cli_put_safe(FILE *f, int mode, const char *s, size_t n)
{
    if (mode != CLI_SAFE_ALWAYS && !isatty(fileno(f))) {
        fwrite(s, 1, n, f);
        return;
    }
    char *e = sbx_term_escape(s, n, 0, NULL);
    fputs(e, f);
    free(e);
}

void cli_printf_safe(FILE *f, int mode, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    char *s = sbx_xmalloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    cli_put_safe(f, mode, s, (size_t)n);
    free(s);
}

void cli_put_json(FILE *f, const char *text)
{
    /* JSON escapes C0 controls; C1 controls (U+0080..U+009F, which some terminals obey) are
     * escaped too: JSON sbx prints carries no control character, wherever it ends up. */
    for (const char *p = text; *p; p++) {
        if ((unsigned char)p[0] == 0xC2 && (unsigned char)p[1] >= 0x80 &&
            (unsigned char)p[1] <= 0x9F) {
            fprintf(f, "\\u%04x", (unsigned char)p[1]);
            p++;
        } else {
            fputc(*p, f);
        }
    }
}

/* -1: auto (a terminal, without $NO_COLOR), 0: never, 1: always. */
static int color_mode = -1;

int cli_color_set(const char *when)
{
    if (strcmp(when, "auto") == 0)
        color_mode = -1;
    else if (strcmp(when, "always") == 0)
        color_mode = 1;
    else if (strcmp(when, "never") == 0)
        color_mode = 0;
    else
        return -1;
    return 0;
}

const char *cli_sgr(const char *code)
{
    if (color_mode < 0) {
        const char *no = getenv("NO_COLOR");
        color_mode = isatty(2) && !(no && no[0]);
    }
    return color_mode ? code : "";
}

static void (*log_hook)(void *data, int before);
static void *log_hook_data;

void cli_log_set_hook(void (*hook)(void *data, int before), void *data)
{
    log_hook = hook;
    log_hook_data = data;
}

void cli_log(enum sbx_log_level level, const char *msg, void *data)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    (void)data;
    void (*hook)(void *, int) = log_hook;
    void *hook_data = log_hook_data;
    if (hook)
        hook(hook_data, 1);
    const char *sgr = level == SBX_LOG_ERROR  ? cli_sgr(CLI_RED)
                      : level == SBX_LOG_WARN ? cli_sgr(CLI_YELLOW)
                                              : "";
    fprintf(stderr, "%ssbx: %s: %s%s\n", sgr, names[level <= SBX_LOG_DEBUG ? level : SBX_LOG_DEBUG],
            msg, sgr[0] ? CLI_RESET : "");
    if (hook)
        hook(hook_data, 0);
}

int cli_fail(const struct sbx_error *err)
{
    /* Messages may quote what a model, a sandbox or an archive said: never an escape sequence,
     * on a terminal or in a log (the colour is sbx's own, around the escaped text). */
    const char *msg = err->msg[0] ? err->msg : sbx_strerror(err->code);
    fputs(cli_sgr(CLI_RED), stderr);
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: %s", msg);
    fprintf(stderr, "%s\n", cli_sgr(CLI_RESET));
    return CLI_FAIL;
}

int cli_usage(const char *verb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *msg = sbx_xmalloc(n > 0 ? (size_t)n + 1 : 1);
    msg[0] = '\0';
    va_start(ap, fmt);
    if (n > 0)
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    /* Usage errors quote what was typed, or a name a file gave: printed safely too. */
    fputs(cli_sgr(CLI_RED), stderr);
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: %s", msg);
    fprintf(stderr, "%s\n", cli_sgr(CLI_RESET));
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "Try 'sbx %s--help'.\n", verb ? verb : "");
    free(msg);
    return CLI_USAGE;
}

/* "sandbox exec" of verb "sandbox exec " (NULL: ""). */
static void path_of(const char *verb, char *out, size_t size)
{
    size_t n = verb ? strlen(verb) : 0;
    while (n && verb[n - 1] == ' ')
        n--;
    snprintf(out, size, "%.*s", (int)n, verb ? verb : "");
}

int cli_unknown_option(const char *verb, const char *opt)
{
    char path[64];
    path_of(verb, path, sizeof(path));
    const char *near = cli_help_suggest(path, opt, 1);
    if (near)
        return cli_usage(verb, "unknown option '%s' (did you mean --%s?)", opt, near);
    return cli_usage(verb, "unknown option '%s'", opt);
}

int cli_unknown_command(const char *verb, const char *word)
{
    char path[64];
    path_of(verb, path, sizeof(path));
    const char *near = cli_help_suggest(path, word, 0);
    if (near)
        return cli_usage(verb, "%s%sunknown command '%s' (did you mean '%s'?)", path,
                         path[0] ? ": " : "", word, near);
    return cli_usage(verb, "%s%sunknown command '%s'", path, path[0] ? ": " : "", word);
}

int cli_long_options_exact(int argc, char **argv, const char *shortopts,
                           const struct option *longopts, const char *verb)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0 || a[0] != '-' || a[1] == '\0')
            return CLI_OK;
        if (a[1] != '-') {
            /* A short option cluster: the last one may take the next argument. */
            const char *o = strchr(shortopts, a[strlen(a) - 1]);
            if (strlen(a) == 2 && o && o[1] == ':')
                i++;
            continue;
        }
        size_t n = strcspn(a + 2, "=");
        const struct option *hit = NULL, *near = NULL;
        for (const struct option *o = longopts; o->name; o++) {
            if (strlen(o->name) == n && strncmp(o->name, a + 2, n) == 0)
                hit = o;
            else if (!near && strncmp(o->name, a + 2, n) == 0)
                near = o;
        }
        if (!hit) {
            char path[64], word[64];
            path_of(verb, path, sizeof(path));
            snprintf(word, sizeof(word), "%.*s", (int)n, a + 2);
            const char *typo = near ? NULL : cli_help_suggest(path, word, 1);
            if (typo)
                return cli_usage(verb, "unknown option '%.*s' (did you mean --%s?)", (int)(n + 2),
                                 a, typo);
            if (near)
                return cli_usage(verb, "unknown option '%.*s' (did you mean --%s?)", (int)(n + 2),
                                 a, near->name);
            return cli_usage(verb, "unknown option '%.*s'", (int)(n + 2), a);
        }
        if (hit->has_arg == required_argument && !a[2 + n])
            i++;
    }
    return CLI_OK;
}

static void cli_progress(void *data, const struct sbx_progress *p)
{
    (void)data;
    if (p->finished) {
        fputs("\r\033[K", stderr);
    } else {
        char what[64];
        /* The path or repository comes from a manifest: keep it printable and short. */
        size_t n = 0;
        for (const char *s = p->what ? p->what : ""; *s && n < sizeof(what) - 1; s++)
            what[n++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
        what[n] = '\0';
        if (p->total)
            fprintf(stderr, "\r\033[K  %s: %llu of %llu %s", p->step, (unsigned long long)p->done,
                    (unsigned long long)p->total, what);
        else
            fprintf(stderr, "\r\033[K  %s: %llu %s", p->step, (unsigned long long)p->done, what);
    }
    fflush(stderr);
}

cli_progress_cb *cli_progress_fn(void)
{
    return isatty(2) ? cli_progress : NULL;
}

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

int cli_pass_secret(const char *name, struct sbx_strv *pass)
{
    if (!sbx_manifest_harness_credential(name))
        return cli_usage("sandbox ",
                         "--pass-secret '%s' is not one of sbx's own credentials "
                         "(OPENAI_API_KEY); manifests read other variables without it",
                         name);
    sbx_strv_push(pass, name);
    return 1;
}

int cli_parse_api(const char *name, enum sbx_model_api *api)
{
    if (strcmp(name, "responses") == 0)
        *api = SBX_MODEL_API_RESPONSES;
    else if (strcmp(name, "chat") == 0)
        *api = SBX_MODEL_API_CHAT;
    else
        return -1;
    return 0;
}

const char *cli_model_name(const char *given)
{
    const char *name = given ? given : getenv("SBX_MODEL");
    return name && name[0] ? name : "gpt-4.1";
}

int cli_trusted_manifest(const char *path, struct sbx_manifest **out, struct sbx_error *err)
{
    *out = NULL;
    if (!path)
        return 0;
    int rc = sbx_manifest_load_file(path, NULL, out, err);
    if (rc < 0)
        sbx_error_prefix(err, "manifest '%s'", path);
    return rc;
}
