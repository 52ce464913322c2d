#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sbx/error.h"

void sbx_error_clear(struct sbx_error *err)
{
    if (!err)
        return;
    err->code = SBX_OK;
    err->sys_errno = 0;
    err->msg[0] = '\0';
}

SBX_PRINTF(2, 0) static void vformat(struct sbx_error *err, const char *fmt, va_list ap)
{
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    if (n < 0)
        err->msg[0] = '\0';
}

int sbx_error_set(struct sbx_error *err, enum sbx_errcode code, int sys_errno, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        err->sys_errno = sys_errno;
        va_start(ap, fmt);
        vformat(err, fmt, ap);
        va_end(ap);
    }
    return -(int)code;
}

static enum sbx_errcode code_from_errno(int e)
{
    switch (e) {
    case ENOENT:
    case ESRCH:
        return SBX_E_NOTFOUND;
    case EEXIST:
        return SBX_E_EXISTS;
    case EACCES:
    case EPERM:
    case EXDEV:
    case ELOOP:
        return SBX_E_PERM;
    case EFBIG:
    case E2BIG:
    case ENAMETOOLONG:
    case EMSGSIZE:
        return SBX_E_TOOBIG;
    case ETIMEDOUT:
        return SBX_E_TIMEOUT;
    case EINVAL:
    case ENOTDIR:
    case EISDIR:
        return SBX_E_INVAL;
    case EIO:
        return SBX_E_IO;
    case ENOSYS:
    case EOPNOTSUPP:
        return SBX_E_UNSUPPORTED;
    default:
        return SBX_E_SYS;
    }
}

int sbx_error_errno(struct sbx_error *err, int errnum, const char *fmt, ...)
{
    enum sbx_errcode code = code_from_errno(errnum);
    if (err) {
        va_list ap;
        err->code = code;
        err->sys_errno = errnum;
        va_start(ap, fmt);
        vformat(err, fmt, ap);
        va_end(ap);
        size_t len = strlen(err->msg);
        char ebuf[128];
        const char *es = strerror_r(errnum, ebuf, sizeof(ebuf));
        /* strerror gives "No such file or directory"; our messages are lowercase */
        snprintf(err->msg + len, sizeof(err->msg) - len, ": %c%s",
                 es[0] >= 'A' && es[0] <= 'Z' ? es[0] - 'A' + 'a' : es[0], es[0] ? es + 1 : "");
    }
    return -(int)code;
}

void sbx_error_prefix(struct sbx_error *err, const char *fmt, ...)
{
    if (!err)
        return;
    char pre[SBX_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t plen = strlen(pre);
    size_t mlen = strlen(err->msg);
    if (plen + 2 >= sizeof(err->msg))
        return;
    size_t keep = sizeof(err->msg) - plen - 3;
    if (mlen > keep)
        mlen = keep;
    memmove(err->msg + plen + 2, err->msg, mlen);
    err->msg[plen + 2 + mlen] = '\0';
    memcpy(err->msg, pre, plen);
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
}

int sbx_error_copy(struct sbx_error *dst, const struct sbx_error *src)
{
    if (!src)
        return 0;
    if (dst && dst != src)
        memcpy(dst, src, sizeof(*dst));
    return -(int)src->code;
}

const char *sbx_strerror(enum sbx_errcode code)
{
    switch (code) {
    case SBX_OK:
        return "ok";
    case SBX_E_INVAL:
        return "invalid";
    case SBX_E_NOTFOUND:
        return "not found";
    case SBX_E_EXISTS:
        return "exists";
    case SBX_E_PERM:
        return "permission denied";
    case SBX_E_IO:
        return "i/o error";
    case SBX_E_SYS:
        return "system error";
    case SBX_E_TOOBIG:
        return "too big";
    case SBX_E_PARSE:
        return "parse error";
    case SBX_E_HTTP:
        return "http error";
    case SBX_E_API:
        return "api error";
    case SBX_E_TIMEOUT:
        return "timed out";
    case SBX_E_SANDBOX:
        return "sandbox error";
    case SBX_E_UNSUPPORTED:
        return "unsupported";
    case SBX_E_CANCELLED:
        return "cancelled";
    case SBX_E_MAXTURNS:
        return "max turns exceeded";
    case SBX_E_EXEC:
        return "cannot execute";
    case SBX_E_TRIPWIRE:
        return "guardrail tripped";
    }
    return "unknown error";
}
