/* cpu_kernels.c - the CPU kernels of the demo model (see cpu_kernels.h):
 * GEMM through the BLAS plus a reference triple loop, embedding lookup and
 * its scatter-add backward, bias add/grad, GELU (tanh approximation, as in
 * GPT-2 and llm.c) and softmax cross-entropy.
 *
 * Token layout: the embedding kernels read a microbatch exactly as it is
 * loaded, int32 [batch][context + 1] (the window followed by the target), so
 * row b's window starts at tokens[b * (context + 1)] and the target column is
 * skipped. Token values must be bytes (0..255), the embedding table's rows. */
#include "cpu_kernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */

/* K == 0 (an empty inner dimension) leaves C = beta * C; handled here so the
 * BLAS never sees a leading dimension of 0, which it rejects. BLAS semantics
 * for beta == 0: C is overwritten, not read (it may hold garbage or NaN). */
static void scale_c(int M, int N, float beta, float *C) {
    size_t n = (size_t)M * (size_t)N;
    if (beta == 0.0f) {
        memset(C, 0, n * sizeof *C);
        return;
    }
    for (size_t i = 0; i < n; i++) C[i] *= beta;
}

void pp_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, const float *B,
             float beta, float *C) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        scale_c(M, N, beta, C);
        return;
    }
    /* Row-major: the leading dimension is the length of a stored row. */
    int lda = ta ? M : K;
    int ldb = tb ? K : N;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, N);
}

void pp_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 const float *B, float beta, float *C) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            /* Accumulate in double: this is the yardstick, not the fast path. */
            double acc = 0.0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                float b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                acc += (double)a * (double)b;
            }
            float *c = &C[(size_t)i * N + j];
            double old = beta == 0.0f ? 0.0 : (double)beta * (double)*c;
            *c = (float)((double)alpha * acc + old);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Embedding: out[b][c*embed + e] = E[tokens[b][c]][e], i.e. the `context`
 * embeddings of a window concatenated into one row of width context*embed. */

void pp_embedding_forward(const int32_t *tokens, int batch, int context, const float *E,
                          int embed, float *out) {
    size_t e = (size_t)embed;
    for (int b = 0; b < batch; b++) {
        const int32_t *win = tokens + (size_t)b * (context + 1);
        float *row = out + (size_t)b * context * e;
        for (int c = 0; c < context; c++)
            memcpy(row + c * e, E + (size_t)win[c] * e, e * sizeof *E);
    }
}

/* Scatter-add: a byte that occurs several times (in one window or across
 * the batch) receives the sum of all its positions' gradients. */
void pp_embedding_backward(const int32_t *tokens, int batch, int context, const float *dout,
                           int embed, float *dE) {
    size_t e = (size_t)embed;
    for (int b = 0; b < batch; b++) {
        const int32_t *win = tokens + (size_t)b * (context + 1);
        const float *row = dout + (size_t)b * context * e;
        for (int c = 0; c < context; c++) {
            float *dst = dE + (size_t)win[c] * e;
            const float *src = row + c * e;
            for (size_t i = 0; i < e; i++) dst[i] += src[i];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Bias                                                                      */

void pp_bias_add(float *y, const float *bias, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        for (int c = 0; c < cols; c++) row[c] += bias[c];
    }
}

void pp_bias_grad(const float *dy, int rows, int cols, float *db) {
    /* Rows outer so dy is read sequentially. */
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * cols;
        for (int c = 0; c < cols; c++) db[c] += row[c];
    }
}

/* ------------------------------------------------------------------------ */
/* GELU, tanh approximation:
 *   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)      */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

void pp_gelu_forward(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

/* d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2). Written with 1 - t^2
 * rather than llm.c's 1/cosh^2 so large |x| cannot overflow cosh. dy and dx
 * may alias (elementwise). */
void pp_gelu_backward(const float *x, const float *dy, float *dx, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float sech2 = 1.0f - t * t;
        float dinner = GELU_K * (1.0f + 3.0f * GELU_C * v * v); /* d(tanh arg)/dx */
        float local = 0.5f * (1.0f + t) + 0.5f * v * sech2 * dinner;
        dx[i] = dy[i] * local;
    }
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                     */

/* Per row: subtract the max so exp never overflows; the row's loss is
 * log(sum exp(l - max)) - (l_target - max), computed in double so the sum of
 * many rows (the returned total) loses nothing to float rounding. The target
 * logit is read before probs is written, so probs may alias logits. */
double pp_softmax_xent_forward(const float *logits, const int32_t *targets, int target_stride,
                               int rows, int V, float *probs) {
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * V;
        float *p = probs + (size_t)r * V;
        float max = l[0];
        for (int j = 1; j < V; j++)
            if (l[j] > max) max = l[j];
        double target_shifted = (double)l[targets[(size_t)r * target_stride]] - (double)max;
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            double e = exp((double)l[j] - (double)max);
            p[j] = (float)e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++) p[j] *= inv;
        total += log(sum) - target_shifted;
    }
    return total;
}

void pp_softmax_xent_backward(const float *probs, const int32_t *targets, int target_stride,
                              int rows, int V, float scale, float *dlogits) {
    for (int r = 0; r < rows; r++) {
        const float *p = probs + (size_t)r * V;
        float *d = dlogits + (size_t)r * V;
        int t = targets[(size_t)r * target_stride];
        for (int j = 0; j < V; j++) d[j] = (p[j] - (j == t ? 1.0f : 0.0f)) * scale;
    }
}
