/* The local provider, client side: stopped sandboxes. A stop snapshots the workspace, holds the
 * snapshot in the store, writes <stopped>/<id>.json (the session state with that snapshot) and
 * deletes the sandbox; start (rebuild.c) builds it again from the record. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/local/client/client.h"
#include "providers/local/local.h"
#include "sandbox/host/host.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

#define STOPPED_SUFFIX ".json"
#define HOLDER_PREFIX  "sandbox-"

int sbx__local_stopped_dir(int make, char **out, struct sbx_error *err)
{
    return sbx__local_state_subdir(NULL, "SBX_STOPPED", "stopped", make, out, err);
}

int sbx__local_stopped_find(const char *sdir, const char *prefix, char **out, struct sbx_error *err)
{
    if (!sbx__local_valid_id(prefix))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", prefix);
    int r = sbx__local_find_id(sdir, STOPPED_SUFFIX, prefix, out);
    if (r == -1)
        return sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id '%s' is ambiguous", prefix);
    return r == 1;
}

int sbx__local_stopped_read(const char *sdir, const char *id, json_t **out, struct sbx_error *err)
{
    char *path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, id);
    struct sbx_buf b;
    json_t *st = NULL;
    sbx_buf_init(&b, SBX_SESSION_STATE_MAX + 1);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", path)
                    : sbx_fd_read_all(fd, SBX_SESSION_STATE_MAX, &b, err);
    if (fd >= 0)
        close(fd);
    if (rc == 0)
        rc = sbx_session_state_parse(b.data, b.len, &st, err);
    if (rc == 0 && strcmp(json_string_value(json_object_get(st, "id")), id) != 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "it names another sandbox");
    if (rc == 0 && !json_is_string(json_object_get(st, "snapshot")))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "it has no snapshot");
    if (rc < 0) {
        json_decref(st);
        sbx_error_prefix(err, "stopped sandbox '%s'", id);
    } else {
        *out = st;
    }
    sbx_buf_release(&b);
    free(path);
    return rc;
}

static int write_stopped(const char *sdir, const char *id, const json_t *state,
                         struct sbx_error *err)
{
    char *text = NULL, *name = sbx_xasprintf("%s" STOPPED_SUFFIX, id);
    int dfd = open(sdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = dfd < 0 ? sbx_error_errno(err, errno, "cannot open '%s'", sdir) : 0;
    if (rc == 0)
        rc = sbx_session_state_serialize(state, &text, err);
    if (rc == 0)
        rc = sbx_fs_write_state(dfd, name, text, strlen(text), 0600, err);
    if (dfd >= 0)
        close(dfd);
    free(text);
    free(name);
    return rc;
}

/* The record of id gone, and the hold on its snapshot ref (may be NULL) released. */
static void drop_stopped(const char *sdir, const char *id, const char *ref)
{
    char *path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, id);
    char *holder = sbx_xasprintf(HOLDER_PREFIX "%s", id);
    struct sbx_snapshot_store *st = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    if (unlink(path) < 0 && errno != ENOENT)
        sbx_log(SBX_LOG_WARN, "cannot remove '%s': %s", path, strerror(errno));
    if (ref && (sbx_snapshot_store_open(NULL, &st, &e) < 0 ||
                sbx_snapshot_release(st, ref, holder, &e) < 0))
        sbx_log(SBX_LOG_WARN, "sandbox '%s': cannot release its snapshot: %s", id, e.msg);
    sbx_snapshot_store_free(st);
    free(holder);
    free(path);
}

void sbx__local_stopped_forget(const char *sdir, const char *id)
{
    json_t *rec = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    sbx__local_stopped_read(sdir, id, &rec, &ignored);
    drop_stopped(sdir, id, json_string_value(json_object_get(rec, "snapshot")));
    json_decref(rec);
}

int sbx__local_stopped_exists(const char *id)
{
    char *sdir = NULL, *path;
    struct stat st;
    if (sbx__local_stopped_dir(0, &sdir, NULL) < 0)
        return 0;
    path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, id);
    int yes = lstat(path, &st) == 0;
    free(path);
    free(sdir);
    return yes;
}

/* The dead runtime dir of a half-done stop or start of id, next to its record rec: torn down
 * (its workspace too, if sbx made it: the record's snapshot holds the content), unless it is a
 * sandbox that was started from the record and ran (created after the record's stop, with a
 * supervisor): its workspace may hold newer work, and rm or prune decide. */
static int clean_half(const char *dir, const char *id, const json_t *rec, struct sbx_error *err)
{
    json_t *state = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    char *record = sbx_xasprintf("%s/%s", dir, SBX_PROTO_RECORD);
    struct stat st;
    int ran = lstat(record, &st) == 0, rc;
    free(record);
    if (sbx__local_read_state(dir, id, &state, &ignored) < 0 ||
        sbx__local_check_state(state, id, &ignored) < 0) {
        json_decref(state);
        state = NULL;
    }
    /* Both RFC 3339 UTC times of the same shape: they compare as strings. */
    const char *created = json_string_value(json_object_get(state, "created"));
    const char *stopped = json_string_value(json_object_get(rec, "stopped"));
    if (ran && created && stopped && strcmp(created, stopped) > 0) {
        rc = sbx_error_set(err, SBX_E_EXISTS, 0,
                           "sandbox '%s' was started again from its stopped record and then "
                           "died; its workspace may hold newer work: 'sbx sandbox rm %s' removes "
                           "what is left of it (the stopped record stays for start)",
                           id, id);
    } else {
        const char *ws = json_string_value(json_object_get(state, "workspace"));
        int owned = json_is_true(json_object_get(state, "workspace_owned"));
        rc = sbx__local_stop_and_clean(dir, id, ws, owned, json_object_get(state, "disk"), owned,
                                       NULL, err);
    }
    json_decref(state);
    return rc;
}

int sbx__local_finish_half(struct sbx_client *bc, const char *id, enum sbx__half *what,
                           struct sbx_error *err)
{
    struct sbx__local_client *c = (struct sbx__local_client *)bc;
    char *rundir = NULL, *sdir = NULL, *dir = NULL;
    json_t *rec = NULL;
    struct stat st;
    *what = SBX__HALF_NONE;
    int rc = sbx__runtime_base(c->runtime_dir, &rundir, err);
    if (rc < 0)
        goto out;
    sbx__local_reclaim(rundir); /* a start killed before its supervisor ran */
    dir = sbx_xasprintf("%s/%s", rundir, id);
    if (lstat(dir, &st) < 0 || !sbx__local_stopped_exists(id) ||
        sbx__local_stopped_dir(0, &sdir, NULL) < 0)
        goto out;
    if ((rc = sbx__local_stopped_read(sdir, id, &rec, err)) < 0)
        goto out;
    struct sbx_session *s = NULL;
    struct sbx_error aerr = SBX_ERROR_INIT;
    rc = sbx__local_attach(bc, id, &s, &aerr);
    if (rc == 0) {
        /* It runs and answers: everything the record's snapshot has, it has too (a stop
         * snapshots before it ends anything; a start restored that snapshot). */
        sbx_session_free(s);
        sbx__local_stopped_forget(sdir, id);
        *what = SBX__HALF_LIVE;
    } else if (rc == -SBX_E_SANDBOX) {
        if ((rc = clean_half(dir, id, rec, err)) == 0)
            *what = SBX__HALF_STOPPED;
    } else {
        rc = sbx_error_copy(err, &aerr);
    }
out:
    json_decref(rec);
    free(rundir);
    free(sdir);
    free(dir);
    return rc;
}

int sbx__local_stop(struct sbx_client *bc, const char *prefix, char **out_ref,
                    struct sbx_error *err)
{
    struct sbx_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *sdir = NULL, *ref = NULL, *holder = NULL, *half = NULL;
    json_t *state = NULL;
    int held = 0, recorded = 0;
    enum sbx__half what = SBX__HALF_NONE;
    /* A stop (or start) of it killed half-way: finished first. When what it left was dead, the
     * stop is done: its record holds the snapshot. */
    int rc = sbx__local_stopped_dir(0, &sdir, NULL) == 0
                     ? sbx__local_stopped_find(sdir, prefix, &half, NULL)
                     : 0;
    if (rc == 1)
        rc = sbx__local_finish_half(bc, half, &what, err);
    if (rc == 0 && what == SBX__HALF_STOPPED) {
        json_t *rec = NULL;
        if ((rc = sbx__local_stopped_read(sdir, half, &rec, err)) == 0)
            *out_ref = sbx_xstrdup(json_string_value(json_object_get(rec, "snapshot")));
        json_decref(rec);
    }
    free(sdir);
    sdir = NULL;
    if (rc < 0 || what == SBX__HALF_STOPPED)
        goto out;
    rc = sbx__local_attach(bc, prefix, &s, err);
    if (rc < 0)
        goto out;
    const char *id = sbx_session_id(s);
    holder = sbx_xasprintf(HOLDER_PREFIX "%s", id);
    if ((rc = sbx__local_stopped_dir(1, &sdir, err)) < 0 ||
        (rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
        (rc = sbx_session_snapshot(s, store, &ref, err)) < 0 ||
        (rc = sbx_snapshot_hold(store, ref, holder, err)) < 0)
        goto out;
    held = 1;
    if ((rc = sbx_session_state(s, &state, err)) < 0)
        goto out;
    char now[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), now);
    sbx_json_set(state, "stopped", sbx_json_str(now));
    /* The record first: a stop killed after it leaves a sandbox start can bring back, plus
     * leftovers prune removes; never a sandbox with neither. */
    if ((rc = write_stopped(sdir, id, state, err)) < 0)
        goto out;
    recorded = 1;
    rc = sbx_session_delete(s, err);
    if (rc == 0) {
        held = recorded = 0;
        *out_ref = ref;
        ref = NULL;
    }
out:
    free(half);
    if (recorded) {
        char *path = sbx_xasprintf("%s/%s" STOPPED_SUFFIX, sdir, sbx_session_id(s));
        unlink(path);
        free(path);
    }
    if (held) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        sbx_snapshot_release(store, ref, holder, &ignored);
    }
    if (rc < 0)
        sbx_error_prefix(err, "cannot stop sandbox '%s'", prefix);
    json_decref(state);
    sbx_session_free(s);
    sbx_snapshot_store_free(store);
    free(sdir);
    free(ref);
    free(holder);
    return rc;
}

int sbx__local_stopped_state(struct sbx_client *bc, const char *prefix, json_t **out,
                             struct sbx_error *err)
{
    (void)bc;
    char *sdir = NULL, *id = NULL;
    int rc = sbx__local_stopped_dir(0, &sdir, err);
    if (rc == 0 && (rc = sbx__local_stopped_find(sdir, prefix, &id, err)) == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    if (rc > 0)
        rc = sbx__local_stopped_read(sdir, id, out, err);
    free(sdir);
    free(id);
    return rc;
}

/* The stopped record rec of id into the listing arr, which may list id already: a stop or a
 * start of it did not finish (sbx__local_finish_half). Each sandbox is listed once: a runtime
 * dir that is dead shows as the stopped sandbox with what it left ("leftovers"); one with a
 * process (live, creating, suspended...) shows as itself, naming the record's snapshot
 * ("stopped_record"). Takes rec. */
static void merge_record(json_t *arr, const char *id, json_t *rec)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_string(json_object_get(v, "id")) ||
            strcmp(json_string_value(json_object_get(v, "id")), id) != 0)
            continue;
        const char *status = json_string_value(json_object_get(v, "status"));
        if (status && strcmp(status, "dead") == 0) {
            sbx_json_set(rec, "leftovers", json_incref(json_object_get(v, "leftovers")));
            json_array_set_new(arr, i, rec);
        } else {
            sbx_json_set(v, "stopped_record", json_incref(json_object_get(rec, "snapshot")));
            json_decref(rec);
        }
        return;
    }
    sbx_json_append(arr, rec);
}

void sbx__local_stopped_list(json_t *arr)
{
    char *sdir = NULL;
    struct sbx_snapshot_store *store = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx__local_stopped_dir(0, &sdir, NULL) < 0)
        return;
    DIR *d = opendir(sdir);
    if (!d) {
        free(sdir);
        return;
    }
    if (sbx_snapshot_store_open(NULL, &store, &ignored) < 0)
        store = NULL;
    size_t sl = strlen(STOPPED_SUFFIX);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= sl || strcmp(e->d_name + len - sl, STOPPED_SUFFIX) != 0)
            continue;
        char *id = sbx_xstrndup(e->d_name, len - sl);
        json_t *rec = NULL, *hdr = NULL;
        if (sbx__local_valid_id(id) && sbx__local_stopped_read(sdir, id, &rec, &ignored) == 0) {
            const char *ref = json_string_value(json_object_get(rec, "snapshot"));
            json_t *bytes = NULL;
            if (store && sbx_snapshot_inspect(store, ref, &hdr, &ignored) == 0)
                bytes = json_incref(json_object_get(hdr, "bytes"));
            sbx_json_set(rec, "status", sbx_json_str("stopped"));
            sbx_json_set(rec, "snapshot_bytes", bytes ? bytes : json_null());
            merge_record(arr, id, rec);
        }
        json_decref(hdr);
        free(id);
    }
    closedir(d);
    sbx_snapshot_store_free(store);
    free(sdir);
}
