/* costs_backend.c - the warning for a --costs profile of another backend
 * than the one named by ppc --backend (see costs_backend.h). */
#include "costs_backend.h"

#include <string.h>

#include "costs.h"

int pp_backend_known(const char *name) { return !strcmp(name, "cpu") || !strcmp(name, "cuda"); }

int pp_costs_backend_warn(const char *costs_path, const char *backend, FILE *err)
{
    pp_costs c;
    char msg[512];
    if (pp_costs_load(&c, costs_path, msg, sizeof msg))
        return 0;
    int warn = c.backend && strcmp(c.backend, backend) != 0;
    if (warn)
        fprintf(err,
                "ppc: warning: --costs %s was measured on the %s backend, and these plans are "
                "for %s (--backend %s): its job and transfer times are %s's; expected a profile "
                "from ppvm --backend %s --profile\n",
                costs_path, c.backend, backend, backend, c.backend, backend);
    pp_costs_free(&c);
    return warn;
}
