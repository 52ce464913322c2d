/* V4A patch engine: parser, in-memory application, and the commit through a file provider.
 * The rules are written down in docs/internals/patch.md; keep the two in step. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sbx/patch.h"
#include "sbx/path.h"

/* ---- small helpers ----------------------------------------------------------------------- */

struct span {
    const char *s;
    size_t len;
};

/* A line of a hunk or of an added file. op is ' ', '-' or '+'. blank: the raw patch line was
 * empty (dropped when it trails a hunk: models put blank lines between hunks). */
struct pline {
    const char *s;
    size_t len;
    char op;
    unsigned char blank;
};

struct hunk {
    struct span *anchors; /* non-empty "@@ text" headers, in order */
    size_t nanchors;
    size_t nmarkers; /* "@@" lines, bare ones included: two or more make every anchor required */
    struct pline *lines;
    size_t n, alloc;
    int eof;
    size_t lineno; /* line of the patch where the hunk starts, for messages */
};

struct op {
    enum sbx_patch_kind kind;
    char *path; /* normalised, workspace-relative */
    char *display;
    char *move_to;
    char *move_display;
    struct pline *add; /* SBX_PATCH_ADD: the file's lines */
    size_t nadd, addalloc;
    int crlf; /* the patch text used CRLF: the ending for new files and for files without any */
    int no_final_eol; /* SBX_PATCH_ADD: the last line gets no line ending */
    int from_text;    /* parsed from "*** Begin Patch" text, where Codex's rules apply */
    struct hunk *hunks;
    size_t nhunks, hunkalloc;
};

struct sbx_patch {
    struct op *ops;
    size_t n, alloc;
    char **texts; /* owned copies of the patch text(s) every span points into */
    size_t ntexts;
    size_t total_hunks;
};

static void *grow(void *p, size_t *alloc, size_t need, size_t elsize)
{
    size_t had = *alloc;
    if (need <= had)
        return p;
    p = sbx__grow(p, elsize, need, alloc);
    memset((char *)p + had * elsize, 0, (*alloc - had) * elsize);
    return p;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n';
}

static struct span trim(const char *s, size_t len)
{
    while (len && is_ws(*s)) {
        s++;
        len--;
    }
    while (len && is_ws(s[len - 1]))
        len--;
    return (struct span){s, len};
}

static struct span rtrim(const char *s, size_t len)
{
    while (len && is_ws(s[len - 1]))
        len--;
    return (struct span){s, len};
}

static int span_eq(struct span a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len == n && memcmp(a.s, lit, n) == 0;
}

static int span_starts(struct span a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len >= n && memcmp(a.s, lit, n) == 0;
}

/* Copy s[0..len) into dst for a message, cut at max bytes on a UTF-8 boundary with "…". */
static void quote(char *dst, size_t dstsz, const char *s, size_t len)
{
    const size_t max = 160;
    int cut = 0;
    if (len > max) {
        len = max;
        while (len && ((unsigned char)s[len] & 0xC0) == 0x80)
            len--;
        cut = 1;
    }
    if (len + 4 > dstsz)
        len = dstsz - 4;
    memcpy(dst, s, len);
    if (cut)
        memcpy(dst + len, "\xE2\x80\xA6", 3), len += 3;
    dst[len] = '\0';
}

static void limits_fill(struct sbx_patch_limits *lim, const struct sbx_patch_limits *in)
{
    memset(lim, 0, sizeof(*lim));
    if (in)
        *lim = *in;
    if (!lim->max_patch_bytes)
        lim->max_patch_bytes = SBX_PATCH_DEFAULT_MAX_PATCH_BYTES;
    if (!lim->max_files)
        lim->max_files = SBX_PATCH_DEFAULT_MAX_FILES;
    if (!lim->max_hunks)
        lim->max_hunks = SBX_PATCH_DEFAULT_MAX_HUNKS;
    if (!lim->max_line_bytes)
        lim->max_line_bytes = SBX_PATCH_DEFAULT_MAX_LINE_BYTES;
    if (!lim->max_file_bytes)
        lim->max_file_bytes = SBX_PATCH_DEFAULT_MAX_FILE_BYTES;
}

/* Split text into lines at '\n', dropping one '\r' before it. A final '\n' does not start an
 * extra empty line. *crlf is set when any line ended in "\r\n". */
static int split_lines(const char *text, size_t len, size_t max_line, struct span **out,
                       size_t *nout, int *crlf, struct sbx_error *err)
{
    struct span *v = NULL;
    size_t n = 0, alloc = 0;
    size_t start = 0;
    *crlf = 0;
    while (start < len) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t l = end - start;
        if (nl && l && text[end - 1] == '\r') {
            l--;
            *crlf = 1;
        }
        if (l > max_line) {
            free(v);
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "line %zu of the patch is longer than %zu bytes", n + 1, max_line);
        }
        v = grow(v, &alloc, n + 1, sizeof(*v));
        v[n++] = (struct span){text + start, l};
        start = nl ? end + 1 : len;
    }
    *out = v;
    *nout = n;
    return 0;
}

/* ---- paths -------------------------------------------------------------------------------- */

/* Normalise a path written in the patch. *path is workspace-relative (under opts->cwd for a
 * relative input); *display is what the summary shows (relative to cwd, as written). */
static int norm_path(struct span raw, const struct sbx_patch_options *opts, char **path,
                     char **display, struct sbx_error *err)
{
    struct span t = trim(raw.s, raw.len);
    char *copy = NULL, *rel = NULL;
    int rc;
    if (!t.len)
        return sbx_error_set(err, SBX_E_PARSE, 0, "missing path");
    copy = sbx_xstrndup(t.s, t.len);
    for (char *c = copy; *c; c++)
        if (*c == '\\')
            *c = '/';
    if (copy[0] == '/') {
        if (!opts || !opts->root) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "path '%s' must be relative to the workspace",
                               copy);
            goto out;
        }
        rc = sbx_path_normalize(copy, strlen(copy), SBX_PATH_ALLOW_ABSOLUTE, opts->root, &rel, err);
        if (rc < 0)
            goto out;
        if (!*rel) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "path '%s' is the workspace root, not a file",
                               copy);
            goto out;
        }
        *display = sbx_xstrdup(rel);
        *path = rel;
        rel = NULL;
    } else {
        rc = sbx_path_normalize(copy, strlen(copy), 0, NULL, &rel, err);
        if (rc < 0)
            goto out;
        if (opts && opts->cwd && *opts->cwd) {
            char *joined = sbx_xasprintf("%s/%s", opts->cwd, rel);
            char *full = NULL;
            rc = sbx_path_normalize(joined, strlen(joined), 0, NULL, &full, err);
            free(joined);
            if (rc < 0)
                goto out;
            *path = full;
        } else {
            *path = sbx_xstrdup(rel);
        }
        *display = rel;
        rel = NULL;
    }
    rc = 0;
out:
    free(copy);
    free(rel);
    return rc;
}

/* ---- parser ------------------------------------------------------------------------------- */

static int is_file_header(struct span t)
{
    return span_starts(t, "*** Add File:") || span_starts(t, "*** Delete File:") ||
           span_starts(t, "*** Update File:");
}

static struct op *new_op(struct sbx_patch *p, const struct sbx_patch_limits *lim,
                         enum sbx_patch_kind kind, struct sbx_error *err)
{
    if (p->n >= lim->max_files) {
        sbx_error_set(err, SBX_E_TOOBIG, 0, "patch touches more than %zu files", lim->max_files);
        return NULL;
    }
    p->ops = grow(p->ops, &p->alloc, p->n + 1, sizeof(*p->ops));
    struct op *op = &p->ops[p->n++];
    op->kind = kind;
    return op;
}

static struct hunk *new_hunk(struct sbx_patch *p, struct op *op, const struct sbx_patch_limits *lim,
                             size_t lineno, struct sbx_error *err)
{
    if (p->total_hunks >= lim->max_hunks) {
        sbx_error_set(err, SBX_E_TOOBIG, 0, "patch has more than %zu hunks", lim->max_hunks);
        return NULL;
    }
    p->total_hunks++;
    op->hunks = grow(op->hunks, &op->hunkalloc, op->nhunks + 1, sizeof(*op->hunks));
    struct hunk *h = &op->hunks[op->nhunks++];
    h->lineno = lineno;
    return h;
}

/* Close a hunk: drop trailing blank separator lines; a hunk must keep at least one line. */
static int finish_hunk(const struct op *op, struct hunk *h, struct sbx_error *err)
{
    while (h->n && h->lines[h->n - 1].blank)
        h->n--;
    if (!h->n)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "line %zu: hunk %zu of '%s' has no lines (expected lines starting "
                             "with ' ', '-' or '+' after '@@')",
                             h->lineno, (size_t)(h - op->hunks) + 1, op->display);
    return 0;
}

/* Parse the body of an update: lines L[*i..end) until a file header or "*** End Patch" (only
 * when in_envelope). base: patch line number of L[0] minus one, for messages. */
static int parse_update_body(struct sbx_patch *p, struct op *op, const struct span *L, size_t *i,
                             size_t end, size_t base, int in_envelope,
                             const struct sbx_patch_limits *lim, struct sbx_error *err)
{
    struct hunk *cur = NULL;
    char q[200];
    int rc;
    for (; *i < end; (*i)++) {
        struct span raw = L[*i];
        struct span t = trim(raw.s, raw.len);
        size_t lineno = base + *i + 1;
        /* Markers are recognised only at the start of a line: " *** x" is a context line. */
        int star = raw.len && raw.s[0] == '*';
        if (in_envelope && star && (is_file_header(t) || span_eq(t, "*** End Patch")))
            break;
        if (raw.len && raw.s[0] == '@' && (span_eq(t, "@@") || span_starts(t, "@@ "))) {
            if (!cur || cur->n || cur->eof) {
                if (cur && (rc = finish_hunk(op, cur, err)) < 0)
                    return rc;
                if (!(cur = new_hunk(p, op, lim, lineno, err)))
                    return -SBX_E_TOOBIG;
            }
            struct span a = trim(t.s + 2, t.len - 2);
            cur->nmarkers++;
            if (a.len) {
                cur->anchors =
                        sbx_xrealloc(cur->anchors, (cur->nanchors + 1) * sizeof(*cur->anchors));
                cur->anchors[cur->nanchors++] = a;
            }
            continue;
        }
        if (star && span_eq(t, "*** End of File")) {
            if (!cur || !cur->n)
                return sbx_error_set(err, SBX_E_PARSE, 0,
                                     "line %zu: '*** End of File' must follow the lines of a "
                                     "hunk in the update of '%s'",
                                     lineno, op->display);
            cur->eof = 1;
            continue;
        }
        if (span_starts(raw, "***")) {
            quote(q, sizeof(q), t.s, t.len);
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "line %zu: unexpected '%s' in the update of '%s'", lineno, q,
                                 op->display);
        }
        char c = raw.len ? raw.s[0] : ' ';
        if (c != ' ' && c != '-' && c != '+') {
            quote(q, sizeof(q), raw.s, raw.len);
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "line %zu: '%s' in the update of '%s' must start with ' ' "
                                 "(context), '-' (remove) or '+' (add)",
                                 lineno, q, op->display);
        }
        if (!cur) {
            if (!(cur = new_hunk(p, op, lim, lineno, err)))
                return -SBX_E_TOOBIG;
        } else if (cur->eof) {
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "line %zu: lines after '*** End of File' in the update of '%s' "
                                 "must start a new hunk with '@@'",
                                 lineno, op->display);
        }
        cur->lines = grow(cur->lines, &cur->alloc, cur->n + 1, sizeof(*cur->lines));
        cur->lines[cur->n++] = (struct pline){raw.len ? raw.s + 1 : raw.s,
                                              raw.len ? raw.len - 1 : 0, c, raw.len == 0};
    }
    if (cur && (rc = finish_hunk(op, cur, err)) < 0)
        return rc;
    if (!op->nhunks && !op->move_to)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "update of '%s' has no hunks (expected '@@' and lines starting "
                             "with ' ', '-' or '+')",
                             op->display);
    return 0;
}

static void add_line(struct op *op, struct span s)
{
    op->add = grow(op->add, &op->addalloc, op->nadd + 1, sizeof(*op->add));
    op->add[op->nadd++] = (struct pline){s.s, s.len, '+', 0};
}

static void op_release(struct op *op)
{
    free(op->path);
    free(op->display);
    free(op->move_to);
    free(op->move_display);
    free(op->add);
    for (size_t i = 0; i < op->nhunks; i++) {
        free(op->hunks[i].anchors);
        free(op->hunks[i].lines);
    }
    free(op->hunks);
}

void sbx_patch_free(struct sbx_patch *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        op_release(&p->ops[i]);
    free(p->ops);
    for (size_t i = 0; i < p->ntexts; i++)
        free(p->texts[i]);
    free(p->texts);
    free(p);
}

static const char *keep_text(struct sbx_patch *p, const char *text, size_t len)
{
    p->texts = sbx_xrealloc(p->texts, (p->ntexts + 1) * sizeof(*p->texts));
    char *copy = sbx_xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = '\0';
    p->texts[p->ntexts++] = copy;
    return copy;
}

/* A heredoc wrapper (<<EOF, <<'EOF', <<"EOF" ... EOF), as shells and some models write it. */
static int is_heredoc_start(struct span t)
{
    return span_eq(t, "<<EOF") || span_eq(t, "<<'EOF'") || span_eq(t, "<<\"EOF\"");
}

static int header_path(struct span t, const char *marker, size_t lineno,
                       const struct sbx_patch_options *opts, char **path, char **display,
                       struct sbx_error *err)
{
    struct span rest = {t.s + strlen(marker), t.len - strlen(marker)};
    int rc = norm_path(rest, opts, path, display, err);
    if (rc < 0)
        sbx_error_prefix(err, "line %zu: '%s'", lineno, marker);
    return rc;
}

static int parse_json_text(const char *text, size_t len, const struct sbx_patch_options *opts,
                           const struct sbx_patch_limits *lim, struct sbx_patch **out,
                           struct sbx_error *err);

/* The lines of the patch proper in L[0..n): blank lines around it and a heredoc wrapper left
 * out, then '*** Begin Patch' first and '*** End Patch' last: [*first, *last). */
static int patch_envelope(const struct span *L, size_t n, size_t *first_out, size_t *last_out,
                          struct sbx_error *err)
{
    size_t first = 0, last = n;
    char q[200];
    while (first < last && !trim(L[first].s, L[first].len).len)
        first++;
    while (last > first && !trim(L[last - 1].s, L[last - 1].len).len)
        last--;
    if (last - first >= 4 && is_heredoc_start(trim(L[first].s, L[first].len))) {
        struct span e = trim(L[last - 1].s, L[last - 1].len);
        if (e.len >= 3 && memcmp(e.s + e.len - 3, "EOF", 3) == 0) {
            first++;
            last--;
        }
    }
    if (first == last)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "patch is empty: it must start with '*** Begin Patch'");
    if (!span_eq(trim(L[first].s, L[first].len), "*** Begin Patch")) {
        struct span t = trim(L[first].s, L[first].len);
        quote(q, sizeof(q), t.s, t.len);
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "patch must start with '*** Begin Patch', not '%s'", q);
    }
    if (last - first < 2 || !span_eq(trim(L[last - 1].s, L[last - 1].len), "*** End Patch"))
        return sbx_error_set(err, SBX_E_PARSE, 0, "patch must end with '*** End Patch'");
    *first_out = first;
    *last_out = last;
    return 0;
}

/* The body of an added file after its header at *i: '+' lines up to the next file header. */
static int parse_add_body(struct op *op, const struct span *L, size_t *i, size_t end,
                          struct sbx_error *err)
{
    char q[200];
    for ((*i)++; *i < end && L[*i].len && L[*i].s[0] == '+'; (*i)++)
        add_line(op, (struct span){L[*i].s + 1, L[*i].len - 1});
    if (*i < end) {
        struct span nt = trim(L[*i].s, L[*i].len);
        if (nt.len && !is_file_header(nt)) {
            quote(q, sizeof(q), L[*i].s, L[*i].len);
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "line %zu: '%s' in added file '%s' does not start with '+' "
                                 "(every line of an added file must)",
                                 *i + 1, q, op->display);
        }
    }
    return 0;
}

/* After a delete's header at *i: blank lines only, up to the next file header. */
static int parse_delete_body(struct op *op, const struct span *L, size_t *i, size_t end,
                             struct sbx_error *err)
{
    for ((*i)++; *i < end && !trim(L[*i].s, L[*i].len).len; (*i)++)
        ;
    if (*i < end && !is_file_header(trim(L[*i].s, L[*i].len)))
        return sbx_error_set(err, SBX_E_PARSE, 0, "line %zu: delete of '%s' must not have a body",
                             *i + 1, op->display);
    return 0;
}

/* After an update's header at *i: an optional '*** Move to:', then the hunks. */
static int parse_update(struct sbx_patch *p, struct op *op, const struct span *L, size_t *i,
                        size_t end, const struct sbx_patch_options *opts,
                        const struct sbx_patch_limits *lim, struct sbx_error *err)
{
    int rc;
    (*i)++;
    if (*i < end) {
        struct span mt = trim(L[*i].s, L[*i].len);
        if (span_starts(mt, "*** Move to:")) {
            if ((rc = header_path(mt, "*** Move to:", *i + 1, opts, &op->move_to, &op->move_display,
                                  err)) < 0)
                return rc;
            (*i)++;
        }
    }
    return parse_update_body(p, op, L, i, end, 0, 1, lim, err);
}

/* The file operation whose header is line *i (before end): its kind, path and body; *i moves
 * past it. */
static int parse_op(struct sbx_patch *p, const struct span *L, size_t *i, size_t end,
                    const struct sbx_patch_options *opts, const struct sbx_patch_limits *lim,
                    struct sbx_error *err)
{
    static const struct {
        const char *marker;
        enum sbx_patch_kind kind;
    } heads[] = {{"*** Add File:", SBX_PATCH_ADD},
                 {"*** Delete File:", SBX_PATCH_DELETE},
                 {"*** Update File:", SBX_PATCH_UPDATE}};
    struct span t = trim(L[*i].s, L[*i].len);
    char q[200];
    int rc;
    for (size_t k = 0; k < SBX_ARRAY_LEN(heads); k++) {
        if (!span_starts(t, heads[k].marker))
            continue;
        struct op *op = new_op(p, lim, heads[k].kind, err);
        if (!op)
            return -SBX_E_TOOBIG;
        if ((rc = header_path(t, heads[k].marker, *i + 1, opts, &op->path, &op->display, err)) < 0)
            return rc;
        if (heads[k].kind == SBX_PATCH_ADD)
            return parse_add_body(op, L, i, end, err);
        if (heads[k].kind == SBX_PATCH_DELETE)
            return parse_delete_body(op, L, i, end, err);
        return parse_update(p, op, L, i, end, opts, lim, err);
    }
    quote(q, sizeof(q), t.s, t.len);
    return sbx_error_set(err, SBX_E_PARSE, 0,
                         "line %zu: expected '*** Add File: <path>', '*** Delete File: <path>' "
                         "or '*** Update File: <path>', not '%s'",
                         *i + 1, q);
}

int sbx_patch_parse(const char *text, size_t len, const struct sbx_patch_options *opts,
                    struct sbx_patch **out, struct sbx_error *err)
{
    struct sbx_patch_limits lim;
    struct sbx_patch *p = NULL;
    struct span *L = NULL;
    size_t n = 0, first, last = 0;
    int crlf, rc;

    limits_fill(&lim, opts ? &opts->limits : NULL);
    if (len > lim.max_patch_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "patch is larger than %zu bytes",
                             lim.max_patch_bytes);
    if (memchr(text, '\0', len))
        return sbx_error_set(err, SBX_E_PARSE, 0, "patch contains a NUL byte");
    for (first = 0; first < len && is_ws(text[first]); first++)
        ;
    if (first < len && (text[first] == '{' || text[first] == '['))
        return parse_json_text(text, len, opts, &lim, out, err);
    p = sbx_xcalloc(1, sizeof(*p));
    text = keep_text(p, text, len);
    if ((rc = split_lines(text, len, lim.max_line_bytes, &L, &n, &crlf, err)) < 0 ||
        (rc = patch_envelope(L, n, &first, &last, err)) < 0)
        goto out;
    for (size_t i = first + 1; i < last - 1;) {
        if (!trim(L[i].s, L[i].len).len)
            i++;
        else if ((rc = parse_op(p, L, &i, last - 1, opts, &lim, err)) < 0)
            goto out;
    }
    if (!p->n) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "patch has no file operations");
        goto out;
    }
    for (size_t k = 0; k < p->n; k++) {
        p->ops[k].crlf = crlf;
        p->ops[k].from_text = 1;
    }
    *out = p;
    p = NULL;
    rc = 0;
out:
    free(L);
    sbx_patch_free(p);
    return rc;
}

static const char *kind_name(enum sbx_patch_kind k)
{
    switch (k) {
    case SBX_PATCH_ADD:
        return "create_file";
    case SBX_PATCH_DELETE:
        return "delete_file";
    case SBX_PATCH_UPDATE:
        return "update_file";
    }
    return "unknown";
}

/* Parse a diff given on its own (Responses API operations): the whole file as "+" lines for
 * an add, the hunks for an update. */
static int parse_diff(struct sbx_patch *p, struct op *op, const char *text, size_t len,
                      const struct sbx_patch_limits *lim, struct sbx_error *err)
{
    struct span *L = NULL;
    size_t n = 0, i = 0;
    int crlf = 0, rc;
    const char *diff;

    if (memchr(text, '\0', len))
        return sbx_error_set(err, SBX_E_PARSE, 0, "diff of '%s' contains a NUL byte", op->display);
    diff = keep_text(p, text, len);
    if ((rc = split_lines(diff, len, lim->max_line_bytes, &L, &n, &crlf, err)) < 0)
        return rc;
    op->crlf = crlf;
    if (op->kind == SBX_PATCH_UPDATE) {
        rc = parse_update_body(p, op, L, &i, n, 0, 0, lim, err);
        goto out;
    }
    for (i = 0; i < n; i++) {
        if (L[i].len && L[i].s[0] == '+') {
            add_line(op, (struct span){L[i].s + 1, L[i].len - 1});
        } else if (!L[i].len) {
            add_line(op, L[i]);
        } else {
            char q[200];
            quote(q, sizeof(q), L[i].s, L[i].len);
            rc = sbx_error_set(err, SBX_E_PARSE, 0,
                               "line %zu: '%s' in the new file '%s' does not start with '+' "
                               "(every line of a created file must)",
                               i + 1, q, op->display);
            goto out;
        }
    }
    /* The operations form follows the Responses API's own tool: the "+" lines are joined with
     * line endings between them, so the file ends with one only when the diff ends with a bare
     * "+" line (that empty last line is the final newline). */
    if (op->nadd && L[n - 1].len == 1 && L[n - 1].s[0] == '+')
        op->nadd--;
    else if (op->nadd)
        op->no_final_eol = 1;
    rc = 0;
out:
    free(L);
    return rc;
}

static int op_from_spec(struct sbx_patch *p, const struct sbx_patch_op_spec *s,
                        const struct sbx_patch_options *opts, const struct sbx_patch_limits *lim,
                        struct sbx_error *err)
{
    struct op *op;
    int rc;

    if (s->kind != SBX_PATCH_ADD && s->kind != SBX_PATCH_DELETE && s->kind != SBX_PATCH_UPDATE)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown operation type %d", (int)s->kind);
    if (!s->path)
        return sbx_error_set(err, SBX_E_PARSE, 0, "missing path");
    if (!(op = new_op(p, lim, s->kind, err)))
        return -SBX_E_TOOBIG;
    if ((rc = norm_path((struct span){s->path, strlen(s->path)}, opts, &op->path, &op->display,
                        err)) < 0)
        return rc;
    if (s->kind == SBX_PATCH_DELETE)
        return 0;
    if (s->kind == SBX_PATCH_UPDATE && s->move_to) {
        if ((rc = norm_path((struct span){s->move_to, strlen(s->move_to)}, opts, &op->move_to,
                            &op->move_display, err)) < 0) {
            sbx_error_prefix(err, "move_to");
            return rc;
        }
    }
    if (!s->diff)
        return sbx_error_set(err, SBX_E_PARSE, 0, "%s of '%s' has no diff", kind_name(s->kind),
                             op->display);
    return parse_diff(p, op, s->diff, s->diff_len, lim, err);
}

int sbx_patch_from_ops(const struct sbx_patch_op_spec *ops, size_t n,
                       const struct sbx_patch_options *opts, struct sbx_patch **out,
                       struct sbx_error *err)
{
    struct sbx_patch_limits lim;
    struct sbx_patch *p = NULL;
    size_t total = 0;
    int rc;

    limits_fill(&lim, opts ? &opts->limits : NULL);
    if (!n)
        return sbx_error_set(err, SBX_E_PARSE, 0, "no operations to apply");
    if (n > lim.max_files)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "patch touches more than %zu files",
                             lim.max_files);
    for (size_t i = 0; i < n; i++) {
        if (ops[i].diff && ops[i].diff_len > lim.max_patch_bytes - total)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "patch is larger than %zu bytes",
                                 lim.max_patch_bytes);
        total += ops[i].diff ? ops[i].diff_len : 0;
    }
    p = sbx_xcalloc(1, sizeof(*p));
    for (size_t i = 0; i < n; i++) {
        if ((rc = op_from_spec(p, &ops[i], opts, &lim, err)) < 0) {
            if (ops[i].path)
                sbx_error_prefix(err, "operation %zu (%s '%s')", i + 1, kind_name(ops[i].kind),
                                 ops[i].path);
            else
                sbx_error_prefix(err, "operation %zu", i + 1);
            goto out;
        }
    }
    *out = p;
    p = NULL;
    rc = 0;
out:
    sbx_patch_free(p);
    return rc;
}

static int kind_from_json(const char *type, enum sbx_patch_kind *kind)
{
    if (!strcmp(type, "create_file"))
        *kind = SBX_PATCH_ADD;
    else if (!strcmp(type, "update_file"))
        *kind = SBX_PATCH_UPDATE;
    else if (!strcmp(type, "delete_file"))
        *kind = SBX_PATCH_DELETE;
    else
        return -1;
    return 0;
}

int sbx_patch_from_json(const json_t *v, const struct sbx_patch_options *opts,
                        struct sbx_patch **out, struct sbx_error *err)
{
    struct sbx_patch_op_spec *specs = NULL;
    const json_t *list = v;
    json_t *inner = NULL;
    size_t n = 0;
    int rc;

    if (json_is_object(v)) {
        if ((rc = sbx_json_get_array(v, "operations", 0, &inner, err)) < 0)
            return rc;
        if (inner) {
            list = inner;
        } else {
            if ((rc = sbx_json_get_object(v, "operation", 0, &inner, err)) < 0)
                return rc;
            list = inner ? inner : v;
        }
    }
    if (json_is_object(list)) {
        n = 1;
    } else if (json_is_array(list)) {
        n = json_array_size(list);
    } else {
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "patch operations must be an object or an array, not %s",
                             sbx_json_typename(list));
    }
    if (!n)
        return sbx_error_set(err, SBX_E_PARSE, 0, "no operations to apply");
    specs = sbx_xcalloc(n, sizeof(*specs));
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_is_array(list) ? json_array_get(list, i) : list;
        const char *type = NULL;
        if (!json_is_object(o)) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "operation %zu must be an object, not %s",
                               i + 1, sbx_json_typename(o));
            goto out;
        }
        if ((rc = sbx_json_get_string(o, "type", 1, &type, err)) < 0 ||
            (rc = sbx_json_get_string(o, "path", 1, &specs[i].path, err)) < 0 ||
            (rc = sbx_json_get_string(o, "diff", 0, &specs[i].diff, err)) < 0 ||
            (rc = sbx_json_get_string(o, "move_to", 0, &specs[i].move_to, err)) < 0) {
            sbx_error_prefix(err, "operation %zu", i + 1);
            goto out;
        }
        if (kind_from_json(type, &specs[i].kind) < 0) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0,
                               "operation %zu: type must be 'create_file', 'update_file' or "
                               "'delete_file', not '%s'",
                               i + 1, type);
            goto out;
        }
        if (specs[i].diff)
            specs[i].diff_len = strlen(specs[i].diff);
    }
    rc = sbx_patch_from_ops(specs, n, opts, out, err);
out:
    free(specs);
    return rc;
}

/* The reference's tool reads input that starts with '{' or '[' as JSON operations. */
static int parse_json_text(const char *text, size_t len, const struct sbx_patch_options *opts,
                           const struct sbx_patch_limits *lim, struct sbx_patch **out,
                           struct sbx_error *err)
{
    struct sbx_json_limits jl = {lim->max_patch_bytes, 16};
    json_t *v = NULL;
    int rc = sbx_json_parse(text, len, &jl, &v, err);
    if (rc < 0) {
        sbx_error_prefix(err, "patch operations (JSON)");
        return rc;
    }
    rc = sbx_patch_from_json(v, opts, out, err);
    json_decref(v);
    return rc;
}

size_t sbx_patch_count(const struct sbx_patch *p)
{
    return p->n;
}

enum sbx_patch_kind sbx_patch_op(const struct sbx_patch *p, size_t i, const char **path,
                                 const char **move_to)
{
    const struct op *op = &p->ops[i];
    if (path)
        *path = op->path;
    if (move_to)
        *move_to = op->move_to;
    return op->kind;
}

/* ---- applying hunks to one file ------------------------------------------------------------ */

struct fline {
    const char *s;
    size_t len;
    unsigned char cr; /* the line ends (or, if last and unterminated, would end) in "\r\n" */
};

struct ftext {
    struct fline *v;
    size_t n, alloc;
    int final_nl;
    unsigned char dominant_cr;
};

static void ftext_push(struct ftext *t, const char *s, size_t len, unsigned char cr)
{
    t->v = grow(t->v, &t->alloc, t->n + 1, sizeof(*t->v));
    t->v[t->n++] = (struct fline){s, len, cr};
}

/* Lines of a file without the phantom empty line after a final newline. An empty file counts
 * as ending in a newline, so lines added to it end with one. A file without any line ending
 * takes the patch's (patch_cr). */
static void split_file(const char *data, size_t len, int patch_cr, struct ftext *t)
{
    size_t start = 0, ncr = 0, nlf = 0;
    memset(t, 0, sizeof(*t));
    t->final_nl = 1;
    while (start < len) {
        const char *nl = memchr(data + start, '\n', len - start);
        if (!nl) {
            ftext_push(t, data + start, len - start, 0);
            t->final_nl = 0;
            break;
        }
        size_t end = (size_t)(nl - data), l = end - start;
        unsigned char cr = l && data[end - 1] == '\r';
        if (cr) {
            l--;
            ncr++;
        } else {
            nlf++;
        }
        ftext_push(t, data + start, l, cr);
        start = end + 1;
    }
    t->dominant_cr = ncr + nlf ? ncr > nlf : patch_cr != 0;
    if (!t->final_nl)
        t->v[t->n - 1].cr = t->dominant_cr;
}

/* Matching levels, tried in order: exact, trailing whitespace ignored, surrounding whitespace
 * ignored (the reference's three), then also typographic punctuation folded to ASCII. */
#define LEVELS 4

static struct span level_map(const char *s, size_t len, int level)
{
    if (level == 0)
        return (struct span){s, len};
    if (level == 1)
        return rtrim(s, len);
    return trim(s, len);
}

/* Next character of s[*i..n) for level 3: Unicode dashes, quotes and spaces that models and
 * editors swap for their ASCII forms are folded to them. An invalid byte stands for itself. */
static unsigned long fold_next(const unsigned char *s, size_t n, size_t *i)
{
    unsigned long c = s[*i];
    size_t l = 1;
    if (c >= 0xC2 && c <= 0xDF && *i + 1 < n && (s[*i + 1] & 0xC0) == 0x80) {
        c = (c & 0x1F) << 6 | (s[*i + 1] & 0x3F);
        l = 2;
    } else if (c >= 0xE0 && c <= 0xEF && *i + 2 < n && (s[*i + 1] & 0xC0) == 0x80 &&
               (s[*i + 2] & 0xC0) == 0x80) {
        c = (c & 0x0F) << 12 | (unsigned long)(s[*i + 1] & 0x3F) << 6 | (s[*i + 2] & 0x3F);
        l = 3;
    } else if (c >= 0x80) {
        c |= 0x80000000UL; /* a lone byte: never equal to a decoded character */
    }
    *i += l;
    if ((c >= 0x2010 && c <= 0x2015) || c == 0x2212)
        return '-';
    if (c >= 0x2018 && c <= 0x201B)
        return '\'';
    if (c >= 0x201C && c <= 0x201F)
        return '"';
    if (c == 0xA0 || (c >= 0x2002 && c <= 0x200A) || c == 0x202F || c == 0x205F || c == 0x3000)
        return ' ';
    return c;
}

static int fold_eq(struct span x, struct span y)
{
    size_t i = 0, j = 0;
    const unsigned char *a = (const unsigned char *)x.s, *b = (const unsigned char *)y.s;
    while (i < x.len && j < y.len)
        if (fold_next(a, x.len, &i) != fold_next(b, y.len, &j))
            return 0;
    return i == x.len && j == y.len;
}

static int line_eq(const char *a, size_t alen, const char *b, size_t blen, int level)
{
    struct span x = level_map(a, alen, level), y = level_map(b, blen, level);
    if (level == 3)
        return fold_eq(x, y);
    return x.len == y.len && memcmp(x.s, y.s, x.len) == 0;
}

static int ctx_at(const struct ftext *t, size_t pos, const struct span *ctx, size_t m, int level)
{
    if (pos > t->n || m > t->n - pos)
        return 0;
    for (size_t k = 0; k < m; k++)
        if (!line_eq(t->v[pos + k].s, t->v[pos + k].len, ctx[k].s, ctx[k].len, level))
            return 0;
    return 1;
}

/* Find ctx[0..m) at or after from, level by level. With eof, the end of the file is tried
 * first. */
static int find_ctx(const struct ftext *t, const struct span *ctx, size_t m, size_t from, int eof,
                    size_t *pos, int *level)
{
    if (eof && m <= t->n && t->n - m >= from) {
        for (int lv = 0; lv < LEVELS; lv++) {
            if (ctx_at(t, t->n - m, ctx, m, lv)) {
                *pos = t->n - m;
                *level = lv;
                return 1;
            }
        }
    }
    for (int lv = 0; lv < LEVELS; lv++) {
        for (size_t i = from; i + m <= t->n; i++) {
            if (ctx_at(t, i, ctx, m, lv)) {
                *pos = i;
                *level = lv;
                return 1;
            }
        }
    }
    return 0;
}

static int find_line(const struct ftext *t, struct span a, size_t from, size_t to, size_t *pos)
{
    for (int lv = 0; lv < LEVELS; lv++) {
        for (size_t i = from; i < to; i++) {
            if (line_eq(t->v[i].s, t->v[i].len, a.s, a.len, lv)) {
                *pos = i;
                return 1;
            }
        }
    }
    return 0;
}

/* The Agents SDK's words for the two ways a hunk fails to match (its apply_diff raises
 * "Invalid Anchor ..." and "Invalid Context ..."), kept in sbx's messages so that code and tests
 * written against the SDK can still tell the cases apart. */
#define PATCH_SDK_ANCHOR  "Invalid Anchor"
#define PATCH_SDK_CONTEXT "Invalid Context"

/* Explain why ctx was not found: the position after from where the longest prefix of ctx
 * matches (ignoring whitespace), and the first line that then differs. */
static int explain_mismatch(const struct ftext *t, const struct span *ctx, size_t m, size_t from,
                            const char *verb, const char *path, size_t hunkno,
                            struct sbx_error *err)
{
    size_t best = 0, best_pos = 0;
    char want[200], have[200];
    for (size_t i = from; i < t->n; i++) {
        size_t k = 0;
        while (k < m && i + k < t->n &&
               line_eq(t->v[i + k].s, t->v[i + k].len, ctx[k].s, ctx[k].len, LEVELS - 1))
            k++;
        if (k > best) {
            best = k;
            best_pos = i;
        }
    }
    if (!best) {
        size_t at;
        quote(want, sizeof(want), ctx[0].s, ctx[0].len);
        if (from && find_line(t, ctx[0], 0, from, &at))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "cannot %s '%s': hunk %zu does not match (" PATCH_SDK_CONTEXT
                                 "): the line '%s' was not "
                                 "found after line %zu (it is at line %zu: hunks must follow the "
                                 "order of the file)",
                                 verb, path, hunkno, want, from, at + 1);
        if (from)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "cannot %s '%s': hunk %zu does not match (" PATCH_SDK_CONTEXT
                                 "): the line '%s' was not "
                                 "found after line %zu",
                                 verb, path, hunkno, want, from);
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "cannot %s '%s': hunk %zu does not match (" PATCH_SDK_CONTEXT
                             "): the line '%s' was not "
                             "found",
                             verb, path, hunkno, want);
    }
    quote(want, sizeof(want), ctx[best].s, ctx[best].len);
    if (best_pos + best >= t->n)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "cannot %s '%s': hunk %zu does not match (" PATCH_SDK_CONTEXT
                             "): the file ends at line %zu, "
                             "the patch expects '%s'",
                             verb, path, hunkno, t->n, want);
    const struct fline *l = &t->v[best_pos + best];
    quote(have, sizeof(have), l->s, l->len);
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "cannot %s '%s': hunk %zu does not match (" PATCH_SDK_CONTEXT
                         "): line %zu is '%s', the patch "
                         "expects '%s'",
                         verb, path, hunkno, best_pos + best + 1, have, want);
}

/* Apply op's hunks to old[0..old_len) into out (limited). */
static int apply_hunks(const struct op *op, const char *old, size_t old_len, struct sbx_buf *out,
                       size_t *fuzzy, struct sbx_error *err)
{
    struct ftext t, res;
    struct span *ctx = NULL;
    size_t cursor = 0, done = 0, nfuzzy = 0;
    int rc = 0;
    char q[200];
    const char *verb = "update";

    split_file(old, old_len, op->crlf, &t);
    memset(&res, 0, sizeof(res));
    for (size_t hi = 0; hi < op->nhunks; hi++) {
        const struct hunk *h = &op->hunks[hi];
        size_t m = 0, pos = 0, nlines = h->n;
        int level = 0;

        for (size_t ai = 0; ai < h->nanchors; ai++) {
            size_t at;
            if (find_line(&t, h->anchors[ai], cursor, t.n, &at)) {
                cursor = at + 1;
            } else if (!(ai == 0 && find_line(&t, h->anchors[ai], 0, cursor, &at)) &&
                       h->nmarkers > 1) {
                quote(q, sizeof(q), h->anchors[ai].s, h->anchors[ai].len);
                rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                   "cannot %s '%s': hunk %zu does not match (" PATCH_SDK_ANCHOR
                                   "): the line '%s' of its '@@' header was not found",
                                   verb, op->display, hi + 1, q);
                goto out;
            }
        }
        ctx = sbx_xrealloc(ctx, (h->n + 1) * sizeof(*ctx));
        for (size_t k = 0; k < h->n; k++)
            if (h->lines[k].op != '+')
                ctx[m++] = (struct span){h->lines[k].s, h->lines[k].len};
        if (!m) {
            /* Codex appends an unanchored first insertion to the file (models trained on it
             * write "@@ +lines" to add at the end); the operations form follows the SDK's
             * differ, which inserts at the cursor. */
            int append = h->eof || (op->from_text && hi == 0 && !h->nanchors);
            pos = append ? t.n : cursor;
        } else if (!find_ctx(&t, ctx, m, cursor, h->eof, &pos, &level)) {
            /* A trailing empty context line often stands for the final newline. */
            size_t m2 = m, n2 = h->n;
            while (m2 > 1 && n2 && h->lines[n2 - 1].op == ' ' && !h->lines[n2 - 1].len) {
                m2--;
                n2--;
            }
            if (m2 == m || !find_ctx(&t, ctx, m2, cursor, h->eof, &pos, &level)) {
                rc = explain_mismatch(&t, ctx, m, cursor, verb, op->display, hi + 1, err);
                goto out;
            }
            m = m2;
            nlines = n2;
        }
        if (level)
            nfuzzy++;
        for (size_t k = done; k < pos; k++)
            ftext_push(&res, t.v[k].s, t.v[k].len, t.v[k].cr);
        size_t p = pos;
        /* Lines replacing removed ones take the ending of the last line removed (a CRLF line
         * in a mixed file stays CRLF, as Codex does); other new lines the dominant one. */
        unsigned char new_cr = t.dominant_cr;
        for (size_t k = 0; k < nlines; k++) {
            const struct pline *l = &h->lines[k];
            if (l->op == '+') {
                ftext_push(&res, l->s, l->len, new_cr);
            } else {
                if (l->op == ' ') {
                    ftext_push(&res, t.v[p].s, t.v[p].len, t.v[p].cr);
                    new_cr = t.dominant_cr;
                } else {
                    new_cr = t.v[p].cr;
                }
                p++;
            }
        }
        done = pos + m;
        cursor = done;
    }
    for (size_t k = done; k < t.n; k++)
        ftext_push(&res, t.v[k].s, t.v[k].len, t.v[k].cr);
    for (size_t k = 0; k < res.n; k++) {
        if ((rc = sbx_buf_add(out, res.v[k].s, res.v[k].len, err)) < 0)
            goto out;
        if (k + 1 < res.n || t.final_nl) {
            if ((rc = sbx_buf_add(out, res.v[k].cr ? "\r\n" : "\n", res.v[k].cr ? 2 : 1, err)) < 0)
                goto out;
        }
    }
    if (fuzzy)
        *fuzzy += nfuzzy;
out:
    free(ctx);
    free(t.v);
    free(res.v);
    return rc;
}

static int build_added(const struct op *op, struct sbx_buf *out, struct sbx_error *err)
{
    int rc;
    for (size_t k = 0; k < op->nadd; k++) {
        if ((rc = sbx_buf_add(out, op->add[k].s, op->add[k].len, err)) < 0)
            return rc;
        if (k + 1 == op->nadd && op->no_final_eol)
            break;
        if ((rc = sbx_buf_adds(out, op->crlf ? "\r\n" : "\n", err)) < 0)
            return rc;
    }
    return 0;
}

int sbx_patch_apply_diff(const char *old, size_t old_len, const char *diff, size_t diff_len,
                         const char *path, const struct sbx_patch_limits *lim_in, char **out,
                         size_t *out_len, size_t *fuzzy, struct sbx_error *err)
{
    struct sbx_patch_limits lim;
    struct sbx_patch *p = sbx_xcalloc(1, sizeof(*p));
    struct op *op;
    struct sbx_buf b;
    size_t fz = 0;
    int rc;

    limits_fill(&lim, lim_in);
    sbx_buf_init(&b, lim.max_file_bytes);
    if (!path)
        path = "file";
    if (old_len > lim.max_file_bytes) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is larger than %zu bytes", path,
                           lim.max_file_bytes);
        goto out;
    }
    if (diff_len > lim.max_patch_bytes) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "patch is larger than %zu bytes",
                           lim.max_patch_bytes);
        goto out;
    }
    op = new_op(p, &lim, SBX_PATCH_UPDATE, err);
    op->path = sbx_xstrdup(path);
    op->display = sbx_xstrdup(path);
    if ((rc = parse_diff(p, op, diff, diff_len, &lim, err)) < 0)
        goto out;
    if ((rc = apply_hunks(op, old, old_len, &b, &fz, err)) < 0)
        goto out;
    if (fuzzy)
        *fuzzy = fz;
    *out = sbx_buf_detach(&b, out_len);
out:
    sbx_buf_release(&b);
    sbx_patch_free(p);
    return rc;
}

/* ---- applying a whole patch: in-memory view, then one commit ------------------------------ */

struct vfile {
    char *path;
    enum sbx_patch_file_kind orig;
    int present;      /* a regular file is there in the patched view */
    int have_content; /* content holds it */
    int dirty;
    unsigned mode; /* for the commit; 0 = keep the existing file's */
    struct sbx_buf content;
};

struct view {
    struct sbx_patch_fs *fs;
    const struct sbx_patch_limits *lim;
    struct vfile *v;
    size_t n, alloc;
};

static int vlookup(struct view *w, const char *path, struct vfile **out, struct sbx_error *err)
{
    for (size_t i = 0; i < w->n; i++) {
        if (!strcmp(w->v[i].path, path)) {
            *out = &w->v[i];
            return 0;
        }
    }
    enum sbx_patch_file_kind kind = SBX_PATCH_FILE_NONE;
    int rc = w->fs->ops->exists(w->fs, path, &kind, err);
    if (rc < 0)
        return rc;
    w->v = grow(w->v, &w->alloc, w->n + 1, sizeof(*w->v));
    struct vfile *f = &w->v[w->n++];
    f->path = sbx_xstrdup(path);
    f->orig = kind;
    f->present = kind == SBX_PATCH_FILE_REGULAR;
    sbx_buf_init(&f->content, w->lim->max_file_bytes);
    *out = f;
    return 0;
}

static const char *kind_text(enum sbx_patch_file_kind k)
{
    switch (k) {
    case SBX_PATCH_FILE_DIR:
        return "it is a directory";
    case SBX_PATCH_FILE_SYMLINK:
        return "it is a symbolic link";
    case SBX_PATCH_FILE_OTHER:
        return "it is not a regular file";
    case SBX_PATCH_FILE_NONE:
    case SBX_PATCH_FILE_REGULAR:
        break;
    }
    return "no such file";
}

/* The file must be there (in the patched view) to update or delete it. */
static int need_present(struct vfile *f, const char *verb, const char *display,
                        struct sbx_error *err)
{
    if (f->present)
        return 0;
    if (f->orig == SBX_PATCH_FILE_NONE || f->orig == SBX_PATCH_FILE_REGULAR)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "cannot %s '%s': no such file", verb, display);
    return sbx_error_set(err, SBX_E_INVAL, 0, "cannot %s '%s': %s", verb, display,
                         kind_text(f->orig));
}

static int load(struct view *w, struct vfile *f, const char *display, struct sbx_error *err)
{
    unsigned mode = 0;
    if (f->have_content)
        return 0;
    int rc = w->fs->ops->read(w->fs, f->path, w->lim->max_file_bytes, &f->content, &mode, err);
    if (rc < 0) {
        sbx_error_prefix(err, "cannot read '%s'", display);
        return rc;
    }
    f->have_content = 1;
    f->mode = mode;
    return 0;
}

/* A file may be written at path only if nothing in the way is a file: no parent is a file
 * (in the patched view or on disk) and no file of the view lies below path. */
static int check_writable(struct view *w, const char *path, const char *display,
                          struct sbx_error *err)
{
    size_t plen = strlen(path);
    for (size_t i = 0; i < w->n; i++) {
        const struct vfile *f = &w->v[i];
        size_t l = strlen(f->path);
        if (f->present && l > plen && !strncmp(f->path, path, plen) && f->path[plen] == '/')
            return sbx_error_set(err, SBX_E_INVAL, 0, "cannot write '%s': it is a directory",
                                 display);
    }
    char *pre = sbx_xstrdup(path);
    int rc = 0;
    for (char *s = strchr(pre, '/'); s; s = strchr(s + 1, '/')) {
        struct vfile *f;
        *s = '\0';
        if ((rc = vlookup(w, pre, &f, err)) < 0) {
            sbx_error_prefix(err, "cannot write '%s'", display);
            break;
        }
        /* vlookup may have moved the array; f stays valid until the next lookup. */
        if (f->present || f->orig == SBX_PATCH_FILE_REGULAR || f->orig == SBX_PATCH_FILE_OTHER) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "cannot write '%s': '%s' is not a directory",
                               display, pre);
            break;
        }
        *s = '/';
    }
    free(pre);
    return rc;
}

static int do_op(struct view *w, const struct op *op, struct sbx_patch_result *res,
                 struct sbx_buf *summary, struct sbx_error *err)
{
    struct vfile *f, *g;
    int rc;
    if ((rc = vlookup(w, op->path, &f, err)) < 0)
        return rc;
    switch (op->kind) {
    case SBX_PATCH_ADD:
        if (!f->present && f->orig != SBX_PATCH_FILE_NONE && f->orig != SBX_PATCH_FILE_REGULAR)
            return sbx_error_set(err, SBX_E_INVAL, 0, "cannot create '%s': %s", op->display,
                                 kind_text(f->orig));
        if ((rc = check_writable(w, op->path, op->display, err)) < 0)
            return rc;
        if ((rc = vlookup(w, op->path, &f, err)) < 0)
            return rc;
        sbx_buf_reset(&f->content);
        if ((rc = build_added(op, &f->content, err)) < 0) {
            sbx_error_prefix(err, "cannot create '%s'", op->display);
            return rc;
        }
        f->present = f->have_content = f->dirty = 1;
        f->mode = 0;
        res->added++;
        return sbx_buf_addf(summary, err, "Created %s\n", op->display);
    case SBX_PATCH_DELETE:
        if ((rc = need_present(f, "delete", op->display, err)) < 0)
            return rc;
        f->present = 0;
        f->dirty = 1;
        f->have_content = 0;
        sbx_buf_release(&f->content);
        res->deleted++;
        return sbx_buf_addf(summary, err, "Deleted %s\n", op->display);
    case SBX_PATCH_UPDATE:
        break;
    }
    if ((rc = need_present(f, "update", op->display, err)) < 0)
        return rc;
    if ((rc = load(w, f, op->display, err)) < 0)
        return rc;
    if (memchr(f->content.data, '\0', f->content.len))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "cannot update '%s': it is a binary file (it contains NUL bytes)",
                             op->display);
    struct sbx_buf next;
    sbx_buf_init(&next, w->lim->max_file_bytes);
    if ((rc = apply_hunks(op, f->content.data, f->content.len, &next, &res->fuzzy_hunks, err)) <
        0) {
        sbx_buf_release(&next);
        if (rc == -SBX_E_TOOBIG)
            sbx_error_prefix(err, "cannot update '%s'", op->display);
        return rc;
    }
    int moving = op->move_to && strcmp(op->move_to, op->path);
    if (!moving) {
        sbx_buf_release(&f->content);
        f->content = next;
        f->dirty = 1;
        res->updated++;
        return sbx_buf_addf(summary, err, "Updated %s\n", op->display);
    }
    unsigned mode = f->mode;
    if ((rc = vlookup(w, op->move_to, &g, err)) < 0)
        goto fail;
    if (!g->present && g->orig != SBX_PATCH_FILE_NONE && g->orig != SBX_PATCH_FILE_REGULAR) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "cannot move '%s' to '%s': %s", op->display,
                           op->move_display, kind_text(g->orig));
        goto fail;
    }
    if ((rc = check_writable(w, op->move_to, op->move_display, err)) < 0)
        goto fail;
    /* Lookups may have grown the array: find both again. */
    if ((rc = vlookup(w, op->path, &f, err)) < 0 || (rc = vlookup(w, op->move_to, &g, err)) < 0)
        goto fail;
    sbx_buf_release(&g->content);
    g->content = next;
    g->present = g->have_content = g->dirty = 1;
    g->mode = mode ? mode : 0644;
    f->present = f->have_content = 0;
    f->dirty = 1;
    sbx_buf_release(&f->content);
    res->updated++;
    res->moved++;
    return sbx_buf_addf(summary, err, "Updated %s\nMoved %s to %s\n", op->display, op->display,
                        op->move_display);
fail:
    sbx_buf_release(&next);
    return rc;
}

void sbx_patch_result_release(struct sbx_patch_result *r)
{
    if (!r)
        return;
    free(r->summary);
    memset(r, 0, sizeof(*r));
}

int sbx_patch_apply(const struct sbx_patch *p, struct sbx_patch_fs *fs,
                    const struct sbx_patch_options *opts, struct sbx_patch_result *res,
                    struct sbx_error *err)
{
    struct sbx_patch_limits lim;
    struct view w;
    struct sbx_patch_result r;
    struct sbx_buf summary;
    struct sbx_patch_change *changes = NULL;
    size_t nch = 0;
    int rc = 0;

    limits_fill(&lim, opts ? &opts->limits : NULL);
    memset(&w, 0, sizeof(w));
    memset(&r, 0, sizeof(r));
    w.fs = fs;
    w.lim = &lim;
    sbx_buf_init(&summary, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < p->n; i++) {
        if ((rc = do_op(&w, &p->ops[i], &r, &summary, err)) < 0) {
            /* Tell the model that nothing was written, in the same message. */
            if (err) {
                char msg[SBX_ERROR_MSG_MAX];
                memcpy(msg, err->msg, sizeof(msg));
                sbx_error_set(err, err->code, err->sys_errno, "%s (no file was changed)", msg);
            }
            goto out;
        }
    }
    changes = sbx_xcalloc(w.n ? w.n : 1, sizeof(*changes));
    for (size_t i = 0; i < w.n; i++) {
        struct vfile *f = &w.v[i];
        if (!f->dirty)
            continue;
        if (f->present)
            changes[nch++] =
                    (struct sbx_patch_change){f->path, f->content.data, f->content.len, f->mode};
        else if (f->orig == SBX_PATCH_FILE_REGULAR)
            changes[nch++] = (struct sbx_patch_change){f->path, NULL, 0, 0};
    }
    if (nch && (rc = fs->ops->commit(fs, changes, nch, err)) < 0)
        goto out;
    if (summary.len)
        sbx_buf_setlen(&summary, summary.len - 1); /* drop the last '\n' */
    r.summary = sbx_buf_detach(&summary, NULL);
    *res = r;
    rc = 0;
out:
    free(changes);
    for (size_t i = 0; i < w.n; i++) {
        sbx_buf_release(&w.v[i].content);
        free(w.v[i].path);
    }
    free(w.v);
    sbx_buf_release(&summary);
    return rc;
}

int sbx_patch_apply_text(const char *text, size_t len, struct sbx_patch_fs *fs,
                         const struct sbx_patch_options *opts, struct sbx_patch_result *res,
                         struct sbx_error *err)
{
    struct sbx_patch *p = NULL;
    int rc = sbx_patch_parse(text, len, opts, &p, err);
    if (rc == 0)
        rc = sbx_patch_apply(p, fs, opts, res, err);
    sbx_patch_free(p);
    return rc;
}
