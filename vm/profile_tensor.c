/* profile_tensor.c - ppvm --profile's tensor link (profile.h, issue 27):
 * the all-reduce within a tensor group timed as the plans make it, for
 * the costs file's "tensor_latency" and "tensor_bandwidth". */
#include "profile.h"

#include <mpi.h>

#include "check.h"

/* The fastest of 21 all-reduces of `bytes` after 3 to warm up: time taken
 * by others sharing a core only adds (pp_profile_link's reason). Every
 * member of the group runs the same number, whatever it measures. */
static double fastest(pp_allreduce_probe ar, void *ctx, size_t bytes)
{
    enum { WARM = 3, REPS = 21 };
    double best = 0;
    for (int i = 0; i < WARM + REPS; i++) {
        double t = ar(ctx, bytes);
        if (i == WARM || (i > WARM && t < best))
            best = t;
    }
    return best;
}

void pp_profile_tensor_link(pp_allreduce_probe ar, void *ctx, size_t bytes, double *latency,
                            double *bandwidth)
{
    double small = fastest(ar, ctx, 8), big = fastest(ar, ctx, bytes);
    *latency = small;
    /* as pp_profile_link: when load hides the bytes' cost, the whole time
     * counts as transfer (a lower bound, never 0, which means unlimited) */
    *bandwidth = (double)bytes / (big > small ? big - small : big);
}
