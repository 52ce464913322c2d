/* Starting a command through a shell preamble: shellfs.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/shellfs/shellfs.h"
#include "sbx/buf.h"
#include "sbx/session.h"
#include "sbx/strv.h"

int sbx__shellfs_start_error(char mark, const char *name, const char *cwd, struct sbx_error *err)
{
    switch (mark) {
    case 'N':
        return sbx_error_set(err, SBX_E_EXEC, ENOENT, "command '%s' not found", name);
    case 'X':
        return sbx_error_set(err, SBX_E_EXEC, EACCES, "cannot run '%s': %s", name,
                             strerror(EACCES));
    case 'C':
        return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                             "working directory '%s' is not a directory of the sandbox",
                             cwd[0] ? cwd : ".");
    case 'P':
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "working directory '%s' leads out of the workspace", cwd);
    case 'E':
        return sbx_error_set(err, SBX_E_INVAL, 0, "an environment entry of '%s' was refused", name);
    default:
        return 0;
    }
}

static const char OUTER[] = "s=$1; shift\n"
                            "if command -v setsid >/dev/null 2>&1; then\n"
                            "  exec setsid -w /bin/sh -c \"$s\" sbx \"$@\"\n"
                            "fi\n"
                            "exec /bin/sh -c \"$s\" sbx \"$@\"\n";

static const char INNER[] =
        "ws=$1 wd=$2 bg=$3 n=$4; shift 4\n"
        "while [ \"$n\" -gt 0 ]; do export \"$1\"; shift; n=$((n - 1)); done\n"
        "cd -- \"$wd\" 2>/dev/null || { printf C; exit 125; }\n"
        "case \"$(pwd -P)/\" in \"$ws\"/*) ;; *) printf P; exit 125;; esac\n"
        "case $1 in\n"
        "*/*) [ -e \"$1\" ] || { printf N; exit 127; }\n"
        "     if [ -d \"$1\" ] || [ ! -x \"$1\" ]; then printf X; exit 126; fi;;\n"
        "*) command -v \"$1\" >/dev/null 2>&1 || { printf N; exit 127; };;\n"
        "esac\n"
        "pg=0; read -r _ _ _ _ pg _ < /proc/$$/stat 2>/dev/null\n"
        "printf 'S%d %d\\n' \"$$\" \"$pg\"\n"
        "[ \"$bg\" = 1 ] && exec \"$@\"\n"
        "trap : TERM\n"
        "\"$@\"\n"
        "rc=$?\n"
        "trap '' TERM\n"
        "[ \"$pg\" != \"$$\" ] || kill -TERM 0 2>/dev/null\n"
        "exit \"$rc\"\n";

void sbx__shellfs_launch_argv(struct sbx_strv *a, const char *root, const char *cwd,
                              const struct sbx_exec_spec *spec)
{
    const char *head[] = {"/bin/sh", "-c", OUTER, "sbx", INNER, root};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        sbx_strv_push(a, head[i]);
    sbx_strv_push_take(a, cwd[0] ? sbx_xasprintf("%s/%s", root, cwd) : sbx_xstrdup(root));
    sbx_strv_push(a, spec->flags & SBX_EXEC_KEEP_BACKGROUND ? "1" : "0");
    size_t n = 0;
    for (const char *const *e = spec->env; e && *e; e++)
        n += strchr(*e, '=') != NULL;
    char num[24];
    snprintf(num, sizeof(num), "%zu", n);
    sbx_strv_push(a, num);
    for (const char *const *e = spec->env; e && *e; e++)
        if (strchr(*e, '='))
            sbx_strv_push(a, *e);
    if (spec->argv) {
        for (const char *const *v = spec->argv; *v; v++)
            sbx_strv_push(a, *v);
    } else {
        sbx_strv_push(a, "/bin/sh");
        sbx_strv_push(a, "-c");
        sbx_strv_push(a, spec->command);
    }
}

/* An unbounded buffer's add fails only where allocation aborts first. */
static inline void keep(int rc)
{
    (void)rc;
}

char *sbx__shellfs_quote_argv(const char *const *argv)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    for (size_t i = 0; argv[i]; i++) {
        keep(sbx_buf_add(&b, i ? " '" : "'", i ? 2 : 1, NULL));
        for (const char *p = argv[i]; *p; p++) {
            size_t k = strcspn(p, "'");
            keep(sbx_buf_add(&b, p, k, NULL));
            p += k;
            if (!*p)
                break;
            keep(sbx_buf_add(&b, "'\\''", 4, NULL));
        }
        keep(sbx_buf_add(&b, "'", 1, NULL));
    }
    keep(sbx_buf_add(&b, "", 1, NULL));
    return b.data;
}
