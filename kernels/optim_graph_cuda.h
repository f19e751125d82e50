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

/* pp_cu_sgd_step with the learning rate read from hyper->lr on the device.
 * skip (NULL: none): --skip-nonfinite's device flag (pp_cu_step_bad); when
 * it is not 0 the update only zeroes g, as a dropped step does. */
cudaError_t pp_cu_sgd_step_dev(float *p, float *g, size_t n, const pp_cu_step_hyper *hyper,
                               uint16_t *copy, const float *skip, cudaStream_t st);
/* pp_cu_adamw_step with lr, bc1 and bc2 read from hyper on the device; skip
 * as above (weights, moments and copy then stay). */
cudaError_t pp_cu_adamw_step_dev(float *p, float *g, float *m, float *v, size_t n,
                                 const pp_cu_step_hyper *hyper, float beta1, float beta2, float eps,
                                 float weight_decay, uint16_t *copy, const float *skip,
                                 cudaStream_t st);

/* --skip-nonfinite under graph replay: whether the step's non-finite
 * records (vm/interp_cuda.c's nf_dev, two doubles an instruction, on lane 0
 * or 1) hold a finding, decided as the host's read_checks decides it. code[i]
 * is instruction i's check kind (0: none; loss_kind: a loss, not finite is
 * a finding; other: a check, record >= 0 is a finding) plus 16 times its
 * lane. The plain C reference, which the kernel runs on one thread. */
#ifdef __CUDACC__
#define PP_OG_HD __host__ __device__
#else
#define PP_OG_HD
#endif
static inline PP_OG_HD int pp_step_bad(const double *rec0, const double *rec1,
                                       const signed char *code, uint32_t n, int loss_kind)
{
    int bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        int kind = code[i] & 15;
        double r = (code[i] >> 4 ? rec1 : rec0)[2 * (size_t)i];
        bad |= kind == loss_kind ? !(r - r == 0.0) : kind != 0 && r >= 0;
    }
    return bad;
}
/* Writes 1.0f or 0.0f to *bad (device) after what st holds. */
cudaError_t pp_cu_step_bad(const double *rec0, const double *rec1, const signed char *code,
                           uint32_t n, int loss_kind, float *bad, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
