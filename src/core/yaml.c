/* YAML to JSON over libyaml's event parser.
 *
 * The tree is built with an explicit stack of open containers, never by recursion, so the
 * nesting limit is checked before a container is opened and deep input cannot exhaust the C
 * stack. Anchored nodes are remembered with their node count and height; an alias is expanded
 * only after the whole-document node budget and the depth limit have been checked against those
 * numbers, which is what stops an alias bomb before it allocates anything. */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl-yaml.h"
#include "core/grow.h"
#include "sbx/fs.h"
#include "sbx/path.h"
#include "sbx/yaml.h"

#define DEFAULT_MAX_NODES ((size_t)1000000)
#define TAG_PREFIX        "tag:yaml.org,2002:"

struct frame {
    json_t *c;    /* the open array or object */
    char *key;    /* object: the key waiting for its value, or NULL */
    char *anchor; /* anchor to register when the container closes, or NULL */
    size_t nodes; /* nodes in this subtree, aliases counted expanded */
    int height;   /* 1 + the height of the tallest child */
};

struct anchor {
    json_t *v; /* owned reference */
    size_t nodes;
    int height;
};

struct loader {
    size_t max_nodes;
    int max_depth;
    struct frame *stack; /* grows up to max_depth entries */
    int depth;
    size_t stack_cap;
    size_t total;         /* nodes so far, aliases counted expanded */
    json_t *anchor_index; /* anchor name -> index into anchors */
    struct anchor *anchors;
    size_t nanchors, anchors_cap;
    json_t *root;
    int documents;
    locale_t c_locale;
};

/* A short quoted form of s for messages: long keys are cut, control bytes shown as '?'. */
static const char *shorten(const char *s, char buf[72])
{
    size_t n = 0;
    for (; s[n] && n < 64; n++)
        buf[n] = (unsigned char)s[n] < 0x20 ? '?' : s[n];
    if (s[n]) {
        memcpy(buf + 61, "...", 3);
        n = 64;
    }
    buf[n] = '\0';
    return buf;
}

static int at(struct sbx_error *err, enum sbx_errcode code, const yaml_mark_t *m, const char *what,
              const char *subject)
{
    char b[72];
    if (subject)
        return sbx_error_set(err, code, 0, "yaml line %zu column %zu: %s '%s'", m->line + 1,
                             m->column + 1, what, shorten(subject, b));
    return sbx_error_set(err, code, 0, "yaml line %zu column %zu: %s", m->line + 1, m->column + 1,
                         what);
}

static int parser_error(const yaml_parser_t *p, const char *data, size_t len, struct sbx_error *err)
{
    const char *problem = p->problem ? p->problem : "malformed document";
    if (p->error == YAML_READER_ERROR) {
        /* the reader reports a byte offset, not a mark: count lines ourselves */
        size_t line = 1, col = 1;
        for (size_t i = 0; i < p->problem_offset && i < len; i++) {
            if (data[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "yaml line %zu column %zu: %s (invalid UTF-8 or control byte)", line,
                             col, problem);
    }
    if (p->error == YAML_MEMORY_ERROR)
        SBX_BUG("libyaml ran out of memory");
    const yaml_mark_t *m = &p->problem_mark;
    if (p->context)
        return sbx_error_set(err, SBX_E_PARSE, 0, "yaml line %zu column %zu: %s %s", m->line + 1,
                             m->column + 1, problem, p->context);
    return sbx_error_set(err, SBX_E_PARSE, 0, "yaml line %zu column %zu: %s", m->line + 1,
                         m->column + 1, problem);
}

/* Text of a scalar as a JSON string: valid UTF-8 without NUL (JSON keys cannot hold NUL and
 * the JSON side refuses it too). */
static int check_text(const yaml_event_t *ev, struct sbx_error *err)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (memchr(s, '\0', n))
        return at(err, SBX_E_INVAL, &ev->start_mark, "string contains a NUL character", NULL);
    if (!sbx_utf8_valid(s, n))
        return at(err, SBX_E_INVAL, &ev->start_mark, "string is not valid UTF-8", NULL);
    return 0;
}

static int all_in(const char *s, const char *set)
{
    return *s && strspn(s, set) == strlen(s);
}

/* YAML 1.2 core schema, integer forms: [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+. */
static int is_int(const char *s, int *base, const char **digits)
{
    if (s[0] == '0' && s[1] == 'o') {
        *base = 8;
        *digits = s + 2;
        return all_in(s + 2, "01234567");
    }
    if (s[0] == '0' && s[1] == 'x') {
        *base = 16;
        *digits = s + 2;
        return all_in(s + 2, "0123456789abcdefABCDEF");
    }
    *base = 10;
    *digits = s;
    return all_in(s[0] == '-' || s[0] == '+' ? s + 1 : s, "0123456789");
}

/* [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )? */
static int is_float(const char *s)
{
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    size_t lead = strspn(p, "0123456789");
    p += lead;
    if (*p == '.') {
        p++;
        size_t frac = strspn(p, "0123456789");
        if (!lead && !frac)
            return 0;
        p += frac;
    } else if (!lead) {
        return 0;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        size_t exp = strspn(p, "0123456789");
        if (!exp)
            return 0;
        p += exp;
    }
    return *p == '\0';
}

static int is_special_float(const char *s)
{
    const char *p = s[0] == '-' || s[0] == '+' ? s + 1 : s;
    return strcmp(p, ".inf") == 0 || strcmp(p, ".Inf") == 0 || strcmp(p, ".INF") == 0 ||
           strcmp(s, ".nan") == 0 || strcmp(s, ".NaN") == 0 || strcmp(s, ".NAN") == 0;
}

static int one_of(const char *s, const char *a, const char *b, const char *c)
{
    return strcmp(s, a) == 0 || strcmp(s, b) == 0 || strcmp(s, c) == 0;
}

enum want { WANT_ANY, WANT_NULL, WANT_BOOL, WANT_INT, WANT_FLOAT };

/* Resolve a plain scalar (or one tagged with a core type) to a JSON value. */
static int resolve(struct loader *L, const yaml_event_t *ev, enum want want, json_t **out,
                   struct sbx_error *err)
{
    const char *s = (const char *)ev->data.scalar.value;
    const yaml_mark_t *m = &ev->start_mark;
    if ((want == WANT_ANY || want == WANT_NULL) &&
        (s[0] == '\0' || strcmp(s, "~") == 0 || one_of(s, "null", "Null", "NULL"))) {
        *out = json_null();
        return 0;
    }
    if (want == WANT_ANY || want == WANT_BOOL) {
        if (one_of(s, "true", "True", "TRUE")) {
            *out = json_true();
            return 0;
        }
        if (one_of(s, "false", "False", "FALSE")) {
            *out = json_false();
            return 0;
        }
    }
    int base;
    const char *digits;
    if ((want == WANT_ANY || want == WANT_INT) && is_int(s, &base, &digits)) {
        errno = 0;
        char *end;
        long long v = strtoll(digits, &end, base);
        if (errno == ERANGE || *end)
            return at(err, SBX_E_INVAL, m, "integer out of the 64-bit range", s);
        *out = json_integer(v);
        return 0;
    }
    if ((want == WANT_ANY || want == WANT_FLOAT) && is_special_float(s))
        return at(err, SBX_E_INVAL, m, "infinity and NaN cannot be represented in JSON:", s);
    if ((want == WANT_ANY || want == WANT_FLOAT) && is_float(s)) {
        if (!L->c_locale) {
            L->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
            if (!L->c_locale)
                return sbx_error_errno(err, errno, "cannot create the C locale");
        }
        double d = strtod_l(s, NULL, L->c_locale);
        if (!isfinite(d))
            return at(err, SBX_E_INVAL, m, "number out of range", s);
        *out = json_real(d);
        return 0;
    }
    if (want == WANT_ANY) {
        *out = sbx_json_strn(s, ev->data.scalar.length);
        return 0;
    }
    static const char *const names[] = {"", "null", "boolean", "integer", "float"};
    char what[48];
    snprintf(what, sizeof(what), "value tagged %s is not a valid %s:", names[want], names[want]);
    return at(err, SBX_E_INVAL, m, what, s);
}

static int scalar_value(struct loader *L, const yaml_event_t *ev, json_t **out,
                        struct sbx_error *err)
{
    int rc = check_text(ev, err);
    if (rc < 0)
        return rc;
    const char *tag = (const char *)ev->data.scalar.tag;
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (!tag)
        return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? resolve(L, ev, WANT_ANY, out, err)
                                                                : (*out = sbx_json_strn(s, n), 0);
    if (strcmp(tag, "!") == 0 || strcmp(tag, TAG_PREFIX "str") == 0) {
        *out = sbx_json_strn(s, n);
        return 0;
    }
    static const struct {
        const char *name;
        enum want want;
    } tags[] = {{"null", WANT_NULL}, {"bool", WANT_BOOL}, {"int", WANT_INT}, {"float", WANT_FLOAT}};
    size_t plen = strlen(TAG_PREFIX);
    if (strncmp(tag, TAG_PREFIX, plen) == 0)
        for (size_t i = 0; i < SBX_ARRAY_LEN(tags); i++)
            if (strcmp(tag + plen, tags[i].name) == 0)
                return resolve(L, ev, tags[i].want, out, err);
    return at(err, SBX_E_INVAL, &ev->start_mark, "unsupported tag", tag);
}

static int count_node(struct loader *L, size_t nodes, const yaml_mark_t *m, struct sbx_error *err)
{
    if (nodes > L->max_nodes - L->total) {
        char what[96];
        snprintf(what, sizeof(what),
                 "document expands to more than %zu nodes (aliases counted expanded)",
                 L->max_nodes);
        return at(err, SBX_E_TOOBIG, m, what, NULL);
    }
    L->total += nodes;
    return 0;
}

static void register_anchor(struct loader *L, const char *name, json_t *v, size_t nodes, int height)
{
    json_t *idx = json_object_get(L->anchor_index, name);
    struct anchor *a;
    if (idx) {
        /* redefinition: later aliases refer to the newest node */
        a = &L->anchors[json_integer_value(idx)];
        json_decref(a->v);
    } else {
        SBX_ALLOC_GROW(L->anchors, L->nanchors + 1, L->anchors_cap);
        sbx_json_set(L->anchor_index, name, json_integer((json_int_t)L->nanchors));
        a = &L->anchors[L->nanchors++];
    }
    a->v = json_incref(v);
    a->nodes = nodes;
    a->height = height;
}

/* Attach a finished node (taken) to the open container or make it the root. */
static void attach(struct loader *L, json_t *v, size_t nodes, int height, const char *anchor)
{
    if (anchor)
        register_anchor(L, anchor, v, nodes, height);
    if (L->depth == 0) {
        if (L->root)
            SBX_BUG("second root node in one yaml document");
        L->root = v;
        return;
    }
    struct frame *top = &L->stack[L->depth - 1];
    if (json_is_array(top->c)) {
        sbx_json_append(top->c, v);
    } else {
        sbx_json_set(top->c, top->key, v);
        free(top->key);
        top->key = NULL;
    }
    top->nodes += nodes;
    if (height + 1 > top->height)
        top->height = height + 1;
}

/* Accept key as the next mapping key of the open object (checks duplicates). Takes key. */
static int set_key(struct loader *L, char *key, const yaml_mark_t *m, struct sbx_error *err)
{
    struct frame *top = &L->stack[L->depth - 1];
    if (json_object_get(top->c, key)) {
        int rc = at(err, SBX_E_INVAL, m, "duplicate key", key);
        free(key);
        return rc;
    }
    top->key = key;
    return 0;
}

static int expecting_key(const struct loader *L)
{
    if (L->depth == 0)
        return 0;
    const struct frame *top = &L->stack[L->depth - 1];
    return json_is_object(top->c) && !top->key;
}

static int on_scalar(struct loader *L, const yaml_event_t *ev, struct sbx_error *err)
{
    const char *anchor = (const char *)ev->data.scalar.anchor;
    int rc = count_node(L, 1, &ev->start_mark, err);
    if (rc < 0)
        return rc;
    if (expecting_key(L)) {
        rc = check_text(ev, err);
        if (rc < 0)
            return rc;
        /* keys keep their text: JSON keys are strings, so "1: x" has the key "1" */
        const char *s = (const char *)ev->data.scalar.value;
        if (anchor) {
            json_t *k = sbx_json_str(s);
            register_anchor(L, anchor, k, 1, 0);
            json_decref(k);
        }
        return set_key(L, sbx_xstrdup(s), &ev->start_mark, err);
    }
    json_t *v = NULL;
    rc = scalar_value(L, ev, &v, err);
    if (rc < 0)
        return rc;
    attach(L, v, 1, 0, anchor);
    return 0;
}

static int on_alias(struct loader *L, const yaml_event_t *ev, struct sbx_error *err)
{
    const char *name = (const char *)ev->data.alias.anchor;
    json_t *idx = json_object_get(L->anchor_index, name);
    if (!idx)
        return at(err, SBX_E_PARSE, &ev->start_mark, "alias to an unknown anchor", name);
    const struct anchor *a = &L->anchors[json_integer_value(idx)];
    if (expecting_key(L)) {
        if (!json_is_string(a->v))
            return at(err, SBX_E_INVAL, &ev->start_mark,
                      "an alias used as a mapping key must name a string:", name);
        int rc = count_node(L, 1, &ev->start_mark, err);
        if (rc < 0)
            return rc;
        return set_key(L, sbx_xstrdup(json_string_value(a->v)), &ev->start_mark, err);
    }
    int rc = count_node(L, a->nodes, &ev->start_mark, err);
    if (rc < 0)
        return rc;
    if (L->depth + a->height > L->max_depth) {
        char what[80];
        snprintf(what, sizeof(what), "alias nests deeper than the depth limit of %d", L->max_depth);
        return at(err, SBX_E_TOOBIG, &ev->start_mark, what, name);
    }
    json_t *copy = json_deep_copy(a->v);
    if (!copy)
        SBX_BUG("json_deep_copy failed");
    attach(L, copy, a->nodes, a->height, NULL);
    return 0;
}

static int on_start(struct loader *L, const yaml_event_t *ev, int is_map, struct sbx_error *err)
{
    const yaml_mark_t *m = &ev->start_mark;
    const char *tag =
            (const char *)(is_map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag);
    const char *anchor =
            (const char *)(is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor);
    if (expecting_key(L))
        return at(err, SBX_E_INVAL, m,
                  is_map ? "mapping key must be a scalar, not a mapping"
                         : "mapping key must be a scalar, not a sequence",
                  NULL);
    if (tag && strcmp(tag, "!") != 0 &&
        strcmp(tag, is_map ? TAG_PREFIX "map" : TAG_PREFIX "seq") != 0)
        return at(err, SBX_E_INVAL, m, "unsupported tag", tag);
    if (L->depth + 1 > L->max_depth) {
        char what[64];
        snprintf(what, sizeof(what), "nesting exceeds the depth limit of %d", L->max_depth);
        return at(err, SBX_E_TOOBIG, m, what, NULL);
    }
    int rc = count_node(L, 1, m, err);
    if (rc < 0)
        return rc;
    SBX_ALLOC_GROW(L->stack, (size_t)L->depth + 1, L->stack_cap);
    struct frame *f = &L->stack[L->depth++];
    memset(f, 0, sizeof(*f));
    f->c = is_map ? json_object() : json_array();
    if (!f->c)
        SBX_BUG("jansson allocation failed");
    f->anchor = anchor ? sbx_xstrdup(anchor) : NULL;
    f->nodes = 1;
    f->height = 1;
    return 0;
}

static void on_end(struct loader *L)
{
    struct frame f = L->stack[--L->depth];
    attach(L, f.c, f.nodes, f.height, f.anchor);
    free(f.anchor);
    free(f.key);
}

static void loader_release(struct loader *L)
{
    while (L->depth > 0) {
        struct frame *f = &L->stack[--L->depth];
        json_decref(f->c);
        free(f->key);
        free(f->anchor);
    }
    free(L->stack);
    for (size_t i = 0; i < L->nanchors; i++)
        json_decref(L->anchors[i].v);
    free(L->anchors);
    json_decref(L->anchor_index);
    json_decref(L->root);
    if (L->c_locale)
        freelocale(L->c_locale);
}

int sbx_yaml_parse(const char *data, size_t len, const struct sbx_yaml_limits *lim, json_t **out,
                   struct sbx_error *err)
{
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : SBX_JSON_DEFAULT_MAX_BYTES;
    if (len > max_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "yaml document of %zu bytes exceeds the limit of %zu bytes", len,
                             max_bytes);
    int lrc = sbx__yaml_load(err);
    if (lrc < 0)
        return lrc;
    struct loader L;
    memset(&L, 0, sizeof(L));
    L.max_depth = lim && lim->max_depth > 0 ? lim->max_depth : SBX_JSON_DEFAULT_MAX_DEPTH;
    L.max_nodes = lim && lim->max_nodes ? lim->max_nodes : DEFAULT_MAX_NODES;
    L.anchor_index = json_object();
    if (!L.anchor_index)
        SBX_BUG("jansson allocation failed");

    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        SBX_BUG("libyaml could not initialise a parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);

    int rc = 0, done = 0;
    while (!done && rc == 0) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = parser_error(&parser, data, len, err);
            break;
        }
        switch (ev.type) {
        case YAML_DOCUMENT_START_EVENT:
            if (++L.documents > 1)
                rc = at(err, SBX_E_INVAL, &ev.start_mark,
                        "more than one document (only one is allowed)", NULL);
            break;
        case YAML_SCALAR_EVENT:
            rc = on_scalar(&L, &ev, err);
            break;
        case YAML_ALIAS_EVENT:
            rc = on_alias(&L, &ev, err);
            break;
        case YAML_SEQUENCE_START_EVENT:
            rc = on_start(&L, &ev, 0, err);
            break;
        case YAML_MAPPING_START_EVENT:
            rc = on_start(&L, &ev, 1, err);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            on_end(&L);
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_NO_EVENT:
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (rc == 0) {
        /* an empty stream holds no document: treat it as null, like an empty document */
        *out = L.root ? L.root : json_null();
        L.root = NULL;
    }
    loader_release(&L);
    return rc;
}

static int looks_like_json(const char *name, const char *data, size_t len)
{
    if (name) {
        size_t n = strlen(name);
        if (n >= 5 && strcmp(name + n - 5, ".json") == 0)
            return 1;
    }
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            continue;
        return c == '{' || c == '[';
    }
    return 0;
}

int sbx_doc_parse(const char *name, const char *data, size_t len, const struct sbx_yaml_limits *lim,
                  json_t **out, struct sbx_error *err)
{
    int rc;
    if (looks_like_json(name, data, len)) {
        struct sbx_json_limits jl = {0, 0};
        if (lim) {
            jl.max_bytes = lim->max_bytes;
            jl.max_depth = lim->max_depth;
        }
        rc = sbx_json_parse(data, len, &jl, out, err);
    } else {
        rc = sbx_yaml_parse(data, len, lim, out, err);
    }
    if (rc < 0 && name)
        sbx_error_prefix(err, "'%s'", name);
    return rc;
}

int sbx_doc_load_file(const char *path, const struct sbx_yaml_limits *lim, json_t **out,
                      struct sbx_error *err)
{
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : SBX_JSON_DEFAULT_MAX_BYTES;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    int rc = sbx_fs_read_path(path, max_bytes, &b, err);
    if (rc == 0)
        rc = sbx_doc_parse(path, b.data, b.len, lim, out, err);
    sbx_buf_release(&b);
    return rc;
}
