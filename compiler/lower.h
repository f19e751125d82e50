/* lower.h - lowering a simulated schedule to one instruction stream per rank.
 *
 * Each worker's jobs become instructions in its simulated order: a job's
 * inputs are loaded or received right before it, its outputs sent right after
 * it; after the last job come ReduceGrads (stages with several owners, in
 * stage order on every member) and OptimizerStep (owners only).
 * Buffers are assigned to slots by liveness, so the slot table in the plan
 * header is all the VM ever allocates for activations. A send's buffer stays
 * live until the sender's first instruction that the simulation places after
 * the matching receive, so the VM's wait for the send before reusing its
 * slot cannot wait on a receiver that waits on the sender. */
#ifndef PP_LOWER_H
#define PP_LOWER_H

#include "../isa/plan.h"
#include "diag.h"
#include "jobtable.h"
#include "sim.h"

/* Fills plans[0..W) (caller-allocated array, zeroed). Returns the number of
 * errors reported through d. */
int pp_lower(const pp_jobtable *t, const pp_sim_result *sim, const pp_model *m, pp_diag *d,
             pp_plan *plans);

#endif
