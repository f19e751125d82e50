/* profile_allreduce.c - ppvm --profile's all-reduce fits (profile.h): the
 * tensor group's all-reduce as the layers make it ("tensor_latency",
 * "tensor_bandwidth", issue 27) and the data-parallel one as ReduceGrads
 * makes it ("allreduce_latency", "allreduce_bandwidth", issue 29). */
#include "profile.h"

/* 21 all-reduces of `bytes` after 3 to warm up: the fastest, or the
 * median. Every member of the group runs the same number, whatever it
 * measures. */
static double timed(pp_allreduce_probe ar, void *ctx, size_t bytes, int median)
{
    enum { WARM = 3, REPS = 21 };
    double t[REPS];
    for (int i = 0; i < WARM + REPS; i++) {
        double x = ar(ctx, bytes);
        if (i >= WARM)
            t[i - WARM] = x;
    }
    if (median)
        return pp_median(t, REPS);
    double best = t[0];
    for (int i = 1; i < REPS; i++)
        best = t[i] < best ? t[i] : best;
    return best;
}

void pp_profile_allreduce_fit(pp_allreduce_probe ar, void *ctx, size_t bytes, int median,
                              double *latency, double *bandwidth)
{
    double small = timed(ar, ctx, 8, median), big = timed(ar, ctx, bytes, median);
    *latency = small;
    /* as pp_profile_link: when load hides the bytes' cost, the whole time
     * counts as transfer (a lower bound, never 0, which means unlimited) */
    *bandwidth = (double)bytes / (big > small ? big - small : big);
}
