/* profile_shape.c - ppvm --profile's "allreduce" and "duplex" (profile.h,
 * issue 29): how the link carries what the steps send, told apart by
 * timing it against what the measured latency, bandwidth and burst predict
 * for each shape (link_fit.h); and the cpu backend's data-parallel
 * all-reduce timed whole ("allreduce_latency", "allreduce_bandwidth").
 *
 * Why measure them: Open MPI 4.1's in-place all-reduce over TCP (the cpu
 * backend's, vm/interp.c op_reduce) moved as a binomial reduce then
 * broadcast, in which the whole gradient crosses the link twice in turn on
 * 2 ranks; ppc priced a ring, half that, and predicted 0.47 of DDP's
 * measured step over a 200 Mbit/s link (the all-reduce timed whole now
 * prices it; the shape still scales it to other rank counts). And TCP over tc tbf at 200 Mbit/s moved 2 MiB each way
 * at once in 188-202 ms against 96-110 ms for one way (its
 * acknowledgements queue behind the other direction's data): FSDP, whose
 * fetches and gradient returns cross both ways at once, measured about the
 * sum of both directions' bytes over the rate. Another MPI, version or
 * network may differ: the run says which. */
#include "profile.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "link_fit.h"
#include "progress.h"
#include "vm.h"

/* The median of 5 after 1 to warm up; every rank runs as many. Not the
 * fastest, as the link probe takes: the shapes differ by about 2x, more
 * than load adds, and the two directions of a TCP link over tbf sometimes
 * do go at once (1 exchange in 4 here), which the fastest would pick. */
static double median5(pp_allreduce_probe ar, void *ctx, size_t bytes)
{
    return pp_profile_repeat(ar, ctx, bytes, 1, 5, 1);
}

int pp_profile_allreduce_kind(pp_allreduce_probe ar, void *ctx, size_t bytes, int R, double latency,
                              double bandwidth, double burst)
{
    /* compiler/report_link.c prices both the same way */
    return pp_allreduce_is_tree(median5(ar, ctx, bytes), (double)bytes, R, latency, bandwidth,
                                burst);
}

static double allreduce_world(void *ctx, size_t bytes)
{
    double t0 = MPI_Wtime();
    /* as op_reduce makes it: through the communication thread when one
     * runs, else the blocking MPI_Allreduce */
    pp_progress_allreduce(MPI_IN_PLACE, ctx, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
}

typedef struct {
    char *out, *in;
    int me;
} exchange_ctx;

/* Ranks 0 and 1 send each other `bytes` at once, posted and waited for as
 * a step's transfers are; the time until both of this rank's are done. */
static double exchange(void *ctx, size_t bytes)
{
    const exchange_ctx *x = ctx;
    MPI_Request r[2];
    double t0 = MPI_Wtime();
    mpiCheck(MPI_Irecv(x->in, (int)bytes, MPI_BYTE, 1 - x->me, 2, MPI_COMM_WORLD, &r[0]));
    mpiCheck(MPI_Isend(x->out, (int)bytes, MPI_BYTE, 1 - x->me, 2, MPI_COMM_WORLD, &r[1]));
    pp_progress_complete(&r[1]);
    pp_progress_complete(&r[0]);
    return MPI_Wtime() - t0;
}

/* Ranks 0 and 1: the later of their two medians of exchange, which both
 * return. The exchanges are not made to start together, as a step's
 * transfers are not: so over TCP one direction often goes first, and the
 * two ranks' times differ (at 200 Mbit/s, 2 MiB each way: one rank's
 * median 112 ms, the other's 174-230). Rank 0, which writes the profile,
 * read full duplex from its own median whenever its direction was the
 * early one, 4 runs in 10, though a step that sends both ways waits for
 * both: FSDP then measured 0.60-0.67 of its prediction, against 0.81-0.90
 * when the probe read half. (Exchanges made to start together, by a
 * message between them, all took 87-89 ms both ways: full duplex, which
 * FSDP's steps do not see.) */
static double both_directions(exchange_ctx *x, size_t bytes)
{
    double mine = median5(exchange, x, bytes), peer = 0;
    mpiCheck(MPI_Sendrecv(&mine, 1, MPI_DOUBLE, 1 - x->me, 3, &peer, 1, MPI_DOUBLE, 1 - x->me, 3,
                          MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return mine > peer ? mine : peer;
}

/* Whether every rank runs on this node (Open MPI's shared memory between
 * them). There, without the communication thread, a message past the
 * eager limit (4 KB) moves only inside the receiver's MPI calls, the
 * receiver copying it: "progress": "wait". Between nodes over TCP the
 * eager limit is 64 KB, so an activation moves while its receiver
 * computes (GPipe S=2 B=8 at 200 Mbit/s, priced as waiting: 1.36-1.56 of
 * its measured step, as moving: 1.02); larger messages there do wait,
 * which one flag cannot say, so it stays "always". Collective. */
static int one_node(int size)
{
    MPI_Comm node;
    int n = 0;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_size(node, &n));
    mpiCheck(MPI_Comm_free(&node));
    int here = n == size, all = 0; /* every rank's view, as rank 0 writes it */
    mpiCheck(MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    return all;
}

int pp_profile_link_shape_mpi(size_t bytes, double latency, double bandwidth, double burst)
{
    int me, size, shape = 0;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size < 2)
        return 0;
    exchange_ctx x = {me <= 1 ? malloc(bytes) : NULL, me <= 1 ? calloc(bytes, 1) : NULL, me};
    float *buf = calloc(bytes / 2 / sizeof(float) + 2, sizeof(float));
    if (x.out)
        memset(x.out, 0, bytes);
    if (!pp_vm_all_ok(buf && (me > 1 || (x.out && x.in)), me,
                      "out of memory for --profile's link shape probe")) {
        free(buf);
        free(x.out);
        free(x.in);
        return -1;
    }
    if (me <= 1 &&
        pp_link_half_duplex(both_directions(&x, bytes), (double)bytes, latency, bandwidth, burst))
        shape |= PP_LINK_HALF;
    if (pp_profile_allreduce_kind(allreduce_world, buf, bytes / 2, size, latency, bandwidth, burst))
        shape |= PP_LINK_TREE;
    if (!pp_progress_threaded() && one_node(size)) /* (progress_waits says why) */
        shape |= PP_LINK_WAITS;
    free(buf);
    free(x.out);
    free(x.in);
    return shape;
}

/* The median, not the fastest as the tensor link takes: a step's
 * all-reduce meets what the probe's do (Open MPI's shared-memory
 * all-reduce of 331 KB here: fastest 88-113 us, median 120-130, against
 * the 36 us the link's rate gives a ring), and the steps' F, B and O are
 * medians too. */
int pp_profile_reduce_link_mpi(size_t bytes, double *latency, double *bandwidth)
{
    int me, size;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (size < 2)
        return 0;
    float *buf = calloc(bytes / sizeof(float) + 2, sizeof(float));
    if (!pp_vm_all_ok(buf != NULL, me, "out of memory for --profile's all-reduce probe"))
        return -1;
    pp_profile_allreduce_fit(allreduce_world, buf, bytes, 1, latency, bandwidth);
    free(buf);
    return 1;
}
