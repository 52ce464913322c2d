/* Run state documents (`sbx run --resume FILE`): sbx_run_state_parse. An accepted document
 * serializes (with a secret to redact) and parses back, a second serialization gives the same
 * text, and the secret's value appears in neither. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sbx/json.h"
#include "sbx/runstate.h"
#include "sbx/strv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL, *again = NULL;
    char *text = NULL, *text2 = NULL;
    if (sbx_run_state_parse((const char *)data, size, &st, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0');
        return 0;
    }
    FUZZ_ASSERT(json_is_object(st));
    struct sbx_strv secrets;
    sbx_strv_init(&secrets);
    sbx_strv_push(&secrets, "sk-fuzz-secret");
    FUZZ_ASSERT(sbx_run_state_serialize(st, &secrets, &text, &err) == 0);
    FUZZ_ASSERT(!strstr(text, "sk-fuzz-secret"));
    FUZZ_ASSERT(sbx_run_state_parse(text, strlen(text), &again, &err) == 0);
    FUZZ_ASSERT(sbx_run_state_serialize(again, &secrets, &text2, &err) == 0);
    FUZZ_ASSERT(strcmp(text, text2) == 0);
    sbx_strv_release(&secrets);
    free(text);
    free(text2);
    json_decref(st);
    json_decref(again);
    return 0;
}
