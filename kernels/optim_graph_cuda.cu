/* optim_graph_cuda.cu - SGD and AdamW for a step replayed as a CUDA graph
 * (optim_graph_cuda.h): each kernel reads the step's learning rate (and
 * AdamW's bias corrections) from device memory, then runs the one update
 * per weight that sgd_step_kernel and adamw_step_kernel in cuda_kernels.cu
 * run (optim_step_cuda.h), so a replayed step's weights are the launched
 * step's bits (the gpu_graph suite compares them with --atol 0 --rtol 0).
 * Plain C reference: pp_sgd_step and pp_adamw_step (cpu_kernels.c). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "optim_graph_cuda.h"
#include "optim_step_cuda.h"

#define OG_THREADS 256
#define OG_MAX_BLOCKS 8192

static unsigned og_grid(size_t n)
{
    size_t blocks = (n + OG_THREADS - 1) / OG_THREADS;
    return (unsigned)(blocks < OG_MAX_BLOCKS ? blocks : OG_MAX_BLOCKS);
}

/* --skip-nonfinite (skip != NULL): a step the ranks found a non-finite
 * number in (*skip != 0) only zeroes the gradients, as the launched step's
 * dropped update does; weights, moments and the compute copy stay. */
static __device__ __forceinline__ int og_skip(const float *skip, float *g, size_t n)
{
    if (!skip || *skip == 0.0f)
        return 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] = 0.0f;
    return 1;
}

static __global__ void sgd_step_dev_kernel(float *p, float *g, size_t n,
                                           const pp_cu_step_hyper *hyper, uint16_t *copy,
                                           const float *skip)
{
    if (og_skip(skip, g, n))
        return;
    const float lr = hyper->lr;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        pp_cu_sgd_one(p, g, i, lr, copy);
}

static __global__ void adamw_step_dev_kernel(float *p, float *g, float *m, float *v, size_t n,
                                             const pp_cu_step_hyper *hyper, float beta1,
                                             float beta2, float eps, float weight_decay,
                                             uint16_t *copy, const float *skip)
{
    if (og_skip(skip, g, n))
        return;
    const float lr = hyper->lr, bc1 = hyper->bc1, bc2 = hyper->bc2;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        pp_cu_adamw_one(p, g, m, v, i, lr, beta1, beta2, eps, weight_decay, bc1, bc2, copy);
}

extern "C" void pp_cu_step_hyper_of(pp_cu_step_hyper *h, int t, float lr, float beta1, float beta2)
{
    h->lr = lr;
    h->bc1 = 1.0f - powf(beta1, (float)t); /* as pp_cu_adamw_step */
    h->bc2 = 1.0f - powf(beta2, (float)t);
}

extern "C" cudaError_t pp_cu_sgd_step_dev(float *p, float *g, size_t n,
                                          const pp_cu_step_hyper *hyper, uint16_t *copy,
                                          const float *skip, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    sgd_step_dev_kernel<<<og_grid(n), OG_THREADS, 0, st>>>(p, g, n, hyper, copy, skip);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_adamw_step_dev(float *p, float *g, float *m, float *v, size_t n,
                                            const pp_cu_step_hyper *hyper, float beta1, float beta2,
                                            float eps, float weight_decay, uint16_t *copy,
                                            const float *skip, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    adamw_step_dev_kernel<<<og_grid(n), OG_THREADS, 0, st>>>(p, g, m, v, n, hyper, beta1, beta2,
                                                             eps, weight_decay, copy, skip);
    return cudaGetLastError();
}

/* One thread: the records are one a checking instruction (a few hundred). */
static __global__ void step_bad_kernel(const double *rec0, const double *rec1,
                                       const signed char *code, uint32_t n, int loss_kind,
                                       float *bad)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *bad = pp_step_bad(rec0, rec1, code, n, loss_kind) ? 1.0f : 0.0f;
}

extern "C" cudaError_t pp_cu_step_bad(const double *rec0, const double *rec1,
                                      const signed char *code, uint32_t n, int loss_kind,
                                      float *bad, cudaStream_t st)
{
    step_bad_kernel<<<1, 1, 0, st>>>(rec0, rec1, code, n, loss_kind, bad);
    return cudaGetLastError();
}
