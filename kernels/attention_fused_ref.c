/* attention_fused_ref.c - the plain C reference of the fused attention's
 * CUDA kernels (attention_fused.h, attention_fused_cuda.cu): the same
 * blocks, tiles and warps, run one after another, each lane's sum in the
 * lane's order and each cross-lane sum as the kernels' xor butterfly
 * (offsets 16, 8, 4, 2, 1), so without fused multiply-adds the two give
 * the same bits. Slow on purpose: it is for the tests, not for training
 * (the cpu backend's attention is pp_attention_forward, cpu_kernels.c). */
#include "attention_fused.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cpu_kernels.h"

enum { LANES = 32 };

static float rnd(float x)
{
    pp_round_bf16(&x, &x, 1);
    return x;
}

/* The butterfly over 32 lanes' values: after offsets 16 .. 1 every lane
 * holds the same sum; lane 0's is returned. */
static float lane_sum(const float *v)
{
    float a[LANES], t[LANES];
    memcpy(a, v, sizeof a);
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < LANES; l++)
            t[l] = a[l] + a[l ^ o];
        memcpy(a, t, sizeof a);
    }
    return a[0];
}

static double lane_sum_d(const double *v)
{
    double a[LANES], t[LANES];
    memcpy(a, v, sizeof a);
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < LANES; l++)
            t[l] = a[l] + a[l ^ o];
        memcpy(a, t, sizeof a);
    }
    return a[0];
}

static float lane_max(const float *v)
{
    float m = v[0];
    for (int l = 1; l < LANES; l++)
        m = fmaxf(m, v[l]);
    return m;
}

/* row_D of the kernels: lane l sums d = l, l + 32, ... in double. */
static float row_D(const float *o, const float *dO, int hs)
{
    double a[LANES];
    for (int l = 0; l < LANES; l++) {
        a[l] = 0.0;
        for (int d = l; d < hs; d += LANES)
            a[l] += (double)o[d] * (double)dO[d];
    }
    return (float)lane_sum_d(a);
}

static float dot(const float *x, size_t xs, const float *y, size_t ys, int n)
{
    float a = 0.0f;
    for (int d = 0; d < n; d++)
        a += x[d * xs] * y[d * ys];
    return a;
}

void pp_attention_fused_forward_ref(const float *qkv, float *out, float *lse, int B, int T, int C,
                                    int NH, int bf16)
{
    if (B <= 0 || T <= 0 || !pp_attention_fused_ok(C, NH))
        return;
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    float o[PP_ATT_FUSED_HS_MAX], s[LANES], p[LANES], P[LANES];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
            /* a row's state is the warp's; rows are independent */
            for (int i = 0; i < T; i++) {
                float m = -INFINITY, l = 0.0f;
                for (int d = 0; d < hs; d++)
                    o[d] = 0.0f;
                /* fp32 one pass; bf16 pass 0 for (m, l), then the lse in m */
                for (int pass = bf16 ? 0 : 1; pass < 2; pass++) {
                    for (int k0 = 0; k0 <= i; k0 += PP_ATT_FUSED_BC) {
                        for (int ln = 0; ln < LANES; ln++) {
                            int j = k0 + ln;
                            s[ln] = j <= i ? scale * dot(q + (size_t)i * C3, 1, k + (size_t)j * C3,
                                                         1, hs)
                                           : -INFINITY;
                        }
                        float alpha = 1.0f;
                        if (bf16 && pass == 1) {
                            for (int ln = 0; ln < LANES; ln++)
                                P[ln] = k0 + ln <= i ? rnd(expf(s[ln] - m)) : 0.0f;
                        } else {
                            float mn = fmaxf(m, lane_max(s));
                            for (int ln = 0; ln < LANES; ln++)
                                P[ln] = p[ln] = k0 + ln <= i ? expf(s[ln] - mn) : 0.0f;
                            alpha = expf(m - mn);
                            l = l * alpha + lane_sum(p);
                            m = mn;
                            if (bf16)
                                continue;
                        }
                        int jn = i - k0 + 1 < PP_ATT_FUSED_BC ? i - k0 + 1 : PP_ATT_FUSED_BC;
                        for (int d = 0; d < hs; d++) {
                            float a = 0.0f;
                            for (int jj = 0; jj < jn; jj++)
                                a += P[jj] * v[(size_t)(k0 + jj) * C3 + d];
                            o[d] = bf16 ? o[d] + a : o[d] * alpha + a;
                        }
                    }
                    if (pass == 0)
                        m = m + logf(l);
                }
                float *orow = out + ((size_t)b * T + i) * C + (size_t)h * hs;
                for (int d = 0; d < hs; d++)
                    orow[d] = bf16 ? o[d] : o[d] / l;
                lse[((size_t)b * NH + h) * T + i] = bf16 ? m : m + logf(l);
            }
        }
}

void pp_attention_fused_backward_ref(const float *qkv, const float *out, const float *dout,
                                     const float *lse, float *dqkv, int B, int T, int C, int NH,
                                     int bf16)
{
    if (B <= 0 || T <= 0 || !pp_attention_fused_ok(C, NH))
        return;
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    float acc[PP_ATT_FUSED_HS_MAX], acc2[PP_ATT_FUSED_HS_MAX], dS[LANES], P[LANES];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
            size_t ooff = (size_t)b * T * C + (size_t)h * hs;
            const float *o = out + ooff, *dO = dout + ooff, *L = lse + ((size_t)b * NH + h) * T;
            float *dq = dqkv + (size_t)b * T * C3 + (size_t)h * hs, *dk = dq + C, *dv = dq + 2 * C;
            /* dq (fa_backward_dq): per query row, key tiles from 0 */
            for (int i = 0; i < T; i++) {
                const float *qi = q + (size_t)i * C3, *di = dO + (size_t)i * C;
                float D = row_D(o + (size_t)i * C, di, hs);
                for (int d = 0; d < hs; d++)
                    acc[d] = 0.0f;
                for (int k0 = 0; k0 <= i; k0 += PP_ATT_FUSED_BC) {
                    for (int ln = 0; ln < LANES; ln++) {
                        int j = k0 + ln;
                        dS[ln] = 0.0f;
                        if (j > i)
                            continue;
                        float p = expf(scale * dot(qi, 1, k + (size_t)j * C3, 1, hs) - L[i]);
                        if (bf16)
                            p = rnd(p);
                        float ds = p * (dot(di, 1, v + (size_t)j * C3, 1, hs) - D);
                        dS[ln] = bf16 ? rnd(ds) : ds;
                    }
                    int jn = i - k0 + 1 < PP_ATT_FUSED_BC ? i - k0 + 1 : PP_ATT_FUSED_BC;
                    for (int d = 0; d < hs; d++)
                        for (int jj = 0; jj < jn; jj++)
                            acc[d] += dS[jj] * k[(size_t)(k0 + jj) * C3 + d];
                }
                for (int d = 0; d < hs; d++)
                    dq[(size_t)i * C3 + d] = scale * acc[d];
            }
            /* dk, dv (fa_backward_dkdv): per key, query tiles from the key
             * block's first key */
            for (int j = 0; j < T; j++) {
                int kb = j - j % PP_ATT_FUSED_BKC;
                for (int d = 0; d < hs; d++)
                    acc[d] = acc2[d] = 0.0f;
                for (int i0 = kb; i0 < T; i0 += PP_ATT_FUSED_BQ) {
                    for (int ln = 0; ln < LANES; ln++) {
                        int i = i0 + ln;
                        P[ln] = dS[ln] = 0.0f;
                        if (i < j || i >= T)
                            continue;
                        const float *di = dO + (size_t)i * C;
                        float D = row_D(o + (size_t)i * C, di, hs);
                        float p = expf(
                            scale * dot(q + (size_t)i * C3, 1, k + (size_t)j * C3, 1, hs) - L[i]);
                        if (bf16)
                            p = rnd(p);
                        float ds = p * (dot(di, 1, v + (size_t)j * C3, 1, hs) - D);
                        P[ln] = p;
                        dS[ln] = bf16 ? rnd(ds) : ds;
                    }
                    int ia = j - i0 > 0 ? j - i0 : 0;
                    int ib = T - i0 < PP_ATT_FUSED_BQ ? T - i0 : PP_ATT_FUSED_BQ;
                    for (int d = 0; d < hs; d++)
                        for (int ii = ia; ii < ib; ii++) {
                            acc2[d] += P[ii] * dO[(size_t)(i0 + ii) * C + d];
                            acc[d] += dS[ii] * q[(size_t)(i0 + ii) * C3 + d];
                        }
                }
                for (int d = 0; d < hs; d++) {
                    dk[(size_t)j * C3 + d] = scale * acc[d];
                    dv[(size_t)j * C3 + d] = acc2[d];
                }
            }
        }
}
