/* Stand-in for the core document loader until the YAML module lands on main: JSON documents
 * only; YAML text is refused with a clear error. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "sbx/yaml.h"

int sbx_doc_parse(const char *name, const char *data, size_t len, const struct sbx_yaml_limits *lim,
                  json_t **out, struct sbx_error *err)
{
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    if (i == len || (data[i] != '{' && data[i] != '['))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "'%s': only JSON documents can be read in this build", name);
    struct sbx_json_limits jl = {.max_bytes = lim ? lim->max_bytes : 0,
                                 .max_depth = lim ? lim->max_depth : 0};
    int rc = sbx_json_parse(data, len, &jl, out, err);
    if (rc < 0)
        sbx_error_prefix(err, "'%s'", name);
    return rc;
}

int sbx_doc_load_file(const char *path, const struct sbx_yaml_limits *lim, json_t **out,
                      struct sbx_error *err)
{
    size_t max = lim && lim->max_bytes ? lim->max_bytes : SBX_JSON_DEFAULT_MAX_BYTES;
    struct sbx_buf b;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", path);
    sbx_buf_init(&b, max);
    for (;;) {
        rc = sbx_buf_reserve(&b, 65536 < max - b.len ? 65536 : max - b.len, err);
        if (rc < 0 || b.len == max) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' exceeds %zu bytes", path, max);
            break;
        }
        size_t want = 65536 < max - b.len ? 65536 : max - b.len;
        ssize_t n = read(fd, b.data + b.len, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
            break;
        }
        if (n == 0)
            break;
        sbx_buf_setlen(&b, b.len + (size_t)n);
    }
    close(fd);
    if (rc == 0)
        rc = sbx_doc_parse(path, b.data, b.len, lim, out, err);
    sbx_buf_release(&b);
    return rc;
}
