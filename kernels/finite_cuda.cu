/* finite_cuda.cu - pp_cu_first_nonfinite (finite_cuda.h): one block whose
 * threads each scan a stride of the array for their first non-finite
 * number, then keep the lowest index in shared memory: the same index and
 * value as the plain C scan (pp_first_nonfinite, finite.h) whatever the
 * order the threads run in. The bf16 variant scans a bf16 array (what a
 * bf16 run moves between stages), each element widened exactly. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "finite_cuda.h"

#define FINITE_THREADS 256

static __device__ float widen(float x) { return x; }
static __device__ float widen(uint16_t x) { return __uint_as_float((unsigned)x << 16); }

template <typename E>
static __global__ void first_nonfinite_kernel(const E *x, size_t n, double *rec)
{
    __shared__ unsigned long long first[FINITE_THREADS];
    unsigned long long mine = ~0ull;
    for (size_t i = threadIdx.x; i < n; i += FINITE_THREADS)
        if (!isfinite(widen(x[i]))) {
            mine = i;
            break;
        }
    first[threadIdx.x] = mine;
    __syncthreads();
    for (int half = FINITE_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half && first[threadIdx.x + half] < first[threadIdx.x])
            first[threadIdx.x] = first[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        unsigned long long i = first[0];
        rec[0] = i == ~0ull ? -1.0 : (double)i;
        rec[1] = i == ~0ull ? 0.0 : (double)widen(x[i]);
    }
}

extern "C" cudaError_t pp_cu_first_nonfinite(const float *x, size_t n, double *rec, cudaStream_t st)
{
    first_nonfinite_kernel<<<1, FINITE_THREADS, 0, st>>>(x, n, rec);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_first_nonfinite_bf16(const uint16_t *x, size_t n, double *rec,
                                                  cudaStream_t st)
{
    first_nonfinite_kernel<<<1, FINITE_THREADS, 0, st>>>(x, n, rec);
    return cudaGetLastError();
}
