/* The sandbox part of an Agents SDK RunState (its SandboxSessionState, unix_local or docker)
 * made again as sbx sandboxes a run state owns (docs/internals/runstate.md, "The SDK's
 * RunState"): the SDK's manifest, and the workspace from the snapshot the state names (a local
 * snapshot: the JS SDK's directory or tar, the Python SDK's <base_path>/<id>.tar) or, without
 * one, from the workspace directory it names when that still exists. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/sandbox-run.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"

static const json_t *pick(const json_t *o, const char *camel, const char *snake)
{
    const json_t *v = json_object_get(o, camel);
    return v ? v : json_object_get(o, snake);
}

static const char *pick_str(const json_t *o, const char *camel, const char *snake)
{
    return json_string_value(pick(o, camel, snake));
}

/* The host path holding the workspace of session state ss (JS envelope or Python state), or
 * an error naming the field that lacks one. *path: caller frees. */
static int workspace_source(const json_t *ss, const char *field, char **path, struct sbx_error *err)
{
    const json_t *snap = json_object_get(ss, "snapshot");
    const json_t *prov = pick(ss, "providerState", "provider_state");
    const char *type = json_string_value(json_object_get(snap, "type"));
    struct stat st;
    char *p = NULL;
    if (type && strcmp(type, "local") == 0) {
        const char *js = json_string_value(json_object_get(snap, "path"));
        const char *base = pick_str(snap, "basePath", "base_path");
        const char *id = json_string_value(json_object_get(snap, "id"));
        if (js)
            p = sbx_xstrdup(js);
        else if (base && id)
            p = sbx_xasprintf("%s/%s.tar", base, id);
        if (p && stat(p, &st) == 0)
            return *path = p, 0;
        int e = errno;
        if (p) {
            sbx_error_set(err, SBX_E_NOTFOUND, e,
                          "SDK run state: field '%s.snapshot': its workspace snapshot '%s' is "
                          "not there",
                          field, p);
            free(p);
            return -SBX_E_NOTFOUND;
        }
    }
    const char *root = pick_str(prov ? prov : ss, "workspaceRootPath", "workspace_root_path");
    if (!root && !prov)
        root = pick_str(ss, "workspaceRoot", "workspace_root");
    if (root && root[0] == '/' && stat(root, &st) == 0 && S_ISDIR(st.st_mode))
        return *path = sbx_xstrdup(root), 0;
    const char *container = pick_str(prov ? prov : ss, "containerId", "container_id");
    if (container)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "SDK run state: field '%s.snapshot': it names docker container "
                             "'%.80s' but no workspace snapshot; sbx does not adopt a container "
                             "it did not make: persist the workspace with a local snapshot "
                             "(LocalSnapshotSpec) before saving the state",
                             field, container);
    return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                         "SDK run state: field '%s': it names neither a local workspace "
                         "snapshot nor a workspace directory that still exists%s%s",
                         field, root ? ": " : "", root ? root : "");
}

/* The workspace at path (a directory, or a tar file) into the default snapshot store. */
static int store_workspace(const char *path, char **ref, struct sbx_error *err)
{
    struct sbx_snapshot_store *store = NULL;
    struct stat st;
    int fd = -1, rc = sbx_snapshot_store_open(NULL, &store, err);
    if (rc < 0)
        return rc;
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        rc = sbx_error_errno(err, errno, "cannot open the SDK's workspace '%s'", path);
    } else if (S_ISDIR(st.st_mode)) {
        struct sbx_snapshot_take_opts o = {.label = "imported from an Agents SDK run state"};
        rc = sbx_snapshot_take(store, fd, &o, ref, err);
    } else {
        rc = sbx_snapshot_import(store, fd, NULL, ref, err);
    }
    if (rc < 0)
        sbx_error_prefix(err, "the SDK's workspace '%s'", path);
    sbx_fd_close(&fd);
    sbx_snapshot_store_free(store);
    return rc;
}

/* One agent's sandbox: a fresh sbx sandbox from the SDK state's manifest and workspace,
 * recorded as made by run run_id when one is given. *out: {"agent_name", "session_state",
 * "owned": true}. */
static int make_one(struct sbx_client *client, const json_t *ss, const char *agent,
                    const char *field, const char *run_id, json_t **out, struct sbx_error *err)
{
    const char *backend = pick_str(ss, "backendId", "type");
    char *src = NULL, *ref = NULL;
    struct sbx_manifest *m = NULL;
    struct sbx_session *s = NULL;
    json_t *state = NULL;
    int rc;
    if (!backend || (strcmp(backend, "unix_local") != 0 && strcmp(backend, "docker") != 0))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "SDK run state: field '%s.backendId': sandbox '%s' cannot be made "
                             "again in sbx (unix_local and docker can)",
                             field, backend ? backend : "(none)");
    const json_t *mdoc = json_object_get(ss, "manifest");
    struct sbx_manifest_load_opts lo = {.base_dir = "/"};
    if ((rc = workspace_source(ss, field, &src, err)) < 0 ||
        (rc = sbx_manifest_from_json(json_is_object(mdoc) ? mdoc : NULL, &lo, &m, err)) < 0 ||
        (rc = store_workspace(src, &ref, err)) < 0) {
        if (rc < 0 && m == NULL && src)
            sbx_error_prefix(err, "SDK run state: field '%s.manifest'", field);
        goto out;
    }
    struct sbx_create_spec spec = {.manifest = m, .snapshot = ref};
    if ((rc = sbx_client_create(client, &spec, &s, err)) < 0 ||
        (rc = sbx_session_state(s, &state, err)) < 0 ||
        (run_id && (rc = sbx_sandbox_record_claim(sbx_client_provider(client), sbx_session_id(s),
                                                  NULL, run_id, err)) < 0))
        goto out;
    *out = json_pack("{s:s, s:O, s:b}", "agent_name", agent, "session_state", state, "owned", 1);
out:
    if (rc < 0 && s)
        sbx_session_delete(s, NULL);
    sbx_session_free(s);
    sbx_manifest_free(m);
    json_decref(state);
    free(src);
    free(ref);
    return rc;
}

int sbx_sandbox_is_sdk_session(const json_t *doc)
{
    const char *type = pick_str(doc, "backendId", "type");
    return json_is_object(doc) && !json_object_get(doc, "provider") && type &&
           json_object_get(doc, "manifest") &&
           (strcmp(type, "unix_local") == 0 || strcmp(type, "docker") == 0);
}

int sbx_sandbox_from_sdk_session(struct sbx_client *client, const json_t *ss, json_t **out,
                                 struct sbx_error *err)
{
    struct sbx_client *own = NULL;
    json_t *one = NULL;
    int rc = 0;
    if (!client && (rc = sbx_client_new("local", NULL, &own, err)) < 0)
        return rc;
    rc = make_one(client ? client : own, ss, "sandbox", "session state", NULL, &one, err);
    if (rc == 0)
        *out = json_incref(json_object_get(one, "session_state"));
    json_decref(one);
    sbx_client_free(own);
    return rc;
}

int sbx_sandbox_from_sdk(struct sbx_client *client, const json_t *sdk_sandbox,
                         const struct sbx_agent *start, const char *run_id, json_t **out,
                         struct sbx_error *err)
{
    (void)start;
    struct sbx_client *own = NULL;
    const json_t *by = pick(sdk_sandbox, "sessionsByAgent", "sessions_by_agent");
    if (!run_id || !run_id[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "the sandboxes of a run state need its run id");
    json_t *res = json_pack("{s:s, s:{}}", "run_id", run_id, "sessions_by_agent");
    int rc = 0;
    if (!client && (rc = sbx_client_new("local", NULL, &own, err)) < 0) {
        json_decref(res);
        return rc;
    }
    const char *key;
    json_t *e, *single = NULL;
    const json_t *ss0 = pick(sdk_sandbox, "sessionState", "session_state");
    const char *cur = pick_str(sdk_sandbox, "currentAgentName", "current_agent_name");
    if (!json_object_size(by) && json_is_object(ss0) && cur) {
        /* One session, the current agent's. */
        single = json_pack("{s:{s:s, s:O}}", cur, "currentAgentName", cur, "sessionState", ss0);
        by = single;
    }
    json_object_foreach((json_t *)by, key, e)
    {
        const char *agent = pick_str(e, "currentAgentName", "agent_name");
        const json_t *ss = pick(e, "sessionState", "session_state");
        char field[160];
        snprintf(field, sizeof(field), "sandbox.sessionsByAgent.%.64s.sessionState", key);
        if (!agent)
            agent = pick_str(e, "agentName", "current_agent_name");
        if (!agent)
            agent = key;
        json_t *one = NULL;
        if (!json_is_object(ss)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "SDK run state: field '%s' is missing", field);
            break;
        }
        if ((rc = make_one(client ? client : own, ss, agent, field, run_id, &one, err)) < 0)
            break;
        sbx_json_set(json_object_get(res, "sessions_by_agent"), agent, one);
    }
    if (rc < 0) {
        /* What was made for the state so far goes again. */
        sbx_sandbox_run_state_discard(client ? client : own, res, NULL);
        json_decref(res);
    } else {
        *out = res;
    }
    json_decref(single);
    sbx_client_free(own);
    return rc;
}
