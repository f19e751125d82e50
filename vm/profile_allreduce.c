/* profile_allreduce.c - ppvm --profile's all-reduce fits (profile.h): the
 * tensor group's all-reduce as the layers make it ("tensor_latency",
 * "tensor_bandwidth", issue 27) and the data-parallel one as ReduceGrads
 * makes it ("allreduce_latency", "allreduce_bandwidth", issue 29). */
#include "profile.h"

double pp_profile_repeat(pp_allreduce_probe ar, void *ctx, size_t bytes, int warm, int reps,
                         int median)
{
    double t[PP_PROBE_REPS];
    reps = reps < 1 ? 1 : reps > PP_PROBE_REPS ? PP_PROBE_REPS : reps;
    for (int i = 0; i < warm + reps; i++) {
        double x = ar(ctx, bytes);
        if (i >= warm)
            t[i - warm] = x;
    }
    if (median)
        return pp_median(t, (size_t)reps);
    double best = t[0];
    for (int i = 1; i < reps; i++)
        best = t[i] < best ? t[i] : best;
    return best;
}

void pp_profile_allreduce_fit(pp_allreduce_probe ar, void *ctx, size_t bytes, int median,
                              double *latency, double *bandwidth)
{
    /* 21 of each after 3 to warm up; every member of the group runs as many */
    double small = pp_profile_repeat(ar, ctx, 8, 3, 21, median),
           big = pp_profile_repeat(ar, ctx, bytes, 3, 21, median);
    *latency = small;
    /* as pp_profile_link: when load hides the bytes' cost, the whole time
     * counts as transfer (a lower bound, never 0, which means unlimited) */
    *bandwidth = (double)bytes / (big > small ? big - small : big);
}
