/* Session state documents (what `sbx sandbox resume FILE` and `sbx run --session-state` read, from
 * anywhere): sbx_session_state_parse. An accepted document serializes, parses back to an equal
 * document, and serializes to the same text again. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sbx/json.h"
#include "sbx/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL, *again = NULL;
    char *text = NULL, *text2 = NULL;
    if (sbx_session_state_parse((const char *)data, size, &st, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0');
        return 0;
    }
    FUZZ_ASSERT(json_is_object(st));
    FUZZ_ASSERT(sbx_session_state_serialize(st, &text, &err) == 0);
    FUZZ_ASSERT(sbx_session_state_parse(text, strlen(text), &again, &err) == 0);
    FUZZ_ASSERT(json_equal(st, again));
    FUZZ_ASSERT(sbx_session_state_serialize(again, &text2, &err) == 0);
    FUZZ_ASSERT(strcmp(text, text2) == 0);
    free(text);
    free(text2);
    json_decref(st);
    json_decref(again);
    return 0;
}
