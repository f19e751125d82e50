/* test_kernels.c - unit tests of the CPU kernels (kernels/cpu_kernels.c):
 * the BLAS GEMM against the reference loop in every transpose combination,
 * GELU and softmax cross-entropy backward against finite differences, and
 * the embedding's scatter-add over repeated tokens; then the CPU twins of
 * the CUDA kernels: fused elementwise kernels against the kernels they fuse,
 * layer norm (its backward against finite differences, and its NULL-able
 * outputs giving the same bits split as together), the fused softmax
 * cross-entropy against the unfused pair, AdamW against a hand-computed
 * example and bf16 rounding. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <float.h>

#include "../../kernels/cpu_kernels.h"
#include "../../kernels/finite.h"
#include "../../kernels/model.h"
#include "../../kernels/vmath.h"
#include "suites.h"
#include "testutil.h"

/* Deterministic test data in [-1, 1). */
static float rnd(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rnd(&seed);
}

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */

/* Runs both GEMMs on the same C and compares. beta == 0 starts C as NaN:
 * BLAS semantics say C is then not read, so no NaN may leak through. */
static void check_gemm(int ta, int tb, int M, int N, int K, float alpha, float beta)
{
    float *A = malloc(sizeof(float) * (size_t)(M * K + 1));
    float *B = malloc(sizeof(float) * (size_t)(K * N + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    float *R = malloc(sizeof(float) * (size_t)(M * N));
    fill(A, (size_t)(M * K), 11u + (uint32_t)M);
    fill(B, (size_t)(K * N), 23u + (uint32_t)N);
    fill(C, (size_t)(M * N), 37u);
    if (beta == 0.0f)
        for (int i = 0; i < M * N; i++)
            C[i] = NAN;
    memcpy(R, C, sizeof(float) * (size_t)(M * N));

    pp_gemm(ta, tb, M, N, K, alpha, A, B, beta, C);
    pp_gemm_ref(ta, tb, M, N, K, alpha, A, B, beta, R);
    for (int i = 0; i < M * N; i++) {
        ck_assert_msg(isfinite(C[i]), "ta=%d tb=%d: C[%d] not finite", ta, tb, i);
        ck_assert_msg(fabsf(C[i] - R[i]) <= 1e-5f * (1.0f + fabsf(R[i])),
                      "ta=%d tb=%d M=%d N=%d K=%d: C[%d] = %g, ref %g", ta, tb, M, N, K, i,
                      (double)C[i], (double)R[i]);
    }
    free(A);
    free(B);
    free(C);
    free(R);
}

START_TEST(test_gemm_transposes)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm(ta, tb, 7, 5, 11, 1.0f, 0.0f);
            check_gemm(ta, tb, 13, 9, 3, 0.75f, -0.5f);
            check_gemm(ta, tb, 1, 17, 31, -1.25f, 1.0f);
            check_gemm(ta, tb, 33, 1, 1, 2.0f, 0.0f);
        }
}
END_TEST

/* An empty inner dimension must still apply beta (and not crash the BLAS). */
START_TEST(test_gemm_empty_k)
{
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};
    pp_gemm(0, 0, 2, 3, 0, 1.0f, A, B, 0.5f, C);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(C[i], 0.5f * (float)(i + 1));
    pp_gemm(1, 1, 2, 3, 0, 1.0f, A, B, 0.0f, C);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(C[i], 0.0f);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* GELU                                                                      */

START_TEST(test_gelu_values)
{
    float x[3] = {0.0f, 1.0f, -1.0f}, y[3];
    pp_gelu_forward(x, y, 3);
    ck_assert_float_eq(y[0], 0.0f);
    /* tanh-approximate GELU(1) = 0.841192, GELU(-1) = -0.158808 */
    ck_assert_float_eq_tol(y[1], 0.841192f, 1e-5f);
    ck_assert_float_eq_tol(y[2], -0.158808f, 1e-5f);
}
END_TEST

START_TEST(test_gelu_backward_fd)
{
    enum { N = 81 };
    float x[N], dy[N], dx[N];
    for (int i = 0; i < N; i++)
        x[i] = -5.0f + 0.125f * (float)i; /* covers both tails */
    fill(dy, N, 5u);
    pp_gelu_backward(x, dy, dx, N);
    for (int i = 0; i < N; i++) {
        /* Central difference in float, divided by the step actually taken. */
        float xp = x[i] + 1e-2f, xm = x[i] - 1e-2f, yp, ym;
        pp_gelu_forward(&xp, &yp, 1);
        pp_gelu_forward(&xm, &ym, 1);
        float fd = dy[i] * (yp - ym) / (xp - xm);
        ck_assert_msg(fabsf(dx[i] - fd) <= 1e-3f, "x=%g: dx %g, fd %g", (double)x[i], (double)dx[i],
                      (double)fd);
    }
    /* dy and dx may alias. */
    float same[N];
    memcpy(same, dy, sizeof same);
    pp_gelu_backward(x, same, same, N);
    ck_assert_mem_eq(same, dx, sizeof same);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                     */

enum { ROWS = 4, V = 9, STRIDE = 3 };

/* Targets with a stride, as the model reads them from [batch][context+1]. */
static const int32_t targets[ROWS * STRIDE] = {2, -1, -1, 0, -1, -1, 8, -1, -1, 2, -1, -1};

START_TEST(test_softmax_xent_forward)
{
    float logits[ROWS * V], probs[ROWS * V], shifted[ROWS * V], probs2[ROWS * V];
    fill(logits, ROWS * V, 77u);
    double loss = pp_softmax_xent_forward(logits, targets, STRIDE, ROWS, V, probs);
    double expect = 0.0;
    for (int r = 0; r < ROWS; r++) {
        double sum = 0.0;
        for (int j = 0; j < V; j++)
            sum += probs[r * V + j];
        ck_assert_double_eq_tol(sum, 1.0, 1e-6);
        expect -= log((double)probs[r * V + targets[r * STRIDE]]);
    }
    ck_assert_double_eq_tol(loss, expect, 1e-5);

    /* Subtracting the max makes huge logits harmless and the result shift
     * invariant. */
    for (int i = 0; i < ROWS * V; i++)
        shifted[i] = logits[i] + 1000.0f;
    double loss2 = pp_softmax_xent_forward(shifted, targets, STRIDE, ROWS, V, probs2);
    ck_assert(isfinite(loss2));
    ck_assert_double_eq_tol(loss2, loss, 1e-3);
    for (int i = 0; i < ROWS * V; i++)
        ck_assert_float_eq_tol(probs2[i], probs[i], 1e-4f);
}
END_TEST

START_TEST(test_softmax_xent_backward_fd)
{
    float logits[ROWS * V], probs[ROWS * V], dlogits[ROWS * V];
    const float scale = 0.5f;
    fill(logits, ROWS * V, 99u);
    pp_softmax_xent_forward(logits, targets, STRIDE, ROWS, V, probs);
    pp_softmax_xent_backward(probs, targets, STRIDE, ROWS, V, scale, dlogits);
    for (int i = 0; i < ROWS * V; i++) {
        float keep = logits[i];
        logits[i] = keep + 1e-3f;
        float up = logits[i];
        double lp = pp_softmax_xent_forward(logits, targets, STRIDE, ROWS, V, probs);
        logits[i] = keep - 1e-3f;
        float down = logits[i];
        double lm = pp_softmax_xent_forward(logits, targets, STRIDE, ROWS, V, probs);
        logits[i] = keep;
        double fd = scale * (lp - lm) / ((double)up - (double)down);
        ck_assert_msg(fabs(dlogits[i] - fd) <= 1e-4, "logit %d: analytic %g, fd %g", i,
                      (double)dlogits[i], fd);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Embedding and bias                                                        */

START_TEST(test_embedding)
{
    enum { B = 2, C = 3, E = 2 };
    /* [batch][context+1]; the last column is the target and must be ignored.
     * Byte 7 occurs three times, once in the other row. */
    const int32_t tokens[B * (C + 1)] = {7, 1, 7, 200, 0, 7, 255, 100};
    float table[256 * E], out[B * C * E], dE[256 * E];
    for (int i = 0; i < 256 * E; i++)
        table[i] = (float)i;
    pp_embedding_forward(tokens, B, C, table, E, out);
    const int32_t window[B * C] = {7, 1, 7, 0, 7, 255};
    for (int i = 0; i < B * C; i++)
        for (int e = 0; e < E; e++)
            ck_assert_float_eq(out[i * E + e], (float)(window[i] * E + e));

    float dout[B * C * E];
    for (int i = 0; i < B * C * E; i++)
        dout[i] = (float)(i + 1);
    for (int i = 0; i < 256 * E; i++)
        dE[i] = 0.5f; /* backward accumulates */
    pp_embedding_backward(tokens, B, C, dout, E, dE);
    /* byte 7: positions 0, 2 (row 0) and 1 (row 1) -> dout rows 0, 2, 4 */
    ck_assert_float_eq(dE[7 * E + 0], 0.5f + 1 + 5 + 9);
    ck_assert_float_eq(dE[7 * E + 1], 0.5f + 2 + 6 + 10);
    ck_assert_float_eq(dE[1 * E + 0], 0.5f + 3);
    ck_assert_float_eq(dE[0 * E + 1], 0.5f + 8);
    ck_assert_float_eq(dE[255 * E + 1], 0.5f + 12);
    ck_assert_float_eq(dE[200 * E + 0], 0.5f); /* a target, not in any window */
    ck_assert_float_eq(dE[100 * E + 0], 0.5f);
}
END_TEST

START_TEST(test_bias)
{
    float y[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {10, 20, 30}, db[3] = {1, 1, 1};
    pp_bias_add(y, bias, 2, 3);
    ck_assert_float_eq(y[0], 11.0f);
    ck_assert_float_eq(y[5], 36.0f);
    pp_bias_grad(y, 2, 3, db);
    ck_assert_float_eq(db[0], 1 + 11 + 14);
    ck_assert_float_eq(db[2], 1 + 33 + 36);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* CPU twins of the CUDA kernels                                             */

/* The fused kernels give the same bits as the kernels they fuse. */
START_TEST(test_bias_gelu_forward)
{
    enum { R = 5, C = 7 };
    float h[R * C], h2[R * C], bias[C], a[R * C], a2[R * C];
    fill(h, R * C, 3u);
    for (int i = 0; i < R * C; i++)
        h[i] *= 4.0f; /* GELU's tails too */
    fill(bias, C, 4u);
    memcpy(h2, h, sizeof h);
    pp_bias_gelu_forward(h, bias, a, R, C);
    pp_bias_add(h2, bias, R, C);
    pp_gelu_forward(h2, a2, R * C);
    ck_assert_mem_eq(h, h2, sizeof h); /* h keeps the pre-activation */
    ck_assert_mem_eq(a, a2, sizeof a);
}
END_TEST

START_TEST(test_residual_bias_add)
{
    enum { R = 4, C = 9 };
    float y[R * C], y2[R * C], x[R * C], bias[C];
    fill(y, R * C, 5u);
    fill(x, R * C, 6u);
    fill(bias, C, 7u);
    memcpy(y2, y, sizeof y);
    pp_residual_bias_add(y, x, bias, R, C);
    pp_add(y2, x, R * C);
    pp_bias_add(y2, bias, R, C);
    ck_assert_mem_eq(y, y2, sizeof y);

    float u[3] = {1.0f, 2.0f, 3.0f}, v[3] = {0.5f, -2.0f, 4.0f};
    pp_add(u, v, 3);
    ck_assert_float_eq(u[0], 1.5f);
    ck_assert_float_eq(u[1], 0.0f);
    ck_assert_float_eq(u[2], 7.0f);
}
END_TEST

/* Layer norm data: rows of different spread, gamma away from 0. */
static void ln_data(float *x, float *gamma, float *beta, int rows, int cols, uint32_t seed)
{
    fill(x, (size_t)rows * cols, seed);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            x[r * cols + c] = x[r * cols + c] * (float)(r + 1) + (float)r;
    fill(gamma, (size_t)cols, seed + 1);
    for (int c = 0; c < cols; c++)
        gamma[c] += 1.5f;
    fill(beta, (size_t)cols, seed + 2);
}

START_TEST(test_layernorm_forward)
{
    enum { R = 3, C = 11 };
    float x[R * C], gamma[C], beta[C], ones[C], zeros[C], y[R * C], yn[R * C], mean[R], rstd[R];
    ln_data(x, gamma, beta, R, C, 41u);
    for (int c = 0; c < C; c++) {
        ones[c] = 1.0f;
        zeros[c] = 0.0f;
    }
    pp_layernorm_forward(x, ones, zeros, R, C, yn, mean, rstd);
    for (int r = 0; r < R; r++) {
        double mu = 0.0, var = 0.0, ym = 0.0, yv = 0.0;
        for (int c = 0; c < C; c++)
            mu += x[r * C + c];
        mu /= C;
        for (int c = 0; c < C; c++)
            var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
        var /= C; /* biased */
        ck_assert_double_eq_tol(mean[r], mu, 1e-6 * (1.0 + fabs(mu)));
        ck_assert_double_eq_tol(rstd[r], 1.0 / sqrt(var + 1e-5), 1e-6 / sqrt(var + 1e-5));
        /* Normalised: mean 0, variance var / (var + eps). */
        for (int c = 0; c < C; c++)
            ym += yn[r * C + c];
        ym /= C;
        for (int c = 0; c < C; c++)
            yv += (yn[r * C + c] - ym) * (yn[r * C + c] - ym);
        yv /= C;
        ck_assert_double_eq_tol(ym, 0.0, 1e-6);
        ck_assert_double_eq_tol(yv, var / (var + 1e-5), 1e-5);
    }
    /* gamma and beta scale and shift each column. */
    pp_layernorm_forward(x, gamma, beta, R, C, y, mean, rstd);
    for (int i = 0; i < R * C; i++)
        ck_assert_float_eq_tol(y[i], yn[i] * gamma[i % C] + beta[i % C], 1e-6f);
}
END_TEST

/* sum(w * layernorm(x)) in double, the function whose gradient the backward
 * computes when dy = w. */
static double ln_objective(const float *x, const float *gamma, const float *beta, int rows,
                           int cols, const float *w)
{
    size_t n = (size_t)rows * cols;
    float *y = malloc(n * sizeof *y), *mean = malloc((size_t)rows * sizeof *mean),
          *rstd = malloc((size_t)rows * sizeof *rstd);
    pp_layernorm_forward(x, gamma, beta, rows, cols, y, mean, rstd);
    double l = 0.0;
    for (size_t i = 0; i < n; i++)
        l += (double)w[i] * y[i];
    free(y);
    free(mean);
    free(rstd);
    return l;
}

/* Central differences of ln_objective with respect to v[i] (one of x,
 * gamma, beta), step h = 1e-2 in float, divided by the step actually taken.
 * The truncation and float rounding errors of the difference are about
 * 1e-4 here (measured at 3x7: h = 1e-1 gives 9e-3, 1e-3 gives 2e-4), so the
 * tolerance 1e-3 (1 + |grad|) leaves a margin of ten; a wrong term in the
 * backward is off by O(0.1) or more. */
static void check_ln_fd(float *v, size_t nv, const float *grad, float start, const char *what,
                        const float *x, const float *gamma, const float *beta, int rows, int cols,
                        const float *w)
{
    for (size_t i = 0; i < nv; i++) {
        float keep = v[i];
        v[i] = keep + 1e-2f;
        float up = v[i];
        double lp = ln_objective(x, gamma, beta, rows, cols, w);
        v[i] = keep - 1e-2f;
        float down = v[i];
        double lm = ln_objective(x, gamma, beta, rows, cols, w);
        v[i] = keep;
        double fd = (lp - lm) / ((double)up - (double)down);
        double got = (double)grad[i] - start; /* the backward accumulates onto start */
        ck_assert_msg(fabs(got - fd) <= 1e-3 * (1.0 + fabs(fd)), "%dx%d d%s[%zu]: %g, fd %g", rows,
                      cols, what, i, got, fd);
    }
}

static void check_layernorm_backward(int rows, int cols, uint32_t seed)
{
    size_t n = (size_t)rows * cols;
    float *x = malloc(n * sizeof *x), *w = malloc(n * sizeof *w), *dx = malloc(n * sizeof *dx);
    float *gamma = malloc((size_t)cols * sizeof *gamma),
          *beta = malloc((size_t)cols * sizeof *beta);
    float *dgamma = malloc((size_t)cols * sizeof *dgamma),
          *dbeta = malloc((size_t)cols * sizeof *dbeta);
    float *y = malloc(n * sizeof *y), *mean = malloc((size_t)rows * sizeof *mean),
          *rstd = malloc((size_t)rows * sizeof *rstd);
    ln_data(x, gamma, beta, rows, cols, seed);
    fill(w, n, seed + 3);
    const float start = 0.25f;
    for (size_t i = 0; i < n; i++)
        dx[i] = start;
    for (int c = 0; c < cols; c++)
        dgamma[c] = dbeta[c] = start;
    pp_layernorm_forward(x, gamma, beta, rows, cols, y, mean, rstd);
    pp_layernorm_backward(x, gamma, mean, rstd, w, rows, cols, dx, dgamma, dbeta);
    check_ln_fd(x, n, dx, start, "x", x, gamma, beta, rows, cols, w);
    check_ln_fd(gamma, (size_t)cols, dgamma, start, "gamma", x, gamma, beta, rows, cols, w);
    check_ln_fd(beta, (size_t)cols, dbeta, start, "beta", x, gamma, beta, rows, cols, w);
    free(x);
    free(w);
    free(dx);
    free(gamma);
    free(beta);
    free(dgamma);
    free(dbeta);
    free(y);
    free(mean);
    free(rstd);
}

START_TEST(test_layernorm_backward_fd)
{
    check_layernorm_backward(3, 7, 51u);
    check_layernorm_backward(2, 33, 61u);
}
END_TEST

/* NULL outputs skip their part (a split backward's B and W): dx alone,
 * then the parameters alone (and each parameter alone), give the same bits
 * as one call computing all three, and a skipped output is not needed. */
START_TEST(test_layernorm_backward_null_outputs)
{
    enum { R = 4, C = 19, N = R * C };
    float x[N], gamma[C], beta[C], y[N], mean[R], rstd[R], dy[N];
    float dx_all[N], dg_all[C], db_all[C], dx[N], dg[C], db[C], dg2[C], db2[C];
    ln_data(x, gamma, beta, R, C, 71u);
    fill(dy, N, 73u);
    pp_layernorm_forward(x, gamma, beta, R, C, y, mean, rstd);
    /* Accumulate onto nonzero starts, as the model does. */
    fill(dx_all, N, 79u);
    fill(dg_all, C, 83u);
    fill(db_all, C, 89u);
    memcpy(dx, dx_all, sizeof dx);
    memcpy(dg, dg_all, sizeof dg);
    memcpy(db, db_all, sizeof db);
    memcpy(dg2, dg_all, sizeof dg2);
    memcpy(db2, db_all, sizeof db2);

    pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, dx_all, dg_all, db_all);
    pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, dx, NULL, NULL);
    pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, NULL, dg, db);
    ck_assert_mem_eq(dx, dx_all, sizeof dx);
    ck_assert_mem_eq(dg, dg_all, sizeof dg);
    ck_assert_mem_eq(db, db_all, sizeof db);
    pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, NULL, NULL, db2);
    pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, NULL, dg2, NULL);
    ck_assert_mem_eq(dg2, dg_all, sizeof dg2);
    ck_assert_mem_eq(db2, db_all, sizeof db2);
    /* All NULL: a no-op. */
    pp_layernorm_backward(x, gamma, mean, rstd, dy, R, C, NULL, NULL, NULL);
}
END_TEST

/* The fused kernel against pp_softmax_xent_forward + _backward: the same
 * bits for dlogits, each row's loss within float rounding of the double
 * one, and the same again with dlogits aliasing logits. */
START_TEST(test_softmax_xent_fused)
{
    float logits[ROWS * V], probs[ROWS * V], dref[ROWS * V], d[ROWS * V], loss[ROWS];
    const float scale = 0.25f;
    fill(logits, ROWS * V, 123u);
    for (int i = 0; i < ROWS * V; i++)
        logits[i] *= 6.0f;
    pp_softmax_xent_forward(logits, targets, STRIDE, ROWS, V, probs);
    pp_softmax_xent_backward(probs, targets, STRIDE, ROWS, V, scale, dref);
    pp_softmax_xent_fused(logits, targets, STRIDE, ROWS, V, scale, d, loss);
    ck_assert_mem_eq(d, dref, sizeof d);
    for (int r = 0; r < ROWS; r++) {
        float p1[V];
        double lr = pp_softmax_xent_forward(logits + r * V, targets + r * STRIDE, STRIDE, 1, V, p1);
        ck_assert_double_eq_tol(loss[r], lr, 1e-6 * (1.0 + fabs(lr)));
    }

    float alias[ROWS * V], loss2[ROWS];
    memcpy(alias, logits, sizeof alias);
    pp_softmax_xent_fused(alias, targets, STRIDE, ROWS, V, scale, alias, loss2);
    ck_assert_mem_eq(alias, dref, sizeof alias);
    ck_assert_mem_eq(loss2, loss, sizeof loss);
}
END_TEST

/* Two steps of AdamW (lr 0.1, betas 0.9/0.999, eps 1e-8, weight decay 0.01)
 * worked by hand:
 *   p = 1, g = 0.5 then -0.25:
 *     t=1: m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25,
 *          p = 1 - 0.1 (0.5/0.5 + 0.01 * 1) = 0.899
 *     t=2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225,
 *          mhat = 0.02/0.19 = 0.1052632, vhat = 0.00031225/0.001999 = 0.1562031,
 *          p = 0.899 - 0.1 (0.1052632/0.3952254 + 0.00899) = 0.8714673
 *   p = -2, g = -1 twice: mhat = -1 and vhat = 1 both times (a constant
 *     gradient moves by lr): p = -2 + 0.1 (1 + 0.02) = -1.898, then
 *     -1.898 + 0.1 (1 + 0.01898) = -1.796102
 *   p = 0.5, g = 0: only the decay, p = 0.5 * 0.999^2 = 0.4990005. */
START_TEST(test_adamw_two_steps)
{
    float p[3] = {1.0f, -2.0f, 0.5f}, m[3] = {0}, v[3] = {0};
    float g1[3] = {0.5f, -1.0f, 0.0f}, g2[3] = {-0.25f, -1.0f, 0.0f};
    pp_adamw_step(p, g1, m, v, 3, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(g1[i], 0.0f);
    ck_assert_float_eq_tol(p[0], 0.899f, 1e-6f);
    ck_assert_float_eq_tol(p[1], -1.898f, 1e-6f);
    ck_assert_float_eq_tol(p[2], 0.4995f, 1e-6f);
    /* 0.9f and 0.999f are not exact: 1 - 0.9f is 0.1 (1 + 2.4e-7) and
     * 1 - 0.999f is 0.001 (1 - 1.3e-5), hence the moments' tolerances. */
    ck_assert_float_eq_tol(m[0], 0.05f, 1e-7f);
    ck_assert_float_eq_tol(v[0], 0.00025f, 0.00025f * 2e-5f);
    pp_adamw_step(p, g2, m, v, 3, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(g2[i], 0.0f);
    ck_assert_float_eq_tol(m[0], 0.02f, 1e-7f);
    ck_assert_float_eq_tol(v[0], 0.00031225f, 0.00031225f * 2e-5f);
    ck_assert_float_eq_tol(m[1], -0.19f, 1e-7f);
    ck_assert_float_eq_tol(v[1], 0.001999f, 0.001999f * 2e-5f);
    ck_assert_float_eq_tol(p[0], 0.8714673f, 2e-6f);
    ck_assert_float_eq_tol(p[1], -1.796102f, 2e-6f);
    ck_assert_float_eq_tol(p[2], 0.4990005f, 1e-6f);
}
END_TEST

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float f32_of(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Exact cases of round to nearest even (bf16 keeps 7 mantissa bits, so the
 * float's low 16 bits decide), then a round trip of random values. */
START_TEST(test_bf16)
{
    const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f800000u, 0x3f80u}, /* 1.0: exact */
        {0xbf800000u, 0xbf80u}, /* -1.0 */
        {0x00000000u, 0x0000u}, /* +0 */
        {0x80000000u, 0x8000u}, /* -0 */
        {0x3f808000u, 0x3f80u}, /* 1 + 2^-8, halfway between 1 and 1 + 2^-7: to even (down) */
        {0x3f818000u, 0x3f82u}, /* halfway above an odd mantissa: to even (up) */
        {0x3f808001u, 0x3f81u}, /* just above halfway: up */
        {0x3f807fffu, 0x3f80u}, /* just below halfway: down */
        {0xbf818000u, 0xbf82u}, /* negative halfway, odd: away from zero to even */
        {0x3fffffffu, 0x4000u}, /* carry into the exponent: 2 - 2^-23 -> 2.0 */
        {0x7f7fffffu, 0x7f80u}, /* FLT_MAX rounds to infinity */
        {0x7f800000u, 0x7f80u}, /* +inf */
        {0xff800000u, 0xff80u}, /* -inf */
        {0x00018000u, 0x0002u}, /* a subnormal halfway above an odd mantissa: up */
        {0x00010000u, 0x0001u}, /* smallest bf16 subnormal */
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    float in[NC];
    uint16_t out[NC];
    for (int i = 0; i < NC; i++)
        in[i] = f32_of(cases[i].in);
    pp_f32_to_bf16(in, out, NC);
    for (int i = 0; i < NC; i++)
        ck_assert_msg(out[i] == cases[i].out, "0x%08x -> 0x%04x, want 0x%04x",
                      (unsigned)cases[i].in, (unsigned)out[i], (unsigned)cases[i].out);

    /* NaN stays NaN, its sign kept, even when its payload is only in the low
     * bits that truncation would drop (which would make it infinity). */
    float nans[2] = {f32_of(0x7f800001u), f32_of(0xffc00000u)}, back[2];
    uint16_t hn[2];
    pp_f32_to_bf16(nans, hn, 2);
    pp_bf16_to_f32(hn, back, 2);
    ck_assert(isnan(back[0]) && !signbit(back[0]));
    ck_assert(isnan(back[1]) && signbit(back[1]));

    /* bf16 -> f32 -> bf16 is the identity (except NaN payloads), and
     * f32 -> bf16 -> f32 is within half a bf16 ulp: relative 2^-8. */
    enum { N = 1000 };
    float x[N], y[N];
    uint16_t h[N], h2[N];
    fill(x, N, 17u);
    for (int i = 0; i < N; i++)
        x[i] *= powf(2.0f, (float)(i % 41 - 20));
    pp_f32_to_bf16(x, h, N);
    pp_bf16_to_f32(h, y, N);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-8f, "%g -> %g", (double)x[i],
                      (double)y[i]);
        ck_assert_uint_eq(f32_bits(y[i]) & 0xffffu, 0);
    }
    pp_f32_to_bf16(y, h2, N);
    ck_assert_mem_eq(h, h2, sizeof h);

    /* pp_round_bf16 is the round trip in one pass, in place too. */
    float r[N];
    pp_round_bf16(x, r, N);
    ck_assert_mem_eq(r, y, sizeof r);
    pp_round_bf16(x, x, N);
    ck_assert_mem_eq(x, y, sizeof x);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The vectorised math (kernels/vmath.h) against libm in double, over dense
 * sweeps; the bounds are the ones kernels/README.md states.                  */

/* exp: relative error <= 1.5e-7 (measured 8.0e-8, 1.34 ulp) on
 * [-87.33, 88] in steps of 1e-4 (1.75 million points); exactly 1 at 0;
 * 0 below -87.34 (where exp < 1.2e-38); NaN stays NaN. */
START_TEST(test_vmath_exp)
{
    double worst = 0.0, at = 0.0;
    for (double x = -87.33; x <= 88.0; x += 1e-4) {
        float xf = (float)x;
        double want = exp((double)xf), got = v8_exp(v8_set(xf))[0];
        double e = fabs(got - want) / want;
        if (!(e <= worst))
            worst = e, at = x; /* NaN counts as worst */
    }
    ck_assert_msg(worst <= 1.5e-7, "exp: relative error %.3g at x = %.6f", worst, at);
    ck_assert_float_eq(v8_exp(v8_set(0.0f))[0], 1.0f);
    const float under[] = {-87.4f, -100.0f, -1e30f, -INFINITY};
    for (size_t i = 0; i < sizeof under / sizeof under[0]; i++)
        ck_assert_float_eq(v8_exp(v8_set(under[i]))[0], 0.0f);
    ck_assert(isnan(v8_exp(v8_set(NAN))[0]));
}
END_TEST

/* tanh: |error| <= 1.5e-7 and relative error <= 2.5e-7 (measured 7.5e-8
 * and 1.3e-7) on [-20, 20] in steps of 1e-5 (4 million points); +-1 for
 * large |x| up to infinity; odd; NaN stays NaN. */
START_TEST(test_vmath_tanh)
{
    double wa = 0.0, wr = 0.0, aa = 0.0, ar = 0.0;
    for (double x = -20.0; x <= 20.0; x += 1e-5) {
        float xf = (float)x;
        double want = tanh((double)xf), got = v8_tanh(v8_set(xf))[0];
        double d = fabs(got - want);
        if (!(d <= wa))
            wa = d, aa = x;
        if (want != 0.0 && !(d / fabs(want) <= wr))
            wr = d / fabs(want), ar = x;
    }
    ck_assert_msg(wa <= 1.5e-7, "tanh: absolute error %.3g at x = %.6f", wa, aa);
    ck_assert_msg(wr <= 2.5e-7, "tanh: relative error %.3g at x = %.6f", wr, ar);
    const float big[] = {10.0f, 30.0f, 1e4f, 1e30f, FLT_MAX, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        ck_assert_float_eq(v8_tanh(v8_set(big[i]))[0], 1.0f);
        ck_assert_float_eq(v8_tanh(v8_set(-big[i]))[0], -1.0f);
    }
    ck_assert_float_eq(v8_tanh(v8_set(1e-30f))[0], 1e-30f);
    ck_assert_float_eq(v8_tanh(v8_set(0.0f))[0], 0.0f);
    ck_assert(isnan(v8_tanh(v8_set(NAN))[0]));
}
END_TEST

/* GELU forward and backward, the kernels themselves, against the tanh
 * formula in double: |error| <= 2e-7 max(1, |x|) forward and 2.5e-7
 * max(1, |x|) backward (measured 1.05e-7 and 1.47e-7; libm's tanhf in float
 * gives 1.3e-7 and 1.4e-7) on [-30, 30] in steps of 1e-4 (an odd count, so
 * the arrays end in a partial vector); NaN-free out to +-FLT_MAX; and an
 * element's value does not depend on its place in the array. */
START_TEST(test_gelu_exact)
{
    const double K = 0.7978845608028654, C = 0.044715;
    size_t n = 600001;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *g = malloc(n * sizeof *g),
          *one = malloc(n * sizeof *one);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(-30.0 + 1e-4 * (double)i), one[i] = 1.0f;
    pp_gelu_forward(x, y, n);
    pp_gelu_backward(x, one, g, n);
    double wf = 0.0, wb = 0.0, af = 0.0, ab = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i], t = tanh(K * (v + C * v * v * v));
        double f = 0.5 * v * (1.0 + t);
        double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * K * (1.0 + 3.0 * C * v * v);
        double ef = fabs(y[i] - f) / fmax(1.0, fabs(v)), eb = fabs(g[i] - d) / fmax(1.0, fabs(v));
        if (!(ef <= wf))
            wf = ef, af = v;
        if (!(eb <= wb))
            wb = eb, ab = v;
    }
    ck_assert_msg(wf <= 2e-7, "gelu: error %.3g max(1,|x|) at x = %.6f", wf, af);
    ck_assert_msg(wb <= 2.5e-7, "gelu': error %.3g max(1,|x|) at x = %.6f", wb, ab);
    /* single elements (the tail path) give the bits of the array (the body) */
    for (size_t i = 0; i < n; i += 9973) {
        float y1, g1, d1 = 1.0f;
        pp_gelu_forward(&x[i], &y1, 1);
        pp_gelu_backward(&x[i], &d1, &g1, 1);
        ck_assert_mem_eq(&y1, &y[i], sizeof y1);
        ck_assert_mem_eq(&g1, &g[i], sizeof g1);
    }
    const float big[] = {1e3f, 1e10f, 1e20f, FLT_MAX, -1e3f, -1e10f, -1e20f, -FLT_MAX};
    float by[8], bg[8], bd[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    pp_gelu_forward(big, by, 8);
    pp_gelu_backward(big, bd, bg, 8);
    for (int i = 0; i < 8; i++) {
        ck_assert_float_eq(by[i], big[i] > 0 ? big[i] : 0.0f);
        ck_assert_float_eq(bg[i], big[i] > 0 ? 1.0f : 0.0f);
    }
    free(x), free(y), free(g), free(one);
}
END_TEST

/* pp_round_bf16's vector body against pp_f32_to_bf16 (scalar) widened back,
 * bit for bit, over bit patterns stepping through every exponent with
 * mantissas near the rounding ties, NaNs, infinities and zeros of both signs. */
START_TEST(test_round_bf16_vector)
{
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x), *got = malloc(N * sizeof *got),
          *want = malloc(N * sizeof *want);
    uint16_t *h = malloc(N * sizeof *h);
    uint32_t seed = 99u;
    for (uint32_t i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        /* sign, exponent from i, low 17 bits near a tie (0x8000) or random */
        uint32_t low = (i & 1) ? 0x8000u + (seed >> 28) - 8u : seed >> 15;
        x[i] = f32_of(((i >> 1) & 0x1ffu) << 23 | ((seed & 0x7fu) << 16) | (low & 0x1ffffu));
    }
    x[0] = f32_of(0x7f800001u), x[1] = f32_of(0xffc00000u), x[2] = INFINITY, x[3] = -INFINITY;
    x[4] = 0.0f, x[5] = -0.0f, x[6] = FLT_MAX, x[7] = -FLT_MAX;
    pp_round_bf16(x, got, N);
    pp_f32_to_bf16(x, h, N);
    pp_bf16_to_f32(h, want, N);
    ck_assert_mem_eq(got, want, N * sizeof *got);
    free(x), free(got), free(want), free(h);
}
END_TEST

/* The vector body and the scalar tail of SGD and AdamW compute the same
 * operations: n = 19 (two vectors and a tail of 3) against a scalar
 * loop written here, bit for bit. */
START_TEST(test_optimizers_bits)
{
    enum { N = 19 };
    float p[N], g[N], m[N], v[N], rp[N], rg[N], rm[N], rv[N];
    fill(p, N, 3u), fill(g, N, 4u), fill(m, N, 5u), fill(v, N, 6u);
    for (int i = 0; i < N; i++)
        v[i] = fabsf(v[i]);
    memcpy(rp, p, sizeof p), memcpy(rg, g, sizeof g), memcpy(rm, m, sizeof m);
    memcpy(rv, v, sizeof v);
    float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    pp_adamw_step(p, g, m, v, N, 3, lr, b1, b2, eps, wd);
    float bc1 = 1.0f - powf(b1, 3.0f), bc2 = 1.0f - powf(b2, 3.0f);
    for (int i = 0; i < N; i++) {
        float gi = rg[i];
        rm[i] = b1 * rm[i] + (1.0f - b1) * gi;
        rv[i] = b2 * rv[i] + (1.0f - b2) * gi * gi;
        rp[i] -= lr * ((rm[i] / bc1) / (sqrtf(rv[i] / bc2) + eps) + wd * rp[i]);
    }
    ck_assert_mem_eq(p, rp, sizeof p);
    ck_assert_mem_eq(m, rm, sizeof m);
    ck_assert_mem_eq(v, rv, sizeof v);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(g[i], 0.0f);
    fill(g, N, 7u);
    memcpy(rg, g, sizeof g);
    pp_sgd_step(p, g, N, 0.3f);
    for (int i = 0; i < N; i++) {
        rp[i] -= 0.3f * rg[i];
        ck_assert_float_eq(g[i], 0.0f);
    }
    ck_assert_mem_eq(p, rp, sizeof p);
}
END_TEST

/* The non-finite scan goes a block of 1024 at a time in lanes of 8
 * (finite.h): the first bad number wherever it falls against the lanes,
 * the blocks and the tail, each kind (NaN of either sign, either
 * infinity), before another in a later block, in floats and in bf16,
 * against a number-by-number search. */
static long long first_bad(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return (long long)i;
    return -1;
}

START_TEST(test_first_nonfinite_blocks)
{
    static const size_t sizes[] = {0, 1, 7, 8, 9, 1023, 1024, 1025, 2049, 3001};
    static const size_t at[] = {0, 1, 7, 8, 9, 1016, 1023, 1024, 1025, 2047, 2048, 3000};
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    enum { MOST = 3001 };
    float x[MOST];
    uint16_t xb[MOST];
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        size_t n = sizes[z];
        for (size_t i = 0; i < n; i++)
            x[i] = ((float)i - 1500.0f) * 1e35f / 1500.0f; /* finite, up to 1e35 */
        ck_assert_int_eq(pp_first_nonfinite(x, n), -1);
        pp_f32_to_bf16(x, xb, n);
        ck_assert_int_eq(pp_first_nonfinite_bf16(xb, n), -1);
        for (size_t a = 0; a < sizeof at / sizeof *at; a++)
            for (size_t k = 0; k < sizeof bad / sizeof *bad && at[a] < n; k++) {
                size_t later = at[a] + 1100 < n ? at[a] + 1100 : n - 1;
                float keep = x[at[a]], keep_later = x[later];
                x[later] = bad[(k + 1) % 4];
                x[at[a]] = bad[k];
                long long want = first_bad(x, n);
                ck_assert_msg(want == (long long)at[a], "the reference scan found %lld", want);
                ck_assert_msg(pp_first_nonfinite(x, n) == want,
                              "n %zu, %g at %zu: the scan found %lld", n, (double)bad[k], at[a],
                              pp_first_nonfinite(x, n));
                pp_f32_to_bf16(x, xb, n);
                ck_assert_msg(pp_first_nonfinite_bf16(xb, n) == want,
                              "n %zu, %g at %zu: the bf16 scan found %lld", n, (double)bad[k],
                              at[a], pp_first_nonfinite_bf16(xb, n));
                x[at[a]] = keep;
                x[later] = keep_later;
            }
    }
    ck_assert_int_eq(pp_first_nonfinite(NULL, 5), -1);
    ck_assert_int_eq(pp_first_nonfinite_bf16(NULL, 5), -1);
}
END_TEST

/* Every hot kernel gives the same bits whichever instruction set runs it
 * (kernels/README.md, "Portability"): the digests of
 * build/kernel_bits/kernel_bits-clones (the versions the loader picks on
 * this CPU) against those of each build for one instruction set alone that
 * this CPU can run (tests/tools/kernel_bits.c; make builds them). */
START_TEST(test_clones_give_the_same_bits)
{
#if !defined(__x86_64__) || !defined(__GNUC__) || defined(__clang__)
    test_skipped("not x86-64 with GCC: each kernel is built once, with no clones\n");
#else
    __builtin_cpu_init();
    struct {
        const char *isa, *what;
        int runs;
    } b[] = {{"base", "x86-64", 1},
             {"v3", "x86-64-v3 (AVX2)", __builtin_cpu_supports("x86-64-v3")},
             {"v4", "x86-64-v4 (AVX-512)", __builtin_cpu_supports("x86-64-v4")}};
    char cmd[1024], *want;
    snprintf(cmd, sizeof cmd, "%s/build/kernel_bits/kernel_bits-clones", PP_ROOT);
    want = run_expect(cmd, 0);
    ck_assert_msg(strstr(want, "gelu_backward") && strstr(want, "attention_backward bf16"),
                  "%s printed no digests:\n%s", cmd, want);
    int compared = 0;
    for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) {
        if (!b[k].runs) {
            printf("clones_give_the_same_bits: this CPU cannot run %s: not compared\n", b[k].what);
            continue;
        }
        snprintf(cmd, sizeof cmd, "%s/build/kernel_bits/kernel_bits-%s", PP_ROOT, b[k].isa);
        char *got = run_expect(cmd, 0);
        /* the first line that differs names the kernel */
        const char *w = want, *g = got;
        while (*w && *w == *g)
            w++, g++;
        while (w > want && w[-1] != '\n')
            w--, g--;
        ck_assert_msg(!*w && !*g,
                      "the kernels built for %s alone differ from the clones this CPU runs; "
                      "first difference:\n  clones: %.*s\n  %s: %.*s",
                      b[k].what, (int)strcspn(w, "\n"), w, b[k].isa, (int)strcspn(g, "\n"), g);
        free(got);
        compared++;
    }
    ck_assert_int_ge(compared, 2);
    free(want);
#endif
}
END_TEST

Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, test_gemm_transposes);
    tcase_add_test(tc, test_gemm_empty_k);
    tcase_add_test(tc, test_gelu_values);
    tcase_add_test(tc, test_gelu_backward_fd);
    tcase_add_test(tc, test_softmax_xent_forward);
    tcase_add_test(tc, test_softmax_xent_backward_fd);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_bias);
    tcase_add_test(tc, test_bias_gelu_forward);
    tcase_add_test(tc, test_residual_bias_add);
    tcase_add_test(tc, test_layernorm_forward);
    tcase_add_test(tc, test_layernorm_backward_fd);
    tcase_add_test(tc, test_layernorm_backward_null_outputs);
    tcase_add_test(tc, test_softmax_xent_fused);
    tcase_add_test(tc, test_adamw_two_steps);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_vmath_exp);
    tcase_add_test(tc, test_vmath_tanh);
    tcase_add_test(tc, test_gelu_exact);
    tcase_add_test(tc, test_optimizers_bits);
    tcase_add_test(tc, test_round_bf16_vector);
    tcase_add_test(tc, test_first_nonfinite_blocks);
    tcase_add_test(tc, test_clones_give_the_same_bits);
    suite_add_tcase(s, tc);
    return s;
}
