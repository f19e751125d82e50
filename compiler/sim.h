/* sim.h - the schedule simulator: turns placements and priorities into each
 * worker's job order and a timeline.
 *
 * Greedy order (the seed's rule): repeatedly commit, among jobs whose
 * predecessor is done, the one that can start earliest, max(worker free,
 * predecessor done); ties go to the smaller key. Strict order: each worker
 * runs its jobs in increasing key, waiting when the next is not ready.
 * The key of a job is (priority, d, b, chain position) compared in that
 * order: jobs the priority leaves tied run forwards first, then lower
 * microbatch, then the job earlier in its microbatch's chain (forwards by
 * increasing stage, backward jobs by decreasing stage, so a strict order on
 * one worker never waits on itself). With `limit inflight` (greedy only) a worker does not start a
 * forward while it holds that many microbatches' activations (F done, B not
 * yet; with a split backward the W that follows B is not counted).
 *
 * Recompute (jobs.h): a job R(s,b) runs after F(s,b) and before B(s,b),
 * which waits for both B(s+1,b) (or F(S-1,b)) and R(s,b). The strict order
 * places R by its key like any job. The greedy order releases R(s,b) only
 * when B(s,b)'s other input is done, so R runs just before its backward:
 * released with F, it would run in the first idle moment after F and hold
 * its rebuilt stash as long as F's would have been held.
 *
 * Offload (sim_offload.h): a backward whose stash was offloaded also waits
 * for its reload on the worker's host-copy lane, issued where the plan
 * issues it; a greedy run is replayed in the order it found under that
 * rule (pp_simulate), since only then is the plan's order known.
 *
 * Only ids that are jobs (job_exists: with `split backward when`, no W for
 * a backward that is not split) are scheduled and appear in `order`.
 *
 * Transfers: a job is ready xfer[j] after its predecessor ends (its input
 * crossing workers), and not before fetch[j] after its predecessor starts
 * (its weights, fetched by the seed's prefetch thread, which sees the job
 * coming when its predecessor starts; from time 0 for a first forward).
 * With recv_waits (--costs "progress": "wait") transfers move only while
 * their receiver waits, as Open MPI moves a message past its eager limit
 * on the cpu backend without the communication thread (the receiver
 * copies it inside an MPI call): a job also starts no sooner than
 * xfer[j] + fetch[j] after its worker is free. FSDP S=2 B=2's second
 * forward waited 70 us for weights the model had fetched during the first.
 *
 * Overlapped pairs (strict order only; `overlap F with B when EXPR`): in
 * each worker's order, scanning from the front, a job and the one after it
 * form a pair when one is a forward j with pairable[j], the other a B of
 * another microbatch, and neither is already paired (so F1 B0 F2 pairs
 * (F1,B0) and leaves F2 for the B after it); where pairable[j] is 2
 * (`overlap F then B`) the forward pairs only with the B right after it,
 * so B1 F1 B0 pairs (F1,B0), as PyTorch's DualPipeV does. A pair starts when the worker
 * is free and both jobs are ready, and both end together after
 * max(tF, tB) + overlap * min(tF, tB): overlap 1 (the default) is no gain,
 * two computes sharing one device one after the other; 0 hides the shorter
 * job entirely. Transfers never occupy a worker in this model (they only
 * delay their consumer), so they need no extra rule under a pair.
 *
 * Pairs in turn (pairs_in_turn; ppc sets it where overlap is 1): the
 * pair's first job (the earlier in the worker's order, which the plan
 * lists first too: lower_order.c) starts when the worker is free and its own inputs are
 * ready, the second when the first has ended and its inputs are ready;
 * each job's start and end are its own, but both outputs leave at the
 * pair's end (pp_sim_out_time). That is how the cpu backend
 * runs a plan's Overlap pair: the plan posts both jobs' receives before
 * the pair, each job waits for its own input where it reads it, and the
 * sends follow the pair. The plan itself is lowered from the simulation
 * without it (a pair as one unit, one start): lowering sorts a pair's
 * receives before the pair by that start (compile.c, replay.h).
 * 1f1b-overlap S=2 B=8 on 2 cpu ranks predicted 1.28 of its measured step
 * as one unit (worker 1's B waited for the input of the F after it), 0.98
 * in turn. DualPipeV W=2 B=8 ordered by measured costs predicted 0.73-0.82
 * of its step while the plan listed a pair's jobs by stage instead: the
 * cpu backend ran B(0,b) first and waited ~105 us a pair for its input,
 * where the simulation ran F(3,b+2) first.
 *
 * Shared cores (`"cores": C` in ppc --costs, for ranks that outnumber the
 * machine's cores): at most C jobs compute at once machine-wide. A job (or
 * pair) then starts at max(its worker free, its inputs ready, the earliest
 * a core is free) and holds that core to its end; jobs are committed in
 * the order of the time they could start (the strict order's per-worker
 * sequence is kept; among workers, the earliest first, ties to the lower
 * worker), so a core goes to whichever job wants it first. Transfers and
 * waits hold no core. The strict simulation is then O(N (W + log C))
 * rather than linear; greedy stays O(N log N) (its commits already go in
 * start order). The model is exclusive cores: it leaves out time slicing
 * (its jobs' costs, measured while ranks shared cores, carry it) and the
 * late resume of a rank that slept while it waited ("wake" below).
 *
 * The interpreter's own time (`"job_overhead": h` in ppc --costs, which
 * ppvm --profile measures on the cpu backend: its step less its jobs and
 * its waits, per job): a worker is free h after its job (or pair) ends,
 * holding its core meanwhile; the job's output leaves at its end. On
 * 1F1B S=2 B=8 on 2 cpu ranks, 1.5-2.5 us a job, 2-3% of the step.
 *
 * A waiting worker resumes late (`"wake": w` in ppc --costs, which ppvm
 * --profile measures on the cpu backend: how long after its send a
 * receiver that already waited resumes, beyond the link's latency and
 * rate): a job that finds its worker free before its inputs (or its
 * weights, or under "progress": "wait" their transfer) are in starts w
 * after that; a pair's second job likewise after the first. Ranks that
 * share cores sleep while they wait: on 4 ranks of 2 cores 110-290 us
 * (its mean), on 2 ranks with a core each (spinning) about 6.
 *
 * Greedy runs in O(N log N): per-worker heaps, and one global heap of each
 * worker's next candidate, refreshed only for the workers a commit changes. */
#ifndef PP_SIM_H
#define PP_SIM_H

#include "jobs.h"

typedef struct {
    pp_jobspace js;
    int W;
    const int *worker;         /* [N] compute worker of each job */
    const long long *priority; /* [N] */
    const double *cost;        /* [N] duration, > 0 */
    int strict;
    const long long *inflight;     /* [W] limit per worker, or NULL */
    const double *xfer, *fetch;    /* [N] transfer times (see above), or NULL for none */
    const unsigned char *pairable; /* [N] forwards that may pair (strict only), or NULL */
    double overlap;                /* a pair's share of its shorter job, in [0, 1] */
    int cores; /* at most this many jobs (a pair is one) compute at once over all workers;
                  0 (or >= W): no limit (see "Shared cores" above) */
    /* `offload when` (sim_offload.h): [S*B] 1 where (s,b)'s stash goes to
     * host memory between F and B, and hcopy[S*B] each copy's time; NULL
     * without offload */
    const unsigned char *offload;
    const double *hcopy;
    int reload_ahead;    /* the plan's Reloads go this many jobs before B (ppc --prefetch) */
    int recv_waits;      /* transfers move only while their receiver waits (above) */
    int pairs_in_turn;   /* a pair's jobs one after the other, each when ready (above) */
    double job_overhead; /* a worker is free this long after its job (or pair) ends (above) */
    double wake;         /* a job its worker waited for starts this long after it is ready */
} pp_sim_input;

typedef struct {
    double *start, *end; /* [N] */
    int *order;          /* jobs of worker w, in execution order: order[off[w] .. off[w+1]) */
    int *off;            /* [W+1] */
    double makespan;
    /* deadlock (strict order, or an inflight limit no backward can relieve):
     * blocked[w] = the job worker w waits at, or -1 if it finished */
    int deadlock;
    int *blocked; /* [W] */
    int *partner; /* [N] the job's pair partner, or -1; NULL when nothing pairs */
    int npairs;
    int in_turn; /* the input's pairs_in_turn: a pair's jobs have their own start and end */
    /* offload (sim_offload.h): [S*B] each offloaded stash's copy to host
     * and back (rel_start -1 where none), and lane[W] each worker's
     * host-copy lane's end; NULL without offload */
    double *off_start, *off_end, *rel_start, *rel_end, *lane;
    /* the plan's reload order (sim_offload.c): per job the first (s,b)
     * whose Reload goes before it, chained through reload_next, and each
     * (s,b)'s copy state; NULL without offload */
    int *reload_head, *reload_next;
    unsigned char *copied;
    int reload_ahead; /* the input's, for a replay of this order (replay.h) */
} pp_sim_result;

/* When job j's output leaves: its end, or with pairs in turn its pair's
 * end (the plan sends both jobs' outputs after the pair). */
static inline double pp_sim_out_time(const pp_sim_result *r, int j)
{
    int q = r->in_turn && r->partner ? r->partner[j] : -1;
    return q >= 0 && r->end[q] > r->end[j] ? r->end[q] : r->end[j];
}

/* Returns 0 on success, 1 on deadlock (result->blocked says where), -1 out of memory. */
int pp_simulate(const pp_sim_input *in, pp_sim_result *out);
void pp_sim_free(pp_sim_result *r);

#endif
