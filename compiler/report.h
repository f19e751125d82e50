/* report.h - what a simulated schedule costs, per worker: the seed's Table 1
 * computed mechanically for any schedule, plus the transfers it implies.
 *
 * Counting rules (documented in compiler/README.md):
 *  - act_recv: activations (into a forward) and gradients (into a backward)
 *    that arrive from another worker. Loading a microbatch is not a receive.
 *  - weight_recv: jobs that compute on a worker that does not hold their
 *    stage's weights fetch them, once per job (the seed's formula; fetched
 *    weights are dropped after the job, as ZeRO-3 reshards after use). W
 *    jobs need no weights (the weight gradient is x^T dy). A fetch moves
 *    the stage's compute copy: weight_recv_bytes halves with bf16. With
 *    --keep-weights, jobs that read an earlier fetch instead count in
 *    weight_kept, not here: the counts are what the plan does.
 *  - peak_act: the most microbatches a worker holds between F(s,b) and
 *    B(s,b) at once; peak_act_bytes: the most stash bytes it holds at once,
 *    each stash held from its F's start to the end of the job that last
 *    reads it (B, or W with a split backward). A recomputed (s,b)
 *    (`recompute`) counts from R(s,b)'s start instead: its bytes are F's
 *    stash while F runs, then F's kept input until R ends, then the stash
 *    R rebuilt until B (or W) ends.
 *    An offloaded (s,b) (`offload`) is away from the device from the end
 *    of its offload copy to the start of its reload (sim_offload.h);
 *    host_peak_bytes: the most offloaded stash bytes a worker's host
 *    memory holds at once in the simulation (offload start to reload end).
 *  - weight_store: stages whose weights the worker holds as owner (every
 *    worker that weights(s,.,.) names for a stage holds a copy).
 *  - grad_store_bytes: a gradient accumulator per stage whose backward the
 *    worker computes; opt_store_bytes: optimizer state on owners (none for
 *    SGD; AdamW's two moments, twice the weights). Weights, gradients and
 *    optimizer state are fp32 in every precision.
 *  - copy_store_bytes: with precision bf16, the bf16 copy of the weights
 *    that owners keep for jobs to compute with and fetches to move (half
 *    of weight_store_bytes); 0 with fp32, where jobs read the weights.
 *  - mem_bytes: what the VM allocates for the worker's plan (pp_plan_memory:
 *    every slot, and its own stages' weights, gradients, optimizer state
 *    and bf16 copies), set after lowering; 0 when the schedule was not
 *    lowered. host_bytes: likewise what the VM allocates in host memory
 *    for offloaded stashes (pp_plan_host_memory: the plan's host slots,
 *    each sized for the largest stash it holds). It differs from
 *    host_peak_bytes either way: the plan's Reload goes --prefetch jobs
 *    before B, the simulator's when B's gradient starts to be made, and a
 *    host slot is allocated even where the copies meet (1F1B's last
 *    stage). */
#ifndef PP_REPORT_H
#define PP_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "../isa/model_desc.h"
#include "jobtable.h"
#include "sim.h"

enum { XFER_ACT, XFER_GRAD, XFER_WEIGHT };

typedef struct {
    int kind;     /* XFER_* */
    int src, dst; /* workers */
    int job;      /* the job that consumes it */
    double start, end;
    uint64_t bytes;
} pp_transfer;

typedef struct {
    int jobs;
    double busy;
    long long act_recv, weight_recv, weight_kept, peak_act, weight_store;
    uint64_t act_recv_bytes, weight_recv_bytes, peak_act_bytes, weight_store_bytes;
    uint64_t grad_store_bytes, opt_store_bytes, copy_store_bytes, mem_bytes;
    /* tensor = T (issue 27): the tensor all-reduces each of the worker's T
     * ranks makes in a step, and their bytes (0 when T = 1) */
    long long tensor_allreduces;
    uint64_t tensor_bytes;
    /* offload: host_bytes, the plan's host pool, what ppvm allocates for
     * offloaded stashes (pp_plan_host_memory, set after lowering as
     * mem_bytes is); host_peak_bytes, the most stash bytes the simulation
     * holds in host memory at once */
    uint64_t host_bytes, host_peak_bytes;
} pp_worker_report;

typedef struct {
    int S, B, W, split;
    int nsplit;              /* the (s,b) whose backward is split: S*B with `split backward`,
                 * fewer with `split backward when`, 0 without */
    int nrecompute;          /* R jobs: the (s,b) whose forward is recomputed */
    int noffload;            /* the (s,b) whose stash is offloaded to host memory */
    uint32_t optimizer;      /* pp_optimizer of the model */
    uint32_t precision;      /* pp_precision of the model */
    uint32_t tensor;         /* tensor-parallel ranks per worker (1: none) */
    double makespan, bubble; /* bubble: idle fraction of W * makespan */
    /* The whole step: the makespan, then the step's end as the plan's
     * epilogue runs it (report.c's step_time): gradient returns, the
     * replicas' all-reduces, the owners' optimizer steps. */
    double step;
    /* With a measured link shape (--costs "burst", "duplex", "allreduce"):
     * the shortest step the links sustain, step after step
     * (pp_report_link_sustained), and the step is at least that; its
     * schedule alone, step_schedule. Else both 0. */
    double link_step, step_schedule;
    pp_worker_report *w;    /* [W] */
    pp_worker_report total; /* sums over workers (peaks too: the sum of peaks) */
    pp_transfer *xfer;      /* every transfer, in the order of the jobs they feed */
    int nxfer;
} pp_report;

/* Returns 0, or -1 out of memory. */
int pp_report_build(pp_report *r, const pp_jobtable *t, const pp_sim_result *sim,
                    const pp_model *m);
void pp_report_free(pp_report *r);

/* What the report says about where it came from. */
typedef struct {
    const char *schedule; /* the .pp file */
    const char *params;   /* e.g. "S=4 B=8 W=4" */
    const char *order;    /* "greedy" or "strict" */
    const char *costs;    /* e.g. "cost lines of the schedule" or "--costs prof.json" */
    const char *keep;     /* how --keep-weights chose, e.g. "window 6 jobs"; NULL without it */
    const char *layers;   /* layers = auto(L): the split chosen (pp_auto_describe); else NULL */
} pp_report_info;

/* DIR/report.txt: the summary, a per-worker table and the ASCII diagram.
 * DIR/report.json: the same numbers for tools (keys in compiler/README.md), and
 * every worker's jobs in execution order. Return 0, or -1 if writing failed. */
int pp_report_write_txt(FILE *f, const pp_report *r, const pp_report_info *info,
                        const pp_jobtable *t, const pp_sim_result *sim);
int pp_report_write_json(FILE *f, const pp_report *r, const pp_report_info *info,
                         const pp_jobtable *t, const pp_sim_result *sim);
/* Tensor parallelism's part of the report (report_tensor.c), written only
 * when T > 1, so a T = 1 report is what it always was: the per-worker
 * all-reduces (report.txt) and report.json's "tensor" object. */
void pp_report_tensor_build(pp_report *r, const pp_jobtable *t, const pp_model *m);
/* One message of `bytes` from worker `from` to `to`, ready to leave at
 * `ready`: when it has arrived (a shaped link's, report_link.c). */
typedef double (*pp_return_link)(void *link, const pp_jobtable *t, int from, int to, double ready,
                                 double bytes);
/* report_returns.c: the step's gradient returns (a worker's accumulated
 * weight gradients of a stage it does not own, to the owner, who adds
 * them: "G"), in the order and from the places the plans have them; at[w]
 * (each worker's last job's end on entry) becomes when worker w is done
 * with them. `send` prices a message (NULL: latency + bytes / bandwidth).
 * 0, or -1 out of memory. */
int pp_report_returns(const pp_jobtable *t, const pp_sim_result *sim, double *at,
                      pp_return_link send, void *link);
/* report_link.c (issue 29): the step's gradient returns and all-reduces
 * where t has a burst, half duplex or a tree all-reduce: at[w] from each
 * worker's last job's end (at starts as it), owner[off[s]..off[s+1])
 * being stage s's owners. 0, or -1 out of memory. */
int pp_report_link_end(const pp_jobtable *t, const pp_sim_result *sim, double *at, const int *owner,
                       const int *off);
/* The shortest step the links sustain (report_link.c): the most bytes any
 * worker sends in a step (activations and their gradients, weight
 * fetches, gradient returns, its part of the all-reduces) over the
 * bandwidth. Steps follow each other, so a bucket's burst (link_bucket.h)
 * only lends what the rate repays within the step. 0 without a bandwidth;
 * -1 out of memory. */
double pp_report_link_sustained(const pp_jobtable *t, const pp_model *m, const int *owner,
                                const int *off);
void pp_report_tensor_txt(FILE *f, const pp_report *r, const pp_jobtable *t);
void pp_report_tensor_json(FILE *f, const pp_report *r, const pp_jobtable *t);
/* s as a JSON string literal (jansson's escapes; JSON text is UTF-8, so
 * bytes above 0x7f of a string that is not, as a path may be, are written
 * as '?'); NULL as null. report.json's and ppc --search --json's. */
void pp_json_str(FILE *f, const char *s);
/* "1.5 MiB": bytes for people (buf of at least 16). */
const char *pp_human_bytes(uint64_t bytes, char *buf);

#endif
