/* Token-budget truncation and the shell tools' response layout (see include/sbx/truncate.h).
 * The arithmetic follows the reference exactly so the model sees the same text. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sbx/hash.h"
#include "sbx/truncate.h"

size_t sbx_truncate_estimate_tokens(size_t bytes)
{
    return bytes / SBX_TRUNCATE_BYTES_PER_TOKEN + (bytes % SBX_TRUNCATE_BYTES_PER_TOKEN != 0);
}

size_t sbx_truncate_count_lines(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t lines = 0, i = 0;
    int open = 0; /* a line has started and not yet ended */
    while (i < len) {
        size_t sep = 0;
        unsigned char c = s[i];
        if (c == '\r')
            sep = i + 1 < len && s[i + 1] == '\n' ? 2 : 1;
        else if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e)
            sep = 1;
        else if (c == 0xC2 && i + 1 < len && s[i + 1] == 0x85)
            sep = 2;
        else if (c == 0xE2 && i + 2 < len && s[i + 1] == 0x80 &&
                 (s[i + 2] == 0xA8 || s[i + 2] == 0xA9))
            sep = 3;
        if (sep) {
            lines++;
            open = 0;
            i += sep;
        } else {
            open = 1;
            i++;
        }
    }
    return lines + open;
}

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0 when it is ill-formed; *bad then
 * receives the length of its maximal invalid subpart (at least 1). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t k = 1; k <= need; k++) {
        unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (k >= n || s[k] < l || s[k] > h) {
            *bad = k;
            return 0;
        }
    }
    return need + 1;
}

int sbx_truncate_fix_utf8(const char *text, size_t len, struct sbx_buf *out, struct sbx_error *err)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, run = 0;
    int rc;
    while (i < len) {
        size_t bad = 0, l = utf8_seq(s + i, len - i, &bad);
        if (l) {
            i += l;
            continue;
        }
        if ((rc = sbx_buf_add(out, text + run, i - run, err)) < 0 ||
            (rc = sbx_buf_add(out, "\xEF\xBF\xBD", 3, err)) < 0)
            return rc;
        i += bad;
        run = i;
    }
    return sbx_buf_add(out, text + run, len - run, err);
}

/* Byte length of the UTF-8 character starting with c (1 for anything unexpected). */
static size_t char_len(unsigned char c)
{
    return c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
}

int sbx_truncate_tokens(const char *text, size_t len, size_t max_tokens, struct sbx_buf *out,
                        size_t *orig_tokens, struct sbx_error *err)
{
    size_t budget = max_tokens > SIZE_MAX / SBX_TRUNCATE_BYTES_PER_TOKEN
                            ? SIZE_MAX
                            : max_tokens * SBX_TRUNCATE_BYTES_PER_TOKEN;
    size_t total = sbx_truncate_estimate_tokens(len);
    char prefix[64], marker[64];
    size_t plen, mlen, content, left, right, head = 0, tail;
    int rc;

    if (len <= budget) {
        if (orig_tokens)
            *orig_tokens = 0;
        return sbx_buf_add(out, text, len, err);
    }
    plen = (size_t)snprintf(prefix, sizeof(prefix), "Total output lines: %zu\n\n",
                            sbx_truncate_count_lines(text, len));
    mlen = (size_t)snprintf(marker, sizeof(marker), "\xE2\x80\xA6%zu tokens truncated\xE2\x80\xA6",
                            total);
    if (plen + mlen > budget)
        plen = 0;
    if (plen + mlen > budget) {
        /* Too small for any content: the whole marker, never a cut one. */
        if (orig_tokens)
            *orig_tokens = total;
        return sbx_buf_add(out, marker, mlen, err);
    }
    content = budget - plen - mlen;
    left = content / 2;
    right = content - left;
    /* The head: whole characters that end within left bytes. */
    while (head < len) {
        size_t l = char_len((unsigned char)text[head]);
        if (head + l > left)
            break;
        head += l;
    }
    /* The tail: from the first character boundary at or after len - right. */
    tail = len - right;
    while (tail < len && ((unsigned char)text[tail] & 0xC0) == 0x80)
        tail++;
    if (tail < head)
        tail = head;
    mlen = (size_t)snprintf(marker, sizeof(marker), "\xE2\x80\xA6%zu tokens truncated\xE2\x80\xA6",
                            sbx_truncate_estimate_tokens(tail - head));
    if ((rc = sbx_buf_add(out, prefix, plen, err)) < 0 ||
        (rc = sbx_buf_add(out, text, head, err)) < 0 ||
        (rc = sbx_buf_add(out, marker, mlen, err)) < 0 ||
        (rc = sbx_buf_add(out, text + tail, len - tail, err)) < 0)
        return rc;
    if (orig_tokens)
        *orig_tokens = total;
    return 0;
}

/* 6 hex digits; the id only tells chunks apart, so a clock fallback is good enough. */
static void random_chunk_id(char id[7])
{
    if (sbx_random_hex(id, 3, NULL) == 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(id, 7, "%06lx", ((unsigned long)ts.tv_nsec ^ (unsigned long)getpid()) & 0xFFFFFF);
}

int sbx_truncate_format_response(const struct sbx_truncate_response *r, struct sbx_buf *out,
                                 struct sbx_error *err)
{
    struct sbx_buf fixed, cut;
    char id[7];
    size_t orig = 0;
    int rc;

    sbx_buf_init(&fixed, SBX_BUF_NOLIMIT);
    sbx_buf_init(&cut, SBX_BUF_NOLIMIT);
    if (!r->chunk_id)
        random_chunk_id(id);
    if ((rc = sbx_truncate_fix_utf8(r->output ? r->output : "", r->output_len, &fixed, err)) < 0)
        goto out;
    if ((rc = sbx_truncate_tokens(fixed.data, fixed.len,
                                  r->max_tokens ? r->max_tokens : SBX_TRUNCATE_DEFAULT_TOKENS, &cut,
                                  &orig, err)) < 0)
        goto out;
    if ((rc = sbx_buf_addf(out, err, "Chunk ID: %s\nWall time: %.4f seconds\n",
                           r->chunk_id ? r->chunk_id : id, r->wall_time)) < 0)
        goto out;
    if (r->exited &&
        (rc = sbx_buf_addf(out, err, "Process exited with code %d\n", r->exit_code)) < 0)
        goto out;
    if (r->running && (rc = sbx_buf_addf(out, err, "Process running with session ID %" PRId64 "\n",
                                         r->session_id)) < 0)
        goto out;
    if (orig && (rc = sbx_buf_addf(out, err, "Original token count: %zu\n", orig)) < 0)
        goto out;
    if ((rc = sbx_buf_adds(out, "Output:\n", err)) < 0 ||
        (rc = sbx_buf_add(out, cut.data, cut.len, err)) < 0)
        goto out;
out:
    sbx_buf_release(&fixed);
    sbx_buf_release(&cut);
    return rc;
}
