/* A skill's SKILL.md front matter (skills come from folders an agent file names, or a sandbox
 * wrote): sbx__skill_front_matter. An accepted name and description meet the documented rules:
 * a name of 1 to SBX_SKILL_NAME_MAX characters of [A-Za-z0-9._-], not starting with '.' or '-';
 * a description not empty, at most SBX_SKILL_DESC_MAX bytes, with no run of whitespace. */
#include <stdlib.h>
#include <string.h>

#include "capability/skills-internal.h"
#include "fuzz.h"

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

static int space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *name = NULL, *desc = NULL;
    if (sbx__skill_front_matter((const char *)data, size, &name, &desc, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0');
        FUZZ_ASSERT(!name && !desc);
        return 0;
    }
    size_t n = strlen(name), d = strlen(desc);
    FUZZ_ASSERT(n >= 1 && n <= SBX_SKILL_NAME_MAX);
    FUZZ_ASSERT(name[0] != '.' && name[0] != '-');
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT(name_char(name[i]));
    FUZZ_ASSERT(d >= 1 && d <= SBX_SKILL_DESC_MAX);
    for (size_t i = 1; i < d; i++)
        FUZZ_ASSERT(!(space(desc[i]) && space(desc[i - 1])));
    free(name);
    free(desc);
    return 0;
}
