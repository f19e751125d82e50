/* stage_gemm.c - the precision rule every model's stages share (see
 * stage_gemm.h). */
#include "stage_gemm.h"

#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

pp_stage_gemms pp_stage_gemms_of(int bf16, void *work, size_t ca, size_t cb)
{
    pp_stage_gemms g = {bf16, NULL, NULL};
    if (bf16) {
        g.ca = (float *)((char *)work + ca);
        g.cb = (float *)((char *)work + cb);
    }
    return g;
}

void pp_gemm_aw(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const float *A,
                const float *W, float beta, float *C)
{
    if (g->bf16) {
        pp_round_bf16(A, g->ca, (size_t)M * (size_t)K);
        A = g->ca;
    }
    pp_gemm(ta, tb, M, N, K, 1.0f, A, W, beta, C);
}

void pp_gemm_aa(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const float *A,
                const float *B, float *C)
{
    if (g->bf16) {
        pp_round_bf16(A, g->ca, (size_t)M * (size_t)K);
        pp_round_bf16(B, g->cb, (size_t)K * (size_t)N);
        A = g->ca;
        B = g->cb;
    }
    pp_gemm(ta, tb, M, N, K, 1.0f, A, B, 1.0f, C);
}

void pp_act_put(const pp_stage_gemms *g, const float *src, void *dst, size_t n)
{
    if (g->bf16)
        pp_f32_to_bf16(src, (uint16_t *)dst, n);
    else if ((const void *)src != dst)
        memcpy(dst, src, n * sizeof *src);
}

const float *pp_act_get(const pp_stage_gemms *g, const void *src, size_t n, float *tmp)
{
    if (!g->bf16)
        return (const float *)src;
    pp_bf16_to_f32((const uint16_t *)src, tmp, n);
    return tmp;
}

void pp_gemm_sw(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const void *A,
                const float *W, float beta, float *C)
{
    const float *a = pp_act_get(g, A, (size_t)M * (size_t)K, g->ca);
    pp_gemm(ta, tb, M, N, K, 1.0f, a, W, beta, C);
}

void pp_gemm_as(const pp_stage_gemms *g, int ta, int tb, int M, int N, int K, const float *A,
                const void *B, float *C)
{
    if (g->bf16) {
        pp_round_bf16(A, g->ca, (size_t)M * (size_t)K);
        A = g->ca;
    }
    pp_gemm(ta, tb, M, N, K, 1.0f, A, pp_act_get(g, B, (size_t)K * (size_t)N, g->cb), 1.0f, C);
}

const float *pp_stage_params_of(int bf16, size_t total, const void *weights, void *wide)
{
    if (!bf16 || total == 0)
        return weights;
    pp_bf16_to_f32(weights, wide, total);
    return wide;
}
