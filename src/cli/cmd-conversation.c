/* sbx conversation ls|show|rm: the conversations `sbx run --conversation NAME` keeps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "sbx/conversation.h"
#include "sbx/json.h"
#include "sbx/term.h"

/* Text from a model or a tool: escaped so it cannot drive the terminal, wherever it goes. */
static void put_safe(const char *s)
{
    cli_put_safe(stdout, CLI_SAFE_ALWAYS, s, strlen(s));
}

static void utc(json_int_t t, char *buf, size_t n)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || !strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, n, "%lld", (long long)t);
}

static int cmd_ls(struct sbx_conversation_store *s, int as_json, struct sbx_error *err)
{
    json_t *list = NULL;
    if (sbx_conversation_list(s, &list, err) < 0)
        return cli_fail(err);
    if (as_json) {
        char *out = sbx_json_dumps(list, SBX_JSON_PRETTY);
        cli_put_json(stdout, out);
        putchar('\n');
        free(out);
    } else {
        printf("%-32s %7s  %s\n", "NAME", "ITEMS", "UPDATED");
        size_t i;
        json_t *c;
        json_array_foreach(list, i, c)
        {
            char when[32];
            utc(json_integer_value(json_object_get(c, "updated_at")), when, sizeof(when));
            printf("%-32s %7lld  %s\n", json_string_value(json_object_get(c, "name")),
                   (long long)json_integer_value(json_object_get(c, "items")), when);
        }
    }
    json_decref(list);
    return CLI_OK;
}

/* The text parts of a message's content (a string or an array of parts). */
static void put_content(const json_t *content)
{
    if (json_is_string(content)) {
        put_safe(json_string_value(content));
        return;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        const char *t = json_string_value(json_object_get(part, "text"));
        if (!t)
            t = json_string_value(json_object_get(part, "refusal"));
        if (t)
            put_safe(t);
    }
}

static void show_item(const json_t *it)
{
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!type && role)
        type = "message";
    if (!type)
        type = "item";
    if (strcmp(type, "message") == 0) {
        put_safe(role ? role : "message");
        fputs(": ", stdout);
        put_content(json_object_get(it, "content"));
    } else if (strcmp(type, "function_call") == 0) {
        const char *fn = json_string_value(json_object_get(it, "name"));
        const char *args = json_string_value(json_object_get(it, "arguments"));
        fputs("call ", stdout);
        put_safe(fn ? fn : "?");
        fputs(" ", stdout);
        put_safe(args ? args : "");
    } else if (strstr(type, "_output")) {
        put_safe(type);
        fputs(": ", stdout);
        const json_t *o = json_object_get(it, "output");
        if (json_is_string(o)) {
            put_safe(json_string_value(o));
        } else {
            char *d = sbx_json_dumps(o, SBX_JSON_COMPACT);
            put_safe(d);
            free(d);
        }
    } else {
        put_safe(type);
        char *d = sbx_json_dumps(it, SBX_JSON_COMPACT);
        fputs(" ", stdout);
        put_safe(d);
        free(d);
    }
    fputc('\n', stdout);
}

static int cmd_show(struct sbx_conversation_store *s, const char *name, size_t last, int as_json,
                    struct sbx_error *err)
{
    json_t *items = NULL, *list = NULL;
    if (sbx_conversation_get(s, name, last, &items, err) < 0)
        return cli_fail(err);
    /* An unknown name is an error here, unlike for a run that starts one. */
    int found = json_array_size(items) > 0;
    if (!found && sbx_conversation_list(s, &list, err) == 0) {
        size_t i;
        json_t *c;
        json_array_foreach(list, i, c)
        {
            found |= strcmp(json_string_value(json_object_get(c, "name")), name) == 0;
        }
        json_decref(list);
    }
    if (!found) {
        json_decref(items);
        sbx_error_set(err, SBX_E_NOTFOUND, 0, "no conversation '%s'", name);
        return cli_fail(err);
    }
    if (as_json) {
        char *out = sbx_json_dumps(items, SBX_JSON_PRETTY);
        cli_put_json(stdout, out);
        putchar('\n');
        free(out);
    } else {
        size_t i;
        json_t *it;
        json_array_foreach(items, i, it)
        {
            show_item(it);
        }
    }
    json_decref(items);
    return CLI_OK;
}

int cmd_conversation(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_conversation_store *s = NULL;
    const char *verb = argc > 1 ? argv[1] : NULL, *name = NULL;
    int as_json = 0;
    size_t last = 0;
    if (!verb)
        return cli_usage("conversation ", "missing subcommand (ls, show or rm)");
    int is_ls = strcmp(verb, "ls") == 0, is_show = strcmp(verb, "show") == 0,
        is_rm = strcmp(verb, "rm") == 0;
    if (!is_ls && !is_show && !is_rm)
        return cli_usage("conversation ", "unknown subcommand '%s'", verb);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0 && !is_rm) {
            as_json = 1;
        } else if (strcmp(a, "--last") == 0 && is_show && i + 1 < argc) {
            char *end = NULL;
            long long n = strtoll(argv[++i], &end, 10);
            if (!end || *end || n <= 0 || n > SBX_CONVERSATION_ITEMS_MAX)
                return cli_usage("conversation ", "--last must be a positive integer, not '%s'",
                                 argv[i]);
            last = (size_t)n;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage("conversation ", "invalid option '%s'", a);
        } else if (!name && !is_ls) {
            name = a;
        } else {
            return cli_usage("conversation ", "unexpected argument '%s'", a);
        }
    }
    if (!is_ls && !name)
        return cli_usage("conversation ", "missing conversation name");
    if (name && sbx_conversation_name_check(name, &err) < 0)
        return cli_usage("conversation ", "%s", err.msg);
    if (sbx_conversation_store_open(NULL, &s, &err) < 0)
        return cli_fail(&err);
    int rc;
    if (is_ls)
        rc = cmd_ls(s, as_json, &err);
    else if (is_show)
        rc = cmd_show(s, name, last, as_json, &err);
    else
        rc = sbx_conversation_clear(s, name, &err) < 0 ? cli_fail(&err) : CLI_OK;
    sbx_conversation_store_free(s);
    return rc;
}
