/* plans.c - lowering a simulation into plans and verifying them (see
 * plans.h): the only way the compiler makes a plan. */
#include "plans.h"

#include <stdlib.h>
#include <string.h>

#include "../isa/bufcheck.h"
#include "../isa/commcheck.h"
#include "tensor.h"

/* A checker's failure, through d: a message starting "error:" is the
 * checker running out of memory, any other the plans failing it. */
static pp_compile_status check_failed(pp_diag *d, const char *msg, const char *checker,
                                      const char *check)
{
    if (!strncmp(msg, "error:", 6)) {
        diag_nomem(d, "in the %s", checker);
        return PP_COMPILE_NOMEM;
    }
    diag_error_noloc(d,
                     "internal error: the emitted plans fail the %s check "
                     "(please report this):\n%s",
                     check, msg);
    return PP_COMPILE_INTERNAL;
}

/* ==== Plan verification ====================================================
 * Every set of plans the compiler produces passes here before anyone sees
 * it: pp_compile's, --keep-weights' candidates, the tests'. Each check reads
 * the plans only and reports through d.
 *   1. every rank's plan is one the VM accepts (pp_plan_validate);
 *   2. the plans cannot hang under NCCL's rules (isa/commcheck.h);
 *   3. no plan can corrupt a buffer (isa/bufcheck.h).
 * Further verifiers go at the end of this function. */
static pp_compile_status verify_plans(const pp_plan *plans, int W, pp_diag *d)
{
    char msg[8192];
    for (int r = 0; r < W; r++)
        if (pp_plan_validate(&plans[r], msg, sizeof msg) != PP_PLAN_OK) {
            diag_error_noloc(
                d, "internal error: rank %d's plan is invalid (please report this): %s", r, msg);
            return PP_COMPILE_INTERNAL;
        }
    if (pp_comm_check(plans, W, msg, sizeof msg))
        return check_failed(d, msg, "communication checker", "communication");
    if (pp_buffer_check(plans, W, msg, sizeof msg))
        return check_failed(d, msg, "buffer-safety verifier", "buffer-safety");
    return PP_COMPILE_OK;
}

void pp_plans_free(pp_plan *plans, int W)
{
    if (plans && (int)plans[0].world > W) /* tensor = T: W*T plans (tensor.h) */
        W = (int)plans[0].world;
    for (int w = 0; plans && w < W; w++)
        pp_plan_free(&plans[w]);
    free(plans);
}

pp_compile_status pp_compile_failed(const pp_diag *d)
{
    return d->nomem ? PP_COMPILE_NOMEM : PP_COMPILE_ERRORS;
}

pp_compile_status pp_compile_plans(const pp_jobtable *t, const pp_sim_result *sim,
                                   const pp_model *m, const pp_lower_opts *opts, pp_diag *d,
                                   pp_plan **out)
{
    *out = NULL;
    pp_plan *plans = calloc((size_t)t->W, sizeof *plans);
    if (!plans) {
        diag_nomem(d, "for %d plans", t->W);
        return PP_COMPILE_NOMEM;
    }
    int before = d->errors;
    if (pp_lower(t, sim, m, opts, d, plans)) {
        pp_plans_free(plans, t->W);
        if (d->errors == before)
            diag_error_noloc(d, "internal error: lowering failed without saying why");
        return pp_compile_failed(d);
    }
    if (pp_tensor_expand(&plans, t->W, m, d)) {
        pp_plans_free(plans, t->W);
        return PP_COMPILE_NOMEM;
    }
    pp_compile_status st = verify_plans(plans, pp_tensor_ranks(t->W, m), d);
    if (st != PP_COMPILE_OK) {
        pp_plans_free(plans, t->W);
        return st;
    }
    *out = plans;
    return PP_COMPILE_OK;
}
