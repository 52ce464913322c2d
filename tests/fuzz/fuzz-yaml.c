/* YAML and JSON documents (manifests, agent files) through the loader that picks the syntax.
 * Small limits keep alias expansion bounded; what parses must be a JSON value that dumps. */
#include <jansson.h>

#include "fuzz.h"
#include "sbx/buf.h"
#include "sbx/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_yaml_limits lim = {.max_bytes = 1 << 20, .max_depth = 32, .max_nodes = 20000};
    json_t *v = NULL;
    int rc = sbx_yaml_parse((const char *)data, size, &lim, &v, &err);
    if (rc == 0) {
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        FUZZ_ASSERT(sbx_json_dump(v, 0, &b, &err) == 0);
        sbx_buf_release(&b);
        json_decref(v);
    } else {
        FUZZ_ASSERT(err.msg[0] != '\0');
    }
    v = NULL;
    if (sbx_doc_parse("fuzz.yaml", (const char *)data, size, &lim, &v, &err) == 0)
        json_decref(v);
    return 0;
}
