/* The replay provider: answers each call with the next recorded response object. */
#include "model/model-internal.h"
#include "sbx/json.h"

static int replay_respond(struct sbx_model *m, const struct sbx_model_request *req,
                          sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                          struct sbx_error *err)
{
    size_t n = json_array_size(m->replay);
    if (m->cancel && *m->cancel)
        return sbx_error_set(err, SBX_E_CANCELLED, 0, "model call cancelled");
    pthread_mutex_lock(&m->lock);
    size_t next = m->replay_next;
    if (next < n)
        m->replay_next++;
    pthread_mutex_unlock(&m->lock);
    if (next >= n)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "replay file '%s' has no response for model call %zu (it holds %zu)",
                             m->replay_path, next + 1, n);
    json_t *r = json_deep_copy(json_array_get(m->replay, next));
    if (cb)
        sbx__model_synth_events(r, cb, cb_data);
    *out = r;
    return 0;
}

const struct sbx__model_vt sbx__model_replay_vt = {
        .provider = "replay",
        .respond = replay_respond,
};
