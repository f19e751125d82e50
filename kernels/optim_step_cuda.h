/* optim_step_cuda.h - one weight's SGD and AdamW update as __device__
 * functions, the arithmetic that both the launched optimizer kernels
 * (cuda_kernels.cu: sgd_step_kernel, adamw_step_kernel) and a replayed
 * step's (optim_graph_cuda.cu: the same with the learning rate and bias
 * corrections read from the device) run, so the two cannot drift apart and
 * a replayed step's weights stay the launched step's bits. Only for .cu
 * files (device code). Plain C reference, the same operations in the same
 * order: pp_sgd_step and pp_adamw_step (cpu_kernels.c). */
#ifndef PP_OPTIM_STEP_CUDA_H
#define PP_OPTIM_STEP_CUDA_H

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

/* The updated weight's bf16 compute copy, written in the optimizer's own
 * pass when the stage computes in bf16 (copy != NULL): a separate
 * pp_cu_f32_to_bf16 pass read every weight again, about 1 ms a step for the
 * gpu-bench model's 537 M weights on an H100. */
static __device__ __forceinline__ void pp_cu_store_copy(uint16_t *copy, size_t i, float w)
{
    if (copy)
        copy[i] = __bfloat16_as_ushort(__float2bfloat16_rn(w));
}

/* SGD on weight i: p -= lr * g, the gradient zeroed. */
static __device__ __forceinline__ void pp_cu_sgd_one(float *p, float *g, size_t i, float lr,
                                                     uint16_t *copy)
{
    float w = p[i] - lr * g[i];
    p[i] = w;
    g[i] = 0.0f;
    pp_cu_store_copy(copy, i, w);
}

/* AdamW on weight i, with bc1 = 1 - beta1^t and bc2 = 1 - beta2^t computed
 * on the host as pp_adamw_step computes them; the gradient zeroed. */
static __device__ __forceinline__ void pp_cu_adamw_one(float *p, float *g, float *m, float *v,
                                                       size_t i, float lr, float beta1, float beta2,
                                                       float eps, float weight_decay, float bc1,
                                                       float bc2, uint16_t *copy)
{
    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    float w = p[i];
    w -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * w);
    p[i] = w;
    g[i] = 0.0f;
    pp_cu_store_copy(copy, i, w);
}

#endif
