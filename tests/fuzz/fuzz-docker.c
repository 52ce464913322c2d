/* What a Docker engine (or podman) answers, which the provider treats as hostile: the first byte
 * picks a parser. 0: a container's inspect document through sbx__dk_state_from_inspect (an
 * accepted one must pass the provider's own session state check); 1: an error reply through
 * sbx__dk_status_error (an error with a message, whatever the body); 2: the base64
 * X-Docker-Container-Path-Stat header through sbx__dk_pstat_decode (an accepted one has a
 * known type and only permission bits); 3: a version string through sbx__dk_version_ok. The
 * multiplexed stream has fuzz-mux. */
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "providers/docker/docker.h"
#include "sandbox/provider.h"
#include "sbx/buf.h"
#include "sbx/json.h"

static const struct sbx__provider_def *docker;

static void inspect_doc(const char *p, size_t n)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_json_limits lim = {.max_bytes = 1 << 16, .max_depth = 16};
    json_t *doc = NULL, *st = NULL;
    if (sbx_json_parse(p, n, &lim, &doc, NULL) < 0)
        return;
    if (sbx__dk_state_from_inspect(doc, &st, &err) == 0) {
        FUZZ_ASSERT(json_is_object(st));
        struct sbx_error e2 = SBX_ERROR_INIT;
        if (docker->check_state(st, &e2) < 0) {
            fprintf(stderr, "state from inspect refused: %s\n", e2.msg);
            FUZZ_ASSERT(!"a state made from an inspect document passes check_state");
        }
        json_decref(st);
    } else {
        FUZZ_ASSERT(err.msg[0] != '\0');
    }
    json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!docker)
        for (size_t i = 0; i < sbx__n_providers; i++)
            if (strcmp(sbx__providers[i]->name, "docker") == 0)
                docker = sbx__providers[i];
    FUZZ_ASSERT(docker != NULL);
    if (size == 0)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    struct sbx_error err = SBX_ERROR_INIT;
    switch (data[0] & 3) {
    case 0:
        inspect_doc(p, n);
        break;
    case 1: {
        long status = n >= 2 ? 100 + ((unsigned char)p[0] << 8 | (unsigned char)p[1]) % 500 : 500;
        struct sbx_buf body;
        sbx_buf_init(&body, 1 << 16);
        if (n > 2 && sbx_buf_add(&body, p + 2, n - 2, NULL) < 0)
            sbx_buf_setlen(&body, 0);
        FUZZ_ASSERT(sbx__dk_status_error(status, &body, &err) < 0);
        FUZZ_ASSERT(err.msg[0] != '\0');
        sbx_buf_release(&body);
        break;
    }
    case 2: {
        char *header = sbx_xstrndup(p, n);
        struct sbx__dk_pstat st;
        memset(&st, 0, sizeof(st));
        if (sbx__dk_pstat_decode(header, &st, &err) == 0) {
            FUZZ_ASSERT(st.type == SBX_FILE_REGULAR || st.type == SBX_FILE_DIR ||
                        st.type == SBX_FILE_SYMLINK || st.type == SBX_FILE_OTHER);
            FUZZ_ASSERT((st.mode & ~(mode_t)07777) == 0);
            FUZZ_ASSERT(!st.link_target || st.type == SBX_FILE_SYMLINK);
            sbx__dk_pstat_release(&st);
        } else {
            FUZZ_ASSERT(err.msg[0] != '\0');
        }
        free(header);
        break;
    }
    default: {
        char *v = sbx_xstrndup(p, n);
        (void)sbx__dk_version_ok(v);
        free(v);
        break;
    }
    }
    return 0;
}
