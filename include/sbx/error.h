/* sbx: the error type.
 *
 * Every fallible function has the shape `int f(..., struct sbx_error *err)`. It returns 0 on
 * success and leaves err untouched, or returns -code and fills err in. err may be NULL when the
 * caller does not want the message. The message lives inside the struct, so reporting an error
 * never allocates and never needs releasing.
 *
 * Messages are lowercase, without a final full stop, subject in quotes:
 *   cannot open 'repo/x': permission denied
 * Context is added while unwinding with sbx_error_prefix(), never by replacing the message. */
#ifndef SBX_ERROR_H
#define SBX_ERROR_H

#include "common.h"

/* Append only: the numeric values are part of the ABI and appear in logs. */
enum sbx_errcode {
    SBX_OK = 0,
    SBX_E_INVAL,       /* bad argument or bad input document */
    SBX_E_NOTFOUND,    /* a named thing does not exist */
    SBX_E_EXISTS,      /* a thing to be created already exists */
    SBX_E_PERM,        /* refused by a policy or by the kernel */
    SBX_E_IO,          /* read/write failure */
    SBX_E_SYS,         /* a system call failed; see sys_errno */
    SBX_E_TOOBIG,      /* a configured size, depth or count limit was hit */
    SBX_E_PARSE,       /* malformed JSON, YAML, SSE, tar ... */
    SBX_E_HTTP,        /* transport failure talking HTTP */
    SBX_E_API,         /* a remote API answered with an error */
    SBX_E_TIMEOUT,     /* a deadline passed */
    SBX_E_SANDBOX,     /* the sandbox could not be set up or is gone */
    SBX_E_UNSUPPORTED, /* a feature is not available here */
    SBX_E_CANCELLED,   /* the operation was cancelled by the caller */
    SBX_E_MAXTURNS,    /* an agent run exceeded its turn budget */
    SBX_E_EXEC,        /* a command could not be executed: not found (sys_errno ENOENT) or
                          not runnable (EACCES, ENOEXEC, EISDIR, ...) */
    SBX_E_TRIPWIRE,    /* a guardrail tripped (agent runs: the GUARDRAIL event says which) */
};
#define SBX_E_LAST SBX_E_TRIPWIRE

#define SBX_ERROR_MSG_MAX 1024

struct sbx_error {
    enum sbx_errcode code;
    int sys_errno;               /* errno at the failure, 0 if none */
    char msg[SBX_ERROR_MSG_MAX]; /* always NUL-terminated; "" when code is SBX_OK */
};

#define SBX_ERROR_INIT \
    {                  \
        SBX_OK, 0,     \
        {              \
            0          \
        }              \
    }

/* Reset err to SBX_OK with an empty message. err may be NULL. */
SBX_API void sbx_error_clear(struct sbx_error *err);

/* Fill err (may be NULL) and return -code. A message longer than the buffer is cut. */
SBX_API int sbx_error_set(struct sbx_error *err, enum sbx_errcode code, int sys_errno,
                          const char *fmt, ...) SBX_PRINTF(4, 5);

/* Like sbx_error_set with code SBX_E_SYS (or a code mapped from errno: ENOENT→NOTFOUND,
 * EEXIST→EXISTS, EACCES/EPERM→PERM, EFBIG→TOOBIG) and ": <strerror(errnum)>" appended. */
SBX_API int sbx_error_errno(struct sbx_error *err, int errnum, const char *fmt, ...)
        SBX_PRINTF(3, 4);

/* Prepend "<context>: " to the message; err may be NULL. Keep the rc you already have and
 * return it after the call: `sbx_error_prefix(err, "entry '%s'", path); return rc;` */
SBX_API void sbx_error_prefix(struct sbx_error *err, const char *fmt, ...) SBX_PRINTF(2, 3);

/* Copy src into dst (either may be NULL). Returns -src->code. */
SBX_API int sbx_error_copy(struct sbx_error *dst, const struct sbx_error *src);

/* A short stable name of the code ("invalid", "not found", ...). Never NULL. */
SBX_API const char *sbx_strerror(enum sbx_errcode code);

#endif
