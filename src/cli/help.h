/* sbx CLI: the help table (help-table.c) and what is made from it (help.c): --help of every
 * command and subcommand, `sbx help TOPIC`, man pages and shell completions. */
#ifndef SBX_CLI_HELP_H
#define SBX_CLI_HELP_H

#include <stddef.h>

/* One option: -s, --long ARG. short_name 0 or long_name NULL when it has none; arg NULL for a
 * flag. */
struct cli_help_opt {
    char short_name;
    const char *long_name;
    const char *arg;
    const char *text;
};

/* In a list of options, an entry with one of these as its long name stands for options made
 * from the providers' table (help.c expands it): the options of a new sandbox (--provider,
 * -o/--provider-option, and every provider's flags, each labelled with its provider), or the
 * locator flags of the commands given a sandbox id (--docker-host). */
#define CLI_HELP_PROVIDER_OPTIONS "\001provider-options"
#define CLI_HELP_LOCATOR_OPTIONS  "\001locators"

enum {
    /* The parser takes options anywhere on the line, not only before the first operand. */
    CLI_HELP_ANYWHERE = 1,
};

/* A command ("run"), a subcommand ("sandbox create") or sbx itself (""). A command with
 * subcommands is followed by their entries. */
struct cli_help {
    const char *path;
    const char *alias;    /* another name of the last word, or NULL */
    const char *synopsis; /* one form a line; a line starting with a space continues one */
    const char *summary;
    const char *description;         /* or NULL; "\n\n" starts a paragraph, "\n" breaks a line */
    const struct cli_help_opt *opts; /* ends with an entry of neither name */
    const char *exit_status;
    const char *see_also; /* command paths separated by spaces, a path's words by '-' */
    int flags;
};

extern const struct cli_help cli_help_table[];
extern const size_t cli_help_count;

/* The entry of words[0..n) ("sandbox", "create"), aliases included, or NULL. */
const struct cli_help *cli_help_find(char *const *words, size_t n);
/* What word may have meant: among the subcommands of the entry with this path ("" for sbx's
 * commands), or with option among its long options (word with or without its dashes): one
 * letter off for short words, two for longer ones, or a name word begins. NULL when none. */
const char *cli_help_suggest(const char *path, const char *word, int option);
/* Print h's help to stdout. Returns CLI_OK. */
int cli_help_print(const struct cli_help *h);
/* Print the help of the entry with exactly this path to stdout. Returns CLI_OK. */
int cli_help_print_path(const char *path);
/* Before dispatching argv (argv[0] the verb): when --help or -h stands where the command's
 * parser takes options, print the command's help and return 1 (*rc the exit status); else 0. */
int cli_help_intercept(int argc, char **argv, int *rc);
/* sbx help [TOPIC...]: argv[0] is "help". */
int cli_help_main(int argc, char **argv);
/* Hidden: sbx __gen man DIR | bash | zsh | options. argv[0] is "__gen". */
int cli_help_gen_main(int argc, char **argv);

#endif
