/* sbx run on a terminal: the approval prompt for a tool call that needs a person's approval,
 * and the yes/no question a resume asks before it uses the agent file its state names. The
 * answers come from standard input, which is the terminal. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run-state.h"
#include "sbx/json.h"
#include "sbx/runner.h"

#define LINE_MAX_BYTES 4096
#define ARGS_PREVIEW   400

/* One line typed on the terminal (without its newline), at most LINE_MAX_BYTES - 1 bytes (the
 * rest of a longer line is read and dropped). Returns 0, or -1 at the end of input or when a
 * signal interrupted the read (Ctrl-C). */
static int read_line(char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        char c;
        ssize_t r = read(0, &c, 1);
        if (r < 0 && errno == EINTR)
            return -1; /* Ctrl-C: the run's cancel flag is set; stop here */
        if (r <= 0)
            return -1;
        if (c == '\n')
            break;
        if (n + 1 < cap)
            buf[n++] = c;
    }
    buf[n] = '\0';
    return 0;
}

int cli_confirm(const char *question)
{
    char line[LINE_MAX_BYTES];
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "%s [y/N] ", question);
    fflush(stderr);
    if (read_line(line, sizeof(line)) < 0) {
        fputc('\n', stderr);
        return 0;
    }
    return strcmp(line, "y") == 0 || strcmp(line, "yes") == 0;
}

/* The call's arguments, shortened past ARGS_PREVIEW bytes (at a UTF-8 boundary) unless all. */
static void show_args(const struct sbx_approval_request *rq, int all)
{
    char *args = rq->args ? sbx_json_dumps(rq->args, SBX_JSON_COMPACT) : sbx_xstrdup("{}");
    size_t n = strlen(args), shown = n;
    if (!all && n > ARGS_PREVIEW) {
        shown = ARGS_PREVIEW;
        while (shown > 0 && ((unsigned char)args[shown] & 0xC0) == 0x80)
            shown--;
    }
    fputs("  ", stderr);
    cli_put_safe(stderr, CLI_SAFE_ALWAYS, args, shown);
    if (shown < n)
        fprintf(stderr, " ... (%zu more bytes: [v] shows them all)", n - shown);
    fputc('\n', stderr);
    free(args);
}

int cli_approval_prompt(void *data, const struct sbx_approval_request *rq,
                        struct sbx_approval_answer *out, struct sbx_error *err)
{
    struct cli_prompt *p = data;
    char line[LINE_MAX_BYTES];
    (void)err;
    if (p->before)
        p->before(p->before_data);
    cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: agent '%s' asks to run %s (call %s):\n",
                    sbx_agent_name(rq->agent), rq->tool ? rq->tool : "?",
                    rq->call_id ? rq->call_id : "?");
    show_args(rq, 0);
    out->by = "prompt";
    for (;;) {
        fputs("approve? [y]es / [n]o (with a reason) / [a]lways for this tool in this run / "
              "[s]top and save: ",
              stderr);
        fflush(stderr);
        if (read_line(line, sizeof(line)) < 0) {
            fputc('\n', stderr);
            out->decision = SBX_APPROVAL_WAIT;
            out->stop = 1;
            return 0;
        }
        const char *a = line;
        while (*a == ' ')
            a++;
        switch (a[0]) {
        case 'y':
        case 'Y':
            out->decision = SBX_APPROVAL_APPROVE;
            return 0;
        case 'a':
        case 'A':
            out->decision = SBX_APPROVAL_APPROVE;
            out->always = 1;
            return 0;
        case 'n':
        case 'N':
            out->decision = SBX_APPROVAL_REJECT;
            fputs("reason the model reads (Enter for none): ", stderr);
            fflush(stderr);
            if (read_line(line, sizeof(line)) == 0 && line[0])
                out->message = sbx_xstrdup(line);
            return 0;
        case 's':
        case 'S':
            out->decision = SBX_APPROVAL_WAIT;
            out->stop = 1;
            return 0;
        case 'v':
        case 'V':
            show_args(rq, 1);
            continue;
        default:
            fputs("answer y, n, a or s (v shows the whole arguments)\n", stderr);
        }
    }
}
