/* The help of every command and subcommand: one table that `--help`, `sbx help`, the man pages
 * and the shell completions are made from (help.c renders it). Text is written unwrapped: a
 * blank line ("\n\n") starts a paragraph, a single "\n" breaks a line. */
#include "cli/help.h"

#include "sbx/common.h"

/* The options of a new sandbox and the locators of by-id commands come from the providers'
 * table (help.c expands these markers). */
#define PROVIDER_OPTIONS                         \
    {                                            \
        0, CLI_HELP_PROVIDER_OPTIONS, NULL, NULL \
    }
#define LOCATOR_OPTIONS                         \
    {                                           \
        0, CLI_HELP_LOCATOR_OPTIONS, NULL, NULL \
    }
#define PASS_SECRET                                                                             \
    {                                                                                           \
        0, "pass-secret", "NAME",                                                               \
                "let a manifest's {type: secret, env: NAME} read one of sbx's own credentials " \
                "(OPENAI_API_KEY); refused otherwise"                                           \
    }

#define COLOR_OPT                                                                                        \
    {                                                                                                    \
        0, "color", "auto|always|never",                                                                 \
                "colour on stderr (errors red, warnings yellow, a run's tool lines dimmed); auto: on a " \
                "terminal unless $NO_COLOR is set"                                                       \
    }

static const struct cli_help_opt top_opts[] = {
        {'h', "help", NULL, "show this help"},
        {0, "version", NULL, "print the version"},
        COLOR_OPT,
        {0},
};

static const struct cli_help_opt help_only[] = {
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt run_opts[] = {
        {'a', "agent", "AGENT_FILE", "the agent file (YAML or JSON) to run"},
        {'m', "model", "MODEL",
         "the model name (default $SBX_MODEL); 'replay:FILE' answers from a recording made with "
         "--record"},
        {0, "base-url", "URL", "the model server (default $OPENAI_BASE_URL)"},
        {0, "api", "responses|chat", "the model API to speak"},
        {0, "max-turns", "N", "most model turns of the run"},
        {0, "json", NULL, "write one event per line to stdout instead of progress on stderr"},
        {0, "record", "FILE", "record the model's answers to FILE (for -m replay:FILE)"},
        {0, "no-stream", NULL,
         "ask for whole answers, not streamed ones (each must begin within 60 s)"},
        {0, "timeout", "DURATION", "give up on a model call attempt after this (default 10 min)"},
        {0, "deadline", "DURATION",
         "give up on a model call after this for all its attempts together (default 15 min)"},
        {0, "retries", "N", "retries of a failed model call (0 to 100)"},
        {0, "use-previous-response-id", NULL,
         "send only new items and let the server keep the rest"},
        {0, "manifest", "FILE", "replace the agent's manifest"},
        {0, "session", "ID", "run in an existing sandbox instead (left running)"},
        {0, "session-state", "FILE",
         "resume the sandbox a state file from 'sbx sandbox state' describes (the run's own "
         "then: removed at the end unless --keep)"},
        {0, "snapshot", "FILE|REF",
         "start fresh sandboxes from a snapshot (a file, or a reference in the snapshot store) "
         "with the manifest's ephemeral entries on top"},
        {0, "snapshot-out", "FILE|store",
         "snapshot every sandbox the run used at its end, before any is removed, into the store "
         "(FILE: and export the first to FILE)"},
        {0, "store", "URL",
         "a remote snapshot store (s3://BUCKET/PREFIX, gs://..., azure://ACCOUNT/CONTAINER/...): "
         "--snapshot REF is pulled from it first, --snapshot-out store pushes there too"},
        {0, "keep", NULL,
         "leave the sandboxes the run created or resumed running and print their ids on stderr"},
        {0, "share", NULL,
         "give every sandbox agent of the run (handoffs) one sandbox instead of one each"},
        {0, "conversation", "NAME", "continue a stored conversation"},
        PASS_SECRET,
        PROVIDER_OPTIONS,
        {0, "state", "FILE",
         "save the run's state to FILE after every turn (a new file) and keep its sandboxes "
         "until it completes"},
        {0, "resume", "FILE", "continue the run saved in FILE (give its agent file with -a)"},
        {0, "approve", "CALL_ID|all|TOOL",
         "with --resume: run this pending tool call (all: every one); on a new run: run every "
         "call of TOOL without asking (as --approve-always)"},
        {0, "reject", "CALL_ID", "with --resume: refuse this pending call; the tool never runs"},
        {0, "reason", "TEXT",
         "after --reject or --reject-always: what the model reads instead of 'Tool execution "
         "was not approved.'"},
        {0, "approve-always", "TOOL",
         "run every call of TOOL (a glob) that needs approval, for the rest of the run"},
        {0, "reject-always", "TOOL", "refuse every call of TOOL that needs approval"},
        {0, "approve-all", NULL, "no call waits for approval in this run"},
        {0, "allow-agent-change", NULL, "with --resume: accept an agent file that changed"},
        {0, "no-memory-update", NULL, "skip generating memory after the answer"},
        {0, "allow-host-tools", NULL,
         "let the agent files' host_command tools run programs on this machine, outside every "
         "sandbox (whoever wrote the agent file then decides what runs here)"},
        {0, "port", "N",
         "print the host URL of port N of the run's sandboxes (on stderr, or as a 'port' event "
         "with --json) as soon as something listens there (repeatable)"},
        {0, "trace", "FILE", "write the run's spans to FILE, one JSON object per line"},
        {0, "trace-otlp", "URL",
         "send the run's spans to an OpenTelemetry collector (OTLP/HTTP protobuf, POST "
         "URL/v1/traces; default $OTEL_EXPORTER_OTLP_ENDPOINT)"},
        {0, "trace-parent", "TRACEPARENT",
         "join the W3C trace context TRACEPARENT (default $TRACEPARENT)"},
        {0, "trace-content", NULL,
         "also record prompts, tool arguments and outputs in the spans (bounded; secrets "
         "redacted)"},
        {0, "trace-openai", NULL,
         "send the run's spans to the OpenAI traces dashboard with $OPENAI_API_KEY (endpoint "
         "$SBX_TRACE_OPENAI_URL, default https://api.openai.com/v1/traces/ingest)"},
        {0, "workflow", "NAME",
         "the run's workflow name in its trace (default 'sbx run'; kept by a resumed run)"},
        {0, "group-id", "ID",
         "a group id linking the run's trace to others, e.g. a chat thread's id"},
        {0, "trace-metadata", "KEY=VALUE", "metadata of the run's trace (repeatable, at most 16)"},
        {0, "var", "NAME=VALUE",
         "fill {{NAME}} in the agents' instructions and prompt variables (repeatable)"},
        {0, "var-secret", "NAME=env:VARIABLE",
         "a variable whose value is read from an environment variable, redacted from what the "
         "run writes and never saved (give it again on --resume)"},
        {0, "vars-file", "FILE", "variables from a YAML or JSON mapping of names to values"},
        COLOR_OPT,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt create_opts[] = {
        {'m', "manifest", "FILE", "make the workspace from this manifest"},
        {'w', "workspace", "DIR", "the workspace directory to use"},
        {0, "workspace-existing", "keep|overwrite",
         "a non-empty --workspace: keep its files (the manifest may only add) or let the "
         "manifest's entries replace the files they name"},
        {0, "snapshot", "FILE|REF",
         "start from a snapshot (an archive or a store reference), then apply the manifest's "
         "ephemeral entries"},
        {0, "store", "URL",
         "pull --snapshot REF from this remote store first (s3://, gs://, azure://)"},
        {0, "json", NULL, "print the sandbox's state instead of its id"},
        {0, "name", "NAME",
         "name the sandbox (unique among yours; letters, digits, '.', '_', '-'): every command "
         "given an id takes the name too"},
        {0, "label", "KEY=VALUE", "label the sandbox (repeatable; ps --filter label=KEY=VALUE)"},
        PASS_SECRET,
        PROVIDER_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt exec_opts[] = {
        {'t', "tty", NULL, "run the command on a terminal"},
        {'i', "interactive", NULL, "forward standard input"},
        {'w', "cwd", "DIR", "the working directory"},
        {'e', "env", "KEY=VALUE", "set an environment variable (repeatable)"},
        {'u', "user", "NAME", "run as this user"},
        {0, "timeout", "SECONDS", "kill the command after this long"},
        {0, "max-output", "BYTES", "most bytes of output kept (not with -i or -t)"},
        {0, "keep-background", NULL, "what the command leaves running lives on until rm"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt cp_opts[] = {
        {'r', "recursive", NULL, "copy a directory (what a directory source always does)"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt shell_opts[] = {
        {0, "shell", "PATH", "the shell to run (default: bash if the sandbox has it, else sh)"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt ps_opts[] = {
        {'a', "all", NULL, "also dead, suspended and half-created sandboxes, with what they left"},
        {'q', "quiet", NULL, "print only the ids"},
        {0, "format", "FORMAT",
         "print each sandbox by a template: {{.ID}} {{.Name}} {{.Provider}} {{.Status}} "
         "{{.Created}} {{.Workspace}} {{.Labels}} {{.Label \"KEY\"}}, \\t a tab; 'table "
         "TEMPLATE' adds a header and aligns the columns; 'json' one JSON object a line; "
         "'table' the default table"},
        {'f', "filter", "KEY=VALUE",
         "only the sandboxes where it holds (repeatable: one of a key's, each key's): "
         "id=PREFIX, name=PART, label=KEY or label=KEY=VALUE, status=STATUS, provider=NAME"},
        {0, "json", NULL, "print JSON"},
        {0, "provider", "NAME",
         "list only this provider's sandboxes (then a server that cannot be reached is an error, "
         "not a warning)"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt port_opts[] = {
        {0, "unix", NULL,
         "print the path of a unix socket only you can reach, forwarding to the port (curl "
         "--unix-socket PATH http://x/)"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt rm_opts[] = {
        {'f', "force", NULL, "stop and remove running sandboxes (what rm always does)"},
        {'a', "all", NULL,
         "remove every sandbox 'ps --all' lists, after a y/N question on a terminal"},
        {'y', "yes", NULL, "do not ask (needed for --all without a terminal)"},
        {0, "keep-workspace", NULL, "leave the workspaces in place"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt stats_opts[] = {
        {0, "no-stream", NULL, "print one reading and exit"},
        {'w', "watch", NULL, "refresh every second until interrupted (the default)"},
        {0, "json", NULL, "print each reading as one JSON array a line"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt logs_opts[] = {
        {'f', "follow", NULL, "keep printing what is added until the sandbox is removed"},
        {'n', "tail", "N", "begin with the last N lines"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt prune_opts[] = {
        {0, "keep-workspace", NULL, "leave the workspaces of dead sandboxes in place"},
        {0, "json", NULL, "print JSON"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt start_opts[] = {
        {0, "pass-secret", "NAME", "as for create"},
        {'m', "manifest", "FILE",
         "the manifest the sandbox was made from, whose ephemeral variables and mount "
         "credentials (never saved) are set again"},
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt by_id_opts[] = {
        LOCATOR_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt sbstate_opts[] = {
        {0, "no-snapshot", NULL, "print the state as it is, without a snapshot first"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt resume_opts[] = {
        {0, "pass-secret", "NAME", "as for create"},
        {'m', "manifest", "FILE", "as for start"},
        PROVIDER_OPTIONS,
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt providers_opts[] = {
        {0, "json", NULL, "print JSON: name, summary, default, traits and options of each"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt snap_store[] = {
        {0, "store", "DIR", "use the store at DIR"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt snap_push_opts[] = {
        {0, "store", "URL",
         "the remote store: s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] or "
         "azure://ACCOUNT/CONTAINER[/PREFIX]"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt snap_transfer_opts[] = {
        {0, "json", NULL, "print what was transferred as JSON"},
        {0, "store", "URL",
         "the remote store: s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] or "
         "azure://ACCOUNT/CONTAINER[/PREFIX]"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt snap_ls_opts[] = {
        {0, "json", NULL, "print JSON"},
        {0, "store", "DIR", "use the store at DIR"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt snap_rm_opts[] = {
        {'f', "force", NULL, "remove snapshots a stopped sandbox holds too"},
        {0, "store", "DIR", "use the store at DIR"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt snap_import_opts[] = {
        {0, "store", "DIR", "use the store at DIR"},
        {0, "max-entries", "N", "most members (default 1000000)"},
        {0, "max-bytes", "SIZE", "most file bytes in all (default 64G)"},
        {0, "max-file-bytes", "SIZE", "most bytes of one file (default: --max-bytes)"},
        {0, "max-ratio", "N", "most expansion over the archive's size (default 1000)"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt state_import_opts[] = {
        {'a', "agent", "AGENT_FILE", "the agents the SDK's run continues with (required)"},
        {'o', "output", "STATE", "the sbx run state to write (required)"},
        {'m', "model", "MODEL", "the model name saved for the resume"},
        {0, "api", "API", "responses or chat, saved for the resume"},
        {0, "base-url", "URL", "the model server saved for the resume"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt state_export_opts[] = {
        {0, "sdk", NULL, "as the JS Agents SDK's RunState (required: the one format it writes)"},
        {'o', NULL, "FILE", "write to FILE instead of standard output"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt json_opts[] = {
        {0, "json", NULL, "print JSON"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt conv_show_opts[] = {
        {0, "json", NULL, "print the items as a JSON array"},
        {0, "last", "N", "only the last N items"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt mem_update_opts[] = {
        {'a', "agent", "AGENT_FILE", "take the folders from this agent's memory capability"},
        {'m', "model", "MODEL", "the model that writes the memory"},
        {0, "base-url", "URL", "the model server"},
        {0, "api", "responses|chat", "the model API to speak"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt mem_agent_opts[] = {
        {'a', "agent", "AGENT_FILE", "take the folders from this agent's memory capability"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt node_ca_opts[] = {
        {0, "name", "NAME", "the CA's common name (default 'sbx-node CA')"},
        {0, "days", "N", "how long the CA is valid (default 3650)"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt node_cert_opts[] = {
        {0, "ca", "DIR", "the CA folder that signs (made by 'sbx node ca init')"},
        {0, "node", NULL, "a node's certificate: the daemon's, for TLS servers"},
        {0, "harness", NULL, "a harness's certificate: for the clients of the daemons"},
        {0, "host", "HOST", "an IP address or DNS name the node is reached at (repeatable)"},
        {0, "days", "N", "how long the certificate is valid (default 365)"},
        {0, "out", "DIR", "where NAME.pem and NAME.key go (default: the current folder)"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt mf_check_opts[] = {
        {0, "no-host-checks", NULL,
         "do not look at local_file / local_dir sources on this machine, nor require the "
         "variables mount credentials refer to; allow mount targets outside the root"},
        {0, "base-dir", "DIR", "resolve relative sources against DIR (default: FILE's directory)"},
        {0, "provider", "NAME",
         "refuse the mount entries provider NAME cannot mount, saying why (default: local)"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt mcp_ls_opts[] = {
        {'a', "agent", "AGENT_FILE", "the agent file (also the one argument)"},
        {0, "allow-host-tools", NULL,
         "start the file's host MCP servers (host: true) to list them: they run on this "
         "machine, outside every sandbox"},
        {0, "json", NULL, "print the list as JSON"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt mf_tree_opts[] = {
        {0, "depth", "N", "tree levels to show (0: all; default 4)"},
        {0, "max-bytes", "N", "cap on the tree text (default 5000)"},
        {0, "no-host-checks", NULL,
         "do not look at local_file / local_dir sources on this machine"},
        {0, "base-dir", "DIR", "resolve relative sources against DIR (default: FILE's directory)"},
        {'h', "help", NULL, "show this help"},
        {0},
};

static const struct cli_help_opt trace_show_opts[] = {
        {'f', "follow", NULL, "then show each span appended to FILE, until the run ends"},
        {'h', "help", NULL, "show this help"},
        {0},
};

#define STATUS_COMMON "0 done, 1 error, 2 usage error."

const struct cli_help cli_help_table[] = {
        {"", NULL,
         "sbx <command> [options]\nsbx --color auto|always|never <command> [options]\n"
         "sbx help [COMMAND [SUBCOMMAND]]\nsbx --version",
         "sandbox agents: run AI agents in isolated local sandboxes",
         "sbx runs AI agents against a model in isolated, resumable local sandboxes: a workspace "
         "made from a manifest, commands run inside it, snapshots and saved state come out.\n\n"
         "Every command and subcommand answers --help (or -h); 'sbx help COMMAND [SUBCOMMAND]' "
         "shows the same text.",
         top_opts, STATUS_COMMON " A command's own page lists its other statuses.", NULL,
         CLI_HELP_ANYWHERE},

        {"conversation", NULL, "sbx conversation <command> [options]",
         "list, show and remove stored conversations",
         "Conversations are the item histories 'sbx run --conversation NAME' continues. The "
         "database is $SBX_CONVERSATIONS, else ${XDG_STATE_HOME:-~/.local/state}/sbx/"
         "conversations.db.",
         help_only, STATUS_COMMON, "run", 0},
        {"conversation ls", NULL, "sbx conversation ls [--json]", "list the stored conversations",
         "Lists names, item counts and last updates.", json_opts, STATUS_COMMON, "conversation",
         CLI_HELP_ANYWHERE},
        {"conversation show", NULL, "sbx conversation show [--json] [--last N] NAME",
         "print a conversation's items", "Prints the items (--json: as a JSON array).",
         conv_show_opts, STATUS_COMMON, "conversation", CLI_HELP_ANYWHERE},
        {"conversation rm", NULL, "sbx conversation rm NAME", "delete a conversation",
         "Deletes one conversation.", help_only, STATUS_COMMON, "conversation", CLI_HELP_ANYWHERE},

        {"help", NULL, "sbx help [COMMAND [SUBCOMMAND]]", "show the help of sbx or of a command",
         "Without a topic: the commands. With one: the help of that command or subcommand, as "
         "its --help shows it.",
         help_only, "0 done, 2 unknown topic (the known ones are named).", NULL, CLI_HELP_ANYWHERE},

        {"manifest", NULL, "sbx manifest <command> [options] FILE",
         "check a workspace manifest or show its tree", NULL, help_only, STATUS_COMMON,
         "run sandbox-create", 0},
        {"manifest check", NULL,
         "sbx manifest check [--no-host-checks] [--base-dir DIR] [--provider NAME] FILE",
         "validate a manifest",
         "Validates FILE (YAML or JSON) and prints the normalised manifest as JSON; secret "
         "values are left out (a note on stderr says how many). For each mount entry a line on "
         "stderr gives its type, target, read-only or read-write, and whether sbx's tests mount "
         "that type against a real server or it is configured only; a mount entry the provider "
         "(--provider, default local) cannot mount fails the check with the reason.",
         mf_check_opts, STATUS_COMMON, "manifest", CLI_HELP_ANYWHERE},
        {"manifest tree", NULL,
         "sbx manifest tree [--depth N] [--max-bytes N] [--no-host-checks] FILE",
         "print the workspace tree the agent is shown",
         "Prints the workspace tree the agent is shown (default depth 4, 5000 bytes).",
         mf_tree_opts, STATUS_COMMON, "manifest", CLI_HELP_ANYWHERE},

        {"mcp", NULL, "sbx mcp <command> [options]", "show what an agent file's MCP servers offer",
         "An agent file's mcp_servers give its agents the tools of MCP servers (stdio in the "
         "sandbox or on the host, or Streamable HTTP); see the guide's 'MCP servers'.",
         help_only, STATUS_COMMON, "run", 0},
        {"mcp ls", NULL, "sbx mcp ls [--allow-host-tools] [--json] AGENT_FILE",
         "list the tools, resources and prompts of an agent file's MCP servers",
         "Reaches each MCP server of the agent file (and of the agent files it names), lists "
         "its tools, resources and prompts (those its capabilities have) and closes it again. "
         "A server that starts in the agent's sandbox is named, not started: 'sbx run' lists "
         "its tools. A host server is started only with --allow-host-tools.",
         mcp_ls_opts, STATUS_COMMON, "mcp run", 0},

        {"memory", NULL, "sbx memory <command> [options]",
         "update, show and remove an agent's memory",
         "An agent with the memory capability keeps, inside its workspace, the conversation of "
         "each run (sessions/) and memory generated from them (memories/); -a AGENT_FILE takes "
         "the folders from the agent's memory capability (its 'layout'), else the defaults.",
         help_only, STATUS_COMMON, "run", 0},
        {"memory update", NULL,
         "sbx memory update [-a AGENT_FILE] [-m MODEL] [--base-url URL]\n"
         "                  [--api responses|chat] SANDBOX_ID",
         "generate memory in a running sandbox",
         "Generates memory in a running sandbox from its new rollouts (what 'sbx run' does "
         "after the answer unless --no-memory-update); progress on stderr.",
         mem_update_opts, STATUS_COMMON, "memory run", 0},
        {"memory show", NULL, "sbx memory show [-a AGENT_FILE] WORKSPACE_DIR|SNAPSHOT",
         "print an agent's memory",
         "Prints memory_summary.md and MEMORY.md and counts the rollouts of a workspace "
         "directory or a snapshot (a file or a reference in the snapshot store).",
         mem_agent_opts, STATUS_COMMON, "memory", 0},
        {"memory rm", NULL, "sbx memory rm [-a AGENT_FILE] WORKSPACE_DIR|SNAPSHOT",
         "remove an agent's memory",
         "Removes the memory and rollout folders from a workspace directory; for a snapshot, "
         "stores a copy without them and prints its reference.",
         mem_agent_opts, STATUS_COMMON, "memory", 0},
        {"node", NULL, "sbx node <command> [options]", "the certificates of an sbx-node deployment",
         "sbx-node daemons serve the local provider of their hosts to harnesses over mutual TLS. "
         "A deployment has one private CA; each node and each harness gets a certificate "
         "from it (docs/internals/node.md).",
         help_only, STATUS_COMMON, "node-ca node-cert", 0},
        {"node ca", NULL, "sbx node ca init [--name NAME] [--days N] DIR",
         "make a deployment's private CA",
         "Makes DIR (0700) when missing and writes DIR/ca.pem, the CA certificate, and "
         "DIR/ca.key (0600), its ECDSA P-256 key. An existing CA is never replaced. Prints the "
         "paths, the certificate's SHA-256 and its public key's pin.",
         node_ca_opts, STATUS_COMMON, "node-cert", CLI_HELP_ANYWHERE},
        {"node cert", NULL,
         "sbx node cert issue NAME --ca DIR --node [--host HOST]... [--days N] [--out DIR]\n"
         "sbx node cert issue NAME --ca DIR --harness [--days N] [--out DIR]",
         "issue a node's or a harness's certificate",
         "Writes NAME.pem and NAME.key (0600) signed by the CA in DIR: a node's certificate "
         "(server authentication, named NAME and each --host) or a harness's (client "
         "authentication). Existing files are never replaced. Prints the paths, the "
         "certificate's SHA-256 (what a node's revocation list names) and its public key's pin "
         "(sha256//BASE64).",
         node_cert_opts, STATUS_COMMON, "node-ca", CLI_HELP_ANYWHERE},

        {"run", NULL,
         "sbx run [-a AGENT_FILE] [-m MODEL] [--base-url URL] [--api responses|chat]\n"
         "        [--max-turns N] [--json] [--record FILE] [--no-stream]\n"
         "        [--timeout DURATION] [--deadline DURATION] [--retries N]\n"
         "        [--use-previous-response-id] [--color auto|always|never]\n"
         "        [--manifest FILE | --session ID | --session-state FILE]\n"
         "        [--snapshot FILE|REF] [--snapshot-out FILE|store] [--store URL]\n"
         "        [--keep] [--share] [--conversation NAME] [PROMPT | -]\n"
         "        [--pass-secret NAME]... [--state FILE] [--no-memory-update] [--port N]...\n"
         "        [--allow-host-tools]\n"
         "        [--provider NAME] [-o KEY=VALUE]... [provider options]\n"
         "        [--trace FILE] [--trace-otlp URL] [--trace-parent TRACEPARENT]\n"
         "        [--trace-content] [--trace-openai] [--workflow NAME] [--group-id ID]\n"
         "        [--trace-metadata KEY=VALUE]... [--var NAME=VALUE]...\n"
         "        [--var-secret NAME=env:VARIABLE]... [--vars-file FILE]\n"
         "        [--approve TOOL]... [--approve-always TOOL]... [--reject-always TOOL\n"
         "        [--reason TEXT]]... [--approve-all]\n"
         "sbx run --resume FILE -a AGENT_FILE [--approve CALL_ID|all]... [--reject CALL_ID\n"
         "        [--reason TEXT]]... [--allow-agent-change] [options]",
         "run an agent against a model",
         "Runs an agent on PROMPT (or standard input with '-') and prints the final output. "
         "Progress goes to stderr; on a terminal also the id of each sandbox the run has (so "
         "'sbx sandbox shell ID' can look inside while the agent works) and a status line "
         "while the model has not begun to answer or a tool runs. --json writes one event per "
         "line to stdout instead (a 'sandbox' event with the id, 'tool_start' as a call "
         "begins). Where stdout and stderr are one terminal, pipe or file, the streamed answer "
         "is not printed again. MODEL "
         "'replay:FILE' answers from a recording made with --record. "
         "--use-previous-response-id sends only new items and lets the server keep the rest.\n\n"
         "A model call gives up when no answer starts within 60 s of a streamed request, when a "
         "stream stalls for 5 min, after --timeout per attempt (default 10 min) and after "
         "--deadline for all its attempts together (default 15 min).\n\n"
         "--conversation NAME continues a stored conversation: its items go before PROMPT and "
         "the run's items are added after every turn ('sbx conversation' lists them).\n\n"
         "Sandbox agents (agent files with manifest / capabilities) run in a fresh local sandbox "
         "made from their manifest, removed at the end; --manifest FILE replaces the manifest, "
         "--session ID runs in an existing sandbox instead (left running), --session-state FILE "
         "resumes the sandbox a state file from 'sbx sandbox state' describes (the run's own "
         "then: removed at the end unless --keep), --keep leaves the sandboxes the run created "
         "or resumed running and prints their ids on stderr, --share gives every sandbox agent "
         "of the run (handoffs) one sandbox instead of one each. --snapshot FILE|REF starts "
         "fresh sandboxes from a snapshot (a file, or a reference in the snapshot store) with "
         "the manifest's ephemeral entries on top; --snapshot-out store|FILE snapshots every "
         "sandbox the run used at its end, before any is removed, into the store (FILE: and "
         "exports the first to FILE), printing 'snapshot sha256:... (agent 'NAME', sandbox ID)' "
         "on stderr for each.\n\n"
         "The sandboxes are isolated (no network) unless told otherwise; their provider and its "
         "options are those of 'sbx sandbox create' (or the agent file's sandbox: section, "
         "which they override; a --provider other than the file's leaves the section out). "
         "--pass-secret OPENAI_API_KEY "
         "lets a manifest's {type: secret, env: OPENAI_API_KEY} read the model's key (refused "
         "otherwise).\n\n"
         "Agent files may define their own tools (docs/guide.md, 'Your own tools'): a command in "
         "the sandbox, an HTTP endpoint, or a command on the host. Host commands run with your "
         "rights and no sandbox: a run refuses them unless --allow-host-tools is given, and "
         "then names each on stderr. Guardrails (input_guardrails, output_guardrails, a tool's "
         "tool_input_guardrails and tool_output_guardrails) and hooks (hooks: on run_start, "
         "run_end, agent_start, agent_end, tool_start, tool_end, handoff) are commands or "
         "agents the file names (docs/guide.md, 'Guardrails' and 'Hooks'); a tool_start hook "
         "may deny a call, and the model reads its reason.\n\n"
         "Approvals: a tool call that needs approval (needs_approval in the agent file) is "
         "asked about on a terminal: the tool, its arguments (long ones shortened; [v] shows "
         "them all) and [y]es / [n]o (with a reason the model reads) / [a]lways for this tool "
         "in this run / [s]top and save; the run goes on in the same process. Elsewhere, or "
         "after [s], the run stops with status 4 listing the pending calls; the calls of the "
         "turn that need no approval have run. --approve-always TOOL and --reject-always TOOL "
         "answer every call of TOOL that needs approval, --approve-all every call; the agent "
         "file's rules stay the default. A rejected call's tool never runs; the model reads "
         "--reason verbatim, else 'Tool execution was not approved.'.\n\n"
         "--state FILE saves the run's state to FILE after every turn (a new file) and keeps its "
         "sandboxes until it completes; a run that may stop for approval without --state saves "
         "to a new file under $XDG_STATE_HOME/sbx/runs and says where. --resume FILE continues "
         "it: the agent file comes from -a (on a terminal sbx may ask to use the one the state "
         "names; never otherwise), the model as saved unless given; --approve CALL_ID runs that "
         "pending call, --reject CALL_ID refuses it. A decision answers the call it names, with "
         "the arguments listed, once; decisions written into a state file answer nothing, and "
         "'always' decisions are taken from it only when sealed with this user's run-state key. "
         "A run that failed, was cancelled or killed continues from its last checkpoint, "
         "repeating at most the turn that was in flight. 'sbx state show FILE' summarises a "
         "state.\n\n"
         "Agents with the memory capability generate memory after the answer is printed "
         "(progress on stderr) in sandboxes that outlive the run (--keep, --session), or, "
         "with --snapshot-out, before the sandbox is removed and then into a new snapshot; "
         "--no-memory-update skips that ('sbx memory update ID' does it later).\n\n"
         "--port N prints the host URL of port N of the run's sandboxes (on stderr, or as a "
         "'port' event with --json) as soon as something listens there, e.g. a preview server "
         "the agent started.\n\n"
         "--trace FILE writes the run's spans (run, agent, turn, model call, tool call, handoff, "
         "sandbox operations) to FILE as JSON lines ('sbx trace show FILE' prints the tree); "
         "--trace-otlp URL sends them to an OpenTelemetry collector, --trace-openai to the OpenAI "
         "traces dashboard (with OPENAI_API_KEY); the model server gets a "
         "traceparent header. Prompts, tool arguments and outputs are recorded only with "
         "--trace-content. Spans a collector could not take are dropped and counted on stderr; "
         "the run goes on. --workflow NAME, --group-id ID and --trace-metadata KEY=VALUE name "
         "the run in its trace (the run span's sbx.workflow.name, sbx.trace.group_id and "
         "sbx.trace.metadata.KEY; the OpenAI trace's workflow_name, group_id and metadata).\n\n"
         "Variables: an agent's instructions are a template, {{NAME}} standing for the value of "
         "variable NAME ('\\{{' for a literal '{{'), and so are its stored prompt's variables "
         "(the agent file's prompt: {id, version, variables}, sent to the Responses API). Values "
         "come from --var and --var-secret, then --vars-file, then SBX_VAR_NAME in the "
         "environment, then the saved run (--resume); a variable a template uses that nobody "
         "gives stops the run before it starts, a value no template uses is warned of. Values "
         "are put in as they are, never read as templates again.\n\n"
         "Environment: OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_ORG_ID and OPENAI_PROJECT_ID "
         "(sent as the OpenAI-Organization and OpenAI-Project headers), SBX_MODEL (default "
         "model name), NO_COLOR, "
         "OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TIMEOUT (ms), TRACEPARENT, "
         "SBX_TRACE_OPENAI_URL, SBX_VAR_NAME (variables).\n\n"
         "A sandbox the run created without --keep is removed however the run ends (also when "
         "sbx itself is killed).",
         run_opts,
         "0 done, 1 error, 2 usage, 3 max turns exceeded, 4 waiting for approval, 5 an input "
         "guardrail tripped (the run's input, or a tool's arguments), 6 an output guardrail "
         "tripped (the final output, or a tool's output), 128+N when signal N ended the run (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP, 141 when stdout's reader "
         "is gone).",
         "sandbox conversation state memory snapshot trace", 0},

        {"sandbox", NULL, "sbx sandbox <command> [options]", "create and use sandboxes",
         "Sandboxes with Docker's habits: create one, run commands in it, copy files in and "
         "out, snapshot, stop, start and remove it. A provider makes them: local (a supervisor "
         "on this host, the default) or another one chosen with --provider ('sbx sandbox "
         "providers' lists them); the commands that take an id find the sandbox whichever "
         "provider has it.",
         help_only, STATUS_COMMON, "run snapshot", 0},
        {"sandbox create", NULL,
         "sbx sandbox create [--manifest FILE] [--snapshot FILE|REF [--store URL]]\n"
         "                   [--workspace DIR [--workspace-existing keep|overwrite]]\n"
         "                   [--name NAME] [--label KEY=VALUE]... [--json] [--pass-secret NAME]...\n"
         "                   [--provider NAME] [-o KEY=VALUE]... [provider options]",
         "create a sandbox and print its id",
         "Creates a sandbox and prints its id (--json: its state). --name gives it a name, "
         "unique among your sandboxes, that every command given an id takes too (ps shows it "
         "in the NAME column); --label KEY=VALUE labels it (ps --filter label=KEY=VALUE). "
         "--workspace: a directory of "
         "this host to use as the workspace (providers whose workspaces are on this host); a "
         "directory that holds anything is refused unless --workspace-existing says what to do "
         "with it: keep (its files stay; a manifest entry that would replace one fails, naming "
         "it, and leaves the directory as it was) or overwrite (the manifest's entries replace "
         "the files they name; the rest stays); "
         "--pass-secret OPENAI_API_KEY lets the manifest read it; --snapshot: start from a "
         "snapshot (an archive or a store reference), then apply the manifest's ephemeral "
         "entries.\n\n"
         "The provider (--provider, default local) takes its own options: each is a flag below, "
         "labelled with the providers that declare it, or -o KEY=VALUE; a flag of another "
         "provider is refused naming whose it is. 'sbx sandbox providers' lists every provider "
         "with its traits and options. The local provider's sandboxes are isolated with no "
         "network unless told otherwise; allow:a.org,*.b.org lets HTTP(S) to those names "
         "through a proxy (ports 80, 443 or --allow-port); grants of /proc /sys /dev /run or of "
         "trees with unix sockets are refused unless --allow-dangerous-grant PATH; --disk is "
         "the workspace size limit (default 8G; enforced for root). --provider docker makes "
         "the sandbox a container of a Docker engine (or podman's Docker-compatible service) "
         "from an image it already has (sbx never pulls); its ports resolve through a relay on "
         "127.0.0.1.",
         create_opts, STATUS_COMMON, "sandbox run manifest", CLI_HELP_ANYWHERE},
        {"sandbox exec", NULL,
         "sbx sandbox exec [-t] [-i] [--cwd DIR] [--env KEY=VALUE]... [--user NAME]\n"
         "                 [--timeout SECONDS] [--max-output BYTES] [--keep-background]\n"
         "                 [locator options] ID -- CMD...",
         "run a command in a sandbox",
         "Runs a command; exits with its status. What it leaves running dies with it unless "
         "--keep-background (then at rm). -t runs it on a terminal, -i forwards standard "
         "input; -it wants a terminal to read (a pipe is refused: 'the input device is not a "
         "TTY', as docker says; -i alone forwards a pipe).",
         exec_opts,
         "the command's status; 128+N for signal N; 124 timed out, 125 sbx failed (usage, no "
         "such sandbox, gone, bad --cwd or --user), 126 cannot run, 127 not found.",
         "sandbox-shell sandbox", 0},
        {"sandbox shell", NULL, "sbx sandbox shell [--shell PATH] [locator options] ID",
         "an interactive shell on a terminal",
         "Runs the sandbox's best shell on a terminal: bash when it has one (line editing, "
         "history), else /bin/sh; --shell PATH runs that one instead. Needs a terminal: without "
         "one it says 'the input device is not a TTY' (use 'exec -i' to feed commands from a "
         "pipe).",
         shell_opts, "the shell's status; 125 sbx failed.", "sandbox-exec", CLI_HELP_ANYWHERE},
        {"sandbox cp", NULL, "sbx sandbox cp [-r] [locator options] SRC DST",
         "copy files and directories in or out",
         "Copies a file or a directory; ID:PATH (or NAME:PATH) names a path in a sandbox, "
         "exactly one of SRC and DST is one. A directory is copied whole, with or without -r "
         "(as docker cp): into DST when it is an existing directory (keeping the source's "
         "name), else as DST. Permission bits are kept, never setuid or setgid; files keep "
         "their holes; a symlink is copied only when it stays inside the copied directory "
         "(others are left out with a warning) and nothing is followed. '-' is standard input "
         "or output (a file's bytes).",
         cp_opts, STATUS_COMMON, "sandbox", 0},
        {"sandbox ps", "ls",
         "sbx sandbox ps [--all] [-q] [--format FORMAT] [--filter KEY=VALUE]... [--json]\n"
         "               [--provider NAME] [locator options]",
         "list sandboxes",
         "Lists live and stopped sandboxes (--all: also dead, suspended and half-created ones, "
         "with what they left) with their STATUS and NAME, each once with its provider "
         "(PROVIDER column): those of every "
         "provider that finds its sandboxes here unconfigured (local; docker when an engine is "
         "configured), and those sbx recorded when it made them with another provider or "
         "options (a server that does not answer is a warning). 'sbx sandbox ls' is the "
         "same.",
         ps_opts, STATUS_COMMON, "sandbox-prune sandbox", CLI_HELP_ANYWHERE},
        {"sandbox snapshot", NULL, "sbx sandbox snapshot ID [FILE] [--store URL]",
         "snapshot a workspace",
         "Snapshots the workspace into the store (incremental) and prints its reference; with "
         "FILE also exports it there (tar + zstd); with --store URL also pushes it to that "
         "remote store (only the files the bucket lacks).",
         snap_push_opts, STATUS_COMMON, "snapshot sandbox-stop", 0},
        {"sandbox stop", NULL, "sbx sandbox stop [locator options] ID...",
         "snapshot, then end a sandbox",
         "Snapshots, then ends the sandbox: nothing runs, only the snapshot and its state are "
         "kept.",
         by_id_opts, STATUS_COMMON, "sandbox-start sandbox-rm", 0},
        {"sandbox start", NULL,
         "sbx sandbox start [--pass-secret NAME]... [--manifest FILE] [locator options] ID",
         "bring a stopped sandbox back",
         "Brings a stopped sandbox back: same id, content, manifest, options and limits; "
         "--manifest: the manifest it was made from, whose ephemeral variables and mount "
         "credentials (never saved) are set again.",
         start_opts, STATUS_COMMON, "sandbox-stop", CLI_HELP_ANYWHERE},
        {"sandbox state", NULL, "sbx sandbox state [--no-snapshot] ID",
         "print a sandbox's session state",
         "Prints its session state (JSON) after a snapshot, so that it can be rebuilt "
         "(--no-snapshot: as it is).",
         sbstate_opts, STATUS_COMMON, "sandbox-resume run", 0},
        {"sandbox resume", NULL,
         "sbx sandbox resume [--pass-secret NAME]... [--manifest FILE]\n"
         "                   [-o KEY=VALUE]... [provider options] FILE",
         "reconnect to or rebuild the sandbox of a saved state",
         "An Agents SDK SandboxSessionState (unix_local or docker) is made again as a local "
         "sandbox from its manifest and the workspace of its local snapshot. "
         "Reconnects to the sandbox of a saved state (- for stdin) if it runs, else rebuilds it "
         "from its snapshot; prints the id. The options are those of the state's provider, the "
         "trusted configuration a state cannot grant by itself: host path grants are never "
         "taken from a state, and a state may narrow what these options give, never widen it: "
         "no isolation, more network, higher limits or no disk limit, port forwards on an "
         "address or more ports only when accepted with the same options (--isolation none, "
         "--network ..., --allow-port, --memory, --pids, --cpus, --disk, --port-bind, --port); "
         "--manifest as for start.",
         resume_opts, STATUS_COMMON, "sandbox-state sandbox-start", CLI_HELP_ANYWHERE},
        {"sandbox providers", NULL, "sbx sandbox providers [--json] [NAME]",
         "list the providers, their traits and options",
         "Prints every provider sbx has (or NAME): its summary, its traits (what it can do: "
         "mounts, snapshots, a terminal, ...) and its options, each with its key (-o KEY=VALUE "
         "and an agent file's sandbox: section), its flag, and whether it is a list, required, "
         "for the command line only (host paths, weaker isolation) or a locator (what reaches "
         "its sandboxes again).",
         providers_opts, STATUS_COMMON, "sandbox-create run", CLI_HELP_ANYWHERE},
        {"sandbox port", NULL, "sbx sandbox port [--unix] [locator options] ID PORT",
         "the host URL of a sandbox port",
         "Prints the host URL of a port a service listens on (on 127.0.0.1, reachable by every "
         "local user); --unix: the path of a unix socket only you can reach, forwarding to it "
         "(curl --unix-socket PATH http://x/).",
         port_opts, STATUS_COMMON, "sandbox-create", 0},
        {"sandbox rm", NULL,
         "sbx sandbox rm [-f] [--keep-workspace] [locator options] ID...\n"
         "sbx sandbox rm --all [-y] [--keep-workspace]",
         "remove sandboxes",
         "Stops sandboxes and removes their workspaces (a running one is stopped first, as "
         "with docker's -f; a sandbox that does not answer is killed; a stopped one's record "
         "goes and its snapshot is no longer held). --all removes every sandbox 'ps --all' "
         "lists: on a terminal it lists them and asks, elsewhere it wants --yes.",
         rm_opts, STATUS_COMMON, "sandbox-prune sandbox-stop", CLI_HELP_ANYWHERE},
        {"sandbox stats", NULL,
         "sbx sandbox stats [--no-stream] [--watch] [--json] [locator options] [ID...]",
         "what sandboxes use: CPU, memory, processes, disk",
         "Prints what each sandbox uses (every live one when no ID is given): CPU % (100% is "
         "one CPU busy, over the last second), memory and its limit, processes and their limit, "
         "and the bytes its workspace's files take with the disk limit (> when the walk stopped "
         "at a million entries). Refreshed every second like docker stats, until interrupted or "
         "every sandbox is gone; --no-stream prints one reading. Values a provider cannot "
         "measure show as --; a provider without the stats trait ('sbx sandbox providers') "
         "says so.",
         stats_opts, STATUS_COMMON, "sandbox-logs sandbox-inspect sandbox-ps", CLI_HELP_ANYWHERE},
        {"sandbox logs", NULL, "sbx sandbox logs [-f] [--tail N] [locator options] ID",
         "print a sandbox's log",
         "Prints the sandbox's own log: for the local provider, its supervisor's (start-up, "
         "limits, mounts, what went wrong). -f keeps printing what is added until the sandbox "
         "is removed or stopped (or Ctrl-C). Control characters are escaped on a terminal.",
         logs_opts, STATUS_COMMON, "sandbox-stats sandbox-inspect", CLI_HELP_ANYWHERE},
        {"sandbox inspect", NULL, "sbx sandbox inspect [locator options] ID...",
         "everything known of sandboxes, as JSON",
         "Prints a JSON array with one object per sandbox: what 'ps --all --json' says of it "
         "(status, name, labels, limits, leftovers), its session state's other fields, the whole "
         "session state under session_state, and sbx's record of it under record.",
         by_id_opts, STATUS_COMMON, "sandbox-state sandbox-ps", CLI_HELP_ANYWHERE},
        {"sandbox prune", NULL, "sbx sandbox prune [--keep-workspace] [--json]",
         "remove what dead sandboxes left",
         "Removes what dead sandboxes left (runtime dirs, their workspaces, cgroups); one line "
         "per thing removed.",
         prune_opts, STATUS_COMMON, "sandbox-rm sandbox-ps", CLI_HELP_ANYWHERE},

        {"snapshot", NULL, "sbx snapshot <command> [--store DIR|URL] [options]",
         "list, inspect, remove, collect, export, import, push and pull snapshots",
         "The store is $SBX_SNAPSHOTS, else ${XDG_STATE_HOME:-~/.local/state}/sbx/snapshots; "
         "every subcommand takes --store DIR to use another. REF is sha256:<hex> or a unique "
         "prefix of at least 12 hex digits. A remote store is a URL: s3://BUCKET[/PREFIX], "
         "gs://BUCKET[/PREFIX] or azure://ACCOUNT/CONTAINER[/PREFIX], with ?endpoint=URL for an "
         "S3-compatible server or an emulator, ?region=R, and the credentials by reference: "
         "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN), AZURE_STORAGE_KEY or "
         "AZURE_STORAGE_SAS_TOKEN, or the variables ?key_env=, secret_env=, token_env=, sas_env= "
         "name. push, pull and ls take one.",
         help_only, STATUS_COMMON, "sandbox-snapshot run", 0},
        {"snapshot ls", NULL, "sbx snapshot ls [--json] [--store DIR|URL]", "list snapshots",
         "Lists snapshots: reference, created, files, bytes, holders, label; with a URL those "
         "of that remote store.",
         snap_ls_opts, STATUS_COMMON, "snapshot", CLI_HELP_ANYWHERE},
        {"snapshot push", NULL, "sbx snapshot push [--json] --store URL REF...",
         "copy local snapshots to a remote store",
         "Uploads each snapshot's files the bucket does not have yet, then its tree, then the "
         "header that makes it visible (a push cut short leaves nothing that names a missing "
         "file); prints the reference, and on stderr how many files went up.",
         snap_transfer_opts, STATUS_COMMON, "snapshot-pull snapshot", CLI_HELP_ANYWHERE},
        {"snapshot pull", NULL, "sbx snapshot pull [--json] --store URL REF...",
         "copy snapshots from a remote store into the local one",
         "Downloads each snapshot's files the local store does not have, checks every one "
         "against its digest (a tampered or lost one fails naming it, and the local store stays "
         "as it was), then adds the snapshot; prints the reference.",
         snap_transfer_opts, STATUS_COMMON, "snapshot-push sandbox-create", CLI_HELP_ANYWHERE},
        {"snapshot inspect", NULL, "sbx snapshot inspect [--store DIR] REF",
         "print a snapshot's header", "Prints a snapshot's header as JSON.", snap_store,
         STATUS_COMMON, "snapshot", CLI_HELP_ANYWHERE},
        {"snapshot rm", NULL, "sbx snapshot rm [--force] [--store DIR] REF...", "remove snapshots",
         "Removes snapshots (refused while a stopped sandbox holds one, unless --force) and every "
         "stored file no other snapshot uses.",
         snap_rm_opts, STATUS_COMMON, "snapshot", CLI_HELP_ANYWHERE},
        {"snapshot gc", NULL, "sbx snapshot gc [--json] [--store DIR]",
         "remove stored files no snapshot uses",
         "Removes every stored file no snapshot uses and the temp files of snapshots that did "
         "not finish (a take that fails does this itself when no other snapshot command runs); "
         "prints what it freed.",
         snap_ls_opts, STATUS_COMMON, "snapshot", CLI_HELP_ANYWHERE},
        {"snapshot export", NULL, "sbx snapshot export [--store DIR] REF [FILE|-]",
         "write a snapshot as an archive",
         "Writes a tar archive compressed with zstd (to stdout with '-' or no FILE).", snap_store,
         STATUS_COMMON, "snapshot-import", CLI_HELP_ANYWHERE},
        {"snapshot import", NULL,
         "sbx snapshot import [--store DIR] [--max-entries N] [--max-bytes SIZE]\n"
         "                    [--max-file-bytes SIZE] [--max-ratio N] FILE|-",
         "read an archive into the store",
         "Reads a tar archive (zstd, gzip, xz, bzip2 or none) and prints its reference.",
         snap_import_opts, STATUS_COMMON, "snapshot-export", CLI_HELP_ANYWHERE},
        {"snapshot ls-files", NULL, "sbx snapshot ls-files [--json] [--store DIR] REF [PATH]",
         "list the files of a snapshot",
         "Lists the entries of a snapshot (or those at and below PATH) without restoring it: "
         "mode, size and path, a symlink with its target (--json: path, type, mode, size, "
         "sha256, target).",
         snap_ls_opts, STATUS_COMMON, "snapshot-cat snapshot-diff", CLI_HELP_ANYWHERE},
        {"snapshot cat", NULL, "sbx snapshot cat [--store DIR] REF PATH",
         "print a file of a snapshot",
         "Writes the content of one file of a snapshot to standard output, checked against its "
         "hash as it is read; control characters are escaped when the output is a terminal.",
         snap_store, STATUS_COMMON, "snapshot-ls-files", CLI_HELP_ANYWHERE},
        {"snapshot diff", NULL, "sbx snapshot diff [--json] [--store DIR] REF REF",
         "what changed between two snapshots",
         "Lists what the second snapshot added (A), removed (D) and changed (M: content, mode, "
         "symlink target or type, said in parentheses) against the first, one path a line in "
         "path order with its mode (--json: path, change, old and new entries).",
         snap_ls_opts, STATUS_COMMON, "snapshot-ls-files sandbox-snapshot", CLI_HELP_ANYWHERE},

        {"state", NULL, "sbx state <command> [options]",
         "show and remove the run states 'sbx run --state' saves",
         "Run states are the files 'sbx run --state FILE' saves: the conversation, the pending "
         "tool calls and the sandboxes of a run that can be continued with 'sbx run --resume "
         "FILE'. A file that was edited, damaged or written by a newer sbx is refused.",
         help_only, STATUS_COMMON, "run", 0},
        {"state show", NULL, "sbx state show [--json] FILE", "summarise a run state",
         "Prints a summary: status, agents, turn, usage, the run's workflow, group and trace "
         "metadata and the names of its variables (what a resume takes), pending calls, each "
         "sandbox (live, stopped or gone) and the final output or error (--json: as one JSON "
         "object).",
         json_opts, STATUS_COMMON, "state run", CLI_HELP_ANYWHERE},
        {"state rm", NULL, "sbx state rm FILE", "remove a run state and its sandboxes",
         "Removes the sandboxes the run made and their snapshot holds, then FILE. A sandbox is "
         "the run's only when its own record names the run: one the file names but the run did "
         "not make is left alone, with a warning.",
         help_only, STATUS_COMMON, "state", CLI_HELP_ANYWHERE},
        {"state import", NULL,
         "sbx state import -a AGENT_FILE -o STATE [-m MODEL] [--api API] [--base-url URL] FILE",
         "make an sbx run state of an Agents SDK RunState",
         "Reads the RunState JSON the Agents SDK saved (FILE, - for stdin; the JS SDK's schema "
         "1.22 and earlier, the Python SDK's 1.17 and earlier) and writes STATE, an sbx run state "
         "that 'sbx run --resume STATE -a AGENT_FILE' continues with the agents of AGENT_FILE, "
         "matched by name: the conversation, the current agent, turns, usage and the calls "
         "waiting for approval. The SDK's approval or rejection of every call of a tool becomes "
         "an 'always' decision, sealed with your run-state key; its decisions on single calls "
         "are kept as a log (decide the calls again on resume). A unix-local or docker sandbox "
         "of the SDK's run is made again as an sbx sandbox the state's run owns, its workspace "
         "from the local snapshot the SDK saved. What cannot be carried (a server-side "
         "conversation, an item sbx lacks, a docker container without a snapshot) is refused, "
         "naming the SDK's field. -m, --api and --base-url are saved for the resume.",
         state_import_opts, STATUS_COMMON, "state run", CLI_HELP_ANYWHERE},
        {"state export", NULL, "sbx state export --sdk [-o FILE] STATE",
         "write a run state as the JS Agents SDK's RunState",
         "Writes STATE, a run waiting for approval, as the RunState JSON (schema 1.22) that the "
         "JS Agents SDK's RunState.fromString loads with agents and tools of the same names "
         "(stdout, or -o FILE), with its 'always' decisions (those your run-state key seals) as "
         "the SDK's approval or rejection of every call of the tool. A run with sbx sandboxes, "
         "one that completed, or calls that were running when it stopped are refused, naming "
         "the field.",
         state_export_opts, STATUS_COMMON, "state run", CLI_HELP_ANYWHERE},

        {"trace", NULL, "sbx trace <command> [options]", "show the spans 'sbx run --trace' wrote",
         "Trace files are the JSON lines 'sbx run --trace FILE' writes, one span each "
         "(docs/internals/tracing.md).",
         help_only, STATUS_COMMON, "run", 0},
        {"trace show", NULL, "sbx trace show FILE|-\nsbx trace show --follow FILE",
         "print a trace as a tree",
         "Prints the spans of FILE (- for standard input) as a tree in start order with their "
         "durations, token counts, exit codes and errors, then the totals. Lines that are not "
         "spans are reported on stderr with their line numbers (status 1); the rest is shown. "
         "--follow (-f): then each span appended to FILE as it arrives, one '+ ' line each, "
         "until the run's own span is there (at once for a finished run's trace).",
         trace_show_opts, STATUS_COMMON, "run", CLI_HELP_ANYWHERE},

        {"version", NULL, "sbx version", "print the version", "Prints 'sbx VERSION'.", help_only,
         "0.", NULL, CLI_HELP_ANYWHERE},
        {NULL},
};

const size_t cli_help_count = SBX_ARRAY_LEN(cli_help_table) - 1;
