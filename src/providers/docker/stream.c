/* The path-stat header of the archive API (the multiplexed output stream of a command is
 * decoded by sandbox/wire/mux.h). Hostile input (a compromised engine says anything): bounded,
 * never allocating what a header claims. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "providers/docker/docker.h"
#include "sbx/b64.h"
#include "sbx/json.h"

#define PSTAT_MAX 65536

void sbx__dk_pstat_release(struct sbx__dk_pstat *p)
{
    free(p->link_target);
    p->link_target = NULL;
}

/* Go's os.FileMode: permission bits low, type and special bits high. */
#define GO_DIR     (1u << 31)
#define GO_SYMLINK (1u << 27)
#define GO_DEVICE  (1u << 26)
#define GO_PIPE    (1u << 25)
#define GO_SOCKET  (1u << 24)
#define GO_SETUID  (1u << 23)
#define GO_SETGID  (1u << 22)
#define GO_CHAR    (1u << 21)
#define GO_STICKY  (1u << 20)
#define GO_IRREG   (1u << 19)

/* Seconds whose nanoseconds (plus up to 999999999) still fit in int64_t: 1677 to 2262. */
#define MTIME_MAX_S (INT64_MAX / 1000000000 - 1)

/* "2026-12-02T05:34:29.407170509Z" (UTC, as the engines send it) in ns; 0 if not that shape.
 * The time describes a file inside the container, which may say any year (Go's zero time is
 * year 1): times outside what int64 nanoseconds hold are held at the nearest end. */
static int64_t parse_mtime(const char *s)
{
    struct tm tm = {0};
    const char *rest = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!rest)
        return 0;
    int64_t ns = 0, scale = 100000000;
    if (*rest == '.')
        for (rest++; *rest >= '0' && *rest <= '9'; rest++, scale /= 10)
            ns += scale * (*rest - '0');
    int64_t sec = (int64_t)timegm(&tm);
    if (sec > MTIME_MAX_S)
        sec = MTIME_MAX_S;
    else if (sec < -MTIME_MAX_S)
        sec = -MTIME_MAX_S;
    return sec * 1000000000 + ns;
}

int sbx__dk_pstat_decode(const char *header, struct sbx__dk_pstat *out, struct sbx_error *err)
{
    struct sbx_buf raw;
    json_t *j = NULL;
    int rc;
    sbx_buf_init(&raw, PSTAT_MAX);
    if (!header)
        return sbx_error_set(err, SBX_E_PARSE, 0, "the engine sent no path stat");
    if (strlen(header) > PSTAT_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "the engine's path stat is too long");
    if ((rc = sbx_b64_decode(header, strlen(header), &raw, err)) < 0)
        goto out;
    struct sbx_json_limits lim = {.max_bytes = PSTAT_MAX, .max_depth = 4};
    if ((rc = sbx_json_parse(raw.data, raw.len, &lim, &j, err)) < 0)
        goto out;
    json_t *mode = json_object_get(j, "mode"), *size = json_object_get(j, "size");
    if (!json_is_object(j) || !json_is_integer(mode) || !json_is_integer(size) ||
        json_integer_value(mode) < 0 || json_integer_value(mode) > (json_int_t)UINT32_MAX ||
        json_integer_value(size) < 0) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "the engine's path stat lacks a mode or size");
        goto out;
    }
    uint32_t m = (uint32_t)json_integer_value(mode);
    memset(out, 0, sizeof(*out));
    out->type = m & GO_DIR                                                   ? SBX_FILE_DIR
                : m & GO_SYMLINK                                             ? SBX_FILE_SYMLINK
                : m & (GO_DEVICE | GO_PIPE | GO_SOCKET | GO_CHAR | GO_IRREG) ? SBX_FILE_OTHER
                                                                             : SBX_FILE_REGULAR;
    out->mode = (mode_t)(m & 0777) | (m & GO_SETUID ? S_ISUID : 0) | (m & GO_SETGID ? S_ISGID : 0) |
                (m & GO_STICKY ? S_ISVTX : 0);
    out->size = (uint64_t)json_integer_value(size);
    out->mtime_ns = parse_mtime(json_string_value(json_object_get(j, "mtime")));
    const char *lt = json_string_value(json_object_get(j, "linkTarget"));
    if (out->type == SBX_FILE_SYMLINK && lt && lt[0])
        out->link_target = sbx_xstrdup(lt);
    rc = 0;
out:
    if (rc < 0)
        sbx_error_prefix(err, "path stat");
    json_decref(j);
    sbx_buf_release(&raw);
    return rc;
}
