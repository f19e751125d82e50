/* test_cuda_kernels.c - every CUDA kernel (kernels/cuda_kernels.cu) against
 * its CPU twin (kernels/cpu_kernels.c, pp_sgd_step in kernels/model.c): the
 * same random inputs (fixed seeds) through both, on shapes that are not
 * multiples of the block sizes (rows 37, cols 1000 and smaller odd ones),
 * then the results compared with |gpu - cpu| <= atol + rtol |cpu|, the
 * tolerances per kernel below: exact where only copies and additions are
 * involved, a few float roundings where the GPU contracts to fused
 * multiply-adds, uses its own tanhf/expf or sums in another order.
 * The _bf16w kernels (parameters read from a bf16 copy) are compared with
 * their twin, the fp32 CPU kernel on the widened parameters, and with the
 * fp32 GPU kernel on them (the same bits).
 *
 * Without a GPU every test prints "skipped: no GPU" and passes; built
 * without CUDA, "skipped: built without CUDA". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu_kernels.h"
#include "../../kernels/model.h"
#include "suites.h"
#include "testutil.h"

#ifdef PP_HAVE_CUDA
#include "../../kernels/cuda_check.h"
#include "../../kernels/cuda_kernels.h"
#include "../../kernels/finite.h"
#include "../../kernels/finite_cuda.h"
#include "../../kernels/attention_cuda.h"
#include "../../isa/gpt_layout.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

/* Deterministic test data in [-1, 1), as in test_kernels.c. */
static float rnd(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* n values in [-scale, scale) (caller frees). */
static float *rand_floats(size_t n, uint32_t seed, float scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * rnd(&seed);
    return x;
}

/* n byte tokens in [0, range) (caller frees). */
static int32_t *rand_tokens(size_t n, uint32_t seed, int range)
{
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 8) % (uint32_t)range);
    }
    return t;
}

/* A device copy of bytes of host memory (cudaFree it). */
static void *dev_from(const void *host, size_t bytes)
{
    void *d = NULL;
    cudaCheck(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes)
        cudaCheck(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Device memory for an output, every byte 0xff (a NaN as float), so an
 * element the kernel fails to write cannot pass for a result. */
static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    cudaCheck(cudaMalloc(&d, bytes ? bytes : 1));
    cudaCheck(cudaMemset(d, 0xff, bytes));
    return d;
}

static void host_from(void *host, const void *dev, size_t bytes)
{
    cudaCheck(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* Every kernel runs on a stream of its own, as in ppvm; copies go through
 * the legacy default stream, which synchronises with it. */
static cudaStream_t stream_new(void)
{
    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    return st;
}

static void stream_done(cudaStream_t st)
{
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaStreamDestroy(st));
}

/* |got - want| <= atol + rtol |want| everywhere (NaN fails). */
static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double atol, double rtol)
{
    double worst = 0.0; /* of |diff| / (atol + rtol |cpu|), PP_TEST_VERBOSE=1 prints it */
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        worst = fmax(worst, d / (atol + rtol * fabs((double)want[i])));
        ck_assert_msg(d <= atol + rtol * fabs((double)want[i]),
                      "%s[%zu]: gpu %.9g, cpu %.9g: |diff| %.3g > %.3g + %.3g |cpu|", what, i,
                      (double)got[i], (double)want[i], d, atol, rtol);
    }
    if (getenv("PP_TEST_VERBOSE"))
        fprintf(stderr, "  %-48s n=%-7zu worst |diff| / tolerance %.3g\n", what, n, worst);
}

/* The same bits. */
static void expect_same(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof *got) == 0,
                      "%s[%zu]: gpu %.9g, cpu %.9g (bits differ)", what, i, (double)got[i],
                      (double)want[i]);
}

/* Rows 37 and cols 1000 (37000 elements, not a multiple of 256; 1000 not a
 * multiple of 32), then shapes smaller than a warp or a block. */
static const int shapes[][2] = {{37, 1000}, {5, 33}, {9, 7}, {1, 1}};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* ------------------------------------------------------------------------ */
/* Embedding                                                                 */

enum { EMB_B = 37, EMB_C = 5, EMB_E = 27, VOCAB = 256 };

/* A copy: exact. Tokens cover all 256 rows of the table. */
static void run_embedding_forward(void)
{
    size_t nt = (size_t)EMB_B * (EMB_C + 1), no = (size_t)EMB_B * EMB_C * EMB_E;
    int32_t *tok = rand_tokens(nt, 1u, VOCAB);
    float *E = rand_floats((size_t)VOCAB * EMB_E, 2u, 1.0f);
    float *want = malloc(no * sizeof *want), *got = malloc(no * sizeof *got);
    pp_embedding_forward(tok, EMB_B, EMB_C, E, EMB_E, want);

    cudaStream_t st = stream_new();
    int32_t *d_tok = dev_from(tok, nt * sizeof *tok);
    float *d_E = dev_from(E, (size_t)VOCAB * EMB_E * sizeof *E);
    float *d_out = dev_alloc(no * sizeof *d_out);
    cudaCheck(pp_cu_embedding_forward(d_tok, EMB_B, EMB_C, d_E, EMB_E, d_out, st));
    stream_done(st);
    host_from(got, d_out, no * sizeof *got);
    expect_same("out", got, want, no);

    cudaCheck(cudaFree(d_tok));
    cudaCheck(cudaFree(d_E));
    cudaCheck(cudaFree(d_out));
    free(tok);
    free(E);
    free(want);
    free(got);
}

/* Tokens from 0..15 only, so every row of dE receives about a dozen
 * gradients through contended atomics, summed in another order than the
 * CPU's: sums of ~12 values in [-1, 1) onto [-1, 1), a dozen roundings of
 * partial sums below ~5 on each side (< 6e-6 together), so atol 2e-5,
 * rtol 1e-5. */
static void run_embedding_backward(void)
{
    size_t nt = (size_t)EMB_B * (EMB_C + 1), no = (size_t)EMB_B * EMB_C * EMB_E;
    size_t ne = (size_t)VOCAB * EMB_E;
    int32_t *tok = rand_tokens(nt, 3u, 16);
    float *dout = rand_floats(no, 4u, 1.0f);
    float *want = rand_floats(ne, 5u, 1.0f); /* the backward accumulates */
    float *got = malloc(ne * sizeof *got);

    cudaStream_t st = stream_new();
    int32_t *d_tok = dev_from(tok, nt * sizeof *tok);
    float *d_dout = dev_from(dout, no * sizeof *dout);
    float *d_dE = dev_from(want, ne * sizeof *want);
    cudaCheck(pp_cu_embedding_backward(d_tok, EMB_B, EMB_C, d_dout, EMB_E, d_dE, st));
    stream_done(st);
    host_from(got, d_dE, ne * sizeof *got);
    pp_embedding_backward(tok, EMB_B, EMB_C, dout, EMB_E, want);
    expect_same("dE", got, want, ne); /* positions in order, no atomics */

    cudaCheck(cudaFree(d_tok));
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_dE));
    free(tok);
    free(dout);
    free(want);
    free(got);
}

/* ------------------------------------------------------------------------ */
/* Bias, GELU, adds                                                          */

/* One addition per element: exact. */
static void run_bias_add(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C;
        float *want = rand_floats(n, 10u + (uint32_t)k, 1.0f);
        float *bias = rand_floats((size_t)C, 11u, 1.0f);
        float *got = malloc(n * sizeof *got);
        cudaStream_t st = stream_new();
        float *d_y = dev_from(want, n * sizeof *want), *d_b = dev_from(bias, C * sizeof *bias);
        cudaCheck(pp_cu_bias_add(d_y, d_b, R, C, st));
        stream_done(st);
        host_from(got, d_y, n * sizeof *got);
        pp_bias_add(want, bias, R, C);
        expect_same("y", got, want, n);
        cudaCheck(cudaFree(d_y));
        cudaCheck(cudaFree(d_b));
        free(want);
        free(bias);
        free(got);
    }
}

/* h += bias is one addition: exact. a = gelu(h) over [-5, 5): the GPU's
 * tanhf (2 ulp) and fused multiply-adds move t by a few 1e-7, a by up to
 * ~1e-6 where |h| is near 5, so atol 2e-6, rtol 1e-5. */
static void run_bias_gelu_forward(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C;
        float *h = rand_floats(n, 20u + (uint32_t)k, 4.0f);
        float *bias = rand_floats((size_t)C, 21u, 1.0f);
        float *a = malloc(n * sizeof *a), *got_h = malloc(n * sizeof *got_h),
              *got_a = malloc(n * sizeof *got_a);
        cudaStream_t st = stream_new();
        float *d_h = dev_from(h, n * sizeof *h), *d_b = dev_from(bias, C * sizeof *bias);
        float *d_a = dev_alloc(n * sizeof *a);
        cudaCheck(pp_cu_bias_gelu_forward(d_h, d_b, d_a, R, C, st));
        stream_done(st);
        host_from(got_h, d_h, n * sizeof *got_h);
        host_from(got_a, d_a, n * sizeof *got_a);
        pp_bias_gelu_forward(h, bias, a, R, C);
        expect_same("h", got_h, h, n);
        expect_close("a", got_a, a, n, 2e-6, 1e-5);
        cudaCheck(cudaFree(d_h));
        cudaCheck(cudaFree(d_b));
        cudaCheck(cudaFree(d_a));
        free(h);
        free(bias);
        free(a);
        free(got_h);
        free(got_a);
    }
}

/* x over [-6, 6): gelu'(x) has terms up to ~0.5 |x| k (1 + 3 c x^2) ~ 5
 * times sech^2, which the GPU's tanhf moves by a few 1e-7: atol 1e-5,
 * rtol 1e-5. Then dx aliasing dy must give the same bits as not. */
static void run_gelu_backward(void)
{
    const size_t n = 37 * 1000 + 13;
    float *x = rand_floats(n, 30u, 6.0f), *dy = rand_floats(n, 31u, 1.0f);
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got),
          *got2 = malloc(n * sizeof *got2);
    pp_gelu_backward(x, dy, want, n);

    cudaStream_t st = stream_new();
    float *d_x = dev_from(x, n * sizeof *x), *d_dy = dev_from(dy, n * sizeof *dy);
    float *d_dx = dev_alloc(n * sizeof *want);
    cudaCheck(pp_cu_gelu_backward(d_x, d_dy, d_dx, n, st));
    cudaCheck(pp_cu_gelu_backward(d_x, d_dy, d_dy, n, st)); /* in place */
    stream_done(st);
    host_from(got, d_dx, n * sizeof *got);
    host_from(got2, d_dy, n * sizeof *got2);
    expect_close("dx", got, want, n, 1e-5, 1e-5);
    expect_same("dx in place", got2, got, n);

    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_dy));
    cudaCheck(cudaFree(d_dx));
    free(x);
    free(dy);
    free(want);
    free(got);
    free(got2);
}

/* Column sums of up to 300 values in [-1, 1) onto db in [-1, 1), in another
 * order than the CPU's row by row: partial sums reach ~20, each rounding
 * ~1e-6, so atol 1e-4, rtol 1e-5. The extra shape has more rows than the
 * block has thread rows and fewer columns than a warp. */
static void run_bias_grad(void)
{
    static const int more[][2] = {{300, 33}};
    for (int k = 0; k < NSHAPES + 1; k++) {
        int R = k < NSHAPES ? shapes[k][0] : more[0][0];
        int C = k < NSHAPES ? shapes[k][1] : more[0][1];
        size_t n = (size_t)R * C;
        float *dy = rand_floats(n, 40u + (uint32_t)k, 1.0f);
        float *want = rand_floats((size_t)C, 41u, 1.0f); /* db accumulates */
        float *got = malloc((size_t)C * sizeof *got);
        cudaStream_t st = stream_new();
        float *d_dy = dev_from(dy, n * sizeof *dy), *d_db = dev_from(want, C * sizeof *want);
        cudaCheck(pp_cu_bias_grad(d_dy, R, C, d_db, st));
        stream_done(st);
        host_from(got, d_db, C * sizeof *got);
        pp_bias_grad(dy, R, C, want);
        expect_close("db", got, want, (size_t)C, 1e-4, 1e-5);
        cudaCheck(cudaFree(d_dy));
        cudaCheck(cudaFree(d_db));
        free(dy);
        free(want);
        free(got);
    }
}

/* (y + x) + bias in the same order: exact. */
static void run_residual_bias_add(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C;
        float *want = rand_floats(n, 50u + (uint32_t)k, 1.0f), *x = rand_floats(n, 51u, 1.0f);
        float *bias = rand_floats((size_t)C, 52u, 1.0f), *got = malloc(n * sizeof *got);
        cudaStream_t st = stream_new();
        float *d_y = dev_from(want, n * sizeof *want), *d_x = dev_from(x, n * sizeof *x);
        float *d_b = dev_from(bias, C * sizeof *bias);
        cudaCheck(pp_cu_residual_bias_add(d_y, d_x, d_b, R, C, st));
        stream_done(st);
        host_from(got, d_y, n * sizeof *got);
        pp_residual_bias_add(want, x, bias, R, C);
        expect_same("y", got, want, n);
        cudaCheck(cudaFree(d_y));
        cudaCheck(cudaFree(d_x));
        cudaCheck(cudaFree(d_b));
        free(want);
        free(x);
        free(bias);
        free(got);
    }
}

/* One addition per element: exact. */
static void run_add(void)
{
    const size_t n = 37 * 1000 + 3;
    float *want = rand_floats(n, 60u, 1.0f), *x = rand_floats(n, 61u, 1.0f);
    float *got = malloc(n * sizeof *got);
    cudaStream_t st = stream_new();
    float *d_y = dev_from(want, n * sizeof *want), *d_x = dev_from(x, n * sizeof *x);
    cudaCheck(pp_cu_add(d_y, d_x, n, st));
    stream_done(st);
    host_from(got, d_y, n * sizeof *got);
    pp_add(want, x, n);
    expect_same("y", got, want, n);
    cudaCheck(cudaFree(d_y));
    cudaCheck(cudaFree(d_x));
    free(want);
    free(x);
    free(got);
}

/* ------------------------------------------------------------------------ */
/* Layer norm                                                                */

/* Rows of different spread (1 to 4) and offset (-1 to 1); gamma in
 * [0.5, 2.5), beta in [-1, 1). */
static void ln_inputs(int R, int C, uint32_t seed, float **x, float **gamma, float **beta)
{
    *x = rand_floats((size_t)R * C, seed, 1.0f);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            (*x)[(size_t)r * C + c] =
                (*x)[(size_t)r * C + c] * (float)(1 + r % 4) + (float)(r % 3 - 1);
    *gamma = rand_floats((size_t)C, seed + 1, 1.0f);
    for (int c = 0; c < C; c++)
        (*gamma)[c] += 1.5f;
    *beta = rand_floats((size_t)C, seed + 2, 1.0f);
}

/* Float sums over the row on the GPU against double on the CPU: the mean
 * and rstd within ~1e-6 relative, y (|y| < ~6) within a few 1e-6: atol
 * 1e-5, rtol 1e-5 for all three. A row of one column has variance 0: rstd
 * = 1/sqrt(1e-5) and y = beta. */
static void run_layernorm_forward(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C;
        float *x, *gamma, *beta;
        ln_inputs(R, C, 70u + (uint32_t)k, &x, &gamma, &beta);
        float *y = malloc(n * sizeof *y), *mean = malloc(R * sizeof *mean),
              *rstd = malloc(R * sizeof *rstd);
        float *gy = malloc(n * sizeof *gy), *gmean = malloc(R * sizeof *gmean),
              *grstd = malloc(R * sizeof *grstd);
        pp_layernorm_forward(x, gamma, beta, R, C, y, mean, rstd);

        cudaStream_t st = stream_new();
        float *d_x = dev_from(x, n * sizeof *x), *d_g = dev_from(gamma, C * sizeof *gamma);
        float *d_b = dev_from(beta, C * sizeof *beta), *d_y = dev_alloc(n * sizeof *y);
        float *d_mean = dev_alloc(R * sizeof *mean), *d_rstd = dev_alloc(R * sizeof *rstd);
        cudaCheck(pp_cu_layernorm_forward(d_x, d_g, d_b, R, C, d_y, d_mean, d_rstd, st));
        stream_done(st);
        host_from(gy, d_y, n * sizeof *gy);
        host_from(gmean, d_mean, R * sizeof *gmean);
        host_from(grstd, d_rstd, R * sizeof *grstd);
        expect_close("mean", gmean, mean, (size_t)R, 1e-5, 1e-5);
        expect_close("rstd", grstd, rstd, (size_t)R, 1e-5, 1e-5);
        expect_close("y", gy, y, n, 1e-5, 1e-5);

        cudaCheck(cudaFree(d_x));
        cudaCheck(cudaFree(d_g));
        cudaCheck(cudaFree(d_b));
        cudaCheck(cudaFree(d_y));
        cudaCheck(cudaFree(d_mean));
        cudaCheck(cudaFree(d_rstd));
        free(x);
        free(gamma);
        free(beta);
        free(y);
        free(mean);
        free(rstd);
        free(gy);
        free(gmean);
        free(grstd);
    }
}

/* Both backwards from the CPU forward's mean and rstd, onto random dx,
 * dgamma, dbeta. dx = rstd (g - mean(g) - xhat mean(g xhat)) with |dx| up
 * to ~10 and the row means in float on the GPU: atol 1e-5, rtol 1e-4.
 * dgamma and dbeta are column sums of 37 terms up to ~6, in another order:
 * atol 1e-4, rtol 1e-5. */
static void run_layernorm_backward(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C;
        float *x, *gamma, *beta;
        ln_inputs(R, C, 80u + (uint32_t)k, &x, &gamma, &beta);
        float *y = malloc(n * sizeof *y), *mean = malloc(R * sizeof *mean),
              *rstd = malloc(R * sizeof *rstd);
        pp_layernorm_forward(x, gamma, beta, R, C, y, mean, rstd);
        float *dy = rand_floats(n, 83u, 1.0f), *dx = rand_floats(n, 84u, 1.0f);
        float *dgamma = rand_floats((size_t)C, 85u, 1.0f),
              *dbeta = rand_floats((size_t)C, 86u, 1.0f);
        float *gdx = malloc(n * sizeof *gdx), *gdgamma = malloc(C * sizeof *gdgamma),
              *gdbeta = malloc(C * sizeof *gdbeta);

        cudaStream_t st = stream_new();
        float *d_x = dev_from(x, n * sizeof *x), *d_g = dev_from(gamma, C * sizeof *gamma);
        float *d_mean = dev_from(mean, R * sizeof *mean),
              *d_rstd = dev_from(rstd, R * sizeof *rstd);
        float *d_dy = dev_from(dy, n * sizeof *dy), *d_dx = dev_from(dx, n * sizeof *dx);
        float *d_dgamma = dev_from(dgamma, C * sizeof *dgamma),
              *d_dbeta = dev_from(dbeta, C * sizeof *dbeta);
        cudaCheck(pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, d_dx, d_dgamma,
                                           d_dbeta, st));
        stream_done(st);
        host_from(gdx, d_dx, n * sizeof *gdx);
        host_from(gdgamma, d_dgamma, C * sizeof *gdgamma);
        host_from(gdbeta, d_dbeta, C * sizeof *gdbeta);
        pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, dx, dgamma, dbeta);
        expect_close("dx", gdx, dx, n, 1e-5, 1e-4);
        expect_close("dgamma", gdgamma, dgamma, (size_t)C, 1e-4, 1e-5);
        expect_close("dbeta", gdbeta, dbeta, (size_t)C, 1e-4, 1e-5);

        cudaCheck(cudaFree(d_x));
        cudaCheck(cudaFree(d_g));
        cudaCheck(cudaFree(d_mean));
        cudaCheck(cudaFree(d_rstd));
        cudaCheck(cudaFree(d_dy));
        cudaCheck(cudaFree(d_dx));
        cudaCheck(cudaFree(d_dgamma));
        cudaCheck(cudaFree(d_dbeta));
        free(x);
        free(gamma);
        free(beta);
        free(y);
        free(mean);
        free(rstd);
        free(dy);
        free(dx);
        free(dgamma);
        free(dbeta);
        free(gdx);
        free(gdgamma);
        free(gdbeta);
    }
}

/* NULL outputs skip their kernel (a split backward's B and W): dx alone,
 * then dgamma and dbeta alone, onto the same starting values as one call
 * making all three, give the same bits, since the same deterministic
 * kernels (no atomics) run on the same inputs either way. Then dgamma
 * alone and dbeta alone, each with the other NULL. */
static void run_layernorm_backward_null(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C, xb = n * sizeof(float), cb = (size_t)C * sizeof(float);
        float *x, *gamma, *beta;
        ln_inputs(R, C, 90u + (uint32_t)k, &x, &gamma, &beta);
        float *y = malloc(xb), *mean = malloc(R * sizeof *mean), *rstd = malloc(R * sizeof *rstd);
        pp_layernorm_forward(x, gamma, beta, R, C, y, mean, rstd);
        float *dy = rand_floats(n, 93u, 1.0f), *dx = rand_floats(n, 94u, 1.0f);
        float *dgamma = rand_floats((size_t)C, 95u, 1.0f),
              *dbeta = rand_floats((size_t)C, 96u, 1.0f);
        float *all[3], *part[3];
        for (int i = 0; i < 3; i++) {
            all[i] = malloc(i ? cb : xb);
            part[i] = malloc(i ? cb : xb);
        }

        cudaStream_t st = stream_new();
        float *d_x = dev_from(x, xb), *d_g = dev_from(gamma, cb);
        float *d_mean = dev_from(mean, R * sizeof *mean),
              *d_rstd = dev_from(rstd, R * sizeof *rstd);
        float *d_dy = dev_from(dy, xb);
        float *d_dx_all = dev_from(dx, xb), *d_dg_all = dev_from(dgamma, cb),
              *d_db_all = dev_from(dbeta, cb);
        float *d_dx = dev_from(dx, xb), *d_dg = dev_from(dgamma, cb), *d_db = dev_from(dbeta, cb);
        cudaCheck(pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, d_dx_all, d_dg_all,
                                           d_db_all, st));
        cudaCheck(
            pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, d_dx, NULL, NULL, st));
        cudaCheck(
            pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, NULL, d_dg, d_db, st));
        cudaCheck(pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, NULL, NULL, NULL,
                                           st)); /* a no-op */
        stream_done(st);
        host_from(all[0], d_dx_all, xb);
        host_from(all[1], d_dg_all, cb);
        host_from(all[2], d_db_all, cb);
        host_from(part[0], d_dx, xb);
        host_from(part[1], d_dg, cb);
        host_from(part[2], d_db, cb);
        expect_same("dx alone", part[0], all[0], n);
        expect_same("dgamma and dbeta alone: dgamma", part[1], all[1], (size_t)C);
        expect_same("dgamma and dbeta alone: dbeta", part[2], all[2], (size_t)C);

        /* Each parameter gradient with the other NULL. */
        st = stream_new();
        cudaCheck(cudaMemcpy(d_dg, dgamma, cb, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_db, dbeta, cb, cudaMemcpyHostToDevice));
        cudaCheck(
            pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, NULL, d_dg, NULL, st));
        cudaCheck(
            pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, NULL, NULL, d_db, st));
        stream_done(st);
        host_from(part[1], d_dg, cb);
        host_from(part[2], d_db, cb);
        expect_same("dgamma alone", part[1], all[1], (size_t)C);
        expect_same("dbeta alone", part[2], all[2], (size_t)C);

        float *dev[] = {d_x,      d_g,      d_mean, d_rstd, d_dy, d_dx_all,
                        d_dg_all, d_db_all, d_dx,   d_dg,   d_db};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
            cudaCheck(cudaFree(dev[i]));
        float *host[] = {x, gamma, beta, y, mean, rstd, dy, dx, dgamma, dbeta};
        for (size_t i = 0; i < sizeof host / sizeof *host; i++)
            free(host[i]);
        for (int i = 0; i < 3; i++) {
            free(all[i]);
            free(part[i]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy and the loss sum                                    */

/* Logits in [-4, 4), targets with a stride as the model reads them. p in
 * [0, 1] is within ~1e-6 relative (expf, a float sum against a double one),
 * so dlogits within atol 5e-6 |scale|, rtol 1e-5; the loss (~5) within
 * atol 1e-5, rtol 1e-5. dlogits aliasing logits must give the same bits
 * as a separate buffer. V = 256 (one element per thread) and V = 1000. */
static void check_softmax(int R, int V, uint32_t seed)
{
    const int stride = 3;
    const float scale = 1.0f / (float)R;
    size_t n = (size_t)R * V;
    float *logits = rand_floats(n, seed, 4.0f);
    int32_t *tgt = rand_tokens((size_t)R * stride, seed + 1, V);
    float *d = malloc(n * sizeof *d), *loss = malloc(R * sizeof *loss);
    float *gd = malloc(n * sizeof *gd), *gd2 = malloc(n * sizeof *gd2),
          *gloss = malloc(R * sizeof *gloss), *gloss2 = malloc(R * sizeof *gloss2);
    pp_softmax_xent_fused(logits, tgt, stride, R, V, scale, d, loss);

    cudaStream_t st = stream_new();
    float *d_l = dev_from(logits, n * sizeof *logits), *d_d = dev_alloc(n * sizeof *d);
    int32_t *d_t = dev_from(tgt, (size_t)R * stride * sizeof *tgt);
    float *d_loss = dev_alloc(R * sizeof *loss), *d_loss2 = dev_alloc(R * sizeof *loss);
    cudaCheck(pp_cu_softmax_xent_fused(d_l, d_t, stride, R, V, scale, d_d, d_loss, st));
    cudaCheck(pp_cu_softmax_xent_fused(d_l, d_t, stride, R, V, scale, d_l, d_loss2, st));
    stream_done(st);
    host_from(gd, d_d, n * sizeof *gd);
    host_from(gloss, d_loss, R * sizeof *gloss);
    host_from(gd2, d_l, n * sizeof *gd2);
    host_from(gloss2, d_loss2, R * sizeof *gloss2);
    expect_close("dlogits", gd, d, n, 5e-6 * scale, 1e-5);
    expect_close("loss", gloss, loss, (size_t)R, 1e-5, 1e-5);
    expect_same("dlogits in place", gd2, gd, n);
    expect_same("loss in place", gloss2, gloss, (size_t)R);

    cudaCheck(cudaFree(d_l));
    cudaCheck(cudaFree(d_d));
    cudaCheck(cudaFree(d_t));
    cudaCheck(cudaFree(d_loss));
    cudaCheck(cudaFree(d_loss2));
    free(logits);
    free(tgt);
    free(d);
    free(loss);
    free(gd);
    free(gd2);
    free(gloss);
    free(gloss2);
}

static void run_softmax_xent_fused(void)
{
    check_softmax(37, 256, 90u);
    check_softmax(5, 1000, 91u);
    check_softmax(1, 1, 92u); /* p = 1: loss 0, dlogits 0 */
}

/* acc (a device double, 1.5 to start) += sum of n floats in [0, 5), twice,
 * against the host's double sum: relative 1e-12. n = 37 is one block,
 * 100003 many blocks adding atomically. */
static void check_sum_into(int n, uint32_t seed)
{
    float *loss = rand_floats((size_t)n, seed, 2.5f);
    double want = 1.5, got = 0.0;
    for (int i = 0; i < n; i++)
        loss[i] += 2.5f;
    for (int i = 0; i < n; i++)
        want += 2.0 * (double)loss[i];
    cudaStream_t st = stream_new();
    float *d_loss = dev_from(loss, (size_t)n * sizeof *loss);
    double start = 1.5;
    double *d_acc = dev_from(&start, sizeof start);
    cudaCheck(pp_cu_sum_into(d_loss, n, d_acc, st));
    cudaCheck(pp_cu_sum_into(d_loss, n, d_acc, st));
    stream_done(st);
    host_from(&got, d_acc, sizeof got);
    ck_assert_msg(fabs(got - want) <= 1e-12 * fabs(want), "n=%d: gpu %.17g, cpu %.17g", n, got,
                  want);
    cudaCheck(cudaFree(d_loss));
    cudaCheck(cudaFree(d_acc));
    free(loss);
}

static void run_sum_into(void)
{
    check_sum_into(37, 100u);
    check_sum_into(100003, 101u);
}

/* ------------------------------------------------------------------------ */
/* Optimisers                                                                */

/* copy (an optimizer's bf16 compute copy) is exactly w rounded to bf16. */
static void expect_copy_is_rounding(const char *what, const uint16_t *copy, const float *w,
                                    size_t n)
{
    uint16_t *want = malloc(n * sizeof *want);
    pp_f32_to_bf16(w, want, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(copy[i] == want[i], "%s copy[%zu]: %04x, want %04x (the rounding of %.9g)",
                      what, i, copy[i], want[i], w[i]);
    free(want);
}

/* p -= lr g may become one fused multiply-add: within half an ulp of lr g,
 * so atol 1e-7, rtol 1e-6; g must be exactly 0 after. */
static void run_sgd_step(void)
{
    const size_t n = 37 * 1000 + 1;
    float *p = rand_floats(n, 110u, 1.0f), *g = rand_floats(n, 111u, 1.0f);
    float *gp = malloc(n * sizeof *gp), *gg = malloc(n * sizeof *gg);
    cudaStream_t st = stream_new();
    float *d_p = dev_from(p, n * sizeof *p), *d_g = dev_from(g, n * sizeof *g);
    float *g2 = malloc(n * sizeof *g2);
    memcpy(g2, g, n * sizeof *g2);
    cudaCheck(pp_cu_sgd_step(d_p, d_g, n, 0.3f, NULL, st));
    stream_done(st);
    host_from(gp, d_p, n * sizeof *gp);
    host_from(gg, d_g, n * sizeof *gg);
    pp_sgd_step(p, g, n, 0.3f);
    expect_close("p", gp, p, n, 1e-7, 1e-6);
    expect_same("g", gg, g, n);
    /* again from the GPU's result, with the bf16 compute copy written in the
     * same pass: it must be exactly the rounding of the updated weights */
    st = stream_new();
    uint16_t *d_copy = dev_alloc(n * sizeof *d_copy), *copy = malloc(n * sizeof *copy);
    cudaCheck(cudaMemcpy(d_g, g2, n * sizeof *g2, cudaMemcpyHostToDevice));
    cudaCheck(pp_cu_sgd_step(d_p, d_g, n, 0.3f, d_copy, st));
    stream_done(st);
    host_from(gp, d_p, n * sizeof *gp);
    host_from(copy, d_copy, n * sizeof *copy);
    expect_copy_is_rounding("sgd", copy, gp, n);
    cudaCheck(cudaFree(d_copy));
    free(copy);
    free(g2);
    cudaCheck(cudaFree(d_p));
    cudaCheck(cudaFree(d_g));
    free(p);
    free(g);
    free(gp);
    free(gg);
}

/* Three steps (t = 1, 2, 3) with fresh gradients, comparing p, m, v after
 * each: fused multiply-adds move m and v by an ulp or so (rtol 1e-5; atol
 * 1e-7 for m, which can cancel to near 0), and p (|p| < 1, steps of ~lr)
 * by a few ulps: atol 1e-6, rtol 1e-5. */
static void run_adamw_step(void)
{
    const size_t n = 37 * 1000 + 1;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    float *p = rand_floats(n, 120u, 1.0f), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
    float *gp = malloc(n * sizeof *gp), *gm = malloc(n * sizeof *gm), *gv = malloc(n * sizeof *gv),
          *gg = malloc(n * sizeof *gg);
    cudaStream_t st = stream_new();
    float *d_p = dev_from(p, n * sizeof *p), *d_m = dev_from(m, n * sizeof *m);
    float *d_v = dev_from(v, n * sizeof *v), *d_g = dev_alloc(n * sizeof *m);
    uint16_t *d_copy = dev_alloc(n * sizeof *d_copy), *copy = malloc(n * sizeof *copy);
    for (int t = 1; t <= 3; t++) {
        float *g = rand_floats(n, 121u + (uint32_t)t, 1.0f);
        cudaCheck(cudaMemcpy(d_g, g, n * sizeof *g, cudaMemcpyHostToDevice));
        /* t = 2 also writes a bf16 compute copy (the rounding of the new p) */
        cudaCheck(pp_cu_adamw_step(d_p, d_g, d_m, d_v, n, t, lr, b1, b2, eps, wd,
                                   t == 2 ? d_copy : NULL, st));
        cudaCheck(cudaStreamSynchronize(st));
        host_from(gp, d_p, n * sizeof *gp);
        if (t == 2) {
            host_from(copy, d_copy, n * sizeof *copy);
            expect_copy_is_rounding("adamw", copy, gp, n);
        }
        host_from(gm, d_m, n * sizeof *gm);
        host_from(gv, d_v, n * sizeof *gv);
        host_from(gg, d_g, n * sizeof *gg);
        pp_adamw_step(p, g, m, v, n, t, lr, b1, b2, eps, wd);
        expect_close("m", gm, m, n, 1e-7, 1e-5);
        expect_close("v", gv, v, n, 1e-12, 1e-5);
        expect_close("p", gp, p, n, 1e-6, 1e-5);
        expect_same("g", gg, g, n);
        /* From here on the GPU continues from the CPU's state, so errors do
         * not compound over steps. */
        cudaCheck(cudaMemcpy(d_p, p, n * sizeof *p, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m, m, n * sizeof *m, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_v, v, n * sizeof *v, cudaMemcpyHostToDevice));
        free(g);
    }
    stream_done(st);
    cudaCheck(cudaFree(d_p));
    cudaCheck(cudaFree(d_m));
    cudaCheck(cudaFree(d_v));
    cudaCheck(cudaFree(d_g));
    cudaCheck(cudaFree(d_copy));
    free(copy);
    free(p);
    free(m);
    free(v);
    free(gp);
    free(gm);
    free(gv);
    free(gg);
}

/* ------------------------------------------------------------------------ */
/* bf16                                                                      */

static float f32_of(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Round to nearest even: the same bits as the CPU for every value but NaN
 * (the GPU gives its canonical NaN, so there only NaN-ness is compared).
 * Random values over 2^-140 .. 2^20 (float subnormals included) plus exact
 * halfway cases, overflow and infinities. */
static void run_f32_to_bf16(void)
{
    static const uint32_t special[] = {
        0x3f800000u, 0xbf800000u, 0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u,
        0x3f808001u, 0x3f807fffu, 0xbf818000u, 0x3fffffffu, 0x7f7fffffu, 0x7f800000u,
        0xff800000u, 0x00018000u, 0x00010000u, 0x00008000u, 0x7f800001u, 0xffc00000u,
    };
    enum { NS = sizeof special / sizeof special[0] };
    const size_t n = 37 * 1000 + 5;
    float *x = rand_floats(n, 130u, 1.0f);
    for (size_t i = 0; i < n; i++)
        x[i] *= powf(2.0f, (float)((int)(i % 161) - 140));
    for (int i = 0; i < NS; i++)
        x[i * 997] = f32_of(special[i]);
    uint16_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    pp_f32_to_bf16(x, want, n);

    cudaStream_t st = stream_new();
    float *d_x = dev_from(x, n * sizeof *x);
    uint16_t *d_h = dev_alloc(n * sizeof *want);
    cudaCheck(pp_cu_f32_to_bf16(d_x, d_h, n, st));
    stream_done(st);
    host_from(got, d_h, n * sizeof *got);
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i]))
            ck_assert_msg((got[i] & 0x7f80u) == 0x7f80u && (got[i] & 0x7fu) != 0,
                          "[%zu]: NaN -> 0x%04x, not a NaN", i, (unsigned)got[i]);
        else
            ck_assert_msg(got[i] == want[i], "[%zu]: %a -> gpu 0x%04x, cpu 0x%04x", i, (double)x[i],
                          (unsigned)got[i], (unsigned)want[i]);
    }
    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_h));
    free(x);
    free(want);
    free(got);
}

/* Widening is exact: all 65536 bit patterns, the same bits as the CPU
 * (NaNs included: a shift keeps their payload). */
static void run_bf16_to_f32(void)
{
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h);
    float *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    pp_bf16_to_f32(h, want, N);
    cudaStream_t st = stream_new();
    uint16_t *d_h = dev_from(h, N * sizeof *h);
    float *d_f = dev_alloc(N * sizeof *want);
    cudaCheck(pp_cu_bf16_to_f32(d_h, d_f, N, st));
    stream_done(st);
    host_from(got, d_f, N * sizeof *got);
    ck_assert_msg(memcmp(got, want, N * sizeof *got) == 0, "bf16 -> f32 bits differ");
    cudaCheck(cudaFree(d_h));
    cudaCheck(cudaFree(d_f));
    free(h);
    free(want);
    free(got);
}

/* ------------------------------------------------------------------------ */
/* Kernels reading bf16 parameters (_bf16w)                                  */

/* n parameters in [-scale, scale) + offset as a bf16 compute copy (bits)
 * and those values widened back to fp32 (wide): what the CPU twin reads. */
static void bf16_params(size_t n, uint32_t seed, float scale, float offset, uint16_t **bits,
                        float **wide)
{
    float *x = rand_floats(n, seed, scale);
    for (size_t i = 0; i < n; i++)
        x[i] += offset;
    *bits = malloc((n ? n : 1) * sizeof **bits);
    *wide = malloc((n ? n : 1) * sizeof **wide);
    pp_f32_to_bf16(x, *bits, n);
    pp_bf16_to_f32(*bits, *wide, n);
    free(x);
}

/* Each _bf16w kernel is the fp32 kernel's body reading widened parameters,
 * so it is checked twice: against its CPU twin (the fp32 CPU kernel on the
 * widened parameters) with the fp32 kernel's tolerance, and against the
 * fp32 GPU kernel on the widened parameters, which must give the same bits
 * (the same arithmetic on the same values). */

static void run_embedding_forward_bf16w(void)
{
    size_t nt = (size_t)EMB_B * (EMB_C + 1), no = (size_t)EMB_B * EMB_C * EMB_E;
    size_t ne = (size_t)VOCAB * EMB_E;
    int32_t *tok = rand_tokens(nt, 140u, VOCAB);
    uint16_t *E16;
    float *E;
    bf16_params(ne, 141u, 1.0f, 0.0f, &E16, &E);
    float *want = malloc(no * sizeof *want), *got = malloc(no * sizeof *got),
          *got32 = malloc(no * sizeof *got32);
    pp_embedding_forward(tok, EMB_B, EMB_C, E, EMB_E, want);

    cudaStream_t st = stream_new();
    int32_t *d_tok = dev_from(tok, nt * sizeof *tok);
    uint16_t *d_E16 = dev_from(E16, ne * sizeof *E16);
    float *d_E = dev_from(E, ne * sizeof *E);
    float *d_out = dev_alloc(no * sizeof *d_out), *d_out32 = dev_alloc(no * sizeof *d_out);
    cudaCheck(pp_cu_embedding_forward_bf16w(d_tok, EMB_B, EMB_C, d_E16, EMB_E, d_out, st));
    cudaCheck(pp_cu_embedding_forward(d_tok, EMB_B, EMB_C, d_E, EMB_E, d_out32, st));
    stream_done(st);
    host_from(got, d_out, no * sizeof *got);
    host_from(got32, d_out32, no * sizeof *got32);
    expect_same("out", got, want, no);
    expect_same("out vs fp32 kernel", got, got32, no);

    void *dev[] = {d_tok, d_E16, d_E, d_out, d_out32};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaCheck(cudaFree(dev[i]));
    void *host[] = {tok, E16, E, want, got, got32};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* One addition per element: exact. */
static void run_bias_add_bf16w(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C;
        float *want = rand_floats(n, 150u + (uint32_t)k, 1.0f), *bias;
        uint16_t *b16;
        bf16_params((size_t)C, 151u, 1.0f, 0.0f, &b16, &bias);
        float *got = malloc(n * sizeof *got), *got32 = malloc(n * sizeof *got32);
        cudaStream_t st = stream_new();
        float *d_y = dev_from(want, n * sizeof *want), *d_y32 = dev_from(want, n * sizeof *want);
        uint16_t *d_b16 = dev_from(b16, C * sizeof *b16);
        float *d_b = dev_from(bias, C * sizeof *bias);
        cudaCheck(pp_cu_bias_add_bf16w(d_y, d_b16, R, C, st));
        cudaCheck(pp_cu_bias_add(d_y32, d_b, R, C, st));
        stream_done(st);
        host_from(got, d_y, n * sizeof *got);
        host_from(got32, d_y32, n * sizeof *got32);
        pp_bias_add(want, bias, R, C);
        expect_same("y", got, want, n);
        expect_same("y vs fp32 kernel", got, got32, n);
        void *dev[] = {d_y, d_y32, d_b16, d_b};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
            cudaCheck(cudaFree(dev[i]));
        void *host[] = {want, bias, b16, got, got32};
        for (size_t i = 0; i < sizeof host / sizeof *host; i++)
            free(host[i]);
    }
}

/* h exact, a = gelu(h) within run_bias_gelu_forward's atol 2e-6, rtol 1e-5. */
static void run_bias_gelu_forward_bf16w(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C, hb = n * sizeof(float);
        float *h = rand_floats(n, 160u + (uint32_t)k, 4.0f), *bias;
        uint16_t *b16;
        bf16_params((size_t)C, 161u, 1.0f, 0.0f, &b16, &bias);
        float *a = malloc(hb), *got_h = malloc(hb), *got_a = malloc(hb), *h32 = malloc(hb),
              *a32 = malloc(hb);
        cudaStream_t st = stream_new();
        float *d_h = dev_from(h, hb), *d_h32 = dev_from(h, hb);
        uint16_t *d_b16 = dev_from(b16, C * sizeof *b16);
        float *d_b = dev_from(bias, C * sizeof *bias);
        float *d_a = dev_alloc(hb), *d_a32 = dev_alloc(hb);
        cudaCheck(pp_cu_bias_gelu_forward_bf16w(d_h, d_b16, d_a, R, C, st));
        cudaCheck(pp_cu_bias_gelu_forward(d_h32, d_b, d_a32, R, C, st));
        stream_done(st);
        host_from(got_h, d_h, hb);
        host_from(got_a, d_a, hb);
        host_from(h32, d_h32, hb);
        host_from(a32, d_a32, hb);
        pp_bias_gelu_forward(h, bias, a, R, C);
        expect_same("h", got_h, h, n);
        expect_close("a", got_a, a, n, 2e-6, 1e-5);
        expect_same("h vs fp32 kernel", got_h, h32, n);
        expect_same("a vs fp32 kernel", got_a, a32, n);
        void *dev[] = {d_h, d_h32, d_b16, d_b, d_a, d_a32};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
            cudaCheck(cudaFree(dev[i]));
        void *host[] = {h, bias, b16, a, got_h, got_a, h32, a32};
        for (size_t i = 0; i < sizeof host / sizeof *host; i++)
            free(host[i]);
    }
}

/* (y + x) + bias in the same order: exact. */
static void run_residual_bias_add_bf16w(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C;
        float *want = rand_floats(n, 170u + (uint32_t)k, 1.0f), *x = rand_floats(n, 171u, 1.0f);
        float *bias;
        uint16_t *b16;
        bf16_params((size_t)C, 172u, 1.0f, 0.0f, &b16, &bias);
        float *got = malloc(n * sizeof *got), *got32 = malloc(n * sizeof *got32);
        cudaStream_t st = stream_new();
        float *d_y = dev_from(want, n * sizeof *want), *d_y32 = dev_from(want, n * sizeof *want);
        float *d_x = dev_from(x, n * sizeof *x), *d_b = dev_from(bias, C * sizeof *bias);
        uint16_t *d_b16 = dev_from(b16, C * sizeof *b16);
        cudaCheck(pp_cu_residual_bias_add_bf16w(d_y, d_x, d_b16, R, C, st));
        cudaCheck(pp_cu_residual_bias_add(d_y32, d_x, d_b, R, C, st));
        stream_done(st);
        host_from(got, d_y, n * sizeof *got);
        host_from(got32, d_y32, n * sizeof *got32);
        pp_residual_bias_add(want, x, bias, R, C);
        expect_same("y", got, want, n);
        expect_same("y vs fp32 kernel", got, got32, n);
        void *dev[] = {d_y, d_y32, d_x, d_b, d_b16};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
            cudaCheck(cudaFree(dev[i]));
        void *host[] = {want, x, bias, b16, got, got32};
        for (size_t i = 0; i < sizeof host / sizeof *host; i++)
            free(host[i]);
    }
}

/* gamma in [0.5, 2.5) and beta in [-1, 1) as ln_inputs makes them, rounded
 * to bf16; tolerances as run_layernorm_forward's (atol 1e-5, rtol 1e-5). */
static void run_layernorm_forward_bf16w(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C, xb = n * sizeof(float), rb = (size_t)R * sizeof(float);
        float *x, *g0, *b0, *gamma, *beta;
        uint16_t *g16, *b16;
        ln_inputs(R, C, 180u + (uint32_t)k, &x, &g0, &b0);
        g16 = malloc(C * sizeof *g16);
        b16 = malloc(C * sizeof *b16);
        gamma = malloc(C * sizeof *gamma);
        beta = malloc(C * sizeof *beta);
        pp_f32_to_bf16(g0, g16, (size_t)C);
        pp_f32_to_bf16(b0, b16, (size_t)C);
        pp_bf16_to_f32(g16, gamma, (size_t)C);
        pp_bf16_to_f32(b16, beta, (size_t)C);
        float *y = malloc(xb), *mean = malloc(rb), *rstd = malloc(rb);
        float *got[3] = {malloc(xb), malloc(rb), malloc(rb)};
        float *got32[3] = {malloc(xb), malloc(rb), malloc(rb)};
        pp_layernorm_forward(x, gamma, beta, R, C, y, mean, rstd);

        cudaStream_t st = stream_new();
        float *d_x = dev_from(x, xb), *d_g = dev_from(gamma, C * sizeof *gamma);
        float *d_b = dev_from(beta, C * sizeof *beta);
        uint16_t *d_g16 = dev_from(g16, C * sizeof *g16), *d_b16 = dev_from(b16, C * sizeof *b16);
        float *d_out[3] = {dev_alloc(xb), dev_alloc(rb), dev_alloc(rb)};
        float *d_out32[3] = {dev_alloc(xb), dev_alloc(rb), dev_alloc(rb)};
        cudaCheck(pp_cu_layernorm_forward_bf16w(d_x, d_g16, d_b16, R, C, d_out[0], d_out[1],
                                                d_out[2], st));
        cudaCheck(
            pp_cu_layernorm_forward(d_x, d_g, d_b, R, C, d_out32[0], d_out32[1], d_out32[2], st));
        stream_done(st);
        for (int i = 0; i < 3; i++) {
            host_from(got[i], d_out[i], i ? rb : xb);
            host_from(got32[i], d_out32[i], i ? rb : xb);
        }
        expect_close("y", got[0], y, n, 1e-5, 1e-5);
        expect_close("mean", got[1], mean, (size_t)R, 1e-5, 1e-5);
        expect_close("rstd", got[2], rstd, (size_t)R, 1e-5, 1e-5);
        expect_same("y vs fp32 kernel", got[0], got32[0], n);
        expect_same("mean vs fp32 kernel", got[1], got32[1], (size_t)R);
        expect_same("rstd vs fp32 kernel", got[2], got32[2], (size_t)R);

        void *dev[] = {d_x, d_g, d_b, d_g16, d_b16};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
            cudaCheck(cudaFree(dev[i]));
        for (int i = 0; i < 3; i++) {
            cudaCheck(cudaFree(d_out[i]));
            cudaCheck(cudaFree(d_out32[i]));
            free(got[i]);
            free(got32[i]);
        }
        void *host[] = {x, g0, b0, gamma, beta, g16, b16, y, mean, rstd};
        for (size_t i = 0; i < sizeof host / sizeof *host; i++)
            free(host[i]);
    }
}

/* dx (the one output that reads gamma) within run_layernorm_backward's atol
 * 1e-5, rtol 1e-4; dgamma and dbeta (which read no gamma) within its atol
 * 1e-4, rtol 1e-5. */
static void run_layernorm_backward_bf16w(void)
{
    for (int k = 0; k < NSHAPES; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)R * C, xb = n * sizeof(float), cb = (size_t)C * sizeof(float);
        float *x, *g0, *beta, *gamma;
        uint16_t *g16 = malloc(C * sizeof *g16);
        ln_inputs(R, C, 190u + (uint32_t)k, &x, &g0, &beta);
        gamma = malloc(cb);
        pp_f32_to_bf16(g0, g16, (size_t)C);
        pp_bf16_to_f32(g16, gamma, (size_t)C);
        float *y = malloc(xb), *mean = malloc(R * sizeof *mean), *rstd = malloc(R * sizeof *rstd);
        pp_layernorm_forward(x, gamma, beta, R, C, y, mean, rstd);
        float *dy = rand_floats(n, 193u, 1.0f), *dx = rand_floats(n, 194u, 1.0f);
        float *dgamma = rand_floats((size_t)C, 195u, 1.0f),
              *dbeta = rand_floats((size_t)C, 196u, 1.0f);
        float *got[3] = {malloc(xb), malloc(cb), malloc(cb)};
        float *got32[3] = {malloc(xb), malloc(cb), malloc(cb)};

        cudaStream_t st = stream_new();
        float *d_x = dev_from(x, xb), *d_g = dev_from(gamma, cb);
        uint16_t *d_g16 = dev_from(g16, C * sizeof *g16);
        float *d_mean = dev_from(mean, R * sizeof *mean),
              *d_rstd = dev_from(rstd, R * sizeof *rstd);
        float *d_dy = dev_from(dy, xb);
        float *d_o[3] = {dev_from(dx, xb), dev_from(dgamma, cb), dev_from(dbeta, cb)};
        float *d_o32[3] = {dev_from(dx, xb), dev_from(dgamma, cb), dev_from(dbeta, cb)};
        cudaCheck(pp_cu_layernorm_backward_bf16w(d_x, d_g16, d_mean, d_rstd, d_dy, R, C, d_o[0],
                                                 d_o[1], d_o[2], st));
        cudaCheck(pp_cu_layernorm_backward(d_x, d_g, d_mean, d_rstd, d_dy, R, C, d_o32[0], d_o32[1],
                                           d_o32[2], st));
        stream_done(st);
        for (int i = 0; i < 3; i++) {
            host_from(got[i], d_o[i], i ? cb : xb);
            host_from(got32[i], d_o32[i], i ? cb : xb);
        }
        pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, dx, dgamma, dbeta);
        expect_close("dx", got[0], dx, n, 1e-5, 1e-4);
        expect_close("dgamma", got[1], dgamma, (size_t)C, 1e-4, 1e-5);
        expect_close("dbeta", got[2], dbeta, (size_t)C, 1e-4, 1e-5);
        expect_same("dx vs fp32 kernel", got[0], got32[0], n);
        expect_same("dgamma vs fp32 kernel", got[1], got32[1], (size_t)C);
        expect_same("dbeta vs fp32 kernel", got[2], got32[2], (size_t)C);

        void *dev[] = {d_x, d_g, d_g16, d_mean, d_rstd, d_dy};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
            cudaCheck(cudaFree(dev[i]));
        for (int i = 0; i < 3; i++) {
            cudaCheck(cudaFree(d_o[i]));
            cudaCheck(cudaFree(d_o32[i]));
            free(got[i]);
            free(got32[i]);
        }
        void *host[] = {x, g0, beta, gamma, g16, y, mean, rstd, dy, dx, dgamma, dbeta};
        for (size_t i = 0; i < sizeof host / sizeof *host; i++)
            free(host[i]);
    }
}

/* ------------------------------------------------------------------------ */
/* The gpt model's kernels                                                   */

/* Rounding to bf16 in fp32 storage: the same bits as pp_round_bf16. */
static void run_round_bf16(void)
{
    size_t n = 37001;
    float *x = rand_floats(n, 91, 3.0f), *want = malloc(n * sizeof *want),
          *got = malloc(n * sizeof *got);
    pp_round_bf16(x, want, n);
    float *d_x = dev_from(x, n * sizeof *x), *d_y = dev_alloc(n * sizeof *x);
    cudaStream_t st = stream_new();
    cudaCheck(pp_cu_round_bf16(d_x, d_y, n, st));
    stream_done(st);
    host_from(got, d_y, n * sizeof *got);
    expect_same("round_bf16", got, want, n);
    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_y));
    free(x), free(want), free(got);
}

/* Token + position embeddings: B 3, T 7, C 13, V 50 (a copy and an add:
 * exact); the backward's dwte sums in the atomics' order (close), dwpe in
 * the CPU's order (exact); bf16w against the CPU on the widened tables. */
static void run_embedding_pos(void)
{
    enum { B = 3, T = 7, C = 13, V = 50 };
    size_t nt = (size_t)B * (T + 1), n = (size_t)B * T * C;
    int32_t *tok = rand_tokens(nt, 17, 5); /* few distinct tokens: repeats */
    for (size_t i = 0; i < nt; i++)
        tok[i] += 40; /* rows 40..44 of 50 */
    float *wte = rand_floats((size_t)V * C, 3, 1.0f), *wpe = rand_floats((size_t)T * C, 4, 1.0f);
    float *dout = rand_floats(n, 5, 1.0f);
    float *out = malloc(n * sizeof *out), *got = malloc(n * sizeof *got);
    float *dwte = rand_floats((size_t)V * C, 6, 0.5f), *dwpe = rand_floats((size_t)T * C, 7, 0.5f);
    float *gwte = malloc((size_t)V * C * sizeof *gwte),
          *gwpe = malloc((size_t)T * C * sizeof *gwpe);
    int32_t *d_tok = dev_from(tok, nt * sizeof *tok);
    float *d_wte = dev_from(wte, (size_t)V * C * 4), *d_wpe = dev_from(wpe, (size_t)T * C * 4);
    float *d_out = dev_alloc(n * 4), *d_dout = dev_from(dout, n * 4);
    float *d_dwte = dev_from(dwte, (size_t)V * C * 4), *d_dwpe = dev_from(dwpe, (size_t)T * C * 4);
    cudaStream_t st = stream_new();
    cudaCheck(pp_cu_embedding_pos_forward(d_tok, B, T, d_wte, d_wpe, C, d_out, st));
    cudaCheck(pp_cu_embedding_pos_backward(d_tok, B, T, d_dout, C, V, d_dwte, d_dwpe, st));
    stream_done(st);
    host_from(got, d_out, n * 4);
    host_from(gwte, d_dwte, (size_t)V * C * 4);
    host_from(gwpe, d_dwpe, (size_t)T * C * 4);
    pp_embedding_pos_forward(tok, B, T, wte, wpe, C, out);
    pp_embedding_pos_backward(tok, B, T, dout, C, dwte, dwpe);
    expect_same("embedding_pos_forward", got, out, n);
    expect_same("dwte", gwte, dwte, (size_t)V * C);
    expect_same("dwpe", gwpe, dwpe, (size_t)T * C);

    /* bf16 tables */
    uint16_t *te16 = malloc((size_t)V * C * 2), *pe16 = malloc((size_t)T * C * 2);
    pp_f32_to_bf16(wte, te16, (size_t)V * C);
    pp_f32_to_bf16(wpe, pe16, (size_t)T * C);
    pp_bf16_to_f32(te16, wte, (size_t)V * C);
    pp_bf16_to_f32(pe16, wpe, (size_t)T * C);
    uint16_t *d_te16 = dev_from(te16, (size_t)V * C * 2),
             *d_pe16 = dev_from(pe16, (size_t)T * C * 2);
    st = stream_new();
    cudaCheck(pp_cu_embedding_pos_forward_bf16w(d_tok, B, T, d_te16, d_pe16, C, d_out, st));
    stream_done(st);
    host_from(got, d_out, n * 4);
    pp_embedding_pos_forward(tok, B, T, wte, wpe, C, out);
    expect_same("embedding_pos_forward_bf16w", got, out, n);

    void *dev[] = {d_tok, d_wte, d_wpe, d_out, d_dout, d_dwte, d_dwpe, d_te16, d_pe16};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaCheck(cudaFree(dev[i]));
    void *host[] = {tok, wte, wpe, dout, out, got, dwte, dwpe, gwte, gwpe, te16, pe16};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* Attention, forward and backward, against pp_attention_forward and
 * _backward with the same rows per block and precision, on odd shapes:
 * (B, T, C, NH, rows) with several blocks, a last short block, more heads
 * than rows (the GPU's head groups: hb = min(NH, rows), and a last partial
 * group), T = 1, and T > 64 with gpt_att_rows' 64. The GPU's scratch is
 * exactly gpt_att_scratch_floats(T, rows) floats, which the stand-ins'
 * extent checks hold it to. bf16: qkv and dout rounded first, as the
 * caller does, and given to the GPU as bf16 (its GEMMs then bf16
 * strided-batched, with P and dS packed to bf16 in the scratch); the GPU
 * writes out in bf16, and the backward on both sides reads the CPU's out
 * rounded, as gpt.c's stash holds it. */
static void run_attention_case(int B, int T, int C, int NH, int rows, int bf16)
{
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    size_t nsc = gpt_att_scratch_floats(T, rows);
    float *qkv = rand_floats(nq, 100 + T, 1.5f), *dout = rand_floats(no, 200 + T, 1.0f);
    if (bf16) {
        pp_round_bf16(qkv, qkv, nq);
        pp_round_bf16(dout, dout, no);
    }
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4);
    float *gout = malloc(no * 4), *glse = malloc(nl * 4), *gdqkv = malloc(nq * 4);
    float *scratch = malloc(nsc * 4);
    pp_attention_forward(qkv, out, lse, B, T, C, NH, rows, scratch, bf16);
    if (bf16)
        pp_round_bf16(out, out, no);
    pp_attention_backward(qkv, out, dout, lse, dqkv, B, T, C, NH, rows, scratch, bf16);

    /* the GPU takes bf16 qkv, out and dout with bf16 (exact: already
     * rounded) */
    uint16_t *q16 = malloc(nq * 2), *o16 = malloc(no * 2), *co16 = malloc(no * 2);
    pp_f32_to_bf16(qkv, q16, nq);
    pp_f32_to_bf16(dout, o16, no);
    pp_f32_to_bf16(out, co16, no);
    void *d_qkv = bf16 ? dev_from(q16, nq * 2) : dev_from(qkv, nq * 4);
    void *d_dout = bf16 ? dev_from(o16, no * 2) : dev_from(dout, no * 4);
    void *d_out = dev_alloc(no * (bf16 ? 2 : 4));
    float *d_lse = dev_alloc(nl * 4), *d_dqkv = dev_alloc(nq * 4);
    float *d_sc = dev_alloc(nsc * 4);
    cudaStream_t st = stream_new();
    cublasHandle_t blas;
    cublasCheck(cublasCreate(&blas));
    cublasCheck(cublasSetStream(blas, st));
    pp_cu_attention_forward(blas, st, d_qkv, d_out, d_lse, B, T, C, NH, rows, d_sc, bf16);
    /* the backward from the CPU's out and lse, so it is compared alone */
    void *d_cout = bf16 ? dev_from(co16, no * 2) : dev_from(out, no * 4);
    float *d_clse = dev_from(lse, nl * 4);
    pp_cu_attention_backward(blas, st, d_qkv, d_cout, d_dout, d_clse, d_dqkv, B, T, C, NH, rows,
                             d_sc, bf16);
    cudaCheck(cudaStreamSynchronize(st));
    cublasCheck(cublasDestroy(blas));
    stream_done(st);
    if (bf16) { /* widened exactly */
        host_from(co16, d_out, no * 2);
        pp_bf16_to_f32(co16, gout, no);
    } else {
        host_from(gout, d_out, no * 4);
    }
    host_from(glse, d_lse, nl * 4);
    host_from(gdqkv, d_dqkv, nq * 4);
    char what[96];
    /* bf16: a P or dS element on a rounding boundary may round apart on the
     * two sides (one bf16 step, 2^-8 of it, in one term: at most ~6e-3 here,
     * |P| <= 1, |v| < 1.5); on the stand-ins the worst measured was 1e-4
     * (GEMMs summed forward, reversed or in double), and P off by 1% (in
     * the packing) reached 1.35 times this tolerance */
    double atol = bf16 ? 5e-3 : 2e-5, rtol = bf16 ? 5e-3 : 2e-4;
    snprintf(what, sizeof what, "out B%d T%d C%d NH%d rows%d bf16 %d", B, T, C, NH, rows, bf16);
    expect_close(what, gout, out, no, atol, rtol);
    snprintf(what, sizeof what, "lse B%d T%d C%d NH%d rows%d bf16 %d", B, T, C, NH, rows, bf16);
    expect_close(what, glse, lse, nl, 2e-5, 2e-5);
    snprintf(what, sizeof what, "dqkv B%d T%d C%d NH%d rows%d bf16 %d", B, T, C, NH, rows, bf16);
    expect_close(what, gdqkv, dqkv, nq, atol, rtol);

    void *dev[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv, d_sc, d_cout, d_clse};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaCheck(cudaFree(dev[i]));
    void *host[] = {qkv, dout, out, lse, dqkv, gout, glse, gdqkv, scratch, q16, o16, co16};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

static const int att_shapes[][5] = {
    {2, 7, 12, 3, 3},  /* blocks of 3 rows: 3, 3, 1; one group of 3 heads */
    {1, 5, 10, 5, 2},  /* 5 heads, 2 rows: groups of 2 heads, 1 row, the last of 1 head */
    {3, 1, 4, 2, 1},   /* T = 1 */
    {1, 70, 8, 2, 64}, /* gpt_att_rows's 64: blocks of 32 rows over 2 heads */
    {2, 9, 9, 1, 9},   /* one head, one block */
};

static void run_attention(void)
{
    for (size_t i = 0; i < sizeof att_shapes / sizeof *att_shapes; i++)
        run_attention_case(att_shapes[i][0], att_shapes[i][1], att_shapes[i][2], att_shapes[i][3],
                           att_shapes[i][4], 0);
}

static void run_attention_bf16(void)
{
    for (size_t i = 0; i < sizeof att_shapes / sizeof *att_shapes; i++)
        run_attention_case(att_shapes[i][0], att_shapes[i][1], att_shapes[i][2], att_shapes[i][3],
                           att_shapes[i][4], 1);
}

/* pp_cu_first_nonfinite against pp_first_nonfinite: no bad number, one at
 * the ends and around a block's stride, the first of several (an infinity
 * before a NaN), each sign, a single element and none. The same numbers
 * rounded to bf16 (a bf16 run's input gradient) through the bf16 twins:
 * the same index (|x| <= 3 stays finite, NaN and infinity stay so). */
static void run_first_nonfinite(void)
{
    static const struct {
        size_t n;
        long long at[2];
        float bad[2];
    } cases[] = {
        {37000, {-1, -1}, {0, 0}},
        {37000, {0, -1}, {NAN, 0}},
        {37000, {255, -1}, {INFINITY, 0}},
        {37000, {256, -1}, {-INFINITY, 0}},
        {37000, {36999, -1}, {-NAN, 0}},
        {37000, {5000, 1000}, {NAN, INFINITY}},
        {1, {0, -1}, {NAN, 0}},
        {1, {-1, -1}, {0, 0}},
        {0, {-1, -1}, {0, 0}},
    };
    cudaStream_t st = stream_new();
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t n = cases[c].n;
        float *x = rand_floats(n, 7 + (uint32_t)c, 3.0f);
        for (int k = 0; k < 2; k++)
            if (cases[c].at[k] >= 0)
                x[cases[c].at[k]] = cases[c].bad[k];
        long long want = pp_first_nonfinite(x, n);
        float *dx = dev_from(x, n * sizeof *x);
        double *drec = dev_alloc(2 * sizeof(double)), rec[2];
        cudaCheck(pp_cu_first_nonfinite(dx, n, drec, st));
        cudaCheck(cudaStreamSynchronize(st));
        host_from(rec, drec, sizeof rec);
        ck_assert_msg(rec[0] == (double)want, "case %zu: index %g, the C scan's %lld", c, rec[0],
                      want);
        if (want >= 0) {
            double v = x[want];
            ck_assert_msg(memcmp(&rec[1], &v, sizeof v) == 0 ||
                              (isnan(v) && isnan(rec[1]) && signbit(v) == signbit(rec[1])),
                          "case %zu: value %g, the C scan's %g", c, rec[1], v);
        }
        uint16_t *xb = malloc(n * sizeof *xb + 2);
        pp_f32_to_bf16(x, xb, n);
        ck_assert_msg(pp_first_nonfinite_bf16(xb, n) == want,
                      "case %zu: bf16 C scan %lld, not %lld", c, pp_first_nonfinite_bf16(xb, n),
                      want);
        uint16_t *dxb = dev_from(xb, n * sizeof *xb);
        cudaCheck(pp_cu_first_nonfinite_bf16(dxb, n, drec, st));
        cudaCheck(cudaStreamSynchronize(st));
        host_from(rec, drec, sizeof rec);
        ck_assert_msg(rec[0] == (double)want, "case %zu: bf16 index %g, the C scan's %lld", c,
                      rec[0], want);
        if (want >= 0)
            ck_assert_msg(isnan(rec[1]) ? isnan(x[want]) : rec[1] == (double)x[want],
                          "case %zu: bf16 value %g, not %g", c, rec[1], (double)x[want]);
        cudaCheck(cudaFree(dxb));
        free(xb);
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(drec));
        free(x);
    }
    stream_done(st);
}

/* A test per kernel: skipped without a GPU. */
#define GPU_TEST(name)                                                                             \
    START_TEST(test_cu_##name)                                                                     \
    {                                                                                              \
        if (!have_gpu()) {                                                                         \
            test_skipped("no GPU\n");                                                              \
            return;                                                                                \
        }                                                                                          \
        run_##name();                                                                              \
    }                                                                                              \
    END_TEST

#else /* !PP_HAVE_CUDA */

#define GPU_TEST(name)                                                                             \
    START_TEST(test_cu_##name) { test_skipped("built without CUDA\n"); }                           \
    END_TEST

#endif

GPU_TEST(embedding_forward)
GPU_TEST(embedding_backward)
GPU_TEST(bias_add)
GPU_TEST(bias_gelu_forward)
GPU_TEST(gelu_backward)
GPU_TEST(bias_grad)
GPU_TEST(residual_bias_add)
GPU_TEST(add)
GPU_TEST(layernorm_forward)
GPU_TEST(layernorm_backward)
GPU_TEST(layernorm_backward_null)
GPU_TEST(softmax_xent_fused)
GPU_TEST(sum_into)
GPU_TEST(sgd_step)
GPU_TEST(adamw_step)
GPU_TEST(f32_to_bf16)
GPU_TEST(bf16_to_f32)
GPU_TEST(embedding_forward_bf16w)
GPU_TEST(bias_add_bf16w)
GPU_TEST(bias_gelu_forward_bf16w)
GPU_TEST(residual_bias_add_bf16w)
GPU_TEST(layernorm_forward_bf16w)
GPU_TEST(layernorm_backward_bf16w)
GPU_TEST(round_bf16)
GPU_TEST(embedding_pos)
GPU_TEST(attention)
GPU_TEST(attention_bf16)
GPU_TEST(first_nonfinite)

Suite *cuda_kernels_suite(void)
{
    Suite *s = suite_create("cuda_kernels");
    TCase *tc = tcase_create("cuda_kernels");
    tcase_add_test(tc, test_cu_embedding_forward);
    tcase_add_test(tc, test_cu_embedding_backward);
    tcase_add_test(tc, test_cu_bias_add);
    tcase_add_test(tc, test_cu_bias_gelu_forward);
    tcase_add_test(tc, test_cu_gelu_backward);
    tcase_add_test(tc, test_cu_bias_grad);
    tcase_add_test(tc, test_cu_residual_bias_add);
    tcase_add_test(tc, test_cu_add);
    tcase_add_test(tc, test_cu_layernorm_forward);
    tcase_add_test(tc, test_cu_layernorm_backward);
    tcase_add_test(tc, test_cu_layernorm_backward_null);
    tcase_add_test(tc, test_cu_softmax_xent_fused);
    tcase_add_test(tc, test_cu_sum_into);
    tcase_add_test(tc, test_cu_sgd_step);
    tcase_add_test(tc, test_cu_adamw_step);
    tcase_add_test(tc, test_cu_f32_to_bf16);
    tcase_add_test(tc, test_cu_bf16_to_f32);
    tcase_add_test(tc, test_cu_embedding_forward_bf16w);
    tcase_add_test(tc, test_cu_bias_add_bf16w);
    tcase_add_test(tc, test_cu_bias_gelu_forward_bf16w);
    tcase_add_test(tc, test_cu_residual_bias_add_bf16w);
    tcase_add_test(tc, test_cu_layernorm_forward_bf16w);
    tcase_add_test(tc, test_cu_layernorm_backward_bf16w);
    tcase_add_test(tc, test_cu_round_bf16);
    tcase_add_test(tc, test_cu_embedding_pos);
    tcase_add_test(tc, test_cu_attention);
    tcase_add_test(tc, test_cu_attention_bf16);
    tcase_add_test(tc, test_cu_first_nonfinite);
    suite_add_tcase(s, tc);
    return s;
}
