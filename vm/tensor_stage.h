/* tensor_stage.h - whole stages of a tensor-parallel run (issue 27): a
 * worker's T ranks each hold a shard of every stage it owns
 * (kernels/tensor_shard.h); --save and checkpoints hold whole stages, so
 * that a run may resume with another T (--reshard). */
#ifndef PP_VM_TENSOR_STAGE_H
#define PP_VM_TENSOR_STAGE_H

#include <stddef.h>

#include "backend.h"

/* Stage s's fp32 weights and optimizer state, whole, gathered from ranks
 * first .. first + T - 1 (a worker's, first its t = 0) to first. Collective
 * over those ranks; others return 0 at once. On first *w (whole
 * parameters) is malloc'd, the caller frees it, and *opt (the whole state,
 * NULL without one) points into the same allocation, after the weights. 0, or -1 with err (every member still takes part). */
int pp_tensor_stage_gather(const pp_plan *p, const pp_backend *be, void *st, int s, int first,
                           int me, float **w, float **opt, char *err, size_t errlen);

/* Rank t's shard of the whole weights w and state opt (NULL: none): sw and
 * sopt, of the shard's sizes (pp_stage_param_count with p->model). */
void pp_tensor_stage_cut(const pp_plan *p, int s, int t, const float *w, const float *opt,
                         float *sw, float *sopt);

/* This rank's tensor group in p's group table (compiler/tensor.c: the
 * replica groups once per t, then one tensor group per worker). T > 1. */
static inline int pp_tensor_group_of(const pp_plan *p)
{
    uint32_t T = pp_model_tensor(&p->model);
    return (int)(p->ngroups - p->world / T + p->rank / T);
}

#endif
