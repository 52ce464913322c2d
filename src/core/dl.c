/* Opening a shared library on first use (src/core/dl.h). */
#include <dlfcn.h>

#include "core/dl.h"

int sbx__dl_load(const char *soname, const char *purpose, const char *const *names, size_t n,
                 void **syms, struct sbx_error *err)
{
    /* RTLD_NOW: a library without one of the functions fails here, with its name, rather than
     * at some later call. RTLD_LOCAL: its symbols serve only the pointers taken here. */
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "cannot load '%s' (needed %s): %s", soname,
                             purpose, why ? why : "unknown error");
    }
    for (size_t i = 0; i < n; i++) {
        dlerror();
        syms[i] = dlsym(h, names[i]);
        if (!syms[i]) {
            sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                          "cannot load '%s' (needed %s): no function '%s'", soname, purpose,
                          names[i]);
            dlclose(h);
            return -SBX_E_UNSUPPORTED;
        }
    }
    return 0;
}
