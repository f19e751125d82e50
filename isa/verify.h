/* verify.h - what every plan must satisfy (isa/verify.c, isa/plancheck.c):
 * that a plan whose checksum is right still means what a compile could have
 * produced, per rank and over all ranks. Plain C, no MPI: ppvm's start-up
 * exchange (vm/ppvm.c) gathers the plans to rank 0 and calls
 * pp_verify_world there; the fuzz targets and the tests call both. */
#ifndef PP_VERIFY_H
#define PP_VERIFY_H

#include <stddef.h>

#include "plan.h"

/* Checks a decoded plan against what a backend will do with it: each slot
 * is large enough for the role an instruction gives it, the workspace for
 * each stage the rank runs, and each stage an instruction touches is one
 * this rank holds. 0 or -1 with err. */
int pp_verify_sizes(const pp_plan *p, char *err, size_t errlen);

/* One rank's plan (decoded and validated by pp_plan_decode): sizes and
 * stages (pp_verify_sizes), the buffer dataflow (bufcheck.c),
 * each job at most once, wgrad accumulations zeroed, sent once and never
 * lost, each owned stage optimized once after everything else that touches
 * it, stage roles as the instructions use them. 0, or -1 with one line in
 * err naming the instruction (index and opcode) and what was expected. */
int pp_verify_rank(const pp_plan *p, char *err, size_t errlen);

/* All ranks' plans (plans[r] is rank r's, each passed pp_verify_rank):
 * headers and group tables alike, every stage owned, replicas all-reduced
 * over exactly their owners, every job exactly once over all ranks, every
 * transfer matched on its peer and nothing hangs (commcheck.c),
 * and the plan id equal to pp_plans_id of the plans. 0, or -1 with one line
 * in err naming the rank. */
int pp_verify_world(const pp_plan *plans, int W, char *err, size_t errlen);

#endif
