/* sbx internal: the JSON Schema subset tools and output schemas use.
 *
 * Validation covers type (one or a list), properties, required, additionalProperties (boolean
 * or schema), items, enum, const, anyOf/oneOf (as anyOf), allOf, minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum, minLength, maxLength, minItems, maxItems and local $ref
 * ("#/$defs/x", "#/definitions/x"). Unknown keywords are ignored, as the spec says. */
#ifndef SBX_AGENT_SCHEMA_H
#define SBX_AGENT_SCHEMA_H

#include <jansson.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* The strict form OpenAI's strict mode expects: every object schema gets
 * additionalProperties:false and all its properties required, recursively (properties, items,
 * anyOf, allOf, $defs, definitions). A present additionalProperties other than false is
 * SBX_E_INVAL. *out: caller owns. */
int sbx__schema_strict(const json_t *schema, json_t **out, struct sbx_error *err);

/* The two forms of a function tool's schema with strict mode on. schema is written as usual:
 * "required" names the mandatory properties (an object without the list has only mandatory
 * ones, as strict mode reads it), others are optional and may carry "default",
 * "minimum", "minLength" and the like. *sent is what goes to the model: every object closed
 * (additionalProperties:false) with all its properties required, the optional ones made
 * nullable (null stands for "not given"), and the keywords strict mode does not take dropped
 * (default, minLength, maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum,
 * multipleOf, minItems, maxItems, pattern, format, title); descriptions keep the facts.
 * *check is what arguments are validated against: the schema as written, closed, with the
 * optional properties also accepting null, so a lenient client that leaves them out and a strict
 * one that sends null both pass. SBX_E_INVAL for a present additionalProperties other than
 * false. Both: caller owns. */
int sbx__schema_tool_strict(const json_t *schema, json_t **sent, json_t **check,
                            struct sbx_error *err);

/* 0 when value matches schema, else SBX_E_INVAL with a message naming the JSON path:
 * "$.items[2].name: expected string, got integer". */
int sbx__schema_validate(const json_t *schema, const json_t *value, struct sbx_error *err);

#endif
