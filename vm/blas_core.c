/* blas_core.c - whether OpenBLAS runs kernels older than this CPU allows
 * (blas_core.h). */
#include "blas_core.h"

#include <cblas.h>
#include <string.h>
#include <strings.h>

/* OpenBLAS's x86 cores without AVX2: a CPU with AVX2 deserves better. */
static int before_avx2(const char *core)
{
    static const char *const old[] = {
        "prescott",  "core2",   "penryn",    "dunnington", "nehalem",   "atom",       "sandybridge",
        "athlon",    "opteron", "barcelona", "bobcat",     "bulldozer", "piledriver", "steamroller",
        "excavator", "nano",    "katmai",    "coppermine", "northwood", "banias"};
    for (size_t i = 0; i < sizeof old / sizeof *old; i++)
        if (!strcasecmp(core, old[i]))
            return 1;
    return 0;
}

const char *pp_blas_better_core(void)
{
#if defined(__x86_64__) || defined(__i386__)
    const char *core = openblas_get_corename();
    if (!core || !before_avx2(core))
        return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

const char *pp_blas_core_name(void)
{
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
}
