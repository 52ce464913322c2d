/* Built-in tools that need no sandbox: small, harmless, deterministic where possible. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "sbx/json.h"
#include "sbx/time.h"

static int current_time_fn(const json_t *args, const struct sbx_tool_call *call,
                           struct sbx_tool_output *out, struct sbx_error *err)
{
    char ts[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), ts);
    return sbx_buf_adds(&out->text, ts, err);
}

static int put_number(struct sbx_buf *b, double v, struct sbx_error *err)
{
    if (!isfinite(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "the result is not a finite number");
    if (fabs(v) < 1e15 && v == (double)(long long)v)
        return sbx_buf_addf(b, err, "%.0f", v);
    return sbx_buf_addf(b, err, "%.15g", v);
}

static int add_fn(const json_t *args, const struct sbx_tool_call *call, struct sbx_tool_output *out,
                  struct sbx_error *err)
{
    double a = json_number_value(json_object_get(args, "a"));
    double b = json_number_value(json_object_get(args, "b"));
    return put_number(&out->text, a + b, err);
}

/* A recursive-descent evaluator: expr := term (('+'|'-') term)*, term := unary (('*'|'/'|'%')
 * unary)*, unary := ('-'|'+') unary | primary, primary := number | '(' expr ')'. */
struct calc {
    const char *s;
    size_t pos;
    int depth;
    struct sbx_error *err;
};

static void skip_ws(struct calc *c)
{
    while (c->s[c->pos] == ' ' || c->s[c->pos] == '\t')
        c->pos++;
}

static int calc_expr(struct calc *c, double *v);

static int calc_primary(struct calc *c, double *v)
{
    skip_ws(c);
    char ch = c->s[c->pos];
    if (ch == '(') {
        if (++c->depth > 64)
            return sbx_error_set(c->err, SBX_E_TOOBIG, 0, "expression nests too deeply");
        c->pos++;
        int rc = calc_expr(c, v);
        if (rc < 0)
            return rc;
        skip_ws(c);
        if (c->s[c->pos] != ')')
            return sbx_error_set(c->err, SBX_E_INVAL, 0, "expected ')' at offset %zu", c->pos);
        c->pos++;
        c->depth--;
        return 0;
    }
    if ((ch >= '0' && ch <= '9') || ch == '.') {
        char *end;
        *v = strtod(c->s + c->pos, &end);
        c->pos = (size_t)(end - c->s);
        return 0;
    }
    if (!ch)
        return sbx_error_set(c->err, SBX_E_INVAL, 0, "the expression ends too early");
    return sbx_error_set(c->err, SBX_E_INVAL, 0, "unexpected '%c' at offset %zu", ch, c->pos);
}

static int calc_unary(struct calc *c, double *v)
{
    skip_ws(c);
    char ch = c->s[c->pos];
    if (ch == '-' || ch == '+') {
        if (++c->depth > 64)
            return sbx_error_set(c->err, SBX_E_TOOBIG, 0, "expression nests too deeply");
        c->pos++;
        int rc = calc_unary(c, v);
        c->depth--;
        if (rc == 0 && ch == '-')
            *v = -*v;
        return rc;
    }
    return calc_primary(c, v);
}

/* x modulo y as C's fmod gives it (the sign of x, smaller than |y|), without libm, which sbx
 * does not load for this alone: y scaled by powers of two, from the largest not above |x| down
 * to y, taken off wherever it fits. Each subtraction is exact (t <= a < 2t), so the result is
 * fmod's exact one. y is neither zero nor NaN. */
static double calc_mod(double x, double y)
{
    if (!isfinite(x))
        return NAN;
    double a = fabs(x), m = fabs(y);
    if (isinf(m) || a < m)
        return x;
    double t = m;
    while (t * 2 <= a) /* t * 2 overflowing is inf, which a is not */
        t *= 2;
    for (; t >= m; t /= 2)
        if (a >= t)
            a -= t;
    return signbit(x) ? -a : a;
}

static int calc_term(struct calc *c, double *v)
{
    int rc = calc_unary(c, v);
    while (rc == 0) {
        skip_ws(c);
        char op = c->s[c->pos];
        if (op != '*' && op != '/' && op != '%')
            break;
        c->pos++;
        double r;
        if ((rc = calc_unary(c, &r)) < 0)
            break;
        if ((op == '/' || op == '%') && r == 0)
            return sbx_error_set(c->err, SBX_E_INVAL, 0, "division by zero");
        *v = op == '*' ? *v * r : op == '/' ? *v / r : calc_mod(*v, r);
    }
    return rc;
}

static int calc_expr(struct calc *c, double *v)
{
    int rc = calc_term(c, v);
    while (rc == 0) {
        skip_ws(c);
        char op = c->s[c->pos];
        if (op != '+' && op != '-')
            break;
        c->pos++;
        double r;
        if ((rc = calc_term(c, &r)) < 0)
            break;
        *v = op == '+' ? *v + r : *v - r;
    }
    return rc;
}

static int calculator_fn(const json_t *args, const struct sbx_tool_call *call,
                         struct sbx_tool_output *out, struct sbx_error *err)
{
    struct calc c = {.s = json_string_value(json_object_get(args, "expression")), .err = err};
    double v = 0;
    int rc = calc_expr(&c, &v);
    if (rc < 0)
        return rc;
    skip_ws(&c);
    if (c.s[c.pos])
        return sbx_error_set(err, SBX_E_INVAL, 0, "unexpected '%c' at offset %zu", c.s[c.pos],
                             c.pos);
    return put_number(&out->text, v, err);
}

/* A freeform (custom) tool: the model sends plain text, not JSON. */
static int word_count_fn(const json_t *args, const struct sbx_tool_call *call,
                         struct sbx_tool_output *out, struct sbx_error *err)
{
    const char *s = json_string_value(args);
    size_t words = 0, lines = 0, chars = 0;
    int in_word = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c & 0xC0) != 0x80)
            chars++;
        if (c == '\n')
            lines++;
        int space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (!space && !in_word)
            words++;
        in_word = !space;
    }
    return sbx_buf_addf(&out->text, err, "%zu words, %zu lines, %zu characters", words, lines,
                        chars);
}

int sbx_tool_builtin(const char *name, struct sbx_tool **out, struct sbx_error *err)
{
    json_t *params = NULL;
    struct sbx_function_tool spec = {.name = name, .strict = 1};
    if (strcmp(name, "current_time") == 0) {
        spec.description = "Returns the current date and time in UTC (RFC 3339).";
        spec.fn = current_time_fn;
    } else if (strcmp(name, "add") == 0) {
        spec.description = "Adds two numbers and returns the sum.";
        params = json_pack("{s:s, s:{s:{s:s}, s:{s:s}}}", "type", "object", "properties", "a",
                           "type", "number", "b", "type", "number");
        spec.fn = add_fn;
    } else if (strcmp(name, "calculator") == 0) {
        spec.description = "Evaluates an arithmetic expression with + - * / %, parentheses and "
                           "decimal numbers, and returns the result.";
        params = json_pack("{s:s, s:{s:{s:s, s:s}}}", "type", "object", "properties", "expression",
                           "type", "string", "description",
                           "The expression, for example \"(2 + 3) * 4\".");
        spec.fn = calculator_fn;
    } else if (strcmp(name, "word_count") == 0) {
        struct sbx_custom_tool cspec = {
                .name = name,
                .description = "Counts the words, lines and characters of the text you send "
                               "(send the text itself, not JSON).",
                .fn = word_count_fn,
        };
        return sbx_tool_new_custom(&cspec, out, err);
    } else {
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "unknown built-in tool '%s' (known: current_time, add, calculator, "
                             "word_count)",
                             name);
    }
    spec.parameters = params;
    int rc = sbx_tool_new_function(&spec, out, err);
    json_decref(params);
    return rc;
}
