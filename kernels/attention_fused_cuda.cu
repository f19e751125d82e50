/* attention_fused_cuda.cu - the fused causal attention's CUDA kernels
 * (attention_fused.h: the algorithm and the tiles; attention_fused_ref.c is
 * the same code in plain C, sum for sum). Every block has 4 warps of 32
 * lanes; a warp owns query rows (forward, dq) or keys (dk, dv), and a lane
 * owns one key or query of a 32-wide tile while scores are formed, then the
 * columns d = lane + 32 c (c < NC = ceil(hs / 32)) while rows of V, K, Q or
 * dout are summed, so a dot product over hs is a lane's own sequential sum
 * and the only cross-lane sums are xor butterflies (every lane gets the
 * same bits). Shared tiles read lane-per-row have hs_max + 1 floats a row
 * so those reads fall in distinct banks. These are CUDA-core kernels (fp32
 * FMAs on tiles in shared memory), not tensor-core ones. */
#include "attention_fused_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"

enum {
    HSM = PP_ATT_FUSED_HS_MAX,
    HP = PP_ATT_FUSED_HS_MAX + 1,
    NW = PP_ATT_FUSED_WARPS,
    NT = 32 * PP_ATT_FUSED_WARPS,
    RW = PP_ATT_FUSED_RW,
    BR = PP_ATT_FUSED_BR,
    BC = PP_ATT_FUSED_BC,
    QW = PP_ATT_FUSED_QW,
    BRQ = PP_ATT_FUSED_BRQ,
    KW = PP_ATT_FUSED_KW,
    BKC = PP_ATT_FUSED_BKC,
    BQ = PP_ATT_FUSED_BQ,
    DROWS = PP_ATT_FUSED_BQ / PP_ATT_FUSED_WARPS /* D rows per warp in dk/dv */
};

static __device__ __forceinline__ float elem(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float elem(const uint16_t *p, size_t i)
{
    return __uint_as_float((unsigned)p[i] << 16);
}

static __device__ __forceinline__ float rnd(float x)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}

/* out's element i = v: fp32, or bf16 rounded to nearest even. */
static __device__ __forceinline__ void put(float *p, size_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void put(uint16_t *p, size_t i, float v)
{
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* The xor butterflies: offsets 16, 8, 4, 2, 1 (the reference's order). */
static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* D_i = rowsum(dout_i o out_i) in double: lane sums d = lane, lane + 32,
 * ..., then the butterfly (out fp32, or bf16 widened). Every lane of the
 * warp calls it. */
template <typename E>
static __device__ __forceinline__ float row_D(const E *o, const float *dO, int hs, int lane)
{
    double a = 0.0;
    for (int d = lane; d < hs; d += 32)
        a += (double)elem(o, (size_t)d) * (double)dO[d];
    return (float)warp_sum_d(a);
}

/* rows r0.. of a [T][ld] matrix's columns off..off+hs-1 into dst[r][0..hs)
 * (row stride dstride), zeros past row T. */
template <typename E>
static __device__ __forceinline__ void load_rows(float *dst, int dstride, int nrows, const E *src,
                                                 size_t ld, int r0, int T, int hs)
{
    for (int e = (int)threadIdx.x; e < nrows * hs; e += NT) {
        int r = e / hs, d = e % hs;
        dst[r * dstride + d] = r0 + r < T ? elem(src, (size_t)(r0 + r) * ld + d) : 0.0f;
    }
}

/* Forward: block (query tile, head, sample); warp w owns rows q0 + w RW ..
 * + RW - 1. Per key tile and row: lane j's score, the tile max and sum,
 * the running (m, l) and o rescaled by exp(m_old - m_new), then o += P V;
 * with bf16 a first pass for (m, l) (below), and out written in bf16. */
template <int NC, typename E>
static __global__ void fa_forward(const E *qkv, E *out, float *lse, int T, int C, int NH,
                                  float scale)
{
    const bool bf16 = sizeof(E) == 2;
    __shared__ float Qs[BR][HSM];
    __shared__ float Ks[BC][HP];
    __shared__ float Vs[BC][HSM];
    __shared__ float Ps[NW][BC];
    int hs = C / NH, C3 = 3 * C, h = (int)blockIdx.y, b = (int)blockIdx.z;
    int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, q0 = (int)blockIdx.x * BR;
    const E *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    load_rows(&Qs[0][0], HSM, BR, base, (size_t)C3, q0, T, hs);
    float m[RW], l[RW], o[RW][NC];
    for (int r = 0; r < RW; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int c = 0; c < NC; c++)
            o[r][c] = 0.0f;
    }
    int kend = T < q0 + BR ? T : q0 + BR;
    /* fp32: one pass. bf16: pass 0 the running (m, l) alone, then the
     * row's lse, and pass 1 P = round(exp(s - lse)) into o: P normalised
     * before it is rounded, as the cpu backend rounds it. */
    for (int pass = bf16 ? 0 : 1; pass < 2; pass++) {
        for (int k0 = 0; k0 < kend; k0 += BC) {
            __syncthreads();
            load_rows(&Ks[0][0], HP, BC, base + C, (size_t)C3, k0, T, hs);
            if (pass == 1)
                load_rows(&Vs[0][0], HSM, BC, base + 2 * C, (size_t)C3, k0, T, hs);
            __syncthreads();
            for (int r = 0; r < RW; r++) {
                int il = w * RW + r, i = q0 + il, j = k0 + lane;
                if (i >= T || k0 > i) /* the whole warp alike */
                    continue;
                float s = -INFINITY;
                if (j <= i) {
                    float a = 0.0f;
                    for (int d = 0; d < hs; d++)
                        a += Qs[il][d] * Ks[lane][d];
                    s = scale * a;
                }
                float p, alpha = 1.0f;
                if (bf16 && pass == 1) {
                    p = j <= i ? rnd(expf(s - m[r])) : 0.0f; /* m[r] holds the lse here */
                } else {
                    float mn = fmaxf(m[r], warp_max(s));
                    p = j <= i ? expf(s - mn) : 0.0f;
                    alpha = expf(m[r] - mn);
                    l[r] = l[r] * alpha + warp_sum(p);
                    m[r] = mn;
                    if (bf16) /* pass 0 */
                        continue;
                }
                __syncwarp();
                Ps[w][lane] = p;
                __syncwarp();
                int jn = i - k0 + 1 < BC ? i - k0 + 1 : BC;
                for (int c = 0; c < NC; c++) {
                    int d = lane + 32 * c;
                    if (d >= hs)
                        continue;
                    float a = 0.0f;
                    for (int jj = 0; jj < jn; jj++)
                        a += Ps[w][jj] * Vs[jj][d];
                    o[r][c] = bf16 ? o[r][c] + a : o[r][c] * alpha + a;
                }
            }
        }
        if (pass == 0)
            for (int r = 0; r < RW; r++)
                m[r] = m[r] + logf(l[r]);
    }
    for (int r = 0; r < RW; r++) {
        int i = q0 + w * RW + r;
        if (i >= T)
            continue;
        E *orow = out + ((size_t)b * T + i) * C + (size_t)h * hs;
        for (int c = 0; c < NC; c++)
            if (lane + 32 * c < hs)
                put(orow, (size_t)(lane + 32 * c), bf16 ? o[r][c] : o[r][c] / l[r]);
        if (lane == 0)
            lse[((size_t)b * NH + h) * T + i] = bf16 ? m[r] : m[r] + logf(l[r]);
    }
}

/* dq: block (query tile of BRQ rows, head, sample); warp w owns QW rows.
 * Per key tile and row: lane j's P = exp(s - lse), dP = dout . v_j, dS = P
 * (dP - D); then dq += dS K; dq * scale at the end. */
template <int NC, typename E>
static __global__ void fa_backward_dq(const E *qkv, const E *out, const E *dout, const float *lse,
                                      float *dqkv, int T, int C, int NH, float scale)
{
    const bool bf16 = sizeof(E) == 2;
    __shared__ float Qs[BRQ][HSM];
    __shared__ float dOs[BRQ][HSM];
    __shared__ float Ks[BC][HP];
    __shared__ float Vs[BC][HP];
    __shared__ float dSs[NW][BC];
    int hs = C / NH, C3 = 3 * C, h = (int)blockIdx.y, b = (int)blockIdx.z;
    int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, q0 = (int)blockIdx.x * BRQ;
    const E *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    size_t ooff = (size_t)b * T * C + (size_t)h * hs;
    load_rows(&Qs[0][0], HSM, BRQ, base, (size_t)C3, q0, T, hs);
    load_rows(&dOs[0][0], HSM, BRQ, dout + ooff, (size_t)C, q0, T, hs);
    __syncthreads();
    float D[QW], L[QW], dq[QW][NC];
    for (int r = 0; r < QW; r++) {
        int il = w * QW + r, i = q0 + il;
        D[r] = L[r] = 0.0f;
        for (int c = 0; c < NC; c++)
            dq[r][c] = 0.0f;
        if (i < T) {
            D[r] = row_D(out + ooff + (size_t)i * C, dOs[il], hs, lane);
            L[r] = lse[((size_t)b * NH + h) * T + i];
        }
    }
    int kend = T < q0 + BRQ ? T : q0 + BRQ;
    for (int k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();
        load_rows(&Ks[0][0], HP, BC, base + C, (size_t)C3, k0, T, hs);
        load_rows(&Vs[0][0], HP, BC, base + 2 * C, (size_t)C3, k0, T, hs);
        __syncthreads();
        for (int r = 0; r < QW; r++) {
            int il = w * QW + r, i = q0 + il, j = k0 + lane;
            if (i >= T || k0 > i)
                continue;
            float ds = 0.0f;
            if (j <= i) {
                float a = 0.0f, g = 0.0f;
                for (int d = 0; d < hs; d++)
                    a += Qs[il][d] * Ks[lane][d];
                float p = expf(scale * a - L[r]);
                if (bf16)
                    p = rnd(p);
                for (int d = 0; d < hs; d++)
                    g += dOs[il][d] * Vs[lane][d];
                ds = p * (g - D[r]);
                if (bf16)
                    ds = rnd(ds);
            }
            __syncwarp();
            dSs[w][lane] = ds;
            __syncwarp();
            int jn = i - k0 + 1 < BC ? i - k0 + 1 : BC;
            for (int c = 0; c < NC; c++) {
                int d = lane + 32 * c;
                if (d >= hs)
                    continue;
                for (int jj = 0; jj < jn; jj++)
                    dq[r][c] += dSs[w][jj] * Ks[jj][d];
            }
        }
    }
    for (int r = 0; r < QW; r++) {
        int i = q0 + w * QW + r;
        if (i >= T)
            continue;
        float *row = dqkv + ((size_t)b * T + i) * C3 + (size_t)h * hs;
        for (int c = 0; c < NC; c++)
            if (lane + 32 * c < hs)
                row[lane + 32 * c] = scale * dq[r][c];
    }
}

/* dk, dv: block (key tile of BKC keys, head, sample); warp w owns KW keys.
 * Per query tile (from the block's first key on): D and lse of its rows,
 * then per key lane i's P and dS, then dv += P^T dout, dk += dS^T Q; dk *
 * scale at the end. */
template <int NC, typename E>
static __global__ void fa_backward_dkdv(const E *qkv, const E *out, const E *dout, const float *lse,
                                        float *dqkv, int T, int C, int NH, float scale)
{
    const bool bf16 = sizeof(E) == 2;
    __shared__ float Ks[BKC][HSM];
    __shared__ float Vs[BKC][HSM];
    __shared__ float Qs[BQ][HP];
    __shared__ float dOs[BQ][HP];
    __shared__ float Ls[BQ], Ds[BQ];
    __shared__ float Ps[NW][BQ], dSs[NW][BQ];
    int hs = C / NH, C3 = 3 * C, h = (int)blockIdx.y, b = (int)blockIdx.z;
    int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, k0 = (int)blockIdx.x * BKC;
    const E *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    size_t ooff = (size_t)b * T * C + (size_t)h * hs;
    load_rows(&Ks[0][0], HSM, BKC, base + C, (size_t)C3, k0, T, hs);
    load_rows(&Vs[0][0], HSM, BKC, base + 2 * C, (size_t)C3, k0, T, hs);
    float dk[KW][NC], dv[KW][NC];
    for (int kk = 0; kk < KW; kk++)
        for (int c = 0; c < NC; c++)
            dk[kk][c] = dv[kk][c] = 0.0f;
    for (int i0 = k0; i0 < T; i0 += BQ) {
        __syncthreads();
        load_rows(&Qs[0][0], HP, BQ, base, (size_t)C3, i0, T, hs);
        load_rows(&dOs[0][0], HP, BQ, dout + ooff, (size_t)C, i0, T, hs);
        __syncthreads();
        for (int rr = 0; rr < DROWS; rr++) {
            int il = w * DROWS + rr, i = i0 + il;
            if (i >= T)
                continue;
            float d = row_D(out + ooff + (size_t)i * C, dOs[il], hs, lane);
            if (lane == 0) {
                Ds[il] = d;
                Ls[il] = lse[((size_t)b * NH + h) * T + i];
            }
        }
        __syncthreads();
        int ib = T - i0 < BQ ? T - i0 : BQ;
        for (int kk = 0; kk < KW; kk++) {
            int jl = w * KW + kk, j = k0 + jl, i = i0 + lane;
            if (j >= T)
                continue;
            float p = 0.0f, ds = 0.0f;
            if (i >= j && i < T) {
                float a = 0.0f, g = 0.0f;
                for (int d = 0; d < hs; d++)
                    a += Qs[lane][d] * Ks[jl][d];
                p = expf(scale * a - Ls[lane]);
                if (bf16)
                    p = rnd(p);
                for (int d = 0; d < hs; d++)
                    g += dOs[lane][d] * Vs[jl][d];
                ds = p * (g - Ds[lane]);
                if (bf16)
                    ds = rnd(ds);
            }
            __syncwarp();
            Ps[w][lane] = p;
            dSs[w][lane] = ds;
            __syncwarp();
            int ia = j - i0 > 0 ? j - i0 : 0;
            for (int c = 0; c < NC; c++) {
                int d = lane + 32 * c;
                if (d >= hs)
                    continue;
                for (int ii = ia; ii < ib; ii++) {
                    dv[kk][c] += Ps[w][ii] * dOs[ii][d];
                    dk[kk][c] += dSs[w][ii] * Qs[ii][d];
                }
            }
        }
    }
    for (int kk = 0; kk < KW; kk++) {
        int j = k0 + w * KW + kk;
        if (j >= T)
            continue;
        float *row = dqkv + ((size_t)b * T + j) * C3 + (size_t)h * hs;
        for (int c = 0; c < NC; c++)
            if (lane + 32 * c < hs) {
                row[C + lane + 32 * c] = scale * dk[kk][c];
                row[2 * C + lane + 32 * c] = dv[kk][c];
            }
    }
}

static int cdiv(int a, int b) { return (a + b - 1) / b; }

template <int NC, typename E>
static void launch_forward(cudaStream_t st, const E *qkv, E *out, float *lse, int B, int T, int C,
                           int NH, float scale)
{
    dim3 grid((unsigned)cdiv(T, BR), (unsigned)NH, (unsigned)B);
    auto k = fa_forward<NC, E>; /* a plain name for the launch (rewrite_launches.pl) */
    k<<<grid, NT, 0, st>>>(qkv, out, lse, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

template <int NC, typename E>
static void launch_backward(cudaStream_t st, const E *qkv, const E *out, const E *dout,
                            const float *lse, float *dqkv, int B, int T, int C, int NH, float scale)
{
    dim3 gq((unsigned)cdiv(T, BRQ), (unsigned)NH, (unsigned)B);
    auto kq = fa_backward_dq<NC, E>;
    kq<<<gq, NT, 0, st>>>(qkv, out, dout, lse, dqkv, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
    dim3 gk((unsigned)cdiv(T, BKC), (unsigned)NH, (unsigned)B);
    auto kk = fa_backward_dkdv<NC, E>;
    kk<<<gk, NT, 0, st>>>(qkv, out, dout, lse, dqkv, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
}

/* NC = ceil(hs / 32) picks the instantiation (registers per lane). */
template <typename E>
static void forward_nc(cudaStream_t st, const E *qkv, E *out, float *lse, int B, int T, int C,
                       int NH, float scale)
{
    switch ((C / NH + 31) / 32) {
    case 1:
        launch_forward<1>(st, qkv, out, lse, B, T, C, NH, scale);
        break;
    case 2:
        launch_forward<2>(st, qkv, out, lse, B, T, C, NH, scale);
        break;
    case 3:
        launch_forward<3>(st, qkv, out, lse, B, T, C, NH, scale);
        break;
    default:
        launch_forward<4>(st, qkv, out, lse, B, T, C, NH, scale);
        break;
    }
}

template <typename E>
static void backward_nc(cudaStream_t st, const E *qkv, const E *out, const E *dout,
                        const float *lse, float *dqkv, int B, int T, int C, int NH, float scale)
{
    switch ((C / NH + 31) / 32) {
    case 1:
        launch_backward<1>(st, qkv, out, dout, lse, dqkv, B, T, C, NH, scale);
        break;
    case 2:
        launch_backward<2>(st, qkv, out, dout, lse, dqkv, B, T, C, NH, scale);
        break;
    case 3:
        launch_backward<3>(st, qkv, out, dout, lse, dqkv, B, T, C, NH, scale);
        break;
    default:
        launch_backward<4>(st, qkv, out, dout, lse, dqkv, B, T, C, NH, scale);
        break;
    }
}

extern "C" void pp_cu_attention_fused_forward(cudaStream_t st, const void *qkv, void *out,
                                              float *lse, int B, int T, int C, int NH, int bf16)
{
    if (B <= 0 || T <= 0 || !pp_attention_fused_ok(C, NH))
        return;
    float scale = 1.0f / sqrtf((float)(C / NH));
    if (bf16)
        forward_nc(st, (const uint16_t *)qkv, (uint16_t *)out, lse, B, T, C, NH, scale);
    else
        forward_nc(st, (const float *)qkv, (float *)out, lse, B, T, C, NH, scale);
}

extern "C" void pp_cu_attention_fused_backward(cudaStream_t st, const void *qkv, const void *out,
                                               const void *dout, const float *lse, float *dqkv,
                                               int B, int T, int C, int NH, int bf16)
{
    if (B <= 0 || T <= 0 || !pp_attention_fused_ok(C, NH))
        return;
    float scale = 1.0f / sqrtf((float)(C / NH));
    if (bf16)
        backward_nc(st, (const uint16_t *)qkv, (const uint16_t *)out, (const uint16_t *)dout, lse,
                    dqkv, B, T, C, NH, scale);
    else
        backward_nc(st, (const float *)qkv, (const float *)out, (const float *)dout, lse, dqkv, B,
                    T, C, NH, scale);
}

extern "C" int pp_cu_attention_fused_use(int C, int NH)
{
    static int said;
    const char *e = getenv("PP_ATTENTION");
    if (e && strcmp(e, "blocked") == 0)
        return 0;
    if (pp_attention_fused_ok(C, NH))
        return 1;
    if (!said) {
        said = 1;
        fprintf(stderr,
                "ppvm: attention: head size %d (C %d, %d heads) is not taken by the fused "
                "kernels (1 to %d, C divisible by the heads): the blocked cuBLAS attention "
                "runs\n",
                NH > 0 ? C / NH : 0, C, NH, (int)PP_ATT_FUSED_HS_MAX);
    }
    return 0;
}
