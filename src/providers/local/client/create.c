/* The local provider, client side: creating a sandbox (docs/internals/local-provider.md,
 * "Creating a sandbox"). sbx__local_create is the numbered list of that page as named steps over
 * one struct create_job: check_spec, make_runtime_dir, choose_workspace, record_state,
 * prepare_workspace, build_config, start_supervisor, materialize, the hand-over (the unclaimed
 * marker made with the runtime dir goes), and rollback on failure. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/spawn.h"
#include "providers/local/client/client.h"
#include "providers/local/client/disk.h"
#include "providers/local/config.h"
#include "providers/local/isolate/isolate.h"
#include "providers/local/supervisor/rclone.h"
#include "sandbox/host/host.h"
#include "sandbox/manifest/internal.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

#define MANIFEST_STATE_MAX (SBX_SESSION_STATE_MAX / 2)
/* Descriptors a create needs free when it starts: enough for it to undo itself wherever it
 * runs out (a create under ulimit -n 6 used to leave its directories behind). */
#define CREATE_FDS 8

static const char *const base_env[] = {
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C.UTF-8",
        "SHELL=/bin/sh",
        NULL,
};

/* ---------------------------------------------------------------------------------------------
 * The supervisor, started and reporting */

/* ws->fn runs while the supervisor boots (it takes a few milliseconds to exec and link); its
 * error is returned after the supervisor has reported, so the caller can shut it down. */
struct while_starting {
    int (*fn)(void *ctx, struct sbx_error *err);
    void *ctx;
};

/* Without pidfd_open (Linux < 5.3, valgrind, a seccomp filter that refuses it): the read end
 * of a pipe whose write end this process holds, close-on-exec, until it ends. */
static int tie_pipe[2] = {-1, -1};
static pthread_once_t tie_pipe_once = PTHREAD_ONCE_INIT;

static void make_tie_pipe(void)
{
    if (pipe2(tie_pipe, O_CLOEXEC) < 0)
        tie_pipe[0] = tie_pipe[1] = -1;
}

/* What a tied sandbox's supervisor watches: a pidfd of this process, which unlike a pid can
 * never come to name another process, else the pipe above. */
static int open_tie(int *out, struct sbx_error *err)
{
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
        pthread_once(&tie_pipe_once, make_tie_pipe);
        errno = EMFILE;
        fd = tie_pipe[0] >= 0 ? fcntl(tie_pipe[0], F_DUPFD_CLOEXEC, 0) : -1;
    }
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot tie the sandbox to this process");
    *out = fd;
    return 0;
}

/* Start the supervisor detached (its own session, reparented away from us) and wait until it
 * reports that it serves. tie_fd (>= 0): handed to the supervisor as SBX_PROTO_TIE_FD. */
static int spawn_supervisor(const char *path, const char *id, const json_t *cfg, int64_t timeout_ms,
                            const struct while_starting *ws, int tie_fd, json_t **report_out,
                            struct sbx_error *err)
{
    struct sbx_error werr = SBX_ERROR_INIT;
    int wrc = 0;
    int sp[2] = {-1, -1}, rc;
    struct sbx__child child = {.pid = -1, .in = -1, .out = -1, .err = -1};
    struct sbx_buf text;
    const char *const argv[] = {path, SBX_LOCAL_SUPERVISE_VERB, id, NULL};

    sbx_buf_init(&text, 65536);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
        return sbx_error_errno(err, errno, "socketpair");
    /* Into a new session, with nothing of ours but the socket (and the tie); the supervisor
     * forks once more itself and this first process exits at once, so the supervisor ends up
     * detached: no session leader, parent gone. Its environment holds one fixed entry, nothing
     * of the caller's: glibc's per-thread cache of freed blocks turned off. That cache keeps
     * the start-up's freed blocks where they lie, out of reach of the malloc_trim that the
     * long-lived processes of a sandbox (PID 1, the host side) make before they wait, so each
     * kept the pages those blocks pin (about 80 kB of an idle sandbox's memory). */
    static const char *const env[] = {"GLIBC_TUNABLES=glibc.malloc.tcache_count=0", NULL};
    struct sbx__spawn spec = {
            .program = path, .argv = argv, .env = env, .new_session = 1, .name = path};
    spec.in = spec.out = (struct sbx__spawn_stdio){.how = SBX__SPAWN_FD, .fd = sp[1]};
    if (tie_fd >= 0)
        spec.keep[spec.nkeep++] = (struct sbx__spawn_keep){.fd = tie_fd, .at = SBX_PROTO_TIE_FD};
    rc = sbx__spawn_start(&spec, &child, err);
    if (rc < 0) {
        sbx_error_prefix(err, "the supervisor");
        goto out;
    }
    sbx_fd_close(&sp[1]);
    char *cfgtext = sbx_json_dumps(cfg, SBX_JSON_COMPACT);
    size_t len = strlen(cfgtext), off = 0;
    rc = 0;
    while (off < len) {
        ssize_t w = send(sp[0], cfgtext + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = -1;
            break;
        }
        off += (size_t)w;
    }
    free(cfgtext);
    shutdown(sp[0], SHUT_WR);
    if (ws)
        wrc = ws->fn(ws->ctx, &werr);
    /* Read the report until the supervisor lets go of the socket. */
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        struct pollfd pfd = {.fd = sp[0], .events = POLLIN};
        int r = poll(&pfd, 1, sbx_deadline_poll_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "the supervisor did not start within %lld ms",
                               (long long)timeout_ms);
            goto out;
        }
        char buf[4096];
        ssize_t n = recv(sp[0], buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (sbx_buf_add(&text, buf, (size_t)n, err) < 0) {
            rc = -SBX_E_TOOBIG;
            goto out;
        }
    }
    /* The first process has forked the supervisor and exited by now (or died): reap it. */
    (void)sbx__child_wait(&child, -1, NULL, NULL);
    json_t *report = NULL;
    if (text.len == 0 || sbx_json_parse(text.data, text.len, NULL, &report, NULL) < 0 ||
        !json_is_object(report)) {
        json_decref(report);
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the supervisor '%s' exited during start-up",
                           path);
        goto out;
    }
    rc = sbx__proto_check(report, err);
    if (rc == 0 && wrc < 0)
        rc = sbx_error_copy(err, &werr);
    if (rc == 0 && report_out)
        *report_out = json_incref(report);
    json_decref(report);
out:
    /* Gave up waiting: the supervisor, finding nobody to report to, exits by itself. */
    sbx__child_kill(&child);
    sbx_buf_release(&text);
    sbx_fd_close(&sp[0]);
    sbx_fd_close(&sp[1]);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The workspace, the state, the limits */

static int workspace_base(const struct sbx__local_client *c, char **out, struct sbx_error *err)
{
    return sbx__local_state_subdir(c->workspace_dir, "SBX_WORKSPACES", "workspaces", 1, out, err);
}

struct state_job {
    const char *dir;
    json_t *state;
    const struct sbx_manifest *manifest;
    int materialize_flags;
    struct sbx_session *session; /* materialise through it now (isolated: the host directory) */
    struct sbx_progress_sink *progress;
};

/* The manifest digest and state.json; run while the supervisor starts. An isolated workspace is
 * reached on the host (see root_fd), so its manifest is materialised meanwhile too: the
 * supervisor's start-up (cgroup attach, namespaces, the new root) and the copy overlap. */
static int write_initial_state(void *ctx, struct sbx_error *err)
{
    struct state_job *j = ctx;
    int rc = 0;
    if (j->session && j->manifest) {
        json_t *records = NULL;
        rc = sbx__materialize(j->session, j->manifest, j->materialize_flags, j->progress, &records,
                              err);
        if (rc < 0)
            return rc;
        sbx_json_set(j->state, "materialized", records);
    }
    if (j->manifest) {
        char hex[SBX_SHA256_HEX_LEN + 1];
        rc = sbx__manifest_digest(j->manifest, hex, err);
        if (rc < 0)
            return rc;
        char *tagged = sbx_xasprintf("sha256:%s", hex);
        sbx_json_set(j->state, "manifest_digest", sbx_json_str(tagged));
        free(tagged);
    } else {
        sbx_json_set(j->state, "manifest_digest", json_null());
    }
    return sbx__local_write_state(j->dir, j->state, err);
}

static void format_size(uint64_t n, char *out, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && n >= 1024 && n % 1024 == 0) {
        n /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, len, "%llu bytes", (unsigned long long)n);
    else
        snprintf(out, len, "%llu %ciB", (unsigned long long)n, units[u]);
}

/* A failed image that says this host cannot have the limit at all (no loop devices or mounts
 * for us, no ext4): a default limit is then only reported as not enforced. Anything else (a
 * loop device that stayed busy, a full file system, a failing tool) is this create's bad luck
 * on a host that can have the limit, and fails it: a root runner never runs a sandbox without
 * the limit it could have had. */
static int host_cannot(const struct sbx_error *why)
{
    if (why->code == SBX_E_UNSUPPORTED)
        return 1;
    switch (why->sys_errno) {
    case EPERM:
    case EACCES:
    case ENODEV:
    case ENOSYS:
    case EOPNOTSUPP:
        return 1;
    default:
        return 0;
    }
}

/* The size limit of a new workspace: a disk image when this process can make one for a fresh
 * workspace (wsbase: where it is; NULL for a given directory). *disk_out: the state's "disk";
 * *image_out, *loop_out: set when an image was mounted (the caller detaches it on failure). */
static int workspace_disk(const struct sbx__local_client *c, const char *id, const char *wsbase,
                          const char *ws, char **image_out, char **loop_out, json_t **disk_out,
                          struct sbx_error *err)
{
    json_t *d = json_object();
    struct sbx_error why = SBX_ERROR_INIT;
    int rc = 0;
    if (c->disk_bytes == SBX_LOCAL_LIMIT_NONE) {
        sbx_json_set(d, "limit", json_null());
        sbx_json_set(d, "enforced", json_false());
        *disk_out = d;
        return 0;
    }
    sbx_json_set(d, "limit", json_integer((json_int_t)c->disk_bytes));
    if (!wsbase)
        rc = sbx_error_set(&why, SBX_E_UNSUPPORTED, 0,
                           "a given workspace directory is used in place, on the host's file "
                           "system");
    else
        rc = sbx__disk_usable(&why);
    if (rc == 0) {
        char *image = sbx_xasprintf("%s" SBX__DISK_IMAGE_SUFFIX, ws), *loop = NULL;
        rc = sbx__disk_attach(image, ws, c->disk_bytes, &loop, &why);
        if (rc == 0) {
            sbx_json_set(d, "enforced", json_true());
            sbx_json_set(d, "image", sbx_json_str(image));
            sbx_json_set(d, "loop", sbx_json_str(loop));
            *image_out = image;
            *loop_out = loop;
            *disk_out = d;
            return 0;
        }
        free(image);
    }
    char size[32];
    format_size(c->disk_bytes, size, sizeof(size));
    if (c->disk_explicit || !host_cannot(&why)) {
        json_decref(d);
        rc = sbx_error_copy(err, &why);
        if (why.sys_errno == EMFILE || why.sys_errno == ENFILE)
            sbx__proto_fd_hint(err); /* the cause is the descriptors, not the disk */
        else if (c->disk_explicit)
            sbx_error_prefix(err, "disk limit %s cannot be enforced", size);
        else
            sbx_error_prefix(err,
                             "the default disk limit %s could not be set up (retry; --disk none "
                             "creates the sandbox without a limit)",
                             size);
        return rc;
    }
    sbx_log(SBX_LOG_WARN, "sandbox '%s': disk limit %s is not enforced: %s", id, size, why.msg);
    sbx_json_set(d, "enforced", json_false());
    sbx_json_set(d, "reason", sbx_json_str(why.msg));
    *disk_out = d;
    return 0;
}

/* The limits the supervisor reported into the state ("limits" in force, "unenforced": name and
 * reason of each one the host could not apply), and one warning line naming the unenforced:
 * a caller must not believe in a limit that is not there. */
static int record_limits(const char *dir, const char *id, json_t *state, const json_t *report,
                         struct sbx_error *err)
{
    json_t *lim = json_object_get(report, "limits"), *un = json_object_get(report, "unenforced");
    if (!json_is_object(lim) || !json_is_array(un))
        return 0;
    sbx_json_set(state, "limits", json_deep_copy(lim));
    sbx_json_set(state, "unenforced", json_deep_copy(un));
    size_t n = json_array_size(un), i;
    if (n) {
        struct sbx_buf names;
        sbx_buf_init(&names, 1024);
        const char *reason = NULL;
        int same = 1;
        json_t *u;
        json_array_foreach(un, i, u)
        {
            const char *nm = json_string_value(json_object_get(u, "name"));
            const char *why = json_string_value(json_object_get(u, "reason"));
            (void)sbx_buf_addf(&names, NULL, "%s%s",
                               i == 0       ? ""
                               : i + 1 == n ? " and "
                                            : ", ",
                               nm ? nm : "?");
            if (!reason)
                reason = why;
            else if (!why || strcmp(reason, why) != 0)
                same = 0;
        }
        sbx_log(SBX_LOG_WARN, "sandbox '%s': %s limit%s %s not enforced: %s", id, names.data,
                n > 1 ? "s" : "", n > 1 ? "are" : "is",
                same && reason ? reason : "see 'sbx sandbox ps --json'");
        sbx_buf_release(&names);
    }
    /* The workspace's size limit is decided (and warned about) before the supervisor starts;
     * it is listed with the others. */
    const json_t *disk = json_object_get(state, "disk");
    if (json_is_integer(json_object_get(disk, "limit")) &&
        json_is_false(json_object_get(disk, "enforced")))
        sbx_json_append(
                json_object_get(state, "unenforced"),
                json_pack("{s:s,s:O?}", "name", "disk", "reason", json_object_get(disk, "reason")));
    return sbx__local_write_state(dir, state, err);
}

/* A limit or size as the session state records it: the number, or "none". */
static json_t *amount_json(uint64_t v)
{
    return v == SBX_LOCAL_LIMIT_NONE ? sbx_json_str("none") : json_integer((json_int_t)v);
}

/* What this client creates sandboxes with, as the session state's "options": everything a
 * rebuild needs and nothing of the caller's environment. Grants are recorded (a reader sees
 * what the sandbox could reach), but a rebuild from a state file takes them only from its own
 * client: see sbx_client_resume_with. */
static json_t *options_json(const struct sbx__local_client *c, const struct sbx_manifest *m)
{
    json_t *o = json_object(), *lim = json_object(), *grants = json_array();
    sbx_json_set(o, "isolation", sbx_json_str(c->isolated ? "namespaces" : "none"));
    sbx_json_set(o, "network",
                 sbx_json_str(!c->isolated || c->network == SBX_LOCAL_NETWORK_HOST ? "full"
                              : c->network == SBX_LOCAL_NETWORK_ALLOW              ? "allow"
                                                                                   : "none"));
    const struct sbx_local_limits *l = &c->limits;
    const uint64_t vals[] = {l->memory_bytes, l->pids, l->cpu_millis, l->file_size_bytes,
                             l->open_files};
    static const char *const names[] = {"memory", "pids", "cpu_millis", "file_size", "open_files"};
    for (size_t i = 0; i < 5; i++)
        if (vals[i])
            sbx_json_set(lim, names[i], amount_json(vals[i]));
    sbx_json_set(o, "limits", lim);
    sbx_json_set(o, "disk",
                 c->disk_bytes == SBX_LOCAL_LIMIT_NONE ? sbx_json_str("none")
                 : c->disk_explicit                    ? json_integer((json_int_t)c->disk_bytes)
                                                       : json_null());
    for (size_t i = 0; i < c->n_grants; i++) {
        json_t *g = json_object();
        sbx_json_set(g, "src", sbx_json_str(c->grants[i].src));
        if (c->grants[i].dst)
            sbx_json_set(g, "dst", sbx_json_str(c->grants[i].dst));
        sbx_json_set(g, "writable", json_boolean(c->grants[i].writable));
        sbx_json_set(g, "dangerous", json_boolean(c->grants[i].dangerous));
        sbx_json_append(grants, g);
    }
    /* The manifest's grants are recorded with the client's: a rebuild from the state asks for
     * them again (--ro/--rw), as for any grant. */
    for (size_t i = 0; i < sbx_manifest_grant_count(m); i++) {
        const struct sbx_manifest_grant *mg = sbx_manifest_grant_at(m, i);
        json_t *g = json_pack("{s:s, s:b, s:b}", "src", mg->host_path ? mg->host_path : mg->path,
                              "writable", !mg->read_only, "dangerous", 0);
        if (mg->host_path)
            sbx_json_set(g, "dst", sbx_json_str(mg->path));
        sbx_json_append(grants, g);
    }
    sbx_json_set(o, "grants", grants);
    if (c->allow.n) {
        json_t *a = json_array(), *p = json_array();
        for (size_t i = 0; i < c->allow.n; i++)
            sbx_json_append(a, sbx_json_str(c->allow.v[i]));
        for (size_t i = 0; i < c->n_allow_ports; i++)
            sbx_json_append(p, json_integer(c->allow_ports[i]));
        sbx_json_set(o, "allow_domains", a);
        sbx_json_set(o, "allow_ports", p);
    }
    if (c->port_bind)
        sbx_json_set(o, "port_bind", sbx_json_str(c->port_bind));
    if (c->publish.n) {
        json_t *pub = json_array();
        for (size_t i = 0; i < c->publish.n; i++)
            sbx_json_append(pub, sbx_json_str(c->publish.v[i]));
        sbx_json_set(o, "publish", pub);
    }
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * The create job */

/* One create in progress: what the steps below make, and so what rollback undoes. */
struct create_job {
    struct sbx__local_client *c;
    const struct sbx_create_spec *spec;
    char id[2 * SBX__LOCAL_ID_BYTES + 1];
    char *sup;        /* the supervisor program */
    char *rundir;     /* the runtime base */
    char *dir;        /* this sandbox's runtime directory */
    char *ws;         /* the workspace */
    char *wsbase;     /* where a fresh workspace is made; NULL for a given one */
    char *image;      /* the workspace's disk image, once mounted */
    char *loop;       /* its loop device */
    char *snap_ref;   /* the snapshot to restore */
    const char *root; /* where commands see the workspace (borrowed) */
    const char *net;  /* the state's network mode */
    int owned;        /* a fresh workspace */
    int made_dir, made_ws, started;
    int lock_fd;   /* the create lease on dir */
    int tie_fd;    /* the creator's pidfd for a tied sandbox */
    json_t *mjson; /* the manifest as the state records it, until the state takes it */
    json_t *state; /* until the session takes it */
    json_t *cfg;   /* the supervisor's configuration */
    struct sbx__local_session *ls;
    struct sbx_snapshot_store *store;
    struct sbx_progress_sink progress;
    int mflags; /* how the manifest is materialised */
};

/* A bad id, a stopped one, a bad snapshot or a manifest too large for the state: refused before
 * anything of the sandbox exists. */
static int check_spec(struct create_job *j, int allow_stopped, struct sbx_error *err)
{
    const struct sbx_create_spec *spec = j->spec;
    int rc;
    if (spec->id && (strlen(spec->id) != 2 * SBX__LOCAL_ID_BYTES || !sbx__local_valid_id(spec->id)))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id (16 hex digits)",
                             spec->id);
    size_t nm = sbx_manifest_grant_count(spec->manifest);
    if (nm && !j->c->isolated)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "manifest field 'extra_path_grants': path grants need isolation, "
                             "not 'none'");
    if (nm + j->c->n_grants > SBX_LOCAL_MAX_GRANTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "manifest field 'extra_path_grants': more than %d path grants with "
                             "the client's own",
                             SBX_LOCAL_MAX_GRANTS);
    if (spec->id && !allow_stopped && sbx__local_stopped_exists(spec->id))
        return sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' exists and is stopped", spec->id);
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &j->store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(j->store, spec->snapshot, NULL, &j->snap_ref, err)) < 0))
        return rc;
    j->mflags = j->snap_ref ? SBX__MATERIALIZE_EPHEMERAL_ONLY : 0;
    if (spec->manifest && (rc = sbx_manifest_to_json(spec->manifest,
                                                     SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV |
                                                             SBX_MANIFEST_JSON_CONTENT_DIGESTS,
                                                     &j->mjson, NULL, err)) < 0)
        return rc;
    if (j->mjson) {
        /* The state must stay readable: its manifest has a bound. The files a snapshot keeps
         * count by digest only; the bytes of ephemeral ones, written again on every start, are
         * there in full. */
        char *text = sbx_json_dumps(j->mjson, SBX_JSON_COMPACT);
        size_t n = strlen(text);
        free(text);
        if (n > MANIFEST_STATE_MAX)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "the manifest takes %zu bytes in the session state, more than "
                                 "%zu (large ephemeral files belong in local_file entries)",
                                 n, MANIFEST_STATE_MAX);
    }
    return 0;
}

/* path made absolute (it exists): the supervisor is given absolute paths only. */
static int absolute_dir(char **path, struct sbx_error *err)
{
    if ((*path)[0] == '/')
        return 0;
    char *abs = realpath(*path, NULL);
    if (!abs)
        return sbx_error_errno(err, errno, "cannot resolve '%s'", *path);
    free(*path);
    *path = abs;
    return 0;
}

/* The supervisor program, the id, and the runtime directory under its create lease. */
static int make_runtime_dir(struct create_job *j, struct sbx_error *err)
{
    int rc;
    if ((rc = sbx__supervisor_program(j->c->supervisor_path, &j->sup, err)) < 0 ||
        (rc = sbx__runtime_base(j->c->runtime_dir, &j->rundir, err)) < 0 ||
        (rc = absolute_dir(&j->rundir, err)) < 0)
        return rc;
    if (j->spec->id)
        memcpy(j->id, j->spec->id, sizeof(j->id));
    else if ((rc = sbx_random_hex(j->id, SBX__LOCAL_ID_BYTES, err)) < 0)
        return rc;
    j->dir = sbx_xasprintf("%s/%s", j->rundir, j->id);
    /* A create that runs out of descriptors half-way cannot undo itself (removing a tree
     * opens directories): it must have room to start with. */
    if ((rc = sbx__local_fd_headroom("open the descriptors it needs", CREATE_FDS, err)) < 0)
        return rc;
    /* What creates killed before us left goes first: it holds loop devices and mounts. */
    sbx__local_reclaim(j->rundir);
    /* The create lease: while we hold it, ps --all says "creating" and prune keeps off. It goes
     * with us however we end, so what a creator killed mid-create leaves is reclaimed by the
     * next command that lists or creates sandboxes. */
    if ((rc = sbx__local_runtime_dir_make(j->rundir, j->id, &j->lock_fd, err)) < 0)
        return rc;
    j->made_dir = 1;
    /* Until the create returns the sandbox, nobody knows its id: if we die before, the next
     * reclaim removes it, even with a supervisor serving in it. */
    return sbx__local_unclaimed_mark(j->lock_fd, j->dir, err);
}

/* What a given workspace holds already: nothing, or what the caller said to do with it
 * (sbx_create_spec.existing). Nothing of the user's is replaced by surprise. */
static int given_contents(struct create_job *j, struct sbx_error *err)
{
    const struct sbx_create_spec *spec = j->spec;
    int fd = open(j->ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sbx_error_errno(err, e, "cannot list workspace '%s'", spec->workspace);
    }
    size_t n = 0;
    const struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    if (!n)
        return 0;
    if (spec->existing == SBX_WORKSPACE_REFUSE)
        return sbx_error_set(err, SBX_E_EXISTS, 0,
                             "workspace '%s' is not empty: say what to do with what it holds "
                             "(--workspace-existing keep: its files stay and the manifest may "
                             "only add; overwrite: the manifest's entries replace the files "
                             "they name)",
                             spec->workspace);
    if (spec->existing == SBX_WORKSPACE_KEEP && j->snap_ref)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "workspace '%s' is not empty and keeps its files, but a snapshot "
                             "is restored over the directory: use overwrite, or an empty one",
                             spec->workspace);
    if (spec->existing == SBX_WORKSPACE_KEEP)
        j->mflags |= SBX__MATERIALIZE_KEEP;
    return 0;
}

/* The given workspace (an existing directory), else the path of a fresh one. */
static int choose_workspace(struct create_job *j, struct sbx_error *err)
{
    int rc;
    if (j->spec->workspace) {
        struct stat st;
        j->ws = realpath(j->spec->workspace, NULL);
        if (!j->ws || stat(j->ws, &st) < 0 || !S_ISDIR(st.st_mode))
            return sbx_error_set(err, SBX_E_NOTFOUND, errno,
                                 "workspace '%s' is not an existing directory", j->spec->workspace);
        if ((rc = sbx__local_check_workspace(j->spec->workspace, j->ws, j->rundir,
                                             j->c->dangerous_workspace, err)) < 0)
            return rc;
        if ((rc = given_contents(j, err)) < 0)
            return rc;
        if (j->c->dangerous_workspace)
            sbx_log(SBX_LOG_WARN,
                    "workspace '%s' is used without the checks for unix sockets and other "
                    "users' homes (--allow-dangerous-workspace): the sandbox may reach host "
                    "services through its sockets or change another user's files",
                    j->spec->workspace);
    } else {
        if ((rc = workspace_base(j->c, &j->wsbase, err)) < 0 ||
            (rc = absolute_dir(&j->wsbase, err)) < 0)
            return rc;
        j->ws = sbx_xasprintf("%s/%s", j->wsbase, j->id);
        j->owned = 1;
    }
    /* Without isolation commands see the workspace at its host path; with it, at the manifest
     * root. */
    j->root = !j->c->isolated     ? j->ws
              : j->spec->manifest ? sbx_manifest_root(j->spec->manifest)
                                  : "/workspace";
    return 0;
}

/* The first state.json, written before the workspace exists: whatever a killed create leaves,
 * the state names it (ps --all, prune). */
static int record_state(struct create_job *j, struct sbx_error *err)
{
    const struct sbx__local_client *c = j->c;
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    j->net = !c->isolated || c->network == SBX_LOCAL_NETWORK_HOST ? "full"
             : c->network == SBX_LOCAL_NETWORK_ALLOW              ? "allow"
                                                                  : "none";
    json_t *state = j->state = json_object();
    sbx_json_set(state, "version", json_integer(1));
    sbx_json_set(state, "provider", sbx_json_str("local"));
    sbx_json_set(state, "id", sbx_json_str(j->id));
    sbx_json_set(state, "workspace", sbx_json_str(j->ws));
    sbx_json_set(state, "root", sbx_json_str(j->root));
    sbx_json_set(state, "created", sbx_json_str(created));
    sbx_json_set(state, "isolation", sbx_json_str(c->isolated ? "namespaces" : "none"));
    sbx_json_set(state, "network", sbx_json_str(j->net));
    sbx_json_set(state, "workspace_owned", json_boolean(j->owned));
    sbx_json_set(state, "manifest_digest", json_null());
    /* What a rebuild needs (sbx_client_resume): the manifest without secret values, the
     * options, the ports; the snapshot it came from, until one is taken of it. */
    sbx_json_set(state, "options", options_json(c, j->spec->manifest));
    json_t *eports = json_array();
    for (size_t i = 0; i < c->n_ports; i++)
        sbx_json_append(eports, json_integer(c->ports[i]));
    sbx_json_set(state, "exposed_ports", eports);
    sbx_json_set(state, "manifest", j->mjson ? j->mjson : json_null());
    j->mjson = NULL;
    sbx_json_set(state, "snapshot", j->snap_ref ? sbx_json_str(j->snap_ref) : json_null());
    return sbx__local_write_state(j->dir, state, err);
}

/* A fresh workspace made, its size limit decided (and recorded), the snapshot restored into it
 * as it will be seen (the mounted image, if any); a failed restore removes what it wrote. */
static int prepare_workspace(struct create_job *j, struct sbx_error *err)
{
    json_t *disk = NULL;
    int rc;
    if (j->owned) {
        if (mkdir(j->ws, 0755) < 0)
            return sbx_error_errno(err, errno, "cannot create workspace '%s'", j->ws);
        j->made_ws = 1;
    }
    rc = workspace_disk(j->c, j->id, j->owned ? j->wsbase : NULL, j->ws, &j->image, &j->loop, &disk,
                        err);
    if (rc < 0)
        return rc;
    sbx_json_set(j->state, "disk", disk);
    if ((rc = sbx__local_write_state(j->dir, j->state, err)) < 0 || !j->snap_ref)
        return rc;
    int ws_fd = open(j->ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ws_fd < 0)
        return sbx_error_errno(err, errno, "cannot open workspace '%s'", j->ws);
    rc = sbx_snapshot_restore_progress(j->store, j->snap_ref, ws_fd, j->spec->progress,
                                       j->spec->progress_data, err);
    close(ws_fd);
    if (rc < 0)
        sbx_error_prefix(err, "snapshot '%s'", j->spec->snapshot);
    return rc;
}

/* Without isolation: the warning, and the base environment with HOME the workspace. */
static void unconfined_config(const struct create_job *j, struct sbx__local_config *cfg)
{
    const struct sbx_manifest *m = j->spec->manifest;
    sbx_log(SBX_LOG_WARN,
            "sandbox '%s' runs UNCONFINED (isolation 'none'): its commands run as you, "
            "see your files and use your network",
            j->id);
    sbx_strv_pushv(&cfg->env, base_env);
    sbx_strv_pushf(&cfg->env, "HOME=%s", j->ws);
    if (m && ((sbx_manifest_users(m) && sbx_manifest_users(m)->n) || sbx_manifest_group_count(m)))
        sbx_log(SBX_LOG_WARN,
                "sandbox '%s': manifest users and groups need isolation; "
                "commands run as the calling user",
                j->id);
}

void sbx__local_account_users(const struct sbx_manifest *m, struct sbx_strv *out)
{
    struct sbx_strv declared;
    sbx_strv_init(&declared);
    if (m)
        sbx_manifest_account_users(m, &declared);
    sbx_strv_push(out, SBX__ISOLATION_DEFAULT_USER);
    for (size_t i = 0; i < declared.n; i++)
        if (strcmp(declared.v[i], SBX__ISOLATION_DEFAULT_USER) != 0)
            sbx_strv_push(out, declared.v[i]);
    sbx_strv_release(&declared);
}

/* With isolation: the manifest's accounts, the client's grants, limits and network. */
static void isolated_config(const struct create_job *j, struct sbx__local_config *cfg)
{
    const struct sbx__local_client *c = j->c;
    const struct sbx_manifest *m = j->spec->manifest;
    const char *hh = getenv("HOME");
    cfg->net = c->network == SBX_LOCAL_NETWORK_HOST    ? SBX__LOCAL_CONFIG_NET_FULL
               : c->network == SBX_LOCAL_NETWORK_ALLOW ? SBX__LOCAL_CONFIG_NET_ALLOW
                                                       : SBX__LOCAL_CONFIG_NET_NONE;
    if (hh && hh[0] == '/')
        cfg->host_home = sbx_xstrdup(hh);
    sbx__local_account_users(m, &cfg->users);
    if (m) {
        cfg->n_groups = sbx_manifest_group_count(m);
        cfg->groups = cfg->n_groups ? sbx_xcalloc(cfg->n_groups, sizeof(*cfg->groups)) : NULL;
        for (size_t i = 0; i < cfg->n_groups; i++) {
            const struct sbx_manifest_group *g = sbx_manifest_group_at(m, i);
            cfg->groups[i].name = sbx_xstrdup(g->name);
            sbx_strv_init(&cfg->groups[i].members);
            for (size_t k = 0; g->users && k < g->users->n; k++)
                sbx_strv_push(&cfg->groups[i].members, g->users->v[k]);
        }
    }
    size_t nm = sbx_manifest_grant_count(m);
    cfg->n_grants = c->n_grants + nm;
    cfg->grants = cfg->n_grants ? sbx_xcalloc(cfg->n_grants, sizeof(*cfg->grants)) : NULL;
    for (size_t i = 0; i < c->n_grants; i++) {
        cfg->grants[i].src = sbx_xstrdup(c->grants[i].src);
        cfg->grants[i].dst = c->grants[i].dst ? sbx_xstrdup(c->grants[i].dst) : NULL;
        cfg->grants[i].writable = c->grants[i].writable;
        cfg->grants[i].dangerous = c->grants[i].dangerous;
    }
    /* The manifest's grants, checked like the client's when the sandbox is built: a source is
     * never "/", a home directory itself, a system path or (not being marked dangerous) /proc,
     * /sys, /dev, /run or a tree with sockets. */
    for (size_t i = 0; i < nm; i++) {
        const struct sbx_manifest_grant *mg = sbx_manifest_grant_at(m, i);
        struct sbx__local_config_grant *g = &cfg->grants[c->n_grants + i];
        g->src = sbx_xstrdup(mg->host_path ? mg->host_path : mg->path);
        g->dst = mg->host_path ? sbx_xstrdup(mg->path) : NULL;
        g->writable = !mg->read_only;
    }
    cfg->limits = c->limits;
    for (size_t i = 0; i < c->allow.n; i++)
        sbx_strv_push(&cfg->allow, c->allow.v[i]);
    for (size_t i = 0; i < c->test_hosts.n; i++)
        sbx_strv_push(&cfg->test_hosts, c->test_hosts.v[i]);
    cfg->port_bind = c->port_bind ? sbx_xstrdup(c->port_bind) : NULL;
    for (size_t i = 0; i < c->publish.n; i++)
        sbx_strv_push(&cfg->publish, c->publish.v[i]);
    cfg->allow_host_uid = c->allow_host_uid;
    if (c->allow_host_uid && geteuid() == 0)
        sbx_log(SBX_LOG_WARN,
                "sandbox '%s' may run its commands as host uid 0 (--allow-host-uid): where its "
                "workspace cannot be idmapped, root-owned host files it sees and may write by "
                "their modes become its own",
                j->id);
    if (c->port_bind && !sbx__local_addr_loopback(c->port_bind))
        sbx_log(SBX_LOG_WARN,
                "sandbox '%s': its port forwards listen on '%s', beyond loopback: whoever "
                "reaches that address of this host can connect to them",
                j->id, c->port_bind);
    memcpy(cfg->allow_ports, c->allow_ports, sizeof(cfg->allow_ports));
    cfg->n_allow_ports = c->n_allow_ports;
}

/* The manifest's storage mounts, for the supervisor to start (docs/internals/mounts.md). */
static int mount_config(const struct create_job *j, struct sbx__local_config *cfg,
                        struct sbx_error *err)
{
    const struct sbx_manifest *m = j->spec->manifest;
    size_t n = m ? sbx_manifest_entry_count(m) : 0, k = 0;
    for (size_t i = 0; i < n; i++)
        k += sbx_entry_type_is_mount(sbx_manifest_entry_at(m, i)->type) != 0;
    if (!k)
        return 0;
    if (k > SBX__LOCAL_CONFIG_MAX_MOUNTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d mount entries",
                             SBX__LOCAL_CONFIG_MAX_MOUNTS);
    cfg->mounts = sbx_xcalloc(k, sizeof(*cfg->mounts));
    for (size_t i = 0; i < n; i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        if (!sbx_entry_type_is_mount(e->type))
            continue;
        int rc = j->c->isolated ? 0
                                : sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                                "needs isolation: without it nothing keeps the "
                                                "mount's credentials from the commands");
        if (rc == 0)
            rc = sbx__rclone_mount(e, j->root, &cfg->mounts[cfg->n_mounts], err);
        if (rc < 0) {
            sbx_error_prefix(err, "entry '%s' (%s)", e->path, sbx_entry_type_name(e->type));
            return rc;
        }
        cfg->n_mounts++;
    }
    return 0;
}

/* The manifest's environment (secret values resolved) after the base one. */
static int manifest_env(const struct create_job *j, struct sbx_strv *env, struct sbx_error *err)
{
    struct sbx_strv menv;
    sbx_strv_init(&menv);
    int rc = sbx_manifest_env_resolve(j->spec->manifest, j->spec->pass_secrets, &menv, err);
    for (size_t i = 0; rc == 0 && i < menv.n; i++)
        sbx_strv_push(env, menv.v[i]);
    /* Secret values are in there: wipe our copies. */
    for (size_t i = 0; i < menv.n; i++)
        explicit_bzero(menv.v[i], strlen(menv.v[i]));
    sbx_strv_release(&menv);
    return rc;
}

/* The supervisor's configuration (config.h) as JSON in j->cfg; the tie for a tied sandbox. */
static int build_config(struct create_job *j, struct sbx_error *err)
{
    const struct sbx__local_client *c = j->c;
    struct sbx__local_config cfg;
    int rc = 0;
    sbx__local_config_init(&cfg);
    cfg.id = sbx_xstrdup(j->id);
    cfg.dir = sbx_xstrdup(j->dir);
    cfg.workspace = sbx_xstrdup(j->ws);
    cfg.root = sbx_xstrdup(j->root);
    cfg.workspace_owned = j->owned;
    cfg.isolated = c->isolated;
    memcpy(cfg.ports, c->ports, sizeof(cfg.ports));
    cfg.n_ports = c->n_ports;
    cfg.test_delay_ms = c->test_delay_ms;
    cfg.tied = c->tied;
    if (c->isolated)
        isolated_config(j, &cfg);
    else
        unconfined_config(j, &cfg);
    if (j->spec->manifest)
        rc = manifest_env(j, &cfg.env, err);
    if (rc == 0)
        rc = mount_config(j, &cfg, err);
    if (rc == 0)
        rc = sbx__local_config_to_json(&cfg, &j->cfg, err);
    sbx__local_config_release(&cfg);
    if (rc == 0 && c->tied)
        rc = open_tie(&j->tie_fd, err);
    return rc;
}

/* The supervisor started and serving; meanwhile the initial state is written (and an isolated
 * workspace materialised: see write_initial_state). The limits it reports go into the state. */
static int start_supervisor(struct create_job *j, struct sbx_error *err)
{
    j->ls = sbx__local_session_new(j->rundir, j->dir, j->state);
    j->ls->idle_ms = j->c->request_idle_ms;
    sbx__session_set_manifest(&j->ls->base, j->spec->manifest);
    j->state = NULL;
    struct state_job job = {.dir = j->dir,
                            .state = j->ls->state,
                            .manifest = j->spec->manifest,
                            .materialize_flags = j->mflags,
                            .session = j->c->isolated ? &j->ls->base : NULL,
                            .progress = &j->progress};
    struct while_starting ws_job = {write_initial_state, &job};
    json_t *report = NULL;
    j->ls->starting = 1;
    int rc = spawn_supervisor(j->sup, j->id, j->cfg, j->c->start_timeout_ms, &ws_job, j->tie_fd,
                              &report, err);
    sbx_fd_close(&j->tie_fd);
    if (rc < 0)
        return rc;
    j->started = 1;
    /* The supervisor is up (it has read the workspace owner): the root's owner may change. */
    rc = sbx__local_apply_root_owner(j->ls, err);
    if (rc == 0)
        rc = record_limits(j->dir, j->id, j->ls->state, report, err);
    sbx__session_state_changed(&j->ls->base);
    json_decref(report);
    return rc;
}

/* Without isolation the manifest is materialised through the serving supervisor. */
static int materialize(struct create_job *j, struct sbx_error *err)
{
    json_t *records = NULL;
    if (j->c->isolated || !j->spec->manifest)
        return 0;
    int rc = sbx__materialize(&j->ls->base, j->spec->manifest, j->mflags, &j->progress, &records,
                              err);
    if (rc < 0)
        return rc;
    sbx_json_set(j->ls->state, "materialized", records);
    sbx__session_state_changed(&j->ls->base);
    return sbx__local_write_state(j->dir, j->ls->state, err);
}

/* Undo a failed create: the supervisor, the runtime directory, a fresh workspace, the disk. */
static void rollback(struct create_job *j)
{
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (j->started || j->made_dir) {
        json_t *dj = j->image ? json_pack("{s:s,s:s*}", "image", j->image, "loop", j->loop) : NULL;
        sbx__local_stop_and_clean_held(j->dir, j->id, j->ws, j->made_ws, dj, j->made_ws, &ignored);
        json_decref(dj);
    } else if (j->image) {
        sbx__disk_detach(j->image, j->loop, j->ws, 0, &ignored);
    }
}

static void create_job_release(struct create_job *j)
{
    sbx_fd_close(&j->lock_fd);
    if (j->ls)
        sbx_session_free(&j->ls->base);
    sbx_fd_close(&j->tie_fd);
    json_decref(j->state);
    json_decref(j->cfg);
    json_decref(j->mjson);
    free(j->rundir);
    free(j->dir);
    free(j->ws);
    free(j->wsbase);
    free(j->sup);
    free(j->image);
    free(j->loop);
    free(j->snap_ref);
    sbx_snapshot_store_free(j->store);
}

int sbx__local_create(struct sbx__local_client *c, const struct sbx_create_spec *spec,
                      int allow_stopped, struct sbx_session **out, struct sbx_error *err)
{
    struct create_job j = {.c = c, .spec = spec, .lock_fd = -1, .tie_fd = -1};
    int rc;
    sbx_progress_sink_init(&j.progress, spec->progress, spec->progress_data);
    if ((rc = check_spec(&j, allow_stopped, err)) < 0 || (rc = make_runtime_dir(&j, err)) < 0 ||
        (rc = choose_workspace(&j, err)) < 0 || (rc = record_state(&j, err)) < 0 ||
        (rc = prepare_workspace(&j, err)) < 0 || (rc = build_config(&j, err)) < 0 ||
        (rc = start_supervisor(&j, err)) < 0 || (rc = materialize(&j, err)) < 0 ||
        (rc = sbx__local_hand_over(j.lock_fd, j.dir, err)) < 0) {
        rollback(&j);
        if (!strstr(err->msg, "ulimit -n"))
            sbx__proto_fd_hint(err);
        sbx_error_prefix(err, "cannot create sandbox");
    } else {
        *out = &j.ls->base;
        j.ls = NULL;
    }
    create_job_release(&j);
    return rc;
}
