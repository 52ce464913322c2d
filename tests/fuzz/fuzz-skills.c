/* A skill's SKILL.md front matter (skills come from folders an agent file names, or a sandbox
 * wrote): sbx__skill_front_matter, as the reference SDK lists skills. An accepted name and
 * description are not empty, within SBX_SKILL_NAME_MAX and SBX_SKILL_DESC_MAX bytes, hold no
 * control character and no run of whitespace (both fold to single spaces); without a name the
 * folder's name is used. */
#include <stdlib.h>
#include <string.h>

#include "capability/skills-internal.h"
#include "fuzz.h"

#define DIR_NAME "skill-dir"

static void check_text(const char *s, size_t max)
{
    size_t n = strlen(s);
    FUZZ_ASSERT(n >= 1 && n <= max);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        FUZZ_ASSERT(c >= 0x20 && c != 0x7f);
        FUZZ_ASSERT(!(i && c == ' ' && s[i - 1] == ' '));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *name = NULL, *desc = NULL;
    if (sbx__skill_front_matter((const char *)data, size, DIR_NAME, &name, &desc, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0');
        FUZZ_ASSERT(!name && !desc);
        return 0;
    }
    check_text(name, SBX_SKILL_NAME_MAX);
    check_text(desc, SBX_SKILL_DESC_MAX);
    free(name);
    free(desc);
    return 0;
}
