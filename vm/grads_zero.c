/* grads_zero.c - which of a rank's own gradients are known to hold zeros,
 * so that the first Backward (or BackwardWeight) of a step into them can
 * write its weight gradients instead of adding them (the cuda backend's
 * GEMMs then run at beta 0: kernels/model_cuda.h's pp_cuda_model_grads_zero).
 * The core (vm/exec.c) marks stage s's own gradients after what zeroes them
 * (an OptimizerStep's update, ZeroGrads, a dropped step's zeroing), takes
 * the mark at the backward that writes them first, and forgets it at
 * anything else that writes them (a received or reduced gradient, a tied
 * gradient's sum, --deterministic's sums). A wgrad slot or
 * --deterministic's per-job buffer is never marked: those keep adding.
 * A backend that zeroes the gradients it allocates marks them all before
 * the first step (pp_vm_core_g_zero_all), so step 1 writes too, and a step
 * captured as a CUDA graph at step 1 starts from the marks every later
 * step starts from (vm/graph_cuda.c compares them before each replay). */
#include "core.h"

#include <string.h>

static int own(pp_vm_core *c, const pp_vm_job *j)
{
    return c->g_zero && j->g && j->s >= 0 && j->g == c->ops->grads(c, j->s);
}

void pp_vm_core_g_zero_set(pp_vm_core *c, const pp_vm_job *j)
{
    if (own(c, j))
        c->g_zero[j->s] = 1;
}

int pp_vm_core_g_zero_take(pp_vm_core *c, const pp_vm_job *j)
{
    if (!own(c, j))
        return 0;
    int zero = c->g_zero[j->s];
    c->g_zero[j->s] = 0;
    return zero;
}

void pp_vm_core_g_zero_forget(pp_vm_core *c, int s)
{
    if (c->g_zero && s >= 0)
        c->g_zero[s] = 0;
    else if (c->g_zero)
        memset(c->g_zero, 0, c->p->S);
}

void pp_vm_core_g_zero_all(pp_vm_core *c)
{
    if (c->g_zero) /* (take asks whether a stage's gradients are this rank's) */
        memset(c->g_zero, 1, c->p->S);
}
