/* test_kernels.c - unit tests of the CPU kernels (kernels/cpu_kernels.c):
 * the BLAS GEMM against the reference loop in every transpose combination,
 * GELU and softmax cross-entropy backward against finite differences, and
 * the embedding's scatter-add over repeated tokens. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu_kernels.h"
#include "suites.h"

/* Deterministic test data in [-1, 1). */
static float rnd(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void fill(float *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = rnd(&seed);
}

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */

/* Runs both GEMMs on the same C and compares. beta == 0 starts C as NaN:
 * BLAS semantics say C is then not read, so no NaN may leak through. */
static void check_gemm(int ta, int tb, int M, int N, int K, float alpha, float beta) {
    float *A = malloc(sizeof(float) * (size_t)(M * K + 1));
    float *B = malloc(sizeof(float) * (size_t)(K * N + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    float *R = malloc(sizeof(float) * (size_t)(M * N));
    fill(A, (size_t)(M * K), 11u + (uint32_t)M);
    fill(B, (size_t)(K * N), 23u + (uint32_t)N);
    fill(C, (size_t)(M * N), 37u);
    if (beta == 0.0f)
        for (int i = 0; i < M * N; i++) C[i] = NAN;
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

START_TEST(test_gemm_transposes) {
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
START_TEST(test_gemm_empty_k) {
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};
    pp_gemm(0, 0, 2, 3, 0, 1.0f, A, B, 0.5f, C);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(C[i], 0.5f * (float)(i + 1));
    pp_gemm(1, 1, 2, 3, 0, 1.0f, A, B, 0.0f, C);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(C[i], 0.0f);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* GELU                                                                      */

START_TEST(test_gelu_values) {
    float x[3] = {0.0f, 1.0f, -1.0f}, y[3];
    pp_gelu_forward(x, y, 3);
    ck_assert_float_eq(y[0], 0.0f);
    /* tanh-approximate GELU(1) = 0.841192, GELU(-1) = -0.158808 */
    ck_assert_float_eq_tol(y[1], 0.841192f, 1e-5f);
    ck_assert_float_eq_tol(y[2], -0.158808f, 1e-5f);
}
END_TEST

START_TEST(test_gelu_backward_fd) {
    enum { N = 81 };
    float x[N], dy[N], dx[N];
    for (int i = 0; i < N; i++) x[i] = -5.0f + 0.125f * (float)i; /* covers both tails */
    fill(dy, N, 5u);
    pp_gelu_backward(x, dy, dx, N);
    for (int i = 0; i < N; i++) {
        /* Central difference in float, divided by the step actually taken. */
        float xp = x[i] + 1e-2f, xm = x[i] - 1e-2f, yp, ym;
        pp_gelu_forward(&xp, &yp, 1);
        pp_gelu_forward(&xm, &ym, 1);
        float fd = dy[i] * (yp - ym) / (xp - xm);
        ck_assert_msg(fabsf(dx[i] - fd) <= 1e-3f, "x=%g: dx %g, fd %g", (double)x[i],
                      (double)dx[i], (double)fd);
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

START_TEST(test_softmax_xent_forward) {
    float logits[ROWS * V], probs[ROWS * V], shifted[ROWS * V], probs2[ROWS * V];
    fill(logits, ROWS * V, 77u);
    double loss = pp_softmax_xent_forward(logits, targets, STRIDE, ROWS, V, probs);
    double expect = 0.0;
    for (int r = 0; r < ROWS; r++) {
        double sum = 0.0;
        for (int j = 0; j < V; j++) sum += probs[r * V + j];
        ck_assert_double_eq_tol(sum, 1.0, 1e-6);
        expect -= log((double)probs[r * V + targets[r * STRIDE]]);
    }
    ck_assert_double_eq_tol(loss, expect, 1e-5);

    /* Subtracting the max makes huge logits harmless and the result shift
     * invariant. */
    for (int i = 0; i < ROWS * V; i++) shifted[i] = logits[i] + 1000.0f;
    double loss2 = pp_softmax_xent_forward(shifted, targets, STRIDE, ROWS, V, probs2);
    ck_assert(isfinite(loss2));
    ck_assert_double_eq_tol(loss2, loss, 1e-3);
    for (int i = 0; i < ROWS * V; i++) ck_assert_float_eq_tol(probs2[i], probs[i], 1e-4f);
}
END_TEST

START_TEST(test_softmax_xent_backward_fd) {
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

START_TEST(test_embedding) {
    enum { B = 2, C = 3, E = 2 };
    /* [batch][context+1]; the last column is the target and must be ignored.
     * Byte 7 occurs three times, once in the other row. */
    const int32_t tokens[B * (C + 1)] = {7, 1, 7, 200, 0, 7, 255, 100};
    float table[256 * E], out[B * C * E], dE[256 * E];
    for (int i = 0; i < 256 * E; i++) table[i] = (float)i;
    pp_embedding_forward(tokens, B, C, table, E, out);
    const int32_t window[B * C] = {7, 1, 7, 0, 7, 255};
    for (int i = 0; i < B * C; i++)
        for (int e = 0; e < E; e++) ck_assert_float_eq(out[i * E + e], (float)(window[i] * E + e));

    float dout[B * C * E];
    for (int i = 0; i < B * C * E; i++) dout[i] = (float)(i + 1);
    for (int i = 0; i < 256 * E; i++) dE[i] = 0.5f; /* backward accumulates */
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

START_TEST(test_bias) {
    float y[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {10, 20, 30}, db[3] = {1, 1, 1};
    pp_bias_add(y, bias, 2, 3);
    ck_assert_float_eq(y[0], 11.0f);
    ck_assert_float_eq(y[5], 36.0f);
    pp_bias_grad(y, 2, 3, db);
    ck_assert_float_eq(db[0], 1 + 11 + 14);
    ck_assert_float_eq(db[2], 1 + 33 + 36);
}
END_TEST

Suite *kernels_suite(void) {
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
    suite_add_tcase(s, tc);
    return s;
}
