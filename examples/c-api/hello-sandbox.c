/* A program using libsbx: make a local sandbox from a manifest, run a command in it, print its
 * output, remove the sandbox. Then, given an agent file and a model, run the agent in a fresh
 * sandbox of its own and print its answer.
 *
 *   cc hello-sandbox.c $(pkg-config --cflags --libs libsbx) -o hello-sandbox
 *   ./hello-sandbox
 *   ./hello-sandbox ../coding-task/agent.yaml replay:../coding-task/run.jsonl "Do the task."
 */
#include <stdio.h>
#include <stdlib.h>

#include <sbx/agent.h>
#include <sbx/manifest.h>
#include <sbx/sandbox-run.h>
#include <sbx/session.h>

static int fail(const struct sbx_error *err)
{
    fprintf(stderr, "hello-sandbox: %s\n", err->msg);
    return 1;
}

static int hello(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *doc = json_pack("{s:{s:{s:s, s:s}}}", "entries", "notes.txt", "type", "file", "content",
                            "hello from the workspace\n");
    struct sbx_manifest *m = NULL;
    struct sbx_client *client = NULL;
    struct sbx_session *s = NULL;
    int rc = 1;
    if (sbx_manifest_from_json(doc, NULL, &m, &err) < 0 ||
        sbx_client_new("local", NULL, &client, &err) < 0) {
        fail(&err);
        goto out;
    }
    struct sbx_create_spec spec = {.manifest = m};
    if (sbx_client_create(client, &spec, &s, &err) < 0) {
        fail(&err);
        goto out;
    }
    const char *const argv[] = {"cat", "notes.txt", NULL};
    struct sbx_exec_spec ex = {.argv = argv};
    struct sbx_exec_result res = {0};
    if (sbx_session_exec(s, &ex, &res, &err) < 0) {
        fail(&err);
    } else {
        printf("sandbox %s: %s", sbx_session_id(s), res.out.data);
        rc = res.status.code == 0 ? 0 : 1;
        sbx_exec_result_release(&res);
    }
    if (sbx_session_delete(s, &err) < 0)
        rc = fail(&err);
out:
    sbx_session_free(s);
    sbx_client_free(client);
    sbx_manifest_free(m);
    json_decref(doc);
    return rc;
}

static int run_agent(const char *agent_file, const char *model_name, const char *prompt)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *file = NULL;
    struct sbx_model *model = NULL;
    struct sbx_sandbox_run *sr = NULL;
    struct sbx_run_result *res = NULL;
    json_t *input = json_string(prompt);
    int rc = 1;
    struct sbx_run_config cfg = {0}; /* a fresh local sandbox per sandbox agent */
    if (sbx_agent_file_load(agent_file, &file, &err) < 0 ||
        sbx_model_new(model_name, NULL, &model, &err) < 0 ||
        sbx_sandbox_run_new(&cfg, &sr, &err) < 0) {
        fail(&err);
        goto out;
    }
    struct sbx_run_options opt = {.model = model, .max_turns = 20};
    if (sbx_sandbox_run(sr, sbx_agent_file_agent(file), input, &opt, &res, &err) < 0) {
        fail(&err);
        goto out;
    }
    puts(sbx_run_result_text(res));
    rc = 0;
out:
    sbx_run_result_free(res);
    sbx_sandbox_run_free(sr);
    sbx_model_free(model);
    sbx_agent_file_free(file);
    json_decref(input);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 1 && argc != 4) {
        fprintf(stderr, "usage: hello-sandbox [AGENT_FILE MODEL PROMPT]\n");
        return 2;
    }
    if (hello() != 0)
        return 1;
    return argc == 4 ? run_agent(argv[1], argv[2], argv[3]) : 0;
}
