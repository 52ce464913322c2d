/* Private: libseccomp, opened on first use (src/core/dl.h). Include this instead of
 * <seccomp.h>; call sbx__seccomp_lib_load() before the first call. Only the local provider's
 * isolation compiles filters with it (src/providers/local/isolate/seccomp.c), once per sandbox
 * in its supervisor, on the host: the CLI's commands (`sbx sandbox exec` among them), the
 * harness and an unisolated sandbox never need it. The macros of <seccomp.h> (SCMP_SYS,
 * SCMP_A0, SCMP_ACT_ERRNO) are constants and stay as they are. */
#ifndef SBX_CORE_DL_SECCOMP_H
#define SBX_CORE_DL_SECCOMP_H

#include <seccomp.h>

#include "core/dl.h"

#define SBX__SECCOMP_FUNCS(X) \
    X(seccomp_attr_set)       \
    X(seccomp_export_bpf)     \
    X(seccomp_init)           \
    X(seccomp_release)        \
    X(seccomp_rule_add)       \
    X(seccomp_syscall_resolve_name)

struct sbx__seccomp_fns {
    SBX__SECCOMP_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__seccomp_fns sbx__seccomp;

/* Load libseccomp.so.2 once per process; SBX_E_UNSUPPORTED naming it when it is missing.
 * Thread-safe. */
int sbx__seccomp_lib_load(struct sbx_error *err);

#define seccomp_attr_set             (sbx__seccomp.seccomp_attr_set)
#define seccomp_export_bpf           (sbx__seccomp.seccomp_export_bpf)
#define seccomp_init                 (sbx__seccomp.seccomp_init)
#define seccomp_release              (sbx__seccomp.seccomp_release)
#define seccomp_rule_add             (sbx__seccomp.seccomp_rule_add)
#define seccomp_syscall_resolve_name (sbx__seccomp.seccomp_syscall_resolve_name)

#endif
