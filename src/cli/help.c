/* What the help table (help-table.c) is rendered into: --help and `sbx help` on a terminal,
 * roff man pages (one per top-level command: sbx.1, sbx-run.1, sbx-sandbox.1 with its
 * subcommands, ...) and bash and zsh completion scripts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/help.h"
#include "sbx/common.h"
#include "sbx/provider.h"

#define WIDTH           79
#define OPT_COL         28
#define TOPIC_MAX_WORDS 4

static int is_help_word(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* h is a direct subcommand of parent ("" for the top-level commands). */
static int is_child(const struct cli_help *parent, const struct cli_help *h)
{
    size_t n = strlen(parent->path);
    if (!h->path[0] || h == parent)
        return 0;
    if (n == 0)
        return strchr(h->path, ' ') == NULL;
    return strncmp(h->path, parent->path, n) == 0 && h->path[n] == ' ' &&
           strchr(h->path + n + 1, ' ') == NULL;
}

static int has_children(const struct cli_help *h)
{
    for (size_t i = 0; i < cli_help_count; i++)
        if (is_child(h, &cli_help_table[i]))
            return 1;
    return 0;
}

static const char *last_word(const char *path)
{
    const char *sp = strrchr(path, ' ');
    return sp ? sp + 1 : path;
}

const struct cli_help *cli_help_find(char *const *words, size_t n)
{
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        const char *p = h->path;
        size_t k = 0;
        for (; k < n && *p; k++) {
            size_t len = strcspn(p, " ");
            int last = p[len] == '\0';
            int same = strlen(words[k]) == len && strncmp(words[k], p, len) == 0;
            if (!same && !(last && h->alias && strcmp(words[k], h->alias) == 0))
                break;
            p += len + (last ? 0 : 1);
        }
        if (k == n && !*p && n > 0)
            return h;
    }
    return n == 0 ? &cli_help_table[0] : NULL;
}

static const struct cli_help *find_path(const char *path)
{
    for (size_t i = 0; i < cli_help_count; i++)
        if (strcmp(cli_help_table[i].path, path) == 0)
            return &cli_help_table[i];
    return NULL;
}

static const struct cli_help_opt *opts_of(const struct cli_help *h);

/* Edit distance of a and b, capped at cap + 1 (names are short). */
static size_t distance(const char *a, const char *b, size_t cap)
{
    size_t la = strlen(a), lb = strlen(b), row[64], prev, tmp;
    if (la >= 63 || lb >= 63)
        return cap + 1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            tmp = row[j];
            size_t best = prev + (a[i - 1] != b[j - 1]);
            best = row[j] + 1 < best ? row[j] + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            row[j] = best;
            prev = tmp;
        }
    }
    return row[lb] > cap ? cap + 1 : row[lb];
}

/* Keep candidate c when it is nearer to word than *best (d: its distance so far). */
static void consider(const char *word, const char *c, const char **best, size_t *d)
{
    size_t n = strlen(word), cap = n <= 3 ? 1 : 2;
    size_t k = strncmp(c, word, n) == 0 && n >= 2 ? 0 : distance(word, c, cap);
    if (k <= cap && k < *d) {
        *best = c;
        *d = k;
    }
}

const char *cli_help_suggest(const char *path, const char *word, int option)
{
    const struct cli_help *h = find_path(path);
    const char *best = NULL;
    size_t d = (size_t)-1;
    if (!h || !word)
        return NULL;
    if (option) {
        while (*word == '-')
            word++;
        for (const struct cli_help_opt *o = opts_of(h); o && (o->short_name || o->long_name); o++)
            if (o->long_name && o->long_name[0] != '\001')
                consider(word, o->long_name, &best, &d);
        return best;
    }
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *c = &cli_help_table[i];
        if (!is_child(h, c))
            continue;
        const char *last = strrchr(c->path, ' ');
        consider(word, last ? last + 1 : c->path, &best, &d);
        if (c->alias)
            consider(word, c->alias, &best, &d);
    }
    return best;
}

/* ---------------------------------------------------------------------------------------------
 * The providers' options, from the registry */

/* The value names of the providers, "local|docker", into buf. */
static void provider_names(char *buf, size_t size, int with_default)
{
    struct sbx_provider_info p;
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; sbx_provider_at(i, &p) == 0 && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s%s",
                                i ? (with_default ? ", " : "|") : "", p.name,
                                i == 0 && with_default ? " (the default)" : "");
}

static int own_option(const struct cli_help_opt *opts, const char *name)
{
    for (const struct cli_help_opt *o = opts; o->short_name || o->long_name; o++)
        if (o->long_name && o->long_name[0] != '\001' && strcmp(o->long_name, name) == 0)
            return 1;
    return 0;
}

static int same_option(const struct sbx_provider_option *a, const struct sbx_provider_option *b)
{
    return b->flag && strcmp(a->flag, b->flag) == 0 && !a->arg == !b->arg &&
           (!a->arg || strcmp(a->arg, b->arg) == 0) && strcmp(a->help, b->help) == 0;
}

/* Option o of provider number i is told once for every provider that declares it alike: 0 when
 * an earlier provider told it, else 1 with their names ("local, docker") in label. */
static int same_label(size_t i, const struct sbx_provider_option *o, char *label)
{
    struct sbx_provider_info q;
    size_t len = 0;
    for (size_t j = 0; sbx_provider_at(j, &q) == 0; j++) {
        for (size_t k = 0; k < q.n_options; k++) {
            if (!same_option(o, &q.options[k]))
                continue;
            if (j < i)
                return 0;
            len += (size_t)snprintf(label + len, len < 256 ? 256 - len : 0, "%s%s", len ? ", " : "",
                                    q.name);
        }
    }
    return 1;
}

/* Append the entries a marker stands for to out (room for max, *n used). */
static void expand(const struct cli_help_opt *opts, const char *marker, struct cli_help_opt *out,
                   size_t max, size_t *n)
{
    struct sbx_provider_info p;
    int locators = strcmp(marker, CLI_HELP_LOCATOR_OPTIONS) == 0;
    if (!locators && *n + 2 < max) {
        char names[256];
        provider_names(names, sizeof(names), 1);
        out[(*n)++] = (struct cli_help_opt){
                0, "provider", "NAME",
                sbx_xasprintf("make the sandbox with this provider: %s ('sbx sandbox providers' "
                              "lists each with its traits and options)",
                              names)};
        out[(*n)++] = (struct cli_help_opt){
                'o', "provider-option", "KEY=VALUE",
                "an option of the provider by its key, its value typed by the provider's table "
                "(repeatable); the flags below are the same options"};
    }
    for (size_t i = 0; sbx_provider_at(i, &p) == 0; i++) {
        for (size_t k = 0; k < p.n_options && *n + 1 < max; k++) {
            const struct sbx_provider_option *o = &p.options[k];
            char label[256];
            if (!o->flag || own_option(opts, o->flag) ||
                (locators && !(o->flags & SBX_OPTION_LOCATOR)) || !same_label(i, o, label))
                continue;
            out[(*n)++] = (struct cli_help_opt){
                    locators ? 0 : o->short_flag, o->flag,
                    o->type == SBX_OPTION_BOOL ? NULL : o->arg,
                    locators ? sbx_xasprintf("%s: also look for the sandbox there: %s", label,
                                             o->help)
                             : sbx_xasprintf("%s: %s", label, o->help)};
        }
    }
}

/* h's options with the markers expanded (built once per entry; never freed). */
static const struct cli_help_opt *opts_of(const struct cli_help *h)
{
    static const struct cli_help_opt **cache;
    size_t idx = (size_t)(h - cli_help_table), max = 256, n = 0;
    if (!h->opts || idx >= cli_help_count)
        return h->opts;
    if (!cache)
        cache = sbx_xcalloc(cli_help_count, sizeof(*cache));
    if (cache[idx])
        return cache[idx];
    struct cli_help_opt *out = sbx_xcalloc(max + 1, sizeof(*out));
    for (const struct cli_help_opt *o = h->opts; (o->short_name || o->long_name) && n < max; o++) {
        if (o->long_name && o->long_name[0] == '\001')
            expand(h->opts, o->long_name, out, max, &n);
        else
            out[n++] = *o;
    }
    cache[idx] = out;
    return out;
}

/* The option o was listed before it in list (a flag several providers share). */
static int listed_before(const struct cli_help_opt *list, const struct cli_help_opt *o)
{
    for (const struct cli_help_opt *p = list; p < o; p++)
        if (o->long_name && p->long_name && strcmp(p->long_name, o->long_name) == 0)
            return 1;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Terminal text */

/* text wrapped to WIDTH, every line indented by indent spaces but the first, which starts at
 * column col (already written). Paragraphs get a blank line between them. */
static void wrap(const char *text, int indent, int col)
{
    const char *p = text;
    while (*p) {
        if (*p == '\n') {
            fputc('\n', stdout);
            if (p[1] == '\n') {
                fputc('\n', stdout);
                p++;
            }
            p++;
            col = 0;
            continue;
        }
        if (*p == ' ') {
            p++;
            continue;
        }
        size_t n = strcspn(p, " \n");
        if (col > indent && col + 1 + (int)n > WIDTH) {
            fputc('\n', stdout);
            col = 0;
        }
        if (col < indent) {
            printf("%*s", indent - col, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', stdout);
            col++;
        }
        fwrite(p, 1, n, stdout);
        col += (int)n;
        p += n;
    }
    if (col)
        fputc('\n', stdout);
}

static void opt_label(const struct cli_help_opt *o, char *buf, size_t size)
{
    char s[8] = "    ";
    if (o->short_name)
        snprintf(s, sizeof(s), "-%c%s", o->short_name, o->long_name ? ", " : "");
    snprintf(buf, size, "%s%s%s%s%s", s, o->long_name ? "--" : "", o->long_name ? o->long_name : "",
             o->arg ? " " : "", o->arg ? o->arg : "");
}

/* The forms of syn under "usage: ", the first of all (*first) after it. */
static void print_synopsis(const char *syn, int *first)
{
    const char *p = syn;
    while (*p) {
        size_t n = strcspn(p, "\n");
        printf("%s%.*s\n", *first ? "usage: " : "       ", (int)n, p);
        *first = 0;
        p += n + (p[n] == '\n');
    }
}

int cli_help_print(const struct cli_help *h)
{
    int first = 1;
    print_synopsis(h->synopsis, &first);
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *c = &cli_help_table[i];
        if (h->path[0] && is_child(h, c))
            print_synopsis(c->synopsis, &first);
    }
    fputc('\n', stdout);
    wrap(h->description ? h->description : h->summary, 0, 0);
    if (has_children(h)) {
        printf("\ncommands:\n");
        for (size_t i = 0; i < cli_help_count; i++) {
            const struct cli_help *c = &cli_help_table[i];
            if (!is_child(h, c))
                continue;
            char name[64];
            snprintf(name, sizeof(name), "%s%s%s", last_word(c->path), c->alias ? ", " : "",
                     c->alias ? c->alias : "");
            printf("  %-12s", name);
            wrap(c->summary, 15, 14 > (int)strlen(name) + 2 ? 14 : (int)strlen(name) + 2);
        }
        char hint[256];
        const char *sp = h->path[0] ? " " : "";
        snprintf(hint, sizeof(hint),
                 "Run 'sbx %s%sCOMMAND --help' (or 'sbx help %s%sCOMMAND') for a command's "
                 "options.",
                 h->path, sp, h->path, sp);
        fputc('\n', stdout);
        wrap(hint, 0, 0);
    }
    const struct cli_help_opt *opts = opts_of(h);
    if (opts && opts[0].long_name) {
        printf("\noptions:\n");
        for (const struct cli_help_opt *o = opts; o->short_name || o->long_name; o++) {
            char label[96];
            opt_label(o, label, sizeof(label));
            printf("  %s", label);
            int col = 2 + (int)strlen(label);
            if (col + 2 > OPT_COL) {
                fputc('\n', stdout);
                col = 0;
            }
            wrap(o->text, OPT_COL, col);
        }
    }
    if (h->exit_status) {
        printf("\nexit status:");
        wrap(h->exit_status, 2, 12);
    }
    if (h->see_also) {
        printf("\nsee also:");
        for (const char *p = h->see_also; *p;) {
            size_t n = strcspn(p, " ");
            printf(" 'sbx ");
            for (size_t k = 0; k < n; k++)
                fputc(p[k] == '-' ? ' ' : p[k], stdout);
            printf(" --help'%s", p[n] ? "," : "");
            p += n + (p[n] == ' ');
        }
        fputc('\n', stdout);
    }
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

int cli_help_print_path(const char *path)
{
    return cli_help_print(find_path(path));
}

/* The option o names among opts (a long one possibly with "=VALUE"), or NULL. */
static const struct cli_help_opt *find_opt(const struct cli_help_opt *opts, const char *a)
{
    for (const struct cli_help_opt *o = opts; o && (o->short_name || o->long_name); o++) {
        if (a[1] == '-') {
            size_t n = strcspn(a + 2, "=");
            if (o->long_name && strlen(o->long_name) == n && strncmp(o->long_name, a + 2, n) == 0)
                return o;
        } else if (o->short_name && a[1] == o->short_name && a[2] == '\0') {
            return o;
        }
    }
    return NULL;
}

int cli_help_intercept(int argc, char **argv, int *rc)
{
    const struct cli_help *h = cli_help_find(argv, 1);
    int i = 1;
    if (!h)
        return 0;
    if (has_children(h) && argc > 1) {
        if (strcmp(argv[1], "help") == 0) {
            /* sbx sandbox help [create] */
            char *words[2] = {argv[0], argc > 2 ? argv[2] : NULL};
            const struct cli_help *sub = argc > 2 ? cli_help_find(words, 2) : h;
            *rc = sub ? cli_help_print(sub)
                      : cli_usage(NULL, "unknown help topic '%s %s'", argv[0], argv[2]);
            return 1;
        }
        const struct cli_help *sub = cli_help_find(argv, 2);
        if (sub) {
            h = sub;
            i = 2;
        } else if (argv[1][0] != '-') {
            /* An unknown subcommand: its own error, unless help is asked for. */
            for (int k = 2; k < argc && strcmp(argv[k], "--") != 0; k++)
                if (is_help_word(argv[k])) {
                    *rc = cli_help_print(h);
                    return 1;
                }
            return 0;
        }
    }
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            break;
        if (is_help_word(a)) {
            *rc = cli_help_print(h);
            return 1;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (!(h->flags & CLI_HELP_ANYWHERE))
                break;
            continue;
        }
        /* The value of an option is not an option, even when it is "-h". */
        const struct cli_help_opt *o = find_opt(opts_of(h), a);
        if (o && o->arg && !strchr(a, '='))
            i++;
    }
    return 0;
}

int cli_help_main(int argc, char **argv)
{
    if (argc > 1 && is_help_word(argv[1]))
        return cli_help_print_path("help");
    if (argc <= 1)
        return cli_help_print(&cli_help_table[0]);
    if (argc - 1 > TOPIC_MAX_WORDS)
        return cli_usage("help ", "too many words for a help topic");
    const struct cli_help *h = cli_help_find(argv + 1, (size_t)argc - 1);
    if (h)
        return cli_help_print(h);
    /* Name the topics the first word allows: the commands, or a command's subcommands. */
    const struct cli_help *parent = cli_help_find(argv + 1, 1);
    if (!parent || !has_children(parent))
        parent = &cli_help_table[0];
    fprintf(stderr, "sbx: unknown help topic '%s%s%s'; known topics:", argv[1], argc > 2 ? " " : "",
            argc > 2 ? argv[2] : "");
    for (size_t i = 0; i < cli_help_count; i++)
        if (is_child(parent, &cli_help_table[i]))
            fprintf(stderr, " '%s'", cli_help_table[i].path);
    fprintf(stderr, "\nTry 'sbx help'.\n");
    return CLI_USAGE;
}

/* ---------------------------------------------------------------------------------------------
 * Man pages */

/* Text for roff: backslashes and hyphens escaped, a line never starting with a control
 * character. "\n" breaks a line, "\n\n" starts a paragraph. */
static void roff(FILE *f, const char *s, int nofill)
{
    int bol = 1;
    for (const char *p = s; *p; p++) {
        if (bol && (*p == '.' || *p == '\''))
            fputs("\\&", f);
        bol = 0;
        if (*p == '\\') {
            fputs("\\e", f);
        } else if (*p == '-') {
            fputs("\\-", f);
        } else if (*p == '\n' && !nofill) {
            fputs(p[1] == '\n' ? "\n.PP\n" : "\n.br\n", f);
            p += p[1] == '\n';
            bol = 1;
        } else {
            fputc(*p, f);
            bol = *p == '\n';
        }
    }
    fputc('\n', f);
}

static void roff_word(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '-' || *s == '\\')
            fputs(*s == '-' ? "\\-" : "\\e", f);
        else
            fputc(*s, f);
}

static void man_options(FILE *f, const struct cli_help_opt *opts)
{
    for (const struct cli_help_opt *o = opts; o && (o->short_name || o->long_name); o++) {
        fputs(".TP\n", f);
        if (o->short_name)
            fprintf(f, "\\fB\\-%c\\fR%s", o->short_name, o->long_name ? ", " : "");
        if (o->long_name) {
            fputs("\\fB\\-\\-", f);
            roff_word(f, o->long_name);
            fputs("\\fR", f);
        }
        if (o->arg) {
            fputs(" \\fI", f);
            roff_word(f, o->arg);
            fputs("\\fR", f);
        }
        fputc('\n', f);
        roff(f, o->text, 0);
    }
}

/* The page an entry's path is on: sbx, sbx-run, sbx-sandbox. */
static void page_name(const char *path, char *buf, size_t size)
{
    snprintf(buf, size, "sbx%s%.*s", path[0] ? "-" : "", (int)strcspn(path, " -"), path);
}

/* One SEE ALSO entry, unless it is the page itself or already named. */
static void see(FILE *f, const char *name, const char *self, char (*seen)[32], size_t *nseen)
{
    for (size_t k = 0; k < *nseen; k++)
        if (strcmp(seen[k], name) == 0)
            return;
    if (strcmp(name, self) == 0 || *nseen >= 16)
        return;
    snprintf(seen[*nseen], 32, "%s", name);
    fprintf(f, "%s\\fB%s\\fR(1)", (*nseen)++ ? ",\n" : "", name);
}

static void man_see_also(FILE *f, const struct cli_help *h, const char *self)
{
    char seen[16][32], name[32], path[64];
    size_t nseen = 0;
    fputs(".SH SEE ALSO\n", f);
    see(f, "sbx", self, seen, &nseen);
    if (!h->path[0]) /* sbx(1) names every page */
        for (size_t i = 0; i < cli_help_count; i++)
            if (is_child(h, &cli_help_table[i])) {
                page_name(cli_help_table[i].path, name, sizeof(name));
                see(f, name, self, seen, &nseen);
            }
    for (const char *p = h->see_also; p && *p;) {
        size_t n = strcspn(p, " ");
        snprintf(path, sizeof(path), "%.*s", (int)n, p);
        page_name(path, name, sizeof(name));
        see(f, name, self, seen, &nseen);
        p += n + (p[n] == ' ');
    }
    fputc('\n', f);
}

static void man_page(FILE *f, const struct cli_help *h)
{
    char name[32], upper[32];
    page_name(h->path, name, sizeof(name));
    size_t k;
    for (k = 0; name[k] && k + 1 < sizeof(upper); k++)
        upper[k] = (char)(name[k] >= 'a' && name[k] <= 'z' ? name[k] - 'a' + 'A' : name[k]);
    upper[k] = '\0';
    fprintf(f, ".\\\" Generated by 'sbx __gen man' from src/cli/help-table.c: edit that.\n");
    fprintf(f, ".TH %s 1 \"\" \"sbx %s\" \"sbx manual\"\n.SH NAME\n", upper, SBX_VERSION);
    fputs(name, f);
    fputs(" \\- ", f);
    roff(f, h->summary, 0);
    fputs(".SH SYNOPSIS\n.nf\n", f);
    roff(f, h->synopsis, 1);
    for (size_t i = 0; i < cli_help_count; i++)
        if (h->path[0] && is_child(h, &cli_help_table[i]))
            roff(f, cli_help_table[i].synopsis, 1);
    fputs(".fi\n.SH DESCRIPTION\n", f);
    roff(f, h->description ? h->description : h->summary, 0);
    if (h->opts && h->opts[0].long_name) {
        fputs(".SH OPTIONS\n", f);
        man_options(f, opts_of(h));
    }
    if (has_children(h)) {
        fputs(".SH COMMANDS\n", f);
        for (size_t i = 0; i < cli_help_count; i++) {
            const struct cli_help *c = &cli_help_table[i];
            if (!is_child(h, c))
                continue;
            if (!h->path[0]) {
                char sub[32];
                page_name(c->path, sub, sizeof(sub));
                fprintf(f, ".TP\n\\fBsbx %s\\fR\n", c->path);
                roff(f, c->summary, 0);
                fprintf(f, "See \\fB%s\\fR(1).\n", sub);
                continue;
            }
            fprintf(f, ".SS \"sbx %s\"\n.nf\n", c->path);
            roff(f, c->synopsis, 1);
            fputs(".fi\n.PP\n", f);
            roff(f, c->description ? c->description : c->summary, 0);
            if (c->alias)
                fprintf(f, ".PP\nAlso called \\fB%s\\fR.\n", c->alias);
            man_options(f, opts_of(c));
            if (c->exit_status && strcmp(c->exit_status, h->exit_status) != 0) {
                fputs(".PP\nExit status: ", f);
                roff(f, c->exit_status, 0);
            }
        }
    }
    fputs(".SH EXIT STATUS\n", f);
    roff(f, h->exit_status, 0);
    man_see_also(f, h, name);
}

static int gen_man(const char *dir)
{
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        if (h->path[0] && strchr(h->path, ' '))
            continue;
        char name[32], file[4096];
        page_name(h->path, name, sizeof(name));
        if ((size_t)snprintf(file, sizeof(file), "%s/%s.1", dir, name) >= sizeof(file)) {
            fprintf(stderr, "sbx: directory name '%s' is too long\n", dir);
            return CLI_FAIL;
        }
        FILE *f = fopen(file, "we");
        if (!f) {
            fprintf(stderr, "sbx: cannot create '%s': %s\n", file, strerror(errno));
            return CLI_FAIL;
        }
        man_page(f, h);
        if (fclose(f) != 0) {
            fprintf(stderr, "sbx: cannot write '%s': %s\n", file, strerror(errno));
            return CLI_FAIL;
        }
    }
    return CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Completions */

/* s in single quotes for a shell. */
static void shq(const char *s)
{
    fputc('\'', stdout);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", stdout);
        else
            fputc(*s, stdout);
    fputc('\'', stdout);
}

static void words_of(const struct cli_help *parent)
{
    const char *sep = "";
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *c = &cli_help_table[i];
        if (!is_child(parent, c))
            continue;
        printf("%s%s%s%s", sep, last_word(c->path), c->alias ? " " : "", c->alias ? c->alias : "");
        sep = " ";
    }
}

static void option_words(const struct cli_help *h)
{
    const char *sep = "";
    const struct cli_help_opt *opts = opts_of(h);
    for (const struct cli_help_opt *o = opts; o && (o->short_name || o->long_name); o++) {
        if (listed_before(opts, o))
            continue;
        if (o->long_name)
            printf("%s--%s", sep, o->long_name);
        sep = " ";
        if (o->short_name)
            printf("%s-%c", sep, o->short_name);
    }
}

/* The synopsis of h has word (ID, REF) as an operand: a word of its own that is not the value of
 * an option ("--session ID"). */
static int synopsis_has(const struct cli_help *h, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = h->synopsis; p && (p = strstr(p, word)); p += n) {
        char before = p == h->synopsis ? ' ' : p[-1], after = p[n];
        if ((before != ' ' && before != '[') ||
            !(after == '\0' || after == ' ' || after == '.' || after == ']' || after == '\n'))
            continue;
        /* The word before it: an option's name makes this its value. */
        const char *q = p;
        while (q > h->synopsis && (q[-1] == ' ' || q[-1] == '['))
            q--;
        const char *end = q;
        while (q > h->synopsis && q[-1] != ' ' && q[-1] != '[' && q[-1] != '\n')
            q--;
        if (end > q && *q == '-' && end[-1] != ']')
            continue;
        return 1;
    }
    return 0;
}

static int gen_bash(void)
{
    const struct cli_help *top = &cli_help_table[0];
    printf("# bash completion for sbx. Generated by 'sbx __gen bash' from src/cli/help-table.c.\n"
           "_sbx_subcommands() {\n    case \"$1\" in\n");
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        if (is_child(top, h) && has_children(h)) {
            printf("    %s) echo ", h->path);
            fputc('"', stdout);
            words_of(h);
            printf("\" ;;\n");
        }
    }
    printf("    esac\n}\n\n_sbx_options() {\n    case \"$1\" in\n");
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        if (!h->path[0] || has_children(h))
            continue;
        printf("    ");
        shq(h->path);
        if (h->alias) {
            char alias[64];
            snprintf(alias, sizeof(alias), "%.*s %s", (int)(last_word(h->path) - h->path - 1),
                     h->path, h->alias);
            fputc('|', stdout);
            shq(alias);
        }
        printf(") echo \"");
        option_words(h);
        printf("\" ;;\n");
    }
    /* What the operands of a command are, for completing them from sbx itself: sandbox ids and
     * names (a synopsis with the operand ID), snapshot references (REF). */
    printf("    esac\n}\n\n_sbx_operands() {\n    case \"$1\" in\n");
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        const char *kind = synopsis_has(h, "ID") ? "id" : synopsis_has(h, "REF") ? "ref" : NULL;
        if (!h->path[0] || has_children(h) || !kind)
            continue;
        printf("    ");
        shq(h->path);
        printf(") echo %s ;;\n", kind);
    }
    printf("    esac\n}\n\n"
           "_sbx() {\n"
           "    local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd words subs\n"
           "    COMPREPLY=()\n"
           "    if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
           "        words=\"");
    words_of(top);
    printf(" --help --version\"\n"
           "    elif [ \"${COMP_WORDS[1]}\" = help ]; then\n"
           "        if [ \"$COMP_CWORD\" -eq 2 ]; then\n"
           "            words=\"");
    words_of(top);
    printf("\"\n"
           "        elif [ \"$COMP_CWORD\" -eq 3 ]; then\n"
           "            words=$(_sbx_subcommands \"${COMP_WORDS[2]}\")\n"
           "        fi\n"
           "    else\n"
           "        subs=$(_sbx_subcommands \"${COMP_WORDS[1]}\")\n"
           "        if [ -n \"$subs\" ] && [ \"$COMP_CWORD\" -eq 2 ]; then\n"
           "            words=\"$subs --help\"\n"
           "        else\n"
           "            cmd=${COMP_WORDS[1]}\n"
           "            [ -n \"$subs\" ] && cmd=\"$cmd ${COMP_WORDS[2]}\"\n"
           "            case \"$cur\" in\n"
           "            -*) words=$(_sbx_options \"$cmd\") ;;\n"
           "            *)\n"
           "                case $(_sbx_operands \"$cmd\") in\n"
           "                id) words=$(\"${COMP_WORDS[0]}\" sandbox ps --all --format "
           "'{{.ID}} {{.Name}}' 2>/dev/null) ;;\n"
           "                ref) words=$(\"${COMP_WORDS[0]}\" snapshot ls 2>/dev/null | "
           "awk 'NR > 1 {print $1}') ;;\n"
           "                *) return 0 ;;\n"
           "                esac ;;\n"
           "            esac\n"
           "        fi\n"
           "    fi\n"
           "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
           "}\n"
           "complete -o bashdefault -o default -F _sbx sbx\n");
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

/* zsh _describe items: NAME:TEXT, each quoted. */
static void zsh_commands(const struct cli_help *parent)
{
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *c = &cli_help_table[i];
        if (!is_child(parent, c))
            continue;
        char item[512];
        snprintf(item, sizeof(item), "%s:%s", last_word(c->path), c->summary);
        printf(" ");
        shq(item);
        if (c->alias) {
            snprintf(item, sizeof(item), "%s:%s", c->alias, c->summary);
            printf(" ");
            shq(item);
        }
    }
}

static int gen_zsh(void)
{
    const struct cli_help *top = &cli_help_table[0];
    printf("#compdef sbx\n"
           "# zsh completion for sbx. Generated by 'sbx __gen zsh' from src/cli/help-table.c.\n"
           "_sbx() {\n"
           "    local -a items\n"
           "    local cmd\n"
           "    if (( CURRENT == 2 )); then\n"
           "        items=(");
    zsh_commands(top);
    printf(")\n"
           "        _describe -t commands 'sbx command' items\n"
           "        return\n"
           "    fi\n"
           "    case $words[2] in\n");
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        if (!is_child(top, h) || !has_children(h))
            continue;
        printf("    (%s)\n"
               "        if (( CURRENT == 3 )); then\n"
               "            items=(",
               h->path);
        zsh_commands(h);
        printf(")\n"
               "            _describe -t commands 'sbx %s command' items\n"
               "            return\n"
               "        fi\n"
               "        cmd=\"$words[2] $words[3]\" ;;\n",
               h->path);
    }
    printf("    (help)\n"
           "        if (( CURRENT == 3 )); then\n"
           "            items=(");
    zsh_commands(top);
    printf(")\n"
           "            _describe -t commands 'sbx help topic' items\n"
           "        fi\n"
           "        return ;;\n");
    printf("    (*) cmd=$words[2] ;;\n"
           "    esac\n"
           "    items=()\n"
           "    case $cmd in\n");
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        if (!h->path[0] || has_children(h))
            continue;
        printf("    (");
        shq(h->path);
        if (h->alias) {
            char alias[64];
            snprintf(alias, sizeof(alias), "%.*s %s", (int)(last_word(h->path) - h->path - 1),
                     h->path, h->alias);
            fputc('|', stdout);
            shq(alias);
        }
        printf(")\n        items=(");
        const struct cli_help_opt *opts = opts_of(h);
        for (const struct cli_help_opt *o = opts; o && (o->short_name || o->long_name); o++) {
            char item[512];
            if (listed_before(opts, o))
                continue;
            if (o->long_name) {
                snprintf(item, sizeof(item), "--%s:%s", o->long_name, o->text);
                printf(" ");
                shq(item);
            }
            if (o->short_name) {
                snprintf(item, sizeof(item), "-%c:%s", o->short_name, o->text);
                printf(" ");
                shq(item);
            }
        }
        printf(") ;;\n");
    }
    printf("    esac\n"
           "    if [[ $PREFIX == -* ]] && (( ${#items} )); then\n"
           "        _describe -t options 'option' items\n"
           "    else\n"
           "        _files\n"
           "    fi\n"
           "}\n"
           "_sbx \"$@\"\n");
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

/* Every option of every command, a line each: PATH, -x or --long, ARG or "-" (tab-separated),
 * for the tests that check the table against the parsers. */
static int gen_options(void)
{
    for (size_t i = 0; i < cli_help_count; i++) {
        const struct cli_help *h = &cli_help_table[i];
        const struct cli_help_opt *opts = opts_of(h);
        for (const struct cli_help_opt *o = opts; o && (o->short_name || o->long_name); o++) {
            if (listed_before(opts, o))
                continue;
            if (o->long_name)
                printf("%s\t--%s\t%s\n", h->path, o->long_name, o->arg ? o->arg : "-");
            if (o->short_name)
                printf("%s\t-%c\t%s\n", h->path, o->short_name, o->arg ? o->arg : "-");
        }
    }
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

int cli_help_gen_main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "man") == 0)
        return gen_man(argv[2]);
    if (argc == 2 && strcmp(argv[1], "bash") == 0)
        return gen_bash();
    if (argc == 2 && strcmp(argv[1], "zsh") == 0)
        return gen_zsh();
    if (argc == 2 && strcmp(argv[1], "options") == 0)
        return gen_options();
    return cli_usage(NULL, "__gen wants 'man DIR', 'bash', 'zsh' or 'options'");
}
