/* optim_graph_cuda.h - the optimizer updates of a step replayed as a CUDA
 * graph (vm/graph_cuda.c): the same SGD and AdamW as pp_cu_sgd_step and
 * pp_cu_adamw_step (cuda_kernels.h), but reading the step's learning rate
 * and AdamW's bias corrections from device memory, which the host fills
 * before each launch, instead of from kernel arguments, which a captured
 * graph would freeze at the step it was captured in. The plain C reference
 * is the same as theirs: pp_sgd_step and pp_adamw_step (cpu_kernels.h). */
#ifndef PP_OPTIM_GRAPH_CUDA_H
#define PP_OPTIM_GRAPH_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What step t's update needs, computed on the host as pp_cu_adamw_step
 * computes it (pp_cu_step_hyper_of), copied to the device before the
 * launch. */
typedef struct {
    float lr;       /* pp_optim_lr(o, t) */
    float bc1, bc2; /* AdamW's 1 - beta1^t and 1 - beta2^t */
} pp_cu_step_hyper;

/* h for step t (t >= 1) with learning rate lr and AdamW's betas. */
void pp_cu_step_hyper_of(pp_cu_step_hyper *h, int t, float lr, float beta1, float beta2);

/* pp_cu_sgd_step with the learning rate read from hyper->lr on the device. */
cudaError_t pp_cu_sgd_step_dev(float *p, float *g, size_t n, const pp_cu_step_hyper *hyper,
                               uint16_t *copy, cudaStream_t st);
/* pp_cu_adamw_step with lr, bc1 and bc2 read from hyper on the device. */
cudaError_t pp_cu_adamw_step_dev(float *p, float *g, float *m, float *v, size_t n,
                                 const pp_cu_step_hyper *hyper, float beta1, float beta2, float eps,
                                 float weight_decay, uint16_t *copy, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
