/* Keep-alive of an upgraded connection (exec, port forward): a ping when the harness has been
 * quiet for the daemon's ping interval, and the connection declared lost when nothing at all
 * came from it for three intervals (src/node/daemon.h). A harness's WebSocket answers pings
 * with pongs, so a live harness whose command is merely quiet is never taken for lost. */
#include <errno.h>

#include "node/daemon.h"
#include "sandbox/wire/ws.h"
#include "sbx/time.h"

#define NS_PER_S 1000000000LL

void node_ka_init(struct node_keepalive *k, unsigned ping_s)
{
    k->ping_ns = (int64_t)ping_s * NS_PER_S;
    k->last_rx_ns = k->last_ping_ns = sbx_time_mono_ns();
}

void node_ka_heard(struct node_keepalive *k)
{
    k->last_rx_ns = sbx_time_mono_ns();
}

int node_ka_poll_ms(const struct node_keepalive *k)
{
    int64_t now = sbx_time_mono_ns();
    int64_t due = (k->last_rx_ns > k->last_ping_ns ? k->last_rx_ns : k->last_ping_ns) + k->ping_ns;
    int64_t ms = due > now ? (due - now) / 1000000 + 1 : 0;
    return ms > 3600000 ? 3600000 : (int)ms;
}

int node_ka_tick(struct node_keepalive *k, struct sbx__ws *ws, struct node_conn *c,
                 struct sbx_error *err)
{
    int64_t now = sbx_time_mono_ns();
    if (now - k->last_rx_ns >= 3 * k->ping_ns)
        return sbx_error_set(err, SBX_E_TIMEOUT, 0,
                             "the harness sent nothing for %lld s (not even a pong): lost",
                             (long long)(3 * k->ping_ns / NS_PER_S));
    if (now - k->last_rx_ns < k->ping_ns || now - k->last_ping_ns < k->ping_ns)
        return 0;
    k->last_ping_ns = now;
    int rc = sbx__ws_ping(ws, "sbx", 3, err);
    if (rc == 0 && ws->out.len)
        rc = node_send(c, ws->out.data, ws->out.len, err);
    sbx_buf_reset(&ws->out);
    return rc;
}
