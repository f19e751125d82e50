/* plans.h - the one gate every plan passes: lowering a simulation into
 * per-worker plans and verifying them.
 *
 * pp_compile (compile.h) lowers through here, and so does every caller that
 * lowers one simulation more than once (--keep-weights' bisection in keep.c,
 * the search's other prefetches, tests). Kept apart from the compile driver
 * so that keep.c, which the driver calls, does not call back into it: the
 * files depend one way (compile.c -> keep.c -> plans.c). */
#ifndef PP_PLANS_H
#define PP_PLANS_H

#include "../isa/plan.h"
#include "diag.h"
#include "jobtable.h"
#include "lower.h"
#include "sim.h"

typedef enum {
    PP_COMPILE_OK = 0,
    PP_COMPILE_ERRORS,   /* the schedule has errors (or deadlocks, or crosses --mem-limit) */
    PP_COMPILE_IO,       /* the source or the --costs file could not be read, or is not JSON */
    PP_COMPILE_NOMEM,    /* out of memory */
    PP_COMPILE_INTERNAL, /* the plans fail the compiler's own verification: a bug */
} pp_compile_status;

/* What errors reported through d mean: out of memory (PP_COMPILE_NOMEM) or
 * the schedule's (PP_COMPILE_ERRORS). */
pp_compile_status pp_compile_failed(const pp_diag *d);

/* The lowering step on its own, for callers that lower one simulation more
 * than once (--keep-weights' bisection, tests): lowers sim with opts into
 * *plans (an array of t->W it allocates, t->W * T under tensor = T, rank
 * w*T + t: compiler/tensor.h) and verifies them. Returns
 * PP_COMPILE_OK, or a status with the errors reported through d and *plans
 * NULL. pp_compile lowers through this too. */
pp_compile_status pp_compile_plans(const pp_jobtable *t, const pp_sim_result *sim,
                                   const pp_model *m, const pp_lower_opts *opts, pp_diag *d,
                                   pp_plan **plans);
/* Frees plans[0..W) and the array (NULL is fine); under tensor = T the
 * array holds W*T plans (compiler/tensor.h), which plans[0].world says. */
void pp_plans_free(pp_plan *plans, int W);

#endif
