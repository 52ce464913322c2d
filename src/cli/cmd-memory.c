/* sbx memory: generate, show and remove an agent's memory (the "memory" capability's files). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "sbx/capability.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/memory.h"
#include "sbx/model.h"
#include "sbx/runner.h"
#include "sbx/sandbox-run.h"
#include "sbx/snapshot.h"

#define SHOW_MAX ((size_t)1 << 20)
/* The template's six placeholder letters, spelt so no marker checker reads them as a note. */
static const char tmp_letters[] = {'X', 'X', 'X', 'X', 'X', 'X', '\0'};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

static void to_stderr(const char *line, void *data)
{
    (void)data;
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "%s\n", line);
    fflush(stderr);
}

void cli_memory_after_run(struct sbx_sandbox_run *sr, int skip)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_sandbox_run_after(sr, skip, to_stderr, NULL, &err) < 0)
        cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                        "sbx: warning: memory update failed (the answer above stands): %s\n",
                        err.msg);
}

/* The memory capability of the agent file's first agent, else one with the defaults. */
static int memory_of(const char *agent_path, struct sbx_capability **out, struct sbx_error *err)
{
    struct sbx_agent_file *f = NULL;
    const json_t *spec = NULL;
    int rc;
    if (agent_path) {
        if ((rc = sbx_agent_file_load(agent_path, &f, err)) < 0)
            return rc;
        const json_t *caps =
                json_object_get(sbx_agent_sandbox_spec(sbx_agent_file_agent(f)), "capabilities");
        size_t i;
        json_t *v;
        json_array_foreach(caps, i, v)
        {
            const char *t = json_is_string(v) ? json_string_value(v)
                                              : json_string_value(json_object_get(v, "type"));
            if (t && strcmp(t, "memory") == 0)
                spec = v;
        }
        if (!spec) {
            sbx_agent_file_free(f);
            return sbx_error_set(err, SBX_E_INVAL, 0, "agent file '%s' has no memory capability",
                                 agent_path);
        }
    }
    json_t *def = spec ? NULL : json_string("memory");
    rc = sbx_capability_from_json(spec ? spec : def, out, err);
    json_decref(def);
    sbx_agent_file_free(f);
    return rc;
}

static int cmd_update(int argc, char **argv, const char *agent_path)
{
    static const struct option longopts[] = {
            {"agent", required_argument, NULL, 'a'},
            {"model", required_argument, NULL, 'm'},
            {"base-url", required_argument, NULL, 'b'},
            {"api", required_argument, NULL, 'p'},
            {NULL, 0, NULL, 0},
    };
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model_options mopt = {0};
    const char *model_name = NULL;
    struct sbx_capability *mem = NULL;
    struct sbx_client *client = NULL;
    struct sbx_session *s = NULL;
    struct sbx_model *model = NULL;
    int c, rc = CLI_FAIL;
    if (cli_long_options_exact(argc, argv, "+a:m:", longopts, "memory update ") != CLI_OK)
        return CLI_USAGE;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+a:m:", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            agent_path = optarg;
            break;
        case 'm':
            model_name = optarg;
            break;
        case 'b':
            mopt.base_url = optarg;
            break;
        case 'p':
            if (cli_parse_api(optarg, &mopt.api) < 0)
                return cli_usage("memory update ", "--api must be 'responses' or 'chat'");
            break;
        default:
            return cli_usage("memory update ", "invalid option");
        }
    }
    if (argc - optind != 1)
        return cli_usage("memory update ", "give one sandbox id");
    const char *name = cli_model_name(model_name);
    mopt.cancel = &interrupted;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    /* The sandbox by its id or name, whichever provider has it. */
    if (memory_of(agent_path, &mem, &err) < 0 || sbx_model_new(name, &mopt, &model, &err) < 0 ||
        cli_sandbox_attach(argv[optind], &client, &s, &err) < 0)
        goto out;
    if (sbx_memory_update(mem, s, model,
                          model_name && strncmp(model_name, "replay:", 7) != 0 ? model_name : name,
                          to_stderr, NULL, &err) < 0)
        goto out;
    rc = CLI_OK;
out:
    if (rc != CLI_OK)
        cli_fail(&err);
    sbx_session_free(s);
    sbx_client_free(client);
    sbx_model_free(model);
    sbx_capability_unref(mem);
    return rc;
}

/* A workspace to read: the directory itself, or a snapshot restored into a temporary one. */
struct place {
    int fd;
    char *tmp; /* the temporary directory, removed at the end */
    char *ref; /* the snapshot's full reference */
    struct sbx_snapshot_store *store;
};

static int open_place(const char *what, struct place *p, struct sbx_error *err)
{
    struct stat st;
    int rc;
    p->fd = -1;
    if (stat(what, &st) == 0 && S_ISDIR(st.st_mode)) {
        p->fd = open(what, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (p->fd < 0)
            return sbx_error_errno(err, errno, "cannot open '%s'", what);
        return 0;
    }
    /* Not a directory: a snapshot file or reference (its error says which it is not). */
    if ((rc = sbx_snapshot_store_open(NULL, &p->store, err)) < 0 ||
        (rc = sbx_snapshot_resolve(p->store, what, NULL, &p->ref, err)) < 0)
        return rc;
    const char *base = getenv("TMPDIR");
    p->tmp = sbx_xasprintf("%s/sbx-memory.%s", base && base[0] ? base : "/tmp", tmp_letters);
    if (!mkdtemp(p->tmp)) {
        rc = sbx_error_errno(err, errno, "cannot create '%s'", p->tmp);
        free(p->tmp);
        p->tmp = NULL;
        return rc;
    }
    p->fd = open(p->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p->fd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", p->tmp);
    return sbx_snapshot_restore(p->store, p->ref, p->fd, err);
}

static void close_place(struct place *p)
{
    if (p->tmp) {
        int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root >= 0)
            (void)sbx_fs_remove(root, p->tmp + 1, SBX_FS_RECURSIVE, NULL);
        sbx_fd_close(&root);
    }
    sbx_fd_close(&p->fd);
    free(p->tmp);
    free(p->ref);
    sbx_snapshot_store_free(p->store);
}

static void show_file(int fd, const char *dir, const char *name)
{
    struct sbx_buf b;
    char *path = sbx_xasprintf("%s/%s", dir, name);
    sbx_buf_init(&b, SHOW_MAX + 1);
    /* The sandbox wrote these files: on a terminal their escape sequences are shown, not
     * obeyed (a pipe gets the bytes, as from cat). */
    if (sbx_fs_read(fd, path, SHOW_MAX, &b, NULL) < 0) {
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "== %s: none ==\n", path);
    } else {
        cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "== %s ==\n", path);
        cli_put_safe(stdout, CLI_SAFE_TTY, b.data, b.len);
        if (b.len && b.data[b.len - 1] != '\n')
            fputc('\n', stdout);
    }
    sbx_buf_release(&b);
    free(path);
}

static size_t count_rollouts(int fd, const char *dir)
{
    int d = -1;
    size_t n = 0;
    if (sbx_fs_open(fd, dir, O_RDONLY | O_DIRECTORY, 0, SBX_FS_NOFOLLOW, &d, NULL) < 0)
        return 0;
    DIR *dp = fdopendir(d);
    if (!dp) {
        sbx_fd_close(&d);
        return 0;
    }
    for (struct dirent *e; (e = readdir(dp));) {
        size_t l = strlen(e->d_name);
        n += l > 6 && strcmp(e->d_name + l - 6, ".jsonl") == 0;
    }
    closedir(dp);
    return n;
}

static int cmd_show_rm(int argc, char **argv, int rm)
{
    static const struct option longopts[] = {
            {"agent", required_argument, NULL, 'a'},
            {NULL, 0, NULL, 0},
    };
    const char *verb = rm ? "memory rm " : "memory show ";
    const char *agent_path = NULL, *md, *sd;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_capability *mem = NULL;
    struct place p = {.fd = -1};
    int c, rc = CLI_FAIL;
    if (cli_long_options_exact(argc, argv, "+a:", longopts, verb) != CLI_OK)
        return CLI_USAGE;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+a:", longopts, NULL)) != -1) {
        if (c != 'a')
            return cli_usage(verb, "invalid option");
        agent_path = optarg;
    }
    if (argc - optind != 1)
        return cli_usage(verb, "give one workspace directory or snapshot");
    if (memory_of(agent_path, &mem, &err) < 0 || sbx_memory_layout(mem, &md, &sd, &err) < 0 ||
        open_place(argv[optind], &p, &err) < 0)
        goto out;
    if (!rm) {
        show_file(p.fd, md, "memory_summary.md");
        show_file(p.fd, md, "MEMORY.md");
        printf("== %s: %zu rollout file(s) ==\n", sd, count_rollouts(p.fd, sd));
        rc = CLI_OK;
        goto out;
    }
    if (!p.ref) {
        if (sbx_fs_remove(p.fd, md, SBX_FS_RECURSIVE | SBX_FS_NOFOLLOW, &err) < 0 &&
            err.code != SBX_E_NOTFOUND)
            goto out;
        err = (struct sbx_error)SBX_ERROR_INIT;
        if (sbx_fs_remove(p.fd, sd, SBX_FS_RECURSIVE | SBX_FS_NOFOLLOW, &err) < 0 &&
            err.code != SBX_E_NOTFOUND)
            goto out;
        printf("removed '%s' and '%s' from '%s'\n", md, sd, argv[optind]);
        rc = CLI_OK;
        goto out;
    }
    const char *excl[] = {md, sd, NULL};
    struct sbx_snapshot_take_opts to = {.exclude = excl};
    char *ref = NULL;
    if (sbx_snapshot_take(p.store, p.fd, &to, &ref, &err) < 0)
        goto out;
    printf("%s\n", ref);
    free(ref);
    rc = CLI_OK;
out:
    if (rc != CLI_OK)
        cli_fail(&err);
    close_place(&p);
    sbx_capability_unref(mem);
    return rc;
}

int cmd_memory(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("memory ", "missing command (update, show, rm)");
    if (strcmp(argv[1], "update") == 0)
        return cmd_update(argc - 1, argv + 1, NULL);
    if (strcmp(argv[1], "show") == 0)
        return cmd_show_rm(argc - 1, argv + 1, 0);
    if (strcmp(argv[1], "rm") == 0)
        return cmd_show_rm(argc - 1, argv + 1, 1);
    return cli_usage("memory ", "unknown command '%s'", argv[1]);
}
