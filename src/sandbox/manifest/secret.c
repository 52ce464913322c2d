/* sbx: secret values. See include/sbx/secret.h. */
#include <string.h>
#include <stdlib.h>

#include "sbx/secret.h"

struct sbx_secret {
    char *name;
    char *value; /* len bytes + NUL */
    size_t len;
};

struct sbx_secret *sbx_secret_new(const char *name, const void *value, size_t len)
{
    struct sbx_secret *s = sbx_xcalloc(1, sizeof(*s));
    s->name = sbx_xstrdup(name);
    s->value = sbx_xmalloc(len + 1);
    if (len)
        memcpy(s->value, value, len);
    s->value[len] = '\0';
    s->len = len;
    return s;
}

struct sbx_secret *sbx_secret_dup(const struct sbx_secret *s)
{
    return sbx_secret_new(s->name, s->value, s->len);
}

void sbx_secret_free(struct sbx_secret *s)
{
    if (!s)
        return;
    /* explicit_bzero is not optimised away even though the memory is freed right after. */
    explicit_bzero(s->value, s->len + 1);
    free(s->value);
    free(s->name);
    free(s);
}

const char *sbx_secret_name(const struct sbx_secret *s)
{
    return s->name;
}

size_t sbx_secret_len(const struct sbx_secret *s)
{
    return s->len;
}

const char *sbx_secret_reveal(const struct sbx_secret *s, size_t *len)
{
    if (len)
        *len = s->len;
    return s->value;
}
