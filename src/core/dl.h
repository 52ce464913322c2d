/* Private: shared libraries that libsbx opens on first use instead of linking.
 *
 * libcurl, libarchive, sqlite and libcrypto (with the ~35 libraries they pull in) cost a program
 * most of its start-up in the dynamic loader, and most commands never call them. Each one has a
 * header here (dl-curl.h, dl-archive.h, dl-sqlite.h, dl-crypto.h, dl-yaml.h, dl-seccomp.h) that
 * includes the library's own header and then redirects the functions sbx calls to a table of
 * pointers, so the code that uses them is written as usual; the first function of a module that
 * needs the library calls its sbx__<lib>_load() and reports the error when it cannot be loaded. The
 * libraries are not linked at all: a call that is not in a table fails to link instead of pulling
 * the library back in. docs/internals/core.md, "Libraries loaded on first use". */
#ifndef SBX_CORE_DL_H
#define SBX_CORE_DL_H

#include <stddef.h>

#include "sbx/error.h"

/* Open soname and resolve the n names into syms (one void * each; a function pointer is
 * written through a void ** as POSIX's dlsym describes). Nothing is ever closed: the pointers
 * stay valid for the life of the process. A missing library or symbol is SBX_E_UNSUPPORTED
 * with a message naming the library, what sbx needs it for and the loader's reason. Called
 * once per library, under the library's pthread_once. */
int sbx__dl_load(const char *soname, const char *purpose, const char *const *names, size_t n,
                 void **syms, struct sbx_error *err);

/* The per-library tables are filled from these. */
#define SBX__DL_MEMBER(f) __typeof__(&f) f;
#define SBX__DL_NAME(f)   #f,

#endif
