/* cpu_kernels.c - the CPU kernels of the demo model (see cpu_kernels.h):
 * GEMM through the BLAS plus a reference triple loop, embedding lookup and
 * its scatter-add backward, bias add/grad, GELU (tanh approximation, as in
 * GPT-2 and llm.c) and softmax cross-entropy; then the CPU twins of the
 * CUDA kernels (cuda_kernels.h) that the model does not use on the CPU:
 * fused bias + GELU, residual add, layer norm, fused softmax cross-entropy,
 * AdamW and bf16 conversion; last the gpt model's kernels: a GEMM with
 * leading dimensions, token plus position embeddings, and causal attention
 * (row-blocked, flash-attention style) with its naive reference.
 *
 * Token layout: the embedding kernels read a microbatch exactly as it is
 * loaded, int32 [batch][context + 1] (the window followed by the target), so
 * row b's window starts at tokens[b * (context + 1)] and the target column is
 * skipped. Token values must be bytes (0..255), the embedding table's rows.
 *
 * Speed: the elementwise kernels run on 8-lane vectors (vmath.h), with a
 * vectorised exp and tanh in place of per-element libm calls, and the hot
 * ones (PP_HOT) get AVX-512 and AVX2 clones beside the baseline x86-64
 * one; every clone gives the same bits. Every kernel reports its time to
 * kprof.h's timers when they are on (bin/model_bench). */
#include "cpu_kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kprof.h"
#include "vmath.h"

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */

/* K == 0 (an empty inner dimension) leaves C = beta * C; handled here so the
 * BLAS never sees a leading dimension of 0, which it rejects. BLAS semantics
 * for beta == 0: C is overwritten, not read (it may hold garbage or NaN). */
void pp_gemm_ld(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            for (int j = 0; j < N; j++)
                c[j] = beta == 0.0f ? 0.0f : beta * c[j];
        }
        return;
    }
    KPROF_BEGIN();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (pp_kprof_on)
        pp_kprof_gemm_add(ta, tb, M, N, K, lda, ldb, ldc, beta == 0.0f,
                          pp_kprof_end(PP_K_GEMM, kprof_t0_));
}

void pp_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, const float *B,
             float beta, float *C)
{
    /* Row-major: the leading dimension is the length of a stored row. */
    pp_gemm_ld(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

void pp_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, const float *B,
                 float beta, float *C)
{
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

void pp_embedding_forward(const int32_t *tokens, int batch, int context, const float *E, int embed,
                          float *out)
{
    KPROF_BEGIN();
    size_t e = (size_t)embed;
    for (int b = 0; b < batch; b++) {
        const int32_t *win = tokens + (size_t)b * (context + 1);
        float *row = out + (size_t)b * context * e;
        for (int c = 0; c < context; c++)
            memcpy(row + c * e, E + (size_t)win[c] * e, e * sizeof *E);
    }
    KPROF_END(PP_K_EMBED);
}

/* y[i] += x[i], 8 at a time (the tail alone: same additions, same bits). */
static inline __attribute__((always_inline)) void add_into(float *y, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        v8_store(y + i, v8_load(y + i) + v8_load(x + i));
    for (; i < n; i++)
        y[i] += x[i];
}

/* Scatter-add: a byte that occurs several times (in one window or across
 * the batch) receives the sum of all its positions' gradients. */
void pp_embedding_backward(const int32_t *tokens, int batch, int context, const float *dout,
                           int embed, float *dE)
{
    KPROF_BEGIN();
    size_t e = (size_t)embed;
    for (int b = 0; b < batch; b++) {
        const int32_t *win = tokens + (size_t)b * (context + 1);
        const float *row = dout + (size_t)b * context * e;
        for (int c = 0; c < context; c++)
            add_into(dE + (size_t)win[c] * e, row + c * e, e);
    }
    KPROF_END(PP_K_EMBED);
}

/* ------------------------------------------------------------------------ */
/* Bias                                                                      */

PP_HOT void pp_bias_add(float *y, const float *bias, int rows, int cols)
{
    KPROF_BEGIN();
    for (int r = 0; r < rows; r++)
        add_into(y + (size_t)r * cols, bias, (size_t)cols);
    KPROF_END(PP_K_BIAS);
}

/* Rows outer so dy is read sequentially; each column's sum runs over the
 * rows in order, as in the plain loop. */
PP_HOT void pp_bias_grad(const float *dy, int rows, int cols, float *db)
{
    KPROF_BEGIN();
    for (int r = 0; r < rows; r++)
        add_into(db, dy + (size_t)r * cols, (size_t)cols);
    KPROF_END(PP_K_BIAS);
}

/* ------------------------------------------------------------------------ */
/* GELU (the tanh approximation) and its derivative: vmath_lanes.h's
 * v8_gelu and v8_gelu_grad, and on AVX-512 v16_gelu and v16_gelu_grad, 16
 * lanes at a time (the backward 1.6-1.75 ns an element against 2.1 on 8
 * lanes in the v4 clone and 2.6-2.7 in the AVX2 one; the same bits). Each
 * wide loop returns where it stopped, and the 8-lane code does the rest. */
PP_WIDE static size_t gelu_forward16(const float *x, float *y, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        v16_store(y + i, v16_gelu(v16_load(x + i)));
    return i;
}

PP_WIDE static size_t gelu_backward16(const float *x, const float *dy, float *dx, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        v16_store(dx + i, v16_load(dy + i) * v16_gelu_grad(v16_load(x + i)));
    return i;
}

PP_WIDE static size_t bias_gelu_row16(float *h, const float *bias, float *a, size_t n)
{
    size_t c = 0;
    for (; c + 16 <= n; c += 16) {
        pp_v16f v = v16_load(h + c) + v16_load(bias + c);
        v16_store(h + c, v);
        v16_store(a + c, v16_gelu(v));
    }
    return c;
}

PP_HOT void pp_gelu_forward(const float *x, float *y, size_t n)
{
    KPROF_BEGIN();
    size_t i = pp_wide() ? gelu_forward16(x, y, n) : 0;
    for (; i + 8 <= n; i += 8)
        v8_store(y + i, v8_gelu(v8_load(x + i)));
    if (i < n)
        v8_store_part(y + i, v8_gelu(v8_load_part(x + i, n - i, 0.0f)), n - i);
    KPROF_END(PP_K_GELU);
}

/* dy and dx may alias (elementwise). */
PP_HOT void pp_gelu_backward(const float *x, const float *dy, float *dx, size_t n)
{
    KPROF_BEGIN();
    size_t i = pp_wide() ? gelu_backward16(x, dy, dx, n) : 0;
    for (; i + 8 <= n; i += 8)
        v8_store(dx + i, v8_load(dy + i) * v8_gelu_grad(v8_load(x + i)));
    if (i < n) {
        size_t k = n - i;
        pp_v8f g = v8_gelu_grad(v8_load_part(x + i, k, 0.0f));
        v8_store_part(dx + i, v8_load_part(dy + i, k, 0.0f) * g, k);
    }
    KPROF_END(PP_K_GELU_BWD);
}

/* ------------------------------------------------------------------------ */
/* Softmax cross-entropy                                                     */

/* The largest of l[0..n) (n >= 1, no NaN). */
static inline __attribute__((always_inline)) float row_max(const float *l, int n)
{
    pp_v8f m = v8_set(l[0]);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        pp_v8f v = v8_load(l + j);
        m = v8_sel(v > m, v, m);
    }
    if (j < n) {
        pp_v8f v = v8_load_part(l + j, (size_t)(n - j), l[0]);
        m = v8_sel(v > m, v, m);
    }
    return v8_hmax(m);
}

/* e[j] = exp(l[j] - max) for j < n (v8_exp), returning their sum, taken in
 * double (8 partial sums, then lane by lane). e may alias l. */
static inline __attribute__((always_inline)) double exp_shift(const float *l, float *e, int n,
                                                              float max)
{
    pp_d8 acc = {{0}, {0}};
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        pp_v8f v = v8_exp(v8_load(l + j) - max);
        v8_store(e + j, v);
        acc = d8_add(acc, v);
    }
    if (j < n) { /* the tail's padding lanes are exp(-inf) = 0 */
        pp_v8f v = v8_exp(v8_load_part(l + j, (size_t)(n - j), -INFINITY) - max);
        v8_store_part(e + j, v, (size_t)(n - j));
        acc = d8_add(acc, v);
    }
    return d8_sum(acc);
}

/* p[j] *= s for j < n. */
static inline __attribute__((always_inline)) void scale_row(float *p, int n, float s)
{
    int j = 0;
    for (; j + 8 <= n; j += 8)
        v8_store(p + j, v8_load(p + j) * s);
    for (; j < n; j++)
        p[j] *= s;
}

/* Per row: subtract the max so exp never overflows; the row's loss is
 * log(sum exp(l - max)) - (l_target - max), the sum and the loss in double
 * so the sum of many rows (the returned total) loses nothing to float
 * rounding; the exps are vmath.h's v8_exp. The target logit is read before
 * probs is written, so probs may alias logits. */
PP_HOT double pp_softmax_xent_forward(const float *logits, const int32_t *targets,
                                      int target_stride, int rows, int V, float *probs)
{
    KPROF_BEGIN();
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * V;
        float *p = probs + (size_t)r * V;
        float max = row_max(l, V);
        double target_shifted = (double)l[targets[(size_t)r * target_stride]] - (double)max;
        double sum = exp_shift(l, p, V, max);
        scale_row(p, V, (float)(1.0 / sum));
        total += log(sum) - target_shifted;
    }
    KPROF_END(PP_K_XENT);
    return total;
}

PP_HOT void pp_softmax_xent_backward(const float *probs, const int32_t *targets, int target_stride,
                                     int rows, int V, float scale, float *dlogits)
{
    KPROF_BEGIN();
    for (int r = 0; r < rows; r++) {
        const float *p = probs + (size_t)r * V;
        float *d = dlogits + (size_t)r * V;
        int t = targets[(size_t)r * target_stride];
        int j = 0;
        for (; j + 8 <= V; j += 8)
            v8_store(d + j, v8_load(p + j) * scale);
        for (; j < V; j++)
            d[j] = p[j] * scale;
        d[t] = (p[t] - 1.0f) * scale; /* (p - 0) * scale is p * scale: same bits */
    }
    KPROF_END(PP_K_XENT);
}

/* ------------------------------------------------------------------------ */
/* Fused elementwise twins                                                   */

/* One pass over h (the data touched once): h += bias, a = gelu(h), the
 * same operations as pp_bias_add followed by pp_gelu_forward, so the same
 * bits. */
PP_HOT void pp_bias_gelu_forward(float *h, const float *bias, float *a, int rows, int cols)
{
    KPROF_BEGIN();
    size_t n = (size_t)cols;
    int wide = pp_wide();
    for (int r = 0; r < rows; r++) {
        float *hr = h + (size_t)r * n, *ar = a + (size_t)r * n;
        size_t c = wide ? bias_gelu_row16(hr, bias, ar, n) : 0;
        for (; c + 8 <= n; c += 8) {
            pp_v8f v = v8_load(hr + c) + v8_load(bias + c);
            v8_store(hr + c, v);
            v8_store(ar + c, v8_gelu(v));
        }
        if (c < n) {
            size_t k = n - c;
            pp_v8f v = v8_load_part(hr + c, k, 0.0f) + v8_load_part(bias + c, k, 0.0f);
            v8_store_part(hr + c, v, k);
            v8_store_part(ar + c, v8_gelu(v), k);
        }
    }
    KPROF_END(PP_K_GELU);
}

PP_HOT void pp_residual_bias_add(float *y, const float *x, const float *bias, int rows, int cols)
{
    KPROF_BEGIN();
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * cols;
        const float *xr = x + (size_t)r * cols;
        int c = 0;
        for (; c + 8 <= cols; c += 8)
            v8_store(yr + c, (v8_load(yr + c) + v8_load(xr + c)) + v8_load(bias + c));
        for (; c < cols; c++)
            yr[c] = (yr[c] + xr[c]) + bias[c];
    }
    KPROF_END(PP_K_BIAS);
}

void pp_add(float *y, const float *x, size_t n)
{
    KPROF_BEGIN();
    add_into(y, x, n);
    KPROF_END(PP_K_BIAS);
}

/* ------------------------------------------------------------------------ */
/* Layer norm                                                                */

#define LN_EPS 1e-5

/* Mean and variance in double (two passes, so no cancellation); the row's
 * output uses the float mean and rstd it stores, as the backward does. */
PP_HOT void pp_layernorm_forward(const float *x, const float *gamma, const float *beta, int rows,
                                 int cols, float *y, float *mean, float *rstd)
{
    KPROF_BEGIN();
    size_t n = (size_t)cols;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        /* 8 double partial sums, then the tail's columns one by one */
        size_t n8 = n & ~(size_t)7, c;
        pp_d8 acc = {{0}, {0}};
        for (c = 0; c < n8; c += 8)
            acc = d8_add(acc, v8_load(xr + c));
        double sum = d8_sum(acc);
        for (; c < n; c++)
            sum += xr[c];
        double mu = sum / cols;
        pp_d8 sq8 = {{0}, {0}};
        for (c = 0; c < n8; c += 8)
            sq8 = d8_add_sqdev(sq8, v8_load(xr + c), mu);
        double sq = d8_sum(sq8);
        for (; c < n; c++) {
            double d = (double)xr[c] - mu;
            sq += d * d;
        }
        float m = (float)mu;
        float s = (float)(1.0 / sqrt(sq / cols + LN_EPS));
        mean[r] = m;
        rstd[r] = s;
        for (c = 0; c + 8 <= n; c += 8)
            v8_store(yr + c, (v8_load(xr + c) - m) * s * v8_load(gamma + c) + v8_load(beta + c));
        for (; c < n; c++)
            yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
    }
    KPROF_END(PP_K_LN);
}

/* With xhat = (x - mean) * rstd and g = dy * gamma (the gradient at xhat):
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 * the row means taken over the row's columns, in double. The parameter
 * gradients and the input gradient are separate passes, each skipped when
 * its outputs are NULL, so a split backward can compute them at different
 * times and get the same bits as one call computing both. */
PP_HOT void pp_layernorm_backward(const float *x, const float *gamma, const float *mean,
                                  const float *rstd, const float *dy, int rows, int cols, float *dx,
                                  float *dgamma, float *dbeta)
{
    KPROF_BEGIN();
    int c8 = cols & ~7; /* the vector part; the tail columns go one by one */
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        const float *dyr = dy + (size_t)r * cols;
        float m = mean[r], s = rstd[r];
        if (dgamma) {
            int c = 0;
            for (; c < c8; c += 8)
                v8_store(dgamma + c,
                         v8_load(dgamma + c) + v8_load(dyr + c) * ((v8_load(xr + c) - m) * s));
            for (; c < cols; c++) {
                float xhat = (xr[c] - m) * s;
                dgamma[c] += dyr[c] * xhat;
            }
        }
        if (dbeta)
            add_into(dbeta, dyr, (size_t)cols);
        if (!dx)
            continue;
        float *dxr = dx + (size_t)r * cols;
        /* the two row sums in double: 8 partial sums each */
        pp_d8 sg = {{0}, {0}}, sgx = {{0}, {0}};
        int c = 0;
        for (; c < c8; c += 8) {
            pp_v8f xhat = (v8_load(xr + c) - m) * s;
            pp_v8f g = v8_load(dyr + c) * v8_load(gamma + c);
            sg = d8_add(sg, g);
            sgx = d8_add_mul(sgx, g, xhat);
        }
        double sum_g = d8_sum(sg), sum_gx = d8_sum(sgx);
        for (; c < cols; c++) {
            float xhat = (xr[c] - m) * s;
            float g = dyr[c] * gamma[c];
            sum_g += g;
            sum_gx += (double)g * xhat;
        }
        float mean_g = (float)(sum_g / cols), mean_gx = (float)(sum_gx / cols);
        for (c = 0; c < c8; c += 8) {
            pp_v8f xhat = (v8_load(xr + c) - m) * s;
            pp_v8f g = v8_load(dyr + c) * v8_load(gamma + c);
            v8_store(dxr + c, v8_load(dxr + c) + s * (g - mean_g - xhat * mean_gx));
        }
        for (; c < cols; c++) {
            float xhat = (xr[c] - m) * s;
            float g = dyr[c] * gamma[c];
            dxr[c] += s * (g - mean_g - xhat * mean_gx);
        }
    }
    KPROF_END(PP_K_LN_BWD);
}

/* ------------------------------------------------------------------------ */
/* Fused softmax cross-entropy                                               */

/* pp_softmax_xent_forward and _backward in one pass, the same operations in
 * the same order (so the same bits). The max and the target logit are read
 * before anything is written, and each d[j] is written only after l[j] was
 * read for the last time, so dlogits may alias logits. */
PP_HOT void pp_softmax_xent_fused(const float *logits, const int32_t *targets, int target_stride,
                                  int rows, int V, float scale, float *dlogits, float *loss)
{
    KPROF_BEGIN();
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * V;
        float *d = dlogits + (size_t)r * V;
        int t = targets[(size_t)r * target_stride];
        float max = row_max(l, V);
        double target_shifted = (double)l[t] - (double)max;
        double sum = exp_shift(l, d, V, max); /* l is not read again */
        float inv = (float)(1.0 / sum);
        float pt = d[t] * inv;
        int j = 0;
        for (; j + 8 <= V; j += 8)
            v8_store(d + j, (v8_load(d + j) * inv) * scale);
        for (; j < V; j++)
            d[j] = (d[j] * inv) * scale;
        d[t] = (pt - 1.0f) * scale;
        loss[r] = (float)(log(sum) - target_shifted);
    }
    KPROF_END(PP_K_XENT);
}

/* ------------------------------------------------------------------------ */
/* AdamW                                                                     */

/* sqrt of each lane, IEEE-exact (the same as sqrtf): SSE's sqrtps on
 * x86-64 (baseline), sqrtf per lane elsewhere. */
static inline __attribute__((always_inline)) pp_v8f v8_sqrt(pp_v8f x)
{
#if defined(__x86_64__) && defined(__GNUC__)
    typedef float v4f __attribute__((vector_size(16)));
    v4f lo = {x[0], x[1], x[2], x[3]}, hi = {x[4], x[5], x[6], x[7]};
    lo = __builtin_ia32_sqrtps(lo);
    hi = __builtin_ia32_sqrtps(hi);
    return (pp_v8f){lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
#else
    for (int i = 0; i < 8; i++)
        x[i] = sqrtf(x[i]);
    return x;
#endif
}

PP_HOT void pp_adamw_step(float *p, float *g, float *m, float *v, size_t n, int t, float lr,
                          float beta1, float beta2, float eps, float weight_decay)
{
    KPROF_BEGIN();
    /* The CUDA launcher computes these two on the host the same way. */
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    size_t i = 0;
    /* The same operations in the same order as the scalar loop below. */
    for (; i + 8 <= n; i += 8) {
        pp_v8f gi = v8_load(g + i), pi = v8_load(p + i);
        pp_v8f mi = beta1 * v8_load(m + i) + (1.0f - beta1) * gi;
        pp_v8f vi = beta2 * v8_load(v + i) + (1.0f - beta2) * gi * gi;
        v8_store(m + i, mi);
        v8_store(v + i, vi);
        pp_v8f mhat = mi / bc1, vhat = vi / bc2;
        v8_store(p + i, pi - lr * (mhat / (v8_sqrt(vhat) + eps) + weight_decay * pi));
        v8_store(g + i, v8_set(0.0f));
    }
    for (; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p[i]);
        g[i] = 0.0f;
    }
    KPROF_END(PP_K_OPTIM);
}

/* ------------------------------------------------------------------------ */
/* bf16                                                                      */

/* Round to nearest even on the bit pattern: add 0x7fff plus the lowest kept
 * bit, then truncate; a carry out of the mantissa bumps the exponent, which
 * is right (up to infinity for the largest floats). A NaN would round to
 * infinity or lose its payload, so it keeps its sign and top payload bits
 * with the quiet bit set. */
static uint16_t bf16_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((b >> 16) | 0x0040u);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

void pp_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_bits(src[i]);
}

/* bf16_bits on 8 lanes, widened back: the NaN lanes quietened, the rest
 * rounded to nearest even. */
static inline __attribute__((always_inline)) pp_v8f round_bf16_8(pp_v8f f)
{
    pp_v8u b = (pp_v8u)f;
    pp_v8i nan = (pp_v8i)(b & 0x7fffffffu) > 0x7f800000;
    pp_v8u r = ((b + 0x7fffu + ((b >> 16) & 1u)) >> 16) << 16;
    pp_v8u q = ((b >> 16) | 0x0040u) << 16;
    return (pp_v8f)(((pp_v8u)nan & q) | (~(pp_v8u)nan & r));
}

PP_HOT void pp_round_bf16(const float *src, float *dst, size_t n)
{
    KPROF_BEGIN();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        v8_store(dst + i, round_bf16_8(v8_load(src + i)));
    for (; i < n; i++) {
        uint32_t b = (uint32_t)bf16_bits(src[i]) << 16;
        memcpy(&dst[i], &b, sizeof b);
    }
    KPROF_END(PP_K_BF16);
}

void pp_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &b, sizeof b);
    }
}

/* ------------------------------------------------------------------------ */
/* The gpt model's kernels                                                   */

void pp_embedding_pos_forward(const int32_t *tokens, int B, int T, const float *wte,
                              const float *wpe, int C, float *out)
{
    KPROF_BEGIN();
    size_t c = (size_t)C;
    for (int b = 0; b < B; b++) {
        const int32_t *win = tokens + (size_t)b * (T + 1);
        for (int t = 0; t < T; t++) {
            const float *e = wte + (size_t)win[t] * c, *p = wpe + (size_t)t * c;
            float *o = out + ((size_t)b * T + t) * c;
            size_t i = 0;
            for (; i + 8 <= c; i += 8)
                v8_store(o + i, v8_load(e + i) + v8_load(p + i));
            for (; i < c; i++)
                o[i] = e[i] + p[i];
        }
    }
    KPROF_END(PP_K_EMBED);
}

void pp_embedding_pos_backward(const int32_t *tokens, int B, int T, const float *dout, int C,
                               float *dwte, float *dwpe)
{
    KPROF_BEGIN();
    size_t c = (size_t)C;
    for (int b = 0; b < B; b++) {
        const int32_t *win = tokens + (size_t)b * (T + 1);
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * c;
            add_into(dwte + (size_t)win[t] * c, d, c);
            add_into(dwpe + (size_t)t * c, d, c);
        }
    }
    KPROF_END(PP_K_EMBED);
}

/* Attention. For sample b, head h: q, k, v are the [T][hs] slices of qkv
 * with row stride 3C at columns h*hs, C + h*hs and 2C + h*hs; out's slice
 * has row stride C. A block is query rows r0..r1-1; its keys are 0..r1-1
 * (causal: row i sees keys 0..i, the rest of the block's columns masked). */

PP_HOT void pp_attention_forward(const float *qkv, float *out, float *lse, int B, int T, int C,
                                 int NH, int rows, float *scratch, int bf16)
{
    KPROF_BEGIN();
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C, *v = q + 2 * C;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;
            float *l = lse + ((size_t)b * NH + h) * T;
            for (int r0 = 0; r0 < T; r0 += rows) {
                int r1 = r0 + rows < T ? r0 + rows : T, R = r1 - r0, nk = r1;
                float *S = scratch; /* [R][nk] */
                pp_gemm_ld(0, 1, R, nk, hs, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, S, nk);
                for (int i = 0; i < R; i++) {
                    float *s = S + (size_t)i * nk;
                    int n = r0 + i + 1; /* keys 0..r0+i */
                    float max = row_max(s, n);
                    double sum = exp_shift(s, s, n, max); /* vmath.h's exp, sum in double */
                    scale_row(s, n, (float)(1.0 / sum));
                    for (int j = n; j < nk; j++)
                        s[j] = 0.0f;
                    l[r0 + i] = max + (float)log(sum);
                }
                if (bf16)
                    pp_round_bf16(S, S, (size_t)R * nk);
                pp_gemm_ld(0, 0, R, hs, nk, 1.0f, S, nk, v, C3, 0.0f, o + (size_t)r0 * C, C);
            }
        }
    KPROF_END(PP_K_ATTN);
}

PP_HOT void pp_attention_backward(const float *qkv, const float *out, const float *dout,
                                  const float *lse, float *dqkv, int B, int T, int C, int NH,
                                  int rows, float *scratch, int bf16)
{
    KPROF_BEGIN();
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    memset(dqkv, 0, (size_t)B * T * C3 * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            size_t ooff = (size_t)b * T * C + (size_t)h * hs;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *o = out + ooff, *dO = dout + ooff;
            const float *l = lse + ((size_t)b * NH + h) * T;
            for (int r0 = 0; r0 < T; r0 += rows) {
                int r1 = r0 + rows < T ? r0 + rows : T, R = r1 - r0, nk = r1;
                float *P = scratch, *dP = scratch + (size_t)R * nk;
                float *D = dP + (size_t)R * nk;
                /* P, recomputed from the forward's lse */
                pp_gemm_ld(0, 1, R, nk, hs, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, P, nk);
                for (int i = 0; i < R; i++) {
                    float *p = P + (size_t)i * nk;
                    int n = r0 + i + 1;
                    float li = l[r0 + i];
                    int j = 0;
                    for (; j + 8 <= n; j += 8)
                        v8_store(p + j, v8_exp(v8_load(p + j) - li));
                    if (j < n)
                        v8_store_part(p + j,
                                      v8_exp(v8_load_part(p + j, (size_t)(n - j), 0.0f) - li),
                                      (size_t)(n - j));
                    for (j = n; j < nk; j++)
                        p[j] = 0.0f;
                    const float *oi = o + (size_t)(r0 + i) * C, *di = dO + (size_t)(r0 + i) * C;
                    double d = 0.0;
                    for (int c = 0; c < hs; c++)
                        d += (double)oi[c] * di[c];
                    D[i] = (float)d;
                }
                /* dP = dout v^T */
                pp_gemm_ld(0, 1, R, nk, hs, 1.0f, dO + (size_t)r0 * C, C, v, C3, 0.0f, dP, nk);
                if (bf16)
                    pp_round_bf16(P, P, (size_t)R * nk);
                /* dv += P^T dout (before P becomes dS) */
                pp_gemm_ld(1, 0, nk, hs, R, 1.0f, P, nk, dO + (size_t)r0 * C, C, 1.0f, dv, C3);
                /* dS = P o (dP - D_i), into dP */
                for (int i = 0; i < R; i++) {
                    const float *p = P + (size_t)i * nk;
                    float *ds = dP + (size_t)i * nk;
                    int j = 0;
                    for (; j + 8 <= nk; j += 8)
                        v8_store(ds + j, v8_load(p + j) * (v8_load(ds + j) - D[i]));
                    for (; j < nk; j++)
                        ds[j] = p[j] * (ds[j] - D[i]);
                }
                if (bf16)
                    pp_round_bf16(dP, dP, (size_t)R * nk);
                /* dq = dS k * scale (the block's rows, written once) */
                pp_gemm_ld(0, 0, R, hs, nk, scale, dP, nk, k, C3, 0.0f, dq + (size_t)r0 * C3, C3);
                /* dk += dS^T q * scale */
                pp_gemm_ld(1, 0, nk, hs, R, scale, dP, nk, q + (size_t)r0 * C3, C3, 1.0f, dk, C3);
            }
        }
    KPROF_END(PP_K_ATTN);
}

void pp_attention_forward_ref(const float *qkv, float *out, float *lse, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs);
    double *s = malloc((size_t)T * sizeof *s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *qi = qkv + ((size_t)b * T + i) * C3 + h * hs;
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = qkv + ((size_t)b * T + j) * C3 + C + h * hs;
                    double d = 0.0;
                    for (int c = 0; c < hs; c++)
                        d += (double)qi[c] * kj[c];
                    s[j] = d * scale;
                    if (s[j] > max)
                        max = s[j];
                }
                for (int j = 0; j <= i; j++)
                    sum += exp(s[j] - max);
                if (lse)
                    lse[((size_t)b * NH + h) * T + i] = (float)(max + log(sum));
                float *oi = out + ((size_t)b * T + i) * C + h * hs;
                for (int c = 0; c < hs; c++) {
                    double acc = 0.0;
                    for (int j = 0; j <= i; j++)
                        acc += exp(s[j] - max) / sum *
                               qkv[((size_t)b * T + j) * C3 + 2 * C + h * hs + c];
                    oi[c] = (float)acc;
                }
            }
    free(s);
}

/* Straight from the definition: P = softmax(S), dv_j = sum_i P_ij do_i,
 * dP_ij = do_i . v_j, dS_ij = P_ij (dP_ij - sum_l P_il dP_il),
 * dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i. */
void pp_attention_backward_ref(const float *qkv, const float *dout, float *dqkv, int B, int T,
                               int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs);
    double *P = malloc((size_t)T * T * sizeof *P), *dS = malloc((size_t)T * T * sizeof *dS);
    memset(dqkv, 0, (size_t)B * T * C3 * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *base = qkv + (size_t)b * T * C3 + h * hs;
            float *dbase = dqkv + (size_t)b * T * C3 + h * hs;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            for (int i = 0; i < T; i++) {
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    double d = 0.0;
                    for (int c = 0; c < hs; c++)
                        d += (double)base[(size_t)i * C3 + c] * base[(size_t)j * C3 + C + c];
                    P[(size_t)i * T + j] = d * scale;
                    if (d * scale > max)
                        max = d * scale;
                }
                for (int j = 0; j <= i; j++)
                    sum += exp(P[(size_t)i * T + j] - max);
                double dot = 0.0;
                for (int j = 0; j <= i; j++) {
                    double p = exp(P[(size_t)i * T + j] - max) / sum, dp = 0.0;
                    P[(size_t)i * T + j] = p;
                    for (int c = 0; c < hs; c++)
                        dp += (double)dO[(size_t)i * C + c] * base[(size_t)j * C3 + 2 * C + c];
                    dS[(size_t)i * T + j] = dp;
                    dot += p * dp;
                }
                for (int j = 0; j <= i; j++)
                    dS[(size_t)i * T + j] = P[(size_t)i * T + j] * (dS[(size_t)i * T + j] - dot);
            }
            for (int i = 0; i < T; i++)
                for (int c = 0; c < hs; c++) {
                    double dq = 0.0, dk = 0.0, dv = 0.0;
                    for (int j = 0; j <= i; j++)
                        dq += dS[(size_t)i * T + j] * base[(size_t)j * C3 + C + c];
                    for (int j = i; j < T; j++) { /* i as a key */
                        dk += dS[(size_t)j * T + i] * base[(size_t)j * C3 + c];
                        dv += P[(size_t)j * T + i] * dO[(size_t)j * C + c];
                    }
                    dbase[(size_t)i * C3 + c] = (float)(dq * scale);
                    dbase[(size_t)i * C3 + C + c] = (float)(dk * scale);
                    dbase[(size_t)i * C3 + 2 * C + c] = (float)dv;
                }
        }
    free(P);
    free(dS);
}
