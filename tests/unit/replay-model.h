/* Unit-test helper: a replay model answering with the given Responses API response objects
 * (JSON text, one per model call), written to a fresh file under dir. Aborts on failure: a test
 * that cannot build its model has nothing to check. Caller owns the model (sbx_model_free). */
#ifndef SBX_TEST_REPLAY_MODEL_H
#define SBX_TEST_REPLAY_MODEL_H

#include <stdio.h>
#include <stdlib.h>

#include "sbx/common.h"
#include "sbx/error.h"
#include "sbx/model.h"

static inline struct sbx_model *test_model_from_responses(const char *dir, int *file_no,
                                                          const char *const *responses)
{
    char *path = sbx_xasprintf("%s/r%d.jsonl", dir, (*file_no)++);
    FILE *f = fopen(path, "w");
    if (!f) {
        printf("# cannot write '%s'\n", path);
        abort();
    }
    for (size_t i = 0; responses[i]; i++)
        fprintf(f, "%s\n", responses[i]);
    fclose(f);
    char *name = sbx_xasprintf("replay:%s", path);
    struct sbx_model *m = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_model_new(name, NULL, &m, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    free(name);
    free(path);
    return m;
}

#endif
