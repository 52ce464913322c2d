/* sbx internal: the remote layer (docs/internals/wire.md), helpers shared by its decoders.
 *
 * Everything under src/sandbox/wire/ turns bytes from a server into events and events into
 * bytes, without I/O of its own: the providers that talk to a server (over libcurl or a socket
 * they hold) feed what they read and send what comes out. Every byte a server sends is treated
 * as hostile: each decoder bounds what it buffers and names what was wrong. */
#ifndef SBX_SANDBOX_WIRE_WIRE_H
#define SBX_SANDBOX_WIRE_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* Is p[0..n) well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF)? */
int sbx__wire_utf8_valid(const uint8_t *p, size_t n);

/* Copy text from a server into out (size outsz > 0, always NUL-terminated) for an error
 * message: control characters and bytes that are not printable ASCII become '?', so a message
 * cannot move a terminal's cursor or forge lines in a log; cut at outsz - 1 bytes with "..."
 * at the end when it did not fit. Returns out. */
char *sbx__wire_clean(const char *s, size_t n, char *out, size_t outsz);

#endif
