/* sbx local provider: the isolation plan. A spec becomes an ordered list of mount and file
 * operations that build the sandbox root from an empty tmpfs. Pure: no file is read and no
 * system call is made here, so every rule is unit-tested without privileges. The executor is
 * isolate.c. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "providers/local/isolate/isolate.h"

#define MiB (1024ull * 1024)

/* Sandbox paths that the plan builds itself: the workspace and grants may not land on or in
 * them (they would be hidden by, or would hide, the system parts of the root). */
static const char *const reserved[] = {"/usr",   "/bin",    "/sbin", "/lib",    "/lib32",
                                       "/lib64", "/libx32", "/etc",  "/proc",   "/dev",
                                       "/sys",   "/tmp",    "/run",  "/var/tmp"};

/* Host files of /etc shown inside (read-only) when they exist: the dynamic loader, TLS roots,
 * time zone, protocol tables, shells' system rc files. Nothing with secrets: no shadow, no
 * ssh, no sudoers, no machine-id, not /etc/ssl/private (only ssl/certs and openssl.cnf), not
 * /etc/environment. */
static const char *const etc_files[] = {"ld.so.cache",
                                        "ld.so.conf",
                                        "ld.so.conf.d",
                                        "host.conf",
                                        "localtime",
                                        "timezone",
                                        "ssl/certs",
                                        "ssl/openssl.cnf",
                                        "ca-certificates",
                                        "ca-certificates.conf",
                                        "alternatives",
                                        "protocols",
                                        "services",
                                        "gai.conf",
                                        "os-release",
                                        "debian_version",
                                        "lsb-release",
                                        "locale.alias",
                                        "bash.bashrc",
                                        "profile",
                                        "inputrc",
                                        "mime.types",
                                        "ethertypes",
                                        "rpc",
                                        "python3",
                                        "python3.11",
                                        "perl",
                                        "gitconfig",
                                        "manpath.config"};

/* Grant sources refused unless the grant is marked dangerous. */
static const char *const host_views[] = {"/proc", "/sys", "/dev", "/run", "/var/run"};

static const char *const sys_dirs[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

static const char *const proc_ro[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus",
                                      "/proc/fs"};

static const char *const proc_mask[] = {
        "/proc/kcore",       "/proc/keys",          "/proc/key-users", "/proc/timer_list",
        "/proc/sched_debug", "/proc/latency_stats", "/proc/kmsg",      "/proc/acpi",
        "/proc/scsi",        "/proc/config.gz",     "/proc/cmdline",   "/proc/swaps",
        "/proc/modules"};

static struct sbx__op *push(struct sbx__isolation_plan *p, enum sbx__op_kind kind, const char *dst)
{
    SBX_ALLOC_GROW(p->ops, p->n + 1, p->alloc);
    struct sbx__op *op = &p->ops[p->n++];
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    op->dst = sbx_xstrdup(dst);
    return op;
}

static void push_tmpfs(struct sbx__isolation_plan *p, const char *dst, mode_t mode, uint64_t size)
{
    struct sbx__op *op = push(p, SBX__OP_TMPFS, dst);
    op->mode = mode;
    op->size = size;
}

static struct sbx__op *push_src(struct sbx__isolation_plan *p, enum sbx__op_kind kind,
                                const char *src, const char *dst)
{
    struct sbx__op *op = push(p, kind, dst);
    op->src = sbx_xstrdup(src);
    return op;
}

static void push_symlink(struct sbx__isolation_plan *p, const char *dst, const char *target)
{
    push_src(p, SBX__OP_SYMLINK, target, dst);
}

static void push_file(struct sbx__isolation_plan *p, const char *dst, struct sbx_buf *content)
{
    struct sbx__op *op = push(p, SBX__OP_FILE, dst);
    op->mode = 0644;
    op->content = sbx_buf_detach(content, &op->content_len);
}

void sbx__isolation_plan_release(struct sbx__isolation_plan *plan)
{
    for (size_t i = 0; i < plan->n; i++) {
        free(plan->ops[i].src);
        free(plan->ops[i].dst);
        free(plan->ops[i].content);
    }
    free(plan->ops);
    memset(plan, 0, sizeof(*plan));
}

const struct sbx__op *sbx__isolation_plan_find(const struct sbx__isolation_plan *plan,
                                               enum sbx__op_kind kind, const char *dst)
{
    for (size_t i = 0; i < plan->n; i++)
        if (plan->ops[i].kind == kind && strcmp(plan->ops[i].dst, dst) == 0)
            return &plan->ops[i];
    return NULL;
}

/* a equals b or lies below it ("/a/b" within "/a"; "/ab" is not). */
static int within(const char *a, const char *b)
{
    size_t n = strlen(b);
    return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

/* An absolute, normalised path: "/x/y", no "//", no "." or "..", no trailing '/', no control
 * characters. "/" itself is refused unless allow_slash. */
static int check_abs(const char *what, const char *path, int allow_slash, struct sbx_error *err)
{
    if (!path || path[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' must be an absolute path", what,
                             path ? path : "");
    size_t n = strlen(path);
    if (n > 4095)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s is longer than 4095 bytes", what);
    if (n == 1)
        return allow_slash ? 0 : sbx_error_set(err, SBX_E_INVAL, 0, "%s '/' is not allowed", what);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' contains a control character", what,
                                 path);
    if (path[n - 1] == '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' must not end with '/'", what, path);
    const char *c = path + 1;
    while (*c) {
        const char *e = strchr(c, '/');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "%s '%s' must be normalised (no '//', '.' or '..')", what, path);
        c += len + (e ? 1 : 0);
    }
    return 0;
}

static int check_sandbox_dst(const char *what, const char *dst, struct sbx_error *err)
{
    int rc = check_abs(what, dst, 0, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < SBX_ARRAY_LEN(reserved); i++)
        if (within(dst, reserved[i]))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "%s '%s' is inside '%s', which the sandbox root provides", what,
                                 dst, reserved[i]);
    return 0;
}

/* A host home directory itself (/root, /home, /home/<x>, the caller's $HOME) may never be
 * shown inside: it holds keys and tokens. Directories below one (a toolchain) may be. */
static int is_home(const char *src, const char *host_home)
{
    if (strcmp(src, "/root") == 0 || strcmp(src, "/home") == 0)
        return 1;
    if (strncmp(src, "/home/", 6) == 0 && !strchr(src + 6, '/'))
        return 1;
    return host_home && host_home[0] == '/' && strcmp(src, host_home) == 0;
}

static int check_grant(const struct sbx__isolation_spec *spec, const struct sbx__isolation_grant *g,
                       struct sbx_error *err)
{
    int rc = check_abs("grant source", g->src, 1, err);
    if (rc < 0)
        return rc;
    if (strcmp(g->src, "/") == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "grant source '/' is not allowed");
    if (is_home(g->src, spec->host_home))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "grant source '%s' is a home directory; grant a directory inside it",
                             g->src);
    /* Kernel and runtime views of the host: host processes, devices, service sockets. The
     * executor resolves sources first, so a symlink into one meets the same refusal. */
    for (size_t i = 0; !g->dangerous && i < sizeof(host_views) / sizeof(*host_views); i++)
        if (within(g->src, host_views[i]))
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "grant source '%s' is in '%s', which shows the host's own "
                                 "processes, devices or service sockets; refused unless "
                                 "allowed as dangerous (--allow-dangerous-grant %s)",
                                 g->src, host_views[i], g->src);
    return check_sandbox_dst("grant destination", g->dst ? g->dst : g->src, err);
}

static int check_hostname(const char *h, struct sbx_error *err)
{
    size_t n = strlen(h);
    if (n == 0 || n > 63)
        return sbx_error_set(err, SBX_E_INVAL, 0, "hostname '%s' must be 1 to 63 bytes", h);
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.'))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "hostname '%s' may contain only letters, digits, '-' and '.'", h);
    }
    return 0;
}

static int check_users(const struct sbx__isolation_spec *spec, struct sbx_error *err)
{
    if (spec->nusers > SBX__ISOLATION_MAX_USERS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "%zu users exceed the limit of %d", spec->nusers,
                             SBX__ISOLATION_MAX_USERS);
    if (spec->ngroups > SBX__ISOLATION_MAX_GROUPS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "%zu groups exceed the limit of %d",
                             spec->ngroups, SBX__ISOLATION_MAX_GROUPS);
    for (size_t i = 0; i < spec->nusers; i++) {
        int rc = sbx__isolation_check_name("user", spec->users[i].name, err);
        if (rc < 0)
            return rc;
        if (strcmp(spec->users[i].name, "root") == 0 || strcmp(spec->users[i].name, "nobody") == 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "user name '%s' is reserved",
                                 spec->users[i].name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(spec->users[i].name, spec->users[j].name) == 0)
                return sbx_error_set(err, SBX_E_INVAL, 0, "user '%s' is declared twice",
                                     spec->users[i].name);
    }
    for (size_t i = 0; i < spec->ngroups; i++) {
        const struct sbx__isolation_group *g = &spec->groups[i];
        int rc = sbx__isolation_check_name("group", g->name, err);
        if (rc < 0)
            return rc;
        int clash = strcmp(g->name, "root") == 0 || strcmp(g->name, "nogroup") == 0;
        for (size_t j = 0; !clash && j < (spec->nusers ? spec->nusers : 1); j++)
            clash = strcmp(g->name,
                           spec->nusers ? spec->users[j].name : SBX__ISOLATION_DEFAULT_USER) == 0;
        for (size_t j = 0; !clash && j < i; j++)
            clash = strcmp(g->name, spec->groups[j].name) == 0;
        if (clash)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "group name '%s' is already a user's or another group's", g->name);
        for (size_t m = 0; g->members && g->members[m]; m++) {
            int found = 0;
            for (size_t u = 0; !found && u < spec->nusers; u++)
                found = strcmp(g->members[m], spec->users[u].name) == 0;
            if (!spec->nusers)
                found = strcmp(g->members[m], SBX__ISOLATION_DEFAULT_USER) == 0;
            if (!found)
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "group '%s' names user '%s', which is not declared", g->name,
                                     g->members[m]);
        }
    }
    return 0;
}

static void plan_system(struct sbx__isolation_plan *p)
{
    push_tmpfs(p, "/", 0755, 4 * MiB);
    push_src(p, SBX__OP_BIND, "/usr", "/usr");
    for (size_t i = 0; i < SBX_ARRAY_LEN(sys_dirs); i++)
        push_src(p, SBX__OP_SYSDIR, sys_dirs[i], sys_dirs[i]);
}

static int plan_etc(const struct sbx__isolation_spec *spec, const char *root, const char *hostname,
                    struct sbx__isolation_plan *p, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, 1024 * 1024);
    int rc = 0;
    push_tmpfs(p, "/etc", 0755, 4 * MiB);
    for (size_t i = 0; i < SBX_ARRAY_LEN(etc_files); i++) {
        char *path = sbx_xasprintf("/etc/%s", etc_files[i]);
        push_src(p, SBX__OP_ETC, path, path)->optional = 1;
        free(path);
    }
    if (spec->net == SBX__NET_FULL) {
        struct sbx__op *op = push(p, SBX__OP_ETC, "/etc/resolv.conf");
        op->src = sbx_xstrdup("/etc/resolv.conf");
        op->optional = 1;
        op->copy = 1;
    }
    if ((rc = sbx__etc_passwd(spec, root, &b, err)) < 0)
        goto out;
    push_file(p, "/etc/passwd", &b);
    if ((rc = sbx__etc_group(spec, &b, err)) < 0)
        goto out;
    push_file(p, "/etc/group", &b);
    if ((rc = sbx__etc_hosts(hostname, &b, err)) < 0)
        goto out;
    push_file(p, "/etc/hosts", &b);
    if ((rc = sbx_buf_addf(&b, err, "%s\n", hostname)) < 0)
        goto out;
    push_file(p, "/etc/hostname", &b);
    if ((rc = sbx__etc_nsswitch(&b, err)) < 0)
        goto out;
    push_file(p, "/etc/nsswitch.conf", &b);
    push(p, SBX__OP_REMOUNT_RO, "/etc");
out:
    sbx_buf_release(&b);
    return rc;
}

static void plan_dev(uint64_t tmp_bytes, uint64_t ptys, struct sbx__isolation_plan *p)
{
    push_tmpfs(p, "/dev", 0755, 64 * 1024);
    for (size_t i = 0; i < SBX_ARRAY_LEN(dev_nodes); i++) {
        char *path = sbx_xasprintf("/dev/%s", dev_nodes[i]);
        push_src(p, SBX__OP_DEVNODE, path, path);
        free(path);
    }
    push(p, SBX__OP_DEVPTS, "/dev/pts")->size = ptys;
    push_symlink(p, "/dev/ptmx", "pts/ptmx");
    push_tmpfs(p, "/dev/shm", 01777, tmp_bytes);
    push_symlink(p, "/dev/fd", "/proc/self/fd");
    push_symlink(p, "/dev/stdin", "/proc/self/fd/0");
    push_symlink(p, "/dev/stdout", "/proc/self/fd/1");
    push_symlink(p, "/dev/stderr", "/proc/self/fd/2");
    push(p, SBX__OP_REMOUNT_RO, "/dev");
}

static void plan_proc(struct sbx__isolation_plan *p)
{
    push(p, SBX__OP_PROC, "/proc");
    for (size_t i = 0; i < SBX_ARRAY_LEN(proc_ro); i++)
        push(p, SBX__OP_PROC_RO, proc_ro[i]);
    for (size_t i = 0; i < SBX_ARRAY_LEN(proc_mask); i++)
        push(p, SBX__OP_PROC_MASK, proc_mask[i]);
}

int sbx__isolation_plan_build(const struct sbx__isolation_spec *spec,
                              struct sbx__isolation_plan *out, struct sbx_error *err)
{
    struct sbx__isolation_plan p = {0};
    const char *root = spec->root ? spec->root : SBX__ISOLATION_DEFAULT_ROOT;
    const char *hostname = spec->hostname ? spec->hostname : SBX__ISOLATION_DEFAULT_HOSTNAME;
    uint64_t tmp_bytes = spec->limits.tmp_bytes ? spec->limits.tmp_bytes : 1024 * MiB;
    int rc;

    if (!spec->workspace)
        return sbx_error_set(err, SBX_E_INVAL, 0, "workspace directory is not set");
    if ((rc = check_abs("workspace", spec->workspace, 0, err)) < 0)
        return rc;
    if ((rc = check_sandbox_dst("root", root, err)) < 0)
        return rc;
    if ((rc = check_hostname(hostname, err)) < 0)
        return rc;
    if (spec->net != SBX__NET_NONE && spec->net != SBX__NET_FULL)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown network mode %d", (int)spec->net);
    if ((rc = check_users(spec, err)) < 0)
        return rc;
    if (spec->ngrants > SBX__ISOLATION_MAX_GRANTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "%zu path grants exceed the limit of %d",
                             spec->ngrants, SBX__ISOLATION_MAX_GRANTS);
    for (size_t i = 0; i < spec->ngrants; i++) {
        const char *dst = spec->grants[i].dst ? spec->grants[i].dst : spec->grants[i].src;
        if ((rc = check_grant(spec, &spec->grants[i], err)) < 0)
            return rc;
        /* The sandbox writes the workspace: it could turn a grant source there into a symlink
         * to anywhere on the host before the next start. */
        if (within(spec->grants[i].src, spec->workspace) ||
            within(spec->workspace, spec->grants[i].src))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "grant source '%s' overlaps the workspace '%s'",
                                 spec->grants[i].src, spec->workspace);
        if (within(root, dst))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "grant destination '%s' would hide the workspace root '%s'", dst,
                                 root);
    }
    if (spec->limits.tmp_bytes == SBX__LIMIT_NONE)
        tmp_bytes = 0;

    plan_system(&p);
    if ((rc = plan_etc(spec, root, hostname, &p, err)) < 0)
        goto out;

    /* Workspace and grants after the system parts; a grant may sit inside the workspace. */
    struct sbx__op *ws = push(&p, SBX__OP_BIND, root);
    ws->src = sbx_xstrdup(spec->workspace);
    ws->writable = 1;
    ws->workspace = 1;
    for (size_t i = 0; i < spec->ngrants; i++) {
        const struct sbx__isolation_grant *g = &spec->grants[i];
        struct sbx__op *op = push(&p, SBX__OP_BIND, g->dst ? g->dst : g->src);
        op->src = sbx_xstrdup(g->src);
        op->writable = g->writable;
    }

    push_tmpfs(&p, "/tmp", 01777, tmp_bytes);
    struct sbx__op *var = push(&p, SBX__OP_MKDIR, "/var");
    var->mode = 0755;
    push_symlink(&p, "/var/tmp", "../tmp");
    push_tmpfs(&p, "/run", 0755, 1 * MiB);
    plan_proc(&p);
    uint64_t ptys = spec->limits.ptys == SBX__LIMIT_NONE ? 0
                    : spec->limits.ptys                  ? spec->limits.ptys
                                                         : SBX__ISOLATION_DEFAULT_PTYS;
    plan_dev(tmp_bytes, ptys, &p);
    push(&p, SBX__OP_REMOUNT_RO, "/");
out:
    if (rc < 0) {
        sbx__isolation_plan_release(&p);
        return rc;
    }
    *out = p;
    return 0;
}
