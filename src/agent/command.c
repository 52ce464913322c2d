/* Command rules of approval policies: a shell command line read the way a POSIX shell reads
 * it, far enough to tell a simple command (words, quotes, escapes) from anything that makes
 * the shell run more than the first word's program with literal arguments. See
 * docs/internals/runner.md, "Command rules". */
#include <string.h>

#include "sbx/agent.h"
#include "sbx/buf.h"

#define COMMAND_MAX ((size_t)64 << 10)

/* Words that start compound commands or change how the rest is read: a command that begins
 * with one is not simple. */
static const char *const reserved[] = {"!",    "{",        "}",     "[[",    "]]",   "if",
                                       "then", "else",     "elif",  "fi",    "case", "esac",
                                       "for",  "select",   "while", "until", "do",   "done",
                                       "in",   "function", "time",  "coproc"};

/* Characters that end a simple command or start an expansion when not quoted. */
static int is_operator(char c)
{
    return strchr(";&|<>()`$\n\r", c) != NULL;
}

static void put(struct sbx_buf *b, const char *p, size_t n)
{
    if (sbx_buf_add(b, p, n, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
}

static int is_assignment(const char *w)
{
    const char *p = w;
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_'))
        return 0;
    while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
           *p == '_')
        p++;
    return *p == '=';
}

/* One word from *pp (past leading blanks) into w; *quoted: part of it was quoted. Returns 1
 * for a word, 0 at the end, -1 when the line is not a simple command. */
static int next_word(const char **pp, struct sbx_buf *w, int *quoted)
{
    const char *p = *pp;
    while (*p == ' ' || *p == '\t')
        p++;
    sbx_buf_reset(w);
    *quoted = 0;
    if (!*p)
        return 0;
    while (*p && *p != ' ' && *p != '\t') {
        char c = *p++;
        if (c == '\'') {
            const char *end = strchr(p, '\'');
            if (!end || memchr(p, '\n', (size_t)(end - p)))
                return -1;
            put(w, p, (size_t)(end - p));
            p = end + 1;
            *quoted = 1;
        } else if (c == '"') {
            for (;; p++) {
                if (!*p || *p == '$' || *p == '`' || *p == '\n')
                    return -1;
                if (*p == '"')
                    break;
                if (*p == '\\' && p[1] && strchr("$`\"\\", p[1]))
                    p++;
                put(w, p, 1);
            }
            p++;
            *quoted = 1;
        } else if (c == '\\') {
            if (!*p || *p == '\n')
                return -1;
            put(w, p++, 1);
            *quoted = 1;
        } else if (is_operator(c) || (unsigned char)c < 0x20 || c == 0x7f) {
            return -1;
        } else {
            put(w, p - 1, 1);
        }
    }
    *pp = p;
    return 1;
}

int sbx_approval_command(const char *cmd, char **out)
{
    struct sbx_buf words, w;
    int rc = 0, n = 0, quoted = 0;
    *out = NULL;
    if (!cmd || strlen(cmd) > COMMAND_MAX)
        return 0;
    sbx_buf_init(&words, SBX_BUF_NOLIMIT);
    sbx_buf_init(&w, SBX_BUF_NOLIMIT);
    const char *p = cmd;
    while ((rc = next_word(&p, &w, &quoted)) > 0) {
        const char *word = sbx_buf_cstr(&w);
        if (n == 0 && !quoted) {
            for (size_t i = 0; i < SBX_ARRAY_LEN(reserved) && rc > 0; i++)
                if (strcmp(word, reserved[i]) == 0)
                    rc = -1;
            if (rc > 0 && is_assignment(word))
                rc = -1;
        }
        if (rc < 0)
            break;
        if (n++)
            put(&words, " ", 1);
        put(&words, w.data, w.len);
    }
    sbx_buf_release(&w);
    if (rc < 0 || n == 0) {
        sbx_buf_release(&words);
        return 0;
    }
    *out = sbx_buf_detach(&words, NULL);
    return 1;
}
