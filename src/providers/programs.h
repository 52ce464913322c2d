/* The hidden program entry points that the sbx program serves (a local sandbox's supervisor,
 * the port relay, test drivers), found through the registry: the shared ones of the sandbox
 * layer and each provider's own (struct sbx__provider_def.programs). The CLI's main asks this
 * and includes no provider's header. */
#ifndef SBX_PROVIDERS_PROGRAMS_H
#define SBX_PROVIDERS_PROGRAMS_H

/* When argv[0] is a hidden verb ("__supervise", "__relay", ...): run it with argc and argv
 * (argv[0] the verb), set *status to its exit status and return 1; else return 0. */
int sbx__program_main(int argc, char **argv, int *status);

#endif
