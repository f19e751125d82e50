/* kernel_shim.h - HOST STAND-IN (tests/standin): what a .cu file needs to
 * compile as host C++. __global__/__device__ vanish; threadIdx, blockIdx,
 * blockDim, gridDim name the running stand-in thread's; __syncthreads,
 * __syncwarp and __shfl_xor_sync are barriers between the block's threads, which run as
 * fibers (ucontext). The Makefile rewrites each `k<<<g, b, sh, st>>>(args)`
 * into pp_si_launch(g, b, sh, st, "k", [=]() { k(args); }, args), which
 * checks the configuration and the pointer arguments (device memory, and
 * the stream-ordering check of tests/standin/runtime.cpp) and enqueues the
 * grid on the stream. Not CUDA. */
#ifndef PP_STANDIN_KERNEL_SHIM_H
#define PP_STANDIN_KERNEL_SHIM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>

#include "cuda_runtime_api.h"

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

extern uint3 pp_si_threadIdx, pp_si_blockIdx;
extern dim3 pp_si_blockDim, pp_si_gridDim;
#define threadIdx pp_si_threadIdx
#define blockIdx pp_si_blockIdx
#define blockDim pp_si_blockDim
#define gridDim pp_si_gridDim

void __syncthreads(void);
/* A barrier between the live threads of the calling warp (the mask is
 * taken as full). */
void __syncwarp(unsigned mask = 0xffffffffu);
/* One warp-wide exchange: every live lane of the warp posts 8 bytes and
 * reads lane `src`'s (its own when src is out of the warp). */
uint64_t pp_si_warp_exchange(uint64_t mine, int src);
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lanemask)
{
    (void)mask;
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    int lane =
        (int)(threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) & 31;
    u = pp_si_warp_exchange(u, lane ^ lanemask);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
/* The grid runs one thread at a time, so an atomic is a plain update. */
static inline float atomicAdd(float *p, float v)
{
    float old = *p;
    *p = old + v;
    return old;
}
static inline double atomicAdd(double *p, double v)
{
    double old = *p;
    *p = old + v;
    return old;
}
static inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- launches -------------------------------------------------------------- */

/* A pointer argument: the kernel may read (const pointee) or write it. */
struct pp_si_ptr_arg {
    const void *p;
    int write;
};
template <typename T> static inline void pp_si_collect(pp_si_ptr_arg *out, int *n, const T &a)
{
    if constexpr (std::is_pointer<T>::value) {
        out[*n].p = (const void *)a;
        out[*n].write = !std::is_const<typename std::remove_pointer<T>::type>::value;
        (*n)++;
    } else {
        (void)a;
        (void)out;
        (void)n;
    }
}

/* Enqueues the grid: runs `body` once per thread at the stream's turn.
 * *mode is the launch site's: 0 unknown, 1 used no barrier (threads run as
 * plain calls), 2 used one (fibers). Sets the last error. */
void pp_si_launch_grid(dim3 grid, dim3 block, size_t shmem, cudaStream_t st, const char *name,
                       std::function<void()> body, const pp_si_ptr_arg *args, int nargs, int *mode);

template <typename F, typename... A>
static inline void pp_si_launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t st,
                                const char *name, F body, const A &...args)
{
    static int mode = 0;
    pp_si_ptr_arg ptr[sizeof...(A) + 1];
    int n = 0;
    (pp_si_collect(ptr, &n, args), ...);
    pp_si_launch_grid(grid, block, shmem, st, name, std::function<void()>(body), ptr, n, &mode);
}

#endif
