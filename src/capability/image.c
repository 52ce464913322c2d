/* Content sniffing for view_image: magic bytes, then the dimensions from the format's own
 * header, so a renamed text file or a cut-off download is caught before it reaches a model. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "sbx/b64.h"
#include "sbx/fs.h"
#include "sbx/image.h"

static uint32_t be16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t le16(const unsigned char *p)
{
    return (uint32_t)p[1] << 8 | p[0];
}

static uint32_t le24(const unsigned char *p)
{
    return (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static int corrupt(struct sbx_error *err, const char *name, const char *what)
{
    return sbx_error_set(err, SBX_E_PARSE, 0, "image '%s' is truncated or corrupt: %s", name, what);
}

static int png(const unsigned char *d, size_t n, const char *name, struct sbx_image_info *out,
               struct sbx_error *err)
{
    /* Signature, then the IHDR chunk: length 13, type, width, height. */
    if (n < 24)
        return corrupt(err, name, "the PNG header is incomplete");
    if (be32(d + 8) != 13 || memcmp(d + 12, "IHDR", 4) != 0)
        return corrupt(err, name, "the PNG file does not start with an IHDR chunk");
    out->width = be32(d + 16);
    out->height = be32(d + 20);
    return 0;
}

static int gif(const unsigned char *d, size_t n, const char *name, struct sbx_image_info *out,
               struct sbx_error *err)
{
    if (n < 10)
        return corrupt(err, name, "the GIF header is incomplete");
    out->width = le16(d + 6);
    out->height = le16(d + 8);
    return 0;
}

static int jpeg(const unsigned char *d, size_t n, const char *name, struct sbx_image_info *out,
                struct sbx_error *err)
{
    size_t i = 2;
    /* Walk the marker segments to the first frame header (SOF0..SOF15 except DHT, JPG, DAC). */
    for (;;) {
        while (i < n && d[i] == 0xFF)
            i++;
        if (i >= n)
            break;
        unsigned char m = d[i++];
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7))
            continue; /* no length */
        if (m == 0xD9 || m == 0xDA)
            return corrupt(err, name, "the JPEG file has no frame header before its image data");
        if (i + 2 > n)
            break;
        size_t len = be16(d + i);
        if (len < 2)
            return corrupt(err, name, "a JPEG segment has an invalid length");
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (len < 7 || i + 7 > n)
                break;
            out->height = be16(d + i + 3);
            out->width = be16(d + i + 5);
            return 0;
        }
        i += len;
        if (i > n)
            break;
        if (i < n && d[i] != 0xFF)
            return corrupt(err, name, "the JPEG segments are malformed");
    }
    return corrupt(err, name, "the JPEG header is incomplete");
}

static int webp(const unsigned char *d, size_t n, const char *name, struct sbx_image_info *out,
                struct sbx_error *err)
{
    if (n < 30)
        return corrupt(err, name, "the WebP header is incomplete");
    if (!memcmp(d + 12, "VP8 ", 4)) {
        if (d[23] != 0x9D || d[24] != 0x01 || d[25] != 0x2A)
            return corrupt(err, name, "the WebP (VP8) frame has no start code");
        out->width = le16(d + 26) & 0x3FFF;
        out->height = le16(d + 28) & 0x3FFF;
        return 0;
    }
    if (!memcmp(d + 12, "VP8L", 4)) {
        if (d[20] != 0x2F)
            return corrupt(err, name, "the WebP (VP8L) stream has no signature");
        uint32_t bits = (uint32_t)d[21] | (uint32_t)d[22] << 8 | (uint32_t)d[23] << 16 |
                        (uint32_t)d[24] << 24;
        out->width = (bits & 0x3FFF) + 1;
        out->height = ((bits >> 14) & 0x3FFF) + 1;
        return 0;
    }
    if (!memcmp(d + 12, "VP8X", 4)) {
        out->width = le24(d + 24) + 1;
        out->height = le24(d + 27) + 1;
        return 0;
    }
    return corrupt(err, name, "the WebP file has no VP8, VP8L or VP8X chunk");
}

static int unsupported(struct sbx_error *err, const char *name, const char *kind)
{
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                         "image '%s' is %s; only PNG, JPEG, GIF and WebP are supported", name,
                         kind);
}

/* SVG: the start of the file, after whitespace, is an <svg> element or an XML declaration
 * followed by one (within the first 2048 bytes, as the reference looks). */
static int looks_svg(const unsigned char *d, size_t n)
{
    size_t i = 0, lim = n < 2048 ? n : 2048;
    if (lim >= 3 && d[0] == 0xEF && d[1] == 0xBB && d[2] == 0xBF)
        i = 3;
    while (i < lim && isspace(d[i]))
        i++;
    if (lim - i >= 4 && !strncasecmp((const char *)d + i, "<svg", 4))
        return 1;
    if (lim - i < 5 || strncasecmp((const char *)d + i, "<?xml", 5))
        return 0;
    for (size_t k = i; k + 4 <= lim; k++)
        if (!strncasecmp((const char *)d + k, "<svg", 4))
            return 1;
    return 0;
}

int sbx_image_sniff(const void *data, size_t n, const char *name, struct sbx_image_info *out,
                    struct sbx_error *err)
{
    const unsigned char *d = data;
    struct sbx_image_info info = {NULL, 0, 0};
    int rc;

    if (!n)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "image '%s' is an empty file", name);
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) {
        info.mime = "image/png";
        rc = png(d, n, name, &info, err);
    } else if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) {
        info.mime = "image/jpeg";
        rc = jpeg(d, n, name, &info, err);
    } else if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) {
        info.mime = "image/gif";
        rc = gif(d, n, name, &info, err);
    } else if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) {
        info.mime = "image/webp";
        rc = webp(d, n, name, &info, err);
    } else if (n >= 2 && !memcmp(d, "BM", 2)) {
        return unsupported(err, name, "a BMP image");
    } else if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) {
        return unsupported(err, name, "a TIFF image");
    } else if (looks_svg(d, n)) {
        return unsupported(err, name, "an SVG image");
    } else {
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "image '%s' is not a supported image file (PNG, JPEG, GIF or WebP)",
                             name);
    }
    if (rc < 0)
        return rc;
    if (!info.width || !info.height || info.width > SBX_IMAGE_MAX_SIDE ||
        info.height > SBX_IMAGE_MAX_SIDE ||
        (uint64_t)info.width * info.height > SBX_IMAGE_MAX_PIXELS)
        return sbx_error_set(err, SBX_E_INVAL, 0, "image '%s' has implausible dimensions %ux%u",
                             name, (unsigned)info.width, (unsigned)info.height);
    *out = info;
    return 0;
}

int sbx_image_data_url(const void *data, size_t n, const char *name, struct sbx_buf *out,
                       struct sbx_image_info *info, struct sbx_error *err)
{
    struct sbx_image_info found;
    size_t start = out->len;
    int rc;

    if (n > SBX_IMAGE_MAX_BYTES)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "image '%s' is larger than the allowed 10MB (%.1fMB); resize or "
                             "compress the image and try again",
                             name, (double)n / (1024.0 * 1024.0));
    if ((rc = sbx_image_sniff(data, n, name, &found, err)) < 0)
        return rc;
    if ((rc = sbx_buf_addf(out, err, "data:%s;base64,", found.mime)) < 0 ||
        (rc = sbx_b64_encode(data, n, out, err)) < 0) {
        sbx_buf_setlen(out, start);
        return rc;
    }
    if (info)
        *info = found;
    return 0;
}

int sbx_image_load(int dirfd, const char *path, const char *label, struct sbx_buf *out,
                   struct sbx_image_info *info, struct sbx_error *err)
{
    struct sbx_buf data;
    int rc;

    if (!label)
        label = path;
    sbx_buf_init(&data, SBX_BUF_NOLIMIT);
    rc = sbx_fs_read(dirfd, path, SBX_IMAGE_MAX_BYTES, &data, err);
    if (rc == -SBX_E_NOTFOUND) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "image '%s' was not found", label);
    } else if (rc == -SBX_E_TOOBIG) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "image '%s' is larger than the allowed 10MB; resize or compress the "
                           "image and try again",
                           label);
    } else if (rc < 0) {
        sbx_error_prefix(err, "cannot read image '%s'", label);
    } else {
        rc = sbx_image_data_url(data.data, data.len, label, out, info, err);
    }
    sbx_buf_release(&data);
    return rc;
}
