/* What the providers' session states share (sandbox/provider.h). */
#include "sandbox/provider.h"
#include "sbx/json.h"

int sbx__state_check_id_root(const json_t *st, int (*valid)(const char *id), const char *what,
                             struct sbx_error *err)
{
    const char *id = NULL, *root = NULL;
    int rc;
    if ((rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0)
        return rc;
    if (!valid(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'id': '%s' is not %s", id, what);
    if (root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'root' must be an absolute path");
    return 0;
}
