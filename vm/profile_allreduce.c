/* profile_allreduce.c - ppvm --profile's "allreduce" (profile.h, issue
 * 29): whether the backend's data-parallel all-reduce moves as a ring or as
 * a tree, told apart by timing one against what the measured link predicts
 * for each.
 *
 * Why measure it: Open MPI 4.1's in-place MPI_Iallreduce (the cpu
 * backend's, vm/interp.c op_reduce) is a binomial reduce then broadcast, in
 * which the whole gradient crosses the link twice in turn on 2 ranks; ppc
 * priced a ring, half that, and predicted 0.47 of DDP's measured step over
 * a 200 Mbit/s link. Another MPI, or another version, may choose a ring:
 * the run says which. */
#include "profile.h"

#include <mpi.h>
#include <stdlib.h>

#include "check.h"
#include "link_fit.h"
#include "progress.h"
#include "vm.h"

/* The fastest of 3 after 1 to warm up (the link probe's reason: others
 * sharing a core only add time); every rank runs as many. */
static double fastest(pp_allreduce_probe ar, void *ctx, size_t bytes)
{
    enum { WARM = 1, REPS = 3 };
    double best = 0;
    for (int i = 0; i < WARM + REPS; i++) {
        double t = ar(ctx, bytes);
        if (i == WARM || (i > WARM && t < best))
            best = t;
    }
    return best;
}

int pp_profile_allreduce_kind(pp_allreduce_probe ar, void *ctx, size_t bytes, int R, double latency,
                              double bandwidth, double burst)
{
    /* compiler/report_link.c prices both the same way */
    return pp_allreduce_is_tree(fastest(ar, ctx, bytes), (double)bytes, R, latency, bandwidth,
                                burst);
}

static double allreduce_world(void *ctx, size_t bytes)
{
    double t0 = MPI_Wtime();
    /* in place and through the communication thread, as op_reduce's */
    pp_progress_allreduce(MPI_IN_PLACE, ctx, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
}

int pp_profile_allreduce_mpi(size_t bytes, double latency, double bandwidth, double burst)
{
    int me, size;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size < 2)
        return 0;
    float *buf = calloc(bytes / sizeof(float) + 2, sizeof(float));
    if (!pp_vm_all_ok(buf != NULL, me, "out of memory for --profile's all-reduce probe"))
        return -1;
    int tree =
        pp_profile_allreduce_kind(allreduce_world, buf, bytes, size, latency, bandwidth, burst);
    free(buf);
    return tree;
}
