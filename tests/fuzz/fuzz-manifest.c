/* Manifests as a caller or an agent file gives them: YAML or JSON text, then the manifest
 * rules. The host is never looked at (local sources are not checked), and a manifest that
 * loads must serialise and, when no secret was left out, load again. */
#include <jansson.h>

#include "fuzz.h"
#include "sbx/manifest.h"
#include "sbx/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_yaml_limits lim = {.max_bytes = 1 << 20, .max_depth = 32, .max_nodes = 20000};
    struct sbx_manifest_load_opts o = {.base_dir = "/nonexistent",
                                       .max_file_bytes = 1 << 16,
                                       .max_total_bytes = 1 << 18,
                                       .max_entries = 256,
                                       .flags = SBX_MANIFEST_NO_HOST_CHECKS};
    json_t *doc = NULL, *out = NULL;
    struct sbx_manifest *m = NULL, *m2 = NULL;
    if (sbx_doc_parse("fuzz.yaml", (const char *)data, size, &lim, &doc, &err) < 0)
        return 0;
    if (sbx_manifest_from_json(doc, &o, &m, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0');
        goto out;
    }
    size_t omitted = 0;
    FUZZ_ASSERT(sbx_manifest_to_json(m, 0, &out, &omitted, &err) == 0);
    if (omitted > 0) /* without its secrets an entry may no longer be complete */
        goto out;
    o.max_file_bytes = o.max_total_bytes = 0; /* base64 may have been decoded: defaults */
    FUZZ_ASSERT(sbx_manifest_from_json(out, &o, &m2, &err) == 0);
    FUZZ_ASSERT(sbx_manifest_entry_count(m) == sbx_manifest_entry_count(m2));
out:
    sbx_manifest_free(m);
    sbx_manifest_free(m2);
    json_decref(out);
    json_decref(doc);
    return 0;
}
