/* jobtable.h - a checked schedule evaluated at every job: where each job
 * computes, where its stage's weights live, its priority and its cost.
 * This is the whole input of the simulator and the lowering. */
#ifndef PP_JOBTABLE_H
#define PP_JOBTABLE_H

#include <stdint.h>

#include "costs.h"
#include "jobs.h"
#include "schedule.h"
#include "sim.h"

typedef struct {
    pp_jobspace js; /* js.split points at split */
    int W;
    /* [S*B] `split backward when`: 1 where (s,b)'s backward is split; NULL
     * when all or none are (js.ND says which). Ids of W jobs that do not
     * exist (job_exists) have worker/owner of their B, priority 0, cost 0. */
    unsigned char *split;
    /* [S*B] `recompute [when]`: 1 where R(s,b) is a job; NULL when none is
     * (js.recompute points at it). R ids that are not jobs have worker 0. */
    unsigned char *recompute;
    /* [S*B] `offload [when]`: 1 where F(s,b)'s stash goes to host memory
     * until B(s,b) (sim.h's host-copy lane); NULL when none does. Copies
     * take stash bytes / host_bandwidth (`cost host_bandwidth`, --costs
     * "host_bandwidth"; 0: free). */
    unsigned char *offload;
    double host_bandwidth;
    double *hcopy;       /* [S*B] one copy of (s,b)'s stash each way; NULL without offload */
    int *worker;         /* [N] compute(s,b,d) */
    int *owner;          /* [N] weights(s,b,d) */
    long long *priority; /* [N] */
    double *cost;        /* [N] */
    long long *inflight; /* [W] or NULL */
    /* Transfers, from `cost latency/bandwidth` (or --costs): a transfer of n
     * bytes takes latency + n / bandwidth (bandwidth 0: no time for the bytes).
     * With --costs "burst" (issue 29, a link shaped by a token bucket: tc
     * tbf) each sender's link passes `burst` bytes at once and the rest at
     * bandwidth: a transfer inside the step takes latency + max(0, n -
     * burst) / bandwidth (the bucket refilled since the sender's last one:
     * activations are small against the burst and the compute between
     * them); the end of the step's returns and all-reduces, back to back,
     * drain it (report.c, link_bucket.h). 0 (no "burst"): today's model.
     * allreduce_tree (--costs "allreduce": "tree"): a data-parallel
     * all-reduce is a reduce and a broadcast over a binomial tree, 2
     * ceil(log2 R) whole-gradient messages in turn (Open MPI's in-place
     * MPI_Iallreduce, which ppvm's cpu backend uses), not the ring's 2 (R -
     * 1) messages of 1/R. half_duplex (--costs "duplex": "half"): one bucket
     * per pair of workers, which their two directions take in turn. */
    double latency, bandwidth, burst;
    int allreduce_tree, half_duplex;
    /* --costs "allreduce_latency", "allreduce_bandwidth", "allreduce_ranks"
     * (ar_ranks 0: none): a data-parallel all-reduce as ppvm --profile
     * measured one, which pp_allreduce_time prices (report.c and
     * report_link.c alike) */
    double ar_latency, ar_bandwidth;
    int ar_ranks;
    int recv_waits;      /* --costs "progress": "wait" (sim.h) */
    double job_overhead; /* --costs "job_overhead" (sim.h), else 0 */
    double wake;         /* --costs "wake" (sim.h), else 0 */
    /* tensor = T: each tensor all-reduce takes tensor_latency + n /
     * tensor_bandwidth (jobtable.c's tensor_costs, already in cost[]) */
    double tensor_latency, tensor_bandwidth;
    double *
        xfer; /* [N] for job j's input to arrive from its predecessor's worker; 0 on the same one */
    double *fetch; /* [N] to fetch job j's weights from their owner; 0 when it needs no fetch */
    /* [N] or NULL: job j reads the weights its worker fetched for an earlier
     * job of its stage instead of fetching them again (ppc --keep-weights,
     * keep.h); t->fetch[j] still says what a fetch would cost. */
    unsigned char *kept;
    /* [S] bytes of each stage's fp32 weights (pp_stage_weight_bytes): its
     * master weights and, as large, its gradients, whatever the precision;
     * gradient returns and all-reduces move this many. A stage with none (a
     * middle stage of `blocks = 0`) is fetched by no one and returns no
     * gradients. */
    uint64_t *wbytes;
    /* [S] bytes of each stage's compute copy (pp_stage_compute_bytes), the
     * weights jobs read: wbytes with precision fp32, half of it with bf16.
     * A fetch moves this many and a fetched-weights slot holds this many. */
    uint64_t *cbytes;
    /* [S] the optimizer step's cost for stage s on each of its owners
     * (--costs "O"; 0 without: the schedule has no cost line for it). */
    double *opt;
    /* [S] on stage s's owner, adding one gradient a non-owner returned
     * (--costs "G", RecvWeightGrad's add; 0 without) */
    double *gadd;
    /* Overlapped jobs (`overlap F with B when expr`): pairable[j] for a
     * forward j where expr holds ([N], NULL without an overlap line); the
     * pair of a forward and a backward takes max + overlap * min of their
     * costs (`cost overlap = P` as P/100, or --costs "overlap"; default 1:
     * no gain). */
    unsigned char *pairable;
    double overlap;
    int cores; /* --costs "cores": jobs computing at once machine-wide (sim.h); 0: no limit */
} pp_jobtable;

/* Evaluates `split backward when` at every (s,b), then every function at
 * every job (priority and cost of a W only where it exists); reports placements outside
 * [0, W), division by zero and non-positive costs with the (s,b,d) where they
 * happened. `measured` (ppc --costs; may be NULL) overrides the schedule's
 * cost lines. Returns the number of errors. */
int pp_jobtable_build(pp_jobtable *t, const pp_schedule *sch, const pp_costs *measured);
/* Whether a direction the schedule gives no cost for (and --costs does not
 * measure) costs FLOPs-proportionally (each stage's pp_stage_flops, in units
 * of the mean forward) rather than 1: for a gpt, and for any model whose
 * stages' layer counts differ. A uniform mlp keeps the seed's unit costs. */
int pp_jobtable_flops_costs(const pp_model *m, long long S);

/* Bytes that flow into job j from its predecessor: an activation into F, a
 * gradient into B (the stash, if B(S-1,b) runs elsewhere than its F), the
 * split stash into W. 0 for F(0,b), which loads its microbatch. */
uint64_t pp_job_input_bytes(const pp_jobtable *t, const pp_model *m, int j);
/* Whether job j reads weights its worker does not own: it computes away
 * from its stage's owner, it is not a W (a weight gradient reads no
 * weights), and its stage has weights. Such a job fetches them, or reads a
 * kept earlier fetch. */
static inline int pp_job_reads_remote_weights(const pp_jobtable *t, int j)
{
    return t->worker[j] != t->owner[j] && job_d(&t->js, j) != DIR_W &&
           t->wbytes[job_s(&t->js, j)] > 0;
}
/* Whether job j fetches its stage's weights from their owner. */
static inline int pp_job_fetches(const pp_jobtable *t, int j)
{
    return pp_job_reads_remote_weights(t, j) && !(t->kept && t->kept[j]);
}
/* How long a transfer of `bytes` takes: latency + bytes / bandwidth, the
 * burst's bytes free (above). */
static inline double pp_transfer_time(const pp_jobtable *t, uint64_t bytes)
{
    double paid = (double)bytes > t->burst ? (double)bytes - t->burst : 0;
    return t->latency + (t->bandwidth > 0 ? paid / t->bandwidth : 0);
}
/* Whether the link has a shape (a burst, half duplex) that the end of the
 * step prices message by message (report_link.c). */
static inline int pp_link_shaped(const pp_jobtable *t) { return t->burst > 0 || t->half_duplex; }
/* How long a data-parallel all-reduce of `bytes` over R workers takes:
 * the measured one (ar_ranks > 0) scaled from ar_ranks to R as a ring's
 * time scales, 2 (R - 1) / R of the bytes through each worker (a tree's,
 * with allreduce_tree: 2 ceil(log2 R) messages in turn); else the ring's
 * 2 (R - 1) messages of bytes / R over the link. */
double pp_allreduce_time(const pp_jobtable *t, uint64_t bytes, int R);
/* Bytes of stage s's fp32 weights (as many as its gradients). */
uint64_t pp_stage_weight_bytes(const pp_model *m, int S, int s);

/* The simulator's input for this table. */
static inline pp_sim_input pp_jobtable_sim_input(const pp_jobtable *t, int strict)
{
    return (pp_sim_input){t->js,           t->W,     t->worker, t->priority, t->cost,    strict,
                          t->inflight,     t->xfer,  t->fetch,  t->pairable, t->overlap, t->cores,
                          t->offload,      t->hcopy, 0, /* reload_ahead: the caller sets it */
                          t->recv_waits,   0, /* pairs_in_turn: compile.c's replay sets it */
                          t->job_overhead, t->wake};
}
void pp_jobtable_free(pp_jobtable *t);

#endif
