/* sbx: prompts and variables. An agent's instructions are a template: "{{name}}" stands for
 * the value of the run's variable name, given when the run starts (sbx run: --var, --vars-file,
 * SBX_VAR_<name>). An agent may also name a prompt stored with the model provider: the
 * Responses API's "prompt" object {id, version, variables}, whose variables are filled from
 * the same values. docs/guide.md ("Prompts and variables") is the user's side. */
#ifndef SBX_PROMPT_H
#define SBX_PROMPT_H

#include <jansson.h>

#include "agent.h"
#include "common.h"
#include "error.h"

#define SBX_VAR_NAME_MAX  64                 /* bytes of a variable's name */
#define SBX_VAR_VALUE_MAX ((size_t)64 << 10) /* bytes of one value */
#define SBX_VARS_MAX      256                /* variables of one run */
#define SBX_TEMPLATE_MAX  ((size_t)1 << 20)  /* bytes of a filled template */

/* 1 when name is a variable's name: a letter or '_', then letters, digits and '_', at most
 * SBX_VAR_NAME_MAX bytes. */
SBX_API int sbx_var_name_ok(const char *name);

/* Fill a template. "{{name}}" (blanks allowed inside the braces: "{{ name }}") is replaced by
 * the string vars[name]; "\{{" stands for a literal "{{"; any other "{{" (one not followed by
 * a variable's name and "}}") is text. A value goes in as it is and is never read as a
 * template again, so a value holding "{{x}}" puts those characters in the text. vars: an
 * object of strings (borrowed; NULL: none). used (may be NULL): each name the template uses is
 * set there to true. *out: caller owns (free). Errors: SBX_E_NOTFOUND "variable 'x' is not
 * given" for a name vars lacks (the first one), SBX_E_INVAL for a value that is not a string,
 * SBX_E_TOOBIG when the text would pass SBX_TEMPLATE_MAX bytes. */
SBX_API int sbx_template_fill(const char *text, const json_t *vars, json_t *used, char **out,
                              struct sbx_error *err);

/* The agent's prompt: {"id": text, "version"?: text, "variables"?: {name: value}} as the
 * Responses API takes it, a value being a string, an input item ({"type": "input_text",
 * "text"}, {"type": "input_image", "image_url" | "file_id", "detail"?}, {"type":
 * "input_file", "file_id" | "file_data" | "file_url", "filename"?}) or null (the run's
 * variable of that name). Checked and copied; NULL clears. SBX_E_INVAL naming the field:
 * "prompt: variable 'x': an input item's type must be input_text, input_image or
 * input_file". Sent with each of the agent's model calls on the Responses API; the Chat
 * Completions API has no such field and sbx_model_respond refuses a request with one. */
SBX_API int sbx_agent_set_prompt(struct sbx_agent *a, const json_t *prompt, struct sbx_error *err);
/* Borrowed; NULL when none. */
SBX_API const json_t *sbx_agent_prompt(const struct sbx_agent *a);

/* Fill the agent's instructions (a template, above) and its prompt's variables (string
 * values and input_text texts are templates; a null value takes vars[name]) from vars, in
 * place. used: as for sbx_template_fill. Errors as sbx_template_fill's, prefixed with what
 * used the variable: "agent 'a': instructions: variable 'x' is not given". Nothing changes
 * on failure. */
SBX_API int sbx_agent_fill_variables(struct sbx_agent *a, const json_t *vars, json_t *used,
                                     struct sbx_error *err);

#endif
