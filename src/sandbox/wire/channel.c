/* The Kubernetes remote-command and port-forward channel protocols: channel.h. */
#include <string.h>

#include "sandbox/wire/channel.h"
#include "sandbox/wire/wire.h"
#include "sandbox/wire/ws.h"
#include "sbx/b64.h"
#include "sbx/json.h"

const char *const sbx__ch_exec_protocols[] = {"v5.channel.k8s.io", "v4.channel.k8s.io", NULL};

static const char *const names[] = {
        [SBX__CH_V1] = "channel.k8s.io",    [SBX__CH_V2] = "v2.channel.k8s.io",
        [SBX__CH_V3] = "v3.channel.k8s.io", [SBX__CH_V4] = "v4.channel.k8s.io",
        [SBX__CH_V5] = "v5.channel.k8s.io", [SBX__CH_BASE64] = "base64.channel.k8s.io",
};

int sbx__ch_version_of(const char *protocol)
{
    for (int v = SBX__CH_V1; protocol && v <= SBX__CH_BASE64; v++)
        if (strcmp(protocol, names[v]) == 0)
            return v;
    return 0;
}

const char *sbx__ch_protocol(int version)
{
    return version >= SBX__CH_V1 && version <= SBX__CH_BASE64 ? names[version] : NULL;
}

int sbx__ch_opcode(int version)
{
    return version == SBX__CH_BASE64 ? SBX__WS_TEXT : SBX__WS_BINARY;
}

/* Does the channel exist in this version? */
static int channel_known(int version, int ch)
{
    if (ch >= SBX__CH_STDIN && ch <= SBX__CH_ERROR)
        return 1;
    if (ch == SBX__CH_RESIZE)
        return version >= SBX__CH_V3 && version <= SBX__CH_V5;
    return 0;
}

int sbx__ch_decode(int version, int opcode, const uint8_t *msg, size_t n, struct sbx_buf *scratch,
                   struct sbx__ch_frame *out, struct sbx_error *err)
{
    if (!sbx__ch_protocol(version))
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown channel protocol version %d", version);
    if (opcode != sbx__ch_opcode(version))
        return sbx_error_set(err, SBX_E_PARSE, 0, "'%s' sent a %s message", names[version],
                             opcode == SBX__WS_TEXT ? "text" : "binary");
    memset(out, 0, sizeof(*out));
    out->channel = SBX__CH_NONE;
    if (n == 0)
        return 0;
    int ch = msg[0];
    if (version == SBX__CH_BASE64) {
        if (ch < '0' || ch > '9')
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "'%s' message starts with byte 0x%02x, not a channel digit",
                                 names[version], (unsigned)ch);
        ch -= '0';
    }
    if (version == SBX__CH_V5 && ch == SBX__CH_CLOSE) {
        if (n != 2)
            return sbx_error_set(err, SBX_E_PARSE, 0, "a close signal has %zu bytes, not 2", n);
        if (!channel_known(version, msg[1]))
            return sbx_error_set(err, SBX_E_PARSE, 0, "a close signal names unknown channel %d",
                                 msg[1]);
        out->channel = SBX__CH_CLOSE;
        out->closed = msg[1];
        return 0;
    }
    if (!channel_known(version, ch))
        return sbx_error_set(err, SBX_E_PARSE, 0, "'%s' message on unknown channel %d",
                             names[version], ch);
    out->channel = ch;
    if (version != SBX__CH_BASE64) {
        out->data = msg + 1;
        out->len = n - 1;
        return 0;
    }
    sbx_buf_reset(scratch);
    int rc = sbx_b64_decode((const char *)msg + 1, n - 1, scratch, err);
    if (rc < 0) {
        sbx_error_prefix(err, "'%s' message on channel %d", names[version], ch);
        return rc;
    }
    out->data = (const uint8_t *)scratch->data;
    out->len = scratch->len;
    return 0;
}

int sbx__ch_encode(int version, int channel, const void *p, size_t n, struct sbx_buf *out,
                   struct sbx_error *err)
{
    if (!sbx__ch_protocol(version))
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown channel protocol version %d", version);
    if (!channel_known(version, channel))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' has no channel %d", names[version],
                             channel);
    int rc;
    if (version == SBX__CH_BASE64) {
        if ((rc = sbx_buf_addch(out, (char)('0' + channel), err)) < 0)
            return rc;
        return sbx_b64_encode(p, n, out, err);
    }
    if ((rc = sbx_buf_addch(out, (char)channel, err)) < 0)
        return rc;
    return sbx_buf_add(out, p, n, err);
}

int sbx__ch_encode_close(int version, int channel, struct sbx_buf *out, struct sbx_error *err)
{
    if (version != SBX__CH_V5)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "'%s' has no close signal",
                             sbx__ch_protocol(version) ? names[version] : "?");
    if (!channel_known(version, channel))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' has no channel %d", names[version],
                             channel);
    uint8_t m[2] = {SBX__CH_CLOSE, (uint8_t)channel};
    return sbx_buf_add(out, m, 2, err);
}

/* ---------------------------------------------------------------------------------------------
 * The error channel */

/* "NonZeroExitCode": the exit code is details.causes[{"reason":"ExitCode","message":"N"}]. */
static int exit_code_of(json_t *status, int *exit_code, struct sbx_error *err)
{
    json_t *causes = json_object_get(json_object_get(status, "details"), "causes");
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c)
    {
        const char *reason = json_string_value(json_object_get(c, "reason"));
        const char *msg = json_string_value(json_object_get(c, "message"));
        if (!reason || strcmp(reason, "ExitCode") != 0)
            continue;
        /* An exit status is 8 bits; 0 would contradict the reason. */
        int v = 0;
        size_t k = 0;
        for (; msg && msg[k] >= '0' && msg[k] <= '9' && k < 3; k++)
            v = v * 10 + (msg[k] - '0');
        if (!msg || k == 0 || msg[k] || v == 0 || v > 255)
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "the status's exit code is not a number from 1 to 255");
        *exit_code = v;
        return 0;
    }
    return sbx_error_set(err, SBX_E_PARSE, 0, "a NonZeroExitCode status names no exit code");
}

static int status_json(const uint8_t *p, size_t n, int *exit_code, struct sbx_error *err)
{
    json_t *j = NULL;
    struct sbx_json_limits lim = {.max_bytes = SBX__CH_STATUS_MAX, .max_depth = 8};
    int rc = sbx_json_parse((const char *)p, n, &lim, &j, err);
    if (rc < 0)
        return rc;
    const char *status = json_string_value(json_object_get(j, "status"));
    const char *reason = json_string_value(json_object_get(j, "reason"));
    const char *message = json_string_value(json_object_get(j, "message"));
    char r[128], m[512];
    if (!json_is_object(j) || !status) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "the status is not an object with a 'status'");
    } else if (strcmp(status, "Success") == 0) {
        *exit_code = 0;
    } else if (strcmp(status, "Failure") != 0) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "unknown status '%s'",
                           sbx__wire_clean(status, strlen(status), r, sizeof(r)));
    } else if (reason && strcmp(reason, "NonZeroExitCode") == 0) {
        rc = exit_code_of(j, exit_code, err);
    } else {
        rc = sbx_error_set(
                err, SBX_E_API, 0, "the server reported a failure%s%s%s: %s", reason ? " (" : "",
                reason ? sbx__wire_clean(reason, strlen(reason), r, sizeof(r)) : "",
                reason ? ")" : "",
                message ? sbx__wire_clean(message, strlen(message), m, sizeof(m)) : "no message");
    }
    json_decref(j);
    return rc;
}

int sbx__ch_status_decode(int version, const uint8_t *p, size_t n, int *exit_code,
                          struct sbx_error *err)
{
    char m[512];
    if (!sbx__ch_protocol(version))
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown channel protocol version %d", version);
    if (n > SBX__CH_STATUS_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "the error channel carried over %d bytes",
                             SBX__CH_STATUS_MAX);
    if (version == SBX__CH_V4 || version == SBX__CH_V5) {
        if (n == 0)
            return sbx_error_set(err, SBX_E_PARSE, 0, "the server sent no status");
        int rc = status_json(p, n, exit_code, err);
        if (rc < 0 && rc != -SBX_E_API)
            sbx_error_prefix(err, "error channel");
        return rc;
    }
    if (n == 0) {
        *exit_code = 0;
        return 0;
    }
    return sbx_error_set(err, SBX_E_API, 0, "the server reported an error: %s",
                         sbx__wire_clean((const char *)p, n, m, sizeof(m)));
}

int sbx__ch_status_encode(int version, int exit_code, int signal, int timed_out,
                          const char *message, struct sbx_buf *out, struct sbx_error *err)
{
    char code[16], sig[16], dflt[64];
    if (exit_code < 0 || exit_code > 255)
        return sbx_error_set(err, SBX_E_INVAL, 0, "exit code %d is not 0-255", exit_code);
    if (signal < 0 || signal > 64)
        return sbx_error_set(err, SBX_E_INVAL, 0, "signal %d is not 0-64", signal);
    snprintf(code, sizeof(code), "%d", exit_code);
    snprintf(sig, sizeof(sig), "%d", signal);
    snprintf(dflt, sizeof(dflt), "command terminated with non-zero exit code %d", exit_code);
    if (!message)
        message = dflt;
    if (version != SBX__CH_V4 && version != SBX__CH_V5)
        return exit_code == 0 ? 0 : sbx_buf_adds(out, message, err);
    json_t *j = exit_code == 0
                        ? json_pack("{s:{},s:s}", "metadata", "status", "Success")
                        : json_pack("{s:{},s:s,s:s,s:s,s:{s:[{s:s,s:s}]}}", "metadata", "status",
                                    "Failure", "message", message, "reason", "NonZeroExitCode",
                                    "details", "causes", "reason", "ExitCode", "message", code);
    if (!j)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the status message is not UTF-8");
    if (signal || timed_out) {
        json_t *causes = json_object_get(json_object_get(j, "details"), "causes");
        if (!causes) {
            causes = json_array();
            json_object_set_new(j, "details", json_pack("{s:o}", "causes", causes));
        }
        if (signal)
            json_array_append_new(causes,
                                  json_pack("{s:s,s:s}", "reason", "Signal", "message", sig));
        if (timed_out)
            json_array_append_new(causes, json_pack("{s:s}", "reason", "TimedOut"));
    }
    int rc = sbx_json_dump(j, SBX_JSON_COMPACT, out, err);
    json_decref(j);
    return rc;
}

int sbx__ch_status_causes(int version, const uint8_t *p, size_t n, int *signal, int *timed_out,
                          struct sbx_error *err)
{
    *signal = 0;
    *timed_out = 0;
    if (version != SBX__CH_V4 && version != SBX__CH_V5)
        return 0;
    json_t *j = NULL, *c;
    struct sbx_json_limits lim = {.max_bytes = SBX__CH_STATUS_MAX, .max_depth = 8};
    int rc = sbx_json_parse((const char *)p, n, &lim, &j, err);
    if (rc < 0) {
        sbx_error_prefix(err, "error channel");
        return rc;
    }
    size_t i;
    json_array_foreach(json_object_get(json_object_get(j, "details"), "causes"), i, c)
    {
        const char *reason = json_string_value(json_object_get(c, "reason"));
        const char *msg = json_string_value(json_object_get(c, "message"));
        if (reason && strcmp(reason, "TimedOut") == 0)
            *timed_out = 1;
        if (!reason || strcmp(reason, "Signal") != 0)
            continue;
        int v = 0;
        size_t k = 0;
        for (; msg && msg[k] >= '0' && msg[k] <= '9' && k < 2; k++)
            v = v * 10 + (msg[k] - '0');
        if (!msg || k == 0 || msg[k] || v == 0 || v > 64 || msg[0] == '0') {
            rc = sbx_error_set(err, SBX_E_PARSE, 0,
                               "the status's signal is not a number from 1 to 64");
            break;
        }
        *signal = v;
    }
    json_decref(j);
    if (rc < 0) {
        *signal = 0;
        *timed_out = 0;
    }
    return rc;
}

int sbx__ch_resize_encode(unsigned width, unsigned height, struct sbx_buf *out,
                          struct sbx_error *err)
{
    if (width > 65535 || height > 65535)
        return sbx_error_set(err, SBX_E_INVAL, 0, "terminal size %ux%u is over 65535", width,
                             height);
    return sbx_buf_addf(out, err, "{\"Width\":%u,\"Height\":%u}", width, height);
}

int sbx__ch_resize_decode(const uint8_t *p, size_t n, unsigned *width, unsigned *height,
                          struct sbx_error *err)
{
    json_t *j = NULL;
    struct sbx_json_limits lim = {.max_bytes = SBX__CH_STATUS_MAX, .max_depth = 4};
    int rc = sbx_json_parse((const char *)p, n, &lim, &j, err);
    if (rc < 0) {
        sbx_error_prefix(err, "resize message");
        return rc;
    }
    json_t *w = json_object_get(j, "Width"), *h = json_object_get(j, "Height");
    if (!json_is_integer(w) || !json_is_integer(h) || json_integer_value(w) < 0 ||
        json_integer_value(w) > 65535 || json_integer_value(h) < 0 ||
        json_integer_value(h) > 65535) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0,
                           "resize message lacks a Width and Height between 0 and 65535");
    } else {
        *width = (unsigned)json_integer_value(w);
        *height = (unsigned)json_integer_value(h);
    }
    json_decref(j);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Port forwarding */

int sbx__pf_init(struct sbx__pf *pf, const uint16_t *ports, size_t n, int server,
                 struct sbx_error *err)
{
    memset(pf, 0, sizeof(*pf));
    if (n == 0 || n > SBX__PF_MAX_PORTS)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a port forward takes 1 to %d ports, not %zu",
                             SBX__PF_MAX_PORTS, n);
    for (size_t i = 0; i < n; i++)
        if (ports[i] == 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "port 0 cannot be forwarded");
    memcpy(pf->ports, ports, n * sizeof(*ports));
    pf->nports = n;
    pf->server = server;
    return 0;
}

int sbx__pf_decode(struct sbx__pf *pf, const uint8_t *msg, size_t n, struct sbx__pf_frame *out,
                   struct sbx_error *err)
{
    if (n == 0)
        return sbx_error_set(err, SBX_E_PARSE, 0, "port-forward message without a channel");
    size_t ch = msg[0];
    if (ch >= 2 * pf->nports)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "port-forward message on channel %zu; %zu ports were asked for", ch,
                             pf->nports);
    memset(out, 0, sizeof(*out));
    out->port_index = ch / 2;
    out->is_error = (int)(ch & 1);
    const uint8_t *p = msg + 1;
    size_t left = n - 1;
    /* The client side reads each channel's port first, in one message or split. */
    while (!pf->server && pf->rx_seen[ch] < 2 && left) {
        pf->rx_port[ch] |= (uint16_t)(*p << (8 * pf->rx_seen[ch]));
        pf->rx_seen[ch]++, p++, left--;
        if (pf->rx_seen[ch] == 2 && pf->rx_port[ch] != pf->ports[ch / 2])
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "port-forward channel %zu starts with port %u, not %u", ch,
                                 pf->rx_port[ch], pf->ports[ch / 2]);
    }
    out->data = p;
    out->len = left;
    return 0;
}

int sbx__pf_encode(struct sbx__pf *pf, size_t port_index, int is_error, const void *p, size_t n,
                   struct sbx_buf *out, struct sbx_error *err)
{
    if (port_index >= pf->nports)
        return sbx_error_set(err, SBX_E_INVAL, 0, "port index %zu of %zu ports", port_index,
                             pf->nports);
    size_t ch = 2 * port_index + (is_error ? 1 : 0);
    uint8_t head[3] = {(uint8_t)ch, (uint8_t)pf->ports[port_index],
                       (uint8_t)(pf->ports[port_index] >> 8)};
    size_t hlen = pf->server && !pf->tx_started[ch] ? 3 : 1;
    int rc = sbx_buf_add(out, head, hlen, err);
    if (rc == 0)
        rc = sbx_buf_add(out, p, n, err);
    if (rc == 0)
        pf->tx_started[ch] = 1;
    return rc;
}
