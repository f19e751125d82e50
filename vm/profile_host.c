/* profile_host.c - ppvm --profile's host link (profile.h, issue 26): the
 * copies offload makes between a device slot and a host slot, timed at the
 * size the plan's offloads move, for the costs file's "host_bandwidth". */
#include "profile.h"

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../isa/model_shape.h"
#include "check.h"
#include "vm.h"

size_t pp_profile_host_bytes(const pp_plan *p)
{
    /* this rank's largest host slot: one offload's or reload's copy */
    unsigned long long mine = 0, most = 0;
    uint8_t *host = malloc(p->nslots + 1);
    if (host) { /* without it: no size of its own, the stash below decides */
        pp_plan_host_slots(p, host);
        for (uint32_t k = 0; k < p->nslots; k++)
            if (host[k] && p->slot_bytes[k] > mine)
                mine = p->slot_bytes[k];
        free(host);
    }
    mpiCheck(MPI_Allreduce(&mine, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    if (most == 0) /* a plan without offload: the largest stash is what one would move */
        for (uint32_t s = 0; s < p->S; s++) {
            size_t b = pp_stage_stash_bytes(&p->model, (int)p->S, (int)s);
            most = b > most ? b : most;
        }
    if (most < 8)
        most = 8;
    /* enough to see the bandwidth, small enough to allocate beside the run */
    return most < ((unsigned long long)1 << 28) ? (size_t)most : (size_t)1 << 28;
}

/* The fastest of 21 copies of `bytes` one way after 3 to warm up (the
 * first touches of both buffers): time taken by others sharing a core only
 * adds (pp_profile_link's reason). */
static double fastest(pp_host_copy_probe copy, void *ctx, size_t bytes, int to_host)
{
    enum { WARM = 3, REPS = 21 };
    double best = 0;
    for (int i = 0; i < WARM + REPS; i++) {
        double t = copy(ctx, bytes, to_host);
        if (i == WARM || (i > WARM && t < best))
            best = t;
    }
    return best;
}

/* The simulator prices each copy as bytes / host_bandwidth, with no
 * latency of its own and one figure for both ways, so the figure is the
 * bytes over the mean of the two directions' fastest times at the plan's
 * own size: the copies it prices then take what they took here. A copy
 * faster than the clock resolves counts as 1 ns (0 would mean free). */
void pp_profile_host_link(pp_host_copy_probe copy, void *ctx, size_t bytes, double *bandwidth)
{
    double out = fastest(copy, ctx, bytes, 1), in = fastest(copy, ctx, bytes, 0);
    double t = (out + in) / 2;
    *bandwidth = (double)bytes / (t > 1e-9 ? t : 1e-9);
}

typedef struct {
    char *dev, *host;
} cpu_probe;

/* The cpu backend's Offload and Reload (interp.c's op_host_copy): a
 * memcpy between two buffers of host memory. */
static double copy_cpu(void *ctx, size_t bytes, int to_host)
{
    const cpu_probe *c = ctx;
    double t0 = MPI_Wtime();
    if (to_host)
        memcpy(c->host, c->dev, bytes);
    else
        memcpy(c->dev, c->host, bytes);
    return MPI_Wtime() - t0;
}

int pp_profile_host_link_cpu(int me, size_t bytes, double *bandwidth)
{
    cpu_probe c = {NULL, NULL};
    if (me == 0) {
        c.dev = malloc(bytes);
        c.host = malloc(bytes);
    }
    if (!pp_vm_all_ok(me != 0 || (c.dev && c.host), me,
                      "out of memory for --profile's host-link probe")) {
        free(c.dev);
        free(c.host);
        return -1;
    }
    if (me == 0) {
        memset(c.dev, 1, bytes);
        memset(c.host, 2, bytes);
        pp_profile_host_link(copy_cpu, &c, bytes, bandwidth);
    }
    free(c.dev);
    free(c.host);
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD)); /* the others wait: rank 0 measures alone */
    return 1;
}
