/* optim_graph_cuda.cu - SGD and AdamW for a step replayed as a CUDA graph
 * (optim_graph_cuda.h): each kernel reads the step's learning rate (and
 * AdamW's bias corrections) from device memory, then computes exactly what
 * sgd_step_kernel and adamw_step_kernel in cuda_kernels.cu compute, the
 * same operations in the same order, so a replayed step's weights are the
 * launched step's bits (the gpu_e2e suite's graph TCase compares them with
 * --atol 0 --rtol 0). Plain C reference: pp_sgd_step and pp_adamw_step
 * (cpu_kernels.c). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "optim_graph_cuda.h"

#define OG_THREADS 256
#define OG_MAX_BLOCKS 8192

static unsigned og_grid(size_t n)
{
    size_t blocks = (n + OG_THREADS - 1) / OG_THREADS;
    return (unsigned)(blocks < OG_MAX_BLOCKS ? blocks : OG_MAX_BLOCKS);
}

static __device__ __forceinline__ void og_store_copy(uint16_t *copy, size_t i, float w)
{
    if (copy)
        copy[i] = __bfloat16_as_ushort(__float2bfloat16_rn(w));
}

static __global__ void sgd_step_dev_kernel(float *p, float *g, size_t n,
                                           const pp_cu_step_hyper *hyper, uint16_t *copy)
{
    const float lr = hyper->lr;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float w = p[i] - lr * g[i];
        p[i] = w;
        g[i] = 0.0f;
        og_store_copy(copy, i, w);
    }
}

static __global__ void adamw_step_dev_kernel(float *p, float *g, float *m, float *v, size_t n,
                                             const pp_cu_step_hyper *hyper, float beta1,
                                             float beta2, float eps, float weight_decay,
                                             uint16_t *copy)
{
    const float lr = hyper->lr, bc1 = hyper->bc1, bc2 = hyper->bc2;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
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
        og_store_copy(copy, i, w);
    }
}

extern "C" void pp_cu_step_hyper_of(pp_cu_step_hyper *h, int t, float lr, float beta1, float beta2)
{
    h->lr = lr;
    h->bc1 = 1.0f - powf(beta1, (float)t); /* as pp_cu_adamw_step */
    h->bc2 = 1.0f - powf(beta2, (float)t);
}

extern "C" cudaError_t pp_cu_sgd_step_dev(float *p, float *g, size_t n,
                                          const pp_cu_step_hyper *hyper, uint16_t *copy,
                                          cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    sgd_step_dev_kernel<<<og_grid(n), OG_THREADS, 0, st>>>(p, g, n, hyper, copy);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_adamw_step_dev(float *p, float *g, float *m, float *v, size_t n,
                                            const pp_cu_step_hyper *hyper, float beta1, float beta2,
                                            float eps, float weight_decay, uint16_t *copy,
                                            cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    adamw_step_dev_kernel<<<og_grid(n), OG_THREADS, 0, st>>>(p, g, m, v, n, hyper, beta1, beta2,
                                                             eps, weight_decay, copy);
    return cudaGetLastError();
}
