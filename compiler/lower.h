/* lower.h - lowering a simulated schedule to one instruction stream per rank.
 *
 * Each worker's jobs become instructions in its simulated order. Inputs that
 * cross workers are received (and weights computed away from their owner
 * fetched) `prefetch` jobs before their consumer, but never before their
 * producer ends; both sides of every transfer sit at the same point of one
 * global order, so no rank can wait on a rank that waits on it, even when
 * every send blocks until received (see lower.c). A job away from its
 * stage's owner reads the fetched weights (or, marked kept by keep.h, the
 * copy an earlier job of the stage on that rank read) and accumulates its
 * weight gradients in a slot that goes back to the owner when the rank's
 * last job adding to it ends. The step ends with ReduceGrads (stages with
 * several owners, in stage order on every member) and OptimizerStep (owners
 * only).
 * Buffers are assigned to slots by liveness, so the slot table in the plan
 * header is all the VM ever allocates besides its own stages' weights and
 * gradients. */
#ifndef PP_LOWER_H
#define PP_LOWER_H

#include "../isa/plan.h"
#include "diag.h"
#include "jobtable.h"
#include "sim.h"

/* Fills plans[0..W) (caller-allocated array, zeroed). Returns the number of
 * errors reported through d. */
typedef struct {
    int prefetch;       /* hoist receives and fetches this many jobs ahead (ppc --prefetch) */
    uint64_t mem_limit; /* bytes per worker, 0 = none (ppc --mem-limit) */
} pp_lower_opts;

int pp_lower(const pp_jobtable *t, const pp_sim_result *sim, const pp_model *m,
             const pp_lower_opts *opts, pp_diag *d, pp_plan *plans);

/* pp_lower stamps every plan with pp_plans_id (isa/plan.h). */

/* What the VM allocates to run a plan, all at start-up: every slot, the
 * workspace, and the weights, gradients and optimizer state of the stages
 * the rank owns, and with precision bf16 their bf16 compute copies. */
uint64_t pp_plan_memory(const pp_plan *p);
/* Offload's host slots: the bytes ppvm allocates in host memory for plan p
 * beside pp_plan_memory's device figure (0 without offload). */
uint64_t pp_plan_host_memory(const pp_plan *p);

#endif
