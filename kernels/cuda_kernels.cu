/* cuda_kernels.cu - the CUDA kernels of cuda_kernels.h, each the twin of a
 * CPU kernel (cpu_kernels.h, pp_sgd_step in model.h): embedding lookup and
 * its scatter-add, bias add and bias gradient, fused bias + GELU and the
 * GELU backward, residual and plain adds, layer norm forward and backward,
 * softmax cross-entropy fused with its backward, the loss sum, SGD, AdamW
 * and bf16 conversion.
 *
 * The kernels that read parameters (embedding forward, the bias adds, layer
 * norm forward and the layer norm's input gradient) are templates over the
 * parameter type: float, or uint16_t for a bf16 compute copy, read through
 * param(), which widens bf16 exactly. One body each; the fp32 instances are
 * the kernels as they were, the _bf16w launchers the bf16 instances.
 *
 * Shapes of work:
 *   elementwise kernels   grid-stride loops over size_t indices
 *   row reductions        one warp per row (layer norm) or one block per row
 *                         (softmax over V)
 *   column reductions     one block per 32-column chunk, rows split over the
 *                         block's 8 warps and summed in shared memory: no
 *                         atomics, so the result is the same on every run
 *
 * Arithmetic follows the CPU twin's formulas and constants, in float; nvcc
 * may contract a * b + c into one fused multiply-add where the CPU rounds
 * twice, and reductions sum in a different order, so the tests compare with
 * tolerances except where only additions and copies are involved. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "optim_step_cuda.h"
#include "../isa/model_desc.h"

/* ------------------------------------------------------------------------ */
/* Launch shapes and reductions                                              */

#define THREADS 256     /* every block: a multiple of 32, so warps are full */
#define MAX_BLOCKS 8192 /* grid-stride loops cover the rest */

static unsigned grid_for(size_t n)
{
    size_t blocks = (n + THREADS - 1) / THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS);
}

static __device__ __forceinline__ size_t global_index(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ size_t global_stride(void)
{
    return (size_t)gridDim.x * blockDim.x;
}

/* A parameter as fp32: the fp32 weights themselves, or an element of a bf16
 * compute copy (model.h), which is the upper half of a float, so widening
 * is a shift and exact. The kernels that read parameters are templates
 * over their type, so each has one body for both. */
static __device__ __forceinline__ float param(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float param(const uint16_t *p, size_t i)
{
    return __uint_as_float((unsigned)p[i] << 16);
}

/* An activation a kernel writes: fp32 as it is, or (the bf16 stash's `act`
 * regions, isa/gpt_layout.h) rounded to bf16 by the kernel that makes it,
 * to nearest even as pp_f32_to_bf16, so no separate conversion pass. */
static __device__ __forceinline__ void put(float *y, size_t i, float v) { y[i] = v; }
static __device__ __forceinline__ void put(uint16_t *y, size_t i, float v)
{
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

struct SumOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* Over the 32 lanes of a full warp; every lane gets the result. */
template <typename T, typename Op> static __device__ T warp_reduce(T v, Op op)
{
    for (int off = 16; off > 0; off >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* Over the whole block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. buf holds 33 values in shared memory; the first
 * barrier keeps it from being overwritten while a thread may still read it
 * from an earlier use (such as the previous call's result in buf[32]).
 * Every thread of the block must call it. */
template <typename T, typename Op> static __device__ T block_reduce(T v, Op op, T identity, T *buf)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce(v, op);
    __syncthreads();
    if (lane == 0)
        buf[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? buf[lane] : identity;
        v = warp_reduce(v, op);
        if (lane == 0)
            buf[32] = v;
    }
    __syncthreads();
    return buf[32];
}

/* Column chunks: a block of COL_X x COL_Y threads owns COL_X adjacent
 * columns (consecutive threadIdx.x read consecutive addresses); its COL_Y
 * thread rows take every COL_Y-th row, then shared memory sums their
 * partials. */
#define COL_X 32
#define COL_Y 8

/* ------------------------------------------------------------------------ */
/* Embedding                                                                 */

/* out is [batch][context * embed]; element i is row b = i / (context*embed),
 * position c, component e, read from E[tokens[b][c]][e] (the token rows
 * have context + 1 entries, the last the target). */
template <typename P>
static __global__ void embedding_forward_kernel(const int32_t *tokens, int context, const P *E,
                                                int embed, float *out, size_t n)
{
    size_t row = (size_t)context * embed;
    for (size_t i = global_index(); i < n; i += global_stride()) {
        size_t b = i / row, k = i % row;
        size_t c = k / embed, e = k % embed;
        int32_t tok = tokens[b * (context + 1) + c];
        out[i] = param(E, (size_t)tok * embed + e);
    }
}

/* The embedding backward, dE[tokens[p]] += dout[p] over the positions p =
 * b * context + c in order: deterministic, and bit for bit the CPU's sums
 * (pp_embedding_backward). Atomics would land in any order, making the sums
 * differ between runs in the last bits and a checkpointed run's resume
 * differ from the uninterrupted run (seen on an H100).
 * One warp per (vocabulary row v, EMB_LANE_COLS * 32 columns): the warp
 * reads the tokens 32 positions at a time and ORs a mask of the lanes whose
 * token is v; each lane owns EMB_LANE_COLS columns of row v in registers
 * (loaded at the row's first hit) and adds the hits in position order, the
 * dout loads of up to EMB_GROUP hits issued together so a frequent token's
 * row is not one load latency per hit. Cost: every warp reads all N tokens,
 * V * ceil(embed / 128) * N / 32 coalesced warp loads: 32 K for the mlp
 * model (V = 256, embed 256, N = 4096), 77 M for a GPT with V = 50257,
 * C = 768, N = 8192 (under a millisecond on an H100). */
#define EMB_LANE_COLS 4
#define EMB_GROUP 8
#define EMB_SCAN 4 /* chunks of 32 tokens read at once */
#define EMB_WARP_COLS (32 * EMB_LANE_COLS)

static __device__ __forceinline__ unsigned warp_or(unsigned v)
{
    for (int off = 16; off > 0; off >>= 1)
        v |= __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

static __device__ __forceinline__ int lowest_bit(unsigned m)
{
#if defined(__CUDA_ARCH__)
    return __ffs((int)m) - 1;
#else
    return __builtin_ctz(m);
#endif
}

/* Adds the positions base + (set bits of mask), lowest first, into acc (the
 * lane's columns of row v), loading row v's values at its first hit. */
static __device__ __forceinline__ void embedding_add_hits(unsigned mask, int base, int v, int e0,
                                                          const float *dout, int embed,
                                                          const float *dE, float *acc, bool *any)
{
    while (mask) {
        int q[EMB_GROUP];
        for (int i = 0; i < EMB_GROUP; i++) {
            q[i] = mask ? base + lowest_bit(mask) : -1;
            mask &= mask - 1; /* 0 stays 0 */
        }
        float x[EMB_GROUP][EMB_LANE_COLS]; /* the group's loads, issued together */
        for (int i = 0; i < EMB_GROUP; i++)
            for (int k = 0; k < EMB_LANE_COLS; k++) {
                int e = e0 + 32 * k;
                x[i][k] = q[i] >= 0 && e < embed ? dout[(size_t)q[i] * embed + e] : 0.0f;
            }
        if (!*any) {
            for (int k = 0; k < EMB_LANE_COLS; k++) {
                int e = e0 + 32 * k;
                acc[k] = e < embed ? dE[(size_t)v * embed + e] : 0.0f;
            }
            *any = true;
        }
        for (int i = 0; i < EMB_GROUP; i++)
            if (q[i] >= 0)
                for (int k = 0; k < EMB_LANE_COLS; k++)
                    acc[k] += x[i][k];
    }
}

static __global__ void embedding_backward_kernel(const int32_t *tokens, int context, int positions,
                                                 const float *dout, int embed, float *dE)
{
    int v = (int)blockIdx.x, lane = (int)threadIdx.x;
    int e0 = (int)blockIdx.y * EMB_WARP_COLS + lane;
    float acc[EMB_LANE_COLS];
    bool any = false; /* the same in every lane */
    for (int base = 0; base < positions; base += 32 * EMB_SCAN) {
        /* EMB_SCAN chunks' tokens loaded together: one chunk at a time made
         * the scan a chain of loads (0.14 ms for 4096 positions on an H100) */
        int t[EMB_SCAN];
        for (int j = 0; j < EMB_SCAN; j++) {
            int p = base + 32 * j + lane;
            t[j] = p < positions ? tokens[(size_t)(p / context) * (context + 1) + p % context] : -1;
        }
        for (int j = 0; j < EMB_SCAN; j++)
            embedding_add_hits(warp_or(t[j] == v ? 1u << lane : 0u), base + 32 * j, v, e0, dout,
                               embed, dE, acc, &any);
    }
    if (!any)
        return;
    for (int k = 0; k < EMB_LANE_COLS; k++) {
        int e = e0 + 32 * k;
        if (e < embed)
            dE[(size_t)v * embed + e] = acc[k];
    }
}

static cudaError_t embedding_backward(const int32_t *tokens, int batch, int context,
                                      const float *dout, int embed, int vocab, float *dE,
                                      cudaStream_t st)
{
    if (batch <= 0 || context <= 0 || embed <= 0 || vocab <= 0)
        return cudaSuccess;
    dim3 grid((unsigned)vocab, (unsigned)((embed + EMB_WARP_COLS - 1) / EMB_WARP_COLS));
    embedding_backward_kernel<<<grid, 32, 0, st>>>(tokens, context, batch * context, dout, embed,
                                                   dE);
    return cudaGetLastError();
}

template <typename P>
static cudaError_t embedding_forward(const int32_t *tokens, int batch, int context, const P *E,
                                     int embed, float *out, cudaStream_t st)
{
    size_t n = (size_t)batch * context * embed;
    if (n == 0)
        return cudaSuccess; /* nothing to launch (a 0-block grid is an error) */
    embedding_forward_kernel<<<grid_for(n), THREADS, 0, st>>>(tokens, context, E, embed, out, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_embedding_forward(const int32_t *tokens, int batch, int context,
                                               const float *E, int embed, float *out,
                                               cudaStream_t st)
{
    return embedding_forward(tokens, batch, context, E, embed, out, st);
}

extern "C" cudaError_t pp_cu_embedding_forward_bf16w(const int32_t *tokens, int batch, int context,
                                                     const uint16_t *E, int embed, float *out,
                                                     cudaStream_t st)
{
    return embedding_forward(tokens, batch, context, E, embed, out, st);
}

extern "C" cudaError_t pp_cu_embedding_backward(const int32_t *tokens, int batch, int context,
                                                const float *dout, int embed, float *dE,
                                                cudaStream_t st)
{
    return embedding_backward(tokens, batch, context, dout, embed, PP_VOCAB, dE, st);
}

/* ------------------------------------------------------------------------ */
/* Bias, GELU, adds                                                          */

/* The CPU's constants (cpu_kernels.c). */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static __device__ __forceinline__ float gelu(float v)
{
    float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
    return 0.5f * v * (1.0f + t);
}

/* d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), as on the CPU. */
static __device__ __forceinline__ float gelu_grad(float v)
{
    float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
    float sech2 = 1.0f - t * t;
    float dinner = GELU_K * (1.0f + 3.0f * GELU_C * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * sech2 * dinner;
}

template <typename P>
static __global__ void bias_add_kernel(float *y, const P *bias, size_t cols, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        y[i] += param(bias, i % cols);
}

template <typename P, typename Y>
static __global__ void bias_gelu_forward_kernel(float *h, const P *bias, Y *a, size_t cols,
                                                size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride()) {
        float v = h[i] + param(bias, i % cols);
        h[i] = v;
        put(a, i, gelu(v));
    }
}

/* y = x + bias, written as Y (bf16: the qkv stash made in one pass) */
template <typename P, typename Y>
static __global__ void bias_add_to_kernel(const float *x, const P *bias, Y *y, size_t cols,
                                          size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        put(y, i, x[i] + param(bias, i % cols));
}

/* h = x + bias and a = gelu(h), both written as bf16 from the fp32 sum:
 * the bf16 stash's fch and fcg in one pass over the GEMM's fp32 output. */
template <typename P>
static __global__ void bias_gelu_forward_to_kernel(const float *x, const P *bias, uint16_t *h,
                                                   uint16_t *a, size_t cols, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride()) {
        float v = x[i] + param(bias, i % cols);
        put(h, i, v);
        put(a, i, gelu(v));
    }
}

/* dx may alias dy: each element reads dy[i] before writing dx[i]. x is
 * fp32, or bf16 (the bf16 stash's fch), widened exactly. */
template <typename X>
static __global__ void gelu_backward_kernel(const X *x, const float *dy, float *dx, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        dx[i] = dy[i] * gelu_grad(param(x, i));
}

/* db[c] += sum over rows of dy[r][c]: see COL_X/COL_Y. */
static __global__ void bias_grad_kernel(const float *dy, int rows, int cols, float *db)
{
    __shared__ float part[COL_Y][COL_X + 1];
    int c = blockIdx.x * COL_X + threadIdx.x;
    float s = 0.0f;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += COL_Y)
            s += dy[(size_t)r * cols + c];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.0f;
        for (int k = 0; k < COL_Y; k++)
            t += part[k][threadIdx.x];
        db[c] += t;
    }
}

/* y = (y + x) + bias, the CPU twin's order. */
template <typename P>
static __global__ void residual_bias_add_kernel(float *y, const float *x, const P *bias,
                                                size_t cols, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        y[i] = (y[i] + x[i]) + param(bias, i % cols);
}

static __global__ void add_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        y[i] += x[i];
}

template <typename P>
static cudaError_t bias_add(float *y, const P *bias, int rows, int cols, cudaStream_t st)
{
    size_t n = (size_t)rows * cols;
    if (n == 0)
        return cudaSuccess;
    bias_add_kernel<<<grid_for(n), THREADS, 0, st>>>(y, bias, (size_t)cols, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_bias_add(float *y, const float *bias, int rows, int cols,
                                      cudaStream_t st)
{
    return bias_add(y, bias, rows, cols, st);
}

extern "C" cudaError_t pp_cu_bias_add_bf16w(float *y, const uint16_t *bias, int rows, int cols,
                                            cudaStream_t st)
{
    return bias_add(y, bias, rows, cols, st);
}

template <typename P, typename Y>
static cudaError_t bias_gelu_forward(float *h, const P *bias, Y *a, int rows, int cols,
                                     cudaStream_t st)
{
    size_t n = (size_t)rows * cols;
    if (n == 0)
        return cudaSuccess;
    bias_gelu_forward_kernel<<<grid_for(n), THREADS, 0, st>>>(h, bias, a, (size_t)cols, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_bias_gelu_forward(float *h, const float *bias, float *a, int rows,
                                               int cols, cudaStream_t st)
{
    return bias_gelu_forward(h, bias, a, rows, cols, st);
}

extern "C" cudaError_t pp_cu_bias_gelu_forward_bf16w(float *h, const uint16_t *bias, float *a,
                                                     int rows, int cols, cudaStream_t st)
{
    return bias_gelu_forward(h, bias, a, rows, cols, st);
}

extern "C" cudaError_t pp_cu_bias_gelu_forward_bf16wy(float *h, const uint16_t *bias, uint16_t *a,
                                                      int rows, int cols, cudaStream_t st)
{
    return bias_gelu_forward(h, bias, a, rows, cols, st);
}

extern "C" cudaError_t pp_cu_bias_gelu_forward_to_bf16why(const float *x, const uint16_t *bias,
                                                          uint16_t *h, uint16_t *a, int rows,
                                                          int cols, cudaStream_t st)
{
    size_t n = (size_t)rows * cols;
    if (n == 0)
        return cudaSuccess;
    bias_gelu_forward_to_kernel<<<grid_for(n), THREADS, 0, st>>>(x, bias, h, a, (size_t)cols, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_bias_add_to_bf16wy(const float *x, const uint16_t *bias, uint16_t *y,
                                                int rows, int cols, cudaStream_t st)
{
    size_t n = (size_t)rows * cols;
    if (n == 0)
        return cudaSuccess;
    bias_add_to_kernel<<<grid_for(n), THREADS, 0, st>>>(x, bias, y, (size_t)cols, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_gelu_backward(const float *x, const float *dy, float *dx, size_t n,
                                           cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    gelu_backward_kernel<<<grid_for(n), THREADS, 0, st>>>(x, dy, dx, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_gelu_backward_bf16x(const uint16_t *x, const float *dy, float *dx,
                                                 size_t n, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    gelu_backward_kernel<<<grid_for(n), THREADS, 0, st>>>(x, dy, dx, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_bias_grad(const float *dy, int rows, int cols, float *db,
                                       cudaStream_t st)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    dim3 block(COL_X, COL_Y);
    unsigned grid = (unsigned)((cols + COL_X - 1) / COL_X);
    bias_grad_kernel<<<grid, block, 0, st>>>(dy, rows, cols, db);
    return cudaGetLastError();
}

template <typename P>
static cudaError_t residual_bias_add(float *y, const float *x, const P *bias, int rows, int cols,
                                     cudaStream_t st)
{
    size_t n = (size_t)rows * cols;
    if (n == 0)
        return cudaSuccess;
    residual_bias_add_kernel<<<grid_for(n), THREADS, 0, st>>>(y, x, bias, (size_t)cols, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_residual_bias_add(float *y, const float *x, const float *bias,
                                               int rows, int cols, cudaStream_t st)
{
    return residual_bias_add(y, x, bias, rows, cols, st);
}

extern "C" cudaError_t pp_cu_residual_bias_add_bf16w(float *y, const float *x, const uint16_t *bias,
                                                     int rows, int cols, cudaStream_t st)
{
    return residual_bias_add(y, x, bias, rows, cols, st);
}

extern "C" cudaError_t pp_cu_add(float *y, const float *x, size_t n, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    add_kernel<<<grid_for(n), THREADS, 0, st>>>(y, x, n);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* Layer norm                                                                */

#define LN_EPS 1e-5f
/* One block per row: two passes over it (mean, then the biased variance
 * around it), each thread striding over the columns and the block summing
 * with block_reduce. (One warp per row, eight rows a block, left an H100
 * with 32 blocks for the 256 rows of a 4096-wide batch: 58 us a forward
 * and 78 us a backward, latency-bound; a block per row fills the GPU.) */
template <typename P, typename Y>
static __global__ void layernorm_forward_kernel(const float *x, const P *gamma, const P *beta,
                                                int cols, Y *y, float *mean, float *rstd)
{
    __shared__ float buf[33];
    int row = blockIdx.x;
    const float *xr = x + (size_t)row * cols;
    Y *yr = y + (size_t)row * cols;

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += xr[c];
    float m = block_reduce(s, SumOp(), 0.0f, buf) / (float)cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = xr[c] - m;
        sq += d * d;
    }
    float var = block_reduce(sq, SumOp(), 0.0f, buf) / (float)cols;
    float r = 1.0f / sqrtf(var + LN_EPS); /* IEEE sqrt and division, not rsqrtf */
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        put(yr, (size_t)c, (xr[c] - m) * r * param(gamma, c) + param(beta, c));
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, one
 * block per row as in the forward. dgamma and dbeta are column sums and are
 * left to layernorm_param_grad_kernel. */
template <typename P>
static __global__ void layernorm_backward_dx_kernel(const float *x, const P *gamma,
                                                    const float *mean, const float *rstd,
                                                    const float *dy, int cols, float *dx)
{
    __shared__ float buf[33];
    int row = blockIdx.x;
    const float *xr = x + (size_t)row * cols;
    const float *dyr = dy + (size_t)row * cols;
    float *dxr = dx + (size_t)row * cols;
    float m = mean[row], r = rstd[row];

    float sg = 0.0f, sgx = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float xhat = (xr[c] - m) * r;
        float g = dyr[c] * param(gamma, c);
        sg += g;
        sgx += g * xhat;
    }
    float mean_g = block_reduce(sg, SumOp(), 0.0f, buf) / (float)cols;
    float mean_gx = block_reduce(sgx, SumOp(), 0.0f, buf) / (float)cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float xhat = (xr[c] - m) * r;
        float g = dyr[c] * param(gamma, c);
        dxr[c] += r * (g - mean_g - xhat * mean_gx);
    }
}

/* dgamma[c] += sum_r dy[r][c] * xhat[r][c], dbeta[c] += sum_r dy[r][c]: a
 * deterministic column reduction shaped like bias_grad_kernel. Either
 * output may be NULL (not written). */
static __global__ void layernorm_param_grad_kernel(const float *x, const float *mean,
                                                   const float *rstd, const float *dy, int rows,
                                                   int cols, float *dgamma, float *dbeta)
{
    __shared__ float part_g[COL_Y][COL_X + 1];
    __shared__ float part_b[COL_Y][COL_X + 1];
    int c = blockIdx.x * COL_X + threadIdx.x;
    float sg = 0.0f, sb = 0.0f;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += COL_Y) {
            size_t i = (size_t)r * cols + c;
            float xhat = (x[i] - mean[r]) * rstd[r];
            sg += dy[i] * xhat;
            sb += dy[i];
        }
    part_g[threadIdx.y][threadIdx.x] = sg;
    part_b[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float tg = 0.0f, tb = 0.0f;
        for (int k = 0; k < COL_Y; k++) {
            tg += part_g[k][threadIdx.x];
            tb += part_b[k][threadIdx.x];
        }
        if (dgamma)
            dgamma[c] += tg;
        if (dbeta)
            dbeta[c] += tb;
    }
}

template <typename P, typename Y>
static cudaError_t layernorm_forward(const float *x, const P *gamma, const P *beta, int rows,
                                     int cols, Y *y, float *mean, float *rstd, cudaStream_t st)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    layernorm_forward_kernel<<<(unsigned)rows, THREADS, 0, st>>>(x, gamma, beta, cols, y, mean,
                                                                 rstd);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_layernorm_forward(const float *x, const float *gamma,
                                               const float *beta, int rows, int cols, float *y,
                                               float *mean, float *rstd, cudaStream_t st)
{
    return layernorm_forward(x, gamma, beta, rows, cols, y, mean, rstd, st);
}

extern "C" cudaError_t pp_cu_layernorm_forward_bf16w(const float *x, const uint16_t *gamma,
                                                     const uint16_t *beta, int rows, int cols,
                                                     float *y, float *mean, float *rstd,
                                                     cudaStream_t st)
{
    return layernorm_forward(x, gamma, beta, rows, cols, y, mean, rstd, st);
}

extern "C" cudaError_t pp_cu_layernorm_forward_bf16wy(const float *x, const uint16_t *gamma,
                                                      const uint16_t *beta, int rows, int cols,
                                                      uint16_t *y, float *mean, float *rstd,
                                                      cudaStream_t st)
{
    return layernorm_forward(x, gamma, beta, rows, cols, y, mean, rstd, st);
}

/* Two kernels, each launched only when its outputs are wanted (NULL ones
 * are skipped, as on the CPU): a split backward runs the dx kernel in B and
 * the parameter kernel in W, the same launches as one call making both. */
template <typename P>
static cudaError_t layernorm_backward(const float *x, const P *gamma, const float *mean,
                                      const float *rstd, const float *dy, int rows, int cols,
                                      float *dx, float *dgamma, float *dbeta, cudaStream_t st)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    if (dx) {
        layernorm_backward_dx_kernel<<<(unsigned)rows, THREADS, 0, st>>>(x, gamma, mean, rstd, dy,
                                                                         cols, dx);
        cudaError_t rc = cudaGetLastError();
        if (rc != cudaSuccess)
            return rc;
    }
    if (!dgamma && !dbeta)
        return cudaSuccess;
    dim3 block(COL_X, COL_Y);
    unsigned cgrid = (unsigned)((cols + COL_X - 1) / COL_X);
    layernorm_param_grad_kernel<<<cgrid, block, 0, st>>>(x, mean, rstd, dy, rows, cols, dgamma,
                                                         dbeta);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_layernorm_backward(const float *x, const float *gamma,
                                                const float *mean, const float *rstd,
                                                const float *dy, int rows, int cols, float *dx,
                                                float *dgamma, float *dbeta, cudaStream_t st)
{
    return layernorm_backward(x, gamma, mean, rstd, dy, rows, cols, dx, dgamma, dbeta, st);
}

extern "C" cudaError_t pp_cu_layernorm_backward_bf16w(const float *x, const uint16_t *gamma,
                                                      const float *mean, const float *rstd,
                                                      const float *dy, int rows, int cols,
                                                      float *dx, float *dgamma, float *dbeta,
                                                      cudaStream_t st)
{
    return layernorm_backward(x, gamma, mean, rstd, dy, rows, cols, dx, dgamma, dbeta, st);
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy, fused with its backward                            */

/* One block per row. dlogits may alias logits: every element l[j] is read
 * and later written by the same thread (j = threadIdx.x + k * blockDim.x),
 * and the one element read by another thread, the target logit (thread 0),
 * is read before the first block_reduce, whose barriers come before any
 * write. */
static __global__ void softmax_xent_fused_kernel(const float *logits, const int32_t *targets,
                                                 int target_stride, int V, float scale,
                                                 float *dlogits, float *loss)
{
    __shared__ float buf[33];
    int row = blockIdx.x;
    const float *l = logits + (size_t)row * V;
    float *d = dlogits + (size_t)row * V;
    int t = targets[(size_t)row * target_stride];
    float lt = threadIdx.x == 0 ? l[t] : 0.0f;

    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, l[j]);
    mx = block_reduce(mx, MaxOp(), -INFINITY, buf);

    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        s += expf(l[j] - mx);
    s = block_reduce(s, SumOp(), 0.0f, buf);

    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(l[j] - mx) * inv;
        d[j] = (p - (j == t ? 1.0f : 0.0f)) * scale;
    }
    if (threadIdx.x == 0)
        loss[row] = logf(s) - (lt - mx);
}

extern "C" cudaError_t pp_cu_softmax_xent_fused(const float *logits, const int32_t *targets,
                                                int target_stride, int rows, int V, float scale,
                                                float *dlogits, float *loss, cudaStream_t st)
{
    if (rows <= 0 || V <= 0)
        return cudaSuccess;
    softmax_xent_fused_kernel<<<(unsigned)rows, THREADS, 0, st>>>(logits, targets, target_stride, V,
                                                                  scale, dlogits, loss);
    return cudaGetLastError();
}

/* *acc += sum of loss[0..n): each block sums its part in double and adds it
 * with one double atomicAdd (sm_60 and newer). */
static __global__ void sum_into_kernel(const float *loss, int n, double *acc)
{
    __shared__ double buf[33];
    double s = 0.0;
    for (size_t i = global_index(); i < (size_t)n; i += global_stride())
        s += (double)loss[i];
    s = block_reduce(s, SumOp(), 0.0, buf);
    if (threadIdx.x == 0)
        atomicAdd(acc, s);
}

extern "C" cudaError_t pp_cu_sum_into(const float *loss, int n, double *acc, cudaStream_t st)
{
    if (n <= 0)
        return cudaSuccess;
    sum_into_kernel<<<grid_for((size_t)n), THREADS, 0, st>>>(loss, n, acc);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* Optimisers                                                                */

/* The updates' arithmetic is optim_step_cuda.h's, shared with a replayed
 * step's kernels (optim_graph_cuda.cu). */
static __global__ void sgd_step_kernel(float *p, float *g, size_t n, float lr, uint16_t *copy)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        pp_cu_sgd_one(p, g, i, lr, copy);
}

/* bc1 = 1 - beta1^t and bc2 = 1 - beta2^t come from the host, computed as
 * pp_adamw_step computes them. */
static __global__ void adamw_step_kernel(float *p, float *g, float *m, float *v, size_t n, float lr,
                                         float beta1, float beta2, float eps, float weight_decay,
                                         float bc1, float bc2, uint16_t *copy)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        pp_cu_adamw_one(p, g, m, v, i, lr, beta1, beta2, eps, weight_decay, bc1, bc2, copy);
}

extern "C" cudaError_t pp_cu_sgd_step(float *p, float *g, size_t n, float lr, uint16_t *copy,
                                      cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    sgd_step_kernel<<<grid_for(n), THREADS, 0, st>>>(p, g, n, lr, copy);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_adamw_step(float *p, float *g, float *m, float *v, size_t n, int t,
                                        float lr, float beta1, float beta2, float eps,
                                        float weight_decay, uint16_t *copy, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    adamw_step_kernel<<<grid_for(n), THREADS, 0, st>>>(p, g, m, v, n, lr, beta1, beta2, eps,
                                                       weight_decay, bc1, bc2, copy);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* bf16                                                                      */

static __global__ void f32_to_bf16_kernel(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}

/* bf16 is the upper half of a float: widening is a shift, exact. */
static __global__ void bf16_to_f32_kernel(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        dst[i] = __uint_as_float((unsigned)src[i] << 16);
}

extern "C" cudaError_t pp_cu_f32_to_bf16(const float *src, uint16_t *dst, size_t n, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    f32_to_bf16_kernel<<<grid_for(n), THREADS, 0, st>>>(src, dst, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_bf16_to_f32(const uint16_t *src, float *dst, size_t n, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    bf16_to_f32_kernel<<<grid_for(n), THREADS, 0, st>>>(src, dst, n);
    return cudaGetLastError();
}

/* bf16 rounding in fp32 storage: the value a bf16 GEMM operand holds. */
static __global__ void round_bf16_kernel(const float *src, float *dst, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride())
        dst[i] = __bfloat162float(__float2bfloat16_rn(src[i]));
}

extern "C" cudaError_t pp_cu_round_bf16(const float *src, float *dst, size_t n, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    round_bf16_kernel<<<grid_for(n), THREADS, 0, st>>>(src, dst, n);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* The gpt model: token + position embeddings, targets, attention pieces     */

/* out is [B][T][C]; element i is position r = i / C (sample r / T, position
 * t = r % T), component c. Tokens rows have T + 1 entries. */
template <typename P>
static __global__ void embedding_pos_forward_kernel(const int32_t *tokens, int T, const P *wte,
                                                    const P *wpe, int C, float *out, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride()) {
        size_t r = i / C, c = i % C, b = r / T, t = r % T;
        int32_t tok = tokens[b * (T + 1) + t];
        out[i] = param(wte, (size_t)tok * C + c) + param(wpe, t * C + c);
    }
}

template <typename P>
static cudaError_t embedding_pos_forward(const int32_t *tokens, int B, int T, const P *wte,
                                         const P *wpe, int C, float *out, cudaStream_t st)
{
    size_t n = (size_t)B * T * C;
    if (n == 0)
        return cudaSuccess;
    embedding_pos_forward_kernel<<<grid_for(n), THREADS, 0, st>>>(tokens, T, wte, wpe, C, out, n);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_embedding_pos_forward(const int32_t *tokens, int B, int T,
                                                   const float *wte, const float *wpe, int C,
                                                   float *out, cudaStream_t st)
{
    return embedding_pos_forward(tokens, B, T, wte, wpe, C, out, st);
}

extern "C" cudaError_t pp_cu_embedding_pos_forward_bf16w(const int32_t *tokens, int B, int T,
                                                         const uint16_t *wte, const uint16_t *wpe,
                                                         int C, float *out, cudaStream_t st)
{
    return embedding_pos_forward(tokens, B, T, wte, wpe, C, out, st);
}

/* dwte: embedding_backward's deterministic sum (positions in order, as the
 * CPU adds). dwpe: one thread per (t, c) sums the samples in order b = 0..
 * as the CPU does, then adds once: no atomics. */
static __global__ void embedding_pos_backward_wpe_kernel(int B, int T, const float *dout, int C,
                                                         float *dwpe)
{
    size_t n = (size_t)T * C;
    for (size_t i = global_index(); i < n; i += global_stride()) {
        float s = dwpe[i];
        for (int b = 0; b < B; b++)
            s += dout[(size_t)b * n + i];
        dwpe[i] = s;
    }
}

extern "C" cudaError_t pp_cu_embedding_pos_backward(const int32_t *tokens, int B, int T,
                                                    const float *dout, int C, int V, float *dwte,
                                                    float *dwpe, cudaStream_t st)
{
    size_t n = (size_t)B * T * C;
    if (n == 0)
        return cudaSuccess;
    cudaError_t e = embedding_backward(tokens, B, T, dout, C, V, dwte, st);
    if (e != cudaSuccess)
        return e;
    embedding_pos_backward_wpe_kernel<<<grid_for((size_t)T * C), THREADS, 0, st>>>(B, T, dout, C,
                                                                                   dwpe);
    return cudaGetLastError();
}

static __global__ void gpt_targets_kernel(const int32_t *tokens, int T, int32_t *targets, size_t n)
{
    for (size_t i = global_index(); i < n; i += global_stride()) {
        size_t b = i / T, t = i % T;
        targets[i] = tokens[b * (T + 1) + t + 1];
    }
}

extern "C" cudaError_t pp_cu_gpt_targets(const int32_t *tokens, int B, int T, int32_t *targets,
                                         cudaStream_t st)
{
    size_t n = (size_t)B * T;
    if (n == 0)
        return cudaSuccess;
    gpt_targets_kernel<<<grid_for(n), THREADS, 0, st>>>(tokens, T, targets, n);
    return cudaGetLastError();
}

/* The attention's row blocks (attention_cuda.cu). A block of scores is, per
 * head hh of the batch of heads, rows [rows][ld] at S + hh * stride; row i
 * is query r0 + i and sees keys 0..r0+i of the block's nk = r0 + rows
 * columns. One CUDA block per (row, head): blockIdx.x the row, blockIdx.y
 * the head. lse of (head hh, row i) is at lse[hh * lse_stride + i]. */

static __device__ __forceinline__ float round_bf16_dev(float x)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}

/* P = softmax over the causal row (scores already scaled), in place; zeros
 * beyond the row's last key; lse = max + log(sum); P rounded to bf16 when
 * bf16. The sum in double, as the CPU. */
static __global__ void attn_softmax_kernel(float *S, int ld, long long stride, int r0, int nk,
                                           float *lse, int lse_stride, int bf16)
{
    __shared__ float fbuf[33];
    __shared__ double dbuf[33];
    int i = blockIdx.x, hh = blockIdx.y, n = r0 + i + 1;
    float *s = S + (size_t)hh * (size_t)stride + (size_t)i * ld;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        mx = fmaxf(mx, s[j]);
    mx = block_reduce(mx, MaxOp(), -INFINITY, fbuf);
    double sum = 0.0;
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        sum += (double)expf(s[j] - mx);
    sum = block_reduce(sum, SumOp(), 0.0, dbuf);
    float inv = (float)(1.0 / sum);
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        float p = j < n ? expf(s[j] - mx) * inv : 0.0f;
        s[j] = bf16 ? round_bf16_dev(p) : p;
    }
    if (threadIdx.x == 0)
        lse[(size_t)hh * lse_stride + i] = mx + (float)log(sum);
}

extern "C" cudaError_t pp_cu_attn_softmax(float *S, int ld, long long stride, int rows, int heads,
                                          int r0, float *lse, int lse_stride, int bf16,
                                          cudaStream_t st)
{
    if (rows <= 0 || heads <= 0)
        return cudaSuccess;
    attn_softmax_kernel<<<dim3((unsigned)rows, (unsigned)heads), THREADS, 0, st>>>(
        S, ld, stride, r0, r0 + rows, lse, lse_stride, bf16);
    return cudaGetLastError();
}

/* The backward's first pass over a block: P = exp(S - lse) (causal, zeros
 * beyond the row's keys), rounded to bf16 when bf16, in place; and D_i =
 * rowsum(dout_i o out_i) over the head's hs columns (out and dout rows of
 * length ld_o, head hh at hh * hs, row i at i * ld_o), summed in double,
 * into D[hh * rows + i]. */
template <typename Dt>
static __global__ void attn_probs_kernel(float *S, int ld, long long stride, int r0, int nk,
                                         const float *lse, int lse_stride, const Dt *out,
                                         const Dt *dout, int ld_o, int hs, float *D, int rows,
                                         int bf16)
{
    __shared__ double dbuf[33];
    int i = blockIdx.x, hh = blockIdx.y, n = r0 + i + 1;
    float *s = S + (size_t)hh * (size_t)stride + (size_t)i * ld;
    float l = lse[(size_t)hh * lse_stride + i];
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        float p = j < n ? expf(s[j] - l) : 0.0f;
        s[j] = bf16 ? round_bf16_dev(p) : p;
    }
    size_t d0 = (size_t)i * ld_o + (size_t)hh * hs;
    double acc = 0.0;
    for (int c = threadIdx.x; c < hs; c += blockDim.x)
        acc += (double)param(out, d0 + (size_t)c) * param(dout, d0 + (size_t)c);
    acc = block_reduce(acc, SumOp(), 0.0, dbuf);
    if (threadIdx.x == 0)
        D[(size_t)hh * rows + i] = (float)acc;
}

extern "C" cudaError_t pp_cu_attn_probs(float *S, int ld, long long stride, int rows, int heads,
                                        int r0, const float *lse, int lse_stride, const float *out,
                                        const float *dout, int ld_o, int hs, float *D, int bf16,
                                        cudaStream_t st)
{
    if (rows <= 0 || heads <= 0)
        return cudaSuccess;
    attn_probs_kernel<<<dim3((unsigned)rows, (unsigned)heads), THREADS, 0, st>>>(
        S, ld, stride, r0, r0 + rows, lse, lse_stride, out, dout, ld_o, hs, D, rows, bf16);
    return cudaGetLastError();
}

extern "C" cudaError_t pp_cu_attn_probs_bf16d(float *S, int ld, long long stride, int rows,
                                              int heads, int r0, const float *lse, int lse_stride,
                                              const uint16_t *out, const uint16_t *dout, int ld_o,
                                              int hs, float *D, cudaStream_t st)
{
    if (rows <= 0 || heads <= 0)
        return cudaSuccess;
    attn_probs_kernel<<<dim3((unsigned)rows, (unsigned)heads), THREADS, 0, st>>>(
        S, ld, stride, r0, r0 + rows, lse, lse_stride, out, dout, ld_o, hs, D, rows, 1);
    return cudaGetLastError();
}

/* Each row's first nk floats as bf16, in place at the start of the row
 * (bf16 element j of row i at byte 4 * i * ld + 2 * j: a row of bf16 with
 * leading dimension 2 * ld elements). A block per (row, head) walks its row
 * in chunks of blockDim: every thread reads its float, a barrier, then
 * writes its bf16, whose bytes lie within floats the chunk (or an earlier
 * one) already read; later chunks read floats no write has reached. Blocks
 * touch only their own row. */
static __global__ void attn_pack_bf16_kernel(float *X, int ld, long long stride, int nk)
{
    int i = blockIdx.x, hh = blockIdx.y;
    float *x = X + (size_t)hh * (size_t)stride + (size_t)i * ld;
    uint16_t *y = (uint16_t *)x;
    for (int base = 0; base < nk; base += blockDim.x) {
        int j = base + (int)threadIdx.x;
        float v = j < nk ? x[j] : 0.0f;
        __syncthreads();
        if (j < nk)
            y[j] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
        __syncthreads();
    }
}

extern "C" cudaError_t pp_cu_attn_pack_bf16(float *X, int ld, long long stride, int rows, int heads,
                                            int nk, cudaStream_t st)
{
    if (rows <= 0 || heads <= 0 || nk <= 0)
        return cudaSuccess;
    attn_pack_bf16_kernel<<<dim3((unsigned)rows, (unsigned)heads), THREADS, 0, st>>>(X, ld, stride,
                                                                                     nk);
    return cudaGetLastError();
}

/* dS = P o (dP - D_i), into dP, rounded to bf16 when bf16 (all nk columns;
 * P is 0 beyond a row's keys, so dS is too). */
static __global__ void attn_dscores_kernel(const float *P, float *dP, int ld, long long stride,
                                           int nk, const float *D, int rows, int bf16)
{
    int i = blockIdx.x, hh = blockIdx.y;
    size_t off = (size_t)hh * (size_t)stride + (size_t)i * ld;
    float di = D[(size_t)hh * rows + i];
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        float ds = P[off + j] * (dP[off + j] - di);
        dP[off + j] = bf16 ? round_bf16_dev(ds) : ds;
    }
}

extern "C" cudaError_t pp_cu_attn_dscores(const float *P, float *dP, int ld, long long stride,
                                          int rows, int heads, int r0, const float *D, int bf16,
                                          cudaStream_t st)
{
    if (rows <= 0 || heads <= 0)
        return cudaSuccess;
    attn_dscores_kernel<<<dim3((unsigned)rows, (unsigned)heads), THREADS, 0, st>>>(
        P, dP, ld, stride, r0 + rows, D, rows, bf16);
    return cudaGetLastError();
}
