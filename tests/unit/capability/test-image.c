#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx/fs.h"
#include "sbx/image.h"
#include "tap.h"

/* A real 1x1 PNG (IHDR, IDAT, IEND). */
static const unsigned char png_1x1[] = {
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48,
        0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
        0x00, 0x1F, 0x15, 0xC4, 0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78,
        0x9C, 0x63, 0xF8, 0xCF, 0xC0, 0xF0, 0x1F, 0x00, 0x05, 0x00, 0x01, 0xFF, 0x89, 0x99,
        0x3D, 0x1D, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82};

/* SOI, an APP0 (JFIF) segment, then SOF0 for 640x480. */
static const unsigned char jpeg_hdr[] = {
        0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J',  'F',  'I',  'F',  0x00, 0x01, 0x01, 0x00,
        0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01, 0xE0, 0x02,
        0x80, 0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01, 0xFF, 0xDA};

static const unsigned char gif_hdr[] = {'G',  'I',  'F',  '8',  '9',  'a', 0x20,
                                        0x03, 0x58, 0x02, 0xF0, 0x00, 0x00};

/* RIFF, VP8L chunk: signature 0x2F then 14-bit width-1, 14-bit height-1 (here 100 x 50). */
static const unsigned char webp_vp8l[] = {
        'R', 'I',  'F',  'F',  0x1A, 0x00, 0x00, 0x00, 'W',  'E',  'B',  'P',  'V',  'P',  '8',
        'L', 0x0D, 0x00, 0x00, 0x00, 0x2F, 0x63, 0x40, 0x0C, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

/* RIFF, VP8 chunk: frame tag, start code 9D 01 2A, 14-bit width 320 and height 240. */
static const unsigned char webp_vp8[] = {
        'R', 'I',  'F',  'F',  0x1A, 0x00, 0x00, 0x00, 'W',  'E',  'B',  'P',  'V',  'P',  '8',
        ' ', 0x0D, 0x00, 0x00, 0x00, 0x30, 0x01, 0x00, 0x9D, 0x01, 0x2A, 0x40, 0x01, 0xF0, 0x00};

/* RIFF, VP8X chunk: flags, reserved, 24-bit canvas width-1 and height-1 (here 1920 x 1080). */
static const unsigned char webp_vp8x[] = {
        'R', 'I',  'F',  'F',  0x1A, 0x00, 0x00, 0x00, 'W',  'E',  'B',  'P',  'V',  'P',  '8',
        'X', 0x0A, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x7F, 0x07, 0x00, 0x37, 0x04, 0x00};

static void test_sniff_types(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_image_info info;
    static const struct {
        const unsigned char *d;
        size_t n;
        const char *mime;
        unsigned w, h;
    } ok[] = {
            {png_1x1, sizeof(png_1x1), "image/png", 1, 1},
            {jpeg_hdr, sizeof(jpeg_hdr), "image/jpeg", 640, 480},
            {gif_hdr, sizeof(gif_hdr), "image/gif", 800, 600},
            {webp_vp8l, sizeof(webp_vp8l), "image/webp", 100, 50},
            {webp_vp8, sizeof(webp_vp8), "image/webp", 320, 240},
            {webp_vp8x, sizeof(webp_vp8x), "image/webp", 1920, 1080},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(ok); i++) {
        memset(&info, 0, sizeof(info));
        CHECK_OK(sbx_image_sniff(ok[i].d, ok[i].n, "x", &info, &err), &err);
        CHECK_EQ_STR(info.mime, ok[i].mime);
        CHECK_EQ_INT(info.width, ok[i].w);
        CHECK_EQ_INT(info.height, ok[i].h);
    }
}

static void test_refused(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_image_info info;
    const char *svg = "  <svg xmlns=\"http://www.w3.org/2000/svg\"></svg>";
    const char *svgxml = "<?xml version=\"1.0\"?>\n<!-- x -->\n<SVG></SVG>";
    const char *xml = "<?xml version=\"1.0\"?><html></html>";
    CHECK_ERR(sbx_image_sniff(svg, strlen(svg), "logo.png", &info, &err), SBX_E_UNSUPPORTED, &err,
              "image 'logo.png' is an SVG image; only PNG, JPEG, GIF and WebP are supported");
    CHECK_ERR(sbx_image_sniff(svgxml, strlen(svgxml), "a.svg", &info, &err), SBX_E_UNSUPPORTED,
              &err, "is an SVG image");
    CHECK_ERR(sbx_image_sniff(xml, strlen(xml), "a.xml", &info, &err), SBX_E_UNSUPPORTED, &err,
              "image 'a.xml' is not a supported image file (PNG, JPEG, GIF or WebP)");
    CHECK_ERR(sbx_image_sniff("BM\x36\0\0\0", 6, "a.bmp", &info, &err), SBX_E_UNSUPPORTED, &err,
              "is a BMP image");
    CHECK_ERR(sbx_image_sniff("II*\0\x08\0\0\0", 8, "a.tif", &info, &err), SBX_E_UNSUPPORTED, &err,
              "is a TIFF image");
    CHECK_ERR(sbx_image_sniff("hello world", 11, "notes.jpg", &info, &err), SBX_E_UNSUPPORTED, &err,
              "image 'notes.jpg' is not a supported image file");
    CHECK_ERR(sbx_image_sniff("", 0, "e.png", &info, &err), SBX_E_UNSUPPORTED, &err,
              "image 'e.png' is an empty file");
}

static void test_truncated_and_implausible(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_image_info info;
    unsigned char buf[64];

    CHECK_ERR(sbx_image_sniff(png_1x1, 16, "cut.png", &info, &err), SBX_E_PARSE, &err,
              "image 'cut.png' is truncated or corrupt: the PNG header is incomplete");
    memcpy(buf, png_1x1, 24);
    memcpy(buf + 12, "IDAT", 4);
    CHECK_ERR(sbx_image_sniff(buf, 24, "p.png", &info, &err), SBX_E_PARSE, &err,
              "does not start with an IHDR chunk");
    CHECK_ERR(sbx_image_sniff(jpeg_hdr, 24, "cut.jpg", &info, &err), SBX_E_PARSE, &err,
              "the JPEG header is incomplete");
    CHECK_ERR(sbx_image_sniff("\xFF\xD8\xFF\xDA\x00\x02", 6, "s.jpg", &info, &err), SBX_E_PARSE,
              &err, "no frame header");
    CHECK_ERR(sbx_image_sniff(gif_hdr, 8, "cut.gif", &info, &err), SBX_E_PARSE, &err,
              "the GIF header is incomplete");
    CHECK_ERR(sbx_image_sniff(webp_vp8, 20, "cut.webp", &info, &err), SBX_E_PARSE, &err,
              "the WebP header is incomplete");
    memcpy(buf, webp_vp8, sizeof(webp_vp8));
    memcpy(buf + 12, "ABCD", 4);
    CHECK_ERR(sbx_image_sniff(buf, sizeof(webp_vp8), "w.webp", &info, &err), SBX_E_PARSE, &err,
              "no VP8, VP8L or VP8X chunk");

    /* Width 0, and 100000 x 100000. */
    memcpy(buf, png_1x1, 24);
    memset(buf + 16, 0, 4);
    CHECK_ERR(sbx_image_sniff(buf, 24, "z.png", &info, &err), SBX_E_INVAL, &err,
              "image 'z.png' has implausible dimensions 0x1");
    memcpy(buf, png_1x1, 24);
    buf[16] = 0x00, buf[17] = 0x01, buf[18] = 0x86, buf[19] = 0xA0;
    buf[20] = 0x00, buf[21] = 0x01, buf[22] = 0x86, buf[23] = 0xA0;
    CHECK_ERR(sbx_image_sniff(buf, 24, "huge.png", &info, &err), SBX_E_INVAL, &err,
              "implausible dimensions 100000x100000");
    /* 60000 x 60000: each side fits, the pixel count does not. */
    buf[16] = 0, buf[17] = 0, buf[18] = 0xEA, buf[19] = 0x60;
    buf[20] = 0, buf[21] = 0, buf[22] = 0xEA, buf[23] = 0x60;
    CHECK_ERR(sbx_image_sniff(buf, 24, "wide.png", &info, &err), SBX_E_INVAL, &err,
              "implausible dimensions 60000x60000");
}

static void test_data_url(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_image_info info;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_image_data_url(gif_hdr, 10, "g.gif", &b, &info, &err), &err);
    /* base64 of "GIF89a\x20\x03\x58\x02" */
    CHECK_EQ_STR(b.data, "data:image/gif;base64,R0lGODlhIANYAg==");
    CHECK_EQ_STR(info.mime, "image/gif");

    sbx_buf_reset(&b);
    CHECK_OK(sbx_image_data_url(png_1x1, sizeof(png_1x1), "p.png", &b, NULL, &err), &err);
    CHECK(strncmp(b.data, "data:image/png;base64,iVBORw0KGgo", 33) == 0);

    /* Refused images leave out as it was. */
    sbx_buf_reset(&b);
    CHECK_OK(sbx_buf_adds(&b, "keep", &err), &err);
    CHECK_ERR(sbx_image_data_url("text", 4, "t.png", &b, &info, &err), SBX_E_UNSUPPORTED, &err,
              "image 't.png' is not a supported image file");
    CHECK_EQ_STR(b.data, "keep");

    /* Over 10 MiB, even with a valid header. */
    size_t n = SBX_IMAGE_MAX_BYTES + 1;
    unsigned char *big = calloc(1, n);
    memcpy(big, png_1x1, sizeof(png_1x1));
    CHECK_ERR(sbx_image_data_url(big, n, "big.png", &b, &info, &err), SBX_E_TOOBIG, &err,
              "image 'big.png' is larger than the allowed 10MB (10.0MB); resize or compress the "
              "image and try again");
    CHECK_OK(sbx_image_data_url(big, n - 1, "edge.png", &b, &info, &err), &err);
    free(big);

    /* out's own limit: nothing half-written. */
    struct sbx_buf small;
    sbx_buf_init(&small, 30);
    CHECK_ERR(sbx_image_data_url(png_1x1, sizeof(png_1x1), "p.png", &small, &info, &err),
              SBX_E_TOOBIG, &err, NULL);
    CHECK_EQ_INT(small.len, 0);
    sbx_buf_release(&small);
    sbx_buf_release(&b);
}

static void test_load(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_image_info info;
    struct sbx_buf b;
    char dir[] = "/tmp/sbx-test-image-XXXXXX";
    int dfd = -1, fd = -1;
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_fs_open(dfd, "", O_RDONLY | O_DIRECTORY, 0, 0, &fd, &err) < 0) {
        printf("# skipping sbx_image_load: %s\n", err.msg);
        goto out;
    }
    sbx_fd_close(&fd);
    CHECK_OK(sbx_fs_write(dfd, "shot.png", png_1x1, sizeof(png_1x1), 0644, 0, &err), &err);
    CHECK_OK(sbx_fs_write(dfd, "notes.txt", "hello", 5, 0644, 0, &err), &err);
    CHECK(symlinkat("/etc/hostname", dfd, "link.png") == 0);
    CHECK_OK(sbx_image_load(dfd, "shot.png", NULL, &b, &info, &err), &err);
    CHECK(strncmp(b.data, "data:image/png;base64,iVBORw0KGgo", 33) == 0);
    CHECK_EQ_INT(info.width, 1);
    CHECK_ERR(sbx_image_load(dfd, "missing.png", "./missing.png", &b, &info, &err), SBX_E_NOTFOUND,
              &err, "image './missing.png' was not found");
    CHECK_ERR(sbx_image_load(dfd, "notes.txt", NULL, &b, &info, &err), SBX_E_UNSUPPORTED, &err,
              "image 'notes.txt' is not a supported image file");
    CHECK_ERR(sbx_image_load(dfd, "link.png", NULL, &b, &info, &err), SBX_E_PERM, &err,
              "cannot read image 'link.png'");
    {
        size_t n = SBX_IMAGE_MAX_BYTES + 1;
        unsigned char *big = calloc(1, n);
        memcpy(big, png_1x1, sizeof(png_1x1));
        CHECK_OK(sbx_fs_write(dfd, "big.png", big, n, 0644, 0, &err), &err);
        free(big);
        CHECK_ERR(sbx_image_load(dfd, "big.png", NULL, &b, &info, &err), SBX_E_TOOBIG, &err,
                  "image 'big.png' is larger than the allowed 10MB");
    }
out:
    unlinkat(dfd, "shot.png", 0);
    unlinkat(dfd, "notes.txt", 0);
    unlinkat(dfd, "link.png", 0);
    unlinkat(dfd, "big.png", 0);
    close(dfd);
    CHECK(rmdir(dir) == 0);
    sbx_buf_release(&b);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_sniff_types);
    TAP_RUN(test_refused);
    TAP_RUN(test_truncated_and_implausible);
    TAP_RUN(test_data_url);
    TAP_RUN(test_load);
    return TAP_DONE();
}
