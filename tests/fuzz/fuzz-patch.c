/* V4A patches from the model (apply_patch). The first byte picks the path: a whole patch text
 * to parse, or an update body applied in memory to a fixed small file. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sbx/patch.h"

static const char old_text[] = "alpha\nbeta\ngamma\r\ndelta\n\n  indented\nlast";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_limits lim = {.max_patch_bytes = 1 << 20,
                                   .max_files = 64,
                                   .max_hunks = 256,
                                   .max_line_bytes = 1 << 14,
                                   .max_file_bytes = 1 << 20};
    if (size == 0)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 1) {
        char *out = NULL;
        size_t out_len = 0, fuzzy = 0;
        if (sbx_patch_apply_diff(old_text, strlen(old_text), text, len, "f.txt", &lim, &out,
                                 &out_len, &fuzzy, &err) == 0) {
            FUZZ_ASSERT(out_len <= lim.max_file_bytes);
            FUZZ_ASSERT(out_len == 0 || out != NULL);
            free(out);
        } else {
            FUZZ_ASSERT(err.msg[0] != '\0');
        }
        return 0;
    }
    struct sbx_patch_options o = {.limits = lim, .cwd = "sub", .root = "/workspace"};
    struct sbx_patch *p = NULL;
    if (sbx_patch_parse(text, len, &o, &p, &err) == 0)
        sbx_patch_free(p);
    else
        FUZZ_ASSERT(err.msg[0] != '\0');
    return 0;
}
