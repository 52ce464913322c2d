/* Listening sockets in a /proc/net/tcp table: see session/internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/session/internal.h"

#define TCP_LISTEN 0x0A

int sbx__net_table_listens(const char *text, size_t n, int port)
{
    const char *p = text, *end = text + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char line[512], local[128];
        unsigned st;
        if (len < sizeof(line)) {
            memcpy(line, p, len);
            line[len] = 0;
            /* "  0: 0100007F:1F90 00000000:0000 0A ..." */
            if (sscanf(line, " %*d: %127s %*s %x", local, &st) == 2 && st == TCP_LISTEN) {
                char *colon = strrchr(local, ':');
                if (colon && strtoul(colon + 1, NULL, 16) == (unsigned long)port)
                    return 1;
            }
        }
        p += len + 1;
    }
    return 0;
}
