/* Hidden program entry points by verb (programs.h): the port relay of the sandbox layer, then
 * every provider's in table order. */
#include <string.h>

#include "providers/programs.h"
#include "sandbox/host/relay.h"
#include "sandbox/provider.h"

/* Shared by providers: the port relay (sandbox/host/relay.h), which sbx-supervisor serves too. */
static const struct sbx__program shared[] = {
        {SBX__RELAY_VERB, sbx__relay_main},
        {NULL, NULL},
};

static const struct sbx__program *find(const struct sbx__program *list, const char *verb)
{
    for (; list && list->verb; list++)
        if (strcmp(list->verb, verb) == 0)
            return list;
    return NULL;
}

int sbx__program_main(int argc, char **argv, int *status)
{
    const struct sbx__program *p = argc > 0 ? find(shared, argv[0]) : NULL;
    for (size_t i = 0; argc > 0 && !p && i < sbx__n_providers; i++)
        p = find(sbx__providers[i]->programs, argv[0]);
    if (!p)
        return 0;
    *status = p->main(argc, argv);
    return 1;
}
