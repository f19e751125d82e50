/* test_attention_fused.c - the fused attention (kernels/attention_fused.h).
 * Suite attention_ref (CPU): the plain C reference of the tiled,
 * online-softmax algorithm against the cpu backend's attention
 * (pp_attention_forward/_backward, cpu_kernels.c) on random inputs, fp32
 * and bf16, head sizes 2 to 128 (64 and 128 included), T from 1 to past
 * two key tiles. Suite attention_fused (GPU; on the host stand-ins where
 * there is no GPU): the CUDA kernels against the reference (the same bits
 * on the stand-ins, which run the kernel code on the host without fused
 * multiply-adds; within float rounding on a GPU) and against the cpu
 * backend's attention with test_cuda_kernels.c's attention tolerances.
 * Without a GPU the GPU tests print "skipped: no GPU" and pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/attention_fused.h"
#include "../../kernels/cpu_kernels.h"
#include "suites.h"
#include "testutil.h"

#ifdef PP_HAVE_CUDA
#include "../../kernels/attention_fused_cuda.h"
#include "../../kernels/cuda_check.h"
#endif

/* (B, T, C, NH): hs = C / NH of 4 (T = 7, 70: three key tiles), 2, 9, 64
 * (two key tiles), 128 (T = 37: a partial second tile), 96 (ceil(hs/32)
 * = 3), 40 (a partial second lane column), T = 1. */
static const int shapes[][4] = {
    {2, 7, 12, 3},  {1, 70, 8, 2},   {1, 5, 10, 5},  {2, 9, 9, 1},   {3, 1, 4, 2},
    {1, 40, 64, 1}, {1, 37, 256, 2}, {1, 33, 96, 1}, {2, 45, 80, 2},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

static float *rand_floats(size_t n, uint32_t seed, float scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = scale * ((float)((seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f);
    }
    return x;
}

/* |got - want| <= atol + rtol |want| everywhere (NaN fails). */
static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        ck_assert_msg(d <= atol + rtol * fabs((double)want[i]),
                      "%s[%zu]: got %.9g, want %.9g: |diff| %.3g > %.3g + %.3g |want|", what, i,
                      (double)got[i], (double)want[i], d, atol, rtol);
    }
}

/* One case's inputs and the cpu backend's results; with bf16 out is the
 * forward's rounded to bf16, as gpt.c stashes it and the backward reads
 * it. */
typedef struct {
    int B, T, C, NH, bf16;
    size_t nq, no, nl;
    float *qkv, *dout, *out, *lse, *dqkv;
} att_case;

static void case_make(att_case *a, const int *sh, int bf16)
{
    a->B = sh[0], a->T = sh[1], a->C = sh[2], a->NH = sh[3], a->bf16 = bf16;
    a->nq = (size_t)a->B * a->T * 3 * a->C;
    a->no = (size_t)a->B * a->T * a->C;
    a->nl = (size_t)a->B * a->NH * a->T;
    a->qkv = rand_floats(a->nq, 100 + (uint32_t)a->T, 1.5f);
    a->dout = rand_floats(a->no, 200 + (uint32_t)a->T, 1.0f);
    if (bf16) { /* the caller's rounding (gpt.c) */
        pp_round_bf16(a->qkv, a->qkv, a->nq);
        pp_round_bf16(a->dout, a->dout, a->no);
    }
    int rows = a->T < 64 ? a->T : 64; /* gpt_att_rows */
    float *scratch = malloc(((size_t)2 * rows * a->T + rows) * sizeof *scratch);
    a->out = malloc(a->no * 4), a->lse = malloc(a->nl * 4), a->dqkv = malloc(a->nq * 4);
    pp_attention_forward(a->qkv, a->out, a->lse, a->B, a->T, a->C, a->NH, rows, scratch, bf16);
    if (bf16)
        pp_round_bf16(a->out, a->out, a->no);
    pp_attention_backward(a->qkv, a->out, a->dout, a->lse, a->dqkv, a->B, a->T, a->C, a->NH, rows,
                          scratch, bf16);
    free(scratch);
}

static void case_free(att_case *a)
{
    free(a->qkv), free(a->dout), free(a->out), free(a->lse), free(a->dqkv);
}

/* The tolerances against the cpu backend: test_cuda_kernels.c's attention
 * ones (bf16: a P or dS element on a rounding boundary may round apart, and
 * the online softmax rounds P before normalising; fp32: other summation
 * orders). */
static void against_cpu(const att_case *a, const char *who, const float *out, const float *lse,
                        const float *dqkv)
{
    double atol = a->bf16 ? 5e-3 : 2e-5, rtol = a->bf16 ? 5e-3 : 2e-4;
    char what[128];
    snprintf(what, sizeof what, "%s out B%d T%d C%d NH%d bf16 %d", who, a->B, a->T, a->C, a->NH,
             a->bf16);
    expect_close(what, out, a->out, a->no, atol, rtol);
    snprintf(what, sizeof what, "%s lse B%d T%d C%d NH%d bf16 %d", who, a->B, a->T, a->C, a->NH,
             a->bf16);
    expect_close(what, lse, a->lse, a->nl, 2e-5, 2e-5);
    snprintf(what, sizeof what, "%s dqkv B%d T%d C%d NH%d bf16 %d", who, a->B, a->T, a->C, a->NH,
             a->bf16);
    expect_close(what, dqkv, a->dqkv, a->nq, atol, rtol);
}

/* The reference: forward from the inputs, backward from the cpu backend's
 * out and lse, so each pass is compared alone. */
static void ref_case(const att_case *a, float *out, float *lse, float *dqkv)
{
    pp_attention_fused_forward_ref(a->qkv, out, lse, a->B, a->T, a->C, a->NH, a->bf16);
    pp_attention_fused_backward_ref(a->qkv, a->out, a->dout, a->lse, dqkv, a->B, a->T, a->C, a->NH,
                                    a->bf16);
}

static void ref_vs_cpu(int bf16)
{
    for (int s = 0; s < NSHAPES; s++) {
        att_case a;
        case_make(&a, shapes[s], bf16);
        float *out = malloc(a.no * 4), *lse = malloc(a.nl * 4), *dqkv = malloc(a.nq * 4);
        memset(dqkv, 0xff, a.nq * 4); /* NaN: every element must be written */
        ref_case(&a, out, lse, dqkv);
        against_cpu(&a, "ref", out, lse, dqkv);
        free(out), free(lse), free(dqkv);
        case_free(&a);
    }
}

START_TEST(test_ref_fp32) { ref_vs_cpu(0); }
END_TEST

START_TEST(test_ref_bf16) { ref_vs_cpu(1); }
END_TEST

/* The shapes the fused kernels refuse (the caller then keeps the blocked
 * GEMMs), and the ones they take. */
START_TEST(test_fused_ok)
{
    ck_assert_int_eq(pp_attention_fused_ok(768, 12), 1);    /* GPT-2: hs 64 */
    ck_assert_int_eq(pp_attention_fused_ok(1024, 8), 1);    /* hs 128 */
    ck_assert_int_eq(pp_attention_fused_ok(8, 8), 1);       /* hs 1 */
    ck_assert_int_eq(pp_attention_fused_ok(2 * 129, 2), 0); /* hs 129: over the tiles */
    ck_assert_int_eq(pp_attention_fused_ok(10, 3), 0);      /* C not divisible by NH */
    ck_assert_int_eq(pp_attention_fused_ok(10, 0), 0);
}
END_TEST

Suite *attention_ref_suite(void)
{
    Suite *s = suite_create("attention_ref");
    TCase *tc = tcase_create("attention_ref");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ref_fp32);
    tcase_add_test(tc, test_ref_bf16);
    tcase_add_test(tc, test_fused_ok);
    suite_add_tcase(s, tc);
    return s;
}

#ifdef PP_HAVE_CUDA

static void *dev_from(const void *host, size_t bytes)
{
    void *d = NULL;
    cudaCheck(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes)
        cudaCheck(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Every byte 0xff (a NaN): an element the kernel fails to write fails. */
static void *dev_nan(size_t bytes)
{
    void *d = NULL;
    cudaCheck(cudaMalloc(&d, bytes ? bytes : 1));
    cudaCheck(cudaMemset(d, 0xff, bytes));
    return d;
}

/* The same bits (the stand-ins), or within a few roundings (a GPU, whose
 * compiler contracts to fused multiply-adds and whose expf differs: gpu_rtol
 * relative, a bf16 out's being one bf16 step, where the GPU's fp32 value
 * may round to the neighbouring bf16). */
static void expect_ref(const char *what, const float *got, const float *want, size_t n,
                       double gpu_rtol)
{
#ifdef PP_STANDIN
    (void)gpu_rtol;
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof *got) == 0,
                      "%s[%zu]: cuda %.9g, reference %.9g (bits differ on the stand-ins)", what, i,
                      (double)got[i], (double)want[i]);
#else
    expect_close(what, got, want, n, 1e-5, gpu_rtol);
#endif
}

static void cuda_case(const int *sh, int bf16)
{
    att_case a;
    case_make(&a, sh, bf16);
    float *rout = malloc(a.no * 4), *rlse = malloc(a.nl * 4), *rdqkv = malloc(a.nq * 4);
    ref_case(&a, rout, rlse, rdqkv);
    if (bf16) /* the GPU writes out in bf16: the reference's fp32 out rounded */
        pp_round_bf16(rout, rout, a.no);
    /* the GPU takes qkv, out and dout as bf16 with bf16 (exact: already
     * rounded) */
    size_t esz = bf16 ? 2 : 4;
    uint16_t *q16 = malloc(a.nq * 2), *o16 = malloc(a.no * 2), *co16 = malloc(a.no * 2);
    pp_f32_to_bf16(a.qkv, q16, a.nq);
    pp_f32_to_bf16(a.dout, o16, a.no);
    pp_f32_to_bf16(a.out, co16, a.no);
    void *d_qkv = bf16 ? dev_from(q16, a.nq * 2) : dev_from(a.qkv, a.nq * 4);
    void *d_dout = bf16 ? dev_from(o16, a.no * 2) : dev_from(a.dout, a.no * 4);
    void *d_out = dev_nan(a.no * esz);
    float *d_lse = dev_nan(a.nl * 4), *d_dqkv = dev_nan(a.nq * 4);
    void *d_cout = bf16 ? dev_from(co16, a.no * 2) : dev_from(a.out, a.no * 4);
    float *d_clse = dev_from(a.lse, a.nl * 4);
    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    pp_cu_attention_fused_forward(st, d_qkv, d_out, d_lse, a.B, a.T, a.C, a.NH, bf16);
    pp_cu_attention_fused_backward(st, d_qkv, d_cout, d_dout, d_clse, d_dqkv, a.B, a.T, a.C, a.NH,
                                   bf16);
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaStreamDestroy(st));
    float *gout = malloc(a.no * 4), *glse = malloc(a.nl * 4), *gdqkv = malloc(a.nq * 4);
    if (bf16) { /* widened exactly */
        cudaCheck(cudaMemcpy(co16, d_out, a.no * 2, cudaMemcpyDeviceToHost));
        pp_bf16_to_f32(co16, gout, a.no);
    } else {
        cudaCheck(cudaMemcpy(gout, d_out, a.no * 4, cudaMemcpyDeviceToHost));
    }
    cudaCheck(cudaMemcpy(glse, d_lse, a.nl * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(gdqkv, d_dqkv, a.nq * 4, cudaMemcpyDeviceToHost));
    char what[128];
    snprintf(what, sizeof what, "out B%d T%d C%d NH%d bf16 %d", a.B, a.T, a.C, a.NH, bf16);
    expect_ref(what, gout, rout, a.no, bf16 ? 8e-3 : 1e-4);
    snprintf(what, sizeof what, "lse B%d T%d C%d NH%d bf16 %d", a.B, a.T, a.C, a.NH, bf16);
    expect_ref(what, glse, rlse, a.nl, 1e-4);
    snprintf(what, sizeof what, "dqkv B%d T%d C%d NH%d bf16 %d", a.B, a.T, a.C, a.NH, bf16);
    expect_ref(what, gdqkv, rdqkv, a.nq, 1e-4);
    against_cpu(&a, "cuda", gout, glse, gdqkv);
    void *dev[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv, d_cout, d_clse};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaCheck(cudaFree(dev[i]));
    void *host[] = {rout, rlse, rdqkv, q16, o16, co16, gout, glse, gdqkv};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
    case_free(&a);
}

static void cuda_all(int bf16)
{
    if (!have_gpu()) {
        test_skipped("no GPU\n");
        return;
    }
    for (int s = 0; s < NSHAPES; s++)
        cuda_case(shapes[s], bf16);
}

START_TEST(test_cuda_fp32) { cuda_all(0); }
END_TEST

START_TEST(test_cuda_bf16) { cuda_all(1); }
END_TEST

#else

START_TEST(test_cuda_fp32) { test_skipped("built without CUDA\n"); }
END_TEST

START_TEST(test_cuda_bf16) { test_skipped("built without CUDA\n"); }
END_TEST

#endif

Suite *attention_fused_suite(void)
{
    Suite *s = suite_create("attention_fused");
    TCase *tc = tcase_create("attention_fused");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cuda_fp32);
    tcase_add_test(tc, test_cuda_bf16);
    suite_add_tcase(s, tc);
    return s;
}
