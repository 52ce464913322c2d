/* What a model server answers, through the decoders of a live call: the Responses API and Chat
 * Completions, each as one JSON body or as an SSE stream (the first byte picks which of the
 * four). A decoded response is a JSON object, and every stream event handed to the callback is
 * one too. */
#include <jansson.h>

#include "fuzz.h"
#include "model/model-internal.h"

static struct sbx_model *models[2];

static void on_event(const json_t *event, void *data)
{
    FUZZ_ASSERT(json_is_object(event));
    (*(size_t *)data)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (!models[0]) {
        /* Never connected to: only the decoders run. */
        struct sbx_model_options o = {.base_url = "http://127.0.0.1:9",
                                      .api_key = "k",
                                      .max_response_bytes = 1 << 20,
                                      .max_event_bytes = 1 << 16};
        o.api = SBX_MODEL_API_RESPONSES;
        FUZZ_ASSERT(sbx_model_new("fuzz", &o, &models[0], &err) == 0);
        o.api = SBX_MODEL_API_CHAT;
        FUZZ_ASSERT(sbx_model_new("fuzz", &o, &models[1], &err) == 0);
    }
    if (size == 0)
        return 0;
    struct sbx_model *m = models[data[0] & 1];
    int stream = (data[0] >> 1) & 1;
    json_t *tools = json_pack("[{s:s, s:s}, {s:s, s:s}]", "type", "function", "name", "shell",
                              "type", "custom", "name", "apply_patch");
    json_t *out = NULL;
    size_t events = 0;
    if (sbx__model_decode(m, tools, (const char *)data + 1, size - 1, stream, on_event, &events,
                          &out, &err) == 0) {
        FUZZ_ASSERT(json_is_object(out));
        json_decref(out);
    } else {
        FUZZ_ASSERT(err.msg[0] != '\0');
    }
    json_decref(tools);
    return 0;
}
