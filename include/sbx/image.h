/* sbx: recognising images for the view_image tool.
 *
 * The type comes from the content, never from the file name: PNG, JPEG, GIF and WebP are
 * accepted; their dimensions are read from the header and must be plausible. Anything else
 * (SVG, BMP, TIFF, text, a truncated header, a file over the size limit) is refused with a
 * message that names the file and says what was wrong, written for the model to read. */
#ifndef SBX_IMAGE_H
#define SBX_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "common.h"
#include "error.h"

/* The reference's limit: 10 MiB of image data. Read at most SBX_IMAGE_MAX_BYTES + 1 bytes so
 * an oversized file is detected without reading all of it. */
#define SBX_IMAGE_MAX_BYTES ((size_t)10 << 20)
/* Largest width or height accepted, and largest pixel count (width * height). */
#define SBX_IMAGE_MAX_SIDE   65535u
#define SBX_IMAGE_MAX_PIXELS ((uint64_t)1 << 28)

struct sbx_image_info {
    const char *mime; /* "image/png", "image/jpeg", "image/gif", "image/webp"; static */
    uint32_t width;
    uint32_t height;
};

/* Identify data[0..n) (the start of the file is enough for the header, but the JPEG frame
 * header may lie further in: pass the whole file). name labels messages. Errors:
 *   SBX_E_UNSUPPORTED  "image 'a.svg' is an SVG image; only PNG, JPEG, GIF and WebP are
 *                       supported" (also BMP, TIFF, and "is not a supported image file")
 *   SBX_E_PARSE        "image 'a.png' is truncated or corrupt: <what>"
 *   SBX_E_INVAL        "image 'a.png' has implausible dimensions 0x10" */
SBX_API int sbx_image_sniff(const void *data, size_t n, const char *name,
                            struct sbx_image_info *out, struct sbx_error *err);

/* Check data[0..n) with sbx_image_sniff() and the size limit, then append
 * "data:<mime>;base64,<data>" to out. info (may be NULL) receives what was found. Errors as
 * sbx_image_sniff(), plus SBX_E_TOOBIG "image 'p' is larger than the allowed 10MB (12.5MB);
 * resize or compress the image and try again", or out's own limit. */
SBX_API int sbx_image_data_url(const void *data, size_t n, const char *name, struct sbx_buf *out,
                               struct sbx_image_info *info, struct sbx_error *err);

/* Read path (normalised, relative) beneath dirfd through sbx_fs_read (symlinks leaving the
 * directory are refused) and append its data URL to out, as sbx_image_data_url(). At most
 * SBX_IMAGE_MAX_BYTES + 1 bytes are read. Errors name the path as the model wrote it (label):
 * SBX_E_NOTFOUND "image 'p' was not found", SBX_E_TOOBIG (the size message above), SBX_E_PERM
 * for a path that leaves the directory, then as sbx_image_data_url(). Blocks on file I/O. */
SBX_API int sbx_image_load(int dirfd, const char *path, const char *label, struct sbx_buf *out,
                           struct sbx_image_info *info, struct sbx_error *err);

#endif
