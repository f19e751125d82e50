/* costs.h - measured costs from a JSON file (ppc --costs FILE). They
 * override the schedule's `cost` lines, so a schedule simulated once with
 * unit costs can be re-simulated with what ppvm measured.
 *
 *   {
 *     "F": 1.5,                 one number for every stage, or
 *     "B": [3.0, 3.0, 3.1, 3.4] one per stage (exactly S of them),
 *     "W": 1.2,                 only meaningful with `split backward`
 *     "O": [0.4, 0.4, 0.4, 0.9] the optimizer step of a stage, on each owner
 *     "G": [0.1, 0.1, 0.1, 0.2] on a stage's owner, adding one returned gradient
 *                               (RecvWeightGrad's add, after its wait)
 *     "latency": 2e-5,          time per activation/gradient/weight transfer
 *     "bandwidth": 2.5e10,      bytes per time unit; 0 means infinitely fast
 *     "burst": 65536,           bytes the link passes at once before "bandwidth" applies
 *                               (a token bucket of that depth refilled at bandwidth,
 *                               one per sending worker: jobtable.h); 0 (absent): none
 *     "allreduce": "tree",      how a data-parallel all-reduce moves: "ring" (absent: 2
 *                               messages of 1/R) or "tree" (reduce + broadcast, binomial)
 *     "duplex": "half",         "full" (absent: a bucket per sender) or "half" (one per pair
 *                               of workers: the two directions in turn)
 *     "allreduce_latency": 2e-6, a data-parallel all-reduce of n bytes over "allreduce_ranks"
 *     "allreduce_bandwidth": 3e9, ranks takes allreduce_latency + n / allreduce_bandwidth
 *     "allreduce_ranks": 2      (ppvm --profile measures it on the cpu backend: Open MPI's
 *                               shared-memory all-reduce ran at a third of the link's
 *                               rate); over R ranks, scaled as a ring's time (a tree's with
 *                               "allreduce": "tree") scales; the three go together. Without
 *                               them the all-reduce is priced as its messages over the link
 *     "progress": "wait",       "always" (absent: transfers move while their receiver computes,
 *                               as the seed's prefetch thread moves them) or "wait" (they move
 *                               only while their receiver waits: the cpu backend without its
 *                               communication thread; sim.h)
 *     "host_bandwidth": 1e10,   bytes per time unit of offload's device<->host copies
 *     "unit": "s",              what the times are in: "s", "ms", "us" or "ns"
 *     "overlap": 0.6,           an overlapped pair takes max(tF, tB) + 0.6 * min(tF, tB);
 *                               a fraction in [0, 1] (the schedule's `cost overlap` is a percent)
 *     "tensor_latency": 1e-5,   tensor = T: each tensor all-reduce (isa/tensor.h) takes
 *     "tensor_bandwidth": 1e10  tensor_latency + bytes / tensor_bandwidth (0: free)
 *     "cores": 2,               at most 2 jobs compute at once over all workers (ranks
 *                               sharing a machine's cores: sim.h); a whole number >= 1
 *     "job_overhead": 2e-6,     the interpreter's own time per job beside its kernel and
 *                               waits (dispatch, posting transfers, copies): a job's worker
 *                               is free this long after the job ends (sim.h)
 *     "wake": 8e-5,             a job whose worker waited for its input or weights starts
 *                               this long after they arrive (a sleeping rank resuming: sim.h)
 *     "measured": {...}         ppvm --profile's record of the run's steps (vm/profile.h):
 *                               any object, skipped (it is no cost)
 *     "model": "mlp ...",       what the costs were measured on (ppvm --profile writes
 *     "backend": "cpu",         them): the model in words (isa/model_words.h), which a
 *     "ranks_per_core": 2       compile of another model refuses; the backend; ranks per
 *   }                           online core on the measuring node (> 1: ranks shared cores)
 *
 * Every key is optional; a key the file does not give keeps the schedule's
 * value. Times are in seconds, as ppvm --profile writes them, unless "unit"
 * says otherwise; the simulator only adds them up, so the unit matters to
 * what is shown in a time unit: trace.json's microseconds. Job costs must be
 * positive; O, G, latency and bandwidth non-negative; every number finite.
 * O and G, which the schedule has no line for, are 0 where the file does
 * not give them.
 * Unknown keys, duplicate keys and anything that is not this shape are
 * errors that name the file, line and column and say what is wrong. The
 * file is read with jansson: syntax errors, duplicate keys and numbers too
 * large for a double are its messages, at its line and column (those of the
 * last character it read); a value of the wrong shape is reported at its
 * first character. A leading UTF-8 byte order mark is skipped. */
#ifndef PP_COSTS_H
#define PP_COSTS_H

#include <stddef.h>

#define PP_COSTS_O 3    /* dir[PP_COSTS_O]: the optimizer step's cost per stage */
#define PP_COSTS_G 4    /* dir[PP_COSTS_G]: a returned gradient's add per stage */
#define PP_COSTS_DIRS 5 /* F, B, W, O, G */

typedef struct {
    double *dir[PP_COSTS_DIRS]; /* F, B, W, O, G: per-stage costs, or NULL when the file
                                   does not give it */
    int n[PP_COSTS_DIRS];       /* entries of dir[d]: 1 (every stage) or one per stage */
    int has_latency, has_bandwidth, has_overlap, has_cores, has_host_bandwidth;
    int has_tensor_latency, has_tensor_bandwidth;
    double tensor_latency, tensor_bandwidth; /* issue 27: a tensor all-reduce's cost */
    int cores; /* "cores": at most this many jobs compute at once machine-wide (>= 1) */
    double latency, bandwidth, overlap, host_bandwidth;
    const char *unit; /* "s" (no "unit" key), "ms", "us" or "ns"; NULL when nothing was loaded */
    char *model;      /* "model": the model measured on, in words, or NULL */
    char *backend;    /* "backend", or NULL */
    int has_ranks_per_core;
    double ranks_per_core;
    int has_burst;
    double burst;       /* "burst": bytes the link passes at once (token bucket); 0 when absent */
    int allreduce_tree; /* "allreduce": "tree" (1) or "ring" (0, also when absent) */
    int half_duplex;    /* "duplex": "half" (1) or "full" (0, also when absent) */
    /* "allreduce_latency", "allreduce_bandwidth", "allreduce_ranks": all three or none
     * (allreduce_ranks 0) */
    double allreduce_latency, allreduce_bandwidth;
    int allreduce_ranks;
    int recv_waits; /* "progress": "wait" (1) or "always" (0, also when absent) */
    int has_job_overhead;
    double job_overhead; /* "job_overhead": a job's worker is busy this long after it */
    int has_wake;
    double wake; /* "wake": a worker that waited resumes this long after its input is in */
} pp_costs;

/* Microseconds in one `unit` ("s" 1e6, "ms" 1e3, "us" 1, "ns" 1e-3); 0 for
 * NULL or anything else. */
double pp_costs_unit_us(const char *unit);

/* Returns 0 on success; otherwise -1 with a message in err, such as
 * "costs.json:3:8: expected a number or an array of numbers for \"F\", found
 * a string" or "costs.json:2:9: duplicate object key near '\"F\"'" (or
 * "PATH: cannot open: <strerror>"), and *c left all zero.
 * Whether an array has 1 or S entries is for the caller to check. */
int pp_costs_load(pp_costs *c, const char *path, char *err, size_t errlen);
/* The same from text[0..len) already in memory (no NUL needed); `name` is
 * used in messages. */
int pp_costs_parse(pp_costs *c, const char *name, const char *text, size_t len, char *err,
                   size_t errlen);
/* Frees what a successful call allocated and zeroes *c (safe on a zeroed one). */
void pp_costs_free(pp_costs *c);

#endif
